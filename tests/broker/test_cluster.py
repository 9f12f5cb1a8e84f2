"""The own broker on a real 3-node local cluster with a real ZooKeeper and
unmodified confluent-kafka clients: delivery, failover, truncation,
min.insync.replicas, controller failover.
"""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, Producer
from confluent_kafka.admin import AdminClient
from kafka.protocol.metadata import MetadataRequest

from broker.client import SyncConnection

from tests.broker.helpers import BackgroundProducer, check_partition_offsets, log_values, produce, read_all, wait_for

pytestmark = pytest.mark.integration

SAFE = {"default.replication.factor": "3", "min.insync.replicas": "2", "num.partitions": "3"}


def test_100k_records_acks_all_plain_and_idempotent_assign_and_group(make_cluster):
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("moves", partitions=3, replication_factor=3)
    half = 50_000
    acked_plain, failed_plain = produce(cluster.bootstrap, "moves", range(0, half),
                                        {"acks": "all", "enable.idempotence": False}, key_of=lambda v: v)
    acked_idem, failed_idem = produce(cluster.bootstrap, "moves", range(half, 2 * half),
                                      {"acks": "all", "enable.idempotence": True}, key_of=lambda v: v)
    assert not failed_plain and not failed_idem
    assert len(acked_plain) + len(acked_idem) == 2 * half
    acked = {**acked_plain, **acked_idem}
    # Every partition got a share (placement and keys spread the load).
    assert {p for p, _ in acked.values()} == {0, 1, 2}

    # assign(): everything exactly once, at the acknowledged positions.
    recs = read_all(cluster.bootstrap, "moves", 3, expected=2 * half)
    values = [v for _, _, v in recs]
    assert len(values) == len(set(values)) == 2 * half, "lost or duplicated records"
    assert all(acked[v] == (p, off) for p, off, v in recs)
    check_partition_offsets(recs)
    # The idempotent producer kept its per-partition order.
    for part in range(3):
        idem = [v for p, _, v in sorted(recs, key=lambda r: r[1]) if p == part and v >= half]
        assert idem == sorted(idem)

    # subscribe() + commits: one member reads part and commits; a second member
    # of the same group resumes exactly at the committed offsets.
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": "movers", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    first = Consumer(conf)
    seen = []
    try:
        first.subscribe(["moves"])
        deadline = time.monotonic() + 60
        while len(seen) < 30_000 and time.monotonic() < deadline:
            for m in first.consume(5000, 0.5):
                assert not m.error(), m.error()
                seen.append(int(m.value()))
        assert len(seen) >= 30_000
        first.commit(asynchronous=False)
    finally:
        first.close()
    second = Consumer(conf)
    try:
        second.subscribe(["moves"])
        deadline = time.monotonic() + 60
        while len(seen) < 2 * half and time.monotonic() < deadline:
            for m in second.consume(5000, 0.5):
                assert not m.error(), m.error()
                seen.append(int(m.value()))
        time.sleep(0.5)
        for m in second.consume(5000, 0.5):
            seen.append(int(m.value()))
    finally:
        second.close()
    assert len(seen) == len(set(seen)) == 2 * half, \
        f"group consumption: {len(seen)} read, {len(set(seen))} distinct"


def test_group_rebalance_splits_partitions_between_members(make_cluster):
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("shared", partitions=3, replication_factor=3)
    produce(cluster.bootstrap, "shared", range(3000), {"acks": "all"}, key_of=lambda v: v)
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": "pair", "enable.auto.commit": True,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    assigned = {1: set(), 2: set()}
    a, b = Consumer(conf), Consumer(conf)
    try:
        a.subscribe(["shared"], on_assign=lambda c, ps: assigned[1].update(p.partition for p in ps),
                    on_revoke=lambda c, ps: assigned[1].difference_update(p.partition for p in ps))
        b.subscribe(["shared"], on_assign=lambda c, ps: assigned[2].update(p.partition for p in ps),
                    on_revoke=lambda c, ps: assigned[2].difference_update(p.partition for p in ps))

        def split():
            a.poll(0.1)
            b.poll(0.1)
            return assigned[1] and assigned[2] and assigned[1] | assigned[2] == {0, 1, 2} \
                and not assigned[1] & assigned[2]
        wait_for(split, 60, 0.0, "two members sharing three partitions")
        # An admin client describes the group as its coordinator holds it (DescribeGroups),
        # and lists it (ListGroups): what kafka-consumer-groups --describe asks.
        from broker.groups import coordinator_for

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

        def described():
            a.poll(0.1)
            b.poll(0.1)
            d = admin.describe_consumer_groups(["pair"])["pair"].result(timeout=10)
            return d if d.state == ConsumerGroupState.STABLE else None
        d = wait_for(described, 30, 0.0, "the group described as stable")
        assert d.coordinator.id == coordinator_for("pair", sorted(cluster.brokers))
        assert sorted(p.partition for m in d.members for p in m.assignment.topic_partitions) == [0, 1, 2]
        assert len(d.members) == 2 and d.partition_assignor == "range"
        listed = admin.list_consumer_groups().result(timeout=10).valid
        assert "pair" in [g.group_id for g in listed]
    finally:
        a.close()
        b.close()


