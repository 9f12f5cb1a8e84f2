"""Disk faults, through the faultfs mounted under each broker's data dir:
`disk-stall`, `disk-slow`, `disk-fail`, and the probes they (and power loss,
nemesis.power) verify themselves with.

- disk-stall: the targets' filesystems block every operation (of the kinds
  `[disk] ops` names) until the fault ends; verified when a probe write on
  the node is still blocked after a moment and the filesystem counts it as
  blocked; undone by passthrough, verified when a probe write completes.
- disk-slow: every operation first waits `[disk] slow-ms`; verified when a
  probe write + fsync takes at least that long.
- disk-fail: operations fail with EIO; verified when the probe fails so.

`--nemesis disk` in a spec means disk-stall, disk-slow and disk-fail (their
group), drawn by the seeded schedule like any faults. Targets are chosen as
for kill and pause (nemesis.targets).
"""

from __future__ import annotations

import itertools
import logging
import posixpath
import shlex

from infra import faultfs
from infra.nodes import parallel
from infra.system import DataDir
from nemesis.fault import STORAGE, Context, Fault, Step, describe_nodes, per_node, verdict
from nemesis.targets import TARGETS, draw_nodes, resolve

log = logging.getLogger(__name__)

PROBE = ".faultfs-probe"  # probe files, in the data dir (never a directory: Kafka would try to load it)
STALL_PROBE_S = 1.5  # a probe still blocked after this long shows a stall
RELEASE_PROBE_S = 10.0  # a probe must finish within this after the fault ends
_probe_ids = itertools.count(1)


def target_of(ctx: Context, name: str) -> tuple[object, str]:
    """A node, and the faultfs mount (the system's data dir) on it."""
    node = ctx.cluster.node(name)
    return node, faultfs.data_dir_of(ctx.system, node)


def probe_path(target: str, what: str) -> str:
    """A new probe file's path under a mount."""
    return f"{target}/{PROBE}-{what}-{next(_probe_ids)}"


def probe_write(node, target: str, what: str, limit_s: float) -> dict:
    """Writes and fsyncs a new probe file on the node, waiting at most
    `limit_s`: whether it finished (`blocked` if not), its exit status, how
    long it took (ms) and what it said, and its `marker` (files beside the
    node's run dir that say when it ends).

    The probe runs in the background: a process waiting on a stalled FUSE
    request cannot be killed, not even with -9, until the filesystem answers.
    """
    q = shlex.quote
    path = probe_path(target, what)
    marker = f"{node.run_dir}/{posixpath.basename(path)}"
    inner = f"printf probe > {q(path)} && sync {q(path)}"
    script = (
        f"m={q(marker)}; s=$(date +%s%N); "
        f"( sh -c {q(inner)} > \"$m.out\" 2>&1; echo \"rc=$? end=$(date +%s%N)\" > \"$m.tmp\"; "
        f"mv \"$m.tmp\" \"$m.rc\" ) </dev/null >/dev/null 2>&1 & "
        f"while [ ! -e \"$m.rc\" ] && [ $(( ($(date +%s%N) - s) / 1000000 )) -lt {int(limit_s * 1000)} ]; "
        f"do sleep 0.05; done; "
        f"echo \"start=$s\"; if [ -e \"$m.rc\" ]; then cat \"$m.rc\"; else echo blocked; fi; "
        f"head -c 300 \"$m.out\" 2>/dev/null | tr '\\n' ' '")
    res = node.remote.run(script, check=False, timeout=limit_s + 30)
    lines = res.stdout.splitlines()
    fields = dict(x.split("=", 1) for line in lines[:2] for x in line.split() if "=" in x)
    blocked = len(lines) > 1 and lines[1].strip() == "blocked"
    start, end = int(fields.get("start", 0)), int(fields.get("end", 0))
    return {"blocked": blocked, "status": None if blocked else int(fields.get("rc", -1)),
            "ms": (end - start) // 1_000_000 if end else int(limit_s * 1000),
            "output": " ".join(lines[2:]).strip()[:200], "marker": marker}


def _wait_and_remove_probes(node, target: str, markers: list[str], wait_s: float = 10.0) -> None:
    """Once the probes a stall held have finished, removes every probe file."""
    q = shlex.quote
    waits = " ".join(f"{q(m + '.rc')}" for m in markers)
    script = (f"i=0; for f in {waits}; do while [ ! -e \"$f\" ] && [ $i -lt {int(wait_s * 20)} ]; do "
              f"sleep 0.05; i=$((i + 1)); done; done; " if markers else "")
    script += f"rm -f {q(target)}/{PROBE}-* {q(node.run_dir)}/{PROBE}-*"
    node.remote.run(script, check=False, timeout=wait_s + 30)


# ----------------------------------------------------------------------------
# stall / slow / fail


def _verify(mode: str, probe: dict, state: dict, delay_ms: float) -> tuple[bool, str]:
    """Whether the probe shows the fault, and in words."""
    if mode == "stall":
        blocked = probe["blocked"] and state.get("blocked", 0) >= 1
        return blocked, (f"probe blocked ({state.get('blocked', 0)} operation(s) waiting)" if blocked
                         else f"probe not blocked (status {probe['status']} after {probe['ms']} ms)")
    if mode == "slow":
        slow = probe["status"] == 0 and probe["ms"] >= delay_ms
        return slow, f"probe took {probe['ms']} ms (asked {delay_ms:g} ms per operation)"
    eio = "Input/output error" in probe["output"] or "I/O error" in probe["output"]  # coreutils / dash
    failed = probe["status"] not in (0, None) and eio
    return failed, ("probe failed with EIO" if failed else
                    f"probe did not fail with EIO (status {probe['status']}: {probe['output'][:80]})")


