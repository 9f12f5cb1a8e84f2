"""A fault schedule drawn from a seed: the same seed, the same faults.

The schedule is a list of steps planned before the run. By default one fault
at a time: wait, start a fault, wait, stop it, and so on. With overlap
(`nemesis-overlap`), as Jepsen's combined nemesis does, the run is cut into
periods (each about `nemesis-interval` long); each period draws a subset of
the enabled fault families (each in or out with probability 1/2; none at all
is a rest period in which the cluster recovers), one fault of each family
drawn with its own targets, the starts staggered inside the period and every
fault stopped by the period's end: several faults in force at once, never
two of one name. Every random choice (the waits, the faults, their modes,
which nodes by their place in the sorted node list) is made here from
`random.Random(seed)`, so two runs with one seed inject the same sequence;
each fault's record draws its own mode and nodes (`Fault.draw`). Targets
that depend on the cluster's state at that moment (the leader of a
partition, the controller) are resolved when the step runs, and the events
record whom they hit.

An explicit schedule (a spec's `[[schedule]]` tables, `from_records`) may
also overlap faults (a stop names its fault) and `await` a condition on a
topic partition's live metadata (nemesis.conditions) between two steps.
"""

from __future__ import annotations

import dataclasses
import random

from core.errors import UserError
from nemesis import link
from nemesis.conditions import CONDITIONS, DEFAULT_TIMEOUT_S
from nemesis.fault import Step
from nemesis.partition import MODE_OF_TARGET, PARTITION_MODES, ROLE_SHAPES
from nemesis.registry import FAULTS
from nemesis.targets import PER_TOPIC_PARTITION, ROLE_TARGETS


def plan(faults: tuple[str, ...], targets: str, n_nodes: int, interval: float, time_limit: float,
         seed: int, partitions: int = 1, overlap: bool = False) -> list[Step]:
    """The steps of a run of `time_limit` seconds: one fault at a time, or
    with `overlap` several at once (`plan_overlapping`)."""
    rng = random.Random(seed)
    steps: list[Step] = []
    if not faults:
        return steps
    if overlap:
        return plan_overlapping(faults, targets, n_nodes, interval, time_limit, rng, partitions)
    elapsed = 0.0
    while True:
        # Waits are exponential around the mean, kept within [1 s, 3x the mean].
        wait = min(max(rng.expovariate(1 / interval), 1.0), 3 * interval)
        if elapsed + wait >= time_limit:
            break
        elapsed += wait
        fault = rng.choice(faults)
        mode, picks, *settings = FAULTS[fault].draw(targets, n_nodes, rng)
        # Which topic partition's leader or replicas, when those are the targets.
        extra = {"partition": rng.randrange(partitions)} if targets in PER_TOPIC_PARTITION else {}
        extra.update(*settings)  # a fault's own settings, when its draw gives them (a lossy link's loss)
        steps.append(Step(wait, "start", fault, mode, picks, extra))
        wait = min(max(rng.expovariate(1 / interval), 1.0), 3 * interval)
        elapsed += wait
        steps.append(Step(wait, "stop", fault))
        if elapsed >= time_limit:
            break
    return steps


def families(faults: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The enabled faults by family, in `faults`' order: a fault's group (the
    disk faults share the faultfs of a node: one mode at a time) or its name."""
    out: dict[str, list[str]] = {}
    for name in faults:
        out.setdefault(FAULTS[name].group or name, []).append(name)
    return {k: tuple(v) for k, v in out.items()}


def plan_overlapping(faults: tuple[str, ...], targets: str, n_nodes: int, interval: float, time_limit: float,
                     rng: random.Random, partitions: int = 1) -> list[Step]:
    """Periods of about `interval` seconds until `time_limit`; in each, every
    family in or out with probability 1/2, its fault and targets drawn, its
    start at a random time in the period's first half and its stop in the
    second half of what is left of the period after the start. Steps are
    ordered by their time; at equal times a stop comes first."""
    timed: list[tuple[float, int, Step]] = []  # (when, 0 stop / 1 start, step with delay 0)
    by_family = families(faults)
    elapsed = 0.0
    while elapsed + 1.0 < time_limit:
        # A period as long as the one-at-a-time waits: exponential around the mean, kept within
        # [half the mean (at least 2 s), 3x the mean]: long enough for staggered faults to take effect.
        floor = max(2.0, interval / 2)
        length = min(max(rng.expovariate(1 / interval), floor), max(3 * interval, floor))
        end = min(elapsed + length, time_limit)
        for family in by_family.values():
            if rng.random() >= 0.5:
                continue
            fault = rng.choice(family)
            mode, picks, *settings = FAULTS[fault].draw(targets, n_nodes, rng)
            extra = {"partition": rng.randrange(partitions)} if targets in PER_TOPIC_PARTITION else {}
            extra.update(*settings)
            begin = elapsed + rng.uniform(0.0, 0.5) * (end - elapsed)
            stop = begin + rng.uniform(0.5, 1.0) * (end - begin)
            timed.append((round(begin, 3), 1, Step(0.0, "start", fault, mode, picks, extra)))
            timed.append((round(stop, 3), 0, Step(0.0, "stop", fault)))
        elapsed = end
    timed.sort(key=lambda x: (x[0], x[1]))
    steps, last = [], 0.0
    for when, _, step in timed:
        steps.append(dataclasses.replace(step, delay=round(when - last, 3)))
        last = when
    return steps


# -- an explicit schedule: the steps as run.json writes them, and back

# Modes whose nodes are looked up when the step runs (picks go unused): a
# replay of such a step hits the leader or controller of that moment, which
# may be another node than in the first run: the replay keeps the intent.
ROLE_MODES = ROLE_TARGETS + ROLE_SHAPES  # nemesis.targets and nemesis.partition list them
STEP_KEYS = ("delay", "action", "fault", "mode", "picks")
EXTRA_KEYS = ("partition",) + link.SETTINGS
AWAIT_KEYS = ("delay", "action", "until", "partition", "timeout")  # an await step's
ACTIONS = ("start", "stop", "await")


def to_records(steps: list[Step]) -> list[dict]:
    """The steps as run.json's "schedule" holds them (and a spec's `schedule` setting takes them)."""
    return [{"delay": round(x.delay, 3), "action": "await", "until": x.until,
             "partition": x.extra.get("partition", 0), "timeout": x.timeout} if x.action == "await" else
            {"delay": round(x.delay, 3), "action": x.action, "fault": x.fault, "mode": x.mode,
             "picks": list(x.picks), **x.extra} for x in steps]


def modes_of(fault: str) -> tuple[str, ...]:
    """The modes a fault's steps may carry: what its draw can give."""
    if fault == "partition":
        from_targets = tuple(dict.fromkeys(MODE_OF_TARGET.values()))
        return PARTITION_MODES + tuple(m for m in from_targets if m not in PARTITION_MODES)
    return FAULTS[fault].targets


