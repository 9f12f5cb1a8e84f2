"""What the reads say per partition: the highest offset any read returned
(lost-write's "reads went past it"), how many records were read, and per
(process, partition) the lowest offset read (where a consumer group's
members began: consumer-loss). Each batch's ok polls are also left on it as
one row per (poll, partition it returned records of) with the highest
offset of it (`Events.poll_reads`: time, partition, offset, process), for
liveness.
"""

from __future__ import annotations

import numpy as np

from checkers.compiled import compiled
from checkers.key_rows import PARTITION_BITS, seen_rows
from core.history.batches import Events
from core.history.format import MAX_PARTITION

_EMPTY = np.empty(0, np.int64)


class Reads:
    """The fold (checkers/folds/__init__.py)."""

    def __init__(self) -> None:
        self.highest: dict[int, int] = {}
        self.records: dict[int, int] = {}
        self.lowest_of: dict[tuple[int, int], int] = {}  # (process, partition) -> the lowest offset read

    def add(self, ev: Events) -> None:
        polls, partitions, smallest, largest = per_poll(ev)
        ev.poll_reads = (ev.time[polls], partitions, largest, ev.process[polls])
        if not len(polls):
            return
        # By partition in tables as long as the highest partition read (as `per_poll`'s).
        counts = np.bincount(ev.polled().partition)
        highest = np.full(len(counts), np.iinfo(np.int64).min)
        np.maximum.at(highest, partitions, largest)
        parts = np.flatnonzero(counts)
        for p, m, k in zip(parts.tolist(), highest[parts].tolist(), counts[parts].tolist()):
            self.highest[p] = max(self.highest.get(p, m), m)
            self.records[p] = self.records.get(p, 0) + k
        # The lowest offset per (process, partition), from each poll's lowest: the pairs are few.
        pair = (ev.process[polls] << PARTITION_BITS) | partitions
        rows, pairs = seen_rows(pair)
        lowest = np.full(len(pairs), np.iinfo(np.int64).max)
        np.minimum.at(lowest, rows, smallest)
        for key, low in zip(pairs.tolist(), lowest.tolist()):
            key = (key >> PARTITION_BITS, key & MAX_PARTITION)
            if key not in self.lowest_of or low < self.lowest_of[key]:
                self.lowest_of[key] = low


def per_poll(ev: Events) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each ok poll of the batch and partition it returned records of: the
    poll's row, the partition, its least and greatest offset in the poll."""
    recs = ev.polled()
    if not len(recs):
        return (_EMPTY,) * 4
    return _per_poll(recs.parent, recs.partition, recs.offset, np.full(int(recs.partition.max()) + 2, -1))


@compiled
def _per_poll(parent, partition, offset, group_of):
    """Per poll (`parent`: each record's, non-decreasing) and partition it
    read, once, in the order of their first records: the poll, partition,
    and least and greatest offset, in one pass. `group_of`: -1 for each
    partition + 1 (a null's is -1), its row of the output once it has one."""
    n = len(parent)
    poll, part = np.empty(n, np.int64), np.empty(n, np.int64)
    low, top = np.empty(n, np.int64), np.empty(n, np.int64)
    k = 0
    for i in range(n):
        g = group_of[partition[i] + 1]
        if g < 0 or poll[g] != parent[i]:  # the partition's first record in this poll
            group_of[partition[i] + 1] = k
            poll[k], part[k], low[k], top[k] = parent[i], partition[i], offset[i], offset[i]
            k += 1
        elif offset[i] > top[g]:
            top[g] = offset[i]
        elif offset[i] < low[g]:
            low[g] = offset[i]
    return poll[:k], part[:k], low[:k], top[:k]
