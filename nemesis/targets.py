"""Which nodes a fault hits: the vocabulary of `--nemesis-targets`, the
schedule's draw of nodes, and the look-ups of targets that depend on the
cluster's state when the step runs (a partition's leader, followers or
out-of-sync replicas, the controller, the KRaft quorum, the ZooKeeper nodes).

- random: one to a minority of the nodes, as many as the seed draws;
- one, minority, majority, all: that many nodes, drawn by the seed;
- leaders, replicas: the leader, or every replica, of a topic partition the
  seed draws, as the system names them when the fault starts;
- followers: the replicas of that partition other than its leader when the
  fault starts;
- out-of-sync: the replicas of that partition not in its ISR when the fault
  starts (the system's own metadata: ZooKeeper, or KRaft's through a
  metadata request); when every replica is in sync there is nothing to hit:
  the fault is not applied, its start is an `info` event whose error says
  so (naming the partition and its ISR), and the run goes on;
- controller: the controller when the fault starts;
- group-coordinator: the node coordinating the run's first consumer group
  (its `[[groups]]`, else the consumers' own group in subscribe mode) when
  the fault starts, as the brokers answer DescribeGroups;
- group-follower: one follower in the ISR of the `__consumer_offsets`
  partition holding that group's commits (Kafka only: its leader is the
  coordinator, and the coordinator's commits wait for these followers until
  they leave the ISR), the step's first pick choosing which, when the fault
  starts (a metadata request);
- txn-coordinator: the node coordinating the transactions of the run's
  first transactional producer (`[transactions]`) when the fault starts, as
  the brokers answer DescribeTransactions;
- kraft-controllers: the nodes of the KRaft controller quorum (Kafka with
  `--kafka-mode kraft` only; any other system is refused before the run);
- zookeeper: the nodes the run's ZooKeeper ensemble runs on (the first
  `--zk-nodes` nodes, beside their brokers: the same network namespace or
  container). A partition cuts the brokers off from ZooKeeper's client port
  (ZooKeeper's own quorum and the control node still reach it); kill and
  pause hit the ZooKeeper process, not the broker. Refused for Kafka in
  KRaft mode, which does not use ZooKeeper;
- clients: partition only: the control node (where the producers,
  consumers and the nemesis run) cut off from the broker port of the leader
  of the drawn partition, while the brokers still reach it and ZooKeeper:
  the zombie leader as the clients see it;
- consumers, producers: kill, pause and partition: a consumer group
  member, or a producer, running as a process of its own, drawn by the seed
  (nemesis/clients.py), not a node (a partition cuts that client off the
  network); clients: with kill and pause, either.

How a step chose its nodes goes into the history's event value
(`leader_of`, `replicas_of`, `followers_of`, `out_of_sync_of` with the ISR
seen, `controller`, `coordinator_of`, `group_follower_of` with the
`offsets_partition` and its `leader`, `txn_coordinator_of`,
`kraft_controllers`, `zookeeper`, `clients_of`), and
into words in the report (nemesis.fault.how_words).
"""

from __future__ import annotations

import random

from infra.system import ControllerQuorum, GroupCoordinators, GroupOffsets, PartitionStates, Primaries, TxnCoordinators
from infra.zookeeper import ZooKeeper
from nemesis.fault import Context, FaultError, Step, natural, node_words

TARGETS = ("random", "one", "minority", "majority", "leaders", "replicas", "followers", "out-of-sync",
           "controller", "group-coordinator", "group-follower", "txn-coordinator", "kraft-controllers", "zookeeper",
           "clients", "consumers", "producers", "all")
# Targets that name a topic partition, drawn by the schedule.
PER_TOPIC_PARTITION = ("leaders", "replicas", "followers", "out-of-sync", "clients")
# Targets looked up when the step runs (the seed's picks go unused).
ROLE_TARGETS = ("leaders", "replicas", "followers", "out-of-sync", "controller", "group-coordinator", "group-follower",
                "txn-coordinator", "kraft-controllers", "zookeeper", "clients")
# Every fault on a node list but partition (clients is the partition's alone, consumers
# the process faults' alone).
NODE_TARGETS = tuple(t for t in TARGETS if t not in ("clients", "consumers", "producers"))
# A partition's: every target (consumers and producers: one client cut off the network).
PARTITION_TARGETS = TARGETS
# Targets hitting processes: the ZooKeeper nodes are hit in their ZooKeeper process,
# consumers in a group member's own process.
PROCESS_TARGETS = NODE_TARGETS + ("clients", "consumers", "producers")
# Targets for faults through the brokers' faultfs (disk, power-loss): ZooKeeper's data is not on it.
DISK_TARGETS = tuple(t for t in NODE_TARGETS if t != "zookeeper")


