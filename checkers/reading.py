"""The driver's one read of a history, while it is validated.

`checkers.load.prepare` hands every batch of the history, in order, to a
`HistoryReader`, which gathers what the checker takes from the driver
rather than from Spark, each batch vectorised (NumPy and Arrow, no Python
per event), keeping only what later batches need:

- the nemesis's events and the `final-reads` operations (`few`): few rows
  in any history, which say where the final reads are and what faults ran;
- the events that restart a consumer's read order (`restarts`: assign,
  crash and seek completions that happened), a few per consumer and fault;
- every operation paired with its invocation: a send by its value (the
  invocations not yet answered are kept, sorted by value), every other
  operation by order within its process and `f` (the k-th completion
  answers the k-th invocation; the unanswered invocations' times are kept),
  where a completion that answers nothing is refused, by its index, as
  Spark refused it before;
- from the pairs, the latency histograms (`histogram_rows`: completions by
  f, outcome, second of completion and 4 % latency bucket, with the largest
  latency) and the invocations by f;
- liveness's columns (`columns`; checkers/liveness.py);
- send order (`send_order`; checkers/send_order.py), from every
  acknowledged send and its invocation's index;
- given a `RunsWriter`, the read runs of every ok poll, kept for read
  order on the driver or written for Spark to read (checkers/read_runs.py);
- given a `ValueRows`, the rows of the by-value frame: every send event and
  every record read (checkers/driver_by_value.py).

The rest (every other anomaly) is Spark's: its passes are over the whole
history at once, by value and by position, which no single read in order
can do within bounded memory.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from checkers.compiled import compiled, first_not_below
from checkers.driver_by_value import ValueRows, greatest_at
from checkers.key_rows import key_rows, seen_rows
from checkers.liveness import Columns, nondecreasing
from checkers.read_runs import RunsWriter
from checkers.send_order import Acks, SendOrder, group_of
from checkers.stats import BUCKET_FLOOR_NS, BUCKET_GROWTH, HISTOGRAM_COLUMNS
from core.errors import HistoryError
from core.history.format import FINAL_READS, NEMESIS_PROCESS_ID, TYPES
from core.history.parquet import string_codes

INVOKE = TYPES.index("invoke")
_EMPTY = np.empty(0, np.int64)
# An operation's place among its process's operations of one f, packed with the group.
_ORDINAL_BITS = 40
# A group's (process, f) packed in one int64: f's id in the low bits.
_F_BITS = 16
# Operation ids are below this (`digest` refuses more names).
_FS = 0x100


@dataclass
class Digested:
    """One batch's columns as `HistoryReader.digest` makes them: NumPy arrays
    (-1 for null), `typ` as TYPES' index and `f` as the reader's operation
    ids (`fs`: theirs as of this batch), and `reads`: its polls' largest
    offsets read per partition (time, partition, offset, process)."""

    process: np.ndarray
    time: np.ndarray
    index: np.ndarray
    value: np.ndarray
    key: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    typ: np.ndarray
    f: np.ndarray
    fs: dict[str, int]
    reads: tuple = ()  # set by `digest` once the rest is made
    invoke: np.ndarray = field(init=False)
    send: np.ndarray = field(init=False)  # a client's send

    def __post_init__(self) -> None:
        self.invoke = self.typ == INVOKE
        self.send = (self.process >= 0) & (self.f == self.fid("send"))

    def fid(self, name: str) -> int:
        """The id of operation `name`, -1 if the history has none so far."""
        return self.fs.get(name, -1)


class HistoryReader:
    """What the checker gathers from the history on the driver (module
    docstring): hand it every batch in order (`add`), then read `few`,
    `invokes`, `histogram_rows()` and `columns()`."""

    FEW_COLUMNS = ("process", "index", "time", "type", "f", "partitions", "ends", "extra")
    RESTARTS = ("assign", "crash", "seek")

    def __init__(self, runs: RunsWriter | None = None, values: ValueRows | None = None) -> None:
        self.few: list[dict] = []
        self.runs = runs  # where each batch's read runs go, if anywhere (checkers/read_runs.py)
        self.values = values  # where the by-value rows go, if anywhere (checkers/driver_by_value.py)
        # (process, index, partition or None: every partition it reads), in order.
        self.restarts: list[tuple[int, int, int | None]] = []
        self._seek_invoked: dict[int, int | None] = {}  # process -> the partition of its last seek invocation
        self.invokes: dict[str, int] = {}  # client invocations by f
        self._histogram: dict[tuple, list[int]] = {}  # (f, type, second, bucket) -> [count, max]
        self._fs: dict[str, int] = {}  # f -> a small id, in order seen
        # Sends invoked and not yet answered, sorted by value: value, key, time, index, process.
        self._sends = (_EMPTY,) * 5
        # Other operations, by (process, f) group: invocations and completions so far,
        # and the invocations not yet answered (group << _ORDINAL_BITS | ordinal, time).
        self._group_keys = _EMPTY  # each group's packed (process, f), by its number
        self._invoked = np.zeros(0, np.int64)
        self._completed = np.zeros(0, np.int64)
        self._open = (_EMPTY, _EMPTY)
        # Liveness's columns, a list of batches per column; and per client process,
        # its last event's time and its poll invocations; the processes of final reads.
        self._chunks: dict[str, list] = {}
        self._last_time: dict[int, int] = {}
        self._poll_invokes: dict[int, int] = {}
        self._final: set[int] = set()
        self.send_order = SendOrder()

    # -----------------------------------------------------------------------
    # one batch

    def add(self, batch) -> None:
        """Read one batch (an Arrow table or record batch in
        core.history.parquet's layout, or a user's with those column names)."""
        self.absorb(self.digest(batch))

    def digest(self, batch) -> Digested | None:
        """The first half of `add`: what one batch gives by itself (its
        columns as NumPy arrays, its few events, its reads' largest offsets,
        its by-value rows and read runs). Called for every batch in order,
        from one thread, which may be another than `absorb`'s: the batches'
        halves then share the cores (docs/benchmarks.md). None for an empty
        batch."""
        import pyarrow as pa
        import pyarrow.compute as pc

        t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if not t.num_rows:
            return None

        def col(name, default=-1):
            if name not in t.column_names:
                return np.full(t.num_rows, default, dtype=np.int64)
            return _int64s(t[name], default)

        process, time, index = col("process"), col("time"), col("index")
        value, key, partition, offset = col("value"), col("key"), col("partition"), col("offset")
        # Types and operation names by their dictionaries' codes (a null's: the last, -1).
        type_codes = string_codes(t["type"])
        typ = np.array([TYPES.index(name) if name in TYPES else -1 for name in type_codes.dictionary.to_pylist()]
                       + [-1], np.int64)[_int64s(type_codes.indices, -1)]
        f_codes = string_codes(t["f"])
        names = f_codes.dictionary.to_pylist()
        for name in names:
            self._fs.setdefault(name, len(self._fs))
        if len(self._fs) > _FS - 1:
            raise HistoryError(f"more than {_FS - 1} distinct operation names ('f'): not a history of this contract")
        f = np.array([self._fs[name] for name in names], np.int64)[_int64s(f_codes.indices, 0)]
        d = Digested(process, time, index, value, key, partition, offset, typ, f, dict(self._fs))
        self.few += self._few_of(t, process, f, d.fid(FINAL_READS))
        if self.values is not None:
            self.values.add_sends(d.send, d.invoke, typ, TYPES.index("ok"), TYPES.index("fail"), value, index,
                                  partition, offset, process)
        d.reads = self._reads_of(t, d)
        return d

    def absorb(self, d: Digested | None) -> None:
        """The second half of `add`: one batch's `digest` (in order) into
        what spans batches: the pairs, latencies, send order, restarts and
        liveness's columns. None (an empty batch's): nothing."""
        if d is None:
            return
        self._gather_restarts(d)
        comp_key, comp_inv_time, comp_inv_index = self._pair_sends(d.value, d.key, d.time, d.index, d.process,
                                                                   d.send, d.invoke)
        self._pair_others(d.process, d.f, d.typ, d.index, d.time, ~d.send, d.invoke)
        self._count(d)
        self._gather_liveness(d, comp_key)
        comp = d.send & ~d.invoke
        found = comp_inv_time >= 0
        self._order_acks(d.process, d.index, d.typ, d.value, d.partition, d.offset, comp, found, comp_inv_index)
        self._add_latencies(np.full(int(found.sum()), d.fid("send")), d.typ[comp][found], d.time[comp][found],
                            (d.time[comp] - comp_inv_time)[found])

    def _few_of(self, t, process, f, final_reads: int) -> list[dict]:
        """The batch's nemesis events and final-reads operations, as dicts of FEW_COLUMNS."""
        wanted = (process == NEMESIS_PROCESS_ID) | ((process >= 0) & (f == final_reads))
        if not wanted.any():
            return []
        import pyarrow as pa

        few = t.take(pa.array(np.flatnonzero(wanted)))
        present = [c for c in self.FEW_COLUMNS if c in few.column_names]
        return [{c: row.get(c) for c in self.FEW_COLUMNS} for row in few.select(present).to_pylist()]

    def _gather_restarts(self, d: Digested) -> None:
        """The completions that restart read order (docs/checker.md, "Readings
        of the contract"): an assign or crash of the process restarts every
        partition it reads, a seek the partition it names; only one that
        happened (ok or info); an info seek that names none takes its
        invocation's, and with none there either restarts them all."""
        restarting = np.zeros(_FS, bool)
        restarting[[d.fs[name] for name in self.RESTARTS if name in d.fs]] = True
        rows = np.flatnonzero(restarting[d.f] & (d.process >= 0))
        if not len(rows):
            return
        process, f, typ, index, partition = d.process, d.f, d.typ, d.index, d.partition
        seek = d.fid("seek")
        happened = (TYPES.index("ok"), TYPES.index("info"))
        for proc, fi, ty, i, part in zip(process[rows].tolist(), f[rows].tolist(), typ[rows].tolist(),
                                          index[rows].tolist(), partition[rows].tolist()):
            named = None if part < 0 else part
            if fi == seek and ty == INVOKE:
                self._seek_invoked[proc] = named
            elif ty in happened:
                only = (named if named is not None else self._seek_invoked.get(proc)) if fi == seek else None
                self.restarts.append((proc, i, only))

    def _pair_sends(self, value, key, time, index, process, send, invoke):
        """Each send completion's invocation: its key, time and index (-1 where
        none was invoked before it, which the checker's Spark pass refuses)."""
        inv, comp = np.flatnonzero(send & invoke), np.flatnonzero(send & ~invoke)
        kept = [np.concatenate((old, new[inv])) for old, new in zip(self._sends, (value, key, time, index, process))]
        # Sends are mostly invoked in the order of their values: then the
        # ones kept are sorted as they are (a sort and five gathers less).
        if not nondecreasing(kept[0]):
            order = np.argsort(kept[0], kind="stable")
            kept = [column[order] for column in kept]
        values, keys, times, indexes, processes = kept
        if not len(values):
            return (np.full(len(comp), -1),) * 3
        answered = np.zeros(len(values), bool)
        at = _answers(values, value[comp], answered, np.empty(len(comp), np.int64))
        self._sends = tuple(column[~answered] for column in kept)
        found = at >= 0
        return np.where(found, keys[at], -1), np.where(found, times[at], -1), np.where(found, indexes[at], -1)

    def _order_acks(self, process, index, typ, value, partition, offset, comp, found, comp_inv_index) -> None:
        """The `ok` send completions that answer an invocation, to send order."""
        ok = (typ[comp] == TYPES.index("ok")) & found
        rows = np.flatnonzero(comp)[ok]
        acks = Acks(group_of(process[rows], partition[rows]), comp_inv_index[ok], offset[rows], value[rows],
                    index[rows])
        self.send_order.add(acks, self._sends[4], self._sends[3])

    def _pair_others(self, process, f, typ, index, time, others, invoke) -> None:
        """Every operation but a client's send, by order within its (process,
        f): a completion with no invocation left to answer is refused."""
        rows = np.flatnonzero(others)
        if not len(rows):
            return
        # Each event's group (process, f), numbered in order seen.
        group, self._group_keys = seen_rows(((process[rows] + 1) << _F_BITS) | f[rows], self._group_keys)
        grown = len(self._group_keys) - len(self._invoked)
        if grown > 0:
            self._invoked = np.concatenate((self._invoked, np.zeros(grown, np.int64)))
            self._completed = np.concatenate((self._completed, np.zeros(grown, np.int64)))
        inv = invoke[rows]
        # Within each group, in file order: invocations and completions so far.
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
        sort = np.argsort(keys, kind="stable")
        keys, times = keys[sort], times[sort]
        wanted = (g[comp] << _ORDINAL_BITS) | k_comp[comp]
        i = np.searchsorted(keys, wanted)  # always found: k_comp <= k_inv
        answered = np.zeros(len(keys), bool)
        answered[i] = True
        self._open = (keys[~answered], times[~answered])
        client = process[at[comp]] >= 0
        done = at[comp][client]
        self._add_latencies(f[done], typ[done], time[done], (time[done] - times[i][client]))

    def _count(self, d: Digested) -> None:
        n = np.bincount(d.f[(d.process >= 0) & d.invoke], minlength=_FS)
        for name, i in d.fs.items():
            if n[i]:
                self.invokes[name] = self.invokes.get(name, 0) + int(n[i])

    def _add_latencies(self, f, typ, time, latency) -> None:
        """Count completions by (f, type, second of completion, latency bucket),
        with the largest latency: the same buckets and seconds Spark counted."""
        if not len(latency):
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            bucket = np.where(latency <= BUCKET_FLOOR_NS, 0,
                              np.ceil(np.log(latency / BUCKET_FLOOR_NS) / np.log(BUCKET_GROWTH))).astype(np.int64)
        # One int64 per key: second (40 bits), bucket (12), f (8), type (2); f ids
        # count the distinct operation names seen, a few dozen. A batch's keys are
        # few (its seconds times the buckets used): counted in a table of them.
        rows, unique = seen_rows(_latency_keys(time, bucket, f, typ, np.empty(len(time), np.int64)))
        count = np.bincount(rows, minlength=len(unique))
        top = greatest_at(np.full(len(unique), np.iinfo(np.int64).min), rows, latency)
        for k, n, m in zip(unique.tolist(), count.tolist(), top.tolist()):
            key = (k >> 2 & 0xFF, k & 3, k >> 22, k >> 10 & 0xFFF)  # f, type, second, bucket
            entry = self._histogram.get(key)
            if entry is None:
                self._histogram[key] = [n, m]
            else:
                entry[0] += n
                entry[1] = max(entry[1], m)

    def _reads_of(self, t, d: Digested) -> tuple:
        """The batch's ok polls of clients, each partition they returned
        records of once, with the largest offset of it: the time, partition,
        offset and process (liveness's reads); their records go to the
        by-value rows and the read runs on the way."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if "records" not in t.column_names:
            return (_EMPTY,) * 4
        # Every record of the batch, each with its event's row (`parent`),
        # but those of events other than a client's ok poll (none, in a
        # history that follows the contract): no copy of the polls' records.
        recs = t["records"]
        parent = pc.list_parent_indices(recs).to_numpy()
        flat = pc.list_flatten(recs)
        ok_poll = (d.process >= 0) & (d.f == d.fid("poll")) & (d.typ == TYPES.index("ok"))
        length = pc.fill_null(pc.list_value_length(recs), 0).to_numpy().astype(np.int64)
        if length[~ok_poll].any():  # by the events, not the records: a tenth as many
            kept = np.flatnonzero(ok_poll[parent])
            parent, flat, length = parent[kept], flat.take(pa.array(kept)), np.where(ok_poll, length, 0)
        if not len(flat):
            return (_EMPTY,) * 4
        p, o = _int64s(pc.struct_field(flat, "partition"), -1), _int64s(pc.struct_field(flat, "offset"), -1)
        process, index, time = d.process, d.index, d.time
        if self.values is not None:  # a validated history's records all have a value
            self.values.add_reads(pc.cast(pc.struct_field(flat, "value"), pa.int64()).to_numpy(), p, o,
                                  index[parent], process[parent])
        if self.runs is not None:
            # A record's slot: its place among its poll's records.
            slot = _slots(length, np.empty(len(flat), np.int64))
            self.runs.add(parent, process, index, time, p, o, slot, pc.struct_field(flat, "value"))
        polls_of, partitions, largest = _largest_reads(parent, p, o, np.full(int(p.max()) + 2, -1))
        return time[polls_of], partitions, largest, process[polls_of]

    def _gather_liveness(self, d: Digested, comp_key) -> None:
        process, time, f = d.process, d.time, d.f
        client = process >= 0
        self._final.update(np.unique(process[client & (f == d.fid(FINAL_READS))]).tolist())
        procs, row_of = key_rows([process[client]])  # no sort: a history's processes are few and small
        last, polls = _last_and_polls(row_of(process[client]), time[client], ((f == d.fid("poll")) & d.invoke)[client],
                                      np.full(len(procs), np.iinfo(np.int64).min), np.zeros(len(procs), np.int64))
        for proc, t_last, n in zip(procs.tolist(), last.tolist(), polls.tolist()):
            self._last_time[proc] = max(self._last_time.get(proc, t_last), t_last)
            self._poll_invokes[proc] = self._poll_invokes.get(proc, 0) + n
        invoked = int(np.count_nonzero(d.send & d.invoke))
        done = int(np.count_nonzero(d.send)) - invoked
        columns = _send_liveness(d.send, d.invoke, d.typ == TYPES.index("ok"), time, d.key, d.partition, d.offset,
                                 np.empty(invoked, np.int64), np.empty(invoked, np.int64), np.empty(done, np.int64),
                                 np.empty(done, bool), np.empty(done, np.int32), np.empty(done, np.int64))
        add = self._chunks.setdefault
        for name, column in zip(("inv_time", "inv_key", "comp_time", "comp_ok", "comp_partition", "comp_offset"),
                                columns):
            add(name, []).append(column)
        add("comp_key", []).append(comp_key)
        for name, column in zip(("read_time", "read_partition", "read_offset", "read_process"), d.reads):
            add(name, []).append(column)

    # -----------------------------------------------------------------------
    # what was gathered

    def histogram_rows(self) -> list[dict]:
        """The latency histograms' rows (stats.HISTOGRAM_COLUMNS), for `stats.latency`."""
        names = {i: name for name, i in self._fs.items()}
        return [dict(zip(HISTOGRAM_COLUMNS, (names[f], TYPES[typ], second, bucket, n, m)))
                for (f, typ, second, bucket), (n, m) in self._histogram.items()]

    def folded_few(self, mapping: dict[int, int]) -> list[dict]:
        """`few` with the offsets of `ends` folded as the checker's
        (checkers/offsets.py: true -> folded; empty: none folded)."""
        if not mapping:
            return self.few
        return [{**r, "ends": [{**e, "offset": mapping.get(e["offset"], e["offset"])} for e in r["ends"]]}
                if r.get("ends") else r for r in self.few]

    def columns(self) -> Columns:
        """Liveness's columns of everything read; the reads and the workload's
        end leave out the processes that did final reads (none of theirs is
        the run's). Called once: the batches are let go as they are joined."""
        import pyarrow as pa

        pa.default_memory_pool().release_unused()  # what Arrow kept of the batches read
        arrays = {}
        for k in list(self._chunks):  # one column at a time: no more than one held twice
            arrays[k] = np.concatenate(self._chunks.pop(k))
            _give_back_freed_memory()
        if not arrays:
            arrays = {k: np.empty(0, bool if k == "comp_ok" else np.int64)
                      for k in list(Columns.__dataclass_fields__) + ["read_process"] if k not in ("end", "polls")}
        in_run = ~np.isin(arrays.pop("read_process"), list(self._final))
        for k in ("read_time", "read_partition", "read_offset"):
            arrays[k] = arrays[k][in_run]
        run_procs = [proc for proc in self._last_time if proc not in self._final]
        end = max((self._last_time[proc] for proc in run_procs), default=-1)
        polls = sum(self._poll_invokes[proc] for proc in run_procs)
        return Columns(**arrays, end=end, polls=polls)


