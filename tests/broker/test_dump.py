"""`python -m broker.dump` on segment files the broker's storage code wrote."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker import records
from broker.storage import Log

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _batch(pairs, compression: int = 0, headers=()) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i, (k, v) in enumerate(pairs):
        b.append(i, timestamp=None, key=k, value=v, headers=list(headers))
    return bytes(b.build())


def _append(log: Log, pairs, epoch: int, **kw) -> None:
    data = _batch(pairs, **kw)
    h = records.validate_produce_batch(data)
    h.base_offset = log.end_offset
    log.append(records.patch_offset_and_epoch(data, log.end_offset, epoch), h)


def _dump(*args) -> tuple[int, list, str]:
    res = subprocess.run([sys.executable, "-m", "broker.dump", *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": REPO}, timeout=60)
    return res.returncode, [json.loads(line) for line in res.stdout.splitlines()], res.stderr


def test_dump_prints_each_record_with_its_epoch_after_a_truncation(tmp_path):
    data = tmp_path / "data"
    log = Log(str(data / "harness-3"), segment_bytes=150)  # small segments: the dump crosses files
    log.open()
    _append(log, [(b"1", b"100"), (b"1", b"101")], epoch=0)
    _append(log, [(b"2", b"102")], epoch=0, headers=[("h", b"x")])
    _append(log, [(None, b"103"), (b"k", b"not a number")], epoch=1, compression=1)  # gzip
    _append(log, [(b"4", b"104")], epoch=1)
    log.truncate_to(3)  # what a follower does when it learns epoch 2's leader diverged at 3
    _append(log, [(b"5", b"205"), (b"5", None)], epoch=2)
    log.flush()
    assert len(log.segments) >= 2
    other = Log(str(data / "other-3"))
    other.open()
    _append(other, [(b"9", b"999")], epoch=0)
    log.close()
    other.close()
    (data / "replication-offset-checkpoint").write_text("0\n0\n")

    code, rows, err = _dump("--data-dir", str(data), "--topic", "harness")
    assert code == 0, err
    assert rows == [[3, 0, 0, 1, 100], [3, 1, 0, 1, 101], [3, 2, 0, 2, 102],
                    [3, 3, 2, 5, 205], [3, 4, 2, 5, None]]
    code, rows, _ = _dump("--data-dir", str(data))
    assert [r[:3] for r in rows if r[4] == 999] == [[3, 0, 0]] and len(rows) == 6
    code, rows, _ = _dump("--data-dir", str(data), "--topic", "harness", "--partition", "4")
    assert (code, rows) == (0, [])


def test_dump_decodes_a_gzip_batch_and_text_values(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    log.open()
    _append(log, [(None, b"103"), (b"k", "\u00e9t\u00e9".encode())], epoch=7, compression=1)
    log.close()
    code, rows, _ = _dump("--data-dir", str(tmp_path))
    assert rows == [[0, 0, 7, None, 103], [0, 1, 7, "k", "\u00e9t\u00e9"]]


def test_a_corrupt_batch_is_dumped_as_corrupt_not_a_crash(tmp_path):
    """A bit flipped on disk in the second batch (the faultfs's disk-corrupt): its
    offsets are said to be corrupt, the batches around it dumped as they are."""
    log = Log(str(tmp_path / "t-0"))
    log.open()
    for v in (b"1", b"2", b"3"):
        _append(log, [(None, v), (None, v + b"0")], epoch=1)
    log.close()
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    second = records.parse_header(data, 0).length
    data[second + records.parse_header(data, second).length - 3] ^= 0x40
    segment.write_bytes(bytes(data))
    code, rows, err = _dump("--data-dir", str(tmp_path))
    assert code == 0, err
    assert [r[:3] for r in rows] == [[0, o, 1] for o in range(6)]
    assert [r[4] for r in rows[:2] + rows[4:]] == [1, 10, 3, 30]
    assert rows[2][4] == rows[3][4] == "<corrupt batch: CRC mismatch>"


def test_dump_of_a_missing_dir_is_one_line_and_exit_2(tmp_path):
    code, rows, err = _dump("--data-dir", str(tmp_path / "nope"))
    assert code == 2 and rows == [] and len(err.strip().splitlines()) == 1


def test_a_batch_in_a_codec_not_decoded_here_is_printed_without_records_or_refused(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    log.open()
    _append(log, [(b"1", b"11")], epoch=0)
    _append(log, [(b"2", b"22"), (b"2", b"23")], epoch=0)
    log.close()
    # The second batch marked as snappy-compressed, its CRC made right again (no snappy codec here to build one).
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    second = records.parse_header(data, 0).length
    length = records.parse_header(data, second).length
    data[second + records.ATTRIBUTES + 1] |= 2
    struct.pack_into(">I", data, second + records.CRC,
                     crc32c.crc32c(bytes(data[second + records.ATTRIBUTES:second + length])))
    segment.write_bytes(bytes(data))
    code, rows, _ = _dump("--data-dir", str(tmp_path))
    assert code == 0 and rows == [[0, 0, 0, 1, 11], [0, 1, 0, None, None], [0, 2, 0, None, None]]
    code, rows, err = _dump("--data-dir", str(tmp_path), "--refuse-compressed")
    assert code == 3 and err.strip().splitlines() == [
        "broker.dump: offset 1: a batch compressed with codec 2 (of the codecs, only gzip is decoded here)"]
