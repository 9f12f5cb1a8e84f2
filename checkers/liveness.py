"""Liveness: how long producers and consumers got nothing, per fault, and
whether the cluster came back after the final heal (the HANG verdict).

The definitions (docs/checker.md, "Liveness") in short, all times in
seconds on the history's clock:

- a producer *wait* ends at each `ok` send completion (an acknowledgement)
  and starts at the previous acknowledgement if a send was outstanding then
  (invoked, not yet completed), else at the first send invoked after it;
  after the last acknowledgement a wait that started is open until the
  workload's end. Failed and indeterminate completions do not end a wait:
  they are no acknowledgement. *Producer unavailability* is the waits;
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

The pass reads a few columns of the history's Parquet with Arrow, a batch
of rows at a time (the driver keeps the arrays, not the table), and works
on sorted NumPy arrays (searchsorted per wait, no Python loop per event), so
it scales with the rest of the check; `measure` is a pure function of the
columns, tested on hand-made histories.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.compiled import compiled
from checkers.key_rows import distinct_pairs
from core.history.faults import fault_intervals

HANG_S = 30.0  # no acknowledgement this long after the final heal: HANG
LIST_MIN_S = 1.0  # waits at least this long are listed in results.json
LIST_MAX = 100  # at most this many listed, the longest first
NS = 1e9


@dataclass
class Columns:
    """The history's columns liveness needs, as NumPy arrays (times in ns)."""

    inv_time: np.ndarray  # send invocations
    inv_key: np.ndarray  # -1 where the send had no key
    comp_time: np.ndarray  # send completions, any outcome
    comp_key: np.ndarray  # its invocation's key (-1: none, or no invocation)
    comp_ok: np.ndarray  # bool
    comp_partition: np.ndarray  # -1 where not ok
    comp_offset: np.ndarray
    read_time: np.ndarray  # one row per (poll during the run returning records, partition)
    read_partition: np.ndarray
    read_offset: np.ndarray  # the largest offset of that partition in the poll
    end: int  # the workload's end: the last client event outside the final reads
    polls: int = 0  # poll invocations during the run (none: no consumer to wait)


# ---------------------------------------------------------------------------------
# waits
# ---------------------------------------------------------------------------------


