"""Liveness: how long producers and consumers got nothing, per fault, and
whether the cluster came back after the final heal (the HANG verdict).

The definitions (docs/checker.md, "Liveness") in short, all times in
seconds on the history's clock:

- a producer *wait* ends at each `ok` send completion (an acknowledgement)
  and starts at the previous acknowledgement if a send was outstanding then
  (invoked, not yet completed), else at the first send invoked after it;
  after the last acknowledgement a wait that started is open until the
  workload's end. Failed and indeterminate completions do not end a wait:
  they are no acknowledgement. *Producer unavailability* is the waits.
  A transaction's sends are sends: its invocation invokes each, its `ok`
  completion acknowledges each at its partition, `fail` and `info` none;
- a consumer wait (only where consumers polled during the run) ends at
  each poll during the run that returned records, and starts at the previous one if acknowledged records existed beyond the
  highest offset read of their partition then (a backlog), else at the first
  acknowledgement that made one;
- per partition the same, with the acknowledgements, reads and backlog of
  that partition; a send not yet acknowledged has no partition, so sends are
  attributed by key: a key whose acknowledged sends all went to one
  partition attributes its other sends there (the partitioner hashes keys);
  sends of other keys count overall only;
- a fault runs from its start action's invocation to the completion of its
  stop action (or of the heal that ended it); faults may overlap, and a
  stop ends the start of the same fault (never two of one name at once),
  whatever started in between; its unavailability is the longest wait
  overlapping it (a wait under two faults counts for both: `overlapping`
  names the others in force meanwhile), its recovery the time from its end
  to the first acknowledgement after it;
- the final heal is the completion of the last `heal` event (else of the last
  stop); recovery is the time from it to the first acknowledgement after it;
  HANG: sends were attempted after the final heal (or outstanding at it) and
  none was acknowledged within `hang_s` seconds of it; or the same of one
  partition's sends (attributed by key), the run having watched for `hang_s`
  (`hung_partitions`).

"At" a time means at or before it: every event of one time counts together.

`measure` walks the history once, in time order, a chunk at a time
(`Chunk`: a stretch of the history's sends and reads), and keeps only a
row of state per partition from chunk to chunk: each wait is taken as it
ends, into the longest so far, the faults it overlaps and the waits
listed. What the walk must know of the whole history first (the faults,
the heal, which key goes to which partition, the workload's end: `Known`)
comes from the checker's first read (checkers/folds/liveness.py), and a
large history is read again for the walk, so the walk's memory follows
the history's partitions and faults, not its sends. The walk is one compiled pass (Numba), its
definitions tested on hand-made histories (tests/checkers/test_liveness.py)
cut into chunks anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from checkers.compiled import bare, inlined
from core.history.faults import fault_intervals

HANG_S = 30.0  # no acknowledgement this long after the final heal: HANG
LIST_MIN_S = 1.0  # waits at least this long are listed in results.json
LIST_MAX = 100  # at most this many listed, the longest first
NS = 1e9

_NONE = np.iinfo(np.int64).min  # no time (yet); as a gap's start: before the history
_TOP = np.iinfo(np.int64).max  # no start of a consumers' wait in this gap
_LIST_MIN_NS = int(LIST_MIN_S * NS)


@dataclass
class Chunk:
    """A stretch of the history as the walk takes it: each kind in time
    order (times in ns), the stretches in the history's order."""

    inv_time: np.ndarray  # send invocations
    inv_partition: np.ndarray  # the partition its key attributes it to (-1: none)
    comp_time: np.ndarray  # send completions, any outcome
    comp_partition: np.ndarray  # the partition its invocation's key attributes it to (-1: none)
    comp_ok: np.ndarray  # bool: an acknowledgement
    ack_partition: np.ndarray  # the partition an acknowledged send went to (-1 where not ok)
    ack_offset: np.ndarray  # and its offset
    read_time: np.ndarray  # one row per (poll during the run returning records, partition)
    read_partition: np.ndarray
    read_offset: np.ndarray  # the largest offset of that partition in the poll


