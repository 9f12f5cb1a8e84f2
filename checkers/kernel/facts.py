"""What the kernel's stages need from the whole history, found by the driver's
folds while it validates the history (checkers/folds/): few and small,
handed to every shard (Spark pickles them into its tasks).

The final logs (docs/history.md): the `final-reads` operations say which
polls are final reads (`brackets`: the spans of each reading process) and
where each partition's final log ends (`ends`, from the latest ok
completion that names it); `asked` is every partition some final reads
asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from checkers import registry
from checkers.compiled import compiled, first_not_below
from checkers.kernel.rows import POS_BITS

NONE = -1


@dataclass
class FinalLogs:
    """What the history's `final-reads` operations say (module docstring)."""

    present: bool = False
    brackets: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    asked: set[int] = field(default_factory=set)

    def not_reached(self) -> list[int]:
        """Partitions some final reads asked for whose log is not known."""
        return sorted(self.asked - set(self.ends))

    def warnings(self) -> list[str]:
        if not self.present:
            return ["durability was not checked: the history has no final-reads operation, so no final log "
                    f"is known ({registry.LOST_ACKED.name} and {registry.DIRTY_READ.name} are 0)"]
        short = self.not_reached()
        if short:
            return [f"durability of partitions {ranges(short)} was not checked: "
                    "the final reads did not report reaching their end"]
        return []


def ranges(ps: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, start = [], None
    for i, p in enumerate(ps):
        if start is None:
            start = p
        if i + 1 == len(ps) or ps[i + 1] != p + 1:
            out.append(str(start) if start == p else f"{start}-{p}")
            start = None
    return ", ".join(out)


@dataclass
class CommittedRead:
    """A `committed` read of one partition of a group: what it returned
    (-1: none), its invocation's and completion's indexes (the completion
    -1 where it did not complete ok), and whether it was the final one."""

    group: int
    partition: int
    returned: int
    invoke_index: int
    completion_index: int
    final: bool


@dataclass
class Facts:
    """Everything a shard needs that spans the history (module docstring)."""

    logs: FinalLogs = field(default_factory=FinalLogs)
    # Per partition: the highest offset any read returned.
    max_read: dict[int, int] = field(default_factory=dict)
    # The completions that restart read order: (process, index, partition or None for all).
    restarts: list[tuple[int, int, int | None]] = field(default_factory=list)
    # Consumer groups (docs/history.md, "Consumer groups"), by `names.groups`' ids.
    groups: list[str] = field(default_factory=list)  # id -> name
    member: dict[int, int] = field(default_factory=dict)  # process -> its group
    processing: set[int] = field(default_factory=set)  # the groups with a `process` operation
    committed: list[CommittedRead] = field(default_factory=list)
    # (group, partition) -> the final committed offset, and the lowest offset a member was delivered.
    final_committed: dict[tuple[int, int], int] = field(default_factory=dict)
    first_delivered: dict[tuple[int, int], int] = field(default_factory=dict)
    # The nodes whose replicas' disk dumps take part, by number (the final logs' records are then handed on).
    replica_nodes: list[str] = field(default_factory=list)
    # The series' buckets of the history's clock (checkers/folds/clock.py), and each partition's
    # high watermarks less one (the highest offset they say exists), from the index on which they hold.
    clock: object = None
    hw: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def replicas(self) -> bool:
        return bool(self.replica_nodes)

    @property
    def final_records_wanted(self) -> bool:
        """Whether the first stage hands on the final logs' records: for the
        replicas, and for the groups' consumer-loss."""
        return self.replicas or bool(self.final_committed)


# A mapping whose keys are all below this (partitions) is looked up in a table.
TABLE_KEYS = 1 << 16


def lookup(mapping: dict[int, int], keys: np.ndarray, of_positions: bool = False) -> np.ndarray:
    """`mapping[key]` for each of `keys`, -1 where a key is not in it; with
    `of_positions`, `keys` are positions (checkers/kernel/rows.py; -1 none)
    and each is looked up by its partition."""
    if not mapping or not len(keys):
        return np.full(len(keys), NONE, np.int64)
    if 0 <= min(mapping) and max(mapping) < TABLE_KEYS:
        table = np.full(max(mapping) + 1, NONE, np.int64)
        table[list(mapping)] = list(mapping.values())
        return _from_table(table, keys, of_positions, np.empty(len(keys), np.int64))
    if of_positions:
        keys = np.where(keys >= 0, keys >> POS_BITS, NONE)
    known = np.array(sorted(mapping), np.int64)
    found = np.array([mapping[k] for k in known.tolist()], np.int64)
    where = np.minimum(np.searchsorted(known, keys), len(known) - 1)
    return np.where(known[where] == keys, found[where], NONE)


@compiled
def _from_table(table, keys, of_positions, out):
    """Each key's entry of `table` (of a position, its partition's), -1 for
    a key outside it, into `out`: one pass."""
    for i in range(len(keys)):
        k = keys[i]
        if of_positions:
            k = k >> POS_BITS if k >= 0 else NONE
        out[i] = table[k] if 0 <= k < len(table) else NONE
    return out


def in_brackets(process: np.ndarray, index: np.ndarray, brackets: dict[int, list[tuple[int, int]]]) -> np.ndarray:
    """Whether each event (by its process and index) lies strictly inside a
    final-reads bracket of its process: one compiled pass, each event's
    process looked for among the few with brackets."""
    inside = np.zeros(len(process), bool)
    if not brackets or not len(process):
        return inside
    procs = np.array(sorted(brackets), np.int64)
    spans = [sorted(brackets[p]) for p in procs.tolist()]
    first = np.cumsum([0] + [len(s) for s in spans], dtype=np.int64)
    low = np.array([lo for s in spans for lo, _ in s], np.int64)
    high = np.array([hi for s in spans for _, hi in s], np.int64)
    return _inside(process, index, procs, first, low, high, inside)


@compiled
def _inside(process, index, procs, first, low, high, inside):
    """`in_brackets`' pass: process `procs[k]`'s brackets are (`low`, `high`)
    from `first[k]` to `first[k + 1]`."""
    for i in range(len(process)):
        p = process[i]
        lo = first_not_below(procs, p, 0, len(procs))
        if lo == len(procs) or procs[lo] != p:
            continue
        for k in range(first[lo], first[lo + 1]):
            if low[k] < index[i] < high[k]:
                inside[i] = True
                break
    return inside