@dataclass
class Waits:
    """Waits as parallel arrays, ns: start, end, and whether the end is the
    workload's end (no acknowledgement came)."""

    start: np.ndarray
    end: np.ndarray
    open: np.ndarray

    @staticmethod
    def none() -> "Waits":
        return Waits(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, bool))

    def lengths(self) -> np.ndarray:
        """Each wait's length, ns (computed once: a large history has tens of millions of waits)."""
        if not hasattr(self, "_length"):
            self._length = self.end - self.start
        return self._length

    def longest_ns(self) -> int:
        return int(self.lengths().max()) if len(self.start) else 0

    def overlapping(self, lo: int, hi: int) -> int:
        """The longest wait overlapping [lo, hi], ns (0 if none). Waits one
        after another (starts and ends both in order, as every kind here
        is: each lies between two acknowledgements or reads) overlap an
        interval in one run of them, found by searchsorted, its longest by
        blocks of precomputed maxima: a history's thousands of faults then
        cost no pass over its millions of waits each."""
        if not hasattr(self, "_blocks"):
            self._index()
        if self._blocks is None:
            m = (self.start <= hi) & (self.end >= lo)
            return int((self.end[m] - self.start[m]).max()) if m.any() else 0
        i0, i1 = int(np.searchsorted(self.end, lo, "left")), int(np.searchsorted(self.start, hi, "right"))
        if i1 <= i0:
            return 0
        b0, b1 = -(-i0 // _BLOCK), i1 // _BLOCK  # whole blocks inside [i0, i1)
        if b0 >= b1:
            return int(self._length[i0:i1].max())
        parts = [self._blocks[b0:b1].max()]
        if i0 < b0 * _BLOCK:
            parts.append(self._length[i0:b0 * _BLOCK].max())
        if b1 * _BLOCK < i1:
            parts.append(self._length[b1 * _BLOCK:i1].max())
        return int(max(parts))

    def _index(self) -> None:
        self.lengths()
        ordered = all(nondecreasing(x) for x in (self.start, self.end))
        if not ordered or not len(self.start):
            self._blocks = None
            return
        whole = len(self._length) // _BLOCK * _BLOCK
        self._blocks = self._length[:whole].reshape(-1, _BLOCK).max(axis=1) if whole else np.empty(0, np.int64)


_BLOCK = 1024  # waits per block of `Waits.overlapping`'s maxima


@compiled
def nondecreasing(x):
    """Whether `x` never decreases: one compiled pass, no temporary."""
    for i in range(1, len(x)):
        if x[i] < x[i - 1]:
            return False
    return True


def producer_waits(inv_t: np.ndarray, comp_t: np.ndarray, ack_t: np.ndarray, end: int) -> Waits:
    """The waits of sends (module docstring); all three arrays sorted. The
    gaps (before the first acknowledgement, between each two, after the
    last) are taken _CHUNK at a time: a history's tens of millions of
    acknowledgements need no dozen arrays of that length at once."""
    if len(inv_t) == 0:
        return Waits.none()
    n, last = len(ack_t) + 1, max(end, int(inv_t[-1]))
    # Filled in place and then cut to what was kept: joining the chunks' waits
    # at the end would hold them twice.
    waits = Waits(np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, bool))
    count = 0
    for a in range(0, n, _CHUNK):
        b = min(n, a + _CHUNK)
        prev = ack_t[max(a - 1, 0):b - 1]
        if a == 0:
            prev = np.concatenate(([np.iinfo(np.int64).min], prev))
        upto = ack_t[a:b] if b < n else np.concatenate((ack_t[a:], [last]))
        nxt = _searched_right(inv_t, prev)
        outstanding = nxt > _searched_right(comp_t, prev)
        first_inv = inv_t[np.minimum(nxt, len(inv_t) - 1)]
        keep = outstanding | ((nxt < len(inv_t)) & (first_inv <= upto))
        start = np.where(outstanding, prev, first_inv)
        is_open = np.zeros(b - a, bool)
        if b == n:
            is_open[-1] = True
        k = int(np.count_nonzero(keep))
        waits.start[count:count + k] = np.minimum(start[keep], upto[keep])
        waits.end[count:count + k], waits.open[count:count + k] = upto[keep], is_open[keep]
        count += k
    for column in (waits.start, waits.end, waits.open):
        column.resize(count, refcheck=False)  # in place: nothing else refers to them yet
    return waits


_CHUNK = 1 << 22  # elements at a time of the passes over every send: bounds their temporaries


def consumer_waits(ack_t: np.ndarray, ack_o: np.ndarray, read_t: np.ndarray, read_o: np.ndarray,
                   end: int) -> Waits:
    """The waits of consumers on one partition (module docstring): acknowledgements
    and reads of that partition, each sorted by time."""
    if len(ack_t) == 0:
        return Waits.none()
    ackmax = np.maximum.accumulate(ack_o)
    readmax = np.maximum.accumulate(read_o) if len(read_o) else read_o
    prev = np.concatenate(([np.iinfo(np.int64).min], read_t))
    upto = np.concatenate((read_t, [max(end, int(ack_t[-1]))]))
    seen = np.concatenate(([-1], readmax))  # highest offset read as of each prev
    # The first acknowledgement beyond what was read: ackmax is non-decreasing.
    first_beyond = _searched_right(ackmax, seen)
    beyond_t = ack_t[np.minimum(first_beyond, len(ack_t) - 1)]
    exists = first_beyond < len(ack_t)
    start = np.maximum(prev, beyond_t)
    keep = exists & (start < upto)
    is_open = np.zeros(len(prev), bool)
    is_open[-1] = True
    return Waits(start[keep], upto[keep], is_open[keep])