def _int64s(column, default: int) -> np.ndarray:
    """An Arrow integer column as int64, `default` for null: no copy where
    it is int64 and has no nulls (a validated history's records)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = pc.cast(column, pa.int64())
    return (pc.fill_null(column, default) if column.null_count else column).to_numpy()


def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator gives memory back its own way
        return None


_MALLOC_TRIM = _malloc_trim()


def _give_back_freed_memory() -> None:
    """Give the pages freed so far back to the system (glibc's `malloc_trim`).
    A batch's arrays are small enough to come from the heap, which keeps what
    is freed in it: without this, the columns' batches, let go as the columns
    are joined, stayed in the process's memory beside the joined columns (at
    100M events 2 GB of 4.3, docs/benchmarks.md)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


@compiled
def _largest_reads(parent, partition, offset, group_of):
    """Per poll (`parent`: each record's, non-decreasing) and partition it
    read, once, in the order of their first records: the poll, partition
    and largest offset, in one pass (a sort of the records by poll and
    partition took 0.15 s of a 10M-event history's read). `group_of`: -1
    for each partition + 1 (a null's is -1), its row of the output once it
    has one."""
    n = len(parent)
    poll, part, top = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    k = 0
    for i in range(n):
        g = group_of[partition[i] + 1]
        if g < 0 or poll[g] != parent[i]:  # the partition's first record in this poll
            group_of[partition[i] + 1] = k
            poll[k], part[k], top[k] = parent[i], partition[i], offset[i]
            k += 1
        elif offset[i] > top[g]:
            top[g] = offset[i]
    return poll[:k], part[:k], top[:k]


