"""Faults on the system's processes: `kill` and `pause`.

- kill: SIGKILL of the system's process on the target nodes; verified when
  the process is gone; its end restarts it and verifies it runs;
- pause: SIGSTOP; verified when the process is in state T (stopped); its
  end sends SIGCONT and verifies it left that state.

Targets are drawn as nemesis.targets says (random, one, minority, majority,
leaders, replicas, controller, all).
"""

from __future__ import annotations

from infra.nodes import parallel
from nemesis.fault import (PROCESSES, Context, Fault, Step, describe_nodes, per_node, process_state, verdict,
                           wait_for)
from nemesis.targets import TARGETS, draw_nodes, resolve


def start_kill(ctx: Context, step: Step) -> tuple[dict, dict]:
    names, how = resolve(ctx, step)
    parallel(lambda n: ctx.system.kill(ctx.cluster.node(n)), names)
    gone = {n: wait_for(lambda n=n: process_state(ctx, n) is None, 5) for n in names}
    value = {"nodes": names, **how, "verified": {"ok": all(gone.values()),
                                                  "process_gone": gone}}
    return value, {"nodes": names}


def restart(ctx: Context, state: dict) -> dict:
    """Starts the system again on the nodes in `state`; verified when it runs (not stopped)."""
    names = state["nodes"]
    parallel(lambda n: ctx.system.start(ctx.cluster.node(n)), names)
    up = {n: process_state(ctx, n) not in (None, "T") for n in names}
    return {"nodes": names, "verified": {"ok": all(up.values()), "running": up}}


def start_pause(ctx: Context, step: Step) -> tuple[dict, dict]:
    names, how = resolve(ctx, step)
    parallel(lambda n: ctx.system.pause(ctx.cluster.node(n)), names)
    stopped = {n: wait_for(lambda n=n: process_state(ctx, n) == "T", 5) for n in names}
    return {"nodes": names, **how, "verified": {"ok": all(stopped.values()), "stopped": stopped}}, {"nodes": names}


def stop_pause(ctx: Context, state: dict) -> dict:
    names = state["nodes"]
    parallel(lambda n: ctx.system.resume(ctx.cluster.node(n)), names)
    resumed = {n: wait_for(lambda n=n: process_state(ctx, n) not in ("T", None), 5) for n in names}
    return {"nodes": names, "verified": {"ok": all(resumed.values()), "resumed": resumed}}


def sweep(ctx: Context) -> dict:
    """Every stopped process resumed, every missing one started: where."""
    done: dict = {}
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


def _describe_probe(start: tuple[str, str, str], stop: tuple[str, str, str]):
    """A describe function for a fault on a node list whose probe reports, per
    node, (its verified key, what yes says, what no says) at its start and end."""

    def describe(value: dict, stopping: bool) -> tuple[str, str]:
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
    targets=TARGETS, draw=draw_nodes, sweep=sweep, sweep_stage=PROCESSES, colour="#d0ebff", label="kill",
    describe=describe_kill)

PAUSE = Fault(
    name="pause", start_action="pause", start=start_pause, stop_action="resume", stop=stop_pause,
    verified_by="the process is in state T (stopped); after SIGCONT, it left that state",
    targets=TARGETS, draw=draw_nodes, sweep=sweep, sweep_stage=PROCESSES, colour="#fff3bf", label="pause",
    describe=describe_pause)