def consumer_overall(parts: dict[int, tuple], reads: np.ndarray, end: int) -> Waits:
    """Consumers overall: a wait ends at each poll returning records of any
    partition, and starts at the previous one if some partition had a backlog
    then, else at the first acknowledgement that made one. `parts`: per
    partition (ack times, ack offsets, read times, read offsets), each sorted
    by time; `reads`: the distinct times of those polls, sorted. One vector
    pass per partition over the gaps in which it can matter: from the one
    its first acknowledgement ends to the one in which everything it
    acknowledged has been read."""
    big = np.iinfo(np.int64).max
    prev = np.concatenate(([np.iinfo(np.int64).min], reads))
    upto = np.concatenate((reads, [end]))
    for ack_t, _, _, _ in parts.values():
        if len(ack_t):
            upto[-1] = max(upto[-1], int(ack_t[-1]))
    best = np.full(len(prev), big)
    for ack_t, ack_o, r_t, r_o in parts.values():
        if len(ack_t) == 0:
            continue
        ackmax = np.maximum.accumulate(ack_o)
        readmax = np.concatenate(([-1], np.maximum.accumulate(r_o))) if len(r_o) else np.array([-1])
        # Before the gap its first acknowledgement ends, a backlog would start
        # after the gap; from the read that caught up with its last, it has none.
        g0 = int(np.searchsorted(upto, ack_t[0], "right")) if len(upto) < 2 or upto[-1] >= upto[-2] else 0
        caught_up = np.flatnonzero(readmax[1:] >= ackmax[-1])
        g1 = int(np.searchsorted(prev, r_t[caught_up[0]], "left")) if len(caught_up) else len(prev)
        if g1 <= g0:
            continue
        gaps = prev[g0:g1]
        seen = readmax[_searched_right(r_t, gaps)]  # highest offset of p read as of prev
        first_beyond = _searched_right(ackmax, seen)
        exists = first_beyond < len(ack_t)
        start = np.maximum(gaps, ack_t[np.minimum(first_beyond, len(ack_t) - 1)])
        best[g0:g1] = np.where(exists, np.minimum(best[g0:g1], start), best[g0:g1])
    keep = best < upto
    is_open = np.zeros(len(prev), bool)
    is_open[-1] = True
    return Waits(best[keep], upto[keep], is_open[keep])


# ---------------------------------------------------------------------------------
# the measure
# ---------------------------------------------------------------------------------


def _s(ns) -> float | None:
    return None if ns is None else round(ns / NS, 3)


def _listed(w: Waits) -> list[list]:
    """Waits of at least LIST_MIN_S, the longest LIST_MAX, in time order: [start, end, open]."""
    length = w.lengths()
    idx = np.flatnonzero(length >= LIST_MIN_S * NS)
    idx = idx[np.argsort(-length[idx], kind="stable")][:LIST_MAX]
    idx.sort()
    return [[_s(int(w.start[i])), _s(int(w.end[i])), bool(w.open[i])] for i in idx]


def _first_after(t_sorted: np.ndarray, at: int) -> int | None:
    i = np.searchsorted(t_sorted, at, "right")
    return int(t_sorted[i]) if i < len(t_sorted) else None


def _since(t_sorted: np.ndarray, at: int | None) -> float | None:
    if at is None:
        return None
    first = _first_after(t_sorted, at)
    return None if first is None else _s(first - at)


