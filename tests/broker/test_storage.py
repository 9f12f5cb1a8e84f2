"""Storage: segments, the offset index, torn-batch recovery, truncation, the HW checkpoint."""

from __future__ import annotations

import os

import pytest

from broker import records
from broker.storage import Log, read_checkpoint, write_checkpoint
from tests.broker.conftest import batch_values, make_batch


def _append(log: Log, values) -> records.BatchHeader:
    data = make_batch(values)
    h = records.validate_produce_batch(data)
    batch = records.patch_offset_and_epoch(data, log.end_offset, 0)
    h.base_offset = log.end_offset
    log.append(batch, h)
    return h


def _all_values(log: Log) -> list[bytes]:
    """Everything in the log, reading segment by segment as a consumer would."""
    out, offset = [], 0
    while offset < log.end_offset:
        chunk = log.read(offset, 1 << 30, log.end_offset)
        assert chunk, f"no data at {offset}"
        out += batch_values(chunk)
        offset = [h for _, h in records.iter_batches(chunk)][-1].next_offset
    return out


def test_append_and_read_back_across_segments(tmp_path):
    log = Log(str(tmp_path / "t-0"), segment_bytes=2048, index_interval=256)
    log.open()
    expected = []
    for i in range(100):
        vals = [f"v{i}-{j}".encode() for j in range(3)]
        _append(log, vals)
        expected += vals
    assert log.end_offset == 300
    assert len(log.segments) > 3, "small segment.bytes must roll segments"
    got = []
    offset = 0
    while offset < log.end_offset:
        chunk = log.read(offset, 1000, log.end_offset)
        assert chunk, f"no data at {offset}"
        headers = [h for _, h in records.iter_batches(chunk)]
        assert headers[0].base_offset <= offset <= headers[0].last_offset
        got += batch_values(chunk)
        offset = headers[-1].next_offset
    assert got == expected


