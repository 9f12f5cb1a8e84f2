"""The by-position facts made on the driver, beside its by-value frame.

`checkers.anomalies.by_position` defines them in Spark: every position a
value is known at, with how many distinct values it holds. A value at one
position gives that position; a duplicated value (two positions or more)
gives its acknowledged position (the by-value row's `ack_pos`, its highest
ok send's) and every position it was read at. A value at one position has
its acknowledgement and every read there, so the same pairs are, for every
value, its `ack_pos` and its reads' positions. They serve three checks:
inconsistent-offset (positions with two values or more), poll-skip (a gap
in a consumer's offsets that skipped a known position) and the duplicates'
examples (`anomalies.add_duplicate_reads`: every read of a duplicated value).

For the histories whose by-value frame the driver makes
(checkers/driver_by_value.py), it has every pair at hand: `positions`
reduces them into each position's row in a compiled pass (the least and
greatest value there), which at 10M events takes 0.12 to 0.19 s alone,
against 0.55 s in NumPy's passes, four for Spark's aggregation, its
checkpoint and its joins, and 0.9 s sorted (docs/benchmarks.md). Larger
histories keep Spark's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from checkers.anomalies import MAX_OFFSET, POS_BITS
from checkers.compiled import compiled
from checkers.key_rows import key_rows

@dataclass
class Positions:
    """The positions known to hold a value, and those that hold two or more."""

    known: np.ndarray  # every known position, sorted, each once
    inconsistent: np.ndarray  # those holding two distinct values or more, sorted

    def first_known(self, partition: np.ndarray, after: np.ndarray, before: np.ndarray) -> np.ndarray:
        """Per gap (a partition's offsets strictly between `after` and
        `before`), the first offset known inside it, or -1 if none is."""
        low = (partition << POS_BITS) | (after + 1)
        at = np.searchsorted(self.known, low)
        first = self.known[np.minimum(at, len(self.known) - 1)] if len(self.known) else np.zeros(len(low), np.int64)
        inside = (at < len(self.known)) & (first < ((partition << POS_BITS) | before))
        return np.where(inside, first & MAX_OFFSET, -1)

    def write(self, path: Path) -> Path:
        """The known positions as Parquet (column `pos`), for Spark's read
        order pass when there are too many odd read steps to classify on the
        driver (`order.STEPS_ON_DRIVER`)."""
        pq.write_table(pa.table({"pos": self.known}), str(path), compression="none", write_statistics=False)
        return path


def positions(pos: list[np.ndarray], value: list[np.ndarray]) -> Positions:
    """The positions of the (position, value) pairs, given as arrays of
    each, a batch at a time: each value's acknowledged position and every
    read's. A position holds two values or more iff its least and greatest
    value differ: each pair is reduced into its position's row
    (`checkers.key_rows`, over the positions with the partition packed
    right above the highest offset's bits, so that a partition's offsets
    are dense), not sorted."""
    bits = max((_highest_offset(p) for p in pos if len(p)), default=0).bit_length()
    # Each batch packed in one compiled pass: NumPy's four made three
    # temporaries of each, the first batch's 34 MB each at 10M events.
    packed = [_repacked(p, POS_BITS, bits, np.empty(len(p), np.int64)) for p in pos]
    known, row_of = key_rows(packed)
    least = np.full(len(known), np.iinfo(np.int64).max)
    greatest = np.full(len(known), np.iinfo(np.int64).min)
    for p, v in zip(packed, value):
        _least_greatest_at(least, greatest, row_of(p), v)
    del packed
    known = _repacked(known, bits, POS_BITS, known)  # in place
    return Positions(known, known[least != greatest])


def duplicate_reads(duplicated: np.ndarray, read_value: list[np.ndarray], read_pos: list[np.ndarray],
                    read_index: list[np.ndarray]) -> pa.Table:
    """The reads of the `duplicated` values (sorted, each once) as
    `anomalies.add_duplicate_reads` gives them: per value and position read
    at, the first read's index. The reads come as arrays of each column, a
    batch at a time."""
    hits: list[list[np.ndarray]] = [[], [], []]  # value, position, index
    for batch in zip(read_value, read_pos, read_index):
        at = np.minimum(np.searchsorted(duplicated, batch[0]), max(len(duplicated) - 1, 0))
        hit = np.flatnonzero(duplicated[at] == batch[0]) if len(duplicated) else np.zeros(0, np.int64)
        for kept, column in zip(hits, batch):
            kept.append(column[hit])
    value, pos, index = (np.concatenate(kept) if kept else np.zeros(0, np.int64) for kept in hits)
    order = np.lexsort((index, pos, value))
    value, pos, index = value[order], pos[order], index[order]
    first = np.concatenate(([True], (value[1:] != value[:-1]) | (pos[1:] != pos[:-1])))[:len(value)]
    return pa.table({"value": value[first], "partition": pos[first] >> POS_BITS,
                     "offset": pos[first] & MAX_OFFSET, "index": index[first]})


@compiled
def _highest_offset(pos):
    """The highest offset of positions `pos` (not empty)."""
    high = pos[0] & MAX_OFFSET
    for p in pos:
        if p & MAX_OFFSET > high:
            high = p & MAX_OFFSET
    return high


@compiled
def _repacked(pos, from_bits, to_bits, out):
    """Positions whose offsets take the low `from_bits` bits (and no more)
    with their partitions moved right above the low `to_bits` bits, into
    `out` (which may be `pos`)."""
    mask = (1 << from_bits) - 1
    for i in range(len(pos)):
        out[i] = ((pos[i] >> from_bits) << to_bits) | (pos[i] & mask)
    return out


@compiled
def _least_greatest_at(least, greatest, rows, value):
    """Each row's least and greatest of `value`, in one pass."""
    for i in range(len(rows)):
        r, v = rows[i], value[i]
        if v < least[r]:
            least[r] = v
        if v > greatest[r]:
            greatest[r] = v
