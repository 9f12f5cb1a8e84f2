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

from checkers.kernel import rows as r
from checkers.key_rows import key_rows
from core.history.format import MAX_OFFSET

NONE = r.NONE


@dataclass
class ByPosition:
    """Each position known (`pos`, sorted) and how many distinct values it holds."""

    pos: np.ndarray
    n_values: np.ndarray
    # Every (position, value) pair, in no order, with its position's row and
    # the acknowledgement and the first read that show it (-1: none).
    pair_row: np.ndarray
    pair_value: np.ndarray
    pair_ack_index: np.ndarray
    pair_read_index: np.ndarray

    def __post_init__(self) -> None:
        self.partition = self.pos >> r.POS_BITS
        self.offset = self.pos & MAX_OFFSET

    def __len__(self) -> int:
        return len(self.pos)

    def values_at(self, at: np.ndarray, most: int) -> list[list[dict]]:
        """The values at rows `at` (at most `most` each, the least first),
        each with the events that show it there."""
        hit = np.flatnonzero(np.isin(self.pair_row, at))
        hit = hit[np.lexsort((self.pair_value[hit], self.pair_row[hit]))]
        out: dict[int, list[dict]] = {int(row): [] for row in at.tolist()}
        for row, value, ack, read in zip(self.pair_row[hit].tolist(), self.pair_value[hit].tolist(),
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
    right above the highest offset's bits), no sort."""
    pos = np.concatenate((acks.pos, extra.pos))
    if not len(pos):
        empty = np.empty(0, np.int64)
        return ByPosition(empty, empty, empty, empty, empty, empty)
    offset = pos & MAX_OFFSET
    bits = int(offset.max()).bit_length()
    packed = ((pos >> r.POS_BITS) << bits) | offset
    known, row_of = key_rows([packed])
    rows = row_of(packed)
    known = ((known >> bits) << r.POS_BITS) | (known & ((1 << bits) - 1))
    return ByPosition(known, np.bincount(rows, minlength=len(known)), rows, np.concatenate((acks.value, extra.value)),
                      np.concatenate((acks.index, r.constant(NONE, len(extra)))),
                      np.concatenate((acks.y, extra.index)))
