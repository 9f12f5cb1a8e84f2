"""Transactions (KIP-98) on real brokers with unmodified confluent-kafka
clients: commits and aborts across partitions, read_committed and
read_uncommitted readers, fencing by a second producer of the same
transactional id, offsets committed in a transaction, the last stable
offset, the transaction timeout, a coordinator killed mid-transaction, and
the three planted transaction bugs against their controls.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, OffsetFetchRequest

from broker import zk as Z
from broker.client import SyncConnection
from broker.groups import coordinator_for
from tests.broker.helpers import wait_for

pytestmark = pytest.mark.integration

SAFE = {"default.replication.factor": "3", "min.insync.replicas": "2",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


def txn_producer(bootstrap: str, tid: str, **conf) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **conf})
    p.init_transactions(60)
    return p


def send(p: Producer, topic: str, values, partitions: int) -> None:
    """Produces each value to partition value % partitions and waits for every acknowledgement."""
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
    for v in values:
        p.produce(topic, str(v).encode(), partition=v % partitions, on_delivery=cb)
    assert p.flush(60) == 0
    assert not errors, errors


def transaction(p: Producer, topic: str, values, partitions: int, commit: bool) -> None:
    p.begin_transaction()
    send(p, topic, values, partitions)
    if commit:
        p.commit_transaction(60)
    else:
        p.abort_transaction(60)


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str, idle: float = 3.0,
                timeout: float = 60.0) -> list[int]:
    """Every record value a reader at `isolation` finds from the start of each partition, in read order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 100, "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < idle:
            msgs = c.consume(1000, 0.2)
            for m in msgs:
                assert m.error() is None, m.error()
                out.append(int(m.value()))
            if msgs:
                last = time.monotonic()
        return out
    finally:
        c.close()


def offsets(cluster, topic: str, partition: int) -> tuple[int, int]:
    """(high watermark, last stable offset) of a partition, asked of its leader."""
    leader = cluster.leader(topic, partition)
    R = ListOffsetsRequest
    found = []
    for isolation in (0, 1):
        with SyncConnection("127.0.0.1", cluster.brokers[leader].port) as conn:
            resp = conn.request(R(replica_id=-1, isolation_level=isolation, topics=[R.ListOffsetsTopic(
                name=topic, partitions=[R.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=partition, current_leader_epoch=-1, timestamp=-1)])]), 5)
        pr = resp.topics[0].partitions[0]
        assert pr.error_code == 0, pr
        found.append(pr.offset)
    return found[0], found[1]


def fetch_offset(cluster, group: str, topic: str, partition: int, version: int,
                 require_stable: bool = False) -> tuple[int, int]:
    """(committed offset, error code) of a partition, asked of the group's coordinator with OffsetFetch `version`."""
    R = OffsetFetchRequest
    extra = {"require_stable": require_stable} if version >= 7 else {}
    with SyncConnection("127.0.0.1", cluster.brokers[coordinator_of(cluster, group)].port) as conn:
        resp = conn.request(R(group_id=group, topics=[R.OffsetFetchRequestTopic(name=topic,
                                                                               partition_indexes=[partition])],
                              **extra), version)
    pr = resp.topics[0].partitions[0]
    return pr.committed_offset, pr.error_code


def txn_state(cluster, tid: str) -> dict:
    return json.loads(cluster.zk.get(Z.txn_path(tid))[0])


def coordinator_of(cluster, tid: str) -> int:
    return coordinator_for(tid, list(cluster.registered()))


def test_read_committed_sees_committed_transactions_only(make_cluster):
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("txn", partitions=3, replication_factor=3)
    p = txn_producer(cluster.bootstrap, "t-basic")
    transaction(p, "txn", range(0, 30), 3, commit=True)
    transaction(p, "txn", range(100, 130), 3, commit=False)
    transaction(p, "txn", range(200, 230), 3, commit=True)
    # A transaction ends on the partitions once its markers are written and replicated.
    for part in range(3):
        wait_for(lambda part=part: offsets(cluster, "txn", part)[1] == offsets(cluster, "txn", part)[0], 30,
                 what="the last stable offset to reach the high watermark")
    committed = read_values(cluster.bootstrap, "txn", 3, "read_committed")
    assert sorted(committed) == list(range(0, 30)) + list(range(200, 230))
    everything = read_values(cluster.bootstrap, "txn", 3, "read_uncommitted")
    assert sorted(everything) == list(range(0, 30)) + list(range(100, 130)) + list(range(200, 230))
    st = txn_state(cluster, "t-basic")
    assert st["state"] == "CompleteCommit" and st["partitions"] == []
    # Every transaction left one marker per partition: three control batches each.
    hw = sum(offsets(cluster, "txn", part)[0] for part in range(3))
    assert hw == 90 + 3 * 3