def test_read_respects_limit_and_returns_whole_first_batch(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    log.open()
    _append(log, [b"x" * 5000])
    _append(log, [b"y"])
    _append(log, [b"z"])
    # max_bytes smaller than the first batch: it is still returned, alone.
    assert batch_values(log.read(0, 10, log.end_offset)) == [b"x" * 5000]
    # The limit (HW) cuts at batch boundaries.
    assert batch_values(log.read(0, 1 << 20, 2)) == [b"x" * 5000, b"y"]
    assert log.read(2, 1 << 20, 2) == b""
    # Reading from inside the log returns the batch holding that offset.
    assert batch_values(log.read(1, 1 << 20, 3)) == [b"y", b"z"]


def test_index_entries_point_at_batches(tmp_path):
    log = Log(str(tmp_path / "t-0"), index_interval=100)
    log.open()
    for i in range(50):
        _append(log, [b"a" * 40, b"b" * 40])
    seg = log.segments[0]
    assert len(seg.index_offsets) > 5
    for off, pos in zip(seg.index_offsets, seg.index_positions):
        h = records.parse_header(os.pread(seg.fd, records.HEADER_SIZE, pos))
        assert h.base_offset == off
    # The index file holds the same entries.
    raw = open(seg.index_path, "rb").read()
    assert len(raw) == 8 * len(seg.index_offsets)


def test_recovery_cuts_a_torn_last_batch(tmp_path):
    d = str(tmp_path / "t-0")
    log = Log(d)
    log.open()
    for i in range(10):
        _append(log, [f"r{i}".encode()])
    path = log.segments[-1].log_path
    good_size = os.path.getsize(path)
    log.close()
    # kill -9 in the middle of a write: half a batch at the end.
    half = make_batch([b"torn" * 100])[:150]
    with open(path, "ab") as f:
        f.write(half)
    log2 = Log(d)
    seen = []
    log2.open(on_batch=seen.append)
    assert log2.end_offset == 10
    assert log2.recovered_cut_bytes == len(half)
    assert os.path.getsize(path) == good_size
    assert _all_values(log2) == [f"r{i}".encode() for i in range(10)]
    assert [h.base_offset for h in seen] == list(range(10))
    # Appending after recovery continues the offsets.
    _append(log2, [b"after"])
    assert _all_values(log2)[-1] == b"after" and log2.end_offset == 11


def test_recovery_cuts_a_batch_with_a_bad_crc(tmp_path):
    d = str(tmp_path / "t-0")
    log = Log(d)
    log.open()
    for i in range(5):
        _append(log, [f"r{i}".encode()])
    path = log.segments[-1].log_path
    size = os.path.getsize(path)
    log.close()
    with open(path, "r+b") as f:  # flip a byte inside the last record
        f.seek(size - 3)
        b = f.read(1)
        f.seek(size - 3)
        f.write(bytes([b[0] ^ 0xFF]))
    log2 = Log(d)
    log2.open()
    assert log2.end_offset == 4
    assert _all_values(log2) == [f"r{i}".encode() for i in range(4)]


def test_recovery_rebuilds_a_damaged_index(tmp_path):
    d = str(tmp_path / "t-0")
    log = Log(d, index_interval=64)
    log.open()
    for i in range(30):
        _append(log, [f"r{i}".encode() * 10])
    idx = log.segments[0].index_path
    log.close()
    with open(idx, "wb") as f:
        f.write(b"garbage")
    log2 = Log(d, index_interval=64)
    log2.open()
    assert len(log2.segments[0].index_offsets) > 3
    assert batch_values(log2.read(17, 100, log2.end_offset))[0] == b"r17" * 10


def test_truncate_to_removes_batches_and_segments(tmp_path):
    log = Log(str(tmp_path / "t-0"), segment_bytes=1024, index_interval=128)
    log.open()
    for i in range(60):
        _append(log, [f"r{i}".encode() * 5, f"s{i}".encode() * 5])
    nsegs = len(log.segments)
    assert log.truncate_to(41) == 40  # offset 41 is inside the batch [40, 41]: that batch goes
    assert log.end_offset == 40
    assert len(log.segments) < nsegs
    vals = _all_values(log)
    assert len(vals) == 40 and vals[-1] == b"s19" * 5
    _append(log, [b"new"])
    assert log.end_offset == 41 and _all_values(log)[-1] == b"new"
    # Truncation survives a reopen.
    log.close()
    log2 = Log(str(tmp_path / "t-0"), segment_bytes=1024, index_interval=128)
    log2.open()
    assert log2.end_offset == 41
    assert log2.truncate_to(0) == 0 and _all_values(log2) == []


def test_flush_policy_by_messages(tmp_path):
    log = Log(str(tmp_path / "t-0"), flush_messages=3)
    log.open()
    _append(log, [b"a", b"b"])
    assert log.dirty and log.unflushed_messages == 2
    _append(log, [b"c"])
    assert not log.dirty and log.unflushed_messages == 0


def test_checkpoint_roundtrip_and_garbage(tmp_path):
    write_checkpoint(str(tmp_path), {("a", 0): 5, ("b-c", 3): 17})
    assert read_checkpoint(str(tmp_path)) == {("a", 0): 5, ("b-c", 3): 17}
    (tmp_path / "replication-offset-checkpoint").write_text("0\n7\nnonsense\n")
    assert read_checkpoint(str(tmp_path)) == {}
    assert read_checkpoint(str(tmp_path / "missing")) == {}


@pytest.mark.parametrize("mutate, what", [
    (lambda b: b[:-1], "batch length"),
    (lambda b: b[:16] + b"\x01" + b[17:], "magic"),
    (lambda b: b[:-2] + bytes([b[-2] ^ 1]) + b[-1:], "CRC"),
    (lambda b: b"", "no record batch"),
])
def test_produce_batch_validation(mutate, what):
    data = make_batch([b"x", b"y"])
    records.validate_produce_batch(data)
    with pytest.raises(records.InvalidBatch, match=what):
        records.validate_produce_batch(mutate(data))


def test_patching_offsets_keeps_the_crc_valid():
    data = make_batch([b"x", b"y"])
    patched = records.patch_offset_and_epoch(data, 12345, 7)
    h = records.validate_produce_batch(bytes(patched))
    assert h.base_offset == 12345 and h.leader_epoch == 7 and h.last_offset == 12346
