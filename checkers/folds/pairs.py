"""Every operation paired with its invocation, and what the pairs give: the
latency histograms, the invocations by operation, and those never answered.

A send is paired by its value (the invocations not yet answered are kept,
sorted by value), every other operation by order within its process and
`f` (the k-th completion answers the k-th invocation; a completion with no
invocation left to answer refuses the history, by its index); a `process`
that ended `fail` or `info` is kept as its invocation's index (its records
are the invocation's: the contract has the completion repeat them only
when ok). From each pair, its completion is counted in a histogram by
(operation, outcome, second of completion, 4 % latency bucket) with the
largest latency
(checkers/stats.py reads quantiles off them). Each batch's sends' pairs are
left on it (`Events.send_pairs`: each send completion's invocation's key,
time and index, -1 where none) for the folds after this one.
"""

from __future__ import annotations

import numpy as np

from checkers.compiled import compiled, first_not_below, nondecreasing
from checkers.key_rows import seen_rows
from checkers.stats import BUCKET_FLOOR_NS, BUCKET_GROWTH, Histograms
from core.errors import HistoryError
from core.history.batches import Events
from core.history.format import TYPES

INVOKE, OK = TYPES.index("invoke"), TYPES.index("ok")
_EMPTY = np.empty(0, np.int64)
# An operation's place among its process's operations of one f, packed with the group.
_ORDINAL_BITS = 40
# A group's (process, f) packed in one int64: f's id in the low bits.
_F_BITS = 16
# Operation ids are below this (a history with more names is refused).
MAX_OPS = 0xFF