def test_last_stable_offset_stalls_while_a_transaction_is_open(make_cluster):
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("lso", partitions=1, replication_factor=3)
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    plain.produce("lso", b"1", partition=0)
    plain.flush(30)
    p = txn_producer(cluster.bootstrap, "t-lso")
    p.begin_transaction()
    send(p, "lso", [10], 1)
    wait_for(lambda: offsets(cluster, "lso", 0)[0] == 2, 30, what="the open transaction's record replicated")
    hw, first_open = offsets(cluster, "lso", 0)
    assert first_open == 1  # the open transaction's first offset
    # Plain records after the open transaction: replicated, but not stable.
    for v in (11, 12):
        plain.produce("lso", str(v).encode(), partition=0)
    plain.flush(30)
    wait_for(lambda: offsets(cluster, "lso", 0)[0] >= hw + 2, 30, what="the plain records replicated")
    hw, lso = offsets(cluster, "lso", 0)
    assert lso == first_open < hw
    assert sorted(read_values(cluster.bootstrap, "lso", 1, "read_committed", idle=2)) == [1]
    # An admin client (kafka-python's: what an operator's tools ask) describes it, through its coordinator.
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        open_txn = admin.describe_transactions(["t-lso"])["t-lso"]
        with pytest.raises(Exception, match="TransactionalIdNotFound"):
            admin.describe_transactions(["no-such-id"])
    finally:
        admin.close()
    assert open_txn.state.name.lower() == "ongoing" and open_txn.coordinator_id == coordinator_of(cluster, "t-lso")
    assert {(tp.topic, tp.partition) for tp in open_txn.topic_partitions} == {("lso", 0)}
    p.commit_transaction(60)
    wait_for(lambda: offsets(cluster, "lso", 0)[1] == offsets(cluster, "lso", 0)[0] > hw, 30,
             what="the last stable offset to pass the commit marker")
    assert sorted(read_values(cluster.bootstrap, "lso", 1, "read_committed")) == [1, 10, 11, 12]


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "txn-init-forgets-ongoing"])
def test_a_second_producer_fences_the_first(make_cluster, bug):
    """A second producer of the same transactional id aborts the first's open
    transaction. With txn-init-forgets-ongoing it gets a fresh producer id
    instead and the first transaction is never ended: it holds the last stable
    offset of both partitions, past the timeout, and read_committed readers get
    nothing, not even the second producer's committed records."""
    cluster = make_cluster(3, settings=SAFE, bugs=["txn-init-forgets-ongoing"] if bug else [])
    cluster.create_topic("fence", partitions=2, replication_factor=3)
    first = txn_producer(cluster.bootstrap, "t-fence", **{"transaction.timeout.ms": 3000})
    first.begin_transaction()
    send(first, "fence", range(0, 10), 2)
    second = txn_producer(cluster.bootstrap, "t-fence")  # aborts the first's transaction, bumps the epoch
    with pytest.raises(KafkaException) as e:
        first.commit_transaction(30)
    err = e.value.args[0]
    transaction(second, "fence", range(100, 110), 2, commit=True)
    if bug:
        time.sleep(3 * 3.0)  # three of the first's transaction timeouts: still open
        assert all(offsets(cluster, "fence", q)[1] == 0 < offsets(cluster, "fence", q)[0] for q in range(2))
        assert read_values(cluster.bootstrap, "fence", 2, "read_committed", timeout=10.0) == []
        assert any("planted bug txn-init-forgets-ongoing: t-fence" in cluster.log_text(b) for b in cluster.brokers)
        return
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
    wait_for(lambda: all(offsets(cluster, "fence", q)[1] == offsets(cluster, "fence", q)[0] for q in range(2)), 30,
             what="stable partitions")
    assert sorted(read_values(cluster.bootstrap, "fence", 2, "read_committed")) == list(range(100, 110))
    assert sorted(read_values(cluster.bootstrap, "fence", 2, "read_uncommitted")) == \
        list(range(0, 10)) + list(range(100, 110))


