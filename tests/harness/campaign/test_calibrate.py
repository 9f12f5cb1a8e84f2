"""`harness calibrate`: bad input is one line and exit 2; a real one-run
calibration records its run, writes the table and resumes without running
it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import UserError
from harness.campaign import subrun
from harness.campaign.calibrate import (RunRecord, bugs_of, chosen_scenarios, mutation_table, seeds_for,
                                        system_label, table)
from harness.cli import build_parser
from harness.run import scenarios
from harness.run import spec as specs
from harness.run.spec import from_args
from tests.support import harness


@pytest.mark.parametrize("argv,words", [
    (["--runs", "0"], "--runs 0: expected 1 or more"),
    (["--runs", "many"], "invalid int value"),
    (["--seeds", "-3"], "--seeds: expected non-negative"),
    (["--seeds", "4", "4"], "each seed once"),
    (["--runs", "2", "--seeds", "1", "2", "3"], "give one or the other"),
    (["--scenario", "no-such-scenario"], "no such scenario"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_flags_get_one_line_and_exit_2(tmp_path, argv, words):
    proc = harness("calibrate", "--out", str(tmp_path / "cal"), *argv, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("harness: error: ") and words in lines[0], lines[0]
    assert not (tmp_path / "cal" / "calibration.json").exists()


def test_a_record_file_that_is_not_one_is_refused(tmp_path):
    (tmp_path / "calibration.json").write_text("{not json")
    proc = harness("calibrate", "--out", str(tmp_path), "--scenario", "own-power-loss", timeout=60)
    assert proc.returncode == 2 and "not a calibration record" in proc.stderr, proc.stderr
    assert (tmp_path / "calibration.json").read_text() == "{not json"  # left as it was


def test_seeds_and_the_table():
    assert seeds_for(None, None) == [1, 2, 3, 4, 5] and seeds_for(2, None) == [1, 2]
    assert seeds_for(None, [7, 3]) == [7, 3]
    with pytest.raises(UserError):
        seeds_for(0, None)
    runs = [RunRecord("s", "own", 1, {"valid": False}, "invalid", True, {"lost-write": 3}),
            RunRecord("s", "own", 2, {"valid": False}, "could not run", False, problem="no ZooKeeper"),
            RunRecord("s", "own", 3, {"valid": False}, "valid", False)]
    runs[0].commit, runs[1].commit, runs[2].commit, runs[2].dirty = "a" * 40, "a" * 40, "b" * 40, True
    row = table(runs).splitlines()[2]
    assert row == "| `s` | own | invalid | 3 (1 could not run) | 1/3 | 1, 2, 3 | lost-write (1) | aaaaaaa, bbbbbbb+ |"


def test_the_mutation_score_counts_a_bug_caught_beside_its_control():
    def rec(seed, met, control=False, counts=None):
        # A bug run meets its expectation when invalid, a control when valid.
        verdict = "valid" if met == control else "invalid"
        return RunRecord("own-bug-x", "own", seed, {"valid": control}, verdict, met, counts or {}, bugs=["x"],
                         control=control)
    runs = [rec(1, True, counts={"lost-write": 4}), rec(2, True, counts={"dirty-read": 1, "lost-write": 1}),
            rec(3, False), rec(1, True, control=True), rec(2, False, control=True, counts={"duplicate": 2})]
    assert mutation_table(runs).splitlines()[2] == \
        "| `x` | `own-bug-x` | 2 of 3 | 1 of 2 | dirty-read (1), lost-write (2) | ? |"
    assert [ln.split(" | ")[0] for ln in table(runs).splitlines()[2:]] == ["| `own-bug-x`", "| `own-bug-x (control)`"]
    assert mutation_table([r for r in runs if not r.control]).splitlines()[2].split(" | ")[3] == "not run"
    assert mutation_table([RunRecord("s", "own", 1, {"valid": True}, "valid", True)]) == ""


def test_the_mutants_are_the_scenarios_that_plant_bugs_and_each_has_a_control():
    mutants = chosen_scenarios(None, mutants=True)
    assert {s["name"] for s in mutants} >= {"own-bug-no-dedup", "own-bug-serve-above-hw", "own-bug-ignore-min-isr",
                                           "own-bug-early-isr-join", "own-bug-elect-any-replica"}
    assert all(bugs_of(s) for s in mutants) and all(s["system"] == "own" for s in mutants)
    for s in mutants:
        control = from_args(build_parser("run").parse_args(["run", "--scenario", s["name"], "--control"]))
        assert control.system_options["debug_bug"] == ()
        assert control.expect == (s["settings"].get("control_expect") or {"valid": True})
        assert control.test_name == f"{s['name']}-control" and bugs_of(s)[0] in control.description


@pytest.mark.integration
@pytest.mark.slow
def test_a_one_run_calibration_records_it_and_resumes(tmp_path):
    out = tmp_path / "cal"
    proc = harness("calibrate", "--runs", "1", "--scenario", "own-power-loss", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = json.loads((out / "calibration.json").read_text())["runs"]
    assert len(runs) == 1
    run = runs[0]
    assert run["scenario"] == "own-power-loss" and run["seed"] == 1 and run["system"] == "own"
    assert run["verdict"] in ("valid", "invalid"), run  # which one is what calibration measures
    assert run["met"] == (run["verdict"] == "invalid" and run["counts"].get("lost-write", 0) > 0)
    run_json = json.loads((Path(run["run_dir"]) / "run.json").read_text())
    assert run_json["seed"] == 1 and run_json["outcome"] == "completed"
    assert Path(run["run_dir"]).parent == out / "runs" / "own-power-loss"
    row = next(ln for ln in (out / "calibration.md").read_text().splitlines() if "own-power-loss" in ln)
    assert f"| {int(run['met'])}/1 | 1 |" in row and row in proc.stdout
    again = harness("calibrate", "--runs", "1", "--scenario", "own-power-loss", "--out", str(out), timeout=120)
    assert again.returncode == 0 and "resuming: 1 of 1 runs already recorded" in again.stderr, again.stderr
    assert len(json.loads((out / "calibration.json").read_text())["runs"]) == 1


def test_a_run_that_hung_but_lost_nothing_is_valid_not_invalid(tmp_path):
    """`harness run` exits 1 on a HANG as on an invalid verdict; the verdict
    recorded is the checker's (kafka-disk-corrupt-reads: valid, partition 1 hung)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = tmp_path / "run.log"
    log.write_text(f"run own-x: {run_dir} (seed 1)\n")
    for valid, want in ((True, "valid"), (False, "invalid")):
        (run_dir / "results.json").write_text(json.dumps({"valid": valid, "liveness": {"verdict": "hang"}}))
        o = subrun.outcome(["harness", "run"], 1, log, 12.0)
        assert (o.verdict, o.problem) == (want, None)
    (run_dir / "results.json").unlink()
    assert subrun.outcome(["harness", "run"], 1, log, 12.0).verdict == subrun.NOT_RUN


def test_the_tables_name_kafka_with_its_release():
    def label(name, **settings):
        s = scenarios.load(specs.scenario_file(name))
        return system_label({**s, "settings": {**s["settings"], **settings}})

    assert label("kafka4-txn-partitions") == "kafka 4.4.0"
    assert label("kafka-txn-partitions") == "kafka 3.9.2"
    assert label("kafka-txn-partitions", kafka_mode="kraft") == "kafka 3.9.2 KRaft"
    assert label("own-txn-partitions") == "own"
