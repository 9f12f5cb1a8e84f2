"""An explicit fault schedule in a spec, `harness replay` and `harness shrink`.

The schedule setting: validated with one-line errors, and a run.json's
schedule goes through a spec file back to the same steps. The shrink search
is a pure function of a spec and a replay function: its logic is tested
with deterministic functions standing for "does this spec fail"; the real
replays are tested by the integration test (a planted bug replayed twice).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.errors import UserError
from harness.campaign import shrink
from harness.run import spec as specs
from harness.run.spec import build, load_file
from nemesis.schedule import from_records, plan, to_records
from tests.support import harness

SCHEDULE = [
    {"delay": 3.0, "action": "start", "fault": "kill", "mode": "one", "picks": [1]},
    {"delay": 4.0, "action": "stop", "fault": "kill", "mode": "", "picks": []},
    {"delay": 5.0, "action": "start", "fault": "partition", "mode": "isolate-leader", "picks": [2, 0, 1],
     "partition": 2},
    {"delay": 6.0, "action": "stop", "fault": "partition", "mode": "", "picks": []},
]


AWAIT = {"delay": 0.0, "action": "await", "until": "isr-leader-only", "partition": 1, "timeout": 12.5}


def base(**changes) -> dict:
    return {"system": "own", "nodes": 3, "partitions": 3, "nemesis": ["kill", "partition"], "seed": 5,
            "time_limit": 40.0, "rate": 400.0, "schedule": [dict(s) for s in SCHEDULE], **changes}


@pytest.mark.parametrize("overlap", [False, True])
def test_a_run_json_schedule_goes_through_a_spec_file_to_the_same_steps(tmp_path, overlap):
    planned = plan(("partition", "kill", "pause"), "leaders", 5, 3.0, 60.0, seed=11, partitions=4, overlap=overlap)
    records = json.loads(json.dumps(to_records(planned)))  # as run.json holds them
    values = {"name": "t", "nodes": 5, "partitions": 4, "nemesis": ["partition", "kill", "pause"],
              "seed": 99, "schedule": records, "expect": {"valid": False}}
    path = tmp_path / "spec.toml"
    path.write_text(specs.spec_file(values, "a header\nof two lines"))
    assert path.read_text().startswith("# a header\n# of two lines\n")
    spec = build(load_file(str(path)))
    # The steps the runner takes from the spec: the planned ones, whatever the (other) seed plans.
    steps = from_records(spec.schedule, spec.nodes, spec.partitions)
    assert [(s.action, s.fault, s.mode, s.picks, s.extra) for s in steps] == \
           [(s.action, s.fault, s.mode, s.picks, s.extra) for s in planned]
    assert [s.delay for s in steps] == [round(s.delay, 3) for s in planned]
    assert to_records(steps) == records and spec.expect == {"valid": False}


def test_overlap_and_await_steps_and_the_overlap_setting_go_through_a_spec_file(tmp_path):
    overlapping = [SCHEDULE[0], SCHEDULE[2], AWAIT, SCHEDULE[1], SCHEDULE[3]]  # kill, partition, await, stops
    values = base(schedule=[dict(s) for s in overlapping], nemesis_overlap=True)
    text = specs.spec_file(values)
    assert "nemesis-overlap = true" in text and 'until = "isr-leader-only"' in text
    path = tmp_path / "spec.toml"
    path.write_text(text)
    spec = build(load_file(str(path)))
    assert spec.nemesis_overlap is True and spec.to_dict()["nemesis_overlap"] is True
    steps = from_records(spec.schedule, spec.nodes, spec.partitions)
    assert [(s.action, s.fault, s.until) for s in steps] == [
        ("start", "kill", ""), ("start", "partition", ""), ("await", "", "isr-leader-only"),
        ("stop", "kill", ""), ("stop", "partition", "")]
    assert to_records(steps) == [dict(s) if s["action"] != "stop" else {**s, "mode": "", "picks": []}
                                 for s in overlapping]
    # Off by default, and then not written.
    assert "nemesis-overlap" not in specs.spec_file(base()) and build(base()).nemesis_overlap is False
    with pytest.raises(UserError, match="--nemesis-overlap: expected true or false"):
        build(base(nemesis_overlap="yes"))


def test_a_schedule_alone_names_its_faults():
    spec = build({"nodes": 3, "schedule": SCHEDULE})
    assert spec.nemesis == ("kill", "partition")


@pytest.mark.parametrize("change,words", [
    ({"schedule": "kill"}, "schedule: expected a list of steps"),
    ({"schedule": [SCHEDULE[0], 7]}, "schedule step 2: expected a table"),
    ({"schedule": [dict(SCHEDULE[0], fault="quake")]}, "schedule step 1: fault 'quake'"),
    ({"schedule": [dict(SCHEDULE[0], action="begin")]}, "schedule step 1: action 'begin'"),
    ({"schedule": [dict(SCHEDULE[0], delay=-1)]}, "schedule step 1: delay -1"),
    ({"schedule": [dict(SCHEDULE[0], when=3)]}, "schedule step 1: unknown key 'when'"),
    ({"schedule": [dict(SCHEDULE[0], picks=[3])]}, "picks [3]: expected distinct node indexes 0 to 2 (--nodes 3)"),
    ({"schedule": [dict(SCHEDULE[0], mode="halves")]}, "mode 'halves': kill takes"),
    ({"schedule": [SCHEDULE[1]]}, "schedule step 1: stops kill, which is not in force (no fault in force)"),
    ({"schedule": [SCHEDULE[0], SCHEDULE[0]]}, "schedule step 2: starts kill, which is already in force"),
    ({"schedule": [SCHEDULE[0], SCHEDULE[2], SCHEDULE[1], SCHEDULE[1]]},
     "schedule step 4: stops kill, which is not in force (partition in force)"),
    ({"schedule": [dict(AWAIT, until="soon")]}, "schedule step 1: until 'soon': expected one of isr-leader-only"),
    ({"schedule": SCHEDULE[2:], "partitions": 2}, "partition 2: expected a topic partition 0 to 1"),
    ({"schedule": [dict(SCHEDULE[2], mode="halves", picks=[0, 1])]}, "a halves partition takes an order of all 3"),
    ({"nemesis": ["kill"]}, "schedule step 3: fault partition is not in --nemesis (kill)"),
])
def test_a_bad_schedule_is_one_line_naming_the_step(change, words):
    with pytest.raises(UserError) as e:
        build(base(**change))
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_bad_schedule_in_a_file_is_exit_2_and_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('nodes = 3\n[[schedule]]\ndelay = 1.0\naction = "start"\nfault = "kill"\nmode = "one"\n'
                    'picks = [4]\n')
    proc = harness("run", "--config", str(path), "--results", str(tmp_path / "r"), timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "schedule step 1: picks [4]" in lines[0], proc.stderr
    assert not (tmp_path / "r").exists()


# -- the search, with deterministic replay functions


def starts(values: dict) -> list[tuple]:
    """The faults a spec starts, and when (seconds into the fault phase)."""
    t, out = 0.0, []
    for s in values["schedule"]:
        t += s["delay"]
        if s["action"] == "start":
            out.append((s["fault"], tuple(s["picks"]), round(t, 3)))
    return out


def many_faults(n: int = 8) -> dict:
    schedule = []
    for i in range(n):
        schedule += [{"delay": 2.0, "action": "start", "fault": "kill", "mode": "one", "picks": [i % 5]},
                     {"delay": 3.0, "action": "stop", "fault": "kill", "mode": "", "picks": []}]
    return base(nodes=5, partitions=5, nemesis=["kill"], time_limit=60.0, rate=1000.0, schedule=schedule)


def test_the_search_keeps_the_fault_that_matters_and_drops_the_rest():
    original = many_faults()
    culprit = starts(original)[5]  # kill of node 5 (index 0 of picks: 0) at 27 s: the only one that fails

    def fails(values):
        build(values)  # every candidate is a spec the runner takes
        return culprit[:2] in [s[:2] for s in starts(values)]

    result = shrink.search(original, fails, k=2, n=3, budget=200)
    assert result.stop == "minimal" and (result.failed, result.replays) == (2, 2)
    assert [s[:2] for s in starts(result.values)] == [culprit[:2]]
    assert result.values["nodes"] == 3 or culprit[1][0] >= 3  # picks [0] fit 3 nodes: fewer nodes accepted
    assert result.values["partitions"] == 1 and result.values["rate"] < 1000.0
    assert result.values["time_limit"] < original["time_limit"]
    assert "drop faults 1-4 of 8" in result.changes  # ddmin's halves first
    # The fault the search kept kept its place in time until the lead-in was shortened, and is no longer.
    assert starts(result.values)[0][2] <= culprit[2]
    # A search that reached a fixed point tried every reduction of the result and rejected it.
    rejected = [t for t in result.trials if not t.accepted]
    assert rejected and all(t.failed == 0 and t.replays == 2 for t in rejected)  # 0 of 2: 2 of 3 out of reach


def test_the_budget_bounds_the_search_and_the_best_so_far_is_kept():
    calls = []

    def fails(values):
        calls.append(values)
        return True  # everything fails: every reduction is accepted

    result = shrink.search(many_faults(), fails, k=2, n=3, budget=5)
    assert len(calls) == 5 and result.used == 5 and result.stop == "budget"
    assert result.changes == ["drop faults 1-4 of 8", "drop faults 1-2 of 4"]  # two accepted, 2 replays each
    assert len(shrink.pairs(result.values["schedule"])) == 2


def test_k_of_n_counts_flaky_candidates():
    seen = {"n": 0}

    def fails(values):  # fails every other replay, whatever the spec
        seen["n"] += 1
        return seen["n"] % 2 == 1

    result = shrink.search(many_faults(2), fails, k=2, n=3, budget=6)
    # the first candidate: fail, pass, fail -> 2 of 3, accepted
    assert result.trials[0].accepted and (result.trials[0].failed, result.trials[0].replays) == (2, 3)
    strict = shrink.search(many_faults(2), lambda v: False, k=1, n=2, budget=100)
    assert strict.changes == [] and strict.stop == "minimal" and strict.failed is None
    assert strict.values == many_faults(2)  # nothing accepted: the original


def test_ctrl_c_in_a_replay_keeps_the_best_so_far():
    seen = {"n": 0}

    def fails(values):
        seen["n"] += 1
        if seen["n"] == 3:
            raise KeyboardInterrupt
        return True

    result = shrink.search(many_faults(), fails, k=2, n=3, budget=30)
    assert result.stop == "interrupted" and result.changes == ["drop faults 1-4 of 8"]


def test_dropping_a_fault_keeps_the_others_times():
    values = many_faults(3)
    dropped = shrink.without(values["schedule"], {0, 1})
    assert [s[2] for s in starts({"schedule": dropped})] == [s[2] for s in starts(values)][1:]


def test_fewer_nodes_drops_faults_on_nodes_that_are_gone():
    values = many_faults(5)  # kills of nodes 0, 1, 2, 3, 4
    change, fewer = next((c, v) for c, v in shrink.reductions(values) if c.startswith("3 nodes"))
    assert [s[1] for s in starts(fewer)] == [(0,), (1,), (2,)]
    assert (fewer["nodes"], fewer["zk_nodes"] if "zk_nodes" in fewer else 3, fewer["replication_factor"]) == (3, 3, 3)
    build(fewer)


# -- the commands: bad input


@pytest.mark.parametrize("command,argv,words", [
    ("replay", ["NOPE"], "NOPE: no run.json (not a run folder)"),
    ("replay", ["RUN", "--times", "0"], "--times 0: expected 1 or more"),
    ("shrink", ["RUN", "--k", "3", "--n", "2"], "--k 3 --n 2: expected 1 <= K <= N"),
    ("shrink", ["RUN", "--budget", "0"], "--budget 0: expected 1 or more"),
    ("shrink", ["RUN", "--anomaly", "gremlins"], "--anomaly 'gremlins': not an anomaly"),
    ("shrink", ["VALID"], "the run found no error anomaly; nothing to shrink"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, command, argv, words):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"spec": base(schedule=[]), "schedule": SCHEDULE}))
    (run_dir / "results.json").write_text(json.dumps({"valid": True, "anomalies": {
        "lost-write": {"count": 0, "error": True}}}))
    argv = [str(run_dir) if a in ("RUN", "VALID") else str(tmp_path / a) if a == "NOPE" else a for a in argv]
    proc = harness(command, *argv, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
    assert not (run_dir / "shrunk.toml").exists() and not (run_dir / "replay.json").exists()


# -- a real replay


@pytest.mark.integration
@pytest.mark.slow
def test_a_planted_bug_replays_with_its_anomaly_every_time(real_runs, tmp_path):
    """The session's short run of the own broker's no-dedup bug (duplicates on retries,
    tests/conftest.py), replayed twice from a copy of its run folder: both replays
    follow its schedule and show the duplicates."""
    _, _, buggy = real_runs
    assert buggy.proc.returncode == 1, buggy.proc.stderr
    run_dir = tmp_path / "run"
    shutil.copytree(buggy.dir, run_dir)
    original = json.loads((run_dir / "run.json").read_text())["schedule"]
    assert original and json.loads((run_dir / "results.json").read_text())["anomalies"]["duplicate"]["count"] > 0
    # Another seed in the spec, one that plans other faults: the replays can only follow the schedule given.
    info = json.loads((run_dir / "run.json").read_text())
    spec = info["spec"]
    other = 2 if spec["seed"] != 2 else 3
    assert to_records(plan(tuple(spec["nemesis"]), spec["nemesis_targets"], spec["nodes"], spec["nemesis_interval"],
                           spec["time_limit"], other, spec["partitions"])) != original
    (run_dir / "run.json").write_text(json.dumps({**info, "spec": {**spec, "seed": other}}))
    proc = harness("replay", str(run_dir), "--times", "2", "--out", str(tmp_path / "replays"), timeout=1200)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "replays" / "replay.json").read_text())
    assert data["rates"]["duplicate"] == [2, 2], data["rates"]
    assert "| duplicate |" in proc.stdout and "| 2 of 2 | 100% |" in proc.stdout, proc.stdout
    for r in data["replays"]:
        replayed = json.loads((Path(r["run_dir"]) / "run.json").read_text())
        assert replayed["schedule"] == original  # the same steps, not a plan of the seed's
        spec = replayed["spec"]  # the schedule given (a stop's empty mode and picks left out)
        assert to_records(from_records(spec["schedule"], spec["nodes"], spec["partitions"])) == original


def test_the_shrunk_scenario_file_runs_as_a_spec_and_says_how_it_was_found(tmp_path):
    original = many_faults()
    result = shrink.search(original, lambda v: len(shrink.pairs(v["schedule"])) >= 1, budget=4)
    text = shrink.scenario_text(dict(original, name="kafka-x"), result, "results/kafka-x/T", ["lost-write"],
                                2, 3, 4, 125.0)
    path = tmp_path / "shrunk.toml"
    path.write_text(text)
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert "# reproduces lost-write: 2 of 2 replays (accepted at 2 of 3)" in header
    assert "# search: 4 replays of a budget of 4, 2 candidates, 2 min; ended: budget" in header
    spec = build(load_file(str(path)))
    assert spec.name == "kafka-x-shrunk" and spec.expect == {"valid": False, "lost-write": "present"}
    assert to_records(from_records(spec.schedule, spec.nodes, spec.partitions)) == result.values["schedule"]
    assert len(shrink.pairs(spec.schedule)) == 2


def test_the_documented_last_replica_sequence_parses_to_overlapping_steps_with_an_await(tmp_path):
    """docs/running.md's example: cut the followers off, await a leader-only ISR, power-cut the leader, heal."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "running.md").read_text()
    [block] = [b.split("```", 1)[0] for b in doc.split("```toml\n")[1:] if 'until = "isr-leader-only"' in b]
    path = tmp_path / "last-replica.toml"
    path.write_text(block)
    spec = build(load_file(str(path)))
    assert spec.nemesis == ("partition", "power-loss") and spec.uses_faultfs
    steps = from_records(spec.schedule, spec.nodes, spec.partitions)
    assert [(s.action, s.fault or s.until) for s in steps] == [
        ("start", "partition"), ("await", "isr-leader-only"), ("start", "power-loss"), ("stop", "partition"),
        ("stop", "power-loss")]
    # A spec file written from it reads back to the same steps (replay and shrink write such files).
    again = tmp_path / "again.toml"
    again.write_text(specs.spec_file(spec.to_dict()))
    assert from_records(build(load_file(str(again))).schedule, 3, spec.partitions) == steps