@compiled
def _slots(length, out):
    """Each record's place among its event's records (`length`: each
    event's count of records), into `out`."""
    k = 0
    for n in length:
        for j in range(n):
            out[k] = j
            k += 1
    return out


@compiled
def _last_and_polls(rows, time, poll_invoke, last, polls):
    """Each process's (by its row) last time and poll invocations, into `last` and `polls`."""
    for i in range(len(rows)):
        r = rows[i]
        if time[i] > last[r]:
            last[r] = time[i]
        if poll_invoke[i]:
            polls[r] += 1
    return last, polls


@compiled
def _send_liveness(send, invoke, ok, time, key, partition, offset, inv_time, inv_key, comp_time, comp_ok,
                   comp_partition, comp_offset):
    """Liveness's columns of a batch's sends, into the arrays given (as long
    as its send invocations and completions), in one pass: each
    invocation's time and key, each completion's time, whether ok, and its
    partition (-1 unless ok) and offset. NumPy's six masked gathers took
    0.14 s of a 10M-event history's read."""
    n_inv = n_comp = 0
    for i in range(len(send)):
        if not send[i]:
            continue
        if invoke[i]:
            inv_time[n_inv], inv_key[n_inv] = time[i], key[i]
            n_inv += 1
        else:
            comp_time[n_comp], comp_ok[n_comp], comp_offset[n_comp] = time[i], ok[i], offset[i]
            comp_partition[n_comp] = partition[i] if ok[i] else -1
            n_comp += 1
    return inv_time, inv_key, comp_time, comp_ok, comp_partition, comp_offset


