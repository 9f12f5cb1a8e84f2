"""The transactions' spans: each completed transaction's completion and the
invocation it answers (by order within its process, as every operation
but a send is paired), for the realtime edges of the cycles' second pass
(checkers/kernel/transactions.py)."""

from __future__ import annotations

from collections import deque

import numpy as np

from core.history.batches import Events
from core.history.format import TXN, TYPES

_INVOKE = TYPES.index("invoke")


class Transactions:
    """The fold (checkers/folds/__init__.py): `spans`, completion index -> invocation index."""

    def __init__(self) -> None:
        self.spans: dict[int, int] = {}
        self._open: dict[int, deque] = {}

    def add(self, ev: Events) -> None:
        if TXN not in ev.names.ops:
            return
        at = np.flatnonzero(ev.is_op(TXN))
        for process, typ, index in zip(ev.process[at].tolist(), ev.typ[at].tolist(), ev.index[at].tolist()):
            waiting = self._open.setdefault(process, deque())
            if typ == _INVOKE:
                waiting.append(index)
            elif waiting:  # validation refuses a completion with nothing to answer
                self.spans[index] = waiting.popleft()
