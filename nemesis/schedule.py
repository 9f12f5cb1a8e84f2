"""A fault schedule drawn from a seed: the same seed, the same faults.

The schedule is a list of steps planned before the run: wait, start a fault,
wait, stop it, and so on, one fault at a time. Every random choice (the wait,
the fault, its mode, which nodes by their place in the sorted node list) is
made here from `random.Random(seed)`, so two runs with one seed inject the
same sequence. Targets that depend on the cluster's state at that moment
(the leader of a partition, the controller) are resolved when the step runs,
and the events record whom they hit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from infra.net import grudge_from_components

PARTITION_MODES = ("isolate-one", "halves", "majorities-ring", "bridge")


@dataclass(frozen=True)
class Step:
    """Wait `delay` seconds, then start a fault (or stop the current one)."""

    delay: float
    action: str  # "start" or "stop"
    fault: str  # partition, kill, pause
    mode: str = ""  # partition mode, or how targets are picked
    picks: tuple[int, ...] = ()  # indexes into the sorted node list
    extra: dict = field(default_factory=dict)  # e.g. which topic partition's leader


def count_for(target: str, n: int, rng: random.Random) -> int:
    """How many nodes a target kind hits, of n."""
    minority = max(1, (n - 1) // 2)
    return {"one": 1, "minority": minority, "majority": n // 2 + 1, "all": n}.get(
        target, rng.randint(1, minority))


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
        if fault == "partition":
            mode = {"one": "isolate-one", "leaders": "isolate-leader", "replicas": "isolate-replicas",
                    "controller": "isolate-controller",
                    "minority": "isolate-minority", "majority": "isolate-majority", "all": "split-all",
                    }.get(targets) or rng.choice(PARTITION_MODES)
            picks = tuple(rng.sample(range(n_nodes), n_nodes))  # a shuffle, for modes that need one
        else:
            mode = targets
            k = count_for(targets, n_nodes, rng)
            picks = tuple(sorted(rng.sample(range(n_nodes), k)))
        # Which topic partition's leader or replicas, when those are the targets.
        extra = {"partition": rng.randrange(partitions)} if targets in ("leaders", "replicas") else {}
        steps.append(Step(wait, "start", fault, mode, picks, extra))
        wait = min(max(rng.expovariate(1 / interval), 1.0), 3 * interval)
        elapsed += wait
        steps.append(Step(wait, "stop", fault))
        if elapsed >= time_limit:
            break
    return steps


def grudge_for(mode: str, names: list[str], picks: tuple[int, ...]) -> dict[str, list[str]]:
    """The grudge (node -> nodes it must not hear from) of a partition mode.

    `names` is the sorted node list, `picks` a shuffle of its indexes.
    """
    order = [names[i] for i in picks]
    n = len(order)

    def components(*parts):
        return grudge_from_components(list(parts))

    if mode in ("isolate-one",):
        return components(order[:1], order[1:])
    if mode == "isolate-minority":
        k = max(1, (n - 1) // 2)
        return components(order[:k], order[k:])
    if mode == "isolate-majority":
        k = n // 2 + 1
        return components(order[:k], order[k:])
    if mode == "halves":
        return components(order[: n // 2], order[n // 2:])
    if mode == "split-all":
        return components(*[[x] for x in order])
    if mode == "majorities-ring":
        # Each node sees itself and its neighbours on a ring, a majority in all,
        # and no two nodes see the same majority.
        reach = (n // 2 + 1) // 2
        g = {}
        for i, x in enumerate(order):
            seen = {order[(i + d) % n] for d in range(-reach, reach + 1)}
            cut = sorted(y for y in order if y not in seen)
            if cut:
                g[x] = cut
        return g
    if mode == "bridge":
        # Two halves that only one node, the bridge, can talk to both of.
        bridge, rest = order[0], order[1:]
        half = len(rest) // 2
        g = components(rest[:half], rest[half:])
        g.pop(bridge, None)
        return {k: v for k, v in g.items() if v}
    raise ValueError(f"unknown partition mode {mode}")
