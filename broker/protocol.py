"""Kafka wire-protocol plumbing: frames, request headers, the versions we
advertise, error codes, and response encoding through kafka-python's
schema-driven message classes.

Only versions whose every field the broker honours are advertised; clients
negotiate down to them through ApiVersions.
"""

from __future__ import annotations

import struct

from kafka.protocol.admin import (CreateTopicsRequest, CreateTopicsResponse, DescribeConfigsRequest,
                                  DescribeConfigsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
                                  DescribeTransactionsRequest, DescribeTransactionsResponse,
                                  ListGroupsRequest, ListGroupsResponse)
from kafka.protocol.consumer import (FetchRequest, FetchResponse, HeartbeatRequest, HeartbeatResponse,
                                     JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
                                     ListOffsetsRequest, ListOffsetsResponse, OffsetCommitRequest,
                                     OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
                                     OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
                                     SyncGroupRequest, SyncGroupResponse)
from kafka.protocol.metadata import (ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest,
                                     FindCoordinatorResponse, MetadataRequest, MetadataResponse)
from kafka.protocol.producer import (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
                                     AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
                                     InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
                                     TxnOffsetCommitRequest, TxnOffsetCommitResponse, WriteTxnMarkersRequest,
                                     WriteTxnMarkersResponse)

# Error codes (Kafka's numbering).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
INVALID_RECORD = 87
UNKNOWN_PRODUCER_ID = 59
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 76
MEMBER_ID_REQUIRED = 79
UNSTABLE_OFFSET_COMMIT = 88
TRANSACTIONAL_ID_NOT_FOUND = 105
UNKNOWN_SERVER_ERROR = -1

# API keys (Kafka's numbering).
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
API_VERSIONS = 18
CREATE_TOPICS = 19
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_CONFIGS = 32
DESCRIBE_TRANSACTIONS = 65

# api_key -> (request class, response class, min version, max version)
APIS = {
    0: (ProduceRequest, ProduceResponse, 3, 8),
    1: (FetchRequest, FetchResponse, 4, 11),
    2: (ListOffsetsRequest, ListOffsetsResponse, 1, 5),
    3: (MetadataRequest, MetadataResponse, 0, 9),
    8: (OffsetCommitRequest, OffsetCommitResponse, 2, 7),
    9: (OffsetFetchRequest, OffsetFetchResponse, 1, 7),
    10: (FindCoordinatorRequest, FindCoordinatorResponse, 0, 2),
    11: (JoinGroupRequest, JoinGroupResponse, 0, 5),
    12: (HeartbeatRequest, HeartbeatResponse, 0, 3),
    13: (LeaveGroupRequest, LeaveGroupResponse, 0, 3),
    14: (SyncGroupRequest, SyncGroupResponse, 0, 3),
    15: (DescribeGroupsRequest, DescribeGroupsResponse, 0, 4),
    16: (ListGroupsRequest, ListGroupsResponse, 0, 3),
    18: (ApiVersionsRequest, ApiVersionsResponse, 0, 3),
    19: (CreateTopicsRequest, CreateTopicsResponse, 2, 4),
    22: (InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    23: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 3),
    24: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
    25: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
    26: (EndTxnRequest, EndTxnResponse, 0, 3),
    27: (WriteTxnMarkersRequest, WriteTxnMarkersResponse, 1, 1),
    28: (TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
    32: (DescribeConfigsRequest, DescribeConfigsResponse, 1, 4),
    65: (DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0),
}

_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_INT32 = struct.Struct(">i")


class BadRequest(ValueError):
    """A frame that cannot be parsed as a request: the connection is closed."""


def read_unsigned_varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise BadRequest("bad varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def is_flexible(api_key: int, version: int) -> bool:
    req = APIS[api_key][0]
    return req.flexible_version_q(version)


def parse_request_header(frame: bytes):
    """(api_key, api_version, correlation_id, client_id, body offset) of a request frame.

    The header is v1 (non-flexible) or v2 (flexible: a tagged-field section follows).
    """
    if len(frame) < _HEADER.size:
        raise BadRequest("short request header")
    api_key, version, corr, clen = _HEADER.unpack_from(frame, 0)
    pos = _HEADER.size
    client_id = None
    if clen >= 0:
        if pos + clen > len(frame):
            raise BadRequest("client id runs past the frame")
        client_id = frame[pos:pos + clen].decode("utf-8", "replace")
        pos += clen
    elif clen != -1:
        raise BadRequest("bad client id length")
    if api_key in APIS and APIS[api_key][2] <= version <= APIS[api_key][3] and is_flexible(api_key, version):
        # (An ApiVersions request of a version we do not know gets UNSUPPORTED_VERSION
        # whatever its header holds, so its tagged fields are not parsed.)
        ntags, pos = read_unsigned_varint(frame, pos)
        for _ in range(ntags):
            _tag, pos = read_unsigned_varint(frame, pos)
            size, pos = read_unsigned_varint(frame, pos)
            pos += size
            if pos > len(frame):
                raise BadRequest("tagged field runs past the frame")
    return api_key, version, corr, client_id, pos


def encode_response(response, api_key: int, version: int, correlation_id: int) -> bytes:
    """A whole response frame (size prefix, header, body)."""
    body = response.encode(version=version)
    # ApiVersions responses always use header v0, so old clients can read them.
    if api_key != API_VERSIONS and is_flexible(api_key, version):
        header = _INT32.pack(correlation_id) + b"\x00"
    else:
        header = _INT32.pack(correlation_id)
    return _INT32.pack(len(header) + len(body)) + header + body


def api_versions_response(version: int, error: int = NONE):
    resp_cls = ApiVersionsResponse
    keys = [resp_cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (_, _, lo, hi) in sorted(APIS.items())]
    return resp_cls(error_code=error, api_keys=keys, throttle_time_ms=0, version=version)
