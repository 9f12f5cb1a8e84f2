"""The by-position frame: a row per position (partition, offset) known to hold a value.

A position is known where a send was acknowledged or a read returned a
record. The first stage hands on each acknowledged send (ACK) and each
position a value was read at other than its acknowledged one (EXTRA): a
read at the acknowledged position says nothing the acknowledgement does not,
so those two kinds of rows are every (position, value) pair, each once.
The second stage's shards are sets of partitions, so each position's pairs
are in one shard; a position's row is found without a sort, and the few
pairs an example shows are sorted alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.anomaly import Lazy
from checkers.compiled import compiled
from checkers.kernel import rows as r
from checkers.key_rows import key_rows
from core.history.format import MAX_OFFSET

NONE = r.NONE
_POS_BITS = r.POS_BITS


@dataclass
class ByPosition:
    """Each position known (`pos`, sorted) and how many distinct values it holds."""

    pos: np.ndarray
    n_values: np.ndarray
    # Every (position, value) pair, in no order, with its position's row and
    # the acknowledgement and the first read that show it (-1: none): the
    # ACK rows' pairs, then the EXTRA rows'. Only the examples read the
    # last three, at a few pairs (`Lazy`, taken from the rows).
    pair_row: np.ndarray
    pair_value: Lazy
    pair_ack_index: Lazy
    pair_read_index: Lazy

    def __post_init__(self) -> None:
        pos = self.pos
        self.partition = Lazy(len(pos), lambda at: pos[at] >> r.POS_BITS)
        self.offset = Lazy(len(pos), lambda at: pos[at] & MAX_OFFSET)

    def __len__(self) -> int:
        return len(self.pos)

    def values_at(self, at: np.ndarray, most: int) -> list[list[dict]]:
        """The values at rows `at` (at most `most` each, the least first),
        each with the events that show it there."""
        hit = np.flatnonzero(np.isin(self.pair_row, at))
        value, row = self.pair_value[hit], self.pair_row[hit]
        order = np.lexsort((value, row))
        hit = hit[order]
        out: dict[int, list[dict]] = {int(row): [] for row in at.tolist()}
        for row, value, ack, read in zip(row[order].tolist(), value[order].tolist(),
                                         self.pair_ack_index[hit].tolist(), self.pair_read_index[hit].tolist()):
            if len(out[row]) < most:
                refs = {"value": value}
                if ack >= 0:
                    refs["ack_index"] = ack
                if read >= 0:
                    refs["read_index"] = read
                out[row].append(refs)
        return [out[int(row)] for row in at.tolist()]

    def first_known(self, partition: np.ndarray, after: np.ndarray, before: np.ndarray) -> np.ndarray:
        """Per gap (a partition's offsets strictly between `after` and
        `before`), the first offset known inside it, or -1 if none is."""
        low = (partition << r.POS_BITS) | (after + 1)
        at = np.searchsorted(self.pos, low)
        first = self.pos[np.minimum(at, len(self.pos) - 1)] if len(self.pos) else np.zeros(len(low), np.int64)
        inside = (at < len(self.pos)) & (first < ((partition << r.POS_BITS) | before))
        return np.where(inside, first & MAX_OFFSET, NONE)


def by_position(acks: r.Rows, extra: r.Rows) -> ByPosition:
    """The frame of a shard's ACK and EXTRA rows: each pair's position's row
    by `checkers.key_rows` (a partition's offsets are dense once packed
    right above the highest offset's bits), no sort. Each kind's positions
    are packed in a compiled pass of their own, not joined first."""
    if not len(acks) + len(extra):
        empty = np.empty(0, np.int64)
        return ByPosition(empty, empty, empty, empty, empty, empty)
    bits = int(max(_highest_offset(acks.pos), _highest_offset(extra.pos))).bit_length()
    packed = [_packed(p, bits, np.empty(len(p), np.int64)) for p in (acks.pos, extra.pos)]
    known, row_of = key_rows(packed)
    rows = np.concatenate([row_of(p) for p in packed])
    del packed
    return ByPosition(_unpacked(known, bits, np.empty(len(known), np.int64)), np.bincount(rows, minlength=len(known)),
                      rows, _either(acks.value, extra.value), _either(acks.index, r.constant(NONE, len(extra))),
                      _either(acks.y, extra.index))


def _either(first: np.ndarray, second: np.ndarray) -> Lazy:
    """`first` then `second` as one column, taken from them where asked for (not joined)."""
    n = len(first)

    def of(at: np.ndarray) -> np.ndarray:
        at = np.asarray(at)
        out = np.empty(len(at), np.int64)
        low = at < n
        out[low] = first[at[low]]
        out[~low] = second[at[~low] - n]
        return out

    return Lazy(n + len(second), of)


@compiled
def _highest_offset(pos):
    """The highest offset of positions `pos` (0 if none)."""
    top = 0
    for p in pos:
        if p & MAX_OFFSET > top:
            top = p & MAX_OFFSET
    return top


@compiled
def _packed(pos, bits, out):
    """Positions with their partition right above `bits` offset bits, into `out`."""
    for i in range(len(pos)):
        out[i] = ((pos[i] >> _POS_BITS) << bits) | (pos[i] & MAX_OFFSET)
    return out


@compiled
def _unpacked(packed, bits, out):
    """`_packed` undone, into `out`."""
    mask = (1 << bits) - 1
    for i in range(len(packed)):
        out[i] = ((packed[i] >> bits) << _POS_BITS) | (packed[i] & mask)
    return out
