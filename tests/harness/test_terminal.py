"""What a run shows on the terminal: no client-library chatter (it goes to
harness.log, counted), a status line, and an ending of verdict, top anomaly
and the report's path; `make run` takes a finding as the demo's success."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from checkers.summary import describe, top_anomaly, verdict_line
from tests.support import REPO

# What librdkafka's lines look like, printed by itself (`%4|1700000000.123|REQTMOUT|rdkafka#producer-1| ...`)
# or through Python's logging (`WARNING workloads.librdkafka: REQTMOUT [harness-p1] ...`).
CLIENT_LINE = re.compile(r"^%\d\||rdkafka|REQTMOUT|workloads\.librdkafka", re.IGNORECASE)


@pytest.mark.parametrize("status, make_status, says", [
    (0, 0, None),
    (1, 0, "the checker found anomalies"),
    (2, 2, "could not be carried out"),
    (3, 2, "could not be carried out"),  # make exits 2 whenever a recipe fails
])
def test_make_run_takes_a_finding_as_success(tmp_path, status, make_status, says):
    # A real make on the real Makefile, with `harness` replaced by a script
    # that exits as `harness run` would; setup is taken as done (-o).
    script = tmp_path / "harness"
    script.write_text(f"#!/bin/sh\necho \"harness $*\"\nexit {status}\n")
    script.chmod(0o755)
    proc = subprocess.run(["make", "-s", "-o", "setup", "run", f"HARNESS={script}"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == make_status, proc.stdout + proc.stderr
    assert "harness run --nemesis partition" in proc.stdout
    if says:
        assert says in proc.stdout + proc.stderr
    if status == 1:
        assert "Error" not in proc.stderr


def _results(**anomalies) -> dict:
    names = ("lost-write", "lost-acked", "duplicate", "unseen")
    out = {name: {"count": 0, "error": False, "examples": []} for name in names}
    out.update(anomalies)
    return {"valid": not any(a["error"] for a in out.values()), "anomalies": out}


DUP = {"count": 2, "error": True,
       "examples": [{"value": 7, "positions": [{"partition": 0, "offset": 3, "ack_index": 9},
                                               {"partition": 0, "offset": 5, "read_index": 12}]}]}
LOST = {"count": 1, "error": True,
        "examples": [{"value": 812, "partition": 1, "offset": 402, "ack_index": 9912, "max_read_offset": 977}]}


def test_the_top_anomaly_is_the_first_error_in_report_order():
    results = _results(duplicate=DUP, **{"lost-write": LOST})
    assert top_anomaly(results) == f"lost-write: {describe('lost-write', LOST['examples'][0])}"
    assert verdict_line(results) == "verdict: INVALID (lost-write, duplicate)"
    # Counted but not an error (an unseen value, an allowed anomaly): no top anomaly.
    assert top_anomaly(_results(unseen={**LOST, "error": False})) is None
    assert verdict_line(_results()) == "verdict: VALID"


def test_the_top_anomaly_is_told_by_its_story_when_there_is_one():
    story = {"anomaly": "duplicate", "summary": "value 7 appended twice by n2 (epoch 3)\nthen read at 5"}
    other = {"anomaly": "unseen", "summary": "not this one"}
    results = {**_results(duplicate=DUP), "explanations": [other, story]}
    assert top_anomaly(results) == "duplicate: value 7 appended twice by n2 (epoch 3)"
    # Stories of other anomalies only: the example's line.
    results = {**_results(duplicate=DUP), "explanations": [other]}
    assert top_anomaly(results) == f"duplicate: {describe('duplicate', DUP['examples'][0])}"


def _client_warnings_logged(run_dir: Path) -> int:
    lines = (run_dir / "harness.log").read_text().splitlines()
    return sum(1 for line in lines if re.match(r"\S+ \S+ (WARNING|ERROR|CRITICAL) workloads\.librdkafka", line))


@pytest.mark.integration
@pytest.mark.slow
def test_a_run_off_a_terminal_prints_no_client_chatter_and_ends_with_the_verdict(real_runs):
    _, plain, buggy = real_runs
    for r in (plain, buggy):
        err, out = r.proc.stderr, r.proc.stdout
        assert not [line for line in err.splitlines() if CLIENT_LINE.search(line)], err
        # Off a terminal the status is plain lines, with the faults in force.
        assert re.search(r"^  \[\s*\d+s / \d+s\] faults: .+ \| sends ok/fail/info \d+/\d+/\d+ \| polls ", err, re.M), err
        results = json.loads((r.dir / "results.json").read_text())
        lines = out.strip().splitlines()
        assert lines[-1] == f"report: {r.dir / 'report.html'}"
        top = top_anomaly(results)
        ending = [verdict_line(results)] + ([f"  {top}"] if top else [])
        assert lines[-1 - len(ending):-1] == ending, out
        assert sum(line.startswith("verdict: ") for line in lines) == 1
        assert r.proc.returncode == (0 if results["valid"] else 1)
        # The client library's warnings: in harness.log, counted on the terminal.
        logged = _client_warnings_logged(r.dir)
        said = re.search(r"^client library \(librdkafka\): (\d+) warnings?, in (\S+)$", out, re.M)
        if logged:
            assert said and int(said.group(1)) == logged and said.group(2) == str(r.dir / "harness.log"), out
        else:
            assert said is None, out
    # Brokers killed: their clients' reconnections are refused, and librdkafka says so (in harness.log).
    assert _client_warnings_logged(plain.dir) > 0
