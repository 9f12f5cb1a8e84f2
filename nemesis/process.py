"""Faults on the system's processes: `kill` and `pause`.

- kill: SIGKILL of the system's process on the target nodes; verified when
  the process is gone; its end restarts it and verifies it runs;
- pause: SIGSTOP; verified when the process is in state T (stopped); its
  end sends SIGCONT and verifies it left that state.

Targets are drawn as nemesis.targets says (random, one, minority, majority,
leaders, replicas, followers, out-of-sync, controller, kraft-controllers,
zookeeper, all). With `zookeeper` they hit the ZooKeeper process on the
ensemble's nodes instead of the broker (infra.zookeeper.ZooKeeper, found in
the cluster's state): its end restarts or resumes ZooKeeper, and the sweep
checks ZooKeeper's processes too. With `kraft-controllers` (the voters) or
`controller` (the active one), where the system runs its controllers as
processes of their own (infra.system.ControllerProcesses: Kafka's separate
KRaft layout), they hit those, and the sweep checks them too; in the
combined layout, and in ZooKeeper mode, the controller is a broker. With `consumers`, `producers` or `clients`
they hit a client's own process (nemesis/clients.py).
"""

from __future__ import annotations

from core.waiting import holds_within
from infra.nodes import parallel
from infra.system import ControllerProcesses
from infra.zookeeper import ZooKeeper
from nemesis import clients
from nemesis.fault import PROCESSES, Context, Fault, Step, describe_nodes, per_node, process_state, verdict
from nemesis.targets import PROCESS_TARGETS, draw_nodes, resolve, zookeeper


def _controllers(ctx: Context):
    """The system's controller processes where they are not its brokers', else None."""
    return ctx.system.controller_processes() if isinstance(ctx.system, ControllerProcesses) else None


def _whose(ctx: Context, step: Step) -> dict:
    """Whose processes a step's fault hits, as its state records it: {} for the system's."""
    if step.mode == "zookeeper":
        return {"zookeeper": True}
    if step.mode in ("kraft-controllers", "controller") and _controllers(ctx) is not None:
        return {"controllers": True}  # the separate layout: the quorum's (active) controller is its own process
    return {}


def _processes(ctx: Context, state: dict):
    """Whose processes a fault hits: ZooKeeper's, the separate controllers', or the system's."""
    if state.get("zookeeper"):
        return zookeeper(ctx)
    if state.get("controllers"):
        return _controllers(ctx)
    return ctx.system


def _state(ctx: Context, procs, name: str) -> str | None:
    return process_state(ctx, name) if procs is ctx.system else procs.process_state(ctx.cluster.node(name))


def start_kill(ctx: Context, step: Step) -> tuple[dict, dict]:
    if step.mode in clients.CLIENT_TARGETS:
        return clients.start_kill(ctx, step)
    names, how = resolve(ctx, step)
    whose = _whose(ctx, step)
    procs = _processes(ctx, whose)
    parallel(lambda n: procs.kill(ctx.cluster.node(n)), names)
    gone = {n: holds_within(lambda n=n: _state(ctx, procs, n) is None, 5) for n in names}
    value = {"nodes": names, **how, "verified": {"ok": all(gone.values()),
                                                  "process_gone": gone}}
    return value, {"nodes": names, **whose}


def restart(ctx: Context, state: dict) -> dict:
    """Starts the system (or ZooKeeper) again on the nodes in `state`; verified when it runs (not stopped)."""
    if "member" in state:
        return clients.after_kill(ctx, state)
    names = state["nodes"]
    procs = _processes(ctx, state)
    parallel(lambda n: procs.start(ctx.cluster.node(n)), names)
    up = {n: _state(ctx, procs, n) not in (None, "T") for n in names}
    return {"nodes": names, "verified": {"ok": all(up.values()), "running": up}}


def start_pause(ctx: Context, step: Step) -> tuple[dict, dict]:
    if step.mode in clients.CLIENT_TARGETS:
        return clients.start_pause(ctx, step)
    names, how = resolve(ctx, step)
    whose = _whose(ctx, step)
    procs = _processes(ctx, whose)
    parallel(lambda n: procs.pause(ctx.cluster.node(n)), names)
    stopped = {n: holds_within(lambda n=n: _state(ctx, procs, n) == "T", 5) for n in names}
    return ({"nodes": names, **how, "verified": {"ok": all(stopped.values()), "stopped": stopped}},
            {"nodes": names, **whose})


