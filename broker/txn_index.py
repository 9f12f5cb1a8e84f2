"""One partition replica's transactions (the transaction half of Kafka's
ProducerStateManager, and its aborted-transaction index): which producers
have a transaction open in this log and at which offset it started, the
transactions that were aborted, and from both the last stable offset.

Everything here is derived from batch headers, in log order: a
transactional data batch opens its producer's transaction at its base
offset (if none is open); a control batch (the coordinator's COMMIT or
ABORT marker) closes it, and an ABORT adds (producer id, first offset,
marker offset) to the aborted index.  So leaders and followers build the
same state from the same log, recovery rebuilds it from the segments, and a
truncation rebuilds it from what remains.

The last stable offset (LSO) is the smaller of the HW and the first offset
of the earliest transaction not yet settled: open, or closed by a marker
that is not below the HW yet (as Kafka: a read_committed reader reads a
transaction only once its marker is replicated).
"""

from __future__ import annotations

import bisect

from broker.records import ABORT_MARKER, BatchHeader


class PartitionTxns:
    def __init__(self):
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.unreplicated: list[tuple[int, int]] = []  # (first offset, marker offset) not below the HW yet
        self.aborted: list[tuple[int, int, int]] = []  # (producer id, first offset, marker offset), log order
        self._aborted_ends: list[int] = []  # the marker offsets of `aborted`, for bisecting
        self.markers: dict[int, tuple[int, int, int]] = {}  # producer id -> (epoch, type, offset) of its last marker

    def clear(self) -> None:
        self.__init__()

    def note(self, h: BatchHeader) -> None:
        """One batch appended to (or found in) the log, in offset order."""
        if not h.is_transactional or h.producer_id < 0:
            return
        pid = h.producer_id
        if not h.is_control:
            self.open.setdefault(pid, h.base_offset)
            return
        self.markers[pid] = (h.producer_epoch, h.control_type, h.base_offset)
        first = self.open.pop(pid, None)
        if first is None:
            return  # a marker for a partition this producer wrote nothing to (or a repeated marker)
        self.unreplicated.append((first, h.base_offset))
        if h.control_type == ABORT_MARKER:
            self.aborted.append((pid, first, h.base_offset))
            self._aborted_ends.append(h.base_offset)

    def first_unstable(self, hw: int) -> int | None:
        """The first offset of the earliest transaction a read_committed reader must not pass yet."""
        if self.unreplicated:
            self.unreplicated = [(f, m) for f, m in self.unreplicated if m >= hw]
        firsts = list(self.open.values()) + [f for f, _ in self.unreplicated]
        return min(firsts) if firsts else None

    def lso(self, hw: int) -> int:
        first = self.first_unstable(hw)
        return hw if first is None else min(hw, first)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction with records in [start, end)."""
        i = bisect.bisect_left(self._aborted_ends, start)
        return [(pid, first) for pid, first, _ in self.aborted[i:] if first < end]

    def open_transaction(self, producer_id: int) -> int | None:
        return self.open.get(producer_id)
