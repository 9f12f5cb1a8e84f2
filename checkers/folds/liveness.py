"""Liveness's columns (checkers/liveness.py), gathered batch by batch: each
send's invocation (time, key) and completion (time, its invocation's key,
ok or not, partition and offset), each poll's largest offset per partition
it returned records of (from `Events.poll_reads`), and per process its last
event and its poll invocations. The reads and the workload's end leave
out the processes that did final reads (none of theirs is the run's).
"""

from __future__ import annotations

import ctypes

import numpy as np

from checkers.compiled import compiled
from checkers.key_rows import key_rows
from checkers.liveness import Columns
from core.history.batches import Events
from core.history.format import FINAL_READS, TYPES

_OK = TYPES.index("ok")
_INVOKE = TYPES.index("invoke")


class LivenessColumns:
    """The fold (checkers/folds/__init__.py); `columns()` once every batch is in."""

    def __init__(self) -> None:
        self._chunks: dict[str, list] = {}
        self._last_time: dict[int, int] = {}
        self._poll_invokes: dict[int, int] = {}
        self._final: set[int] = set()

    def add(self, ev: Events) -> None:
        process, time = ev.process, ev.time
        client = process >= 0
        self._final.update(np.unique(process[ev.is_op(FINAL_READS)]).tolist())
        procs, row_of = key_rows([process[client]])
        polls = ev.is_op("poll") & (ev.typ == _INVOKE)
        last, n_polls = _last_and_polls(row_of(process[client]), time[client], polls[client],
                                        np.full(len(procs), np.iinfo(np.int64).min), np.zeros(len(procs), np.int64))
        for proc, t_last, n in zip(procs.tolist(), last.tolist(), n_polls.tolist()):
            self._last_time[proc] = max(self._last_time.get(proc, t_last), t_last)
            self._poll_invokes[proc] = self._poll_invokes.get(proc, 0) + n
        send = ev.is_op("send")
        invoke = ev.typ == _INVOKE
        invoked = int(np.count_nonzero(send & invoke))
        done = int(np.count_nonzero(send)) - invoked
        columns = _send_liveness(send, invoke, ev.typ == _OK, time, ev.key, ev.partition, ev.offset,
                                 np.empty(invoked, np.int64), np.empty(invoked, np.int64), np.empty(done, np.int64),
                                 np.empty(done, bool), np.empty(done, np.int32), np.empty(done, np.int64))
        add = self._chunks.setdefault
        for name, column in zip(("inv_time", "inv_key", "comp_time", "comp_ok", "comp_partition", "comp_offset"),
                                columns):
            add(name, []).append(column)
        add("comp_key", []).append(ev.send_pairs[0])
        for name, column in zip(("read_time", "read_partition", "read_offset", "read_process"), ev.poll_reads):
            add(name, []).append(column)

    def columns(self) -> Columns:
        """Liveness's columns of everything read. Called once: the batches
        are let go as they are joined."""
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


def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator gives memory back its own way
        return None


_MALLOC_TRIM = _malloc_trim()


def _give_back_freed_memory() -> None:
    """Give the pages freed so far back to the system (glibc's `malloc_trim`):
    a batch's arrays are small enough to come from the heap, which keeps what
    is freed in it; without this, the columns' batches, let go as the columns
    are joined, stayed in the process's memory beside the joined columns."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


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
    partition (-1 unless ok) and offset."""
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
