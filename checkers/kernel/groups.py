"""Consumer groups: what a group's members handled against what it committed
(docs/history.md, "Consumer groups").

Three frames:

- `GroupRecords` (first stage, a shard of values): each record of a final
  log, once per group whose final committed offset of that partition is
  known and whose members record processing, with where the group stood
  (its final committed offset, the lowest offset a member was delivered)
  and whether a member handled the record (a `process` of it completed ok
  or info, or never completed; or a transaction carrying the group that
  read it committed, or may have: info);
- `GroupValues` (first stage): each value a group's members processed,
  with how many `process` completions said ok (and committed
  transactions of the group read it);
- `Commits` (second stage, a shard of partitions): each `committed` read
  of a partition, with the greatest offset a commit of it had been
  acknowledged at before the read began and was not taken back by a lower
  commit invoked before the read ended.

Which process belongs to which group, the groups' committed reads, their
final committed offsets and where their members began reading come from
the driver's folds (`Facts`): they are few.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.compiled import compiled, first_not_below
from checkers.kernel import rows as r
from checkers.kernel.facts import Facts, lookup
from core.history.format import MAX_OFFSET

NONE = r.NONE
_ROW_BITS = 43  # a value's row below a group's id, packed in one int64


@dataclass
class GroupRecords:
    """A row per (group, record of a final log) (module docstring)."""

    group: np.ndarray
    value: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    final_committed: np.ndarray
    first_delivered: np.ndarray
    handled: np.ndarray  # bool
    read_index: np.ndarray  # the first poll that delivered it to a member of the group (-1: none)
    read_process: np.ndarray
    key = ("group", "value")  # what an anomaly of it counts

    def __len__(self) -> int:
        return len(self.group)


@dataclass
class GroupValues:
    """A row per (group, value) its members processed (module docstring)."""

    group: np.ndarray
    value: np.ndarray
    processed_ok: np.ndarray  # how many `process` completions said ok
    first_index: np.ndarray  # the first two of them
    second_index: np.ndarray

    def __len__(self) -> int:
        return len(self.group)


def _members(process: np.ndarray, facts: Facts) -> np.ndarray:
    """Each process's group (-1: none)."""
    return lookup(facts.member, process)


def group_records(values: np.ndarray, final_row: np.ndarray, final_pos: np.ndarray, processed: r.Rows,
                  processed_row: np.ndarray, reads: r.Rows, read_row: np.ndarray, facts: Facts) -> GroupRecords:
    """The frame of a shard's final-log records (their values' rows
    `final_row`, distinct with their positions `final_pos`), its processed
    records (`processed`, their rows `processed_row`) and its reads."""
    empty = np.empty(0, np.int64)
    parts: list[list[np.ndarray]] = []
    partition = final_pos >> r.POS_BITS
    handled_kinds = np.isin(processed.kind, (r.PROCESSED_OK, r.PROCESSED_INFO, r.PROCESSED_OPEN))
    processed_group = _members(processed.process, facts)
    read_group = _members(reads.process, facts)
    for g in sorted(facts.processing):
        committed = {p: c for (gg, p), c in facts.final_committed.items() if gg == g and c >= 0}
        if not committed:
            continue
        c = lookup(committed, partition)
        at = np.flatnonzero(c >= 0)
        if not len(at):
            continue
        rows_of = final_row[at]
        handled = np.isin(rows_of, processed_row[handled_kinds & (processed_group == g)])
        delivered = lookup({p: d for (gg, p), d in facts.first_delivered.items() if gg == g}, partition[at])
        first_read, first_process = _first_by_row(read_row[read_group == g], reads.index[read_group == g],
                                                  reads.process[read_group == g], rows_of)
        parts.append([np.full(len(at), g), values[rows_of], partition[at], final_pos[at] & MAX_OFFSET, c[at],
                      delivered, handled, first_read, first_process])
    columns = [np.concatenate(c) if c else empty for c in zip(*parts)] if parts else [empty] * 6 + [
        np.empty(0, bool), empty, empty]
    return GroupRecords(*columns)


