"""`harness run` end to end on the local provider with the own broker: real
namespaces, sshd, ZooKeeper, brokers, clients, faults and Spark.

Each test runs the installed command in a subprocess, as a user would, and
checks what it left: the run directory, the verdict, and a clean machine.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from checkers import service
from core.history.parquet import jsonl_to_parquet
from nemesis.partition import grudge_for
from nemesis.registry import FAULTS
from nemesis.schedule import plan, to_records
from tests.support import HARNESS, harness_run, history_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

def left_behind(run_dir: Path) -> dict:
    """Namespaces and broker/ZooKeeper/sshd processes of the run's cluster
    still there (other clusters on this machine are not this run's)."""
    cluster = json.loads((run_dir / "run.json").read_text())["cluster"]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    ours = [line for line in netns.splitlines() if line.startswith(f"harness-{cluster}-")]
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    daemons = [p for p in procs if f"/var/lib/harness/clusters/{cluster}/" in p]
    return {"namespaces": ours, "processes": daemons}


def nemesis_events(run_dir: Path) -> list[dict]:
    return [e for e in history_events(run_dir) if e["process"] == "nemesis"]


def test_a_partition_run_with_safe_settings_is_valid(tmp_path):
    proc, run_dir = harness_run(tmp_path, "--nemesis", "partition", "--time-limit", "30", "--nemesis-interval", "5",
                                "--acks", "all", "--min-insync", "2", "--seed", "11")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: VALID" in proc.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True and results["counts"]["sends"]["ok"] > 1000
    for name in ("run.json", "history.jsonl", "history.parquet", "results.json", "report.html", "harness.log"):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "nodes" / "n1" / "broker.log").is_file()
    # Each teardown step says how long it took, from the heal to the cluster's teardown.
    said = (run_dir / "harness.log").read_text()
    steps = [m[1] for m in re.finditer(r"teardown: (.+?) in \d+\.\d s", said)]
    assert steps[0] == "heal" and "dump the logs on disk" in steps and steps[-1] == "tear down the cluster", steps
    # The check starts once the history is closed, beside the rest of the teardown
    # (which takes a second or more: logs, disk dumps, brokers, ZooKeeper, namespaces).
    at = {m[2]: m[1] for m in re.finditer(r"^(\S+ \S+) INFO harness.run: (phase: checking the history|"
                                          r"teardown: close history|teardown: tear down the cluster)", said, re.M)}
    assert at["teardown: close history"] <= at["phase: checking the history"] < at["teardown: tear down the cluster"]
    assert "teardown: waited" in said
    # Converted to Parquet while it was written (core/history/follow.py): the rows of a conversion after the run.
    assert "converted while written" in said
    jsonl_to_parquet(run_dir / "history.jsonl", tmp_path / "again.parquet")
    assert pq.read_table(run_dir / "history.parquet").equals(pq.read_table(tmp_path / "again.parquet"))
    assert (tmp_path / "latest").resolve() == run_dir.resolve()
    assert (tmp_path / "index.html").is_file()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["outcome"] == "completed" and run["seed"] == 11 and set(run["nodes"]) == {"n1", "n2", "n3", "n4", "n5"}
    starts = [e for e in nemesis_events(run_dir) if e["f"] == "start-partition" and e["type"] != "invoke"]
    assert starts and all(e["type"] == "ok" and e["value"]["verified"]["ok"] for e in starts)
    assert left_behind(run_dir) == {"namespaces": [], "processes": []}


def test_acknowledging_before_replication_loses_writes_when_a_leader_is_cut_off(ack_before_replication_run):
    # The planted bug acks acks=all writes after the leader's own append. Cut
    # that leader off from its followers (tests/e2e/conftest.py) for longer than
    # the ZooKeeper session: it goes on acknowledging while the others elect a
    # new leader, and the healed old leader truncates what it acknowledged
    # alone. (A kill -9 of the leader instead loses only the few records a
    # follower had not fetched yet: on a quiet machine often none.)
    proc, run_dir = ack_before_replication_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["anomalies"]["lost-write"]["count"] > 100, proc.stdout
    cuts = [e for e in nemesis_events(run_dir) if e["f"] == "start-partition" and e["type"] == "ok"]
    assert cuts and all(e["value"]["verified"]["ok"] for e in cuts), cuts
    # Lost only where a cut-off leader acknowledged alone.
    cut_partitions = {e["value"]["leader_of"] for e in cuts}
    assert {x["partition"] for x in results["anomalies"]["lost-write"]["examples"]} <= cut_partitions
    assert left_behind(run_dir) == {"namespaces": [], "processes": []}


def test_a_run_carries_out_the_faults_its_seed_plans(real_runs):
    """The same seed, the same faults: the plan is a function of the seed
    (tests/nemesis/test_schedule.py), run.json records it, and the nemesis
    carries it out step by step, each fault on the nodes its picks name."""
    _, faults_run, _ = real_runs
    run = json.loads((faults_run.dir / "run.json").read_text())
    spec = run["spec"]
    steps = plan(tuple(spec["nemesis"]), spec["nemesis_targets"], spec["nodes"], spec["nemesis_interval"],
                 spec["time_limit"], spec["seed"], spec["partitions"])
    assert run["schedule"] == to_records(steps)
    starts = [s for s in steps if s.action == "start"]
    assert [s.fault for s in starts] == ["partition", "pause", "kill", "pause"]
    names = sorted(run["nodes"])
    begun = [e for e in nemesis_events(faults_run.dir) if e["type"] != "invoke"
             and e["f"] in {FAULTS[s.fault].start_action for s in starts}]
    # A start planned near the end may fall after the time limit, the nemesis's waits having drifted.
    assert len(begun) >= 3
    for step, event in zip(starts, begun):
        assert event["type"] == "ok" and event["value"]["verified"]["ok"], event
        assert event["f"] == FAULTS[step.fault].start_action
        if step.fault == "partition":
            assert event["value"]["grudge"] == grudge_for(step.mode, names, step.picks)
        else:
            assert event["value"]["nodes"] == [names[i] for i in step.picks]