def stop_pause(ctx: Context, state: dict) -> dict:
    if "member" in state:
        return clients.stop_pause(ctx, state)
    names = state["nodes"]
    procs = _processes(ctx, state)
    parallel(lambda n: procs.resume(ctx.cluster.node(n)), names)
    resumed = {n: holds_within(lambda n=n: _state(ctx, procs, n) not in ("T", None), 5) for n in names}
    return {"nodes": names, "verified": {"ok": all(resumed.values()), "resumed": resumed}}


def sweep(ctx: Context) -> dict:
    """Every stopped process resumed, every missing one started, ZooKeeper's
    and the separate controllers' first (brokers need them): where."""
    done: dict = {}
    try:
        zk = ZooKeeper.from_cluster(ctx.cluster)
    except Exception as e:  # a cluster state that names no such nodes: the system's processes still matter
        done.setdefault("errors", {})["zookeeper"] = str(e)
        zk = None
    zk_nodes = [n.name for n in zk.nodes()] if zk is not None else []
    controllers = _controllers(ctx)
    controller_nodes = [n.name for n in controllers.nodes] if controllers is not None else []
    for procs, names, suffix in ((zk, zk_nodes, " zookeeper"), (controllers, controller_nodes, " controller"),
                                 (ctx.system, ctx.names, "")):
        for name in names:
            node = ctx.cluster.node(name)
            try:
                state = procs.process_state(node)
                if state == "T":
                    procs.resume(node)
                    done.setdefault("resumed", []).append(name + suffix)
                elif state is None:
                    procs.start(node)
                    done.setdefault("started", []).append(name + suffix)
            except Exception as e:
                done.setdefault("errors", {})[name + suffix] = str(e)
    try:
        done.update(clients.sweep(ctx))
    except Exception as e:
        done.setdefault("errors", {})["consumers"] = str(e)
    return done


def _describe_probe(start: tuple[str, str, str], stop: tuple[str, str, str]):
    """A describe function for a fault on a node list whose probe reports, per
    node, (its verified key, what yes says, what no says) at its start and end."""

    def describe(value: dict, stopping: bool) -> tuple[str, str]:
        if isinstance(value, dict) and "clients" in value:
            key, yes, no = stop if stopping else start
            return clients.describe(value, stopping, {key: (yes, no), "successor_running": ("a successor runs",
                                                                                           "no successor runs")})
        what, _ = describe_nodes(value, stopping)
        v = value.get("verified") if isinstance(value, dict) else None
        if not isinstance(v, dict):
            return what, ""
        key, yes, no = stop if stopping else start
        return what, verdict(value, per_node(v.get(key), yes, no))

    return describe


# `n1 n3`, `verified: process gone on n1 n3` (its end: `running on ...`)
describe_kill = _describe_probe(("process_gone", "process gone", "process still running"),
                                ("running", "running", "not running"))
# `n2`, `verified: stopped (state T) on n2` (its end: `resumed on ...`)
describe_pause = _describe_probe(("stopped", "stopped (state T)", "not stopped"),
                                 ("resumed", "resumed", "still stopped"))


KILL = Fault(
    name="kill", start_action="kill", start=start_kill, stop_action="start", stop=restart,
    verified_by="the process is gone; after the restart, it runs",
    targets=PROCESS_TARGETS, draw=draw_nodes, sweep=sweep, sweep_stage=PROCESSES, colour="#d0ebff", label="kill",
    describe=describe_kill)

PAUSE = Fault(
    name="pause", start_action="pause", start=start_pause, stop_action="resume", stop=stop_pause,
    verified_by="the process is in state T (stopped); after SIGCONT, it left that state",
    targets=PROCESS_TARGETS, draw=draw_nodes, sweep=sweep, sweep_stage=PROCESSES, colour="#fff3bf", label="pause",
    describe=describe_pause)
