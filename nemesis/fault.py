"""What a fault is: one `Fault` record, the `Context` it acts on, the `Step`
of the schedule that starts it.

Each family of faults has its file (nemesis/partition.py, process.py,
disk.py, power.py) holding its records; nemesis/registry.py lists them. A
record says everything the harness asks of a fault: its name in `--nemesis`,
the history's `f` of its start and stop, the functions that apply and undo
it (each verifying itself through a probe), the targets it accepts, how the
schedule draws its mode and nodes, whether it needs the faultfs, how `heal`
sweeps it away whatever the schedule did, and its colour and label in the
report's plots.

The seams, for every record:

- `start(ctx, step) -> (value, state)`: applies the fault; `value` is what
  the history records (the exact targets and, under `verified`, the probe's
  verdict `{"ok": bool, ...}`), `state` what `stop` needs;
- `stop(ctx, state) -> value`: undoes it and verifies that too;
- `draw(targets, n_nodes, rng) -> (mode, picks)`: the schedule's random
  choices for one start (picks index the sorted node list); a draw may add
  a third item, the fault's own settings (`{"loss": 0.3}`), which the step
  keeps in its `extra`;
- `sweep(ctx) -> dict`: undoes every trace of the fault's family on every
  node (what it did, for the `heal` event), whether a fault is active or not;
- `describe(value, stopping) -> (what, verification)`: an event's value in
  words for the report (`n1 n5 | n2 n3 n4`, `verified: 12 links cut`);
  `describe_nodes` serves faults on a list of nodes.

The system (own broker or Kafka) provides kill/start/pause/resume and, for
probes, `running(node)` and `process_state(node)`; for targets, optionally
`leaders(topic) -> {partition: node}`, `replicas(topic) -> {partition: [node]}`
and `controller() -> node`, `partition_states(topic)` (followers, out-of-sync)
and `controller_quorum()` (kraft-controllers); for the faultfs, `data_dir(node)`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable

from core.errors import UserError
from infra.nodes import Cluster

# Stages of a sweep, run in this order: what a later stage restores needs the
# earlier ones undone (a broker restarted on a stalled disk would hang).
NETWORK, STORAGE, PROCESSES = 1, 2, 3


@dataclass
class Context:
    """What faults act on: the cluster, the system on it, the workload's topic."""

    cluster: Cluster
    system: object
    topic: str
    names: list[str] = field(default_factory=list)  # the nodes faults may hit, sorted
    # The workload's clients, for the faults that hit them (nemesis/clients.py):
    # anything with `client_processes()`; None when no client can be hit.
    clients: object = None

    def __post_init__(self) -> None:
        if not self.names:
            self.names = sorted(self.cluster.names)


@dataclass(frozen=True)
class Step:
    """Wait `delay` seconds, then start a fault, stop the named one, or await
    a condition on the cluster's state (nemesis.conditions)."""

    delay: float
    action: str  # "start", "stop" or "await"
    fault: str  # a registered fault's name: partition, kill, ... ("" for an await)
    mode: str = ""  # partition mode, or how targets are picked
    picks: tuple[int, ...] = ()  # indexes into the sorted node list
    extra: dict = field(default_factory=dict)  # e.g. which topic partition's leader (an await's partition)
    until: str = ""  # an await's condition (nemesis.conditions.CONDITIONS)
    timeout: float = 0.0  # an await's most seconds


class FaultError(UserError):
    """A fault that could not be applied or undone."""


Start = Callable[[Context, Step], tuple[dict, dict]]
Stop = Callable[[Context, dict], dict]
Draw = Callable[[str, int, random.Random], tuple]  # (mode, picks) or (mode, picks, settings)
Sweep = Callable[[Context], dict]
Describe = Callable[[dict, bool], tuple[str, str]]


def natural(name: str) -> list:
    """Sort key that puts n2 before n10."""
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", str(name))]


def node_words(nodes) -> str:
    """Nodes as a list to read: `n1 n3 n4`."""
    if isinstance(nodes, str):
        return nodes
    return " ".join(str(n) for n in sorted(nodes or [], key=natural))