def measure(c: Columns, nemesis: list[dict], ends: dict[str, str], hang_s: float = HANG_S) -> dict:
    """results.json's `liveness` (docs/checker.md) from the columns and the
    nemesis's events. It lets go of the completions' partitions and offsets
    once it has the acknowledgements', and of the keys once it has the
    sends' partitions (a large history's columns are gigabytes): `c` is
    not to be measured again."""
    # A history is in time order, so these are sorted already (no copies then).
    inv_t, inv_key = _by_time(c.inv_time, c.inv_key)
    comp_t, comp_key, comp_ok, comp_p, comp_o = _by_time(c.comp_time, c.comp_key, c.comp_ok, c.comp_partition,
                                                        c.comp_offset)
    ack_t, ack_key, ack_p, ack_o = comp_t[comp_ok], comp_key[comp_ok], comp_p[comp_ok], comp_o[comp_ok]
    c.comp_ok = c.comp_partition = c.comp_offset = None
    del comp_ok, comp_p, comp_o
    end = max(c.end, int(inv_t[-1]) if len(inv_t) else -1)

    producers = producer_waits(inv_t, comp_t, ack_t, end)
    # Of the producers' waits only these are reported: taken now, and the waits
    # (one per acknowledgement at saturation) let go before the sorts below.
    found = fault_intervals(nemesis, ends)
    heal = found.final_heal
    faults = [{"fault": i["f"], "start_ns": i["start"], "end_ns": i["end"], "index": i["index"],
               **({"mode": i["value"]["mode"]} if isinstance(i["value"], dict) and i["value"].get("mode") else {})}
              for i in found.intervals]
    producers_over = [producers.overlapping(f["start_ns"], f["end_ns"]) for f in faults]
    producers_longest, producers_listed = producers.longest_ns(), _listed(producers)
    del producers

    # Sends' partitions: by key, where a key's acknowledged sends all went to one partition.
    pairs = _key_partitions(ack_key, ack_p)
    keys, counts = np.unique(pairs[0], return_counts=True)
    single = set(keys[counts == 1].tolist())
    key_part = {int(k): int(p) for k, p in zip(pairs[0].tolist(), pairs[1].tolist()) if k in single}
    lookup_k = np.array(sorted(key_part), dtype=np.int64)
    lookup_p = np.array([key_part[k] for k in lookup_k.tolist()], dtype=np.int64)

    def part_of_keys(keys_):
        out = np.full(len(keys_), -1, np.int32)
        if len(lookup_k):
            for a in range(0, len(keys_), _CHUNK):  # a chunk at a time: a few temporaries of its length
                chunk = keys_[a:a + _CHUNK]
                i = np.minimum(np.searchsorted(lookup_k, chunk), len(lookup_k) - 1)
                out[a:a + _CHUNK] = np.where(lookup_k[i] == chunk, lookup_p[i], -1)
        return out

    inv_part = part_of_keys(inv_key)
    comp_part = part_of_keys(comp_key)
    unattributed = int((inv_part < 0).sum())
    # The keys are done with: let them go before the sorts by partition (at 100M
    # events these columns are gigabytes, and the sorts copy what they group).
    c.inv_key = c.comp_key = None
    del pairs, inv_key, comp_key, ack_key

    partitions = sorted((set(np.unique(ack_p).tolist()) | set(np.unique(c.read_partition).tolist())) - {-1})
    r_order = _by_partition_then_time(c.read_partition, c.read_time)
    r_p, r_t, r_o = c.read_partition[r_order], c.read_time[r_order], c.read_offset[r_order]
    # Each partition's acknowledgements and attributed sends, by one stable sort
    # each (time order kept within a partition), not a pass per partition.
    acks_of = _by_partition(ack_p, ack_t, ack_o)
    invs_of = _by_partition(inv_part, inv_t)
    comps_of = _by_partition(comp_part, comp_t)
    del ack_p, ack_o, inv_part, comp_part
    none = np.empty(0, np.int64)
    by_partition: dict[str, dict] = {}
    # Of each partition's waits only the longest is reported: not kept.
    consumer_longest: dict[int, int] = {}
    producer_longest: dict[int, int] = {}
    part_sends: dict[int, tuple] = {}  # partition -> its sends' invocation and completion times, sorted
    columns: dict[int, tuple] = {}
    for p in partitions:
        p_ack_t, p_ack_o = acks_of.get(p, (none, none))
        pt = invs_of.get(p, (none,))[0]
        pc_ = np.sort(comps_of.get(p, (none,))[0], kind="stable")
        part_sends[p] = (pt, pc_)
        producer_longest[p] = producer_waits(pt, pc_, p_ack_t, end).longest_ns()
        lo, hi = np.searchsorted(r_p, p, "left"), np.searchsorted(r_p, p, "right")
        columns[p] = (p_ack_t, p_ack_o, r_t[lo:hi], r_o[lo:hi])
        consumer_longest[p] = consumer_waits(*columns[p], end).longest_ns() if c.polls else 0
    read_t = _distinct(c.read_time)
    consumers = consumer_overall(columns, read_t, end) if c.polls else Waits.none()

    fault_rows = []
    starts = np.array([x["start_ns"] for x in faults], np.int64)
    stops = np.array([x["end_ns"] for x in faults], np.int64)
    for i, fault in enumerate(faults):
        lo, hi = fault["start_ns"], fault["end_ns"]
        pw, cw = producers_over[i], consumers.overlapping(lo, hi)
        # The other faults in force at some time of this one (their start actions, by start).
        together = (starts < hi) & (lo < stops)
        together[i] = False
        others = [faults[j]["fault"] for j in np.flatnonzero(together).tolist()]
        row = {"fault": fault["fault"], **({"mode": fault["mode"]} if "mode" in fault else {}),
               "index": fault["index"], "start": _s(lo), "end": _s(hi), "overlapping": others,
               "unavailable_s": _s(max(pw, cw)), "producer_unavailable_s": _s(pw),
               "consumer_unavailable_s": _s(cw),
               "recovery_s": _since(ack_t, hi), "consumer_recovery_s": _since(read_t, hi)}
        fault_rows.append(row)

    recovery = _since(ack_t, heal)
    hang = bool(_attempted_after(inv_t, comp_t, heal) and (recovery is None or recovery > hang_s))
    hung_partitions = []
    for p in partitions:
        lo, hi = np.searchsorted(r_p, p, "left"), np.searchsorted(r_p, p, "right")
        p_recovery = _since(columns[p][0], heal)
        by_partition[str(p)] = {
            "producer_unavailable_s": _s(producer_longest[p]),
            "consumer_unavailable_s": _s(consumer_longest[p]),
            "recovery_s": p_recovery,
            "consumer_recovery_s": _since(r_t[lo:hi], heal)}
        # One partition that never comes back is a hang too, though the others recovered
        # (a replica marked failed, a leader that never returns); without an acknowledgement
        # it needs the run to have watched it for hang_s, as the runner does.
        if _attempted_after(*part_sends[p], heal) and (
                (p_recovery is None and end - heal > hang_s * 1e9) or (p_recovery or 0) > hang_s):
            hung_partitions.append(p)
    return {
        "verdict": "hang" if hang or hung_partitions else "ok",
        "hang_after_s": hang_s,
        "hung_partitions": hung_partitions,
        "heal": _s(heal),
        "recovery_s": recovery,
        "consumer_recovery_s": _since(read_t, heal),
        # Without a recovery: how long the run watched after the heal and saw none.
        "unrecovered_s": _s(end - heal) if heal is not None and recovery is None and end > heal else None,
        "unavailable_s": _s(max(producers_longest, consumers.longest_ns())),
        "faults": fault_rows,
        "producers": {"unavailable_s": _s(producers_longest), "waits": producers_listed},
        "consumers": {"unavailable_s": _s(consumers.longest_ns()), "waits": _listed(consumers)},
        "by_partition": by_partition,
        "unattributed_sends": unattributed,
    }