@dataclass
class Known:
    """What the walk needs of the whole history before it starts, from the
    first read (checkers/folds/liveness.py)."""

    end: int  # the workload's end: the last client event outside the final reads
    polls: int  # poll invocations during the run (none: no consumer to wait)
    keys: np.ndarray  # the keys whose acknowledged sends all went to one partition, sorted
    key_partitions: np.ndarray  # and that partition
    final: frozenset = frozenset()  # the processes that did final reads (their reads are none of the run's)

    def partitions_of(self, keys: np.ndarray) -> np.ndarray:
        """The partition each key attributes its sends to, -1 for none."""
        if not len(self.keys) or not len(keys):
            return np.full(len(keys), -1, np.int64)
        i = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[i] == keys, self.key_partitions[i], -1)


def measure(chunks: Iterable[Chunk], known: Known, nemesis: list[dict], ends: dict[str, str],
            hang_s: float = HANG_S) -> dict:
    """results.json's `liveness` (docs/checker.md): the history's chunks
    walked once, in order; `nemesis`: the nemesis's events, `ends` the
    fault registry's pairs of start and stop actions."""
    found = fault_intervals(nemesis, ends)
    heal = found.final_heal
    walk = _Walk(found.intervals, heal)
    for chunk in chunks:
        walk.feed(chunk)
    walk.finish(known.end)
    return walk.results(found.intervals, heal, known, hang_s)


# ---------------------------------------------------------------------------------
# the walk's state: a row of scalars (G_*) and a row per partition (P_*), int64
# ---------------------------------------------------------------------------------

# The time of the events being taken (a group: every event of one time), and
# whether an acknowledgement or read was among them.
G_TIME, G_GROUP_ACKED, G_GROUP_READ = 0, 1, 2
# Producers overall: sends invoked and completed so far, the last acknowledgement's
# time, whether a send was outstanding then, the first invocation since, the
# longest wait, the last invocation, invocations and completions up to the heal.
G_INVOKED, G_COMPLETED, G_PREV, G_OUTSTANDING, G_FIRST = 3, 4, 5, 6, 7
G_LONGEST, G_LAST_INVOKED, G_INVOKED_BY_HEAL, G_COMPLETED_BY_HEAL = 8, 9, 10, 11
# Consumers overall: the start of the current gap's wait (_TOP: none yet), the
# partitions with acknowledged records beyond what was read, the longest wait,
# the last acknowledgement of a partition.
G_START, G_BACKLOGS, G_C_LONGEST, G_LAST_ACK = 12, 13, 14, 15
# The next query time (fault ends, the heal) to answer with the first
# acknowledgement and the first read after it; sends of no partition.
G_NEXT_ACK_QUERY, G_NEXT_READ_QUERY, G_UNATTRIBUTED = 16, 17, 18
# The faults overlapping the current waits: the next to take in and how many are.
G_P_NEXT_FAULT, G_P_ACTIVE, G_C_NEXT_FAULT, G_C_ACTIVE = 19, 20, 21, 22
# The partitions acknowledged and read in the current group; waits listed so far.
G_GROUP_ACKS, G_GROUP_READS, G_P_LISTED, G_C_LISTED = 23, 24, 25, 26
G_COLUMNS = 27

# Per partition: as overall, for its attributed sends and its acknowledgements
# (P_MARK: the group of its last acknowledgement); its consumers' highest
# acknowledged and read offsets, the start of its current wait (_NONE: none), the
# longest, the group of its last read; its last acknowledgement, whether it was
# acknowledged or read at all; the first acknowledgement and read after the heal.
P_INVOKED, P_COMPLETED, P_PREV, P_OUTSTANDING, P_FIRST, P_LONGEST, P_MARK = 0, 1, 2, 3, 4, 5, 6
P_ACKED_TOP, P_READ_TOP, P_START, P_C_LONGEST, P_READ_MARK = 7, 8, 9, 10, 11
P_LAST_ACK, P_ACKED, P_READ, P_LAST_INVOKED, P_INVOKED_BY_HEAL, P_COMPLETED_BY_HEAL = 12, 13, 14, 15, 16, 17
P_ACK_AFTER_HEAL, P_READ_AFTER_HEAL = 18, 19
P_COLUMNS = 20


def _partition_rows(n: int) -> np.ndarray:
    rows = np.zeros((n, P_COLUMNS), np.int64)
    for c in (P_PREV, P_FIRST, P_MARK, P_START, P_READ_MARK, P_LAST_ACK, P_LAST_INVOKED, P_ACK_AFTER_HEAL,
              P_READ_AFTER_HEAL):
        rows[:, c] = _NONE
    rows[:, P_ACKED_TOP] = rows[:, P_READ_TOP] = -1
    return rows


