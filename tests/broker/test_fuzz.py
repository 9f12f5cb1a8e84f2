"""Malformed and fuzzed frames against a live broker: every case gets a
response or a closed connection, the broker keeps serving a well-behaved
client throughout, and its memory stays bounded.

Cases (seeded, so a failure reproduces): random bodies, length prefixes
that lie, unknown API keys, unsupported versions, truncated and
bit-flipped valid requests of every API, and huge/negative length prefixes.
"""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker import protocol as P
from broker.client import SyncConnection
from tests.broker.conftest import make_batch
from tests.broker.helpers import wait_for

pytestmark = pytest.mark.integration

SEED = 20240607


def _templates() -> list[bytes]:
    """One valid request frame per advertised API (kafka-python encodes them)."""
    from kafka.protocol.admin import CreateTopicsRequest
    from kafka.protocol.consumer import (FetchRequest, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
                                         ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest,
                                         OffsetForLeaderEpochRequest, SyncGroupRequest)
    from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
    from kafka.protocol.producer import (AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest,
                                         InitProducerIdRequest, ProduceRequest, TxnOffsetCommitRequest,
                                         WriteTxnMarkersRequest)
    TC = TxnOffsetCommitRequest
    WM = WriteTxnMarkersRequest.WritableTxnMarker
    PR = ProduceRequest
    FR = FetchRequest
    LR = ListOffsetsRequest
    reqs = [
        (ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"), 3),
        (ApiVersionsRequest(), 0),
        (MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="fuzz")], allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False), 8),
        (MetadataRequest(topics=None, allow_auto_topic_creation=False), 4),
        (PR(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[PR.TopicProduceData(
            name="fuzz", partition_data=[PR.TopicProduceData.PartitionProduceData(
                index=0, records=make_batch([b"fuzz-template"]))])]), 8),
        (FR(replica_id=-1, max_wait_ms=50, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[FR.FetchTopic(topic="fuzz", partitions=[FR.FetchTopic.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=0,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""), 11),
        (LR(replica_id=-1, isolation_level=0, topics=[LR.ListOffsetsTopic(name="fuzz", partitions=[
            LR.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 5),
        (FindCoordinatorRequest(key="g", key_type=0), 2),
        (JoinGroupRequest(group_id="fg", session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="",
                          group_instance_id=None, protocol_type="consumer",
                          protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00")]), 5),
        (SyncGroupRequest(group_id="fg", generation_id=1, member_id="m", group_instance_id=None,
                          assignments=[]), 3),
        (HeartbeatRequest(group_id="fg", generation_id=1, member_id="m", group_instance_id=None), 3),
        (LeaveGroupRequest(group_id="fg", members=[LeaveGroupRequest.MemberIdentity(member_id="m",
                                                                                     group_instance_id=None)]), 3),
        (OffsetCommitRequest(group_id="fg", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                             topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="fuzz", partitions=[
                                 OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                     partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                     committed_metadata="")])]), 7),
        (OffsetFetchRequest(group_id="fg", topics=None), 5),
        (CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="fuzz-created", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=1000, validate_only=True), 4),
        (InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 1),
        (OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
            topic="fuzz", partitions=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=-1, leader_epoch=0)])]), 3),
        # Transactions: the producer's requests, a transactional batch, a leader's markers, read_committed.
        (FindCoordinatorRequest(key="fz-txn", key_type=1), 2),
        (InitProducerIdRequest(transactional_id="fz-txn", transaction_timeout_ms=1000, producer_id=-1,
                               producer_epoch=-1), 4),
        (AddPartitionsToTxnRequest(v3_and_below_transactional_id="fz-txn", v3_and_below_producer_id=7,
                                   v3_and_below_producer_epoch=0, v3_and_below_topics=[
                                       AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="fuzz",
                                                                                         partitions=[0])]), 3),
        (AddOffsetsToTxnRequest(transactional_id="fz-txn", producer_id=7, producer_epoch=0, group_id="fg"), 3),
        (EndTxnRequest(transactional_id="fz-txn", producer_id=7, producer_epoch=0, committed=True), 3),
        (TC(transactional_id="fz-txn", group_id="fg", producer_id=7, producer_epoch=0, generation_id=-1,
            member_id="", group_instance_id=None, topics=[TC.TxnOffsetCommitRequestTopic(name="fuzz", partitions=[
                TC.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]), 3),
        (WriteTxnMarkersRequest(markers=[WM(producer_id=7, producer_epoch=0, transaction_result=False, topics=[
            WM.WritableTxnMarkerTopic(name="fuzz", partition_indexes=[0])], coordinator_epoch=0)]), 1),
        (PR(transactional_id="fz-txn", acks=1, timeout_ms=1000, topic_data=[PR.TopicProduceData(
            name="fuzz", partition_data=[PR.TopicProduceData.PartitionProduceData(
                index=0, records=make_batch([b"fuzz-txn"], producer_id=7, producer_epoch=0, base_sequence=0,
                                            transactional=True))])]), 8),
        (FR(replica_id=-1, max_wait_ms=50, min_bytes=1, max_bytes=1 << 20, isolation_level=1, session_id=0,
            session_epoch=-1, topics=[FR.FetchTopic(topic="fuzz", partitions=[FR.FetchTopic.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=0,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""), 11),
    ]
    frames = []
    for i, (req, version) in enumerate(reqs):
        req.API_VERSION = version
        req.with_header(correlation_id=1000 + i, client_id="fuzzer")
        frames.append(bytes(req.encode(header=True, framed=True)))
    return frames


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _cases(rng: random.Random, templates: list[bytes]):
    """(kind, bytes to send) pairs."""
    cases = []
    for _ in range(250):  # random bodies
        body = rng.randbytes(rng.randrange(0, 300))
        cases.append(("random-body", _frame(body)))
    for _ in range(100):  # random bytes, prefix included
        cases.append(("random-bytes", rng.randbytes(rng.randrange(1, 64))))
    for _ in range(100):  # prefixes that lie: longer or shorter than what follows
        t = rng.choice(templates)
        body = t[4:]
        lie = rng.choice([len(body) + rng.randrange(1, 5000), max(0, len(body) - rng.randrange(1, len(body) + 1))])
        cases.append(("wrong-size", struct.pack(">i", lie) + body))
    known = set(P.APIS)
    for _ in range(120):  # unknown api keys
        key = rng.choice([k for k in range(-5, 100) if k not in known] + [32767, -32768])
        cases.append(("unknown-api", _frame(struct.pack(">hhih", key, rng.randrange(0, 20), 7, 4) + b"fuzz")))
    for _ in range(120):  # unsupported versions of known apis
        key = rng.choice(sorted(known))
        lo, hi = P.APIS[key][2], P.APIS[key][3]
        version = rng.choice([v for v in list(range(-3, lo)) + list(range(hi + 1, hi + 20)) + [32767]])
        cases.append(("bad-version", _frame(struct.pack(">hhih", key, version, 8, 4) + b"fuzz" + rng.randbytes(20))))
    for _ in range(200):  # truncated valid requests (prefix adjusted to the cut body)
        t = rng.choice(templates)
        cut = rng.randrange(0, len(t) - 4)
        cases.append(("truncated", _frame(t[4:4 + cut])))
    for _ in range(200):  # bit-flipped valid requests
        t = bytearray(rng.choice(templates))
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(4, len(t))
            t[i] ^= 1 << rng.randrange(8)
        cases.append(("bit-flip", bytes(t)))
    for prefix in (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0, 1, 7, 2 * 1024 ** 3 - 1, 104857601):
        cases.append(("huge-or-tiny-prefix", struct.pack(">I", prefix) + b"abcdefgh"))
    return cases


def _send_case(port: int, data: bytes, wait: float = 0.3) -> str:
    """Sends one case; 'response', 'closed' or 'waiting' (broker still reading)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(data)
        s.settimeout(wait)
        try:
            got = s.recv(65536)
        except socket.timeout:
            return "waiting"
        except ConnectionResetError:
            return "closed"
        return "response" if got else "closed"
    finally:
        s.close()


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _healthy(conn: SyncConnection) -> bool:
    from kafka.protocol.metadata import ApiVersionsRequest
    resp = conn.request(ApiVersionsRequest(client_software_name="ok", client_software_version="1"), 3)
    return resp.error_code == 0 and len(resp.api_keys) == len(P.APIS)


def test_fuzzed_and_malformed_frames(make_cluster):
    cluster = make_cluster(1, settings={"default.replication.factor": "1"})
    cluster.create_topic("fuzz", partitions=1, replication_factor=1)
    port = cluster.brokers[1].port
    pid = cluster.brokers[1].proc.pid
    templates = _templates()
    # The templates themselves are valid: each gets a response.
    for t in templates:
        assert _send_case(port, t, wait=3.0) == "response", t[:20]
    rng = random.Random(SEED)
    cases = _cases(rng, templates)
    assert len(cases) >= 1000
    rss_start = _rss_kb(pid)
    outcomes: dict[tuple[str, str], int] = {}
    bystander = SyncConnection("127.0.0.1", port, timeout=10)
    try:
        for i, (kind, data) in enumerate(cases):
            outcome = _send_case(port, data)
            outcomes[(kind, outcome)] = outcomes.get((kind, outcome), 0) + 1
            if kind in ("unknown-api", "huge-or-tiny-prefix", "random-bytes") and outcome == "response":
                pytest.fail(f"case {i} ({kind}) got a response to a frame that must close: {data[:32]!r}")
            if i % 50 == 0:
                assert _healthy(bystander), f"broker stopped serving after case {i}"
        assert cluster.brokers[1].alive, "the broker died"
        assert _healthy(bystander)
    finally:
        bystander.close()
    # Unsupported versions of ApiVersions get an UNSUPPORTED_VERSION answer, others a closed connection.
    assert outcomes.get(("bad-version", "response"), 0) > 0
    assert outcomes.get(("unknown-api", "closed"), 0) > 100
    # Memory stays bounded: no per-case growth worth mentioning.
    rss_end = _rss_kb(pid)
    assert rss_end - rss_start < 64 * 1024, f"RSS grew from {rss_start} kB to {rss_end} kB"
    # Real clients still work end to end.
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce("fuzz", f"after-{i}".encode())
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "fz", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition("fuzz", 0, 0)])
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(v == b"after-9" for v in seen):
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.append(m.value())
        assert b"after-9" in seen
    finally:
        c.close()
    # Connections the fuzzer abandoned are all gone again.
    wait_for(lambda: len([line for line in open(f"/proc/{pid}/net/tcp").read().splitlines()
                          if f":{port:04X} " in line.split()[1] and line.split()[3] == "01"]) < 10, 30, 0.5,
             "abandoned connections to close")
