"""A partition's transaction bookkeeping on hand-built logs: control
batches read back, open transactions, the aborted index and the last
stable offset, and the same state rebuilt by recovery and truncation."""

from __future__ import annotations

from kafka.record.memory_records import MemoryRecords

from broker import records
from broker.partition import Partition
from broker.storage import Log
from tests.broker.conftest import make_batch


def _append(p: Partition, data: bytes) -> int:
    h = records.parse_header(data)
    if h.is_control:
        h.control_type = records.control_type(data, 0, h.length)
    base, _last, _dup = p.append_as_leader(data, h, check_sequences=not h.is_control)
    return base


def _marker(kind: int, pid: int, epoch: int = 0) -> bytes:
    return records.control_batch(kind, pid, epoch, 0, 1000)


def _partition(tmp_path) -> Partition:
    lg = Log(str(tmp_path / "t-0"))
    p = Partition("t", 0, lg, 1)
    lg.open(on_batch=p.note_batch)
    p.role = "leader"
    p.leader_epoch = 0
    p.isr = [1]
    return p


def test_a_control_batch_is_one_marker_record_kafka_clients_read():
    data = _marker(records.COMMIT_MARKER, 42, 3)
    [(_, h)] = list(records.iter_batches(data, check_crc=True))
    assert h.is_control and h.is_transactional and h.control_type == records.COMMIT_MARKER
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (42, 3, -1, 1)
    batch = MemoryRecords(data).next_batch()
    assert batch.is_control_batch and batch.is_transactional
    assert [r.key for r in batch] == [b"\x00\x00\x00\x01"]
    assert records.control_type(_marker(records.ABORT_MARKER, 1), 0, len(_marker(records.ABORT_MARKER, 1))) == 0


def test_producers_cannot_send_control_batches():
    data = _marker(records.COMMIT_MARKER, 42)
    try:
        records.validate_produce_batch(data)
    except records.InvalidBatch as e:
        assert "control" in str(e)
    else:
        raise AssertionError("a control batch was accepted from a producer")


def test_open_aborted_and_last_stable_offset(tmp_path):
    p = _partition(tmp_path)
    _append(p, make_batch([b"plain"]))                                                       # 0
    _append(p, make_batch([b"a1", b"a2"], producer_id=7, producer_epoch=0, base_sequence=0,
                          transactional=True))                                               # 1-2
    _append(p, make_batch([b"b1"], producer_id=8, producer_epoch=0, base_sequence=0, transactional=True))  # 3
    p.hw = p.leo
    assert p.txns.open == {7: 1, 8: 3} and p.lso == 1
    _append(p, _marker(records.ABORT_MARKER, 7))                                             # 4
    p.hw = 4  # the marker not replicated yet: 7's transaction is still unsettled
    assert p.lso == 1
    p.hw = p.leo
    assert p.lso == 3  # 8's transaction still open
    _append(p, _marker(records.COMMIT_MARKER, 8))                                            # 5
    p.hw = p.leo
    assert p.lso == p.hw == 6
    assert p.txns.aborted == [(7, 1, 4)]
    assert p.txns.aborted_between(0, 6) == [(7, 1)]
    assert p.txns.aborted_between(5, 6) == []  # the aborted range ended before the fetch
    assert p.txns.aborted_between(0, 1) == []  # and began after it
    # Recovery rebuilds the same state from the segments.
    p.log.close()
    q = _partition(tmp_path)
    assert q.txns.aborted == [(7, 1, 4)] and q.txns.open == {}
    # A truncation below the markers reopens both transactions.
    q.truncate_to(4)
    q.hw = q.leo
    assert q.txns.open == {7: 1, 8: 3} and q.txns.aborted == [] and q.lso == 1
    q.log.close()


def test_a_marker_of_a_newer_epoch_fences_the_older_one(tmp_path):
    p = _partition(tmp_path)
    _append(p, make_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True))
    _append(p, _marker(records.ABORT_MARKER, 7, epoch=1))
    late = make_batch([b"y"], producer_id=7, producer_epoch=0, base_sequence=1, transactional=True)
    try:
        _append(p, late)
    except Exception as e:
        assert getattr(e, "code", None) == 47  # INVALID_PRODUCER_EPOCH
    else:
        raise AssertionError("a fenced epoch appended")
    p.log.close()
