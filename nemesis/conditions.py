"""What an `await` step of a schedule waits for: conditions on one topic
partition's live metadata, the vocabulary of `until`.

- isr-leader-only: the partition's ISR is its leader alone;
- isr-full: the ISR holds every replica of the partition;
- leader-changed: a leader other than the one when the await began (a
  partition without a leader does not count: it waits for the next one).

The nemesis (nemesis/injector.py) reads the partition's state through the
system's `partition_states(topic)` (infra.system.PartitionStates: leader,
epoch, ISR from ZooKeeper or KRaft metadata) and its replicas through
`replicas(topic)` (infra.system.Primaries), polling until the condition holds
or the await's timeout passes; a system without them cannot await.
"""

from __future__ import annotations

from typing import Callable

from infra.system import PartitionStates, Primaries
from nemesis.fault import Context, FaultError

AWAIT = "await"  # the history's `f` of an await step (a nemesis event, no fault)

# The one vocabulary of `until`: name -> what it means, in words (docs, errors, the report).
CONDITIONS: dict[str, str] = {
    "isr-leader-only": "the partition's ISR is its leader alone",
    "isr-full": "the partition's ISR holds every replica",
    "leader-changed": "a leader other than the one when the await began",
}
DEFAULT_TIMEOUT_S = 30.0
POLL_S = 0.25  # between two reads of the metadata


def observe(ctx: Context, partition: int) -> dict:
    """The partition's state now: {"leader", "epoch", "isr", "replicas"} (nodes by name,
    lists sorted); a FaultError when the system cannot say."""
    if not isinstance(ctx.system, PartitionStates) or not isinstance(ctx.system, Primaries):
        raise FaultError(f"the {getattr(ctx.system, 'name', 'system')} system cannot report partition states")
    states = ctx.system.partition_states(ctx.topic)
    if partition not in states:
        raise FaultError(f"no state known for partition {partition} of topic {ctx.topic}")
    leader, epoch, isr = states[partition]
    replicas = ctx.system.replicas(ctx.topic).get(partition, [])
    return {"leader": leader, "epoch": epoch, "isr": sorted(isr), "replicas": sorted(replicas)}


def holds(until: str, seen: dict, first: dict) -> bool:
    """Whether `until` holds for the state `seen`, the await having begun at `first`."""
    check: Callable[[dict, dict], bool] = _CHECKS[until]
    return check(seen, first)


_CHECKS: dict[str, Callable[[dict, dict], bool]] = {
    "isr-leader-only": lambda s, _: s["leader"] is not None and s["isr"] == [s["leader"]],
    "isr-full": lambda s, _: bool(s["replicas"]) and set(s["replicas"]) <= set(s["isr"]),
    "leader-changed": lambda s, first: s["leader"] is not None and s["leader"] != first.get("leader"),
}
assert set(_CHECKS) == set(CONDITIONS)


def describe(value: dict) -> str:
    """An await event's value in words: `partition 0: ISR n1 (leader n1)`."""
    if not isinstance(value, dict):
        return ""
    until = str(value.get("until", ""))
    words = f"until {until}" + (f" on partition {value['partition']}" if "partition" in value else "")
    seen = value.get("seen")
    if isinstance(seen, dict):
        isr = seen.get("isr")
        words += (f"; saw leader {seen.get('leader') or 'none'}, ISR "
                  f"{' '.join(map(str, isr)) if isinstance(isr, list) and isr else 'empty'}")
        if value.get("waited_s") is not None:
            words += f" after {value['waited_s']:g} s"
    return words