class _Walk:
    """The walk over the history's chunks (the module docstring's
    definitions, event by event in time order): its state, carried from
    chunk to chunk, and the waits it listed."""

    def __init__(self, faults: list[dict], heal: int | None) -> None:
        g = np.zeros(G_COLUMNS, np.int64)
        g[[G_TIME, G_PREV, G_FIRST, G_LAST_INVOKED, G_LAST_ACK]] = _NONE
        g[G_START] = _TOP
        self.g = g
        self.rows = _partition_rows(0)
        self.group = np.zeros((2, 0), np.int64)
        self.heal = _NONE if heal is None else heal
        self.fault_start = np.array([f["start"] for f in faults], np.int64)
        self.fault_end = np.array([f["end"] for f in faults], np.int64)
        self.fault_producers = np.zeros(len(faults), np.int64)  # the longest wait overlapping each
        self.fault_consumers = np.zeros(len(faults), np.int64)
        self.active = np.zeros((2, len(faults)), np.int64)
        # The times after which the first acknowledgement and read are asked for.
        self.queries = np.unique(np.array([f["end"] for f in faults] + ([heal] if heal is not None else []),
                                          np.int64))
        self.ack_after = np.full(len(self.queries), _NONE, np.int64)
        self.read_after = np.full(len(self.queries), _NONE, np.int64)
        self.listed: tuple[list, list] = ([], [])

    def _grow(self, top: int) -> None:
        if top >= len(self.rows):
            self.rows = np.concatenate((self.rows, _partition_rows(top + 1 - len(self.rows))))
            # The partitions acknowledged and read in the current group, which may go on in the next chunk.
            grown = np.zeros((2, len(self.rows)), np.int64)
            grown[:, :self.group.shape[1]] = self.group
            self.group = grown

    def feed(self, c: Chunk) -> None:
        top = max((int(a.max()) for a in (c.inv_partition, c.comp_partition, c.ack_partition, c.read_partition)
                   if len(a)), default=-1)
        self._grow(top)
        out = (np.empty((len(c.comp_time) + 1, 3), np.int64), np.empty((len(c.read_time) + 1, 3), np.int64))
        self.g[[G_P_LISTED, G_C_LISTED]] = 0
        _walk(c.inv_time, c.inv_partition, c.comp_time, c.comp_partition, c.comp_ok, c.ack_partition,
              c.ack_offset, c.read_time, c.read_partition, c.read_offset, *self._state(), *out)
        self._keep_listed(out)

    def finish(self, end: int) -> None:
        """The waits still running at the workload's end (`end`, or the last
        invocation if later)."""
        out = (np.empty((1, 3), np.int64), np.empty((1, 3), np.int64))
        self.g[[G_P_LISTED, G_C_LISTED]] = 0
        self.end = _finish(end, *self._state(), *out)
        self._keep_listed(out)

    def _state(self) -> tuple:
        return (self.g, self.rows, self.group[0], self.group[1],
                self.heal, self.queries, self.ack_after, self.read_after, self.fault_start, self.fault_end,
                self.fault_producers, self.fault_consumers, self.active[0], self.active[1])

    def _keep_listed(self, out: tuple) -> None:
        for kept, rows, n in zip(self.listed, out, (self.g[G_P_LISTED], self.g[G_C_LISTED])):
            if n:
                kept.append(rows[:n].copy())

    def results(self, faults: list[dict], heal: int | None, known: Known, hang_s: float) -> dict:
        g, rows, end = self.g, self.rows, self.end
        consumers = known.polls > 0

        def after(t_after: np.ndarray, at: int | None) -> float | None:
            """Seconds from `at` (a query) to the first event after it."""
            if at is None:
                return None
            first = int(t_after[np.searchsorted(self.queries, at)])
            return None if first == _NONE else _s(first - at)

        def attempted_after_heal(invoked, last_invoked, invoked_by_heal, completed_by_heal) -> bool:
            """Whether a send was invoked after the heal, or outstanding at it."""
            return heal is not None and invoked > 0 and (last_invoked > heal or invoked_by_heal > completed_by_heal)

        starts = np.array([f["start"] for f in faults], np.int64)
        stops = np.array([f["end"] for f in faults], np.int64)
        fault_rows = []
        for i, f in enumerate(faults):
            lo, hi = f["start"], f["end"]
            pw, cw = int(self.fault_producers[i]), int(self.fault_consumers[i]) if consumers else 0
            # The other faults in force at some time of this one (their start actions, by start).
            together = (starts < hi) & (lo < stops)
            together[i] = False
            mode = f["value"].get("mode") if isinstance(f["value"], dict) else None
            fault_rows.append({
                "fault": f["f"], **({"mode": mode} if mode else {}), "index": f["index"],
                "start": _s(lo), "end": _s(hi), "overlapping": [faults[j]["f"] for j in np.flatnonzero(together)],
                "unavailable_s": _s(max(pw, cw)), "producer_unavailable_s": _s(pw), "consumer_unavailable_s": _s(cw),
                "recovery_s": after(self.ack_after, hi), "consumer_recovery_s": after(self.read_after, hi)})

        recovery = after(self.ack_after, heal)
        hang = attempted_after_heal(g[G_INVOKED], g[G_LAST_INVOKED], g[G_INVOKED_BY_HEAL],
                                    g[G_COMPLETED_BY_HEAL]) and (recovery is None or recovery > hang_s)
        by_partition, hung_partitions = {}, []
        for p in np.flatnonzero(rows[:, P_ACKED] | rows[:, P_READ]).tolist():
            row = rows[p]
            p_recovery = None if heal is None or row[P_ACK_AFTER_HEAL] == _NONE else _s(row[P_ACK_AFTER_HEAL] - heal)
            by_partition[str(p)] = {
                "producer_unavailable_s": _s(row[P_LONGEST]),
                "consumer_unavailable_s": _s(row[P_C_LONGEST] if consumers else 0),
                "recovery_s": p_recovery,
                "consumer_recovery_s": None if heal is None or row[P_READ_AFTER_HEAL] == _NONE
                else _s(row[P_READ_AFTER_HEAL] - heal)}
            # One partition that never comes back is a hang too, though the others recovered
            # (a replica marked failed, a leader that never returns); without an acknowledgement
            # it needs the run to have watched it for hang_s, as the runner does.
            if attempted_after_heal(row[P_INVOKED], row[P_LAST_INVOKED], row[P_INVOKED_BY_HEAL],
                                    row[P_COMPLETED_BY_HEAL]) and (
                    (p_recovery is None and end - heal > hang_s * 1e9) or (p_recovery or 0) > hang_s):
                hung_partitions.append(p)
        producers_longest = int(g[G_LONGEST])
        consumers_longest = int(g[G_C_LONGEST]) if consumers else 0
        return {
            "verdict": "hang" if hang or hung_partitions else "ok",
            "hang_after_s": hang_s,
            "hung_partitions": hung_partitions,
            "heal": _s(heal),
            "recovery_s": recovery,
            "consumer_recovery_s": after(self.read_after, heal),
            # Without a recovery: how long the run watched after the heal and saw none.
            "unrecovered_s": _s(end - heal) if heal is not None and recovery is None and end > heal else None,
            "unavailable_s": _s(max(producers_longest, consumers_longest)),
            "faults": fault_rows,
            "producers": {"unavailable_s": _s(producers_longest), "waits": _listed(self.listed[0])},
            "consumers": {"unavailable_s": _s(consumers_longest),
                          "waits": _listed(self.listed[1]) if consumers else []},
            "by_partition": by_partition,
            "unattributed_sends": int(g[G_UNATTRIBUTED]),
        }


