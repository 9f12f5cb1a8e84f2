"""The by-position frame: a row per position (partition, offset) known to hold a value.

A position is known where a send was acknowledged or a read returned a
record. The first stage hands on each acknowledged send (ACK) and each
position a value was read at other than its acknowledged one (EXTRA): a
read at the acknowledged position says nothing the acknowledgement does not,
so those two kinds of rows are every (position, value) pair, each once.
The second stage's shards are sets of partitions, so each position's pairs
are in one shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.kernel import rows as r
from core.history.format import MAX_OFFSET

NONE = r.NONE


@dataclass
class ByPosition:
    """Each position known (`pos`, sorted) and how many distinct values it holds."""

    pos: np.ndarray
    n_values: np.ndarray
    # Every (position, value) pair, by position then value, with the
    # acknowledgement and the first read that show it (-1: none).
    pair_pos: np.ndarray
    pair_value: np.ndarray
    pair_ack_index: np.ndarray
    pair_read_index: np.ndarray

    def __post_init__(self) -> None:
        self.partition = self.pos >> r.POS_BITS
        self.offset = self.pos & MAX_OFFSET

    def __len__(self) -> int:
        return len(self.pos)

    def values_at(self, at: np.ndarray, most: int) -> list[list[dict]]:
        """The values at rows `at` (at most `most` each), each with the
        events that show it there."""
        out = []
        for pos in self.pos[at].tolist():
            lo, hi = np.searchsorted(self.pair_pos, pos, "left"), np.searchsorted(self.pair_pos, pos, "right")
            values = []
            for k in range(lo, min(hi, lo + most)):
                refs = {"value": int(self.pair_value[k])}
                if self.pair_ack_index[k] >= 0:
                    refs["ack_index"] = int(self.pair_ack_index[k])
                if self.pair_read_index[k] >= 0:
                    refs["read_index"] = int(self.pair_read_index[k])
                values.append(refs)
            out.append(values)
        return out

    def first_known(self, partition: np.ndarray, after: np.ndarray, before: np.ndarray) -> np.ndarray:
        """Per gap (a partition's offsets strictly between `after` and
        `before`), the first offset known inside it, or -1 if none is."""
        low = (partition << r.POS_BITS) | (after + 1)
        at = np.searchsorted(self.pos, low)
        first = self.pos[np.minimum(at, len(self.pos) - 1)] if len(self.pos) else np.zeros(len(low), np.int64)
        inside = (at < len(self.pos)) & (first < ((partition << r.POS_BITS) | before))
        return np.where(inside, first & MAX_OFFSET, NONE)


def by_position(acks: r.Rows, extra: r.Rows) -> ByPosition:
    """The frame of a shard's ACK and EXTRA rows."""
    pos = np.concatenate((acks.pos, extra.pos))
    value = np.concatenate((acks.value, extra.value))
    ack_index = np.concatenate((acks.index, np.full(len(extra), NONE, np.int64)))
    read_index = np.concatenate((acks.y, extra.index))
    order = np.lexsort((value, pos))
    pos, value, ack_index, read_index = pos[order], value[order], ack_index[order], read_index[order]
    starts = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1]))) if len(pos) else np.empty(0, np.int64)
    n_values = np.diff(np.append(starts, len(pos)))
    return ByPosition(pos[starts], n_values, pos, value, ack_index, read_index)
