"""RecordBatch v2 headers: validate, read and patch them without decoding records.

The produce path never looks inside a batch: it checks the 61-byte header
and the CRC32C, then patches the base offset and the partition leader
epoch (both outside the CRC's range) and stores the bytes as they came.
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
    if h.attributes & (TRANSACTIONAL_FLAG | CONTROL_FLAG):
        raise InvalidBatch("transactional and control batches are not supported")
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
        yield pos, h
        pos += h.length


def split_batches(buf) -> list[tuple[BatchHeader, memoryview]]:
    """Whole batches in a fetched chunk (a partial last batch is dropped)."""
    mv = memoryview(buf)
    return [(h, mv[p:p + h.length]) for p, h in iter_batches(buf)]
