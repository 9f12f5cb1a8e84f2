"""RecordBatch v2 headers: validate, read and patch them without decoding records.

The produce path never looks inside a batch: it checks the 61-byte header
and the CRC32C, then patches the base offset and the partition leader
epoch (both outside the CRC's range) and stores the bytes as they came.

The one exception is a control batch (a transaction's COMMIT or ABORT
marker, KIP-98): its single record's key says which, so wherever a control
batch's bytes are at hand its type is read into the header
(`control_type`), and `control_batch` builds one for the coordinator's
markers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

HEADER_SIZE = 61
# Offsets of the header fields inside a batch.
BASE_OFFSET = 0
BATCH_LENGTH = 8
LEADER_EPOCH = 12
MAGIC = 16
CRC = 17
ATTRIBUTES = 21
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch

TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
# A control record's type (the second int16 of its key).
ABORT_MARKER = 0
COMMIT_MARKER = 1


class InvalidBatch(ValueError):
    """Bytes that are not one whole, well-formed RecordBatch v2."""


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    length: int  # whole batch in bytes, header included
    leader_epoch: int
    attributes: int
    last_offset_delta: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    control_type: int = -1  # ABORT_MARKER or COMMIT_MARKER for a control batch whose bytes were read

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """The header of the batch at buf[pos:]; raises InvalidBatch if it is not one."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidBatch("short batch header")
    (base, blen, epoch, magic, _crc, attrs, lod, _bts, maxts, pid, pepoch, bseq, count) = _HEADER.unpack_from(buf, pos)
    if magic != 2:
        raise InvalidBatch(f"magic {magic} (only RecordBatch v2 is supported)")
    if blen < HEADER_SIZE - 12:
        raise InvalidBatch(f"batch length {blen} too small")
    if lod < 0 or count < 0:
        raise InvalidBatch("negative record count")
    return BatchHeader(base, blen + 12, epoch, attrs, lod, maxts, pid, pepoch, bseq, count)


def crc_ok(buf, pos: int, length: int) -> bool:
    stored = struct.unpack_from(">I", buf, pos + CRC)[0]
    return crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES:pos + length]) == stored


def validate_produce_batch(data: bytes) -> BatchHeader:
    """Checks that `data` is exactly one valid batch a producer may send."""
    if data is None or len(data) < HEADER_SIZE:
        raise InvalidBatch("no record batch")
    h = parse_header(data, 0)
    if h.length != len(data):
        raise InvalidBatch(f"batch length {h.length} does not match the {len(data)} bytes sent")
    if h.attributes & CONTROL_FLAG:
        raise InvalidBatch("control batches are written by the transaction coordinator only")
    if h.attributes & TRANSACTIONAL_FLAG and h.producer_id < 0:
        raise InvalidBatch("a transactional batch without a producer id")
    if h.record_count != h.last_offset_delta + 1:
        raise InvalidBatch("record count does not match lastOffsetDelta")
    if not crc_ok(data, 0, h.length):
        raise InvalidBatch("CRC32C mismatch")
    return h


def patch_offset_and_epoch(data: bytes, base_offset: int, leader_epoch: int) -> bytearray:
    """A copy of the batch with its base offset and leader epoch set (the CRC stays valid)."""
    out = bytearray(data)
    _, blen, _ = _OFFSET_AND_EPOCH.unpack_from(out, 0)
    _OFFSET_AND_EPOCH.pack_into(out, 0, base_offset, blen, leader_epoch)
    return out


def iter_batches(buf, pos: int = 0, end: int | None = None, check_crc: bool = False):
    """Yields (position, header) for each whole batch in buf[pos:end]; stops at a torn or bad one."""
    end = len(buf) if end is None else end
    while end - pos >= HEADER_SIZE:
        try:
            h = parse_header(buf, pos)
        except InvalidBatch:
            return
        if pos + h.length > end:
            return
        if check_crc and not crc_ok(buf, pos, h.length):
            return
        if h.attributes & CONTROL_FLAG:
            h.control_type = control_type(buf, pos, h.length)
        yield pos, h
        pos += h.length


def split_batches(buf) -> list[tuple[BatchHeader, memoryview]]:
    """Whole batches in a fetched chunk (a partial last batch is dropped)."""
    mv = memoryview(buf)
    return [(h, mv[p:p + h.length]) for p, h in iter_batches(buf)]


def read_varint(buf, pos: int, end: int | None = None) -> tuple[int, int]:
    """A zigzag varint (Kafka's record fields) at buf[pos:end]: (value, next position);
    InvalidBatch if it runs past `end`."""
    end = len(buf) if end is None else end
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise InvalidBatch("bad varint in a record")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def control_type(buf, pos: int, length: int) -> int:
    """The type of the control batch at buf[pos:pos+length] (its first record's key), -1 if unreadable."""
    end = pos + length
    try:
        p = pos + HEADER_SIZE
        _len, p = read_varint(buf, p, end)
        p += 1  # record attributes
        _ts, p = read_varint(buf, p, end)
        _off, p = read_varint(buf, p, end)
        klen, p = read_varint(buf, p, end)
        if klen < 4 or p + 4 > end:
            return -1
        return struct.unpack_from(">h", buf, p + 2)[0]
    except InvalidBatch:
        return -1


def _zigzag(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def control_batch(marker: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                  timestamp_ms: int) -> bytes:
    """A control batch holding one COMMIT or ABORT marker of a producer's transaction
    (base offset 0 and leader epoch -1: the leader patches both when it appends)."""
    key = struct.pack(">hh", 0, marker)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = (b"\x00" + _zigzag(0) + _zigzag(0) + _zigzag(len(key)) + key + _zigzag(len(value)) + value
            + _zigzag(0))
    record = _zigzag(len(body)) + body
    attrs = TRANSACTIONAL_FLAG | CONTROL_FLAG
    after_crc = struct.pack(">hiqqqhii", attrs, 0, timestamp_ms, timestamp_ms, producer_id, producer_epoch, -1, 1) \
        + record
    crc = crc32c.crc32c(after_crc)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc)
    return head + after_crc
