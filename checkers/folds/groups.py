"""Consumer groups' members (docs/history.md, "Consumer groups"): a process
is a member of group G when it records an `assign`, `commit`, `committed`
or `txn` carrying G, and belongs to one group at most (a process in two
refuses the history); the groups whose members record processing
(`process` operations, or transactions carrying the group: a
consume-transform-produce transaction handles what it read) are the ones
whose handling is checked. It also keeps each client process's last
event (starved members end there: checkers/group_balance.py).
"""

from __future__ import annotations

import numpy as np

from core.errors import HistoryError
from core.history.batches import Events
from core.history.format import TXN

GROUP_OPS = ("assign", "commit", "committed", TXN)


class Groups:
    """The fold (checkers/folds/__init__.py): `member` (process -> group id,
    `Names.groups`' ids) and the processes that recorded a `process` or a
    `txn` carrying a group; `last`: each client process's last event, (index, time)."""

    def __init__(self) -> None:
        self.member: dict[int, int] = {}
        self.processing: set[int] = set()  # processes
        self.last: dict[int, tuple[int, int]] = {}

    def add(self, ev: Events) -> None:
        clients = ev.process >= 0
        if clients.any():
            process = ev.process[clients][::-1]  # a batch is in index order: a process's first here is its last
            seen, at = np.unique(process, return_index=True)
            index, time = ev.index[clients][::-1][at], ev.time[clients][::-1][at]
            self.last.update(zip(seen.tolist(), zip(index.tolist(), time.tolist())))
        ops = [i for i in (ev.names.op(name) for name in GROUP_OPS) if i >= 0]
        carrying = np.isin(ev.f, ops) & (ev.group >= 0) & (ev.process >= 0) if ops else None
        if carrying is not None and carrying.any():
            pairs = np.unique(np.stack((ev.process[carrying], ev.group[carrying])), axis=1)
            for process, group in zip(pairs[0].tolist(), pairs[1].tolist()):
                known = self.member.setdefault(process, group)
                if known != group:
                    names = {i: name for name, i in ev.names.groups.items()}
                    at = int(ev.index[carrying & (ev.process == process) & (ev.group == group)][0])
                    raise HistoryError(f"index {at}: process {process} is a member of group {names[group]!r}, "
                                       f"after {names[known]!r} (a process belongs to one group at most)")
        processing = ev.is_op("process")
        if TXN in ev.names.ops:
            processing |= ev.is_op(TXN) & (ev.group >= 0)
        if processing.any():
            self.processing.update(np.unique(ev.process[processing]).tolist())

    def processing_groups(self) -> set[int]:
        """The groups a member of which recorded a `process` or a `txn` carrying a group."""
        return {self.member[p] for p in self.processing if p in self.member}
