"""Send order on the driver, as the history is read: nonmonotonic-send.

Each process's acknowledged sends to a partition, taken in the order it
invoked them: a send acknowledged at a lower offset than the send just
before it is one occurrence (docs/history.md). The driver pairs every send
with its invocation while it validates the history (checkers/reading.py),
so it has each acknowledgement's invocation index at hand; ordering them
here, in compiled passes, spares Spark's window pass the shuffle and sort
of every acknowledged send, most of its rows (docs/benchmarks.md).

The order is settled batch by batch, so that memory follows the sends in
flight, not the history: an acknowledgement waits only while an earlier
send invocation of its process is still unanswered (its place among that
process's acknowledgements is not known before). Once settled, only each
(process, partition)'s last acknowledgement is kept, in a table by the
group's row, to compare the next one with.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from checkers.anomalies import MAX_EXAMPLES
from checkers.compiled import compiled, first_not_below
from checkers.key_rows import seen_rows

# A send's (process, partition) packed in one int64: the partition in the low bits
# (core.history.format.MAX_PARTITION fits).
PARTITION_BITS = 23
_NONE = np.iinfo(np.int64).min  # a group's last acknowledgement's invocation, before it has one


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
        # The (process, partition) groups seen, and each one's last settled
        # acknowledgement (by the group's row): its value, offset, invocation.
        self._groups = np.empty(0, np.int64)
        self._last = np.empty((0, 3), np.int64)

    def add(self, acks: Acks, open_process: np.ndarray, open_index: np.ndarray) -> None:
        """One batch's acknowledgements; `open_process` and `open_index`: the
        send invocations left unanswered after it (any order)."""
        pending = self._pending + acks
        if not len(pending.group):
            return
        # Each process's first unanswered invocation: acknowledgements of sends
        # invoked after it may yet have an acknowledgement placed before them.
        settled = np.ones(len(pending.group), bool)
        if len(open_index):
            procs, first = _min_by_key(open_process, open_index)
            _mark_waiting(pending.group >> PARTITION_BITS, pending.invoke_index, procs, first, settled)
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
        # Each group's acknowledgements in invocation order, each compared with
        # the one before it (its group's last, kept in a table by group):
        # compiled passes, where sorts and gathers of every column took 0.2 s
        # of a 10M-event history's read (docs/benchmarks.md).
        rows, self._groups = seen_rows(acks.group, self._groups)
        if len(self._groups) > len(self._last):
            self._last = np.concatenate((self._last, np.full((len(self._groups) - len(self._last), 3), _NONE)))
        order = _by_group_then_invocation(rows, len(self._groups), acks.invoke_index)
        back, before = np.empty(len(order), np.int64), np.empty((len(order), 3), np.int64)
        found = _steps_back(order, rows, acks.value, acks.offset, acks.invoke_index, self._last, back, before)
        self.count += found
        if found:
            first = np.argsort(acks.invoke_index[back[:found]], kind="stable")[:MAX_EXAMPLES]
            examples = [_example(acks, int(back[k]), before[k]) for k in first.tolist()]
            self._examples = sorted(self._examples + examples, key=lambda e: e["invoke_index"])[:MAX_EXAMPLES]


@compiled
def _steps_back(order, rows, value, offset, invoke_index, last, back, before):
    """Walk the acknowledgements in `order` (each group's in invocation
    order), each compared with its group's `last` (value, offset,
    invocation; updated on the way): each one at a lower offset into
    `back`, the one before it into `before`; how many."""
    found = 0
    for i in order:
        g = rows[i]
        if last[g, 2] != _NONE and offset[i] < last[g, 1]:
            back[found] = i
            before[found, 0], before[found, 1], before[found, 2] = last[g, 0], last[g, 1], last[g, 2]
            found += 1
        last[g, 0], last[g, 1], last[g, 2] = value[i], offset[i], invoke_index[i]
    return found


def _example(acks: Acks, i: int, before: np.ndarray) -> dict:
    """The step back to acknowledgement `i` (a row of `acks`) from the one
    before it (`before`: its value, offset and invocation index)."""
    group = int(acks.group[i])
    prev_value, prev_offset, prev_invoke_index = before.tolist()
    return {"process": group >> PARTITION_BITS, "partition": group & ((1 << PARTITION_BITS) - 1),
            "prev_value": prev_value, "prev_offset": prev_offset, "prev_invoke_index": prev_invoke_index,
            "value": int(acks.value[i]), "offset": int(acks.offset[i]),
            "invoke_index": int(acks.invoke_index[i]), "ack_index": int(acks.ack_index[i])}


def _by_group_then_invocation(rows: np.ndarray, groups: int, invoke_index: np.ndarray) -> np.ndarray:
    """The order of acknowledgements by their group's row (`rows`, of
    `groups`), then by invocation index. Each acknowledgement answers its
    own invocation, so no two share both. In compiled passes: the rows put
    in their group's place (a stable counting sort), then each group's into
    invocation order by insertion, since a process's acknowledgements of
    one partition come mostly in the order it sent them. Where too many are
    out of that order, one sort by the two keys."""
    order = np.empty(len(rows), np.int64)
    if _grouped_in_invocation_order(rows, groups, invoke_index, order, _MOVES_PER_ROW * len(rows)):
        return order
    return np.lexsort((invoke_index, rows))


# Rows moved by the insertion, per row, past which `_by_group_then_invocation` sorts instead.
_MOVES_PER_ROW = 16


@compiled
def _grouped_in_invocation_order(rank, groups, index, order, most_moves):
    """`order` of rows by `rank` (0 .. `groups` - 1), then by `index`
    within each: a counting sort, then insertion within each rank's rows.
    False, `order` half made, once the insertion has moved more than
    `most_moves` rows."""
    start = np.zeros(groups + 1, np.int64)
    for r in rank:
        start[r + 1] += 1
    for g in range(groups):
        start[g + 1] += start[g]
    place = start[:-1].copy()
    for i in range(len(rank)):
        order[place[rank[i]]] = i
        place[rank[i]] += 1
    moves = 0
    for g in range(groups):
        first, end = start[g], start[g + 1]
        for k in range(first + 1, end):
            row = order[k]
            at = index[row]
            j = k - 1
            while j >= first and index[order[j]] > at:
                order[j + 1] = order[j]
                j -= 1
            moves += k - 1 - j
            order[j + 1] = row
        if moves > most_moves:
            return False
    return True


@compiled
def _mark_waiting(process, invoke_index, procs, first, settled):
    """Unmark in `settled` each acknowledgement invoked after its process's
    first unanswered invocation (`procs`, sorted, and `first`): a binary
    search of the few processes with one."""
    for i in range(len(process)):
        at = first_not_below(procs, process[i], 0, len(procs))
        if at < len(procs) and procs[at] == process[i] and invoke_index[i] >= first[at]:
            settled[i] = False


def _min_by_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys, sorted, and the least value of each."""
    order = np.lexsort((values, keys))
    keys = keys[order]
    starts = np.flatnonzero(np.append(True, keys[1:] != keys[:-1]))
    return keys[starts], values[order][starts]
