"""The driver's one read of a history, while it is validated.

`checkers.load.prepare` validates the history batch by batch and hands each
batch, in order, to `HistoryRead`: `digest` decodes it (its columns as
NumPy arrays, core/history/batches.py) and, for the in-process engine,
makes the kernel's rows of it (checkers/kernel/extract.py), in a thread of
its own; `absorb` hands it to every fold (checkers/folds/), in order. Once
the history is read, `facts` gathers what the kernel's shards need of the
whole history.
"""

from __future__ import annotations

import ctypes

import numpy as np

from checkers.folds import FOLDS, Clock, Few, Groups, LivenessFacts, Pairs, Reads, Restarts
from checkers.folds.few import committed_reads, faults, final_committed, final_logs
from checkers.kernel import rows as r
from checkers.kernel.extract import extract
from checkers.kernel.facts import Facts
from checkers.kernel.series import POINTS
from core.history.batches import Events, Names, decode
from core.history.states import high_watermarks


class HistoryRead:
    """What the driver takes from the history as it validates it (module
    docstring); `rows`: the kernel's rows of every batch, where kept."""

    def __init__(self, keep_rows: bool = False, shards: int = 1) -> None:
        self.names = Names()
        self.folds = [fold() for fold in FOLDS]
        self.shards = shards
        # Each batch's rows, cut in `shards` shards (checkers/kernel/rows.py: `Shard.split`).
        self.rows: list[list[r.Shard]] | None = [] if keep_rows else None

    def fold(self, kind):
        return next(f for f in self.folds if isinstance(f, kind))

    def digest(self, table) -> Events | None:
        """The first half of a batch's read (any thread, in order): decoded,
        and its rows made where they are kept. None for an empty batch."""
        if not table.num_rows:
            return None
        ev = decode(table, self.names)
        if self.rows is not None:
            self.rows.append(extract(ev, shards=self.shards))
        return ev

    def absorb(self, ev: Events | None) -> None:
        """The second half (in order): the batch to every fold."""
        if ev is None:
            return
        for fold in self.folds:
            fold.add(ev)

    def add(self, table) -> None:
        """Both halves of one batch."""
        self.absorb(self.digest(table))

    @property
    def few(self) -> list[dict]:
        return self.fold(Few).rows

    def faults(self) -> list[dict]:
        return faults(self.few)

    def facts(self, fold: dict[int, int], replica_nodes: list[str], states: list[dict] | None = None) -> Facts:
        """What the kernel's shards need of the whole history; offsets folded
        by `fold` (checkers/offsets.py); `states`: states.jsonl's lines, if any
        (the leaders' high watermarks)."""
        reads, groups = self.fold(Reads), self.fold(Groups)
        committed = committed_reads(self.few, self.names, fold)
        first_delivered: dict[tuple[int, int], int] = {}
        for (process, partition), low in reads.lowest_of.items():
            group = groups.member.get(process)
            if group is not None:
                key = (group, partition)
                first_delivered[key] = min(first_delivered.get(key, low), low)
        clock = self.fold(Clock).series(POINTS)
        hw = {p: [(clock.index_at(t), h - 1) for t, h in marks] for p, marks in high_watermarks(states or []).items()}
        return Facts(logs=final_logs(self.few, fold),
                     max_read={p: fold.get(o, o) for p, o in reads.highest.items()},
                     restarts=self.fold(Restarts).restarts,
                     groups=sorted(self.names.groups, key=self.names.groups.get),
                     member=dict(groups.member), processing=groups.processing_groups(), committed=committed,
                     final_committed=final_committed(committed),
                     first_delivered={key: fold.get(o, o) for key, o in first_delivered.items()},
                     replica_nodes=list(replica_nodes), clock=clock, hw=hw)

    def unanswered(self, op: str) -> np.ndarray:
        """The indexes of the invocations of `op` no completion answered."""
        i = self.names.op(op)
        return self.fold(Pairs).unanswered(i) if i >= 0 else np.empty(0, np.int64)

    @property
    def liveness(self) -> LivenessFacts:
        return self.fold(LivenessFacts)

    @property
    def pairs(self) -> Pairs:
        return self.fold(Pairs)

    @property
    def reads(self) -> Reads:
        return self.fold(Reads)


def give_back_read_memory() -> None:
    """Give what the read freed back to the system: Arrow's pool keeps the
    batches' buffers, and glibc's heap the small arrays freed as batches
    were let go (`malloc_trim`); without this they stayed in the driver's
    memory through the kernel's stage."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator gives memory back its own way
        return None


_MALLOC_TRIM = _malloc_trim()
