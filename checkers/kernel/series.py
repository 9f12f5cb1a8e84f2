"""The results' series over time, counted per bucket of the history's clock
(checkers/folds/clock.py), which the report draws:

- `unread`: per partition, how many acknowledged values no poll (final reads
  included) had returned yet, Jepsen's unseen count: a value counts from
  its acknowledgement until the first poll that returned it (one read before
  its acknowledgement arrived never counts); a point at each bucket the
  count changes in. From the by-value frame: each shard gives each
  (partition, bucket)'s change, the merge adds them and keeps the buckets
  whose sum is not zero;
- `lag`: per consumer process, its polls' realtime lag, the highest offset
  known to exist in a partition when a poll returned records of it (an
  acknowledgement before the poll, a high watermark the leader reported
  less one, what the poll itself returned) less the highest offset it
  returned, its worst partition's; per bucket the worst of its polls. The
  final reads' polls are left out: they read from the start by design. From
  the read runs and acknowledgements of a shard of partitions; the merge
  takes the worst of the shards'.
"""

from __future__ import annotations

import numpy as np

from checkers.compiled import compiled, first_not_below, inlined
from checkers.kernel import rows as r
from checkers.kernel.by_value import ByValue
from checkers.kernel.facts import Facts, in_brackets
from checkers.key_rows import seen_rows
from core.history.format import MAX_OFFSET, MAX_PARTITION

# Buckets of the history's clock the series count in, at most.
POINTS = 4_000
_PART_BITS = MAX_PARTITION.bit_length()
_POS_BITS = r.POS_BITS