def _leader_log_lines(cluster, bid):
    return [line for line in cluster.log_text(bid).splitlines() if "LEADER" in line or "CONTROLLER" in line]


def test_leader_kill_during_writes_fails_over_without_losing_acked_records(make_cluster):
    # How fast it fails over is a benchmark (`harness bench failover`, docs/benchmarks.md, "Own broker
    # failover"), not asserted here (docs/decisions.md, "Failover timed by a benchmark, not a test").
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("failover", partitions=1, replication_factor=3)
    old_leader = cluster.leader("failover", 0)
    isr_before = cluster.isr("failover", 0)
    bg = BackgroundProducer(cluster.bootstrap, "failover",
                            {"acks": "all", "enable.idempotence": True, "message.timeout.ms": 60000}).start()
    try:
        wait_for(lambda: len(bg.acked) > 2000, 30, 0.05, "writes before the kill")
        cluster.kill(old_leader)
        new_leader = wait_for(lambda: (lambda l: l if l not in (-1, old_leader) else None)(
            cluster.leader("failover", 0)), 15, 0.05, "a new leader")
        assert new_leader in isr_before
        # The new leader serves: a fresh write is acknowledged.
        probe = Producer({"bootstrap.servers": cluster.bootstrap_of(*[b for b in cluster.brokers if b != old_leader]),
                          "acks": "all", "message.timeout.ms": 10000})
        result = {}
        probe.produce("failover", b"-1", on_delivery=lambda e, m: result.update(err=e, done=True))
        probe.flush(12)
        assert result.get("err") is None and result.get("done"), f"probe write failed: {result}"
        time.sleep(2)
    finally:
        left = bg.stop(60)
    assert left == 0
    assert not bg.failed, f"idempotent producer reported failures: {list(bg.failed.items())[:5]}"
    cluster.start_broker(old_leader)
    cluster.wait_registered([old_leader])
    recs = read_all(cluster.bootstrap, "failover", 1, expected=len(bg.acked) + 1)
    got = {v for _, _, v in recs}
    lost = set(bg.acked) - got
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    values = [v for _, _, v in recs if v >= 0]
    assert len(values) == len(set(values)), "duplicates from an idempotent producer"
    assert values == sorted(values), "idempotent producer order broken"
    log = cluster.log_text(new_leader)
    assert re.search(rf"LEADER failover-0: this broker {new_leader} is now leader", log)


