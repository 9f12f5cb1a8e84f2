"""The completions that restart a consumer's read order (docs/checker.md,
"Readings of the contract"): an assign or crash of the process restarts
every partition it reads, a seek the partition it names; only one that
happened (ok or info), at its completion. An info seek that names no
partition takes its invocation's, and with none there either restarts
them all. A few per consumer and fault.
"""

from __future__ import annotations

import numpy as np

from core.history.batches import Events
from core.history.format import TYPES

RESTARTING = ("assign", "crash", "seek")
_HAPPENED = (TYPES.index("ok"), TYPES.index("info"))
_INVOKE = TYPES.index("invoke")


class Restarts:
    """The fold (checkers/folds/__init__.py): `restarts`, (process, index,
    partition or None for all), in order."""

    def __init__(self) -> None:
        self.restarts: list[tuple[int, int, int | None]] = []
        self._seek_invoked: dict[int, int | None] = {}  # process -> the partition of its last seek invocation

    def add(self, ev: Events) -> None:
        ids = [i for i in (ev.names.op(name) for name in RESTARTING) if i >= 0]
        rows = np.flatnonzero(np.isin(ev.f, ids) & (ev.process >= 0)) if ids else ()
        if not len(rows):
            return
        seek = ev.names.op("seek")
        for proc, f, typ, index, part in zip(ev.process[rows].tolist(), ev.f[rows].tolist(), ev.typ[rows].tolist(),
                                             ev.index[rows].tolist(), ev.partition[rows].tolist()):
            named = None if part < 0 else part
            if f == seek and typ == _INVOKE:
                self._seek_invoked[proc] = named
            elif typ in _HAPPENED:
                only = (named if named is not None else self._seek_invoked.get(proc)) if f == seek else None
                self.restarts.append((proc, index, only))
