"""What liveness (checkers/liveness.py) takes from the first read of a
history: what its walk must know of the whole history before it starts
(`Known`: the workload's end, the polls during the run, which key goes to
which partition, and which processes did final reads, whose reads are
none of the run's), and, for a history of up to HOLD_EVENTS events, the
walk's chunks themselves, one per batch (`keep`). A transaction's sends
are sends here too (docs/checker.md, "Liveness"): its invocation invokes
each, its `ok` completion acknowledges each at its position, a `fail` or
`info` one completes them unacknowledged. A larger history is read
again for the walk (`chunks_again`), a batch at a time: holding every
send's times would cost the driver gigabytes (about 45 bytes a send), a
second read only time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from checkers.compiled import compiled
from checkers.folds.pairs import SendPairs
from checkers.folds.reads import per_poll
from checkers.key_rows import PARTITION_BITS, distinct_pairs, seen_keys, seen_rows
from checkers.liveness import Chunk, Known
from core.history.batches import Events, Names, decode, file_tables, flatten, int64s
from core.history.format import FINAL_READS, MAX_PARTITION, TXN, TYPES

HOLD_EVENTS = 20_000_000  # histories up to this many events keep their chunks from the first read

_OK = TYPES.index("ok")
_INVOKE = TYPES.index("invoke")
# What the walk reads of a history read again.
COLUMNS = ("index", "time", "process", "key", "value", "partition", "offset", "type", "f", "records", "sends",
           "isolation")  # a read_uncommitted poll is no read (Events.reading)


class LivenessFacts:
    """The fold (checkers/folds/__init__.py); `known()` and `chunks()` once
    every batch is in."""

    def __init__(self) -> None:
        self.keep = True  # the batches' chunks kept (else: read again)
        self._kept: list[tuple] = []
        self._last_time: dict[int, int] = {}
        self._poll_invokes: dict[int, int] = {}
        self._final: set[int] = set()
        self._key_partition = np.empty((2, 0), np.int64)  # the distinct (key, partition) acknowledged

    def add(self, ev: Events) -> None:
        process, time = ev.process, ev.time
        self._final.update(np.unique(process[ev.is_op(FINAL_READS)]).tolist())
        # Each process's row (the nemesis's too, skipped), in one pass of a table of the few seen.
        rows, procs = seen_rows(process)
        polls = ev.is_op("poll") & (ev.typ == _INVOKE)
        last, n_polls = _last_and_polls(rows, process, time, polls, np.full(len(procs), np.iinfo(np.int64).min),
                                        np.zeros(len(procs), np.int64))
        for proc, t_last, n in zip(procs.tolist(), last.tolist(), n_polls.tolist()):
            if proc >= 0:
                self._last_time[proc] = max(self._last_time.get(proc, t_last), t_last)
                self._poll_invokes[proc] = self._poll_invokes.get(proc, 0) + n
        raw = _raw(ev, ev.send_pairs[0], ev.poll_reads)
        _, _, comp_key, comp_ok, ack_partition, _ = raw[:6]
        packed = np.empty(len(comp_ok), np.int64)
        k = _known_pairs(comp_ok, comp_key, ack_partition, packed)
        if k:
            if k > 0:  # each pair packed in one int64 (`distinct_pairs`' way), in one pass
                pairs = np.sort(seen_keys(packed[:k]))
                found = np.stack((pairs >> PARTITION_BITS, pairs & MAX_PARTITION))
            else:
                known = comp_ok & (comp_key >= 0) & (ack_partition >= 0)
                found = np.stack(distinct_pairs(comp_key[known], ack_partition[known]))
            self._key_partition = np.stack(distinct_pairs(*np.concatenate((self._key_partition, found), axis=1)))
        if self.keep:
            self._kept.append(raw)

    def known(self) -> Known:
        """What the walk must know before it starts."""
        run_procs = [proc for proc in self._last_time if proc not in self._final]
        keys, partitions = self._key_partition
        single = np.isin(keys, _once(keys))  # a key of one partition only
        return Known(end=max((self._last_time[proc] for proc in run_procs), default=-1),
                     polls=sum(self._poll_invokes[proc] for proc in run_procs),
                     keys=keys[single], key_partitions=partitions[single], final=frozenset(self._final))

    def chunks(self, known: Known) -> Iterator[Chunk]:
        """The kept batches as the walk's chunks, each let go once made."""
        self._kept.reverse()
        while self._kept:
            yield _chunk(self._kept.pop(), known)


def chunks_again(files: list[Path], known: Known) -> Iterator[Chunk]:
    """The walk's chunks of a history read again from its Parquet `files`,
    a batch at a time: its sends paired again, its polls' reads found again,
    as the first read did."""
    names, pairs = Names(), SendPairs()
    for file in files:
        for table in file_tables(file, COLUMNS):
            ev = decode(table, names)
            send = ev.is_op("send")
            comp_key, _, _ = pairs.pair(ev.value, ev.key, ev.time, ev.index, send, ev.typ == _INVOKE)
            polls, partitions, _, largest = per_poll(ev)
            yield _chunk(_raw(ev, comp_key, (ev.time[polls], partitions, largest, ev.process[polls])), known)


