"""`harness nightly`: the matrix file, the deflake classes, the JUnit XML
(parsed back and held to the JUnit XSD's shape), the trend page's
regressions from hand-made summary.json files of several nights, and one
real, small matrix on 3 local nodes: a safe run, then a night where the same
test runs with a planted bug (flagged on the trend page) and a `kill -9` of
the nightly process in the middle of its next run."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from core.errors import UserError
from core.files import write_whole
from core.waiting import wait_for
from harness.campaign import matrix as mx, subrun, trends
from harness.campaign.subrun import Outcome
from harness.run import spec as specs
from harness.run.spec import build, load_file
from harness.serve import index
from infra import state as st
from infra.clean import find_cluster_ids
from tests.support import REPO, harness


def att(status: str, **kw) -> mx.Attempt:
    verdict = {"pass": "valid", "fail": "invalid", "hang": "valid"}.get(status, "could not run")
    return mx.Attempt(status=status, verdict=verdict, met=status == "pass", **kw)


# -- deflake


@pytest.mark.parametrize("statuses,deflake,rerun_after,outcome", [
    (["pass"], 3, [False], mx.PASS),
    (["fail"], 0, [False], mx.FAIL),
    (["fail", "fail", "fail"], 2, [True, True, False], mx.FAIL),  # the failure came back every time
    (["fail", "pass"], 2, [True, False], mx.FLAKY),  # it did not come back: no more re-runs
    (["fail", "fail", "pass"], 3, [True, True, False], mx.FLAKY),
    (["hang", "hang"], 1, [True, False], mx.HANG),
    (["hang", "pass"], 1, [True, False], mx.FLAKY),
    (["error"], 3, [False], mx.ERROR),  # a run that could not run is not a verdict: not re-run
    (["fail", "error", "fail"], 2, [True, True, False], mx.FAIL),  # an error re-run confirms nothing, clears nothing
    (["interrupted"], 3, [False], mx.INTERRUPTED),
    (["fail", "interrupted"], 3, [True, False], mx.FAIL),
])
def test_deflake_reruns_and_classes(statuses, deflake, rerun_after, outcome):
    attempts = [att(s) for s in statuses]
    assert [mx.needs_rerun(attempts[:i + 1], deflake) for i in range(len(attempts))] == rerun_after
    assert mx.classify(attempts) == outcome


def results_with(anomalies: dict, valid: bool, story: str | None = None, liveness: dict | None = None) -> dict:
    """A results.json as the checker writes it, as far as the nightly reads it."""
    names = ["lost-write", "duplicate", "inconsistent-offset"]
    r = {"valid": valid,
         "anomalies": {n: {"count": anomalies.get(n, 0), "error": bool(anomalies.get(n)), "examples": []}
                       for n in names},
         "counts": {"sends": {"ok": 900, "fail": 3, "info": 1}, "polls": {"ok": 50}, "records_read": 900},
         "stats": {"throughput": [{"second": s, "f": "send", "type": "ok", "count": 300} for s in range(3)]}}
    if story:
        r["explanations"] = [{"anomaly": next(iter(anomalies)), "summary": story + "\nmore lines"}]
    if liveness is not None:
        r["liveness"] = liveness
    return r


def outcome(results: dict | None, verdict: str = "invalid", problem: str | None = None) -> Outcome:
    return Outcome(argv=["x"], status={"valid": 0, "invalid": 1}.get(verdict, 2), verdict=verdict, seconds=42.0,
                   log="/tmp/x.log", run_dir="/nonexistent/run", results=results, problem=problem)


def test_an_attempt_reads_verdict_top_anomaly_throughput_and_liveness():
    r = results_with({"duplicate": 7}, False, story="value 12 appended twice <b>by the leader</b>")
    a = mx.attempt(outcome(r), {"valid": False, "duplicate": "present"})
    assert (a.status, a.met, a.counts, a.top_count) == ("pass", True, {"duplicate": 7}, 7)
    assert a.top == "duplicate: value 12 appended twice <b>by the leader</b>"
    assert (a.sends_ok, a.acks_per_s, a.recovery_s) == (900, 300.0, None)
    safe = mx.attempt(outcome(r), {"valid": True})
    assert safe.status == "fail" and safe.misses == ["expected valid, got invalid"]
    hung = mx.attempt(outcome(results_with({}, True, liveness={"recovery_s": {"final": 41.5}, "verdict": "HANG",
                                                              "faults": [{"recovery_s": 3.0}]}), "valid"),
                      {"valid": True})
    assert (hung.status, hung.recovery_s, hung.recovery_per_fault_s) == ("hang", 41.5, [3.0])
    # As checkers/liveness.py writes it.
    assert mx.liveness({"liveness": {"verdict": "hang", "recovery_s": None, "faults": []}}) == (None, [], "HANG")
    assert mx.attempt(outcome(results_with({}, True, liveness={"recovery_s": 2.5}), "valid"),
                      {"valid": True}).recovery_s == 2.5
    err = mx.attempt(outcome(None, "could not run", "no ZooKeeper"), {"valid": True})
    assert (err.status, err.met, err.misses) == ("error", False, ["not carried out: no ZooKeeper"])


# -- JUnit


def record(label: str, outcome_: str, attempts: list[mx.Attempt], system: str = "own", seed: int = 1) -> mx.CellRecord:
    rec = mx.CellRecord(label=label, system=system, seed=seed, repeat=1, round=1, scenario=label,
                        expect={"valid": True}, kind="safe", limit_s=600, attempts=attempts)
    rec.outcome = outcome_
    return rec


def check_junit(text: str) -> ET.Element:
    """Parses the file and holds it to the common JUnit XSD's shape (testsuites >
    testsuite > testcase > at most one of failure/error/skipped, system-out/err);
    counts agree. The testsuite."""
    root = ET.fromstring(text.encode())
    assert root.tag == "testsuites"
    suites = list(root)
    assert [s.tag for s in suites] == ["testsuite"]
    suite = suites[0]
    for attr in ("name", "tests", "failures", "errors", "skipped", "time", "timestamp", "hostname"):
        assert attr in suite.attrib, attr
    cases = suite.findall("testcase")
    assert all(c.tag in ("testcase", "properties", "system-out", "system-err") for c in suite)
    assert int(suite.get("tests")) == len(cases)
    float(suite.get("time"))
    time.strptime(suite.get("timestamp"), "%Y-%m-%dT%H:%M:%S")  # xs:dateTime without a zone, as the XSD has it
    kinds = {"failure": 0, "error": 0, "skipped": 0}
    for c in cases:
        assert c.get("name") and c.get("classname") and float(c.get("time")) >= 0
        children = [x.tag for x in c]
        assert set(children) <= {"failure", "error", "skipped", "system-out", "system-err"}, children
        verdicts = [t for t in children if t in kinds]
        assert len(verdicts) <= 1, children
        for t in verdicts:
            kinds[t] += 1
            if t != "skipped":
                assert c.find(t).get("message") and c.find(t).get("type")
    assert (int(suite.get("failures")), int(suite.get("errors")), int(suite.get("skipped"))) == \
        (kinds["failure"], kinds["error"], kinds["skipped"])
    return suite


def test_junit_one_testcase_per_run_failure_says_verdict_and_story(tmp_path):
    top = "duplicate: value 12 appended twice & acknowledged <twice>"
    records = [
        record("own-safe", mx.PASS, [att("pass", seconds=10)]),
        record("own-planted", mx.FAIL, [att("fail", seconds=20, top=top, top_count=7,
                                            misses=["expected valid, got invalid"]), att("fail", seconds=21)]),
        record("own-flaky", mx.FLAKY, [att("fail", seconds=5), att("pass", seconds=6)]),
        record("kafka-x", mx.ERROR, [att("error", problem="cannot start ZooKeeper")], system="kafka"),
        record("own-stopped", mx.INTERRUPTED, [att("interrupted", problem="interrupted")]),
    ]
    path = tmp_path / "junit.xml"
    write_whole(path, mx.junit("smoke", records, "2026-11-23T01:00:00Z"))
    assert not list(tmp_path.glob(".*.tmp"))
    suite = check_junit(path.read_text())
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["own-safe seed 1", "own-planted seed 1", "own-flaky seed 1", "kafka-x seed 1",
                           "own-stopped seed 1"]
    failure = cases["own-planted seed 1"].find("failure")
    assert failure.get("type") == "FAIL"
    assert failure.get("message") == ("FAIL: INVALID (expected valid, got invalid); top anomaly duplicate (7 found): "
                                      "value 12 appended twice & acknowledged <twice>")
    assert "re-run 1: fail" in failure.text
    assert cases["own-flaky seed 1"].find("failure") is None and "FLAKY" in cases["own-flaky seed 1"].find("system-out").text
    assert cases["kafka-x seed 1"].find("error").get("message") == "ERROR: could not run: cannot start ZooKeeper"
    assert cases["kafka-x seed 1"].get("classname") == "harness.kafka"
    assert cases["own-stopped seed 1"].find("skipped") is not None
    assert float(cases["own-planted seed 1"].get("time")) == 41.0


# -- the matrix file


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


def test_a_matrix_crosses_scenarios_specs_systems_seeds_and_repeats(tmp_path):
    m = mx.load(write(tmp_path, """
        name = "t"
        seeds = [1, 2]
        [set]
        time-limit = 20.0
        [[run]]
        scenarios = ["own-safe-one-fault", "own-bug-no-dedup"]
        repeats = 2
        [[run]]
        name = "pause-idem"
        systems = ["own", "kafka"]
        seeds = [5]
        limit-s = 300
        [run.spec]
        nodes = 3
        nemesis = ["pause"]
        idempotent = true
        [run.spec.producer]
        "request.timeout.ms" = 2000
    """))
    assert m.name == "t" and len(m.cells) == 2 * 2 * 2 + 2
    keys = [c.key for c in m.cells]
    assert keys[:4] == ["own-safe-one-fault seed 1", "own-safe-one-fault seed 1 repeat 2",
                        "own-safe-one-fault seed 2", "own-safe-one-fault seed 2 repeat 2"]
    assert keys[-2:] == ["pause-idem-own seed 5", "pause-idem-kafka seed 5"]
    dedup = next(c for c in m.cells if c.label == "own-bug-no-dedup")
    assert dedup.kind == "unsafe" and dedup.expect == {"valid": False, "duplicate": "present"}
    assert dedup.values["time_limit"] == 20.0 and dedup.limit_s == 20.0 + 20.0 + mx.EXTRA_S
    inline = m.cells[-1]
    assert inline.system == "kafka" and inline.kind == "safe" and inline.limit_s == 300  # expected valid by default
    # The spec file the child runs is the same spec.
    for cell in (dedup, inline):
        path = tmp_path / f"{cell.label}.toml"
        path.write_text(specs.spec_file(cell.values))
        assert build({**load_file(str(path)), "seed": 3}) == build({**cell.values, "seed": 3})
    assert mx.load(write(tmp_path, '[[run]]\nscenario = "own-power-loss"'), repeat=3).cells[2].key == \
        "own-power-loss seed 1 repeat 3"


def test_kafka_runs_are_crossed_with_versions_and_4x_runs_in_kraft_mode(tmp_path):
    m = mx.load(write(tmp_path, """
        [[run]]
        scenarios = ["kafka-safe-one-fault", "own-safe-one-fault"]
        versions = ["3.9.2", "4.4.0"]
        [[run]]
        name = "pause"
        systems = ["own", "kafka"]
        versions = ["4.1.2"]
        [run.spec]
        nemesis = ["pause"]
    """))
    got = [(c.label, c.values.get("kafka_version"), c.values.get("kafka_mode")) for c in m.cells]
    assert got == [("kafka-safe-one-fault-kafka-3.9.2", "3.9.2", None),
                   ("kafka-safe-one-fault-kafka-4.4.0", "4.4.0", "kraft"),
                   ("own-safe-one-fault", None, None),  # the own broker has no versions to cross
                   ("pause-own", None, None), ("pause-kafka-4.1.2", "4.1.2", "kraft")]
    assert build({**m.cells[1].values, "seed": 1}).system_options["kafka_mode"] == "kraft"


@pytest.mark.parametrize("text,words", [
    ("", "at least one [[run]]"),
    ("[[run]]\nscenario = 'kafka-safe-one-fault'\nversions = '4.4.0'", "versions: expected a list"),
    ("[[run]]\nscenario = 'kafka-safe-one-fault'\nversions = ['9.9.9']", "unknown Kafka version"),
    ("bogus = 1\n[[run]]\nscenario = 'own-power-loss'", "unknown key 'bogus'"),
    ("[[run]]\nscenario = 'no-such'", "no such scenario"),
    ("[[run]]\nscenario = 'own-power-loss'\nname = 'x'\n[run.spec]\nnodes = 3", "one of them"),
    ("[[run]]\n[run.spec]\nnodes = 3", "needs a name"),
    ("[[run]]\nname = 'x'\n[run.spec]\nnodes = 0", "--nodes 0"),
    ("[[run]]\nname = 'x'\n[run.spec]\nwhatever = 0", "unknown setting 'whatever'"),
    ("[[run]]\nscenario = 'own-power-loss'\nseeds = [1, -1]", "non-negative"),
    ("[[run]]\nscenario = 'own-power-loss'\n[[run]]\nscenario = 'own-power-loss'", "listed twice"),
    ("[[run]]\nscenario = 'own-bug-no-dedup'\nsystems = ['kafka']", "needs --system own"),
    ("[[run", "not valid TOML"),
])
def test_a_bad_matrix_is_one_line(tmp_path, text, words):
    with pytest.raises(UserError) as e:
        mx.load(write(tmp_path, text))
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("argv,words", [
    (["--deflake", "-1"], "--deflake -1"),
    (["--rounds", "0"], "--rounds 0"),
    (["--night", "../x"], "--night"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_flags_get_one_line_and_exit_2(tmp_path, argv, words):
    matrix = write(tmp_path, '[[run]]\nscenario = "own-power-loss"\n')
    proc = harness("nightly", str(matrix), "--results", str(tmp_path / "r"), *argv, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
    assert not (tmp_path / "r" / "nightly").exists() or not list((tmp_path / "r" / "nightly").iterdir())


# -- trends


def night(results: Path, name: str, started: str, runs: list[dict]) -> None:
    d = results / "nightly" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps({"suite": "t", "night": name, "started": started, "runs": runs,
                                                "planned": len(runs), "complete": True}))


def run_row(label: str, outcome_: str, kind: str = "safe", seconds: float = 60.0, acks: float = 400.0) -> dict:
    met = outcome_ == mx.PASS
    verdict = ("valid" if met else "invalid") if kind == "safe" else ("invalid" if met else "valid")
    if outcome_ == mx.ERROR:
        verdict = "could not run"
    return {"label": label, "system": "own", "seed": 1, "kind": kind, "outcome": outcome_, "met": met,
            "verdict": verdict, "seconds": seconds, "acks_per_s": acks, "recovery_s": None,
            "expect": {"valid": kind == "safe"}, "attempts": []}


def test_trends_flag_a_newly_failing_scenario_and_a_detection_rate_that_fell(tmp_path):
    night(tmp_path, "n1", "2026-11-20T01:00:00Z",
          [run_row("safe-a", mx.PASS), run_row("safe-b", mx.FAIL), run_row("unsafe-c", mx.PASS, "unsafe"),
           run_row("unsafe-c", mx.PASS, "unsafe"), run_row("safe-d", mx.PASS)])
    night(tmp_path, "n2", "2026-11-21T01:00:00Z",
          [run_row("safe-a", mx.PASS), run_row("safe-b", mx.PASS), run_row("unsafe-c", mx.PASS, "unsafe"),
           run_row("unsafe-c", mx.FAIL, "unsafe"), run_row("safe-d", mx.ERROR)])
    ns = trends.nights(tmp_path)
    assert [n.name for n in ns] == ["n1", "n2"]
    got = {(g.label, g.why.split(":")[0].split(";")[0]) for g in trends.regressions(ns)}
    # unsafe-c: detected in every run of n1, missed once tonight: both rules; safe-b passes tonight: no news.
    assert got == {("unsafe-c", "detection rate fell"), ("unsafe-c", "met its expectation in the last 1 night(s)")}
    night(tmp_path, "n3", "2026-11-22T01:00:00Z",
          [run_row("safe-a", mx.FAIL), run_row("safe-b", mx.FAIL), run_row("unsafe-c", mx.PASS, "unsafe"),
           run_row("unsafe-c", mx.PASS, "unsafe"), run_row("safe-d", mx.FLAKY)])
    ns = trends.nights(tmp_path)
    found = trends.regressions(ns)
    # safe-a met its expectation in every night before; safe-b failed in n1 (within the lookback):
    # not a regression; safe-d was FLAKY, not FAIL; unsafe-c detected in 2/2.
    assert [(g.label, g.why) for g in found] == [
        ("safe-a", "met its expectation in the last 2 night(s); tonight 1 of 1 run(s) FAIL")]
    page = trends.trends_html(ns)
    assert page.count("<li class='regression'>") == 1 and page.count(">REGRESSION<") == 1  # listed, row marked
    assert "href='nightly/n1/nightly.html'" in page and "50% (1/2)" in page and "100% (1/1)" in page
    assert trends.regressions(ns[:1]) == []


def test_the_night_page_escapes_and_links_reports(tmp_path):
    run_dir = tmp_path / "nightly" / "n1" / "runs" / "x" / "t1"
    run_dir.mkdir(parents=True)
    (run_dir / "report.html").write_text("<p>report</p>")
    row = {**run_row("safe-a", mx.FAIL), "run_dir": str(run_dir), "top_anomaly": "duplicate: <script>x</script>",
           "top_count": 3}
    night(tmp_path, "n1", "2026-11-20T01:00:00Z", [row])
    page_path, trends_path = trends.write_pages(tmp_path, tmp_path / "nightly" / "n1")
    page = page_path.read_text()
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "href='runs/x/t1/report.html'" in page and "href='../../trends.html'" in page
    assert trends_path == tmp_path / "trends.html" and trends_path.is_file()
    served = index(tmp_path, {})  # `harness serve`'s index links the nightly pages
    assert "href='/trends.html'" in served and "href='/nightly/n1/nightly.html'" in served
    assert "trends.html" not in index(tmp_path / "nightly", {})


# -- one real, small matrix


TINY = """
name = "tiny"
seeds = [7]
limit-s = 600

