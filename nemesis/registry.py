"""Every fault the nemesis can inject, one line each, in the order `--nemesis`
lists them. The spec, the schedule, the nemesis thread, the report and the
synthetic histories read this table; a new fault is a record in its family's
file (nemesis/fault.py says what a record holds) and a line here.
"""

from __future__ import annotations

from typing import Iterable

from nemesis import disk, link, partition, power, process
from nemesis.fault import Fault


def _table(*faults: Fault) -> dict[str, Fault]:
    """Name -> record; two faults never share a name or a history action."""
    table: dict[str, Fault] = {}
    actions: set[str] = set()
    for f in faults:
        if f.name in table or {f.start_action, f.stop_action} & actions or f.start_action == f.stop_action:
            raise ValueError(f"fault {f.name!r}: its name or actions are taken")
        table[f.name] = f
        actions |= {f.start_action, f.stop_action}
    return table


FAULTS: dict[str, Fault] = _table(
    partition.PARTITION,
    link.LOSSY_LINK,
    link.SLOW_LINK,
    process.KILL,
    process.PAUSE,
    disk.STALL,
    disk.SLOW,
    disk.FAIL,
    disk.CORRUPT,  # not in the "disk" group: that would change what every seed draws for --nemesis disk
    power.POWER_LOSS,
)

# A --nemesis name that means several faults: "disk" = disk-stall, disk-slow, disk-fail.
FAULT_GROUPS: dict[str, tuple[str, ...]] = {
    group: tuple(f.name for f in FAULTS.values() if f.group == group)
    for group in dict.fromkeys(f.group for f in FAULTS.values() if f.group)}

# The history's `f` that begins a fault -> its record; that which ends it -> its record.
BY_START_ACTION: dict[str, Fault] = {f.start_action: f for f in FAULTS.values()}
BY_STOP_ACTION: dict[str, Fault] = {f.stop_action: f for f in FAULTS.values()}
# A fault's start action -> its stop action: the pairs core/history/faults.py's rule
# and the checkers take as data (they may not import the nemesis).
FAULT_ENDS: dict[str, str] = {f.start_action: f.stop_action for f in FAULTS.values()}


def needs_faultfs(names: Iterable[str]) -> bool:
    """Whether any of these faults needs the faultfs under the data dirs."""
    return any(name in FAULTS and FAULTS[name].needs_faultfs for name in names)