@compiled
def _latency_keys(time, bucket, f, typ, out):
    """`_add_latencies`' key of each completion, into `out`: its second
    (`np.floor(time / 1e9)`, as Spark's), bucket, f and type packed."""
    for i in range(len(time)):
        second = np.int64(np.floor(time[i] / 1e9))
        out[i] = (((second << 12 | bucket[i]) << 8 | f[i]) << 2) | typ[i]
    return out


@compiled
def _answers(values, wanted, answered, out):
    """Each of `wanted`'s place among `values` (sorted; the first of equal
    ones), or -1 where none is equal, into `out`; the places found marked in
    `answered`. `np.searchsorted`'s answer, by a gallop from the last one
    found: completions come mostly in the order of their values (with the
    sort it spares, a 10M-event history's pairing of sends took 0.13 s
    against 0.33 s, docs/benchmarks.md)."""
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


# Rows of a history read at a time by `read_files`.
BATCH_ROWS = 500_000
_WANTED = ("index", "time", "process", "type", "f", "key", "value", "partition", "offset", "records", "partitions",
           "ends", "extra")


def read_files(files, batch_rows: int = BATCH_ROWS) -> HistoryReader:
    """A `HistoryReader` of Parquet history files, read in batches (no
    validation: that is `checkers.load.prepare`'s, which feeds the same reader)."""
    import pyarrow.parquet as pq

    reader = HistoryReader()
    for path in files:
        pf = pq.ParquetFile(str(path))
        names = set(pf.schema_arrow.names)
        for batch in pf.iter_batches(batch_size=batch_rows, columns=[c for c in _WANTED if c in names]):
            reader.add(batch)
    return reader