[[run]]
name = "own-tiny"
[run.spec]
system = "own"
nodes = 3
partitions = 3
idempotent = true
nemesis = ["pause"]
nemesis-targets = "leaders"
nemesis-interval = 4.0
time-limit = 16.0
final-time-limit = 20.0
rate = 1000.0
{planted}
[run.spec.producer]
"request.timeout.ms" = 2000
[run.spec.expect]
valid = true
"""


def nightly(results: Path, matrix: Path, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "nightly", str(matrix), "--results", str(results),
                             *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_real_nights_a_planted_regression_and_a_kill_9(tmp_path):
    results = tmp_path / "results"
    # Night 1: the safe spec, valid.
    safe = tmp_path / "safe.toml"
    safe.write_text(TINY.format(planted=""))
    proc = nightly(results, safe, "--night", "n1")
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out + err
    n1 = results / "nightly" / "n1"
    summary = json.loads((n1 / "summary.json").read_text())
    assert summary["complete"] and [r["outcome"] for r in summary["runs"]] == ["PASS"]
    row = summary["runs"][0]
    assert row["verdict"] == "valid" and row["met"] and row["sends_ok"] > 0 and row["seconds"] > 16
    assert (Path(row["run_dir"]) / "report.html").is_file()
    assert len(check_junit((n1 / "junit.xml").read_text()).findall("testcase")) == 1
    assert "href='runs/own-tiny/" in (n1 / "nightly.html").read_text()
    # The night's one check service checked the run; the run started none of its own.
    assert f"checked {row['run_dir']}" in (n1 / "logs" / "check-service.log").read_text()
    assert not (Path(row["run_dir"]) / "check-service.log").exists()

    # Night 2, with --deflake 1: the same test with the planted duplicate bug (no-dedup), re-run once, then a
    # second run killed with -9.
    planted = tmp_path / "planted.toml"
    planted.write_text(TINY.format(planted='debug-bug = ["no-dedup"]') + '\n[[run]]\nscenario = "own-power-loss"\n')
    proc = nightly(results, planted, "--night", "n2", "--deflake", "1")
    n2 = results / "nightly" / "n2"

    def second_run_started():
        try:
            current = json.loads((n2 / "current.json").read_text())
        except (OSError, ValueError):
            return None
        if not current["test"].startswith("own-power-loss"):
            return None
        owned = [c for c in st.list_cluster_ids() if (st.read_state(c) or {}).get("owner_pid") == current["pid"]]
        return (current["pid"], owned[0]) if owned else None

    child, cluster = wait_for(second_run_started, timeout=900, interval=1, what="the second run's cluster")
    time.sleep(5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    suite = check_junit((n2 / "junit.xml").read_text())  # the runs so far, a valid file
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["own-tiny seed 7"]
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("message").startswith("FAIL: INVALID (expected valid, got invalid); "
                                                                      "top anomaly duplicate (")
    summary = json.loads((n2 / "summary.json").read_text())
    assert not summary["complete"] and summary["runs"][0]["outcome"] == "FAIL"
    # --deflake 1: the duplicates came back in the re-run, a steady failure.
    assert [a["status"] for a in summary["runs"][0]["attempts"]] == ["fail", "fail"]
    # The night's check service died with it (its parent's death signal too).
    service_pid = re.search(r"\(pid (\d+)\)", (n2 / "logs" / "check-service.log").read_text())[1]
    wait_for(lambda: not Path(f"/proc/{service_pid}").exists(), timeout=60, interval=1, what="the check service to end")
    # The orphaned run was told (SIGTERM, its parent's death signal) to heal and tear down.
    wait_for(lambda: not Path(f"/proc/{child}").exists(), timeout=300, interval=1, what="the orphaned run to end")
    clean = harness("clean", "--cluster", cluster, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert cluster not in find_cluster_ids()  # state, namespaces, links, rules, tagged daemons: none left

    # The trend page across both nights flags the planted regression.
    trends.write_pages(results, n2)
    page = (results / "trends.html").read_text()
    assert "regressions tonight" in page and "own-tiny (own): met its expectation in the last 1 night(s)" in page


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_deflake_calls_a_bug_that_shows_in_some_runs_flaky(tmp_path):
    """nightly/deflake-demo.toml: a safe spec on a broker that loses one
    acknowledged batch per broker in about half of all clusters (the planted
    forget-acked-sometimes, its coin flipped from the random cluster id, not
    the seed). --until-fail runs it until a run fails; --deflake 12 re-runs that
    cell until a run passes: FLAKY. A steady failure under --deflake is FAIL
    (night 2 of test_two_real_nights_...). Wrongly FAIL only if 12 re-runs in a
    row come up heads: 1 in 4096 (8 did once, in CI: 1 in 256 was too often).
    Each broker logs its cluster id, whose hash is the coin (docs/broker.md)."""
    results = tmp_path / "results"
    proc = nightly(results, REPO / "nightly" / "deflake-demo.toml", "--night", "demo", "--until-fail", "--deflake", "12")
    out, err = proc.communicate(timeout=1700)
    assert proc.returncode == 0, out + err  # FLAKY exits 0
    summary = json.loads((results / "nightly" / "demo" / "summary.json").read_text())
    outcomes = [r["outcome"] for r in summary["runs"]]
    assert outcomes[:-1] == ["PASS"] * (len(outcomes) - 1) and outcomes[-1] == "FLAKY", outcomes
    flaky = summary["runs"][-1]
    first, *reruns = flaky["attempts"]
    assert first["status"] == "fail" and first["verdict"] == "invalid"
    assert first["counts"].get("lost-write", 0) + first["counts"].get("lost-acked", 0) >= 1, first["counts"]
    assert [a["status"] for a in reruns][-1] == "pass" and all(a["status"] == "fail" for a in reruns[:-1])
    # The failing run's brokers said what they did; the passing run's did not (its coin came up tails).
    said = "planted bug forget-acked-sometimes: acknowledging"
    assert any(said in f.read_text(errors="replace") for f in Path(first["run_dir"]).rglob("*.log"))
    assert not any(said in f.read_text(errors="replace") for f in Path(reruns[-1]["run_dir"]).rglob("*.log"))
    case = check_junit((results / "nightly" / "demo" / "junit.xml").read_text()).findall("testcase")[-1]
    assert case.find("failure") is None and "FLAKY" in case.find("system-out").text


def test_a_run_that_cannot_start_is_recorded_with_its_reason(tmp_path):
    """The child exits 2 at once (a bad spec; nothing is provisioned): the reason is its error line."""
    o = subrun.run(["run", "--nodes", "0", "--results", str(tmp_path / "r")], tmp_path / "logs" / "x.log",
                   limit_s=120)
    assert (o.status, o.verdict, o.timed_out, o.run_dir) == (2, subrun.NOT_RUN, False, None)
    assert o.problem == "--nodes 0: expected 1 to 64", o.problem
    a = mx.attempt(o, {"valid": True})
    assert a.status == "error" and a.misses == ["not carried out: --nodes 0: expected 1 to 64"]
