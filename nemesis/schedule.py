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

from nemesis.fault import Step
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
        mode, picks = FAULTS[fault].draw(targets, n_nodes, rng)
        # Which topic partition's leader or replicas, when those are the targets.
        extra = {"partition": rng.randrange(partitions)} if targets in PER_TOPIC_PARTITION else {}
        steps.append(Step(wait, "start", fault, mode, picks, extra))
        wait = min(max(rng.expovariate(1 / interval), 1.0), 3 * interval)
        elapsed += wait
        steps.append(Step(wait, "stop", fault))
        if elapsed >= time_limit:
            break
    return steps