class Pairs:
    """The fold (checkers/folds/__init__.py)."""

    def __init__(self) -> None:
        self.invokes: dict[str, int] = {}  # client invocations by f
        # Each batch's latency cells: their keys (`_latency_keys`), counts and maxima.
        self._cells: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._names: dict[int, str] = {}
        self._sends = SendPairs()
        # Other operations, by (process, f) group: invocations and completions so far,
        # and the invocations not yet answered (group << _ORDINAL_BITS | ordinal, time, index).
        self._group_keys = _EMPTY
        self._invoked = np.zeros(0, np.int64)
        self._completed = np.zeros(0, np.int64)
        self._open = (_EMPTY, _EMPTY, _EMPTY)
        # `process` invocations answered fail or info: their indexes and those types.
        self._process_ended: list[tuple[np.ndarray, np.ndarray]] = []
        self._process_op = -1

    def add(self, ev: Events) -> None:
        if len(ev.names.ops) > MAX_OPS:
            raise HistoryError(f"more than {MAX_OPS} distinct operation names ('f'): not a history of this contract")
        self._names = {i: name for name, i in ev.names.ops.items()}
        self._process_op = ev.names.op("process")
        send = ev.is_op("send")
        invoke = ev.typ == INVOKE
        ev.send_pairs = self._sends.pair(ev.value, ev.key, ev.time, ev.index, send, invoke)
        self._pair_others(ev.process, ev.f, ev.typ, ev.index, ev.time, ~send, invoke)
        n = np.bincount(ev.f[(ev.process >= 0) & invoke & (ev.f >= 0)], minlength=len(ev.names.ops))
        for name, i in ev.names.ops.items():
            if n[i]:
                self.invokes[name] = self.invokes.get(name, 0) + int(n[i])
        # Each send completion with its invocation: its type, time and latency.
        at = np.flatnonzero(send & ~invoke)
        _, inv_time, _ = ev.send_pairs
        found = inv_time >= 0
        if not found.all():
            at, inv_time = at[found], inv_time[found]
        time = ev.time[at]
        self._add_latencies(np.full(len(at), ev.names.op("send")), ev.typ[at], time, time - inv_time)

    def _pair_others(self, process, f, typ, index, time, others, invoke) -> None:
        """Every operation but a client's send, by order within its (process,
        f): a completion with no invocation left to answer is refused."""
        rows = np.flatnonzero(others)
        if not len(rows):
            return
        group, self._group_keys = seen_rows(((process[rows] + 1) << _F_BITS) | f[rows], self._group_keys)
        grown = len(self._group_keys) - len(self._invoked)
        if grown > 0:
            self._invoked = np.concatenate((self._invoked, np.zeros(grown, np.int64)))
            self._completed = np.concatenate((self._completed, np.zeros(grown, np.int64)))
        inv = invoke[rows]
        order = np.argsort(group, kind="stable")
        g = group[order]
        starts = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
        is_inv = inv[order].astype(np.int64)
        run_inv, run_comp = _cumsum_by_run(is_inv, starts), _cumsum_by_run(1 - is_inv, starts)
        k_inv, k_comp = self._invoked[g] + run_inv, self._completed[g] + run_comp
        comp = ~inv[order]
        orphan = comp & (k_comp > k_inv)
        if orphan.any():
            first = int(index[rows[order][orphan]].min())
            raise HistoryError(f"index {first}: a completion without an invocation (same process and f) before it")
        ends = np.append(starts[1:], len(g)) - 1
        self._invoked[g[ends]], self._completed[g[ends]] = k_inv[ends], k_comp[ends]
        # The k-th completion answers the k-th invocation: its time.
        at = rows[order]
        new = (g[~comp] << _ORDINAL_BITS) | k_inv[~comp]
        keys = np.concatenate((self._open[0], new))
        times = np.concatenate((self._open[1], time[at[~comp]]))
        indexes = np.concatenate((self._open[2], index[at[~comp]]))
        sort = np.argsort(keys, kind="stable")
        keys, times, indexes = keys[sort], times[sort], indexes[sort]
        wanted = (g[comp] << _ORDINAL_BITS) | k_comp[comp]
        i = np.searchsorted(keys, wanted)  # always found: k_comp <= k_inv
        answered = np.zeros(len(keys), bool)
        answered[i] = True
        self._open = (keys[~answered], times[~answered], indexes[~answered])
        client = process[at[comp]] >= 0
        done = at[comp][client]
        if self._process_op >= 0:
            ended = (f[done] == self._process_op) & (typ[done] != OK)
            if ended.any():
                self._process_ended.append((indexes[i][client][ended], typ[done][ended]))
        self._add_latencies(f[done], typ[done], time[done], (time[done] - times[i][client]))

    def _add_latencies(self, f, typ, time, latency) -> None:
        """Count completions by (f, type, second of completion, latency bucket),
        with the largest latency."""
        if not len(latency):
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            bucket = np.where(latency <= BUCKET_FLOOR_NS, 0,
                              np.ceil(np.log(latency / BUCKET_FLOOR_NS) / np.log(BUCKET_GROWTH))).astype(np.int64)
        # One int64 per key: second (40 bits), bucket (12), f (8), type (2); a
        # batch's keys are few (its seconds times the buckets used): counted in
        # a table of them, kept as arrays till the histograms are asked for.
        rows, unique = seen_rows(_latency_keys(time, bucket, f, typ, np.empty(len(time), np.int64)))
        count = np.bincount(rows, minlength=len(unique))
        top = _greatest_at(np.full(len(unique), np.iinfo(np.int64).min), rows, latency)
        # A copy: `seen_rows` gives a view of an array as long as the batch.
        self._cells.append((unique.copy(), count, top))

    def histograms(self) -> Histograms:
        """The latency histograms, for `stats.latency`: the batches' cells
        of each key added up, each key once, in the order first seen."""
        fs = [name for _, name in sorted(self._names.items())]  # by id: ids are 0, 1, ... as first seen
        if not self._cells:
            return Histograms(fs, list(TYPES), *(_EMPTY,) * 6)
        keys, counts, tops = (np.concatenate(x) for x in zip(*self._cells))
        rows, unique = seen_rows(keys)
        count = _sum_at(np.zeros(len(unique), np.int64), rows, counts)
        top = _greatest_at(np.full(len(unique), np.iinfo(np.int64).min), rows, tops)
        return Histograms(fs, list(TYPES), unique >> 2 & 0xFF, unique & 3, unique >> 22, unique >> 10 & 0xFFF, count,
                          top)

    def process_ended(self) -> tuple[np.ndarray, np.ndarray]:
        """The `process` invocations answered fail or info: their indexes and the types that answered them."""
        if not self._process_ended:
            return _EMPTY, _EMPTY
        return tuple(np.concatenate(x) for x in zip(*self._process_ended))

    def unanswered(self, op: int) -> np.ndarray:
        """The indexes of the invocations of operation `op` (not a send) that no completion answered, in order."""
        groups = self._open[0] >> _ORDINAL_BITS
        of_op = (self._group_keys[groups] & ((1 << _F_BITS) - 1)) == op if len(groups) else np.zeros(0, bool)
        return np.sort(self._open[2][of_op])


