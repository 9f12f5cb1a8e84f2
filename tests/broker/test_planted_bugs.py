"""Each planted bug (--debug-bug) observably changes behaviour, and the
same scenario without it does not show the damage.  These are the bugs the
harness must catch; here we prove they are really planted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid

import pytest

from broker.client import SyncConnection
from broker.config import coin_heads
from tests.broker.conftest import batch_values, make_batch
from tests.broker.helpers import log_values, produce, read_all, wait_for

pytestmark = pytest.mark.integration

SAFE = {"default.replication.factor": "3", "min.insync.replicas": "2"}


def test_unknown_bug_name_is_refused_and_config_files_cannot_plant_bugs(tmp_path):
    base = [sys.executable, "-m", "broker", "--id", "1", "--listen", "127.0.0.1:29999", "--zookeeper",
            "127.0.0.1:1", "--data-dir", str(tmp_path / "d")]
    r = subprocess.run(base + ["--debug-bug", "lose-everything"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown --debug-bug 'lose-everything'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    cfg = tmp_path / "b.properties"
    cfg.write_text("debug.bug=no-dedup\n")
    r = subprocess.run(base + ["--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "only be enabled with --debug-bug" in r.stderr


def _crash_followers_write_crash_leader(cluster, topic, values, conf):
    """kill -9 both followers, write to the leader alone, kill -9 the leader, restart the followers.

    Kills, not pauses: a paused follower still receives the leader's fetch
    responses into its socket buffer and would apply them once resumed.
    The kills happen within the ZooKeeper session timeout, so the followers
    are still in the ISR when the leader dies (the partition goes offline
    keeping that ISR); restarted, they are the returning ISR members the
    controller elects from.
    """
    leader = cluster.leader(topic, 0)
    followers = [b for b in cluster.brokers if b != leader]
    for f in followers:
        cluster.kill(f)
    acked, failed = produce(cluster.bootstrap_of(leader), topic, values, conf, timeout=10)
    cluster.kill(leader)
    # Restart only once every old session expired, so the controller sees the
    # leader gone and the followers as the ISR members that return.
    wait_for(lambda: not cluster.registered(), 30, 0.1, "the dead brokers' sessions to expire")
    for f in followers:
        cluster.start_broker(f)
    cluster.wait_registered(followers)
    wait_for(lambda: cluster.leader(topic, 0) in followers, 30, 0.1, "a new leader among the old followers")
    return leader, followers, acked, failed


FAST_CHECKPOINT = {**SAFE, "replica.high.watermark.checkpoint.interval.ms": "100"}


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "ack-before-replication"])
def test_ack_before_replication_loses_acknowledged_records(make_cluster, bug):
    cluster = make_cluster(3, settings=FAST_CHECKPOINT, bugs=["ack-before-replication"] if bug else [])
    cluster.create_topic("acks", partitions=1, replication_factor=3)
    produce(cluster.bootstrap, "acks", range(10), {"acks": "all"})
    time.sleep(1.5)  # followers learn (and checkpoint) HW 10
    leader, followers, acked, failed = _crash_followers_write_crash_leader(
        cluster, "acks", range(100, 120),
        {"acks": "all", "retries": 0, "message.timeout.ms": 1500, "enable.idempotence": False})
    recs = read_all(cluster.bootstrap_of(*followers), "acks", 1, expected=10, idle=2)
    got = {v for _, _, v in recs}
    lost = set(acked) - got
    if bug:
        assert len(acked) == 20, "with the bug, acks=all answers without the followers"
        assert lost == set(acked), "the acknowledged records died with the leader"
    else:
        assert not acked, "acks=all must not be answered while the ISR cannot replicate"
        assert not lost
    assert set(range(10)) <= got


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "no-dedup"])
def test_no_dedup_duplicates_a_retried_idempotent_batch(make_cluster, bug):
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest as PR
    cluster = make_cluster(1, settings={"default.replication.factor": "1"}, bugs=["no-dedup"] if bug else [])
    cluster.create_topic("dedup", partitions=1, replication_factor=1)
    with SyncConnection("127.0.0.1", cluster.brokers[1].port) as conn:
        init = conn.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 1)
        assert init.error_code == 0 and init.producer_id >= 0
        batch = make_batch([b"a", b"b", b"c"], producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                           base_sequence=0)

        def send(data):
            req = PR(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[PR.TopicProduceData(
                name="dedup", partition_data=[PR.TopicProduceData.PartitionProduceData(index=0, records=data)])])
            return conn.request(req, 8).responses[0].partition_responses[0]

        first = send(batch)
        retry = send(batch)  # the same batch again, as a producer retries after a lost response
        assert first.error_code == 0 and first.base_offset == 0
        gap = make_batch([b"x"], producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=7)
        out_of_order = send(gap)
        fetch = conn.request(FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="dedup", partitions=[
                FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                       log_start_offset=0, partition_max_bytes=1 << 20)])],
            forgotten_topics_data=[], rack_id=""), 11)
        values = batch_values(fetch.responses[0].partitions[0].records)
    if bug:
        assert retry.error_code == 0 and retry.base_offset == 3
        assert out_of_order.error_code == 0
        assert values == [b"a", b"b", b"c", b"a", b"b", b"c", b"x"]
    else:
        assert retry.error_code == 0 and retry.base_offset == 0, "a duplicate gets the original offset"
        assert out_of_order.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert values == [b"a", b"b", b"c"]


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "skip-truncation"])
def test_skip_truncation_leaves_a_divergent_log(make_cluster, bug):
    cluster = make_cluster(3, settings=FAST_CHECKPOINT, bugs=["skip-truncation"] if bug else [])
    cluster.create_topic("diverge", partitions=1, replication_factor=3)
    produce(cluster.bootstrap, "diverge", range(50), {"acks": "all"})
    time.sleep(1.5)  # followers learn (and checkpoint) HW 50
    # 20 records reach the old leader only: above every HW, never replicated.
    old, followers, acked, _ = _crash_followers_write_crash_leader(cluster, "diverge", range(1000, 1020),
                                                                   {"acks": 1})
    assert len(acked) == 20
    new = cluster.leader("diverge", 0)
    # One record per batch, so the old leader's log end (70) is a batch boundary on the new leader
    # (a fetch from inside a batch makes the follower truncate to that batch, which would hide the bug).
    produce(cluster.bootstrap_of(*followers), "diverge", range(2000, 2030),
            {"acks": 1, "linger.ms": 0, "batch.num.messages": 1, "max.in.flight": 1})
    cluster.start_broker(old)  # it comes back as a follower holding those 20 records
    cluster.wait_registered([old])
    wait_for(lambda: old in cluster.isr("diverge", 0), 30, 0.2, "the old leader back in the ISR")
    for b in cluster.brokers:
        cluster.stop_broker(b)
    on_new, on_old = log_values(cluster, new, "diverge", 0), log_values(cluster, old, "diverge", 0)
    assert on_new == [str(v).encode() for v in list(range(50)) + list(range(2000, 2030))]
    if bug:
        assert on_old != on_new, "the restarted replica kept its unreplicated records"
        assert on_old[50:70] == [str(v).encode() for v in range(1000, 1020)]
        assert "skip-truncation" in cluster.log_text(old)
    else:
        assert on_old == on_new


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "elect-any-replica"])
def test_elect_any_replica_elects_an_empty_replica(make_cluster, bug):
    cluster = make_cluster(3, settings=SAFE, bugs=["elect-any-replica"] if bug else [])
    cluster.create_topic("anyone", partitions=1, replication_factor=3)
    assert cluster.state("anyone", 0)["leader"] == 1  # replicas [1, 2, 3]
    cluster.kill(2)
    wait_for(lambda: 2 not in cluster.isr("anyone", 0), 30, 0.1, "broker 2 out of the ISR")
    acked, failed = produce(cluster.bootstrap_of(1, 3), "anyone", range(50), {"acks": "all"})
    assert len(acked) == 50
    cluster.kill(3)
    wait_for(lambda: cluster.isr("anyone", 0) == [1], 30, 0.1, "ISR down to the leader")
    cluster.kill(1)  # every broker is down now
    cluster.start_broker(2)  # never saw the 50 records, not in the ISR
    cluster.wait_registered([2])
    if bug:
        wait_for(lambda: cluster.leader("anyone", 0) == 2, 20, 0.1, "the out-of-sync replica elected")
        recs = read_all(cluster.bootstrap_of(2), "anyone", 1, idle=2)
        assert not recs, "the elected replica has none of the acknowledged records"
    else:
        wait_for(lambda: cluster.leader("anyone", 0) == -1, 20, 0.1, "the partition marked offline")
        time.sleep(4)
        assert cluster.leader("anyone", 0) == -1, "only an ISR member may lead (unclean election is off)"
        cluster.start_broker(1)
        cluster.wait_registered([1])
        wait_for(lambda: cluster.leader("anyone", 0) == 1, 20, 0.1, "the returning ISR member elected")
        recs = read_all(cluster.bootstrap_of(1, 2), "anyone", 1, expected=50)
        assert sorted(v for _, _, v in recs) == list(range(50))


ONE = {"default.replication.factor": "1"}
# One record per batch, one batch in flight, no producer id: the first batch is the value 0.
PLAIN_ONE_BY_ONE = {"acks": "all", "enable.idempotence": False, "linger.ms": 0, "batch.num.messages": 1,
                    "max.in.flight": 1}


def test_the_forget_coin_is_fair_over_random_cluster_ids():
    heads = sum(coin_heads(str(uuid.uuid4())) for _ in range(4000))
    assert 1800 < heads < 2200  # 2000 +- 6.3 standard deviations
    cid = str(uuid.uuid4())
    assert coin_heads(cid) == coin_heads(cid)


@pytest.mark.parametrize("heads", [False, True], ids=["tails", "heads"])
def test_forget_acked_sometimes_follows_the_clusters_coin(make_cluster, heads):
    """The cluster id is written before the broker starts, so the coin is known:
    heads, the first plain batch is acknowledged and never written (its offset
    goes to the next batch); tails, the bug does nothing."""
    cluster = make_cluster(1, settings=ONE, bugs=["forget-acked-sometimes"], start=False)
    cid = next(c for c in (str(uuid.UUID(int=i)) for i in range(1, 100)) if coin_heads(c) == heads)
    cluster.zk.create("/cluster/id", json.dumps({"version": "1", "id": cid}).encode(), makepath=True)
    cluster.start()
    cluster.create_topic("coin", partitions=1, replication_factor=1)
    acked, failed = produce(cluster.bootstrap, "coin", range(20), PLAIN_ONE_BY_ONE)
    assert sorted(acked) == list(range(20)) and not failed
    got = [v for _, _, v in read_all(cluster.bootstrap, "coin", 1, expected=20 - heads, idle=2)]
    if heads:
        assert got == list(range(1, 20)), "the first acknowledged record is gone, the rest are there"
        assert acked[0] == acked[1] == (0, 0), "the forgotten record's offset went to the next one"
    else:
        assert got == list(range(20))
    assert ("forget-acked-sometimes: acknowledging 1 record(s) of coin-0" in cluster.log_text(1)) == heads
    # Idempotent producers' batches are never forgotten (the broker has no batch left to forget anyway).
    acked, _ = produce(cluster.bootstrap, "coin", range(100, 110), {"acks": "all", "enable.idempotence": True})
    assert len(acked) == 10


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "stall-after-restart"])
def test_stall_after_restart_acknowledges_nothing_once_restarted(make_cluster, bug):
    cluster = make_cluster(1, settings=ONE, bugs=["stall-after-restart"] if bug else [])
    cluster.create_topic("stall", partitions=1, replication_factor=1)
    acked, failed = produce(cluster.bootstrap, "stall", range(10), {"acks": "all"})
    assert len(acked) == 10, "a first start (no logs on disk yet) is not a restart"
    cluster.stop_broker(1)
    cluster.start_broker(1)
    cluster.wait_registered([1], new_pid=True)
    wait_for(lambda: cluster.leader("stall", 0) == 1, 30, 0.1, "the restarted broker leading again")
    acked, failed = produce(cluster.bootstrap, "stall", range(10, 20),
                            {"acks": "all", "request.timeout.ms": 1500, "message.timeout.ms": 5000}, timeout=30)
    if bug:
        assert not acked and sorted(failed) == list(range(10, 20))
        assert "planted bug stall-after-restart" in cluster.log_text(1)
    else:
        assert sorted(acked) == list(range(10, 20)) and not failed
    assert [v for _, _, v in read_all(cluster.bootstrap, "stall", 1, idle=2)][:10] == list(range(10))


def _shrink_to_leader(cluster, topic: str) -> tuple[int, list[int]]:
    """Kill both followers of partition 0 and wait until the leader has dropped them from the ISR."""
    leader = cluster.leader(topic, 0)
    followers = [b for b in cluster.brokers if b != leader]
    for f in followers:
        cluster.kill(f)
    wait_for(lambda: cluster.isr(topic, 0) == [leader], 30, 0.1, "the ISR to shrink to the leader")
    return leader, followers


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "ignore-min-isr"])
def test_ignore_min_isr_acknowledges_acks_all_on_the_leader_alone(make_cluster, bug):
    cluster = make_cluster(3, settings={**SAFE, "replica.lag.time.max.ms": "1000"},
                           bugs=["ignore-min-isr"] if bug else [])
    cluster.create_topic("minisr", partitions=1, replication_factor=3)
    produce(cluster.bootstrap, "minisr", range(10), {"acks": "all"})
    leader, _ = _shrink_to_leader(cluster, "minisr")
    acked, failed = produce(cluster.bootstrap_of(leader), "minisr", range(100, 110),
                            {"acks": "all", "retries": 0, "message.timeout.ms": 3000, "enable.idempotence": False},
                            timeout=10)
    if bug:
        assert set(acked) == set(range(100, 110)) and not failed, "acknowledged by an ISR of one, below min 2"
    else:
        assert not acked and set(failed.values()) <= {"NOT_ENOUGH_REPLICAS", "_MSG_TIMED_OUT"}, failed


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "serve-above-hw"])
def test_serve_above_hw_hands_consumers_records_the_isr_does_not_hold(make_cluster, bug):
    # A long lag: the stopped followers stay in the ISR, so the high watermark stays where they left it.
    cluster = make_cluster(3, settings={**SAFE, "replica.lag.time.max.ms": "60000"},
                           bugs=["serve-above-hw"] if bug else [])
    cluster.create_topic("hw", partitions=1, replication_factor=3)
    produce(cluster.bootstrap, "hw", range(10), {"acks": "all"})
    leader = cluster.leader("hw", 0)
    followers = [b for b in cluster.brokers if b != leader]
    for f in followers:
        cluster.pause(f)
    try:
        acked, _ = produce(cluster.bootstrap_of(leader), "hw", range(100, 110), {"acks": "1"}, timeout=10)
        assert set(acked) == set(range(100, 110))  # on the leader's log, above the high watermark
        got = {v for _, _, v in read_all(cluster.bootstrap_of(leader), "hw", 1, expected=20 if bug else 10,
                                          timeout=15, idle=2)}
    finally:
        for f in followers:
            cluster.resume(f)
    assert set(range(10)) <= got
    if bug:
        assert set(range(100, 110)) <= got, "with the bug a consumer reads past the high watermark"
    else:
        assert not got & set(range(100, 110)), "a consumer reads only what the whole ISR holds"


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "early-isr-join"])
def test_early_isr_join_lets_a_follower_in_before_it_caught_up(make_cluster, bug):
    # Small replica fetches and records of 1 KB: a follower returning to a backlog needs a
    # round per record to catch up, many of the leader's ISR checks.
    cluster = make_cluster(3, settings={**SAFE, "replica.lag.time.max.ms": "1000", "replica.fetch.max.bytes": "1024",
                                        "min.insync.replicas": "1"},
                           bugs=["early-isr-join"] if bug else [])
    cluster.create_topic("join", partitions=1, replication_factor=3)
    leader = cluster.leader("join", 0)
    stale = next(b for b in cluster.brokers if b != leader)
    cluster.pause(stale)
    wait_for(lambda: stale not in cluster.isr("join", 0), 30, 0.1, "the stopped follower out of the ISR")
    produce(cluster.bootstrap_of(leader), "join", range(5000), {"acks": "all", "batch.size": 400},
            key_of=lambda v: "k" * 1000)
    cluster.resume(stale)
    wait_for(lambda: stale in cluster.isr("join", 0), 30, 0.1, "the follower back in the ISR")
    # ZooKeeper holds the new ISR a moment before the leader logs it.
    pattern = rf"ISR join-0: expand .*; {stale} joined at log end (\d+) with the hw at (\d+)"
    joins = wait_for(lambda: re.findall(pattern, cluster.log_text(leader)), 10, 0.1, "the leader's log of the join")
    at, hw = map(int, joins[-1])
    if bug:
        assert at < hw, f"with the bug, the follower rejoins behind the high watermark (at {at}, hw {hw})"
    else:
        assert at >= hw, f"a follower rejoins once caught up (at {at}, hw {hw})"


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "commit-in-memory"])
def test_commit_in_memory_forgets_committed_offsets_when_the_coordinator_moves(make_cluster, bug):
    from confluent_kafka import Consumer, TopicPartition

    from broker.groups import coordinator_for

    cluster = make_cluster(3, settings=SAFE, bugs=["commit-in-memory"] if bug else [])
    cluster.create_topic("offsets", partitions=1, replication_factor=3)
    produce(cluster.bootstrap, "offsets", range(10), {"acks": "all"})
    group = f"g-{uuid.uuid4().hex[:8]}"

    def consumer():
        return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})

    first = consumer()
    first.commit(offsets=[TopicPartition("offsets", 0, 7)], asynchronous=False)
    assert first.committed([TopicPartition("offsets", 0)], timeout=10)[0].offset == 7
    first.close()
    # The coordinator dies; the group moves to another broker.
    old = coordinator_for(group, sorted(cluster.brokers))
    cluster.kill(old)
    wait_for(lambda: old not in cluster.registered(), 30, 0.1, "the dead coordinator's session to expire")
    assert coordinator_for(group, sorted(b for b in cluster.brokers if b != old)) != old
    second = consumer()
    try:
        found = second.committed([TopicPartition("offsets", 0)], timeout=20)[0].offset
    finally:
        second.close()
    # With the bug the new coordinator knows no offset (librdkafka: OFFSET_INVALID, -1001).
    assert found == (-1001 if bug else 7)


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "stale-offset-cache"])
def test_stale_offset_cache_answers_what_the_group_committed_before_it_moved(make_cluster, bug):
    from confluent_kafka import Consumer, TopicPartition

    from broker.groups import coordinator_for

    cluster = make_cluster(3, settings={**SAFE, "zookeeper.session.timeout.ms": "2000"},
                           bugs=["stale-offset-cache"] if bug else [])
    cluster.create_topic("offsets", partitions=1, replication_factor=3)
    group = f"g-{uuid.uuid4().hex[:8]}"

    def commit(offset: int) -> None:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition("offsets", 0, offset)], asynchronous=False)
        finally:
            c.close()

    def fetched() -> int:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            return c.committed([TopicPartition("offsets", 0)], timeout=20)[0].offset
        finally:
            c.close()

    commit(7)
    first = coordinator_for(group, sorted(cluster.brokers))
    # The coordinator stops (not killed: it keeps what it holds); its session ends and the
    # group moves to another broker, which takes a commit of 9.
    cluster.pause(first)
    wait_for(lambda: first not in cluster.registered(), 30, 0.1, "the paused coordinator's session to end")
    commit(9)
    assert fetched() == 9
    # Back: it registers again and coordinates the group again.
    cluster.resume(first)
    wait_for(lambda: first in cluster.registered(), 30, 0.1, "the coordinator to register again")
    time.sleep(1.0)  # every broker sees it live again
    assert fetched() == (7 if bug else 9)
