"""Which nodes a fault hits: the vocabulary of `--nemesis-targets`, the
schedule's draw of nodes, and the look-ups of targets that depend on the
cluster's state when the step runs (a partition's leader or replicas, the
controller).

- random: one to a minority of the nodes, as many as the seed draws;
- one, minority, majority, all: that many nodes, drawn by the seed;
- leaders, replicas: the leader, or every replica, of a topic partition the
  seed draws, as the system names them when the fault starts;
- controller: the controller when the fault starts.
"""

from __future__ import annotations

import random

from infra.system import Primaries
from nemesis.fault import Context, FaultError, Step

TARGETS = ("random", "one", "minority", "majority", "leaders", "replicas", "controller", "all")
PER_TOPIC_PARTITION = ("leaders", "replicas")  # targets that name a topic partition, drawn by the schedule


def count_for(target: str, n: int, rng: random.Random) -> int:
    """How many nodes a target kind hits, of n."""
    minority = max(1, (n - 1) // 2)
    return {"one": 1, "minority": minority, "majority": n // 2 + 1, "all": n}.get(
        target, rng.randint(1, minority))


def draw_nodes(target: str, n_nodes: int, rng: random.Random) -> tuple[str, tuple[int, ...]]:
    """The schedule's draw for a fault on nodes: (mode, sorted picks).

    For the targets looked up when the step runs (leaders, replicas,
    controller) the picks go unused, but are drawn all the same: the draws
    of a seed stay the same whatever the targets.
    """
    k = count_for(target, n_nodes, rng)
    return target, tuple(sorted(rng.sample(range(n_nodes), k)))


def resolve(ctx: Context, step: Step) -> tuple[list[str], dict]:
    """The nodes a step's fault hits, and how they were chosen (for the history)."""
    if step.mode == "leaders":
        leader = leader_of(ctx, step.extra.get("partition", 0))
        return [leader], {"leader_of": step.extra.get("partition", 0)}
    if step.mode == "replicas":
        partition = step.extra.get("partition", 0)
        return replicas_of(ctx, partition), {"replicas_of": partition}
    if step.mode == "controller":
        return [controller(ctx)], {"controller": True}
    return [ctx.names[i] for i in step.picks], {}


def leader_of(ctx: Context, partition: int) -> str:
    """The node leading a partition of the context's topic (its first partition's leader if unknown)."""
    if not isinstance(ctx.system, Primaries):
        raise FaultError(f"the {ctx.system.name} system cannot name leaders")
    by_partition = ctx.system.leaders(ctx.topic)
    if not by_partition:
        raise FaultError(f"no leader known for topic {ctx.topic}")
    return by_partition.get(partition) or by_partition[sorted(by_partition)[0]]


def replicas_of(ctx: Context, partition: int) -> list[str]:
    """The nodes holding a replica of a partition of the context's topic, sorted."""
    if not isinstance(ctx.system, Primaries):
        raise FaultError(f"the {ctx.system.name} system cannot name replicas")
    by_partition = ctx.system.replicas(ctx.topic)
    if partition not in by_partition:
        raise FaultError(f"no replicas known for partition {partition} of topic {ctx.topic}")
    return sorted(by_partition[partition])


def controller(ctx: Context) -> str:
    """The system's controller node."""
    node = ctx.system.controller() if isinstance(ctx.system, Primaries) else None
    if not node:
        raise FaultError("no controller known")
    return node
