"""Send order: each producer's acknowledged sends to a partition, in the order
it invoked them (the sends of one transaction, which share its invocation,
in the order it lists them), each beside the one just before it.

The first stage pairs every acknowledged send with its invocation (ACK
rows: the completion's position and index, the invocation's index); the
second stage's shards are sets of partitions, so each (process,
partition)'s acknowledgements are in one shard. Taken in invocation order
(a stable sort of the invocations' indexes: each part of the shard's
acknowledgements comes in the order of values, which a producer sends
rising, so the sort merges a few runs), each is paired with the last one
of its pair before it by one compiled pass.

The frame has a row per acknowledgement but the first of each pair (about
one per acknowledged send), and nonmonotonic-send reads two of its columns
whole: the offsets. The others are taken from the ACK rows only at the
rows asked for (`checkers.anomaly.Lazy`: the examples' few), not gathered
whole (seven columns of a shard's acknowledgements, each first touched
memory).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.anomaly import Lazy
from checkers.compiled import compiled
from checkers.kernel import rows as r
from checkers.key_rows import PARTITION_BITS, fits_above_partition, seen_rows
from core.history.format import MAX_OFFSET


def _taken(source: np.ndarray, rows: np.ndarray, then=None) -> Lazy:
    """A column of `source`'s elements at `rows` (through `then`, if given), made where asked for."""
    if then is None:
        return Lazy(len(rows), lambda at: source[rows[at]])
    return Lazy(len(rows), lambda at: then(source[rows[at]]))


def _partition(pos: np.ndarray) -> np.ndarray:
    return pos >> r.POS_BITS


@dataclass
class SendOrder:
    """A row per acknowledged send that has one before it (same process
    and partition, invoked earlier), with that one (`prev_`). The offsets
    are columns; the rest `Lazy` (module docstring)."""

    process: Lazy
    partition: Lazy
    value: Lazy
    offset: np.ndarray
    invoke_index: Lazy
    ack_index: Lazy
    prev_value: Lazy
    prev_offset: np.ndarray
    prev_invoke_index: Lazy

    def __len__(self) -> int:
        return len(self.offset)


def send_order(acks: r.Rows, txn_acks: r.Rows | None = None) -> SendOrder:
    """The frame of a shard's ACK rows; `txn_acks`, its TXN_ACK rows: the
    sends of one transaction (one invocation) are taken in the order its
    invocation lists them."""
    this, before = _each_after_the_last(acks.process, acks.pos >> r.POS_BITS, acks.x, _places(acks, txn_acks))
    offset, prev_offset = acks.pos[this], acks.pos[before]
    offset &= MAX_OFFSET
    prev_offset &= MAX_OFFSET
    return SendOrder(_taken(acks.process, this), _taken(acks.pos, this, _partition), _taken(acks.value, this),
                     offset, _taken(acks.x, this), _taken(acks.index, this), _taken(acks.value, before), prev_offset,
                     _taken(acks.x, before))


def _places(acks: r.Rows, txn_acks: r.Rows | None) -> np.ndarray | None:
    """Each acknowledgement's place in its transaction's list of sends (0 for
    a plain send), from the TXN_ACK row of its value; None where none is."""
    if txn_acks is None or not len(txn_acks) or not len(acks):
        return None
    order = np.argsort(txn_acks.value)
    values = txn_acks.value[order]
    at = np.minimum(np.searchsorted(values, acks.value), len(values) - 1)
    return np.where(values[at] == acks.value, txn_acks.x[order][at], 0)


def _each_after_the_last(process: np.ndarray, partition: np.ndarray, invoke_index: np.ndarray,
                         place: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each acknowledgement that has one before it in its (process,
    partition) by invocation (and `place`, where given, within one), and
    that one: the pairs numbered by a table of those seen, the
    acknowledgements walked in invocation order; else by a sort by all."""
    if len(process) and fits_above_partition(process):
        group, pairs = seen_rows((process << PARTITION_BITS) | partition)
        this, before = np.empty(len(group), np.int64), np.empty(len(group), np.int64)
        walk = np.argsort(invoke_index, kind="stable") if place is None else np.lexsort((place, invoke_index))
        n = _after_last(walk, group, np.full(len(pairs), -1, np.int64), this, before)
        return this[:n], before[:n]
    order = np.lexsort((invoke_index, partition, process) if place is None else
                       (place, invoke_index, partition, process))
    process, partition = process[order], partition[order]
    after = np.flatnonzero((process[1:] == process[:-1]) & (partition[1:] == partition[:-1])) + 1
    return order[after], order[after - 1]


@compiled
def _after_last(order, group, last, this, before):
    """Each row with an earlier one of its group (`group`: each row's) in
    `order`, into `this`, and that one, the group's last so far, into
    `before`; how many."""
    n = 0
    for i in order:
        g = group[i]
        j = last[g]
        if j >= 0:
            this[n], before[n] = i, j
            n += 1
        last[g] = i
    return n