def count_for(target: str, n: int, rng: random.Random) -> int:
    """How many nodes a target kind hits, of n."""
    minority = max(1, (n - 1) // 2)
    return {"one": 1, "minority": minority, "majority": n // 2 + 1, "all": n}.get(
        target, rng.randint(1, minority))


def draw_nodes(target: str, n_nodes: int, rng: random.Random) -> tuple[str, tuple[int, ...]]:
    """The schedule's draw for a fault on nodes: (mode, sorted picks).

    For the targets looked up when the step runs (ROLE_TARGETS) the picks go
    unused, but are drawn all the same: the draws of a seed stay the same
    whatever the targets.
    """
    k = count_for(target, n_nodes, rng)
    return target, tuple(sorted(rng.sample(range(n_nodes), k)))


def refusal(target: str, system: str, options: dict) -> str | None:
    """Why a system cannot take a target, in one line, or None: checked by the
    spec before anything runs (a target, or a schedule step's mode)."""
    kraft = system == "kafka" and options.get("kafka_mode") == "kraft"
    if target == "kraft-controllers" and not kraft:
        where = "Kafka in ZooKeeper mode" if system == "kafka" else f"the {system} system"
        return f"kraft-controllers: {where} has no KRaft controller quorum (use --system kafka --kafka-mode kraft)"
    if target == "zookeeper" and kraft:
        return "zookeeper: Kafka in KRaft mode does not use ZooKeeper"
    if target == "group-follower" and system != "kafka":
        return (f"group-follower: the {system} system keeps no replicated partition of a group's commits "
                "(Kafka's __consumer_offsets); use --system kafka")
    return None


def resolve(ctx: Context, step: Step) -> tuple[list[str], dict]:
    """The nodes a step's fault hits, and how they were chosen (for the history)."""
    partition = step.extra.get("partition", 0)
    if step.mode == "leaders":
        return [leader_of(ctx, partition)], {"leader_of": partition}
    if step.mode == "replicas":
        return replicas_of(ctx, partition), {"replicas_of": partition}
    if step.mode == "followers":
        return followers_of(ctx, partition)
    if step.mode == "out-of-sync":
        return out_of_sync_of(ctx, partition)
    if step.mode == "controller":
        return [controller(ctx)], {"controller": True}
    if step.mode == "group-coordinator":
        group = watched_group(ctx)
        return [group_coordinator(ctx, group)], {"coordinator_of": group}
    if step.mode == "group-follower":
        return group_follower(ctx, watched_group(ctx), step.picks[0] if step.picks else 0)
    if step.mode == "txn-coordinator":
        transactional_id = watched_transactional_id(ctx)
        return [txn_coordinator(ctx, transactional_id)], {"txn_coordinator_of": transactional_id}
    if step.mode == "kraft-controllers":
        return kraft_controllers(ctx), {"kraft_controllers": True}
    if step.mode == "zookeeper":
        return zookeeper_nodes(ctx), {"zookeeper": True}
    if step.mode in ("clients", "consumers", "producers"):
        raise FaultError(f"{step.mode}: only a partition (clients) and kill and pause hit the clients")
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


def _state_of(ctx: Context, partition: int) -> tuple[str | None, list[str]]:
    """(leader, ISR) of a partition, from the system's own metadata, at this moment."""
    if not isinstance(ctx.system, PartitionStates):
        raise FaultError(f"the {ctx.system.name} system cannot name a partition's leader and ISR")
    try:
        states = ctx.system.partition_states(ctx.topic)
    except Exception as e:  # the metadata store did not answer: the fault cannot know whom to hit
        raise FaultError(f"no state known for partition {partition} of topic {ctx.topic}: {e}") from None
    if partition not in states:
        raise FaultError(f"no state known for partition {partition} of topic {ctx.topic}")
    leader, _epoch, isr = states[partition]
    return leader, sorted(isr or [])


def followers_of(ctx: Context, partition: int) -> tuple[list[str], dict]:
    """The replicas of a partition other than its leader now, and how they were chosen."""
    replicas = replicas_of(ctx, partition)
    leader, _isr = _state_of(ctx, partition)
    if leader is None:  # no leader: every replica follows no one; say so rather than guess
        raise FaultError(f"followers: partition {partition} of topic {ctx.topic} has no leader now")
    followers = [r for r in replicas if r != leader]
    if not followers:
        raise FaultError(f"followers: partition {partition} has no replica besides its leader {leader}")
    return followers, {"followers_of": partition, "leader": leader}


def out_of_sync_of(ctx: Context, partition: int) -> tuple[list[str], dict]:
    """The replicas of a partition not in its ISR now; a FaultError (the fault
    is not applied, the run goes on) when every replica is in sync."""
    replicas = replicas_of(ctx, partition)
    _leader, isr = _state_of(ctx, partition)
    lagging = [r for r in replicas if r not in isr]
    if not lagging:
        raise FaultError(f"out-of-sync: every replica of partition {partition} is in its ISR "
                         f"({' '.join(isr)}): nothing to hit, fault not applied")
    return lagging, {"out_of_sync_of": partition, "isr": isr}


def controller(ctx: Context) -> str:
    """The system's controller node."""
    node = ctx.system.controller() if isinstance(ctx.system, Primaries) else None
    if not node:
        raise FaultError("no controller known")
    return node


def watched_group(ctx: Context) -> str:
    """The consumer group a group-coordinator fault aims at: the run's first [[groups]] table's,
    else the consumers' own group in subscribe mode."""
    config = getattr(ctx.clients, "config", None)
    if config is not None and config.groups:
        return config.groups[0].name
    if config is not None and config.consumer_mode == "subscribe":
        return config.group_id
    raise FaultError("group-coordinator: the run has no consumer group ([[groups]] or --consumer-mode subscribe)")


def group_coordinator(ctx: Context, group: str) -> str:
    """The node coordinating `group` now."""
    node = ctx.system.group_coordinator(group) if isinstance(ctx.system, GroupCoordinators) else None
    if not node:
        raise FaultError(f"group-coordinator: no coordinator known for group {group}")
    return node


def group_follower(ctx: Context, group: str, pick: int) -> tuple[list[str], dict]:
    """One in-sync follower of the `__consumer_offsets` partition holding
    `group`'s commits now (the `pick`-th of them, sorted, modulo their
    number), and how it was chosen."""
    if not isinstance(ctx.system, GroupOffsets):
        raise FaultError(f"group-follower: the {ctx.system.name} system keeps no replicated partition "
                         "of a group's commits")
    try:
        partition, leader, replicas, isr = ctx.system.group_offsets_state(group)
    except Exception as e:  # no broker answered: the fault cannot know whom to hit
        raise FaultError(f"group-follower: no state known for the commits of group {group}: {e}") from None
    followers = sorted((r for r in replicas if r != leader and r in isr), key=natural)
    if leader is None or not followers:
        raise FaultError(f"group-follower: partition {partition} of the commits of group {group} has "
                         f"{'no leader' if leader is None else 'no follower in its ISR'} now "
                         f"(replicas {node_words(replicas)}, ISR {node_words(isr)}): fault not applied")
    return [followers[pick % len(followers)]], {"group_follower_of": group, "offsets_partition": partition,
                                                "leader": leader}


def watched_transactional_id(ctx: Context) -> str:
    """The transactional.id a txn-coordinator fault aims at: the run's first
    transactional producer's (else its first transformer's)."""
    config = getattr(ctx.clients, "config", None)
    txn = getattr(config, "transactions", None)
    if txn is None:
        raise FaultError("txn-coordinator: the run has no transactions ([transactions])")
    return config.transactional_id(0, transformer=not txn.producers)


def txn_coordinator(ctx: Context, transactional_id: str) -> str:
    """The node coordinating the transactions of `transactional_id` now."""
    node = ctx.system.txn_coordinator(transactional_id) if isinstance(ctx.system, TxnCoordinators) else None
    if not node:
        raise FaultError(f"txn-coordinator: no coordinator known for transactional id {transactional_id}")
    return node


def kraft_controllers(ctx: Context) -> list[str]:
    """The nodes of the system's KRaft controller quorum, sorted."""
    nodes = ctx.system.controller_quorum() if isinstance(ctx.system, ControllerQuorum) else []
    if not nodes:
        raise FaultError(f"kraft-controllers: the {ctx.system.name} system runs no KRaft controller quorum")
    return sorted(nodes)


def zookeeper(ctx: Context) -> ZooKeeper:
    """The run's ZooKeeper ensemble, as its setup recorded it in the cluster's state."""
    zk = ZooKeeper.from_cluster(ctx.cluster)
    if zk is None or not zk.nodes():
        raise FaultError("zookeeper: no ZooKeeper ensemble runs on this cluster")
    return zk


def zookeeper_nodes(ctx: Context) -> list[str]:
    """The nodes the ZooKeeper ensemble runs on, sorted."""
    return sorted(n.name for n in zookeeper(ctx).nodes())
