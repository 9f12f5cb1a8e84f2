"""Send order: each producer's acknowledged sends to a partition, in the order
it invoked them, each beside the one just before it.

The first stage pairs every acknowledged send with its invocation (ACK
rows: the completion's position and index, the invocation's index); the
second stage's shards are sets of partitions, so each (process,
partition)'s acknowledgements are in one shard, put in invocation order by
one sort.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.kernel import rows as r
from checkers.key_rows import PARTITION_BITS, fits_above_partition, seen_rows
from core.history.format import MAX_OFFSET


@dataclass
class SendOrder:
    """A row per acknowledged send that has one before it (same process
    and partition, invoked earlier), with that one (`prev_`)."""

    process: np.ndarray
    partition: np.ndarray
    value: np.ndarray
    offset: np.ndarray
    invoke_index: np.ndarray
    ack_index: np.ndarray
    prev_value: np.ndarray
    prev_offset: np.ndarray
    prev_invoke_index: np.ndarray

    def __len__(self) -> int:
        return len(self.process)


def send_order(acks: r.Rows) -> SendOrder:
    """The frame of a shard's ACK rows."""
    partition = acks.pos >> r.POS_BITS
    order = _by_group_then_invocation(acks.process, partition, acks.x)
    process, partition = acks.process[order], partition[order]
    after = np.flatnonzero((process[1:] == process[:-1]) & (partition[1:] == partition[:-1])) + 1
    this, before = order[after], order[after - 1]
    offset = acks.pos & MAX_OFFSET
    return SendOrder(acks.process[this], partition[after], acks.value[this], offset[this], acks.x[this],
                     acks.index[this], acks.value[before], offset[before], acks.x[before])


def _by_group_then_invocation(process: np.ndarray, partition: np.ndarray, invoke_index: np.ndarray) -> np.ndarray:
    """The order of acknowledgements by (process, partition), then by
    invocation. They come in the order of their values, which each
    producer sends rising: a stable sort by the pair alone (its number
    among the few pairs, sorted by radix where they fit in 16 bits) then
    leaves each pair's in invocation order, which is checked; else a sort
    by all three."""
    if len(process) and fits_above_partition(process):
        group, pairs = seen_rows((process << PARTITION_BITS) | partition)
        if len(pairs) <= np.iinfo(np.int16).max:
            group = group.astype(np.int16)
        order = np.argsort(group, kind="stable")
        g, inv = group[order], invoke_index[order]
        if not ((g[1:] == g[:-1]) & (inv[1:] < inv[:-1])).any():
            return order
    return np.lexsort((invoke_index, partition, process))