def _first_by_row(row: np.ndarray, index: np.ndarray, process: np.ndarray,
                  wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of `wanted` (value rows), the least `index` among `row`'s and its process (-1: none)."""
    first, who = np.full(len(wanted), NONE, np.int64), np.full(len(wanted), NONE, np.int64)
    if not len(row) or not len(wanted):
        return first, who
    order = np.lexsort((index, row))
    row, index, process = row[order], index[order], process[order]
    at = np.searchsorted(row, wanted)
    found = (at < len(row)) & (row[np.minimum(at, len(row) - 1)] == wanted)
    first[found], who[found] = index[at[found]], process[at[found]]
    return first, who


def group_values(values: np.ndarray, processed: r.Rows, processed_row: np.ndarray, facts: Facts) -> GroupValues:
    """The frame of a shard's processed records: per (group, value), the ok completions."""
    group = _members(processed.process, facts)
    ok = np.flatnonzero((processed.kind == r.PROCESSED_OK) & np.isin(group, list(facts.processing)))
    key = (group[ok] << _ROW_BITS) | processed_row[ok]
    order = np.lexsort((processed.index[ok], key))
    key, index = key[order], processed.index[ok][order]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1]))) if len(key) else np.empty(0, np.int64)
    times = np.diff(np.append(starts, len(key)))
    second = np.where(times >= 2, index[np.minimum(starts + 1, max(len(index) - 1, 0))], NONE) if len(starts) else starts
    return GroupValues(key[starts] >> _ROW_BITS, values[key[starts] & ((1 << _ROW_BITS) - 1)], times, index[starts],
                       second)


@dataclass
class Commits:
    """A row per `committed` read of a partition this shard holds (module docstring)."""

    group: np.ndarray
    partition: np.ndarray
    returned: np.ndarray  # what it returned (-1: the group had none)
    invoke_index: np.ndarray
    completion_index: np.ndarray
    final: np.ndarray  # bool
    acked: np.ndarray  # the greatest offset acknowledged before it and not taken back (-1: none)
    acked_index: np.ndarray  # that commit's completion

    def __len__(self) -> int:
        return len(self.group)


def commits(rows: r.Rows, facts: Facts, partitions: set[int]) -> Commits:
    """The frame of a shard's commit rows and the committed reads of
    `partitions` (those its commit rows are of)."""
    reads = [c for c in facts.committed if c.partition in partitions]
    out = {name: np.full(len(reads), NONE, np.int64) for name in ("acked", "acked_index")}
    by_pair: dict[tuple[int, int], list[int]] = {}
    for i, c in enumerate(reads):
        by_pair.setdefault((c.group, c.partition), []).append(i)
    partition = rows.pos >> r.POS_BITS
    for (g, p), which in by_pair.items():
        mine = (rows.x == g) & (partition == p)
        oks = np.flatnonzero(mine & (rows.kind == r.COMMIT_OK))
        invokes = np.flatnonzero(mine & (rows.kind == r.COMMIT_INVOKE))
        invokes = invokes[np.argsort(rows.index[invokes], kind="stable")]
        for i in which:
            out["acked"][i], out["acked_index"][i] = _acked(
                rows.index[oks], rows.pos[oks] & MAX_OFFSET, rows.index[invokes], rows.pos[invokes] & MAX_OFFSET,
                reads[i].invoke_index, reads[i].completion_index)
    return Commits(np.array([c.group for c in reads], np.int64), np.array([c.partition for c in reads], np.int64),
                   np.array([c.returned for c in reads], np.int64), np.array([c.invoke_index for c in reads], np.int64),
                   np.array([c.completion_index for c in reads], np.int64),
                   np.array([c.final for c in reads], bool), out["acked"], out["acked_index"])


@compiled
def _acked(ok_index, ok_offset, invoke_index, invoke_offset, read_invoke, read_complete):
    """The greatest offset of a commit acknowledged (`ok_`) before `read_invoke`
    that no commit at a lower offset invoked (`invoke_`, by index) after
    that acknowledgement and before `read_complete` took back, and that
    acknowledgement's index (-1, -1: none)."""
    best, best_index = -1, -1
    for k in range(len(ok_index)):
        if ok_index[k] >= read_invoke or ok_offset[k] <= best:
            continue
        lo = first_not_below(invoke_index, ok_index[k] + 1, 0, len(invoke_index))
        taken_back = False
        j = lo
        while j < len(invoke_index) and invoke_index[j] < read_complete:
            if invoke_offset[j] < ok_offset[k]:
                taken_back = True
                break
            j += 1
        if not taken_back:
            best, best_index = ok_offset[k], ok_index[k]
    return best, best_index