def _key_partitions(ack_key: np.ndarray, ack_p: np.ndarray) -> np.ndarray:
    """The distinct (key, partition) pairs of the acknowledgements that have
    both, as two rows, sorted; found _CHUNK acknowledgements at a time (the
    pairs are few, the acknowledgements of a large history tens of millions)."""
    found = [np.empty((2, 0), np.int64)]
    for a in range(0, len(ack_key), _CHUNK):
        k_, p_ = ack_key[a:a + _CHUNK], ack_p[a:a + _CHUNK].astype(np.int64)
        known = (k_ >= 0) & (p_ >= 0)
        k_, p_ = k_[known], p_[known]
        if len(k_):
            found.append(np.stack(distinct_pairs(k_, p_)))
    return np.stack(distinct_pairs(*np.concatenate(found, axis=1)))


def _distinct(times: np.ndarray) -> np.ndarray:
    """The distinct times, sorted: without a sort where they are in order
    already, as a history's are (a large history's millions of read times
    would be sorted by np.unique for nothing)."""
    if len(times) < 2 or not nondecreasing(times):
        return np.unique(times)
    return times[np.concatenate(([True], times[1:] != times[:-1]))]


def _by_time(time: np.ndarray, *arrays: np.ndarray) -> tuple:
    """`time` and `arrays` in time order (a stable sort), as they are if already so."""
    if nondecreasing(time):
        return (time, *arrays)
    order = np.argsort(time, kind="stable")
    return (time[order], *[a[order] for a in arrays])


