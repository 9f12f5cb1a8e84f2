"""Leader epochs in the own broker (KIP-101, KIP-279, KIP-320).

Unit level, on hand-built logs: the leader-epoch cache is checkpointed
beside the log and rebuilt on recovery; a follower truncates exactly to
its divergence point with the leader, through the fetcher's own
OffsetForLeaderEpoch rounds (answered here by a leader Partition instead
of a socket); the coalesced ZooKeeper watch (leader A, B, A again) no
longer keeps a diverged tail.  On real brokers: stale-epoch replica
fetches are refused, a too-new epoch fences the leader until ZooKeeper
settles it, and unmodified confluent-kafka clients keep producing and
consuming across a leader change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka.protocol.consumer import FetchRequest, OffsetForLeaderEpochResponse
from kazoo.exceptions import NodeExistsError

from broker import protocol as P
from broker import records
from broker import zk as Z
from broker.client import SyncConnection
from broker.config import BrokerConfig
from broker.controller import Controller
from broker.fetcher import Fetcher
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from broker.storage import EPOCH_CHECKPOINT_NAME, Log, read_epoch_checkpoint
from broker.zk import PartitionState
from tests.broker.conftest import make_batch
from tests.broker.helpers import BackgroundProducer, log_values, produce, wait_for

TP = ("t", 0)


# ----------------------------------------------------------------------------------------------
# hand-built logs
# ----------------------------------------------------------------------------------------------

def _open(path, broker_id: int) -> Partition:
    """A replica opened the way the replica manager opens one (headers, then the epoch checkpoint)."""
    lg = Log(str(path))
    p = Partition("t", 0, lg, broker_id)
    lg.open(on_batch=p.note_batch)
    p.recover_epochs()
    p.replicas = [1, 2, 3]
    return p


def _build(tmp_path, name: str, broker_id: int, history) -> Partition:
    """A replica whose log holds, per (leader epoch, values), one batch per value led in that epoch."""
    p = _open(tmp_path / name / "t-0", broker_id)
    for epoch, values in history:
        p.become_leader(PartitionState(leader=broker_id, leader_epoch=epoch, isr=[broker_id]))
        for v in values:
            data = make_batch([v])
            p.append_as_leader(data, records.validate_produce_batch(data))
    return p


def _values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


class _LeaderConn:
    """Answers the fetcher's OffsetForLeaderEpoch requests from a leader Partition, as the leader's handler."""

    def __init__(self, leader: Partition):
        self.leader = leader
        self.asked: list[int] = []

    async def request(self, req, version):
        R = OffsetForLeaderEpochResponse
        topics = []
        for t in req.topics:
            parts = []
            for op in t.partitions:
                self.asked.append(op.leader_epoch)
                if op.current_leader_epoch != self.leader.leader_epoch:
                    parts.append(R.OffsetForLeaderTopicResult.EpochEndOffset(
                        error_code=P.FENCED_LEADER_EPOCH, partition=op.partition, leader_epoch=-1, end_offset=-1))
                    continue
                e, end = self.leader.end_offset_for_epoch(op.leader_epoch)
                parts.append(R.OffsetForLeaderTopicResult.EpochEndOffset(
                    error_code=P.NONE, partition=op.partition, leader_epoch=e, end_offset=end))
            topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        return R(throttle_time_ms=0, topics=topics)

    def close(self) -> None:
        pass


def _follow_and_truncate(follower: Partition, leader: Partition) -> _LeaderConn:
    """The follower follows `leader` at its epoch and runs the fetcher's truncation rounds."""
    follower.become_follower(PartitionState(leader=leader.broker_id, leader_epoch=leader.leader_epoch,
                                            isr=[leader.broker_id]), truncate=False)
    manager = SimpleNamespace(cfg=BrokerConfig(broker_id=follower.broker_id), partitions={TP: follower}, live={})
    f = Fetcher(manager, leader.broker_id)
    f.partitions[TP] = leader.leader_epoch
    f.truncating.add(TP)
    f.conn = _LeaderConn(leader)
    asyncio.run(f._truncate_by_epoch())
    assert TP not in f.truncating
    return f.conn