def unread(v: ByValue, facts: Facts) -> dict[int, dict[int, int]]:
    """partition -> bucket -> the change of its count of acknowledged values
    not yet read (a change of nothing left out: it adds nothing to `merged`'s
    sums, which decide the points)."""
    buckets = len(facts.clock.bounds)
    owners, total = _unread_changes(v.ok, v.ack_pos, v.comp_index, v.read_index, facts.clock.bounds)
    out: dict[int, dict[int, int]] = {}
    for c in np.flatnonzero(total).tolist():
        out.setdefault(int(owners[c // buckets]), {})[c % buckets] = int(total[c])
    return out


@compiled
def _unread_changes(ok, ack_pos, comp_index, read_index, bounds):
    """`unread`'s changes in one pass over the values, no temporaries: the
    partitions acknowledged (in the order first seen) and a grid of them by
    the clock's buckets (`bounds`), each cell the change there: +1 in the
    bucket of a value's acknowledgement, -1 in that of its first read (or
    its acknowledgement's, if later). A value read before its
    acknowledgement arrived never counts."""
    top = -1
    for i in range(len(ok)):
        if ok[i] and comp_index[i] >= 0 and _partition_at(ack_pos, i) > top:
            top = _partition_at(ack_pos, i)
    row_of = np.full(top + 1, -1, np.int64)
    owners = np.empty(top + 1, np.int64)
    n = 0
    for i in range(len(ok)):
        if ok[i] and comp_index[i] >= 0 and row_of[_partition_at(ack_pos, i)] < 0:
            row_of[_partition_at(ack_pos, i)] = n
            owners[n] = _partition_at(ack_pos, i)
            n += 1
    buckets = len(bounds)
    total = np.zeros(n * buckets, np.int64)
    for i in range(len(ok)):
        ack, read = comp_index[i], read_index[i]
        if not ok[i] or ack < 0 or (0 <= read < ack):
            continue
        row = row_of[_partition_at(ack_pos, i)] * buckets
        b = first_not_below(bounds, ack + 1, 0, buckets) - 1  # SeriesClock.bucket of one index
        total[row + b] += 1
        if read >= 0:
            total[row + max(b, first_not_below(bounds, read + 1, 0, buckets) - 1)] -= 1
    return owners[:n], total


@inlined
def _partition_at(pos, i):
    """The partition of position `pos[i]` (-1: none)."""
    return pos[i] >> _POS_BITS if pos[i] >= 0 else -1


def lag(runs: r.Rows, acks: r.Rows, facts: Facts) -> dict[int, dict[int, int]]:
    """process -> bucket -> the worst lag of its polls in it, of this shard's partitions."""
    keep = ~in_brackets(runs.process, runs.index, facts.logs.brackets)
    partition = runs.pos[keep] >> r.POS_BITS
    last = (runs.pos[keep] & MAX_OFFSET) + (runs.y[keep] & 0xFFFFFFFF) - 1
    index, process = runs.index[keep], runs.process[keep]
    if not len(index):
        return {}
    # Each poll's highest offset of each partition (its runs of it, maxed).
    poll = (index << _PART_BITS) | partition
    polls, where = np.unique(poll, return_inverse=True)
    offset = np.full(len(polls), -1, np.int64)
    np.maximum.at(offset, where.reshape(-1), last)
    first = np.full(len(polls), 0, np.int64)
    first[where.reshape(-1)] = np.arange(len(where))
    process = process[first]
    index, partition = polls >> _PART_BITS, polls & MAX_PARTITION
    head = np.maximum(offset, _known_before(acks.pos, acks.index, partition, index))
    for p, marks in facts.hw.items():
        if marks:
            at = np.flatnonzero(partition == p)
            hw_index, hw_offset = (np.array(x, np.int64) for x in zip(*marks))
            seen = np.searchsorted(hw_index, index[at], "right") - 1
            head[at] = np.maximum(head[at], np.where(seen >= 0, np.maximum.accumulate(hw_offset)[seen], -1))
    return _worst(process, facts.clock.bucket(index), head - offset, len(facts.clock.bounds))


def _known_before(pos: np.ndarray, index: np.ndarray, q_partition: np.ndarray, q_index: np.ndarray) -> np.ndarray:
    """For each query (partition, index), the highest offset of that
    partition among positions `pos` (each >= 0) at an index below it (-1:
    none): the rows and the queries walked together in index order (the
    rows come nearly in it: a stable sort merges their runs), each
    partition's highest so far kept."""
    out = np.full(len(q_partition), -1, np.int64)
    if not len(pos) or not len(q_partition):
        return out
    queries = np.argsort(q_index, kind="stable")
    highest = np.full(max(int(pos.max()) >> _POS_BITS, int(q_partition.max())) + 1, -1, np.int64)
    return _highest_before(np.argsort(index, kind="stable"), pos, index, queries, q_partition, q_index, highest, out)


@compiled
def _highest_before(rows, pos, index, queries, q_partition, q_index, highest, out):
    """`_known_before`'s walk: `rows` and `queries` in index order, each
    partition's highest offset so far in `highest`."""
    j = 0
    for q in queries:
        while j < len(rows) and index[rows[j]] < q_index[q]:
            i = rows[j]
            partition, offset = pos[i] >> _POS_BITS, pos[i] & MAX_OFFSET
            if offset > highest[partition]:
                highest[partition] = offset
            j += 1
        out[q] = highest[q_partition[q]]
    return out


def _worst(owner: np.ndarray, bucket: np.ndarray, amount: np.ndarray, buckets: int) -> dict[int, dict[int, int]]:
    """owner -> bucket -> the greatest `amount` there."""
    row, owners = seen_rows(owner)  # few, however spread
    cell = row * buckets + bucket
    # The cells taken by a sort of the rows, not a grid of every cell: the
    # owners here are processes, thousands in a long run, and a grid of
    # them by every bucket would be tens of megabytes for a few thousand cells.
    out: dict[int, dict[int, int]] = {}
    if not len(cell):
        return out
    order = np.argsort(cell)
    cell = cell[order]
    starts = np.flatnonzero(np.concatenate(([True], cell[1:] != cell[:-1])))
    top = np.maximum.reduceat(amount[order], starts)
    for c, n in zip(cell[starts].tolist(), top.tolist()):
        out.setdefault(int(owners[c // buckets]), {})[c % buckets] = int(n)
    return out


def merged(partials: list[dict]) -> dict:
    """The shards' series as one: changes added, lags maxed. A bucket whose
    changes add up to nothing is no change of its partition's count, so no
    point, and is dropped once every shard's are added: a shard gives none
    where its own changes cancel, but changes that cancel across shards
    (one value's acknowledgement, another's first read) each come in, and
    which do depends only on how the values were cut into shards."""
    unread_: dict[int, dict[int, int]] = {}
    lag_: dict[int, dict[int, int]] = {}
    for p in partials:
        for key, buckets in p.get("unread", {}).items():
            into = unread_.setdefault(int(key), {})
            for b, n in buckets.items():
                into[int(b)] = into.get(int(b), 0) + n
        for key, buckets in p.get("lag", {}).items():
            into = lag_.setdefault(int(key), {})
            for b, n in buckets.items():
                into[int(b)] = max(into.get(int(b), n), n)
    unread_ = {key: changed for key, buckets in unread_.items()
               if (changed := {b: n for b, n in buckets.items() if n})}
    return {"unread": unread_, "lag": lag_}


def as_results(series: dict, clock) -> dict:
    """results.json's `series`: per partition the unread count at each
    bucket it changes in, per process its worst lag in each bucket it
    polled in, as [seconds, number] pairs."""
    # Each bucket's time made once: the points are many (a bucket's for each
    # process that polled in it), the buckets at most POINTS.
    time_of = {b: clock.time_of(b) for b in set().union(*series["unread"].values(), *series["lag"].values())}
    unread_ = {}
    for p, changes in sorted(series["unread"].items()):
        count, points = 0, []
        for b in sorted(changes):
            count += changes[b]
            points.append([time_of[b], count])
        unread_[str(p)] = points
    lag_ = {str(proc): [[time_of[b], n] for b, n in sorted(buckets.items())]
            for proc, buckets in sorted(series["lag"].items())}
    return {"bucket_s": round(clock.bucket_ns / 1e9, 6), "unread": unread_, "lag": lag_}
