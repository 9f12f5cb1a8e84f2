"""Read order: each consumer's reads of a partition in the order it was given
them, as a row per step that is not +1 (backwards, or jumping forwards).

A read run (checkers/kernel/extract.py) is records of one poll from one
partition, next to each other in the poll, their offsets rising by one: the
steps inside it are all +1, so only the step into each run is looked at,
from the run before it of the same process and partition, in the order of
(poll index, place in the poll). Read order restarts where the contract
says (docs/history.md, "Where the contract leaves a choice"): an `assign` or `crash`
of the process restarts every partition it reads, a `seek` the partition it
names, each only where it happened (completed ok or info), at its
completion; the driver gathers them (`Facts.restarts`). The second stage's
shards are sets of partitions, so each (process, partition)'s runs are in
one shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.kernel import rows as r
from checkers.kernel.by_position import ByPosition
from checkers.key_rows import distinct_pairs
from core.history.format import MAX_OFFSET

NONE = r.NONE
_SLOT_MASK = (1 << 32) - 1


@dataclass
class ReadOrder:
    """The odd steps: each run whose first offset is not its predecessor's
    last + 1, with that predecessor; `skipped_offset`, for a step forwards,
    the first offset known to hold a value inside the gap (-1: none)."""

    process: np.ndarray
    partition: np.ndarray
    index: np.ndarray
    slot: np.ndarray
    offset: np.ndarray
    value: np.ndarray
    prev_offset: np.ndarray
    prev_value: np.ndarray
    prev_index: np.ndarray
    skipped_offset: np.ndarray

    def __len__(self) -> int:
        return len(self.process)


def read_order(runs: r.Rows, restarts: list[tuple[int, int, int | None]], known: ByPosition) -> ReadOrder:
    """The odd steps of a shard's read runs (RUN rows), `restarts` applied,
    gaps met with the positions `known`."""
    process, index = runs.process, runs.index
    partition, first_offset = runs.pos >> r.POS_BITS, runs.pos & MAX_OFFSET
    slot, n = runs.y >> 32, runs.y & _SLOT_MASK
    last_offset = first_offset + n - 1
    # Each restart, for every partition its process reads here, or the one it names.
    reset = _resets(process, partition, restarts)
    all_process = np.concatenate((process, reset[0]))
    all_partition = np.concatenate((partition, reset[1]))
    all_index = np.concatenate((index, reset[2]))
    all_slot = np.concatenate((slot, np.zeros(len(reset[2]), np.int64)))
    order = np.lexsort((all_slot, all_index, all_partition, all_process))
    count = len(process)
    is_run = order < count
    same = np.zeros(len(order), bool)
    same[1:] = ((all_process[order][1:] == all_process[order][:-1])
                & (all_partition[order][1:] == all_partition[order][:-1]) & is_run[1:] & is_run[:-1])
    at = np.flatnonzero(same)
    this, before = order[at], order[at - 1]
    offset, prev_offset = first_offset[this], last_offset[before]
    odd = (offset <= prev_offset) | (offset > prev_offset + 1)
    this, before, offset, prev_offset = this[odd], before[odd], offset[odd], prev_offset[odd]
    skipped = np.full(len(this), NONE, np.int64)
    gap = offset > prev_offset + 1
    if gap.any():
        skipped[gap] = known.first_known(partition[this][gap], prev_offset[gap], offset[gap])
    return ReadOrder(process[this], partition[this], index[this], slot[this], offset, runs.value[this],
                     prev_offset, runs.x[before], index[before], skipped)


def _resets(process: np.ndarray, partition: np.ndarray,
            restarts: list[tuple[int, int, int | None]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(process, partition, index) of each restart of a (process, partition) pair read here."""
    found: tuple[list, list, list] = ([], [], [])
    if restarts and len(process):
        read_by: dict[int, list[int]] = {}
        for p, q in zip(*(column.tolist() for column in distinct_pairs(process, partition))):
            read_by.setdefault(p, []).append(q)
        for p, i, only in restarts:
            for q in read_by.get(p, ()):
                if only is None or only == q:
                    found[0].append(p)
                    found[1].append(q)
                    found[2].append(i)
    return tuple(np.array(x, np.int64) for x in found)