def _s(ns) -> float | None:
    return None if ns is None else round(int(ns) / NS, 3)


def _listed(parts: list[np.ndarray]) -> list[list]:
    """The waits of at least LIST_MIN_S (kept as the walk found them, in time
    order), the longest LIST_MAX, in time order: [start, end, open]."""
    if not parts:
        return []
    w = np.concatenate(parts)
    idx = np.argsort(-(w[:, 1] - w[:, 0]), kind="stable")[:LIST_MAX]
    idx.sort()
    return [[_s(w[i, 0]), _s(w[i, 1]), bool(w[i, 2])] for i in idx.tolist()]


# ---------------------------------------------------------------------------------
# the compiled walk
# ---------------------------------------------------------------------------------


@bare
def _walk(inv_t, inv_p, comp_t, comp_p, comp_ok, ack_p, ack_o, read_t, read_p, read_o,
          g, rows, group_acks, group_reads, heal, queries, ack_after, read_after,
          fault_start, fault_end, fault_producers, fault_consumers, p_active, c_active, p_out, c_out):
    """One chunk's events in time order (the three kinds merged), a group of
    equal times at a time: a wait's start and end are compared with every
    event of a time at once, as the definitions' "at or before" asks."""
    i = j = k = 0
    ni, nj, nk = len(inv_t), len(comp_t), len(read_t)
    while i < ni or j < nj or k < nk:
        t = _TOP
        if i < ni:
            t = inv_t[i]
        if j < nj and comp_t[j] < t:
            t = comp_t[j]
        if k < nk and read_t[k] < t:
            t = read_t[k]
        if t != g[G_TIME]:
            _end_group(g, rows, group_acks, group_reads)
            g[G_TIME] = t
        while i < ni and inv_t[i] == t:
            _invoked(t, inv_p[i], g, rows, heal)
            i += 1
        while j < nj and comp_t[j] == t:
            _completed(t, comp_p[j], comp_ok[j], ack_p[j], ack_o[j], g, rows, group_acks, heal, queries,
                       ack_after, fault_start, fault_end, fault_producers, p_active, p_out)
            j += 1
        while k < nk and read_t[k] == t:
            _read(t, read_p[k], read_o[k], g, rows, group_reads, heal, queries, read_after,
                  fault_start, fault_end, fault_consumers, c_active, c_out)
            k += 1


