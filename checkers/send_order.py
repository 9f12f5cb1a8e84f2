"""Send order on the driver, as the history is read: nonmonotonic-send.

Each process's acknowledged sends to a partition, taken in the order it
invoked them: a send acknowledged at a lower offset than the send just
before it is one occurrence (docs/history.md). The driver pairs every send
with its invocation while it validates the history (checkers/reading.py),
so it has each acknowledgement's invocation index at hand; ordering them
here with NumPy spares Spark's window pass the shuffle and sort of every
acknowledged send, most of its rows (docs/benchmarks.md).

The order is settled batch by batch, so that memory follows the sends in
flight, not the history: an acknowledgement waits only while an earlier
send invocation of its process is still unanswered (its place among that
process's acknowledgements is not known before). Once settled, only each
(process, partition)'s last acknowledgement is kept, to compare the next
one with.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from checkers.anomalies import MAX_EXAMPLES

# A send's (process, partition) packed in one int64: the partition in the low bits
# (core.history.format.MAX_PARTITION fits).
PARTITION_BITS = 23
_NEVER = np.iinfo(np.int64).max


@dataclass
class Acks:
    """`ok` send completions paired with their invocations, one column each."""

    group: np.ndarray  # process << PARTITION_BITS | partition
    invoke_index: np.ndarray
    offset: np.ndarray
    value: np.ndarray
    ack_index: np.ndarray

    @staticmethod
    def empty() -> "Acks":
        return Acks(*(np.empty(0, np.int64) for _ in fields(Acks)))

    def take(self, rows) -> "Acks":
        return Acks(*(getattr(self, f.name)[rows] for f in fields(Acks)))

    def __add__(self, other: "Acks") -> "Acks":
        return Acks(*(np.concatenate((getattr(self, f.name), getattr(other, f.name))) for f in fields(Acks)))


def group_of(process: np.ndarray, partition: np.ndarray) -> np.ndarray:
    return (process << PARTITION_BITS) | partition


class SendOrder:
    """nonmonotonic-send over a history read in order: `add` each batch's
    acknowledgements, then `result`."""

    def __init__(self) -> None:
        self.count = 0
        self._examples: list[dict] = []  # the first MAX_EXAMPLES found so far, by invocation
        self._pending = Acks.empty()  # acknowledgements whose place may still change
        self._last = Acks.empty()  # each (process, partition)'s last settled acknowledgement

    def add(self, acks: Acks, open_process: np.ndarray, open_index: np.ndarray) -> None:
        """One batch's acknowledgements; `open_process` and `open_index`: the
        send invocations left unanswered after it (any order)."""
        pending = self._pending + acks
        if not len(pending.group):
            return
        # Each process's first unanswered invocation: acknowledgements of sends
        # invoked after it may yet have an acknowledgement placed before them.
        limit = np.full(len(pending.group), _NEVER)
        if len(open_index):
            procs, first = _min_by_key(open_process, open_index)
            process = pending.group >> PARTITION_BITS
            i = np.minimum(np.searchsorted(procs, process), len(procs) - 1)
            waiting = procs[i] == process
            limit[waiting] = first[i[waiting]]
        settled = pending.invoke_index < limit
        self._pending = pending.take(~settled)
        self._settle(pending.take(settled))

    def result(self, folded: dict[int, int]) -> tuple[int, list[dict]]:
        """How many steps back, and the first MAX_EXAMPLES by invocation, once
        every batch is in (what is still pending waits for nothing more).
        `folded` maps true offsets to the checker's folded ones
        (checkers/offsets.py): examples name folded offsets, as Spark's passes
        do, so that the results' unfolding puts the true ones back."""
        self._settle(self._pending)
        self._pending = Acks.empty()
        return self.count, [{**e, "prev_offset": folded.get(e["prev_offset"], e["prev_offset"]),
                             "offset": folded.get(e["offset"], e["offset"])} for e in self._examples]

    def _settle(self, acks: Acks) -> None:
        """Acknowledgements whose place is known: each compared with the one
        before it in its (process, partition)'s invocation order."""
        if not len(acks.group):
            return
        # With each group's last settled one, which sorts first in its group:
        # acknowledgements are settled in their process's invocation order.
        # Only the groups and offsets are put in that order; the rest is
        # looked up for the few steps back found.
        both = self._last + acks
        order = _by_group_then_invocation(both)
        group, offset = both.group[order], both.offset[order]
        same = group[1:] == group[:-1]
        back = np.flatnonzero(same & (offset[1:] < offset[:-1])) + 1
        del group, offset
        self.count += len(back)
        if len(back):
            first = back[np.argsort(both.invoke_index[order[back]], kind="stable")[:MAX_EXAMPLES]]
            found = [_example(both, order[i - 1], order[i]) for i in first.tolist()]
            self._examples = sorted(self._examples + found, key=lambda e: e["invoke_index"])[:MAX_EXAMPLES]
        self._last = both.take(order[np.append(~same, True)])


def _example(acks: Acks, before: int, i: int) -> dict:
    """The step back from acknowledgement `before` to `i` (rows of `acks`)."""
    group = int(acks.group[i])
    return {"process": group >> PARTITION_BITS, "partition": group & ((1 << PARTITION_BITS) - 1),
            "prev_value": int(acks.value[before]), "prev_offset": int(acks.offset[before]),
            "prev_invoke_index": int(acks.invoke_index[before]),
            "value": int(acks.value[i]), "offset": int(acks.offset[i]),
            "invoke_index": int(acks.invoke_index[i]), "ack_index": int(acks.ack_index[i])}


# Invocation indexes within this many bits are packed under a group's rank in one sort key.
_INDEX_BITS = 40


def _by_group_then_invocation(acks: Acks) -> np.ndarray:
    """The order of `acks` by (group, invocation index). Each acknowledgement
    answers its own invocation, so no two share both: one sort of the group's
    rank packed above the index, which took less than half the time of a
    sort by the two keys (docs/benchmarks.md); the two keys where an index
    does not fit."""
    index = acks.invoke_index
    if not len(index) or int(index.min()) < 0 or int(index.max()) >> _INDEX_BITS:
        return np.lexsort((index, acks.group))
    rank = np.unique(acks.group, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return np.argsort((rank << _INDEX_BITS) | index)


def _min_by_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys, sorted, and the least value of each."""
    order = np.lexsort((values, keys))
    keys = keys[order]
    starts = np.flatnonzero(np.append(True, keys[1:] != keys[:-1]))
    return keys[starts], values[order][starts]