def test_epoch_cache_is_checkpointed_beside_the_log_and_rebuilt_on_recovery(tmp_path):
    p = _build(tmp_path, "b1", 1, [(3, _values(2, "a")), (5, [])])  # epoch 5 led, nothing written yet
    d = tmp_path / "b1" / "t-0"
    assert p.epochs == [(3, 0), (5, 2)]
    assert read_epoch_checkpoint(str(d)) == [(3, 0), (5, 2)]
    assert (d / EPOCH_CHECKPOINT_NAME).read_text().splitlines() == ["0", "2", "3 0", "5 2"]
    p.log.close()
    # Recovery: the headers prove epoch 3 only; the checkpoint adds the empty epoch 5.
    q = _open(d, 1)
    assert q.epochs == [(3, 0), (5, 2)]
    assert q.end_offset_for_epoch(4) == (3, 2) and q.end_offset_for_epoch(5) == (5, 2)
    # A follower's appends of a newer epoch and a truncation are checkpointed too.
    q.become_follower(PartitionState(leader=2, leader_epoch=6, isr=[2]), truncate=False)
    batch = records.patch_offset_and_epoch(make_batch([b"x"]), 2, 6)
    q.append_as_follower(records.split_batches(batch), leader_hw=0)
    assert read_epoch_checkpoint(str(d)) == [(3, 0), (6, 2)]  # epoch 5 ended without records
    q.truncate_to(1)
    assert q.epochs == [(3, 0)] and read_epoch_checkpoint(str(d)) == [(3, 0)]
    q.log.close()
    # Entries past the log end (a torn tail cut by recovery) are dropped; a garbled file
    # falls back to the headers.
    (d / EPOCH_CHECKPOINT_NAME).write_text("0\n3\n3 0\n7 1\n9 40\n")
    r = _open(d, 1)
    assert r.epochs == [(3, 0), (7, 1)]
    r.log.close()
    (d / EPOCH_CHECKPOINT_NAME).write_text("0\n5\n3 0\n")
    assert _open(d, 1).epochs == [(3, 0)]


def test_a_follower_keeps_what_its_stale_hw_would_have_cut(tmp_path, caplog):
    """The issue's run, in small: HW 5 on the follower, 6 records on both, leader moved at offset 6."""
    follower = _build(tmp_path, "b2", 2, [(1, _values(6, "a"))])
    follower.hw = 5  # it learned the old leader's HW (6) one fetch too late
    leader = _build(tmp_path, "b3", 3, [(1, _values(6, "a")), (2, _values(2, "b"))])
    caplog.set_level(logging.INFO, logger="broker.fetcher")
    _follow_and_truncate(follower, leader)
    assert follower.leo == 6, "the record at offset 5, committed by the old leader, must stay"
    assert "no truncation of t-0 at log end 6 (leader epoch 1 ends at 6 on leader 3; follower epoch 2)" \
        in caplog.text


def test_a_follower_truncates_exactly_to_the_divergence_point(tmp_path, caplog):
    # An old leader wrote 8 records in epoch 1; the new leader had only 6 of them and wrote its own.
    follower = _build(tmp_path, "b1", 1, [(1, _values(8, "a"))])
    leader = _build(tmp_path, "b2", 2, [(1, _values(6, "a")), (2, _values(3, "b"))])
    caplog.set_level(logging.INFO, logger="broker.partition")
    conn = _follow_and_truncate(follower, leader)
    assert conn.asked == [1] and follower.leo == 6 and follower.epochs == [(1, 0)]
    assert "TRUNCATING t-0 to 6 (log end 8; leader 2, epoch 2; reason: leader epoch; leader epoch 1 ends at 6 " \
           "on leader 2" in caplog.text


