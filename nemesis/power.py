"""Power loss, through the faultfs under each broker's data dir: `power-loss`.

kill -9 the targets' brokers, all at once, then drop every write they had
not fsynced (faultfs lose-unfsynced); verified when the processes are gone
and a probe file, written with a synced part and an unsynced part before the
kill, holds exactly its synced part after the drop. Its end restarts the
brokers (power-restore), verified as a kill's end is.

With `[disk] power-loss = "torn"` (a setting of the mounts, not a draw of
the schedule: a new draw would shift every later choice of existing seeds),
each file's last unsynced write keeps a prefix instead (a torn write, drawn
from a seed made of the step and the node); the probe then holds its synced
part and a proper prefix of its unsynced part, as long as the faultfs
reports it kept.

Targets are chosen as for kill and pause (nemesis.targets), but for zookeeper
(ZooKeeper's data is not on the faultfs) and clients.
"""

from __future__ import annotations

import shlex

from core.waiting import holds_within
from infra import faultfs
from infra.nodes import parallel
from nemesis.disk import probe_path, step_seed, target_of
from nemesis.fault import PROCESSES, Context, Fault, Step, describe_nodes, per_node, process_state, verdict
from nemesis.process import describe_kill, restart, sweep
from nemesis.targets import DISK_TARGETS, draw_nodes, resolve

SYNCED, UNSYNCED = "synced\n", "unsynced " * 16 + "\n"  # the unsynced part written in one write


def start(ctx: Context, step: Step) -> tuple[dict, dict]:
    names, how = resolve(ctx, step)
    probes = {}

    def write_probe(name):
        node, target = target_of(ctx, name)
        path = probe_path(target, "power")
        q = shlex.quote(path)
        node.remote.run(f"printf {shlex.quote(SYNCED)} > {q} && sync {q} && printf {shlex.quote(UNSYNCED)} >> {q}",
                        timeout=30)
        probes[name] = path

    parallel(write_probe, names)
    # Every target loses power at the same moment: all killed before any drop.
    parallel(lambda n: ctx.system.kill(ctx.cluster.node(n)), names)
    gone = {n: holds_within(lambda n=n: process_state(ctx, n) is None, 5) for n in names}

    def drop(name):
        node, target = target_of(ctx, name)
        answer = faultfs.lose_unfsynced(node, target, seed=step_seed(step, name))
        d = answer.get("dropped", {})
        res = node.remote.run(f"cat {shlex.quote(probes[name])}", check=False, timeout=30)
        node.remote.run(f"rm -f {shlex.quote(probes[name])}", check=False, timeout=30)
        held = res.stdout if res.exit_status == 0 else None
        if d.get("mode") == "torn":
            ok, words = _check_torn(held, probes[name][len(target):], d)
        else:
            ok = held == SYNCED
            words = ("probe kept its fsynced part only" if ok else
                     f"probe holds {held!r}, expected {SYNCED!r}" if held is not None else "probe unreadable")
        lost = {"files": d.get("files", 0), "bytes_cut": d.get("bytes_cut", 0),
                "bytes_restored": d.get("bytes_restored", 0),
                **({"torn": d.get("torn", 0), "bytes_torn_kept": d.get("bytes_torn_kept", 0)}
                   if d.get("mode") == "torn" else {})}
        return ok, words, lost

    results = dict(zip(names, parallel(drop, names)))
    value = {"nodes": names, **how,
             "lost": {n: lost for n, (_, _, lost) in results.items()},
             "verified": {"ok": all(gone.values()) and all(ok for ok, _, _ in results.values()),
                          "process_gone": gone, "probe": {n: words for n, (_, words, _) in results.items()}}}
    return value, {"nodes": names}


def _check_torn(held: str | None, path: str, dropped: dict) -> tuple[bool, str]:
    """A torn drop: the probe holds its synced part and a proper prefix of
    its unsynced write, as long as the faultfs says it kept."""
    if held is None:
        return False, "probe unreadable"
    kept = len(held) - len(SYNCED)
    said = [t.get("kept") for t in dropped.get("torn_examples", []) if t.get("path") == path]
    ok = held.startswith(SYNCED) and 0 < kept < len(UNSYNCED) and held[len(SYNCED):] == UNSYNCED[:kept]
    if ok and said and said[0] != kept:
        return False, f"probe kept {kept} bytes of its unsynced write, the faultfs says {said[0]}"
    if ok:
        return True, f"probe kept its fsynced part and {kept} of {len(UNSYNCED)} bytes of its unsynced write (torn)"
    return False, f"probe holds {held!r}, expected {SYNCED!r} and a proper prefix of its unsynced write"


def stop(ctx: Context, state: dict) -> dict:
    """Power back: the brokers restart on what their disks kept."""
    return restart(ctx, state)


def describe(value: dict, stopping: bool) -> tuple[str, str]:
    """`n1 n2; unsynced writes cut from 45 files`, `verified: process gone ...; probe kept ...`."""
    if stopping or not isinstance(value, dict):
        return describe_kill(value, stopping)
    what, _ = describe_nodes(value, stopping)
    lost = value.get("lost")
    if isinstance(lost, dict) and lost:
        files = sum(x.get("files", 0) for x in lost.values() if isinstance(x, dict))
        what += f"; unsynced writes dropped in {files} files"
        torn = sum(x.get("torn", 0) for x in lost.values() if isinstance(x, dict))
        if torn:
            what += f", the last one torn in {torn}"
    v = value.get("verified")
    if not isinstance(v, dict):
        return what, ""
    words = [per_node(v.get("process_gone"), "process gone", "process still running"), per_node(v.get("probe"), "", "")]
    return what, verdict(value, "; ".join(w for w in words if w))


POWER_LOSS = Fault(
    name="power-loss", start_action="power-loss", start=start, stop_action="power-restore", stop=stop,
    verified_by="the processes are gone and a probe file keeps exactly its fsynced part; after the restart, "
                "the processes run",
    targets=DISK_TARGETS, draw=draw_nodes, sweep=sweep, sweep_stage=PROCESSES, colour="#c5f6fa",
    label="power loss", needs_faultfs=True, describe=describe)