class SendPairs:
    """Sends paired by value (the module docstring's rule), batch by batch:
    the invocations not yet answered are kept, sorted by value. Also used
    alone, where liveness reads a large history again (checkers/folds/liveness.py)."""

    def __init__(self) -> None:
        # Sends invoked and not yet answered, sorted by value: value, key, time, index.
        self._sends = (_EMPTY,) * 4

    def pair(self, value, key, time, index, send, invoke):
        """Each send completion's invocation: its key, time and index (-1
        where none was invoked before it, which the by-value frame refuses)."""
        inv, comp = np.flatnonzero(send & invoke), np.flatnonzero(send & ~invoke)
        kept = [np.concatenate((old, new[inv])) for old, new in zip(self._sends, (value, key, time, index))]
        # Sends are mostly invoked in the order of their values: then the
        # ones kept are sorted as they are (a sort and four gathers less).
        if not nondecreasing(kept[0]):
            order = np.argsort(kept[0], kind="stable")
            kept = [column[order] for column in kept]
        values, keys, times, indexes = kept
        if not len(values):
            self._sends = tuple(kept)
            return (np.full(len(comp), -1),) * 3
        answered = np.zeros(len(values), bool)
        at = _answers(values, value[comp], answered, np.empty(len(comp), np.int64))
        self._sends = tuple(column[~answered] for column in kept)
        found = at >= 0
        return np.where(found, keys[at], -1), np.where(found, times[at], -1), np.where(found, indexes[at], -1)


@compiled
def _greatest_at(out, rows, column):
    """Each row's greatest of `column` (`rows`: each element's), into `out`."""
    for i in range(len(rows)):
        if column[i] > out[rows[i]]:
            out[rows[i]] = column[i]
    return out


@compiled
def _sum_at(out, rows, column):
    """Each row's sum of `column` (`rows`: each element's), into `out`."""
    for i in range(len(rows)):
        out[rows[i]] += column[i]
    return out


@compiled
def _latency_keys(time, bucket, f, typ, out):
    """`_add_latencies`' key of each completion, into `out`: its second
    (`np.floor(time / 1e9)`), bucket, f and type packed."""
    for i in range(len(time)):
        second = np.int64(np.floor(time[i] / 1e9))
        out[i] = (((second << 12 | bucket[i]) << 8 | f[i]) << 2) | typ[i]
    return out


@compiled
def _answers(values, wanted, answered, out):
    """Each of `wanted`'s place among `values` (sorted; the first of equal
    ones), or -1 where none is equal, into `out`; the places found marked in
    `answered`. `np.searchsorted`'s answer, by a gallop from the last one
    found: completions come mostly in the order of their values."""
    n = len(values)
    last = 0
    for i in range(len(wanted)):
        w = wanted[i]
        # A range [lo, hi) that holds the first value >= w, galloping out from `last`.
        if values[last] < w:
            lo, step = last + 1, 1
            hi = lo
            while hi < n and values[hi] < w:
                lo = hi + 1
                hi += step
                step <<= 1
            hi = min(hi, n)
        else:
            hi, step = last, 1
            lo = hi
            while lo > 0 and values[lo - 1] >= w:
                hi = lo - 1
                lo -= step
                step <<= 1
            lo = max(lo, 0)
        lo = first_not_below(values, w, lo, hi)
        if lo < n and values[lo] == w:
            out[i] = lo
            answered[lo] = True
            last = lo
        else:
            out[i] = -1
            last = min(lo, n - 1)
    return out


def _cumsum_by_run(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sums of `x` restarting at each of `starts` (run boundaries)."""
    total = np.cumsum(x)
    before = np.zeros(len(x), np.int64)
    before[starts[1:]] = total[starts[1:] - 1]
    return total - np.maximum.accumulate(before)
