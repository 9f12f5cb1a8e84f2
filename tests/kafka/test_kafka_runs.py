"""`harness run --system kafka` end to end on the local provider: real
namespaces, sshd, ZooKeeper, Apache Kafka 3.9 JVMs, clients, faults, Spark.

Each test runs the installed command in a subprocess, as a user would, and
checks the verdict, the run directory and that
nothing of the run is left on the machine.
"""

from __future__ import annotations

import json

import pytest

from core.history.features import finalized
from tests.kafka.conftest import left_behind
from tests.support import harness_run, history_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def nemesis_ok(run_dir, f: str) -> list[dict]:
    return [e for e in history_events(run_dir) if e["process"] == "nemesis" and e["f"] == f and e["type"] != "invoke"]


def test_a_partition_run_with_safe_settings_is_valid(results):
    proc, run_dir = harness_run(results, "--system", "kafka", "--nodes", "3",
                                "--partitions", "3", "--nemesis", "partition", "--nemesis-interval", "5",
                                "--time-limit", "25", "--acks", "all", "--min-insync", "2", "--seed", "11",
                                "--rate", "300")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: VALID" in proc.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True and results["counts"]["sends"]["ok"] > 1000
    run = json.loads((run_dir / "run.json").read_text())
    assert run["outcome"] == "completed" and run["versions"]["system"] == "kafka 3.9.2 (zk)"
    starts = nemesis_ok(run_dir, "start-partition")
    assert starts and all(e["type"] == "ok" and e["value"]["verified"]["ok"] for e in starts)
    for node in ("n1", "n2", "n3"):  # Kafka's own log and its generated config, per node
        assert "started (kafka.server.KafkaServer)" in (run_dir / "nodes" / node / "server.log").read_text()
        assert "broker.id=" in (run_dir / "nodes" / node / "kafka.properties").read_text()
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}


def test_acks1_with_leaders_killed_loses_writes(acks1_leader_kill):
    proc, run_dir = acks1_leader_kill
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    # The followers held back while the leader acknowledged: those writes are
    # gone, never read (lost-write) or read past by none (lost-acked).
    assert results["anomalies"]["lost-write"]["count"] + results["anomalies"]["lost-acked"]["count"] > 0, \
        proc.stdout
    assert "scenario kafka-acks1-leader-kill-slow-followers: expectation met" in proc.stdout
    kills = nemesis_ok(run_dir, "kill")
    assert kills and all(e["type"] == "ok" and e["value"]["verified"]["process_gone"] for e in kills)
    assert all("leader_of" in e["value"] for e in kills)  # aimed at leaders named by ZooKeeper
    restarts = nemesis_ok(run_dir, "start")
    assert restarts and all(e["value"]["verified"]["ok"] for e in restarts)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["expectation"]["met"] is True
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}


def test_kraft_mode_serves_the_workload_while_its_controller_is_killed(results):
    proc, run_dir = harness_run(results, "--system", "kafka", "--kafka-mode", "kraft",
                                "--nodes", "3", "--partitions", "3", "--nemesis", "kill",
                                "--nemesis-targets", "controller", "--nemesis-interval", "6",
                                "--time-limit", "20", "--rate", "300", "--seed", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    # Sends to a killed broker's partitions time out until KRaft fences it; the rest go through.
    assert results["valid"] is True and results["counts"]["sends"]["ok"] > 600
    run = json.loads((run_dir / "run.json").read_text())
    assert run["versions"]["system"] == "kafka 3.9.2 (kraft)"
    props = (run_dir / "nodes" / "n1" / "kafka.properties").read_text()
    assert "process.roles=broker,controller" in props and "zookeeper.connect" not in props
    kills = nemesis_ok(run_dir, "kill")
    # The last kill may begin so late on a loaded machine that the run's end cuts its
    # verification short (info); every earlier one must be verified, on the controller.
    assert len(kills) >= 2 and all(e["type"] == "ok" and e["value"].get("controller") for e in kills[:-1])
    assert kills[-1]["type"] == "info" or kills[-1]["value"].get("controller")
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}


def test_power_loss_of_every_node_with_readers_along_is_lost_acked(results):
    # Issue 11: consumers had read what the power cut then took, so no value is a
    # lost write by the classic definition; the final log shows the loss.
    proc, run_dir = harness_run(results, "--scenario", "kafka-power-loss-readers", "--seed", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "scenario kafka-power-loss-readers: expectation met" in proc.stdout
    results = json.loads((run_dir / "results.json").read_text())
    lost = results["anomalies"]["lost-acked"]
    assert lost["error"] is True and lost["count"] > 0, proc.stdout
    assert results["stats"]["final_logs"]["checked"] is True and results["warnings"] == []
    cuts = [e["index"] for e in nemesis_ok(run_dir, "power-loss")]
    assert cuts
    # Acknowledged before a power cut; most were read along, then lost (calibration: seeds 1-3, every example).
    assert all(e["ack_index"] < max(cuts) for e in lost["examples"]), lost["examples"]
    assert any(e["read_index"] is not None for e in lost["examples"])
    page = (run_dir / "report.html").read_text()
    assert "not in the topic at the end" in page
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}


def test_kafka4_without_eligible_leader_replicas_loses_and_the_controller_says_why(results):
    # Issue 50, KIP-966: the ISR's last member loses power; with the feature off the
    # controller elects it again from the ISR once it is back, with what its log kept.
    proc, run_dir = harness_run(results, "--scenario", "kafka4-last-replica-standing-elr-off", "--seed", "1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "expectation met" in proc.stdout
    run = json.loads((run_dir / "run.json").read_text())
    assert run["versions"]["system"] == "kafka 4.4.0 (kraft)"
    # The voters ran controllers of their own, beside their brokers.
    controller = (run_dir / "nodes" / "n1" / "kafka-controller.properties").read_text()
    assert "process.roles=controller" in controller and "node.id=101" in controller
    assert "process.roles=broker\n" in (run_dir / "nodes" / "n1" / "kafka.properties").read_text()
    states = [json.loads(line) for line in (run_dir / "states.jsonl").read_text().splitlines()]
    kraft = [s for s in states if s["kind"] == "kraft-partition"]
    assert kraft and all(s["elr"] == [] for s in kraft)  # the feature is off: nobody is ever eligible
    assert any(s["kind"] == "kraft-broker" and s["event"] == "fenced" for s in states)
    # The feature levels as the controller finalized them, read from its records:
    # ELR off as formatted, transactions v2 as 4.4.0 finalizes on a new cluster.
    features = finalized(states)
    assert features.get("eligible.leader.replicas.version", 0) == 0 and features["transaction.version"] == 2
    page = (run_dir / "report.html").read_text()
    assert "The KRaft controller's records" in page and "transaction.version 2" in page
    assert "its only member (no eligible leader replicas); it had been fenced and registered again" in page
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}
