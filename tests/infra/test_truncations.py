"""Unit tests: the truncations the own broker and Kafka log, read back from
real log lines (copied from real runs), and their move onto the history's
clock for states.jsonl."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from broker.partition import Partition
from infra import state as st
from infra.kafka import KafkaSystem
from infra.local import PROVIDER as LOCAL
from infra.nodes import Cluster, Node
from infra.own_broker import OwnBroker
from infra.remote import Remote
from infra.system import PartitionStates, Truncation
from workloads.observer import origin_seconds, truncation_lines

# broker.log of n1, `harness run --scenario own-hw-truncation` (seed 786503422; the
# line form of broker/partition.py note_truncation), with the lines around it.
OWN_LOG = """\
2026-11-23 15:38:36.199 INFO [broker] live brokers now [1, 3, 4, 5] (gone [2], new [])
2026-11-23 15:38:36.228 INFO [broker.controller] CONTROLLER: partition harness-1 leader 2 -> 3, epoch 0 -> 1, isr [2, 3, 4, 5, 1] -> [3, 4, 5, 1] (clean election; old leader 2 lost)
2026-11-23 15:38:36.233 INFO [broker.partition] TRUNCATING harness-1 to 899 (log end 903; leader 3, epoch 1; reason: high watermark; replica.truncation = high-watermark; on a new leader)
2026-11-23 15:38:36.234 INFO [broker.partition] TRUNCATE harness-1: log end 903 -> 899
2026-11-23 15:38:36.234 INFO [broker.partition] FOLLOWER harness-1: broker 1 follows leader 3, epoch 1, isr [3, 4, 5, 1], log end 899, hw 899 (was ('follower', 2, 0)) (truncated to the hw 899: replica.truncation = high-watermark)
2026-11-23 15:38:44.196 INFO [broker.partition] TRUNCATING harness-3 to 1891 (log end 1896; leader 5, epoch 1; reason: high watermark; replica.truncation = high-watermark; on a new leader)
"""

# server.log of n1, `harness run --scenario kafka-acks1-leader-kill --time-limit 30 --seed 7`
# (Kafka 3.9.2, ZooKeeper mode).
KAFKA_LOG = """\
[2026-11-23 15:26:01,055] INFO [Broker id=1] Follower harness-0 starts at leader epoch 0 from offset 0 with partition epoch 0 and high watermark 0. Current leader is 3. Previous leader Some(3) and previous leader epoch was 0. (state.change.logger)
[2026-11-23 15:26:01,136] INFO [ReplicaFetcher replicaId=1, leaderId=3, fetcherId=0] Truncating partition harness-0 with TruncationState(offset=0, completed=true) due to local high watermark 0 (kafka.server.ReplicaFetcherThread)
[2026-11-23 15:26:01,137] INFO [UnifiedLog partition=harness-0, dir=/var/lib/harness/clusters/c0/nodes/n1/data/kafka] Truncating to 0 has no effect as the largest offset in the log is -1 (kafka.log.UnifiedLog)
[2026-11-23 15:26:10,314] INFO [Broker id=1] Follower harness-0 starts at leader epoch 1 from offset 702 with partition epoch 1 and high watermark 679. Current leader is 2. Previous leader Some(2) and previous leader epoch was 1. (state.change.logger)
[2026-11-23 15:26:10,565] INFO [Broker id=1] Ignoring LeaderAndIsr request from controller 2 with correlation id 8 epoch 1 for partition harness-0 since its associated leader epoch 1 matches the current leader epoch (state.change.logger)
[2026-11-23 15:26:10,333] INFO [ReplicaFetcher replicaId=1, leaderId=2, fetcherId=0] Truncating partition __consumer_offsets-8 with TruncationState(offset=0, completed=true) due to local high watermark 0 (kafka.server.ReplicaFetcherThread)
[2026-11-23 15:26:10,334] INFO [UnifiedLog partition=__consumer_offsets-8, dir=/var/lib/harness/clusters/c0/nodes/n1/data/kafka] Truncating to 0 has no effect as the largest offset in the log is -1 (kafka.log.UnifiedLog)
[2026-11-23 15:26:11,438] INFO [ReplicaFetcher replicaId=1, leaderId=2, fetcherId=0] Truncating partition harness-0 with TruncationState(offset=687, completed=true) due to leader epoch and offset EpochEndOffset(errorCode=0, partition=0, leaderEpoch=0, endOffset=687) (kafka.server.ReplicaFetcherThread)
[2026-11-23 15:26:11,438] INFO [UnifiedLog partition=harness-0, dir=/var/lib/harness/clusters/c0/nodes/n1/data/kafka] Truncating to offset 687 (kafka.log.UnifiedLog)
[2026-11-23 15:26:39,595] INFO [Broker id=1] Follower harness-1 starts at leader epoch 4 from offset 8849 with partition epoch 6 and high watermark 5188. Current leader is 3. Previous leader Some(3) and previous leader epoch was 4. (state.change.logger)
[2026-11-23 15:26:39,940] INFO [ReplicaFetcher replicaId=1, leaderId=3, fetcherId=0] Truncating partition harness-1 with TruncationState(offset=8842, completed=true) due to leader epoch and offset EpochEndOffset(errorCode=0, partition=1, leaderEpoch=2, endOffset=8842) (kafka.server.ReplicaFetcherThread)
[2026-11-23 15:26:39,940] INFO [UnifiedLog partition=harness-1, dir=/var/lib/harness/clusters/c0/nodes/n1/data/kafka] Truncating to offset 8842 (kafka.log.UnifiedLog)
"""


def _cluster(names):
    # Real Remote objects; nothing here connects.
    nodes = [Node(n, f"10.9.9.{i}", "/d", "/l", "/r", Remote(n, f"10.9.9.{i}")) for i, n in enumerate(names, 11)]
    return Cluster(nodes, LOCAL, "10.9.9.1", "c0", st.cluster_dir("c0"))


def test_kafka_truncations_that_cut_records_with_the_leadership_and_log_end():
    found = KafkaSystem.parse_truncations(KAFKA_LOG)
    # The truncations to the local high watermark 0 cut nothing ("has no effect"): left out.
    assert found == [
        {"logged": datetime(2026, 11, 23, 15, 26, 11, 438000), "topic": "harness", "partition": 0, "offset": 687,
         "log_end": 702, "epoch": 1, "leader_id": 2, "reason": "leader epoch"},
        {"logged": datetime(2026, 11, 23, 15, 26, 39, 940000), "topic": "harness", "partition": 1, "offset": 8842,
         "log_end": 8849, "epoch": 4, "leader_id": 3, "reason": "leader epoch"},
    ]


def test_kafka_log_end_is_only_the_one_before_the_first_cut():
    # A second truncation under the same leadership: the log end of the follower line is stale by then.
    lines = KAFKA_LOG.splitlines()
    again = [ln.replace("15:26:39,940", "15:26:41,000").replace("8842", "8840") for ln in lines[-2:]]
    found = KafkaSystem.parse_truncations("\n".join(lines + again))
    assert [(t["offset"], t["log_end"]) for t in found] == [(687, 702), (8842, 8849), (8840, None)]


def test_own_broker_truncation_lines():
    assert OwnBroker.parse_truncations(OWN_LOG) == [
        {"logged": datetime(2026, 11, 23, 15, 38, 36, 233000), "topic": "harness", "partition": 1, "offset": 899,
         "log_end": 903, "epoch": 1, "leader_id": 3, "reason": "high watermark"},
        {"logged": datetime(2026, 11, 23, 15, 38, 44, 196000), "topic": "harness", "partition": 3, "offset": 1891,
         "log_end": 1896, "epoch": 1, "leader_id": 5, "reason": "high watermark"},
    ]


def test_own_broker_lines_of_every_kind(tmp_path, caplog):
    # The broker's own code writes the line (a leader-epoch truncation and a batch that does not continue
    # the log have not happened in the real runs quoted above); the parser reads every reason.
    class Shell:  # what note_truncation reads of a partition
        name, leo = "harness-2", 40

    caplog.set_level(logging.INFO, logger="broker.partition")
    Partition.note_truncation(Shell(), 35, 4, 7, "leader epoch", "leader epoch 6 ends at 35 on leader 4; hw 33")
    Partition.note_truncation(Shell(), 38, 4, 7, "fetched batch does not continue the log", "batch at 38",
                              level=logging.WARNING)
    Partition.note_truncation(Shell(), 30, 2, 3, "fetch offset past leader's log end")
    text = "\n".join(f"2026-11-23 15:38:36.{i:03d} {r.levelname} [{r.name}] {r.getMessage()}"
                     for i, r in enumerate(caplog.records))
    assert [(t["partition"], t["offset"], t["log_end"], t["leader_id"], t["epoch"], t["reason"])
            for t in OwnBroker.parse_truncations(text)] == [
        (2, 35, 40, 4, 7, "leader epoch"), (2, 38, 40, 4, 7, "fetched batch does not continue the log"),
        (2, 30, 40, 2, 3, "fetch offset past leader's log end")]


def test_systems_name_nodes_and_read_the_collected_logs(tmp_path):
    system = KafkaSystem("10.9.9.11:2181")
    assert isinstance(system, PartitionStates) and isinstance(OwnBroker("10.9.9.11:2181"), PartitionStates)
    system.place(_cluster(["n1", "n2", "n3"]))
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "server.log").write_text(KAFKA_LOG)
    found = system.truncations("n1", tmp_path / "n1")
    assert [(t.node, t.partition, t.offset, t.epoch, t.leader) for t in found] == [
        ("n1", 0, 687, 1, "n2"), ("n1", 1, 8842, 4, "n3")]
    assert system.truncations("n2", tmp_path / "n2") == []  # no logs collected: nothing, no error
    assert system.named_states({0: (2, 5, [2, 3, 9]), 1: (-1, 6, [])}) == {0: ("n2", 5, ["n2", "n3"]),
                                                                        1: (None, 6, [])}


def test_truncations_move_onto_the_history_clock():
    origin = origin_seconds("2026-11-23T15:26:00.500Z")
    assert origin == datetime(2026, 11, 23, 15, 26, 0, 500000, tzinfo=timezone.utc).timestamp()
    t = Truncation(node="n1", logged=datetime(2026, 11, 23, 16, 26, 11, 438000), topic="harness", partition=0,
                   offset=687, log_end=702, epoch=1, leader="n2", reason="leader epoch")
    other_topic = Truncation(**{**t.__dict__, "topic": "__consumer_offsets"})
    # The node logs in UTC+1: 16:26:11.438 there is 10.938 s after the origin.
    lines = truncation_lines([t, other_topic], "harness", origin, {"n1": timedelta(hours=1)})
    assert lines == [{"time": 10_938_000_000, "kind": "truncation", "node": "n1", "partition": 0, "offset": 687,
                      "log_end": 702, "epoch": 1, "leader": "n2", "reason": "leader epoch"}]