def how_words(value: dict) -> str:
    """How a step chose its nodes, when not by the seed alone (nemesis.targets.resolve)."""
    if "leader_of" in value:
        return f"the leader of partition {value['leader_of']}"
    if "replicas_of" in value:
        return f"the replicas of partition {value['replicas_of']}"
    if "followers_of" in value:
        led = f", led by {value['leader']}" if value.get("leader") else ""
        return f"the followers of partition {value['followers_of']}{led}"
    if "out_of_sync_of" in value:
        isr = value.get("isr")
        seen = f", ISR {node_words(isr)}" if isinstance(isr, list) else ""
        return f"the replicas of partition {value['out_of_sync_of']} out of its ISR{seen}"
    if "clients_of" in value:
        return f"the leader of partition {value['clients_of']}"
    if value.get("controller") is True:
        return "the controller"
    if "coordinator_of" in value:
        return f"the coordinator of group {value['coordinator_of']}"
    if "group_follower_of" in value:
        led = f", led by the coordinator {value['leader']}" if value.get("leader") else ""
        return (f"a follower of __consumer_offsets partition {value.get('offsets_partition')} (the commits of group "
                f"{value['group_follower_of']}{led})")
    if "txn_coordinator_of" in value:
        return f"the transaction coordinator of {value['txn_coordinator_of']}"
    if value.get("kraft_controllers") is True:
        return "the KRaft controller quorum"
    if value.get("zookeeper") is True:
        return "the ZooKeeper nodes"
    return ""


def verdict(value: dict, words: str) -> str:
    """`verified: words`, `NOT verified: words`, or "" when the event recorded no probe."""
    v = value.get("verified")
    if not isinstance(v, dict):
        return ""
    return ("verified: " if v.get("ok") else "NOT verified: ") + words


def per_node(outcomes, yes: str, no: str) -> str:
    """A probe's node -> bool (or node -> words) as `yes on n1 n2; no on n3`."""
    if not isinstance(outcomes, dict) or not outcomes:
        return ""
    by_words: dict[str, list] = {}
    for node, outcome in outcomes.items():
        words = (yes if outcome else no) if isinstance(outcome, bool) else str(outcome)
        by_words.setdefault(words, []).append(node)
    return "; ".join(f"{w} on {node_words(ns)}" for w, ns in by_words.items())


def describe_nodes(value: dict, stopping: bool) -> tuple[str, str]:
    """A fault on a list of nodes: the nodes (and how they were chosen), and
    its probes' outcomes per node, whatever the probe's key."""
    if not isinstance(value, dict):
        return "", ""
    nodes = value.get("nodes")
    if nodes is None:
        return (f"targets: {value['mode']}" if value.get("mode") else ""), ""
    how = how_words(value)
    what = node_words(nodes) + (f" ({how})" if how else "")
    v = value.get("verified")
    probes = [per_node(x, "yes", "no") for k, x in (v.items() if isinstance(v, dict) else []) if k != "ok"]
    return what, verdict(value, "; ".join(p for p in probes if p))


@dataclass(frozen=True)
class Fault:
    """One fault, all the harness knows of it."""

    name: str  # in --nemesis, the spec and the schedule: "partition"
    start_action: str  # the history's `f` when it begins: "start-partition"
    start: Start
    stop_action: str  # the history's `f` when it ends: "stop-partition"
    stop: Stop
    verified_by: str  # how its probes show it took effect and was undone, in words
    targets: tuple[str, ...]  # the --nemesis-targets it accepts (nemesis.targets.TARGETS)
    draw: Draw  # the schedule's choice of mode and nodes (nemesis.targets.draw_nodes for most)
    sweep: Sweep  # undoes it on every node, whatever the schedule did (`heal`)
    sweep_stage: int  # NETWORK, STORAGE or PROCESSES: when its sweep runs
    colour: str  # its shade in the report's plots
    label: str  # its name in the plots' legends
    needs_faultfs: bool = False  # the run mounts the faultfs under the data dirs
    group: str = ""  # a --nemesis name that means every fault of the group ("disk")
    describe: Describe = describe_nodes  # an event's value in words, for the report


def process_state(ctx: Context, name: str) -> str | None:
    """The system's process state on a node: None when gone, "T" when stopped."""
    return ctx.system.process_state(ctx.cluster.node(name))
