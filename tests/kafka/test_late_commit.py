"""A commit Kafka applies after a later one: the finding behind the lost
commit of issue 50's starved-member run (docs/scenarios.md, "A commit the
client was told timed out, applied after a later one"), reproduced with no
client library between the test and the broker.

A broker reads one request of a connection at a time: the next only once
the one ahead is answered. A commit waits for the high watermark of the
`__consumer_offsets` partition, so while a follower stands still, a second
commit pipelined behind the first stays unread in the socket. When the
client gives up and closes that connection, the broker still reads and
applies what was sent on it, once the first is answered: after a commit the
client sent later on a new connection, and already saw acknowledged.
librdkafka does exactly that when a request to the coordinator times out
(`socket.max.fails`, 1 by default, closes the connection) and it resends the
commit on a new one.

The same steps with the second commit sent on the new connection instead
(the control) leave the later commit in place: the closed connection is
what reorders them."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from broker.client import SyncConnection, _frame
from core.waiting import wait_for
from infra import kafka_dist
from lab.loopback_kafka import LoopbackKafka
from tests.support import need

# Kafka's processes live on 127.0.0.1 alone: `make test` runs these beside the namespace clusters.
pytestmark = [pytest.mark.loopback, pytest.mark.slow]

VERSION = "4.4.0"
TOPIC = "t"
OFFSETS = "__consumer_offsets"
COMMIT_VERSION = 8  # OffsetCommit v8: a group's commits with no member (a "simple" consumer's)
SETTINGS = {
    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "1", "min.insync.replicas": "2",
    # The paused follower stays in the ISR (for 30 s), so the high watermark stands still while it is paused,
    # and the commits waiting for it are not answered with a time-out meanwhile (5 s by default).
    "replica.lag.time.max.ms": "30000", "offsets.commit.timeout.ms": "30000",
}


@pytest.fixture(scope="module")
def kafka4(tmp_path_factory):
    """Three nodes of Kafka 4.4.0 on 127.0.0.1 (node 1 also the KRaft
    controller), one offsets partition on all three, and the topic."""
    need(kafka_dist.is_cached(VERSION, kafka_dist.DEFAULT_CACHE), f"Kafka {VERSION}'s jars in .cache/kafka (make setup)")
    with LoopbackKafka(tmp_path_factory.mktemp("late-commit"), nodes=3, version=VERSION,
                       broker_settings=SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 3)]).values():
            future.result(60)
        yield cluster


def commit(group: str, offset: int) -> OffsetCommitRequest:
    partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=f"sent as {offset}")
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[partition])])


def connect(cluster: LoopbackKafka, node_id: int) -> SyncConnection:
    return SyncConnection("127.0.0.1", cluster.node(node_id).port, client_id="late-commit", timeout=60)


def send(conn: SyncConnection, group: str, offset: int, correlation_id: int) -> None:
    """A commit written to the socket without waiting for its answer (pipelined)."""
    conn.send_raw(_frame(commit(group, offset), COMMIT_VERSION, correlation_id, conn.client_id))


def answer(conn: SyncConnection) -> tuple[int, int]:
    """(correlation id, error code) of the next commit answered on the connection."""
    payload = conn.read_frame()
    response = OffsetCommitResponse.decode(payload[5:], version=COMMIT_VERSION)  # past the id and tagged fields
    return int.from_bytes(payload[:4], "big"), response.topics[0].partitions[0].error_code


def committed(cluster: LoopbackKafka, node_id: int, group: str) -> tuple[int, str]:
    conn = connect(cluster, node_id)
    try:
        response = conn.request(OffsetFetchRequest(group_id=group, topics=None), 5)
    finally:
        conn.close()
    (partition,) = [p for t in response.topics for p in t.partitions]
    return partition.committed_offset, partition.metadata


def coordinator_and_follower(cluster: LoopbackKafka, group: str) -> tuple[int, int]:
    """The group's coordinator (the offsets partition's leader) and one of its
    in-sync followers other than node 1 (pausing the KRaft controller would
    stall more than the high watermark), once a first commit was acknowledged."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def first_commit():
        topics = admin.list_topics(timeout=10).topics
        if OFFSETS not in topics:  # looking up a coordinator makes the topic
            conn = connect(cluster, 1)
            try:
                conn.request(FindCoordinatorRequest(key=group, key_type=0), 2)
            finally:
                conn.close()
            return None
        offsets = topics[OFFSETS].partitions[0]
        if offsets.leader < 0 or len(offsets.isrs) < 3:  # not yet led, or a replica not yet in sync
            return None
        conn = connect(cluster, offsets.leader)
        try:
            error = conn.request(commit(group, 1), COMMIT_VERSION).topics[0].partitions[0].error_code
        finally:
            conn.close()
        if error != 0:  # the coordinator still loading the partition
            return None
        return offsets.leader, next(n for n in offsets.isrs if n not in (offsets.leader, 1))
    return wait_for(first_commit, timeout=60, interval=0.5, what=f"a first commit of group {group}")


def reorder(kafka4, group: str, second_on_closed: bool) -> tuple[tuple[int, int], tuple[int, str]]:
    """Commit 100 on connection A while the follower is paused; commit 200
    pipelined behind it on A, which is then closed (`second_on_closed`), or
    sent on connection B instead; commit 300 on B. The follower resumes.
    Returns B's last answer (correlation id, error) and the committed offset
    (offset, metadata) read once every request has been handled."""
    coordinator, follower = coordinator_and_follower(kafka4, group)
    kafka4.pause(follower)
    try:
        a = connect(kafka4, coordinator)
        send(a, group, 100, 1)
        time.sleep(0.5)  # 100 is read and waits for the high watermark: A reads nothing more
        if second_on_closed:
            send(a, group, 200, 2)
            time.sleep(0.5)
        a.close()
        b = connect(kafka4, coordinator)
        if not second_on_closed:
            send(b, group, 200, 2)
        send(b, group, 300, 3)
        time.sleep(2.0)  # 300 is read and waits too, before the high watermark moves
    finally:
        kafka4.resume(follower)
    try:
        answers = [answer(b) for _ in range(1 if second_on_closed else 2)]
    finally:
        b.close()
    # What A still held is read once 100 is answered: give it time to land, then read.
    time.sleep(3.0)
    return answers[-1], committed(kafka4, coordinator, group)


def test_a_commit_sent_on_a_connection_the_client_closed_is_applied_after_a_later_one(kafka4):
    last, now = reorder(kafka4, "closed-connection", second_on_closed=True)
    assert last == (3, 0), f"the commit of 300, acknowledged: {last}"
    assert now == (200, "sent as 200"), f"the commit left unread on the closed connection came last: {now}"


def test_the_same_commits_on_an_open_connection_keep_the_later_one(kafka4):
    last, now = reorder(kafka4, "open-connection", second_on_closed=False)
    assert last == (3, 0), f"the commit of 300, acknowledged after 200 on the same connection: {last}"
    assert now == (300, "sent as 300"), now