def _once(keys: np.ndarray) -> np.ndarray:
    """The keys that occur once among `keys` (sorted)."""
    distinct, counts = np.unique(keys, return_counts=True)
    return distinct[counts == 1]


def _raw(ev: Events, comp_key: np.ndarray, reads: tuple) -> tuple:
    """A batch's sends and reads before attribution: invocations' time and
    key, completions' time, invocation's key, ok, partition (-1 unless ok)
    and offset, and reads' time, partition, offset and process; the sends
    of its transactions merged in by time."""
    send = ev.is_op("send")
    invoke = ev.typ == _INVOKE
    invoked = int(np.count_nonzero(send & invoke))
    done = int(np.count_nonzero(send)) - invoked
    inv_time, inv_key, comp_time, comp_ok, comp_partition, comp_offset = _send_columns(
        send, invoke, ev.typ == _OK, ev.time, ev.key, ev.partition, ev.offset,
        np.empty(invoked, np.int64), np.empty(invoked, np.int64), np.empty(done, np.int64),
        np.empty(done, bool), np.empty(done, np.int64), np.empty(done, np.int64))
    txn = ev.is_op(TXN) if TXN in ev.names.ops else None
    if txn is not None and txn.any():
        t_inv, t_comp = _txn_sends(ev, txn, invoke)
        inv_time, inv_key = _by_time((inv_time, inv_key), t_inv)
        comp_time, comp_key, comp_ok, comp_partition, comp_offset = _by_time(
            (comp_time, comp_key, comp_ok, comp_partition, comp_offset), t_comp)
    return (inv_time, inv_key, comp_key, comp_ok, comp_partition, comp_time, comp_offset, *reads)


def _txn_sends(ev: Events, txn: np.ndarray, invoke: np.ndarray) -> tuple[tuple, tuple]:
    """The sends of a batch's transactions: each invocation's (time, key) and
    each completion's (time, key, ok, partition (-1 unless ok), offset), as
    `_send_columns` gives a plain send's. A completion's key is the one it
    repeats (the contract's completion lists its sends again)."""
    items = flatten(ev.table, "sends", txn)
    key = _send_keys(ev.table, txn)
    time, at_invoke = ev.time[items.parent], invoke[items.parent]
    ok = ev.typ[items.parent] == _OK
    comp = ~at_invoke
    return ((time[at_invoke], key[at_invoke]),
            (time[comp], key[comp], ok[comp], np.where(ok, items.partition, -1)[comp], items.offset[comp]))


def _send_keys(table, rows: np.ndarray) -> np.ndarray:
    """The `key` of each of `rows`' sends, in `flatten`'s order (-1: null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = table["sends"]
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks() if lists.num_chunks != 1 else lists.chunk(0)
    flat = pc.list_flatten(lists)
    key = int64s(pc.struct_field(flat, "key")) if flat.type.get_field_index("key") >= 0 else \
        np.full(len(flat), -1, np.int64)
    return key[rows[int64s(pc.list_parent_indices(lists))]]


def _by_time(columns: tuple, more: tuple) -> tuple:
    """`columns` and `more` (each in time order, the first column the time) as one, in time order."""
    joined = [np.concatenate((a, b)) for a, b in zip(columns, more)]
    order = np.argsort(joined[0], kind="stable")
    return tuple(c[order] for c in joined)


def _chunk(raw: tuple, known: Known) -> Chunk:
    """A batch's chunk: its sends attributed to partitions by key, the final reads left out."""
    inv_time, inv_key, comp_key, comp_ok, comp_partition, comp_time, comp_offset, \
        read_time, read_partition, read_offset, read_process = raw
    in_run = ~np.isin(read_process, list(known.final)) if known.final else slice(None)
    return Chunk(inv_time=inv_time, inv_partition=known.partitions_of(inv_key), comp_time=comp_time,
                 comp_partition=known.partitions_of(comp_key), comp_ok=comp_ok, ack_partition=comp_partition,
                 ack_offset=comp_offset, read_time=read_time[in_run], read_partition=read_partition[in_run],
                 read_offset=read_offset[in_run])


@compiled
def _last_and_polls(rows, process, time, poll_invoke, last, polls):
    """Each client process's (by its row) last time and poll invocations, into `last` and `polls`."""
    for i in range(len(rows)):
        if process[i] < 0:
            continue
        r = rows[i]
        if time[i] > last[r]:
            last[r] = time[i]
        if poll_invoke[i]:
            polls[r] += 1
    return last, polls


@compiled
def _known_pairs(ok, key, partition, out):
    """The (key, partition) of each ok send completion with both, packed
    (`key << PARTITION_BITS | partition`) into `out`: how many, or -1 where
    a key does not fit above a partition's bits."""
    k = 0
    for i in range(len(ok)):
        if ok[i] and key[i] >= 0 and partition[i] >= 0:
            if key[i] >> (63 - PARTITION_BITS):
                return -1
            out[k] = (key[i] << PARTITION_BITS) | partition[i]
            k += 1
    return k


@compiled
def _send_columns(send, invoke, ok, time, key, partition, offset, inv_time, inv_key, comp_time, comp_ok,
                  comp_partition, comp_offset):
    """A batch's sends, into the arrays given (as long as its send
    invocations and completions), in one pass: each invocation's time and
    key, each completion's time, whether ok, and its partition (-1 unless
    ok) and offset."""
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