@inlined
def _end_group(g, rows, group_acks, group_reads):
    """After every event of a time: an acknowledgement among them starts
    the producers' next gap, a read the consumers' (with a backlog then,
    its wait starts at once)."""
    t = g[G_TIME]
    if g[G_GROUP_ACKED]:
        g[G_PREV], g[G_FIRST], g[G_GROUP_ACKED] = t, _NONE, 0
        g[G_OUTSTANDING] = 1 if g[G_INVOKED] > g[G_COMPLETED] else 0
    for x in range(g[G_GROUP_ACKS]):
        p = group_acks[x]
        rows[p, P_PREV], rows[p, P_FIRST] = t, _NONE
        rows[p, P_OUTSTANDING] = 1 if rows[p, P_INVOKED] > rows[p, P_COMPLETED] else 0
    g[G_GROUP_ACKS] = 0
    if g[G_GROUP_READ]:
        g[G_START] = t if g[G_BACKLOGS] > 0 else _TOP
        g[G_GROUP_READ] = 0
    for x in range(g[G_GROUP_READS]):
        p = group_reads[x]
        rows[p, P_START] = t if rows[p, P_ACKED_TOP] > rows[p, P_READ_TOP] else _NONE
    g[G_GROUP_READS] = 0


@inlined
def _invoked(t, p, g, rows, heal):
    g[G_INVOKED] += 1
    if g[G_FIRST] == _NONE:
        g[G_FIRST] = t
    g[G_LAST_INVOKED] = max(g[G_LAST_INVOKED], t)
    if heal != _NONE and t <= heal:
        g[G_INVOKED_BY_HEAL] += 1
    if p < 0:
        g[G_UNATTRIBUTED] += 1
        return
    rows[p, P_INVOKED] += 1
    if rows[p, P_FIRST] == _NONE:
        rows[p, P_FIRST] = t
    rows[p, P_LAST_INVOKED] = max(rows[p, P_LAST_INVOKED], t)
    if heal != _NONE and t <= heal:
        rows[p, P_INVOKED_BY_HEAL] += 1


