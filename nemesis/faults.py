"""Faults on a cluster, each applied, verified by a probe, and undone.

A fault is a pair of functions: `start(ctx, step) -> (value, state)` applies
it and returns what the history records (the exact targets and the probe's
verdict), `stop(ctx, state) -> value` undoes it and verifies that too.

- partition: iptables grudges on the nodes (infra.net); verified when every
  cut pair's TCP probe times out, and after healing when they answer again;
- kill: SIGKILL of the system's process on the target nodes; verified when
  the process is gone; stop restarts it and verifies it runs;
- pause: SIGSTOP; verified when the process is in state T (stopped); stop
  sends SIGCONT and verifies it left that state;
- disk-stall, disk-slow, disk-fail, power-loss: through the faultfs under
  the data dirs (nemesis.disk), merged into FAULTS below.

The system (own broker or Kafka) provides kill/start/pause/resume and, for
probes, `running(node)` and `process_state(node)`; for targets, optionally
`leaders(topic) -> {partition: node}`, `replicas(topic) -> {partition: [node]}`
and `controller() -> node`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from core.errors import UserError
from infra import net
from infra.nodes import Cluster, parallel
from infra.system import Primaries
from nemesis.disk import DISK_FAULTS, heal_disks
from nemesis.schedule import Step, grudge_for

log = logging.getLogger(__name__)
MAX_PROBES = 12  # cut pairs probed per partition (all of them on small clusters)
PROBE_PORT = 22  # sshd answers on every node, whatever the system is doing


@dataclass
class Context:
    cluster: Cluster
    system: object
    topic: str
    names: list[str] = field(default_factory=list)  # the nodes faults may hit, sorted

    def __post_init__(self) -> None:
        if not self.names:
            self.names = sorted(self.cluster.names)


class FaultError(UserError):
    """A fault that could not be applied or undone."""


# --------------------------------------------------------------------------
# Targets


def targets(ctx: Context, step: Step) -> tuple[list[str], dict]:
    """The nodes a kill or pause hits, and how they were chosen."""
    if step.mode == "leaders":
        leader = _leader(ctx, step.extra.get("partition", 0))
        return [leader], {"leader_of": step.extra.get("partition", 0)}
    if step.mode == "replicas":
        partition = step.extra.get("partition", 0)
        return _replicas(ctx, partition), {"replicas_of": partition}
    if step.mode == "controller":
        return [_controller(ctx)], {"controller": True}
    return [ctx.names[i] for i in step.picks], {}


def _leader(ctx: Context, partition: int) -> str:
    if not isinstance(ctx.system, Primaries):
        raise FaultError(f"the {ctx.system.name} system cannot name leaders")
    by_partition = ctx.system.leaders(ctx.topic)
    if not by_partition:
        raise FaultError(f"no leader known for topic {ctx.topic}")
    node = by_partition.get(partition) or by_partition[sorted(by_partition)[0]]
    return node


def _replicas(ctx: Context, partition: int) -> list[str]:
    if not isinstance(ctx.system, Primaries):
        raise FaultError(f"the {ctx.system.name} system cannot name replicas")
    by_partition = ctx.system.replicas(ctx.topic)
    if partition not in by_partition:
        raise FaultError(f"no replicas known for partition {partition} of topic {ctx.topic}")
    return sorted(by_partition[partition])


def _controller(ctx: Context) -> str:
    node = ctx.system.controller() if isinstance(ctx.system, Primaries) else None
    if not node:
        raise FaultError("no controller known")
    return node


# --------------------------------------------------------------------------
# Probes


def probe_cuts(ctx: Context, grudge: dict[str, list[str]], expect_cut: bool) -> dict:
    """Probe (a sample of) the cut pairs; the verdict and what each probe saw."""
    pairs = sorted({(a, b) for a, bs in grudge.items() for b in bs})[:MAX_PROBES]
    nodes = {n.name: n for n in ctx.cluster.nodes}

    def probe(pair):
        a, b = pair
        return net.can_reach(nodes[a], nodes[b], port=PROBE_PORT, timeout=1.5)

    reached = parallel(probe, pairs) if pairs else []
    ok = all((not r) if expect_cut else r for r in reached)
    return {"ok": ok, "probes": {f"{a}->{b}": ("reached" if r else "cut") for (a, b), r in zip(pairs, reached)}}


def _wait_for(check, timeout: float = 10.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _state(ctx: Context, name: str) -> str | None:
    return ctx.system.process_state(ctx.cluster.node(name))


# --------------------------------------------------------------------------
# Faults


def start_partition(ctx: Context, step: Step) -> tuple[dict, dict]:
    mode = step.mode
    if mode == "isolate-leader":
        node = _leader(ctx, step.extra.get("partition", 0))
        grudge = net.isolate(ctx.cluster, [node])
        value = {"mode": mode, "leader_of": step.extra.get("partition", 0), "isolated": node}
    elif mode == "isolate-replicas":
        nodes = _replicas(ctx, step.extra.get("partition", 0))
        grudge = net.isolate(ctx.cluster, nodes)
        value = {"mode": mode, "replicas_of": step.extra.get("partition", 0), "isolated": nodes}
    elif mode == "isolate-controller":
        node = _controller(ctx)
        grudge = net.isolate(ctx.cluster, [node])
        value = {"mode": mode, "isolated": node}
    else:
        grudge = grudge_for(mode, ctx.names, step.picks)
        value = {"mode": mode}
    value["grudge"] = grudge
    net.partition(ctx.cluster, grudge)
    value["verified"] = probe_cuts(ctx, grudge, expect_cut=True)
    return value, {"grudge": grudge}


def stop_partition(ctx: Context, state: dict) -> dict:
    removed = net.heal(ctx.cluster)
    grudge = state.get("grudge", {})
    verified = probe_cuts(ctx, grudge, expect_cut=False)
    return {"healed": {k: v for k, v in removed.items() if v}, "verified": verified}


def start_kill(ctx: Context, step: Step) -> tuple[dict, dict]:
    names, how = targets(ctx, step)
    parallel(lambda n: ctx.system.kill(ctx.cluster.node(n)), names)
    gone = {n: _wait_for(lambda n=n: _state(ctx, n) is None, 5) for n in names}
    value = {"nodes": names, **how, "verified": {"ok": all(gone.values()),
                                                  "process_gone": gone}}
    return value, {"nodes": names}


def stop_kill(ctx: Context, state: dict) -> dict:
    names = state["nodes"]
    parallel(lambda n: ctx.system.start(ctx.cluster.node(n)), names)
    up = {n: _state(ctx, n) not in (None, "T") for n in names}
    return {"nodes": names, "verified": {"ok": all(up.values()), "running": up}}


def start_pause(ctx: Context, step: Step) -> tuple[dict, dict]:
    names, how = targets(ctx, step)
    parallel(lambda n: ctx.system.pause(ctx.cluster.node(n)), names)
    stopped = {n: _wait_for(lambda n=n: _state(ctx, n) == "T", 5) for n in names}
    return {"nodes": names, **how, "verified": {"ok": all(stopped.values()), "stopped": stopped}}, {"nodes": names}


def stop_pause(ctx: Context, state: dict) -> dict:
    names = state["nodes"]
    parallel(lambda n: ctx.system.resume(ctx.cluster.node(n)), names)
    resumed = {n: _wait_for(lambda n=n: _state(ctx, n) not in ("T", None), 5) for n in names}
    return {"nodes": names, "verified": {"ok": all(resumed.values()), "resumed": resumed}}


# fault -> (start action name, start, stop action name, stop)
FAULTS = {
    "partition": ("start-partition", start_partition, "stop-partition", stop_partition),
    "kill": ("kill", start_kill, "start", stop_kill),
    "pause": ("pause", start_pause, "resume", stop_pause),
}
FAULTS.update(DISK_FAULTS)  # disk-stall, disk-slow, disk-fail, power-loss (nemesis.disk)


def heal_everything(ctx: Context) -> dict:
    """Undo every fault there could be, whatever the schedule thinks is active:
    partition rules removed, paused processes resumed, killed ones restarted."""
    done: dict = {}
    try:
        removed = net.heal(ctx.cluster)
        done["rules_removed"] = {k: v for k, v in removed.items() if v}
    except Exception as e:  # keep healing the rest
        done["rules_error"] = str(e)
    done.update(heal_disks(ctx))  # stalled or failing disks back to passthrough, before restarts
    for name in ctx.names:
        node = ctx.cluster.node(name)
        try:
            state = ctx.system.process_state(node)
            if state == "T":
                ctx.system.resume(node)
                done.setdefault("resumed", []).append(name)
            elif state is None:
                ctx.system.start(node)
                done.setdefault("started", []).append(name)
        except Exception as e:
            done.setdefault("errors", {})[name] = str(e)
    return done
