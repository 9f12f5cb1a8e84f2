"""Disk faults, through the faultfs mounted under each broker's data dir:
`disk-stall`, `disk-slow`, `disk-fail`, `disk-corrupt`, and the probes they
(and power loss, nemesis.power) verify themselves with.

- disk-stall: the targets' filesystems block every operation (of the kinds
  `[disk] ops` names) until the fault ends; verified when a probe write on
  the node is still blocked after a moment and the filesystem counts it as
  blocked; undone by passthrough, verified when a probe write completes.
- disk-slow: every operation first waits `[disk] slow-ms`; verified when a
  probe write + fsync takes at least that long.
- disk-fail: operations fail with EIO; verified when the probe fails so.
- disk-corrupt: a fraction of the reads or the writes (`[disk] corrupt`) of
  segment, index or checkpoint files (`corrupt-files`) get one bit flipped,
  seeded; verified when a probe file of that kind, written and read back,
  shows flipped bits (in what a read returns, or in the stored bytes) that
  the faultfs logged, and a probe file of no such kind stays clean; undone
  by disarming, verified when a new probe is clean. Flipped writes stay
  flipped on the disk: that is the fault.

`--nemesis disk` in a spec means disk-stall, disk-slow and disk-fail (their
group), drawn by the seeded schedule like any faults. disk-corrupt is not in
the group: it would change what every seed draws for `--nemesis disk`, and
runs expected valid with it would meet corruption they never asked for.
Targets are chosen as for kill and pause (nemesis.targets), but for
zookeeper and clients.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import posixpath
import shlex

from infra import faultfs
from infra.nodes import parallel
from infra.system import DataDir
from nemesis.fault import STORAGE, Context, Fault, Step, describe_nodes, per_node, verdict
from nemesis.targets import DISK_TARGETS, draw_nodes, resolve

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
    targets=DISK_TARGETS, draw=draw_nodes, sweep=heal_disks, sweep_stage=STORAGE, colour="#e5dbff",
    label="disk stall", needs_faultfs=True, group="disk", describe=describe)

SLOW = Fault(
    name="disk-slow", start_action="slow-disk", start=_start_disk("slow"), stop_action="unslow-disk",
    stop=stop_disk, verified_by="a probe write and fsync take at least [disk] slow-ms; after passthrough, "
                                "a probe write and fsync finish",
    targets=DISK_TARGETS, draw=draw_nodes, sweep=heal_disks, sweep_stage=STORAGE, colour="#d3f9d8",
    label="disk slow", needs_faultfs=True, group="disk", describe=describe)

FAIL = Fault(
    name="disk-fail", start_action="fail-disk", start=_start_disk("fail"), stop_action="unfail-disk",
    stop=stop_disk, verified_by="a probe write fails with EIO; after passthrough, a probe write and fsync finish",
    targets=DISK_TARGETS, draw=draw_nodes, sweep=heal_disks, sweep_stage=STORAGE, colour="#ffe8cc",
    label="disk fail", needs_faultfs=True, group="disk", describe=describe)


# ----------------------------------------------------------------------------
# corrupt: bit flips in reads or writes of matching files

PROBE_SIZE = 8192
CLEAN_SUFFIX = ".clean"  # a name of no kind in faultfs.FILE_KINDS


def name_of_kind(base: str, kind: str) -> str:
    """A file name of that kind: its first pattern with `base` for the first `*` (`base.log`)."""
    return faultfs.FILE_KINDS[kind][0].replace("*", base, 1).replace("*", "")


def step_seed(step: Step, node: str) -> int:
    """A seed for what the faultfs draws on one node for one step (which
    operations flip, where; how a write tears): from the step as the
    schedule drew it (and as run.json records it), so the same --seed or
    the same explicit schedule gives the same draws."""
    delay = getattr(step, "delay", 0)
    key = json.dumps([getattr(step, "fault", ""), getattr(step, "mode", ""), list(getattr(step, "picks", ())),
                      round(delay, 3) if isinstance(delay, (int, float)) else delay,
                      dict(getattr(step, "extra", {}) or {}), node], sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 1


def _diff_bits(cmp_lines: list[str]) -> set[tuple[int, int]]:
    """`cmp -l` output (1-based offset, two octal bytes per line) -> the differing (offset, bit)s."""
    bits = set()
    for line in cmp_lines:
        parts = line.split()
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        x = int(parts[1], 8) ^ int(parts[2], 8)
        bits |= {(int(parts[0]) - 1, b) for b in range(8) if x >> b & 1}
    return bits


def probe_corrupt(node, target: str, kind: str) -> dict:
    """Writes two probe files through the faultfs (one named as a `kind`
    file, one as no kind), fsyncs them, and compares against what was
    written: the stored bytes (the raw source) and a fresh read through the
    mount (a new open drops FUSE's page cache). For each file and each of
    stored/read, the differing (offset, bit)s; the files' paths under the
    mount, for `faultfs.flips`. Removes the files."""
    q = shlex.quote
    base = posixpath.basename(probe_path(target, "corrupt"))
    names = {"match": name_of_kind(base, kind), "clean": base + CLEAN_SUFFIX}
    raw = target + faultfs.RAW_SUFFIX
    expected = f"{node.run_dir}/{base}.expected"  # off the faultfs
    script = [f"e={q(expected)}; yes faultfs-probe | head -c {PROBE_SIZE} > \"$e\""]
    for name in names.values():
        script.append(f"cat \"$e\" > {q(target + '/' + name)} && sync {q(target + '/' + name)}")
    for key, name in names.items():
        script.append(f"echo '== {key} stored'; cmp -l \"$e\" {q(raw + '/' + name)} 2>&1")
        script.append(f"echo '== {key} read'; cmp -l \"$e\" {q(target + '/' + name)} 2>&1")
    script.append("echo '== end'; rm -f \"$e\" " + " ".join(q(target + "/" + n) for n in names.values()))
    res = node.remote.run("; ".join(script), check=False, timeout=60)
    sections: dict[str, list[str]] = {}
    current = None
    for line in res.stdout.splitlines():
        if line.startswith("== "):
            current = line[3:].strip()
            sections[current] = []
        elif current:
            sections[current].append(line)
    complete = "end" in sections and all(f"{k} {w}" in sections for k in names for w in ("stored", "read"))
    # Anything but byte differences (a short file, an error) is not a clean comparison.
    odd = [x for k, lines in sections.items() if k != "end" for x in lines if len(x.split()) != 3]
    return {"complete": complete and not odd, "odd": odd[:3], "paths": {k: "/" + n for k, n in names.items()},
            **{k: _diff_bits(lines) for k, lines in sections.items() if k != "end"}}


def _check_flips(probe: dict, logged: list[dict], direction: str) -> tuple[bool, str]:
    """While armed: the matching probe shows flips where it should (in what
    a read returns, or in the stored bytes), each one logged by the faultfs,
    and the other probe file is clean everywhere."""
    if not probe["complete"]:
        return False, f"probe incomplete ({'; '.join(probe['odd']) or 'no output'})"
    where = "match read" if direction == "reads" else "match stored"
    flipped = probe[where]
    seen = {(f["offset"], f["bit"]) for f in logged if f["path"] == probe["paths"]["match"]}
    clean = not probe["clean stored"] and not probe["clean read"]
    intact = direction != "reads" or not probe["match stored"]  # a flipped read leaves the disk alone
    ok = bool(flipped) and flipped <= seen and clean and intact
    if ok:
        return True, (f"{len(flipped)} flipped bit(s) in a probe's {'read' if direction == 'reads' else 'stored bytes'}, "
                      "each in the faultfs's log; an unmatched file clean")
    why = ("no flipped bit in the probe" if not flipped else "a flipped bit the faultfs did not log" if not flipped <= seen
           else "the unmatched probe file changed" if not clean else "a flipped read changed the stored bytes")
    return False, why


def _start_corrupt(ctx: Context, step: Step) -> tuple[dict, dict]:
    names, how = resolve(ctx, step)

    def one(name):
        node, target = target_of(ctx, name)
        armed = faultfs.corrupt(node, target, seed=step_seed(step, name))["armed"]
        probe = probe_corrupt(node, target, armed["files"][0])
        ok, words = _check_flips(probe, faultfs.flips(node, target, probe["paths"]["match"]), armed["direction"])
        return armed, ok, words

    results = dict(zip(names, parallel(one, names)))
    first = next(iter(results.values()), ({}, False, ""))[0]
    value = {"nodes": names, **how, "direction": first.get("direction"), "files": first.get("files"),
             "fraction": first.get("fraction"), "seeds": {n: a.get("seed") for n, (a, _, _) in results.items()},
             "verified": {"ok": bool(results) and all(ok for _, ok, _ in results.values()),
                          "probe": {n: words for n, (_, _, words) in results.items()}}}
    return value, {"nodes": names, "files": first.get("files") or ["segments"]}


def _stop_corrupt(ctx: Context, state: dict) -> dict:
    """Flips off; verified when a new probe is clean in its stored bytes and
    its read, with nothing logged for it. What was flipped on the disk stays."""
    names = state.get("nodes", [])
    kind = (state.get("files") or ["segments"])[0]

    def one(name):
        node, target = target_of(ctx, name)
        done = faultfs.corrupt_off(node, target)["disarmed"]
        probe = probe_corrupt(node, target, kind)
        logged = [f for f in faultfs.flips(node, target) if f["path"] in probe["paths"].values()]
        bits = sum(len(probe.get(f"{k} {w}", ())) for k in ("match", "clean") for w in ("stored", "read"))
        ok = probe["complete"] and not bits and not logged
        words = ("probe clean" if ok else f"probe incomplete ({'; '.join(probe['odd']) or 'no output'})"
                 if not probe["complete"] else f"probe still shows {bits} flipped bit(s)")
        return {"matched": done.get("matched", 0), "flipped": done.get("flipped", 0)}, ok, words

    results = dict(zip(names, parallel(one, names)))
    return {"nodes": names, "flips": {n: c for n, (c, _, _) in results.items()},
            "verified": {"ok": all(ok for _, ok, _ in results.values()),
                         "probe": {n: words for n, (_, _, words) in results.items()}}}


def describe_corrupt(value: dict, stopping: bool) -> tuple[str, str]:
    """`n2, 1% of reads of segments flipped`, `n2, flips off: 3 of 250 reads flipped`."""
    what, _ = describe_nodes(value, stopping)
    if not isinstance(value, dict) or "nodes" not in value:
        return what, ""
    if stopping:
        counts = value.get("flips")
        if isinstance(counts, dict) and counts:
            flipped = sum(c.get("flipped", 0) for c in counts.values() if isinstance(c, dict))
            matched = sum(c.get("matched", 0) for c in counts.values() if isinstance(c, dict))
            what += f", flips off ({flipped} of {matched} operations flipped)"
    elif value.get("direction"):
        files = value.get("files")
        files = ", ".join(map(str, files)) if isinstance(files, list) else str(files)
        fraction = value.get("fraction")
        share = f"{fraction * 100:g}%" if isinstance(fraction, (int, float)) else "some"
        what += f", bit flips in {share} of {value['direction']} of {files}"
    v = value.get("verified")
    return what, verdict(value, per_node(v.get("probe"), "", "")) if isinstance(v, dict) else ""


CORRUPT = Fault(
    name="disk-corrupt", start_action="corrupt-disk", start=_start_corrupt, stop_action="uncorrupt-disk",
    stop=_stop_corrupt, verified_by="a probe file of the chosen kind shows flipped bits (in a read, or stored), each "
                                   "in the faultfs's log, and a probe of no such kind stays clean; after the stop a "
                                   "new probe is clean (flipped writes stay on the disk)",
    targets=DISK_TARGETS, draw=draw_nodes, sweep=heal_disks, sweep_stage=STORAGE, colour="#fcc2d7",
    label="disk corrupt", needs_faultfs=True, describe=describe_corrupt)