def _by_partition(parts: np.ndarray, *arrays: np.ndarray) -> dict[int, tuple]:
    """partition -> the elements of each of `arrays` whose `parts` entry is it,
    in their order (one stable sort); elements of no known partition (-1)
    are left out."""
    attributed = parts >= 0
    if not attributed.all():
        parts, arrays = parts[attributed], tuple(a[attributed] for a in arrays)
    del attributed
    order = np.argsort(_narrowed(parts), kind="stable")
    ordered = parts[order]  # where each partition starts, without np.unique's sort of a copy
    starts = np.flatnonzero(np.concatenate(([len(ordered) > 0], ordered[1:] != ordered[:-1])))
    keys = ordered[starts]
    del ordered
    bounds = np.append(starts, len(order)).tolist()
    grouped = [a[order] for a in arrays]
    return {int(k): tuple(g[bounds[i]:bounds[i + 1]] for g in grouped) for i, k in enumerate(keys.tolist())}


def _by_partition_then_time(partition: np.ndarray, time: np.ndarray) -> np.ndarray:
    """The order of reads by partition, then time: a stable sort by partition
    where they are in time order already, as a history's are."""
    if nondecreasing(time):
        return np.argsort(_narrowed(partition), kind="stable")
    return np.lexsort((time, partition))


def _narrowed(parts: np.ndarray) -> np.ndarray:
    """Partitions as int16 where they fit (-1 too): NumPy sorts 16-bit
    integers stably by radix, in a pass or two, where int64 would take a
    merge sort."""
    if len(parts) and -1 <= int(parts.min()) and int(parts.max()) <= np.iinfo(np.int16).max:
        return parts.astype(np.int16)
    return parts


def _searched_right(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """`np.searchsorted(a, v, "right")` for `v` sorted as well as `a`: one
    walk of both where `a` is not much the longer, cheaper then than a
    binary search for each of `v`."""
    if len(a) > _WALK_AT_MOST * len(v):
        return np.searchsorted(a, v, "right")
    return _walk_right(a, v, np.empty(len(v), np.intp))


_WALK_AT_MOST = 16  # times as many of `a` as of `v`: a longer `a` is searched


@compiled
def _walk_right(a, v, out):
    """`_searched_right`'s walk: each of `v` (sorted) past every element of `a` at or below it."""
    j = 0
    for i in range(len(v)):
        while j < len(a) and a[j] <= v[i]:
            j += 1
        out[i] = j
    return out


def _attempted_after(inv_t: np.ndarray, comp_t: np.ndarray, heal: int | None) -> bool:
    """Whether a send was invoked after the heal, or outstanding at it (sorted times)."""
    return heal is not None and len(inv_t) > 0 and bool(
        inv_t[-1] > heal or np.searchsorted(inv_t, heal, "right") > np.searchsorted(comp_t, heal, "right"))


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