@pytest.mark.parametrize("scheme", ["leader-epoch", "high-watermark"])
def test_restarted_broker_truncates_and_rejoins_isr(make_cluster, scheme):
    cluster = make_cluster(3, settings={**SAFE, "replica.high.watermark.checkpoint.interval.ms": "600000",
                                        "replica.truncation": scheme})
    cluster.create_topic("trunc", partitions=1, replication_factor=3)
    leader = cluster.leader("trunc", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    produce(cluster.bootstrap, "trunc", range(100), {"acks": "all"})
    time.sleep(1.5)  # followers learn the HW from the leader's next fetch response (a long poll)
    # A clean stop writes the checkpoint (HW 100) ...
    cluster.stop_broker(follower)
    ckpt = (cluster.brokers[follower].data_dir / "replication-offset-checkpoint").read_text()
    assert "trunc 0 100" in ckpt
    cluster.start_broker(follower)
    cluster.wait_registered([follower])
    wait_for(lambda: follower in cluster.isr("trunc", 0), 30, 0.1, "follower back in the ISR")
    # ... then more records reach the follower, and it dies before checkpointing again.
    produce(cluster.bootstrap, "trunc", range(100, 200), {"acks": "all"})
    cluster.kill(follower)
    cluster.start_broker(follower)
    cluster.wait_registered([follower], new_pid=True)
    if scheme == "high-watermark":
        # The seeds' scheme cuts what the stale checkpoint does not vouch for, and fetches it again.
        wait_for(lambda: "TRUNCATE trunc-0: log end 200 -> 100" in cluster.log_text(follower), 30, 0.1,
                 "truncation to the HW checkpoint")
    else:
        # By leader epoch the leader vouches for all 200: nothing is cut.
        wait_for(lambda: re.search(r"no truncation of trunc-0 at log end 200 \(leader epoch \d+ ends at 200 on leader",
                                   cluster.log_text(follower)), 30, 0.1, "the divergence point asked by epoch")
        assert "TRUNCATE trunc-0" not in cluster.log_text(follower)
    wait_for(lambda: follower in cluster.isr("trunc", 0) and len(cluster.isr("trunc", 0)) == 3, 40, 0.2,
             "the restarted follower rejoining the ISR")
    assert re.search(r"ISR trunc-0: expand .* -> .*", cluster.log_text(cluster.leader("trunc", 0)))
    # It caught up: once stopped, its log holds exactly the leader's records.
    for b in cluster.brokers:
        cluster.stop_broker(b)
    assert log_values(cluster, follower, "trunc", 0) == [str(v).encode() for v in range(200)]
    assert log_values(cluster, leader, "trunc", 0) == [str(v).encode() for v in range(200)]


def leader_isr(cluster, leader: int, topic: str, partition: int) -> list[int] | None:
    """The ISR of `topic`/`partition` as broker `leader` answers a metadata request."""
    conn = SyncConnection("127.0.0.1", cluster.brokers[leader].port)
    try:
        meta = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 1)
    finally:
        conn.close()
    return next((list(p.isr_nodes) for t in meta.topics if t.name == topic for p in t.partitions
                 if p.partition_index == partition), None)


def test_min_insync_replicas_with_two_brokers_down_fails_acks_all(make_cluster):
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("minisr", partitions=1, replication_factor=3)
    leader = cluster.leader("minisr", 0)
    for b in cluster.brokers:
        if b != leader:
            cluster.kill(b)
    # The leader's own view, not ZooKeeper's: it learns of the shrink from a watch, and a
    # produce it takes before that is appended, then refused NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    wait_for(lambda: leader_isr(cluster, leader, "minisr", 0) == [leader], 30, 0.1,
             "the leader to know its ISR shrank to itself")
    acked, failed = produce(cluster.bootstrap_of(leader), "minisr", range(5),
                            {"acks": "all", "retries": 0, "enable.idempotence": False, "message.timeout.ms": 10000})
    assert not acked
    assert set(failed.values()) == {"NOT_ENOUGH_REPLICAS"}, failed
    # acks=1 does not need the ISR.
    acked1, failed1 = produce(cluster.bootstrap_of(leader), "minisr", range(5, 10),
                              {"acks": 1, "retries": 0, "enable.idempotence": False})
    assert len(acked1) == 5 and not failed1


def test_controller_death_moves_the_controller(make_cluster):
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("ctl", partitions=3, replication_factor=3)
    old = cluster.controller()
    cluster.kill(old)
    new = wait_for(lambda: (lambda c: c if c != old else None)(cluster.controller()), 20, 0.1, "a new controller")
    assert new in cluster.brokers and new != old
    # The broker logs the change after it has bumped the controller epoch, a moment later.
    wait_for(lambda: f"CONTROLLER: broker {new} is now the controller" in cluster.log_text(new), 10, 0.1,
             "the new controller's log line")
    # The new controller does its job: partitions the old one led got new leaders.
    wait_for(lambda: all(cluster.leader("ctl", p) not in (-1, old) for p in range(3)), 20, 0.1,
             "leaders re-elected by the new controller")
    acked, failed = produce(cluster.bootstrap_of(*[b for b in cluster.brokers if b != old]), "ctl", range(30),
                            {"acks": "all"})
    assert len(acked) == 30 and not failed