def from_records(records: object, n_nodes: int, partitions: int) -> list[Step]:
    """An explicit schedule -> its steps; a UserError of one line naming the
    step for anything that could not run on `n_nodes` nodes and `partitions`
    topic partitions (steps are numbered from 1). Faults may overlap, never
    two of one name: a start of a fault in force, or a stop of one that is
    not, is an error."""
    if not isinstance(records, (list, tuple)):
        raise UserError("schedule: expected a list of steps (in a file, [[schedule]] tables)")
    steps: list[Step] = []
    active: list[str] = []  # the faults in force, in the order they started
    for i, r in enumerate(records, 1):
        where = f"schedule step {i}"
        if not isinstance(r, dict):
            raise UserError(f"{where}: expected a table of {', '.join(STEP_KEYS)}")
        delay, action, fault = r.get("delay"), r.get("action"), r.get("fault")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 7 * 24 * 3600:
            raise UserError(f"{where}: delay {delay!r}: expected seconds, 0 or more")
        if action not in ACTIONS:
            raise UserError(f"{where}: action {action!r}: expected start, stop or await")
        if action == "await":
            steps.append(_await_step(r, where, float(delay), partitions))
            continue
        unknown = [k for k in r if k not in STEP_KEYS + EXTRA_KEYS]
        if unknown:
            raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(STEP_KEYS + EXTRA_KEYS)})")
        if fault not in FAULTS:
            raise UserError(f"{where}: fault {fault!r}: expected one of {', '.join(FAULTS)}")
        in_force = f"{', '.join(active)} in force" if active else "no fault in force"
        if action == "stop":
            if fault not in active:
                raise UserError(f"{where}: stops {fault}, which is not in force ({in_force})")
            active.remove(fault)
            steps.append(Step(float(delay), "stop", fault))
            continue
        if fault in active:
            raise UserError(f"{where}: starts {fault}, which is already in force (stop it first)")
        mode, picks = r.get("mode", ""), r.get("picks", [])
        if mode not in modes_of(fault):
            raise UserError(f"{where}: mode {mode!r}: {fault} takes {', '.join(modes_of(fault))}")
        if (not isinstance(picks, (list, tuple)) or not all(isinstance(p, int) and not isinstance(p, bool)
                                                             for p in picks)):
            raise UserError(f"{where}: picks {picks!r}: expected a list of node indexes")
        if any(not 0 <= p < n_nodes for p in picks) or len(set(picks)) != len(picks):
            raise UserError(f"{where}: picks {list(picks)}: expected distinct node indexes 0 to {n_nodes - 1} "
                            f"(--nodes {n_nodes})")
        if mode not in ROLE_MODES:
            if fault == "partition" and sorted(picks) != list(range(n_nodes)):
                raise UserError(f"{where}: picks {list(picks)}: a {mode} partition takes an order of all "
                                f"{n_nodes} nodes (0 to {n_nodes - 1})")
            if not picks:
                raise UserError(f"{where}: picks []: a {mode} {fault} needs the nodes it hits")
        extra = {}
        if "partition" in r:
            extra["partition"] = _topic_partition(r["partition"], where, partitions)
        for key in link.SETTINGS:
            if key in r:
                extra[key] = link.check_setting(key, r[key], where, fault)
        steps.append(Step(float(delay), "start", fault, mode, tuple(picks), extra))
        active.append(fault)
    return steps


def _topic_partition(p: object, where: str, partitions: int) -> int:
    if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < partitions:
        raise UserError(f"{where}: partition {p!r}: expected a topic partition 0 to {partitions - 1} "
                        f"(--partitions {partitions})")
    return p


def _await_step(r: dict, where: str, delay: float, partitions: int) -> Step:
    """An await step: `until` a condition (nemesis.conditions) on topic partition
    `partition` (default 0), for at most `timeout` seconds (default 30)."""
    unknown = [k for k in r if k not in AWAIT_KEYS]
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r} of an await (known: {', '.join(AWAIT_KEYS)})")
    until = r.get("until")
    if until not in CONDITIONS:
        raise UserError(f"{where}: until {until!r}: expected one of {', '.join(CONDITIONS)}")
    timeout = r.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 24 * 3600:
        raise UserError(f"{where}: timeout {timeout!r}: expected seconds, more than 0")
    partition = _topic_partition(r.get("partition", 0), where, partitions)
    return Step(delay, "await", "", extra={"partition": partition}, until=until, timeout=float(timeout))
