"""A fault schedule drawn from a seed: the same seed, the same faults.

The schedule is a list of steps planned before the run: wait, start a fault,
wait, stop it, and so on, one fault at a time. Every random choice (the wait,
the fault, its mode, which nodes by their place in the sorted node list) is
made here from `random.Random(seed)`, so two runs with one seed inject the
same sequence; each fault's record draws its own mode and nodes
(`Fault.draw`). Targets that depend on the cluster's state at that moment
(the leader of a partition, the controller) are resolved when the step runs,
and the events record whom they hit.
"""

from __future__ import annotations

import random

from core.errors import UserError
from nemesis import link
from nemesis.fault import Step
from nemesis.partition import MODE_OF_TARGET, PARTITION_MODES
from nemesis.registry import FAULTS
from nemesis.targets import PER_TOPIC_PARTITION


def plan(faults: tuple[str, ...], targets: str, n_nodes: int, interval: float, time_limit: float,
         seed: int, partitions: int = 1) -> list[Step]:
    """The steps of a run of `time_limit` seconds."""
    rng = random.Random(seed)
    steps: list[Step] = []
    if not faults:
        return steps
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


# -- an explicit schedule: the steps as run.json writes them, and back

# Modes whose nodes are looked up when the step runs (picks go unused): a
# replay of such a step hits the leader or controller of that moment, which
# may be another node than in the first run: the replay keeps the intent.
ROLE_MODES = ("leaders", "replicas", "controller", "isolate-leader", "isolate-replicas", "isolate-controller")
STEP_KEYS = ("delay", "action", "fault", "mode", "picks")
EXTRA_KEYS = ("partition",) + link.SETTINGS


def to_records(steps: list[Step]) -> list[dict]:
    """The steps as run.json's "schedule" holds them (and a spec's `schedule` setting takes them)."""
    return [{"delay": round(x.delay, 3), "action": x.action, "fault": x.fault, "mode": x.mode,
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
    topic partitions (steps are numbered from 1)."""
    if not isinstance(records, (list, tuple)):
        raise UserError("schedule: expected a list of steps (in a file, [[schedule]] tables)")
    steps: list[Step] = []
    active: str | None = None
    for i, r in enumerate(records, 1):
        where = f"schedule step {i}"
        if not isinstance(r, dict):
            raise UserError(f"{where}: expected a table of {', '.join(STEP_KEYS)}")
        unknown = [k for k in r if k not in STEP_KEYS + EXTRA_KEYS]
        if unknown:
            raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(STEP_KEYS + EXTRA_KEYS)})")
        delay, action, fault = r.get("delay"), r.get("action"), r.get("fault")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 7 * 24 * 3600:
            raise UserError(f"{where}: delay {delay!r}: expected seconds, 0 or more")
        if action not in ("start", "stop"):
            raise UserError(f"{where}: action {action!r}: expected start or stop")
        if fault not in FAULTS:
            raise UserError(f"{where}: fault {fault!r}: expected one of {', '.join(FAULTS)}")
        if action == "stop":
            if active != fault:
                raise UserError(f"{where}: stops {fault} but "
                                + (f"{active} is in force" if active else "no fault is in force"))
            active = None
            steps.append(Step(float(delay), "stop", fault))
            continue
        if active is not None:
            raise UserError(f"{where}: starts {fault} while {active} is in force (one fault at a time)")
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
            p = r["partition"]
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < partitions:
                raise UserError(f"{where}: partition {p!r}: expected a topic partition 0 to {partitions - 1} "
                                f"(--partitions {partitions})")
            extra["partition"] = p
        for key in link.SETTINGS:
            if key in r:
                extra[key] = link.check_setting(key, r[key], where, fault)
        steps.append(Step(float(delay), "start", fault, mode, tuple(picks), extra))
        active = fault
    return steps