def test_offsets_sent_to_a_transaction_are_visible_only_after_commit(make_cluster):
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("in", partitions=1, replication_factor=3)
    cluster.create_topic("out", partitions=1, replication_factor=3)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    for v in range(20):
        plain.produce("in", str(v).encode(), partition=0)
    plain.flush(30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ctp", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ctp"})
    try:
        consumer.subscribe(["in"])
        got = []
        wait_for(lambda: got.extend(m for m in consumer.consume(100, 0.5) if m.error() is None) or len(got) >= 10,
                 60, what="ten input records")
        got = got[:10]
        consumer.seek(TopicPartition("in", 0, got[-1].offset() + 1))
        p = txn_producer(cluster.bootstrap, "t-offsets")

        def committed():
            return probe.committed([TopicPartition("in", 0)], 10)[0].offset

        # An aborted transaction's offsets never become the group's.
        p.begin_transaction()
        send(p, "out", [int(m.value()) for m in got[:5]], 1)
        p.send_offsets_to_transaction([TopicPartition("in", 0, got[4].offset() + 1)],
                                      consumer.consumer_group_metadata(), 30)
        p.abort_transaction(60)
        p.begin_transaction()
        send(p, "out", [int(m.value()) for m in got], 1)
        p.send_offsets_to_transaction([TopicPartition("in", 0, got[-1].offset() + 1)],
                                      consumer.consumer_group_metadata(), 30)
        # Sent, not committed: the group has none; a fetch that requires stable offsets
        # (KIP-447, as librdkafka's read_committed consumers ask) is told to ask again.
        assert fetch_offset(cluster, "ctp", "in", 0, version=5) == (-1, 0)
        assert fetch_offset(cluster, "ctp", "in", 0, version=7, require_stable=True) == (-1, 88)
        assert fetch_offset(cluster, "ctp", "in", 0, version=7, require_stable=False) == (-1, 0)
        p.commit_transaction(60)
        wait_for(lambda: committed() == got[-1].offset() + 1, 30, what="the transaction's offset committed")
        assert sorted(read_values(cluster.bootstrap, "out", 1, "read_committed")) == list(range(10))
    finally:
        consumer.close()
        probe.close()