def test_more_rounds_when_the_leader_never_had_the_followers_epoch(tmp_path, caplog):
    # The follower led epoch 3 (offsets 4..7) that no one else saw; the leader has epochs 1, 2, 4.
    follower = _build(tmp_path, "b1", 1, [(1, _values(4, "a")), (3, _values(4, "c"))])
    leader = _build(tmp_path, "b2", 2, [(1, _values(4, "a")), (2, _values(2, "b")), (4, _values(1, "d"))])
    caplog.set_level(logging.INFO, logger="broker.partition")
    conn = _follow_and_truncate(follower, leader)
    # Epoch 3 -> the leader's 2 (ends at 6), which the follower never had: ask again about epoch 1.
    assert conn.asked == [3, 1]
    assert follower.leo == 4 and follower.epochs == [(1, 0)]
    assert "TRUNCATING t-0 to 4 (log end 8; leader 2, epoch 4; reason: leader epoch; leader epoch 1 ends at 4 " \
           "on leader 2" in caplog.text


@pytest.mark.parametrize("follower_history, leader_history, expected", [
    ([(0, _values(3, "a"))], [(2, _values(2, "b"))], 0),  # the leader has no epoch at or below 0
    ([(3, _values(3, "c"))], [(1, _values(2, "a")), (4, [])], 0),  # the follower has none at or below 1
    ([(1, _values(3, "a"))], [(1, _values(5, "a")), (2, [])], 3),  # a follower behind: nothing to cut
    ([], [(1, _values(5, "a"))], 0),  # an empty follower
])
def test_divergence_edge_cases(tmp_path, follower_history, leader_history, expected):
    follower = _build(tmp_path, "b1", 1, follower_history)
    leader = _build(tmp_path, "b2", 2, leader_history)
    _follow_and_truncate(follower, leader)
    assert follower.leo == expected


def _manager(tmp_path, follower: Partition, scheme: str):
    cfg = BrokerConfig(broker_id=follower.broker_id, data_dir=str(tmp_path / "mgr"), replica_truncation=scheme)
    metadata = SimpleNamespace(topics={"t": {0: [1, 2, 3]}}, czxid=7, session_ok=True, live={})
    rm = ReplicaManager(cfg, metadata)
    rm.partitions[TP] = follower
    return rm


@pytest.mark.parametrize("scheme", ["leader-epoch", "high-watermark"])
def test_coalesced_watch_leader_a_b_a_no_longer_keeps_a_diverged_tail(tmp_path, scheme):
    """Follower 3 follows A (broker 1) at epoch 1 and misses B's epoch 2 (ZooKeeper coalesced the
    watch): the next state it sees is A again, same incarnation, epoch 3.  Meanwhile A had lost its
    last two records to B's log, so 3's tail at 6..7 is not on A."""
    follower = _build(tmp_path, "b3", 3, [(1, _values(8, "a"))])
    a_state = PartitionState(leader=1, leader_epoch=1, isr=[1, 3], incarnations={1: 100, 3: 7})
    # A: led epoch 1 with 6 of those records, followed B (epoch 2, one record of B's), leads epoch 3.
    a = _build(tmp_path, "b1", 1, [(1, _values(6, "a"))])
    a.become_follower(PartitionState(leader=2, leader_epoch=2, isr=[2, 1]), truncate=False)
    a.append_as_follower(records.split_batches(records.patch_offset_and_epoch(make_batch([b"b0"]), 6, 2)), 0)
    a.become_leader(PartitionState(leader=1, leader_epoch=3, isr=[1, 3]))
    assert a.epochs == [(1, 0), (2, 6), (3, 7)] and a.end_offset_for_epoch(1) == (1, 6)

    async def scenario():
        rm = _manager(tmp_path, follower, scheme)
        rm.apply_state(TP, a_state)
        rm.apply_state(TP, PartitionState(leader=1, leader_epoch=3, isr=[1, 3], incarnations={1: 100, 3: 7}))
        fetcher = rm.fetchers[1]
        try:
            if scheme == "high-watermark":
                # The seeds' scheme: same leader incarnation, so no truncation at all.
                assert TP not in fetcher.truncating
                return
            assert TP in fetcher.truncating, "a new epoch from the same leader must be checked as well"
            fetcher.task.cancel()
            fetcher.conn = _LeaderConn(a)
            await fetcher._truncate_by_epoch()
        finally:
            for f in rm.fetchers.values():
                f.stop()

    asyncio.run(scenario())
    if scheme == "high-watermark":
        assert follower.leo == 8, "the known hole: the diverged tail stays"
    else:
        assert follower.leo == 6


