"""Wire-level checks of individual APIs against a real 3-broker cluster,
with a raw protocol client (kafka-python message classes)."""

from __future__ import annotations

import json
import time

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest as PR

from broker import protocol as P
from broker.client import SyncConnection
from tests.broker.conftest import batch_values, make_batch

pytestmark = pytest.mark.integration


def _produce(conn, topic, values, acks=-1):
    req = PR(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[PR.TopicProduceData(
        name=topic, partition_data=[PR.TopicProduceData.PartitionProduceData(index=0, records=make_batch(values))])])
    resp = conn.request(req, 8)
    return None if resp is None else resp.responses[0].partition_responses[0]


def _fetch(conn, topic, offset, epoch=-1):
    resp = conn.request(FetchRequest(
        replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                                                   log_start_offset=0, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id=""), 11)
    return resp.responses[0].partitions[0]


def _list_offset(conn, topic, ts, epoch=-1):
    LR = ListOffsetsRequest
    resp = conn.request(LR(replica_id=-1, isolation_level=0, topics=[LR.ListOffsetsTopic(name=topic, partitions=[
        LR.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=epoch, timestamp=ts)])]), 5)
    return resp.topics[0].partitions[0]


def _epoch_end(conn, topic, epoch):
    R = OffsetForLeaderEpochRequest
    resp = conn.request(R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=topic, partitions=[
        R.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                        leader_epoch=epoch)])]), 3)
    return resp.topics[0].partitions[0]


def test_api_versions_negotiation(make_cluster):
    cluster = make_cluster(1, settings={"default.replication.factor": "1"})
    port = cluster.brokers[1].port
    with SyncConnection("127.0.0.1", port) as conn:
        v3 = conn.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        v0 = conn.request(ApiVersionsRequest(), 0)
        assert v3.error_code == v0.error_code == 0
        assert {k.api_key: (k.min_version, k.max_version) for k in v3.api_keys} == \
            {k: (lo, hi) for k, (_, _, lo, hi) in P.APIS.items()}
        # A version newer than we know: UNSUPPORTED_VERSION, with our list, in a v0 response.
        body = bytes.fromhex("0012" "0009" "0000002a" "0001") + b"t" + b"\x00\x00\x00"
        conn.send_raw(len(body).to_bytes(4, "big") + body)
        payload = conn.read_frame()
        from kafka.protocol.metadata import ApiVersionsResponse
        assert int.from_bytes(payload[:4], "big") == 42
        resp = ApiVersionsResponse.decode(payload[4:], version=0)
        assert resp.error_code == P.UNSUPPORTED_VERSION and len(resp.api_keys) == len(P.APIS)