def _start_disk(mode: str):
    def start(ctx: Context, step: Step) -> tuple[dict, dict]:
        names, how = resolve(ctx, step)

        def one(name):
            node, target = target_of(ctx, name)
            st = faultfs.set_mode(node, target, mode)
            delay = st.get("delay_ms", 0.0)
            limit = STALL_PROBE_S if mode == "stall" else max(30.0, 10 * delay / 1000)
            probe = probe_write(node, target, mode, limit)
            if not probe["blocked"]:
                _wait_and_remove_probes(node, target, [probe["marker"]], wait_s=0)
            if mode == "stall":
                st = faultfs.status(node, target) or {}
            ok, words = _verify(mode, probe, st, delay)
            # A probe the fault still holds is waited for (and removed) when the fault ends.
            held = probe["marker"] if probe["blocked"] else None
            return {"ok": ok, "probe": words, "ops": st.get("ops"), "held": held,
                    **({"delay_ms": delay} if mode == "slow" else {})}

        results = dict(zip(names, parallel(one, names)))
        first = next(iter(results.values()), {})
        value = {"nodes": names, **how, "mode": mode, "ops": first.get("ops"),
                 **({"delay_ms": first["delay_ms"]} if "delay_ms" in first else {}),
                 "verified": {"ok": bool(results) and all(r["ok"] for r in results.values()),
                              "probe": {n: r["probe"] for n, r in results.items()}}}
        held = {n: r["held"] for n, r in results.items() if r["held"]}
        return value, {"nodes": names, "mode": mode, "probes": held}

    return start


def stop_disk(ctx: Context, state: dict) -> dict:
    """Back to passthrough; verified when a probe write and fsync finish."""
    names = state.get("nodes", [])
    held = state.get("probes", {})

    def one(name):
        node, target = target_of(ctx, name)
        faultfs.set_mode(node, target, "passthrough")
        probe = probe_write(node, target, "release", RELEASE_PROBE_S)
        _wait_and_remove_probes(node, target, [m for m in (held.get(name), probe["marker"]) if m])
        if probe["status"] == 0:
            return True, f"probe took {probe['ms']} ms"
        return False, ("probe still blocked" if probe["blocked"] else
                       f"probe status {probe['status']}: {probe['output'][:80]}")

    results = dict(zip(names, parallel(one, names)))
    return {"nodes": names, "mode": "passthrough",
            "verified": {"ok": all(ok for ok, _ in results.values()),
                         "probe": {n: words for n, (_, words) in results.items()}}}


def describe(value: dict, stopping: bool) -> tuple[str, str]:
    """`n2 n3, slowed by 200 ms per operation (write, fsync)`, `verified: probe took 230 ms on n2 n3`."""
    what, _ = describe_nodes(value, stopping)
    if not isinstance(value, dict) or "nodes" not in value:
        return what, ""
    if stopping:
        what += ", back to passthrough"
    elif value.get("mode") in ("stall", "slow", "fail"):
        what += {"stall": ", stalled", "fail": ", failing with EIO",
                 "slow": f", slowed by {value.get('delay_ms', 0):g} ms per operation"}[value["mode"]]
        if value.get("ops"):
            ops = value["ops"]
            what += f" ({', '.join(map(str, ops)) if isinstance(ops, list) else ops})"
    v = value.get("verified")
    return what, verdict(value, per_node(v.get("probe"), "", "")) if isinstance(v, dict) else ""


def heal_disks(ctx: Context) -> dict:
    """The disk faults' sweep: every faultfs back to passthrough; what was released."""
    if not isinstance(ctx.system, DataDir):
        return {}
    try:
        released = faultfs.release_all(ctx.cluster, ctx.system)
    except Exception as e:  # keep healing the rest
        return {"disk_error": str(e)}
    return {"disks_released": released} if released else {}


STALL = Fault(
    name="disk-stall", start_action="stall-disk", start=_start_disk("stall"), stop_action="unstall-disk",
    stop=stop_disk, verified_by="a probe write is still blocked after a moment, and the faultfs counts it blocked; "
                                "after passthrough, a probe write and fsync finish",
    targets=TARGETS, draw=draw_nodes, sweep=heal_disks, sweep_stage=STORAGE, colour="#e5dbff",
    label="disk stall", needs_faultfs=True, group="disk", describe=describe)

SLOW = Fault(
    name="disk-slow", start_action="slow-disk", start=_start_disk("slow"), stop_action="unslow-disk",
    stop=stop_disk, verified_by="a probe write and fsync take at least [disk] slow-ms; after passthrough, "
                                "a probe write and fsync finish",
    targets=TARGETS, draw=draw_nodes, sweep=heal_disks, sweep_stage=STORAGE, colour="#d3f9d8",
    label="disk slow", needs_faultfs=True, group="disk", describe=describe)

FAIL = Fault(
    name="disk-fail", start_action="fail-disk", start=_start_disk("fail"), stop_action="unfail-disk",
    stop=stop_disk, verified_by="a probe write fails with EIO; after passthrough, a probe write and fsync finish",
    targets=TARGETS, draw=draw_nodes, sweep=heal_disks, sweep_stage=STORAGE, colour="#ffe8cc",
    label="disk fail", needs_faultfs=True, group="disk", describe=describe)