# ----------------------------------------------------------------------------------------------
# real brokers
# ----------------------------------------------------------------------------------------------

SAFE = {"default.replication.factor": "3", "min.insync.replicas": "2"}


def _replica_fetch(conn, replica: int, topic: str, offset: int, epoch: int):
    F = FetchRequest
    resp = conn.request(F(
        replica_id=replica, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[F.FetchTopic.FetchPartition(
            partition=0, current_leader_epoch=epoch, fetch_offset=offset, log_start_offset=0,
            partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""), 11)
    return resp.responses[0].partitions[0]


@pytest.mark.integration
def test_stale_and_future_epoch_replica_fetches_are_refused(make_cluster):
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("fence", partitions=1, replication_factor=3)
    produce(cluster.bootstrap, "fence", range(10), {"acks": "all"})
    leader = cluster.leader("fence", 0)
    other, third = [b for b in cluster.brokers if b != leader]
    # The controller drops a dead follower from the ISR under a new epoch.
    cluster.kill(third)
    wait_for(lambda: third not in cluster.isr("fence", 0), 30, 0.1, "the ISR shrink")
    epoch = cluster.state("fence", 0)["leader_epoch"]
    assert epoch >= 1
    with SyncConnection("127.0.0.1", cluster.brokers[leader].port) as conn:
        # (At the leader's log end, so the fake fetches do not make `other` look behind.)
        wait_for(lambda: _replica_fetch(conn, other, "fence", 10, epoch).error_code == 0, 10, 0.1,
                 "the leader at the new epoch")
        stale = _replica_fetch(conn, other, "fence", 0, epoch - 1)
        assert stale.error_code == P.FENCED_LEADER_EPOCH and not stale.records, "a stale replica is not served"
        future = _replica_fetch(conn, other, "fence", 0, epoch + 1)
        assert future.error_code == P.UNKNOWN_LEADER_EPOCH and not future.records
        # The leader fenced itself, asked ZooKeeper, found epoch `epoch` still its own, and went on.
        log = lambda: cluster.log_text(leader)  # noqa: E731
        wait_for(lambda: f"learned of epoch {epoch + 1} (fetch by replica {other})" in log(), 10, 0.1,
                 "the FENCED line")
        wait_for(lambda: f"UNFENCED fence-0: epoch {epoch + 1} was not real" in log(), 10, 0.1,
                 "the UNFENCED line")
    acked, failed = produce(cluster.bootstrap_of(leader, other), "fence", range(10, 20), {"acks": "all"})
    assert len(acked) == 10 and not failed


@pytest.mark.integration
def test_confluent_kafka_keeps_producing_and_consuming_across_a_leader_change(make_cluster):
    cluster = make_cluster(3, settings={**SAFE, "zookeeper.session.timeout.ms": "3000"})
    cluster.create_topic("move", partitions=1, replication_factor=3)
    client_log = logging.getLogger("test.librdkafka")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    client_log.addHandler(Keep())
    client_log.setLevel(logging.DEBUG)
    consumed: list[tuple[int, int]] = []
    errors: list[str] = []
    stop = threading.Event()

    def consume():
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "mover", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "debug": "fetch,topic",
                      "logger": client_log, "topic.metadata.refresh.interval.ms": 1000})
        c.assign([TopicPartition("move", 0, 0)])
        try:
            while not stop.is_set():
                for m in c.consume(1000, 0.2):
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            errors.append(str(m.error()))
                        continue
                    consumed.append((m.offset(), int(m.value())))
        finally:
            c.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    prod = BackgroundProducer(cluster.bootstrap, "move", {"acks": "all", "enable.idempotence": True},
                              rate_sleep=0.002).start()
    wait_for(lambda: len(consumed) > 200, 30, 0.1, "records read before the leader change")
    old = cluster.leader("move", 0)
    epoch_before = cluster.state("move", 0)["leader_epoch"]
    cluster.kill(old)
    wait_for(lambda: cluster.leader("move", 0) not in (-1, old), 30, 0.1, "a new leader")
    acked_at_change = len(prod.acked)
    wait_for(lambda: len(prod.acked) > acked_at_change + 200, 30, 0.1, "acks from the new leader")
    cluster.start_broker(old)  # it comes back as a follower and truncates by epoch
    cluster.wait_registered([old])
    wait_for(lambda: old in cluster.isr("move", 0), 30, 0.2, "the old leader back in the ISR")
    time.sleep(1)
    assert prod.stop() == 0
    acked = {v for v, _ in prod.acked.items()}
    wait_for(lambda: acked <= {v for _, v in consumed}, 30, 0.2, "every acknowledged value read")
    stop.set()
    reader.join(10)
    offsets = [o for o, _ in consumed]
    assert offsets == sorted(set(offsets)), "the consumer saw offsets go back or repeat"
    assert not errors, errors[:5]
    assert cluster.state("move", 0)["leader_epoch"] > epoch_before
    # librdkafka validated its position with OffsetForLeaderEpoch after the leader change (it trusts
    # the epochs in Metadata from v9 on, which the broker therefore advertises).
    assert any("querying broker for epoch validation" in ln for ln in lines)
    assert any("offset and epoch validation succeeded" in ln for ln in lines), \
        [ln for ln in lines if "VALID" in ln][:5]
    restarted = cluster.log_text(old)
    assert "no truncation of move-0" in restarted or "TRUNCATING move-0" in restarted
    for b in cluster.brokers:
        cluster.stop_broker(b)
    logs = {b: log_values(cluster, b, "move", 0) for b in cluster.brokers}
    assert logs[old] == logs[cluster_leader_after(logs, old)]