@inlined
def _completed(t, p, ok, q, offset, g, rows, group_acks, heal, queries, ack_after,
               fault_start, fault_end, fault_producers, p_active, p_out):
    g[G_COMPLETED] += 1
    by_heal = heal != _NONE and t <= heal
    if by_heal:
        g[G_COMPLETED_BY_HEAL] += 1
    if p >= 0:
        rows[p, P_COMPLETED] += 1
        if by_heal:
            rows[p, P_COMPLETED_BY_HEAL] += 1
    if not ok:
        return  # no acknowledgement: it ends no wait
    if not g[G_GROUP_ACKED]:  # a later acknowledgement of the same time ends a wait of no length
        g[G_GROUP_ACKED] = 1
        start = g[G_PREV] if g[G_OUTSTANDING] else g[G_FIRST]
        if start != _NONE and start < t:
            g[G_LONGEST] = max(g[G_LONGEST], _emit(start, t, 0, fault_start, fault_end, fault_producers,
                                                   p_active, g, G_P_NEXT_FAULT, G_P_ACTIVE, p_out, G_P_LISTED))
    while g[G_NEXT_ACK_QUERY] < len(queries) and queries[g[G_NEXT_ACK_QUERY]] < t:
        ack_after[g[G_NEXT_ACK_QUERY]] = t
        g[G_NEXT_ACK_QUERY] += 1
    if q < 0:
        return
    if rows[q, P_MARK] != t:
        rows[q, P_MARK] = t
        group_acks[g[G_GROUP_ACKS]] = q
        g[G_GROUP_ACKS] += 1
        start = rows[q, P_PREV] if rows[q, P_OUTSTANDING] else rows[q, P_FIRST]
        if start != _NONE and start < t:
            rows[q, P_LONGEST] = max(rows[q, P_LONGEST], t - start)
    rows[q, P_LAST_ACK], rows[q, P_ACKED] = t, 1
    g[G_LAST_ACK] = max(g[G_LAST_ACK], t)
    if heal != _NONE and t > heal and rows[q, P_ACK_AFTER_HEAL] == _NONE:
        rows[q, P_ACK_AFTER_HEAL] = t
    if offset > rows[q, P_READ_TOP]:  # beyond what consumers read of it: their wait starts
        if rows[q, P_ACKED_TOP] <= rows[q, P_READ_TOP]:
            g[G_BACKLOGS] += 1
        if rows[q, P_START] == _NONE:
            rows[q, P_START] = t
        if g[G_START] == _TOP:
            g[G_START] = t
    rows[q, P_ACKED_TOP] = max(rows[q, P_ACKED_TOP], offset)


@inlined
def _read(t, q, offset, g, rows, group_reads, heal, queries, read_after,
          fault_start, fault_end, fault_consumers, c_active, c_out):
    if not g[G_GROUP_READ]:
        g[G_GROUP_READ] = 1
        if g[G_START] < t:
            g[G_C_LONGEST] = max(g[G_C_LONGEST], _emit(g[G_START], t, 0, fault_start, fault_end, fault_consumers,
                                                       c_active, g, G_C_NEXT_FAULT, G_C_ACTIVE, c_out, G_C_LISTED))
        while g[G_NEXT_READ_QUERY] < len(queries) and queries[g[G_NEXT_READ_QUERY]] < t:
            read_after[g[G_NEXT_READ_QUERY]] = t
            g[G_NEXT_READ_QUERY] += 1
    if q < 0:
        return
    if rows[q, P_READ_MARK] != t:
        rows[q, P_READ_MARK] = t
        group_reads[g[G_GROUP_READS]] = q
        g[G_GROUP_READS] += 1
        start = rows[q, P_START]
        if start != _NONE and start < t:
            rows[q, P_C_LONGEST] = max(rows[q, P_C_LONGEST], t - start)
    if offset > rows[q, P_READ_TOP]:
        if rows[q, P_ACKED_TOP] > rows[q, P_READ_TOP] and rows[q, P_ACKED_TOP] <= offset:
            g[G_BACKLOGS] -= 1  # everything acknowledged of it read
        rows[q, P_READ_TOP] = offset
    rows[q, P_READ] = 1
    if heal != _NONE and t > heal and rows[q, P_READ_AFTER_HEAL] == _NONE:
        rows[q, P_READ_AFTER_HEAL] = t