def test_ctrl_c_heals_tears_down_and_keeps_a_partial_history(tmp_path):
    proc = subprocess.Popen([HARNESS, "run", "--results", str(tmp_path), "--nemesis", "partition",
                             "--nemesis-interval", "2", "--time-limit", "300", "--nodes", "3", "--seed", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        history = None
        while time.monotonic() < deadline:
            found = list(tmp_path.glob("*/*/history.jsonl"))
            if found and b"start-partition" in found[0].read_bytes():
                history = found[0]
                break
            time.sleep(0.5)
        assert history is not None, "the run never started a fault"
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, out + err
    assert "interrupted" in err
    run_dir = history.parent
    run = json.loads((run_dir / "run.json").read_text())
    assert run["outcome"] == "not carried out: interrupted"
    assert (run_dir / "report.html").is_file() and (run_dir / "results.json").is_file()
    events = [json.loads(line) for line in history.read_text().splitlines()]
    heals = [e["index"] for e in events if e["f"] == "heal" and e["type"] == "ok"]
    starts = [e["index"] for e in events if e["f"] == "start-partition"]
    assert heals and max(starts) < heals[-1]  # healed, and nothing started after
    assert left_behind(run_dir) == {"namespaces": [], "processes": []}
    check = subprocess.run([HARNESS, "check", str(run_dir), "--out", str(tmp_path / "recheck")],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode in (0, 1), check.stderr


def test_a_second_ctrl_c_during_the_check_still_lets_the_teardown_finish(tmp_path):
    """The teardown goes on in a thread beside the check (harness/run/runner.py): a
    Ctrl-C that stops the check must not stop it, and the run still records
    its end. The run starts with SIGINT ignored, as whatever a script starts
    in the background inherits it (a nightly's runs, then): it must still
    take SIGINT as Ctrl-C."""
    proc = subprocess.Popen([HARNESS, "run", "--results", str(tmp_path), "--nemesis", "partition",
                             "--nemesis-interval", "2", "--time-limit", "300", "--nodes", "3", "--seed", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    said = []
    # A run deaf to SIGINT would go on for its 300 s: a failure, found in 2 minutes.
    watchdog = threading.Timer(120, proc.kill)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not list(tmp_path.glob("*/*/history.jsonl")):
            time.sleep(0.5)
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        watchdog.start()
        for line in proc.stderr:  # the check begins as soon as the history is closed
            said.append(line)
            if "checking the history" in line:
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    assert any("checking the history" in line for line in said), "".join(said)
    assert proc.returncode == 130, out + "".join(said) + err
    run_dir = next(tmp_path.glob("*/*/history.jsonl")).parent
    run = json.loads((run_dir / "run.json").read_text())
    assert run["outcome"] == "not carried out: interrupted" and "ended" in run
    log = (run_dir / "harness.log").read_text()
    assert "teardown: tear down the cluster in" in log and "teardown: waited" in log
    assert left_behind(run_dir) == {"namespaces": [], "processes": []}


def test_a_run_is_checked_by_a_check_service_of_its_own_that_ends_with_it(real_runs):
    """The run's check service (checkers/service.py) started with the run,
    primed while it ran (both logged in the run folder), checked the history,
    and is gone with the run, its socket folder too."""
    _, faults_run, _ = real_runs
    said = (faults_run.dir / "check-service.log").read_text()
    assert "Spark session started" in said and f"checked {faults_run.dir}" in said, said
    address = re.search(r"listening on (\S+) \(pid (\d+)\)", said)
    assert address and not Path(address[1]).parent.exists()
    # Started before the cluster came up, not with the workload: the bring-up's seconds are the priming's too.
    listening = re.search(r"^(\S+ \S+) check-service: listening", said, re.M)[1]
    workload = re.search(r"^(\S+ \S+) INFO harness.run: phase: running clients",
                         (faults_run.dir / "harness.log").read_text(), re.M)[1]
    assert listening < workload, (listening, workload)
    # Claimed when the run healed: the check found it primed no more, at nice 0.
    claimed = re.search(r"^(\S+ \S+) check-service: claimed in", said, re.M)[1]
    healing = re.search(r"^(\S+ \S+) INFO harness.run: phase: healing",
                        (faults_run.dir / "harness.log").read_text(), re.M)[1]
    checked = re.search(r"^(\S+ \S+) check-service: checked", said, re.M)[1]
    assert healing <= claimed <= checked, (healing, claimed, checked)
    assert address[1] not in service.running_services()
    assert (faults_run.dir / "spark.log").is_file()
    run = json.loads((faults_run.dir / "run.json").read_text())
    assert run["check_phase_s"] > 0