def cluster_leader_after(logs: dict, old: int) -> int:
    """Any replica other than `old` (all must agree once caught up)."""
    others = [b for b in logs if b != old]
    assert all(logs[b] == logs[others[0]] for b in others)
    return others[0]


def test_a_controller_that_resigned_with_its_session_alive_takes_the_role_up_again():
    """Cut off from ZooKeeper, a broker steps down from its leaderships; if the session survives, its
    /controller node does too, and nobody else can become controller: it must take the role up again."""
    class FakeZk:
        client_id = (42, b"")

        def create(self, path, data, **kw):
            raise NodeExistsError()

        def get(self, path):
            if path == Z.CONTROLLER:
                return json.dumps({"brokerid": self.holder}).encode(), SimpleNamespace(
                    ephemeralOwner=self.owner, version=0, czxid=5)
            return b"3", SimpleNamespace(version=1)

        def set(self, path, data, version):
            return SimpleNamespace(version=version + 1)

    zk = FakeZk()
    zk.holder, zk.owner = 1, 42
    c = Controller(zk, 1, unclean=False, elect_any_bug=False)
    assert c.try_elect() and c.active and c.epoch == 4
    other = FakeZk()
    other.holder, other.owner = 2, 7  # another broker's node: not ours to take
    assert not Controller(other, 1, unclean=False, elect_any_bug=False).try_elect()