def test_offsets_epochs_topics_and_leadership_over_the_wire(make_cluster):
    cluster = make_cluster(3, settings={"default.replication.factor": "3", "min.insync.replicas": "2"})
    cluster.create_topic("wire", partitions=1, replication_factor=3)
    leader = cluster.leader("wire", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    with SyncConnection("127.0.0.1", cluster.brokers[leader].port) as conn, \
            SyncConnection("127.0.0.1", cluster.brokers[follower].port) as fconn:
        before = int(time.time() * 1000)
        first = _produce(conn, "wire", [b"a", b"b", b"c"])
        assert (first.error_code, first.base_offset) == (0, 0)
        assert _produce(conn, "wire", [b"d"], acks=0) is None  # no response at all
        second = _produce(conn, "wire", [b"e"], acks=1)
        assert (second.error_code, second.base_offset) == (0, 4)
        # Not the leader: NOT_LEADER_OR_FOLLOWER for produce, fetch and list offsets.
        assert _produce(fconn, "wire", [b"x"]).error_code == P.NOT_LEADER_OR_FOLLOWER
        assert _fetch(fconn, "wire", 0).error_code == P.NOT_LEADER_OR_FOLLOWER
        assert _list_offset(fconn, "wire", -1).error_code == P.NOT_LEADER_OR_FOLLOWER
        # Fetch returns what is below the HW; a too-new epoch is unknown, an old one fenced.
        deadline = time.monotonic() + 10
        while _list_offset(conn, "wire", -1).offset < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        part = _fetch(conn, "wire", 0)
        assert part.error_code == 0 and part.high_watermark == 5
        assert batch_values(part.records) == [b"a", b"b", b"c", b"d", b"e"]
        assert _fetch(conn, "wire", 99).error_code == P.OFFSET_OUT_OF_RANGE
        state = cluster.state("wire", 0)
        assert _fetch(conn, "wire", 0, epoch=state["leader_epoch"] + 1).error_code == P.UNKNOWN_LEADER_EPOCH
        # ListOffsets: earliest, latest (= HW), by timestamp.
        assert _list_offset(conn, "wire", -2).offset == 0
        latest = _list_offset(conn, "wire", -1)
        assert latest.offset == 5 and latest.leader_epoch == state["leader_epoch"]
        assert _list_offset(conn, "wire", before - 60_000).offset == 0
        assert _list_offset(conn, "wire", int(time.time() * 1000) + 60_000).offset == -1
        # OffsetForLeaderEpoch: the current epoch ends at the log end; an unknown older one is undefined.
        cur = _epoch_end(conn, "wire", state["leader_epoch"])
        assert (cur.error_code, cur.leader_epoch, cur.end_offset) == (0, state["leader_epoch"], 5)
        assert _epoch_end(conn, "wire", -5).end_offset == -1
        # CreateTopics: errors per topic.
        C = CreateTopicsRequest
        resp = conn.request(C(topics=[
            C.CreatableTopic(name="wire", num_partitions=1, replication_factor=3, assignments=[], configs=[]),
            C.CreatableTopic(name="too-many", num_partitions=1, replication_factor=5, assignments=[], configs=[]),
            C.CreatableTopic(name="bad/name", num_partitions=1, replication_factor=1, assignments=[], configs=[]),
            C.CreatableTopic(name="fresh", num_partitions=2, replication_factor=2, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False), 4)
        codes = {t.name: t.error_code for t in resp.topics}
        assert codes == {"wire": P.TOPIC_ALREADY_EXISTS, "too-many": P.INVALID_REPLICATION_FACTOR,
                         "bad/name": P.INVALID_TOPIC_EXCEPTION, "fresh": 0}
        md = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="fresh")],
                                          allow_auto_topic_creation=False), 8)
        parts = md.topics[0].partitions
        assert len(parts) == 2 and all(len(p.replica_nodes) == 2 and p.leader_id >= 0 for p in parts)
        # Placement (i + j) mod n over brokers [1, 2, 3].
        assert sorted((p.partition_index, list(p.replica_nodes)) for p in parts) == [(0, [1, 2]), (1, [2, 3])]
        # Metadata v0 with no topics lists them all; an unknown topic is not created when not allowed.
        all_topics = conn.request(MetadataRequest(topics=[]), 0)
        assert {t.name for t in all_topics.topics} >= {"wire", "fresh"}
        unknown = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="nope")],
                                               allow_auto_topic_creation=False), 8)
        assert unknown.topics[0].error_code == P.UNKNOWN_TOPIC_OR_PARTITION
        assert md.controller_id in cluster.brokers and len(md.brokers) == 3


def test_metadata_names_a_live_broker_while_the_controller_is_not_one(make_cluster, zookeeper):
    """librdkafka's AdminClient sends CreateTopics to the controller its metadata names, and when
    that is -1 or a broker it does not know, waits for a metadata refresh it does not make (a
    topic created just after a cluster's start was answered 30 s late). /controller held here by
    a broker that is not there, as by a controller whose session has not expired yet: Metadata
    names this broker, which takes CreateTopics itself."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kazoo.client import KazooClient

    cluster = make_cluster(1, settings={"default.replication.factor": "1"}, start=False)
    chroot = cluster.zookeeper[len(zookeeper.connect):]  # the cluster's, within the test's
    gone = KazooClient(hosts=zookeeper.connect)
    gone.start(timeout=30)
    try:
        gone.create(chroot + "/controller", json.dumps({"version": 1, "brokerid": 99}).encode(),
                    ephemeral=True, makepath=True)
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        assert admin.list_topics(timeout=10).controller_id == 1
        admin.create_topics([NewTopic("while-gone", 1, 1)], operation_timeout=1)["while-gone"].result(15)
        assert cluster.controller() == 99  # still held: the client did not wait for an election
    finally:
        gone.stop()
        gone.close()
    cluster.wait_leaders("while-gone", 1)