@inlined
def _emit(start, end, is_open, fault_start, fault_end, longest, active, g, next_fault, n_active, out, n_out):
    """A wait of producers or consumers overall: its length (returned) to the
    longest of each fault it overlaps, and to `out` if long enough to list.
    Waits come in time order, their starts and ends both non-decreasing: a
    fault joins the active ones when a wait ends at or after its start, and
    leaves them for good when one starts after its end."""
    length = end - start
    while g[next_fault] < len(fault_start) and fault_start[g[next_fault]] <= end:
        active[g[n_active]] = g[next_fault]
        g[n_active] += 1
        g[next_fault] += 1
    x = 0
    while x < g[n_active]:
        f = active[x]
        if fault_end[f] < start:
            g[n_active] -= 1
            active[x] = active[g[n_active]]
        else:
            longest[f] = max(longest[f], length)
            x += 1
    if length >= _LIST_MIN_NS:
        n = g[n_out]
        out[n, 0], out[n, 1], out[n, 2] = start, end, is_open
        g[n_out] = n + 1
    return length


@bare
def _finish(end, g, rows, group_acks, group_reads, heal, queries, ack_after, read_after,
            fault_start, fault_end, fault_producers, fault_consumers, p_active, c_active, p_out, c_out):
    """The last group ended, and the waits open at the end: to the workload's
    end (or the last invocation, if later; returned), or for consumers the
    last acknowledgement, if later still."""
    _end_group(g, rows, group_acks, group_reads)
    end = max(end, g[G_LAST_INVOKED])
    if g[G_INVOKED] > 0:
        start = g[G_PREV] if g[G_OUTSTANDING] else g[G_FIRST]
        if start != _NONE and start < end:
            g[G_LONGEST] = max(g[G_LONGEST], _emit(start, end, 1, fault_start, fault_end, fault_producers,
                                                   p_active, g, G_P_NEXT_FAULT, G_P_ACTIVE, p_out, G_P_LISTED))
    upto = max(end, g[G_LAST_ACK])
    if g[G_START] < upto:
        g[G_C_LONGEST] = max(g[G_C_LONGEST], _emit(g[G_START], upto, 1, fault_start, fault_end, fault_consumers,
                                                   c_active, g, G_C_NEXT_FAULT, G_C_ACTIVE, c_out, G_C_LISTED))
    for p in range(len(rows)):
        if rows[p, P_INVOKED] > 0:
            start = rows[p, P_PREV] if rows[p, P_OUTSTANDING] else rows[p, P_FIRST]
            if start != _NONE and start < end:
                rows[p, P_LONGEST] = max(rows[p, P_LONGEST], end - start)
        if rows[p, P_ACKED] and rows[p, P_START] != _NONE and rows[p, P_START] < max(end, rows[p, P_LAST_ACK]):
            rows[p, P_C_LONGEST] = max(rows[p, P_C_LONGEST], max(end, rows[p, P_LAST_ACK]) - rows[p, P_START])
    return end


def verdict_words(liveness: dict) -> str:
    """One line for the terminal and the report."""
    hung, rec = liveness.get("hung_partitions") or [], liveness.get("recovery_s")
    if liveness.get("verdict") == "hang" and hung and rec is not None and rec <= liveness["hang_after_s"]:
        parts = ", ".join(str(p) for p in hung)
        return (f"HANG: partition{'s' if len(hung) > 1 else ''} {parts} acknowledged nothing for more than "
                f"{liveness['hang_after_s']:g} s after the final heal, though the others recovered "
                f"{liveness['recovery_s']:g} s after it; longest unavailability {liveness['unavailable_s']:g} s")
    if liveness.get("verdict") == "hang":
        got = (f"first acknowledgement {liveness['recovery_s']:g} s after it" if liveness.get("recovery_s") is not None
               else f"none in the {liveness.get('unrecovered_s') or 0:g} s watched")
        return (f"HANG: nothing acknowledged for more than {liveness['hang_after_s']:g} s after the final heal "
                f"({got}); longest unavailability {liveness['unavailable_s']:g} s")
    rec = liveness.get("recovery_s")
    return ("liveness ok: " + (f"recovered {rec:g} s after the final heal" if rec is not None else "no heal to recover from")
            + f", longest unavailability {liveness.get('unavailable_s') or 0:g} s")


def hung_transaction_words(hung: dict) -> str:
    """One line for a partition an open transaction held back to the end of
    the run (results.json liveness `hung_transactions`, which a run adds from
    its final reads: harness/run/spec.py)."""
    return (f"HUNG TRANSACTION: partition {hung['partition']}'s last stable offset stayed at "
            f"{hung['stable_offset']}, below its log end {hung['high_watermark']}, to the end of the final reads: "
            f"a transaction left open hides every record after it from read_committed readers")
