"""The by-position facts made on the driver (checkers/driver_by_position.py)
are Spark's (`anomalies.by_position`, `anomalies.add_duplicate_reads`): the
same known and inconsistent positions, the same reads of duplicated values;
and a gap finds the first known offset strictly inside it, in its own
partition only."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from checkers import anomalies as an
from checkers import check as check_module
from checkers.driver_by_position import Positions
from checkers.driver_by_value import ValueRows
from checkers.load import load, prepare
from checkers.reading import HistoryReader
from core.history.files import resolve
from tests.checkers.conftest import every_role

P = an.POS_BITS


def _history():
    h = every_role()
    h.send(5, 14, 3, 0)
    h.add(5, "ok", "send", value=14, partition=3, offset=1)  # acknowledged twice, never read: the later counts
    h.send(5, 15, 3, 5)
    h.send(5, 16, 3, 5)  # two values acknowledged at one position, neither read
    h.poll(12, (3, 7, 17), (3, 7, 18))  # two values read at one position, sent by no one
    return h


@pytest.mark.spark
def test_the_driver_s_positions_and_duplicate_reads_are_spark_s(spark, tmp_path):
    h = _history()
    source = resolve(h.write(tmp_path, parquet=True))
    values = ValueRows()
    read = HistoryReader(values=values)
    prepared = prepare(source, None, read.add)
    logs = an.final_logs(read.few)
    values.aggregate(logs)
    positions = values.by_position()
    frames = an.build(load(spark, prepared), logs)
    an.add_by_value(frames, logs)
    try:
        duplicates = frames.by_value.where(an.at_two_positions()).count()
        an.add_duplicate_reads(frames, duplicates)
        by_position = {r["pos"]: r["n_values"] for r in an.by_position(frames, duplicates).collect()}
        spark_reads = sorted(tuple(r) for r in frames.dup_reads.select("value", "partition", "offset", "index")
                             .collect())
    finally:
        for frame in frames.kept:
            check_module.release(frame)
    assert positions.known.tolist() == sorted(by_position)
    assert positions.inconsistent.tolist() == sorted(p for p, n in by_position.items() if n >= 2)
    driver_reads = sorted(tuple(r.values()) for r in values.duplicate_reads.to_pylist())
    assert driver_reads == spark_reads
    # Spot checks that the comparison covers what matters.
    assert 3 << P not in by_position and (3 << P) | 1 in by_position
    assert {(3 << P) | 5, (3 << P) | 7, 0, 1} <= set(positions.inconsistent.tolist())
    assert {v for v, *_ in driver_reads} == {7, 9}
    first_read = min(e["index"] for e in h.events if any(r["value"] == 9 and r["offset"] == 2
                                                          for r in e.get("records") or []))
    assert (9, 0, 2, first_read) in driver_reads


@pytest.mark.spark
def test_a_history_without_duplicates_writes_no_duplicate_reads(spark, tmp_path, hist):
    hist.send(0, 1, 0, 0)
    hist.poll(1, (0, 0, 1))
    values = ValueRows()
    read = HistoryReader(values=values)
    prepare(resolve(hist.write(tmp_path, parquet=True)), None, read.add)
    values.aggregate(an.final_logs(read.few))
    positions = values.by_position()
    assert values.duplicate_reads is None
    assert positions.known.tolist() == [0] and not len(positions.inconsistent)


def test_a_gap_finds_the_first_known_offset_strictly_inside_it_in_its_partition():
    known = Positions(np.array([3, 7, 9, (1 << P) | 0, (1 << P) | 4], np.int64), np.zeros(0, np.int64))
    partition = np.array([0, 0, 0, 0, 0, 1, 1], np.int64)
    after = np.array([3, 2, 3, 9, 7, 0, 0], np.int64)
    before = np.array([7, 8, 9, 20, 9, 4, 5], np.int64)
    assert known.first_known(partition, after, before).tolist() == [-1, 3, 7, -1, -1, -1, 4]
    empty = Positions(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert empty.first_known(partition, after, before).tolist() == [-1] * 7