def test_transaction_timeout_aborts_an_abandoned_transaction(make_cluster):
    cluster = make_cluster(3, settings={**SAFE, "transaction.max.timeout.ms": "60000"})
    cluster.create_topic("abandon", partitions=2, replication_factor=3)
    with pytest.raises(KafkaException):
        # Longer than transaction.max.timeout.ms: refused.
        Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "t-long",
                  "transaction.timeout.ms": 120000}).init_transactions(20)
    p = txn_producer(cluster.bootstrap, "t-abandon", **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    send(p, "abandon", range(10), 2)
    epoch = txn_state(cluster, "t-abandon")["producer_epoch"]
    # Never ended: the coordinator aborts it after its timeout, under a new epoch.
    wait_for(lambda: txn_state(cluster, "t-abandon")["state"] == "CompleteAbort", 30,
             what="the coordinator to abort the expired transaction")
    assert txn_state(cluster, "t-abandon")["producer_epoch"] == epoch + 1
    wait_for(lambda: all(offsets(cluster, "abandon", q)[1] == offsets(cluster, "abandon", q)[0] == 6
                         for q in range(2)), 30, what="abort markers on both partitions")
    assert read_values(cluster.bootstrap, "abandon", 2, "read_committed", idle=2) == []
    assert sorted(read_values(cluster.bootstrap, "abandon", 2, "read_uncommitted")) == list(range(10))
    with pytest.raises(KafkaException):
        p.commit_transaction(20)  # the producer was fenced by the abort


def test_a_new_coordinator_finishes_a_transaction_left_in_prepare_commit(make_cluster):
    """The coordinator dies right after writing PrepareCommit (here: PrepareCommit written
    for it, then kill -9): the next coordinator finds it and writes every marker."""
    cluster = make_cluster(3, settings=SAFE)
    cluster.create_topic("prep", partitions=3, replication_factor=3)
    tid = "t-prepare"
    p = txn_producer(cluster.bootstrap, tid)
    p.begin_transaction()
    send(p, "prep", range(30), 3)
    coordinator = coordinator_of(cluster, tid)
    data, stat = cluster.zk.get(Z.txn_path(tid))
    st = json.loads(data)
    assert st["state"] == "Ongoing" and len(st["partitions"]) == 3
    cluster.kill(coordinator)
    cluster.zk.set(Z.txn_path(tid), json.dumps({**st, "state": "PrepareCommit"}).encode(), version=stat.version)
    wait_for(lambda: txn_state(cluster, tid)["state"] == "CompleteCommit", 60,
             what="another coordinator to complete the commit")
    rest = [b for b in cluster.brokers if b != coordinator]
    assert sorted(read_values(cluster.bootstrap_of(*rest), "prep", 3, "read_committed")) == list(range(30))
    new = coordinator_of(cluster, tid)
    assert new != coordinator and "taken over in state PrepareCommit" in cluster.log_text(new)


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "txn-partial-commit"])
def test_coordinator_killed_mid_transaction(make_cluster, bug):
    """kill -9 the coordinator while a transaction is open; the producer commits through
    the next one, which found the transaction in ZooKeeper. Correct: committed on every
    partition. With txn-partial-commit: on the first partition only."""
    cluster = make_cluster(3, settings=SAFE, bugs=["txn-partial-commit"] if bug else [])
    cluster.create_topic("kill", partitions=3, replication_factor=3)
    tid = "t-kill"
    p = txn_producer(cluster.bootstrap, tid, **{"transaction.timeout.ms": 60000})
    transaction(p, "kill", range(0, 3), 3, commit=True)
    p.begin_transaction()
    send(p, "kill", range(3, 33), 3)
    coordinator = coordinator_of(cluster, tid)
    cluster.kill(coordinator)
    p.commit_transaction(90)
    rest = [b for b in cluster.brokers if b != coordinator]
    new = coordinator_of(cluster, tid)
    assert new in rest
    wait_for(lambda: txn_state(cluster, tid)["state"] == "CompleteCommit", 30, what="the commit completed")
    wait_for(lambda: all(offsets(cluster, "kill", q)[1] == offsets(cluster, "kill", q)[0] for q in range(3)), 30,
             what="stable partitions")
    got = read_values(cluster.bootstrap_of(*rest), "kill", 3, "read_committed")
    committed_parts = {v % 3 for v in got if v >= 3}
    if bug:
        assert len(committed_parts) == 1 and sorted(v for v in got if v >= 3) == \
            [v for v in range(3, 33) if v % 3 in committed_parts]
        assert "planted bug txn-partial-commit" in cluster.log_text(new)
    else:
        assert sorted(got) == list(range(33))
        assert "planted bug txn-partial-commit" not in cluster.log_text(new)


@pytest.mark.parametrize("bug", [False, True], ids=["correct", "txn-serve-aborted"])
def test_serve_aborted_shows_aborted_records_to_read_committed_readers(make_cluster, bug):
    cluster = make_cluster(3, settings=SAFE, bugs=["txn-serve-aborted"] if bug else [])
    cluster.create_topic("aborted", partitions=2, replication_factor=3)
    p = txn_producer(cluster.bootstrap, "t-aborted")
    transaction(p, "aborted", range(0, 10), 2, commit=True)
    transaction(p, "aborted", range(10, 20), 2, commit=False)
    transaction(p, "aborted", range(20, 30), 2, commit=True)
    wait_for(lambda: all(offsets(cluster, "aborted", q)[1] == offsets(cluster, "aborted", q)[0] for q in range(2)),
             30, what="stable partitions")
    got = sorted(read_values(cluster.bootstrap, "aborted", 2, "read_committed"))
    if bug:
        assert got == list(range(30))
        assert any("planted bug txn-serve-aborted: read_committed fetch" in cluster.log_text(b)
                   for b in cluster.brokers)
    else:
        assert got == list(range(0, 10)) + list(range(20, 30))
