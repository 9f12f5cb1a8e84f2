"""The table of systems `harness run` can test.

Each system is one module holding its `infra.system.SystemKind` record (name,
its own settings and flags, a check before anything starts, how to build it)
and one line below; the spec, the run and `harness scenarios` look systems up
here by name and know nothing else about any one of them.
"""

from __future__ import annotations

from core.errors import UserError
from infra import kafka, own_broker
from infra.system import SystemKind, SystemOption

SYSTEMS: dict[str, SystemKind] = {s.name: s for s in (
    own_broker.SYSTEM,
    kafka.SYSTEM,
)}

# Every system's own settings, by name, with the system that owns each.
SYSTEM_OPTIONS: dict[str, tuple[str, SystemOption]] = {
    o.name: (s.name, o) for s in SYSTEMS.values() for o in s.options}


def system_named(name: str) -> SystemKind:
    """The system called `name`; a UserError naming the known ones otherwise."""
    try:
        return SYSTEMS[name]
    except KeyError:
        raise UserError(f"--system {name!r}: expected one of {', '.join(SYSTEMS)}") from None
