"""The workload against Kafka 4 (KRaft only): the first line with eligible
leader replicas on by default (4.1) and the newest release, each a real
2-node loopback cluster (lab/loopback_kafka.py) from the jars `make setup`
resolves. Producers, plain consumers and a consumer group committing after
handling run while a broker is killed and restarted; the history checks
valid and every acknowledged record is read back. On the newest release
the group speaks KIP-848's consumer protocol (the classic one on 4.4.0:
the scenario kafka4-group-classic-coordinator-faults)."""

from __future__ import annotations

import time

import pytest

from checkers.check import Options, check_history as check
from infra.kafka import OFFSETS_TOPIC, offsets_partition_of
from lab.loopback_kafka import LoopbackKafka
from workloads.config import GroupConfig, WorkloadConfig
from workloads.topic import create_topic
from workloads.workload import Workload

from tests.workloads.history_checks import check_history, wait_until_assigned

pytestmark = pytest.mark.integration


# KIP-848's group session and heartbeat, as short as the classic members' here (Kafka: 45 s and 5 s).
NEW_PROTOCOL_BROKER = {"group.consumer.session.timeout.ms": "10000", "group.consumer.min.session.timeout.ms": "6000",
                       "group.consumer.heartbeat.interval.ms": "1000",
                       "group.consumer.min.heartbeat.interval.ms": "1000"}


# The first 4.x line with ELR on the classic group protocol; the newest on KIP-848's.
@pytest.mark.parametrize("version, protocol", [("4.1.2", "classic"), ("4.4.0", "consumer")])
def test_the_workload_on_kafka_4_with_a_broker_killed(tmp_path, history, workloads, version, protocol):
    cluster = LoopbackKafka(tmp_path / "kafka", version=version,
                            broker_settings=NEW_PROTOCOL_BROKER if protocol == "consumer" else None)
    try:
        cluster.start()
        cfg = WorkloadConfig(topic="k4", partitions=2, replication_factor=2, rate=400, producers=2, consumers=1,
                             groups=(GroupConfig("g", consumers=2, commit="after-processing", protocol=protocol),))
        create_topic(cluster.bootstrap, cfg, timeout_s=30)
        wl = Workload(cfg, cluster.bootstrap, history)
        workloads.append(wl)
        wl.start()
        # Both members hold partitions before the kill. A KIP-848 member of
        # librdkafka 2.16 whose heartbeat times out (queued behind a commit
        # that waits for the killed __consumer_offsets replica) resends it
        # without its owned partitions, so the coordinator never repeats the
        # new assignment: the member keeps every partition and the other
        # stays idle until the membership changes (docs/scenarios.md).
        wait_until_assigned(history, "g", members=2, timeout_s=30.0)
        # The group-follower target's placement of the group's commits: the
        # leader of the __consumer_offsets partition it computes is the
        # coordinator the brokers name.
        assert _offsets_leader(cluster.bootstrap, "g") == _coordinator(cluster.bootstrap, "g")
        time.sleep(1.0)
        cluster.kill(2)
        time.sleep(3.0)
        cluster.start_node(2)
        time.sleep(3.0)
        stop = wl.stop(timeout=10)
        report = wl.final_reads(30.0)
        history.close()
    finally:
        cluster.stop()
    assert not stop.threads_left and report.complete
    facts = check_history(history.path)
    acked = facts.of_type("send", "ok")
    assert len(acked) > 1_000
    for e in acked:
        assert (e["partition"], e["offset"]) in facts.reads[e["value"]]
    assert any(e["f"] == "process" for e in facts.events), "the group handled records"
    # The group's members committed what they handled.
    assert facts.of_type("commit", "ok")
    results = check(history.path, Options(engine="local"))
    found = {k: a["count"] for k, a in results["anomalies"].items() if a["count"]}
    assert results["valid"], found


def _offsets_leader(bootstrap: str, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    partitions = AdminClient({"bootstrap.servers": bootstrap}).list_topics(OFFSETS_TOPIC, timeout=10).topics[
        OFFSETS_TOPIC].partitions
    return partitions[offsets_partition_of(group, len(partitions))].leader


def _coordinator(bootstrap: str, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=10).coordinator.id
