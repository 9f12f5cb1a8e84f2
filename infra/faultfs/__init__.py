"""The fault-injecting filesystem on a node, driven from the control node.

`fs.py` beside this file is the filesystem itself (a FUSE daemon; see its
docstring for the modes). These helpers run it on a node and talk to it,
always through `node.remote`, so that local namespaces, SSH hosts and VMs
are handled alike:

    m = mount(node, source="/d/broker.raw", target="/d/broker")   # passthrough
    set_mode(node, m.target, "stall")                    # every operation blocks
    set_mode(node, m.target, "slow", delay_ms=50, ops="fsync")
    set_mode(node, m.target, "fail", ops="write")        # EIO on writes
    set_mode(node, m.target, "passthrough")
    lose_unfsynced(node, m.target)                       # as a power loss would
    lose_unfsynced(node, m.target, torn=True, seed=7)    # ... tearing each file's last write
    corrupt(node, m.target, seed=7, direction="writes", files=("segments",), fraction=0.01)
    flips(node, m.target, "/p-0/00000000000000000000.log")  # the flips made, (path,) offset, bit
    corrupt_off(node, m.target)                          # no more flips (flipped writes stay)
    unmount(node, m.target)

On the node, the daemon is `<run_dir>/faultfs.py` (copied there at mount, so
a remote node needs only python3 with mfusepy and fuse3), named
`faultfs-<label>` among the node's daemons, logging to
`<log_dir>/faultfs-<label>.log`, with its control socket
`<run_dir>/faultfs-<label>.sock` (addressed relative to the run dir, so that
deep paths do not hit the socket path limit). It mounts with libfuse's
auto_unmount: if the daemon is killed -9 its helper still unmounts, and
`harness clean` removes whatever is left.

`mount_system(cluster, system)` puts one under every node's
`system.data_dir(node)`, with the raw data beside it in `<data_dir>.raw`:
the runner's way in, for runs with disk faults.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import UserError
from infra.faultfs.fs import DIRECTIONS, FILE_KINDS, FRACTIONS, POWER_LOSS, check_fraction, parse_files
from infra.nodes import parallel
from infra.system import DataDir

log = logging.getLogger(__name__)

SCRIPT = Path(__file__).with_name("fs.py")
MODES = ("passthrough", "stall", "slow", "fail")
OPS = ("all", "write", "fsync")
FSTYPE = "fuse.faultfs"
RAW_SUFFIX = ".raw"
SETTINGS = {"slow-ms": "added latency of a slow disk, ms (default 100)",
            "ops": "what a disk fault hits: all, write or fsync (default all)",
            "corrupt": "what disk-corrupt flips bits in: reads or writes (default reads)",
            "corrupt-files": f"the files it flips bits in: some of {', '.join(FILE_KINDS)} (default segments)",
            "corrupt-fraction": f"the fraction of their reads or writes flipped (default: drawn by the seed "
                                f"from {', '.join(map(str, FRACTIONS))})",
            "power-loss": "what power-loss does to each file's last unsynced write: drop it or tear it "
                          "(torn: a prefix survives) (default drop)"}


@dataclass(frozen=True)
class Mount:
    node: str
    source: str
    target: str
    daemon: str
    pid: int


def label_of(target: str) -> str:
    """A daemon name for the mount at `target`: readable, and unique per path."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", posixpath.basename(target.rstrip("/")) or "root")[:32]
    return f"faultfs-{base}-{hashlib.sha1(target.encode()).hexdigest()[:8]}"


def _socket(target: str) -> str:
    return f"{label_of(target)}.sock"  # relative to the node's run dir


def _script(node) -> str:
    return f"{node.run_dir}/faultfs.py"


def _check_path(what: str, path: str) -> None:
    if not path.startswith("/") or "\n" in path or posixpath.normpath(path) != path.rstrip("/"):
        raise UserError(f"faultfs: {what} {path!r}: expected an absolute, normalised path")


def validate_settings(settings: dict) -> dict:
    """The `[disk]` table of a spec, checked; keys as in SETTINGS."""
    out = {}
    for key, value in settings.items():
        k = key.replace("_", "-")
        if k == "slow-ms":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 600_000:
                raise UserError(f"disk.slow-ms {value!r}: expected a number of milliseconds, more than 0")
            out[k] = float(value)
        elif k == "ops":
            if value not in OPS:
                raise UserError(f"disk.ops {value!r}: expected one of {', '.join(OPS)}")
            out[k] = value
        elif k == "corrupt":
            if value not in DIRECTIONS:
                raise UserError(f"disk.corrupt {value!r}: expected one of {', '.join(DIRECTIONS)}")
            out[k] = value
        elif k == "corrupt-files":
            try:
                out[k] = parse_files(value)
            except ValueError as e:
                raise UserError(f"disk.corrupt-{e}") from None
        elif k == "corrupt-fraction":
            try:
                out[k] = check_fraction(value)
            except ValueError as e:
                raise UserError(f"disk.corrupt-{e}") from None
        elif k == "power-loss":
            if value not in POWER_LOSS:
                raise UserError(f"disk.power-loss {value!r}: expected one of {', '.join(POWER_LOSS)}")
            out[k] = value
        else:
            raise UserError(f"disk.{key}: unknown setting (known: {', '.join(SETTINGS)})")
    return out


# ----------------------------------------------------------------------------
# On one node


def _mounted_script(target: str) -> str:
    """Shell: exit 0 when a faultfs is mounted at target."""
    return (f"awk -v t={shlex.quote(target)} '$5 == t {{ for (i = 6; i <= NF; i++) if ($i == \"-\") "
            f"{{ print $(i + 1); break }} }}' /proc/self/mountinfo | grep -qx {FSTYPE}")


def is_mounted(node, target: str) -> bool:
    return node.remote.run(_mounted_script(target), check=False).exit_status == 0


# Where the Vagrantfile installs mfusepy on VMs (kept in step with it).
NODE_VENV_PYTHON = "/opt/harness/venv/bin/python"


def _pick_python(node) -> str:
    """A Python on the node that has mfusepy: this one (local nodes share the
    machine), the venv the Vagrantfile provisions, else the node's python3."""
    candidates = " ".join(shlex.quote(p) for p in (sys.executable, NODE_VENV_PYTHON, "python3"))
    res = node.remote.run(f"for py in {candidates}; do \"$py\" -c 'import mfusepy' >/dev/null 2>&1 && "
                          f"{{ echo \"$py\"; exit 0; }}; done; exit 3", check=False)
    if res.exit_status != 0 or not res.stdout.strip():
        raise UserError(f"faultfs: {node.name} has no Python with mfusepy (pip install mfusepy; "
                        "and Debian's fuse3 for fusermount3)")
    return res.stdout.strip().splitlines()[-1]


def mount(node, source: str, target: str, *, slow_ms: float = 100.0, ops: str = "all",
          corrupt: str = "reads", corrupt_files=("segments",), corrupt_fraction: float | None = None,
          power_loss: str = "drop", timeout: float = 20.0) -> Mount:
    """Mounts a faultfs of `source` at `target` on the node (both made if
    missing), in passthrough; returns when it serves. `corrupt*` and
    `power_loss` are the defaults of its bit flips and drops (SETTINGS)."""
    _check_path("source", source)
    _check_path("target", target)
    if ops not in OPS:
        raise UserError(f"faultfs: ops {ops!r}: expected one of {', '.join(OPS)}")
    checked = validate_settings({"corrupt": corrupt, "corrupt-files": corrupt_files, "power-loss": power_loss,
                                 **({} if corrupt_fraction is None else {"corrupt-fraction": corrupt_fraction})})
    r = node.remote
    q = shlex.quote
    res = r.run("test -c /dev/fuse || { echo 'no /dev/fuse'; exit 3; }; "
                "command -v fusermount3 >/dev/null || { echo 'no fusermount3 (Debian package fuse3)'; exit 3; }",
                check=False)
    if res.exit_status != 0:
        why = res.stdout.strip() or res.stderr.strip()
        raise UserError(f"faultfs: {node.name} cannot mount FUSE filesystems: {why}")
    if is_mounted(node, target):
        raise UserError(f"faultfs: {node.name}: {target} is already a faultfs mount "
                        "(`harness clean` removes stale ones)")
    name = label_of(target)
    python = _pick_python(node)
    r.run(f"mkdir -p {q(source)} {q(target)} {q(node.run_dir)} {q(node.log_dir)}")
    r.write_file(_script(node), SCRIPT.read_bytes())
    argv = [python, _script(node), source, target, "--control", _socket(target),
            "--slow-ms", f"{slow_ms:g}", "--ops", ops, "--corrupt", checked["corrupt"],
            "--corrupt-files", ",".join(checked["corrupt-files"]), "--power-loss", checked["power-loss"]]
    if "corrupt-fraction" in checked:
        argv += ["--corrupt-fraction", repr(checked["corrupt-fraction"])]
    log_file = f"{node.log_dir}/{name}.log"
    pid = r.start_daemon(name, argv, log_file, cwd=node.run_dir)
    deadline = time.monotonic() + timeout
    while True:
        if is_mounted(node, target) and status(node, target) is not None:
            log.info("%s: faultfs %s -> %s mounted (pid %d)", node.name, source, target, pid)
            return Mount(node.name, source, target, name, pid)
        if r.pid_of(name) is None:
            tail = r.run(f"tail -n 3 {q(log_file)}", check=False).stdout.strip().splitlines()
            raise UserError(f"faultfs: {node.name}: the filesystem exited at start: "
                            f"{tail[-1] if tail else 'no output'} (see {log_file})")
        if time.monotonic() > deadline:
            _kill(node, name)
            raise UserError(f"faultfs: {node.name}: {target} not mounted within {timeout:g} s (see {log_file})")
        time.sleep(0.1)


def request(node, target: str, req: dict, timeout: float = 30.0) -> dict:
    """Sends one control request to the faultfs at `target`; its answer.
    Raises UserError when no faultfs answers there or it refuses."""
    q = shlex.quote
    sock = q(_socket(target))
    # No socket, no faultfs: said without starting Python (every heal asks every node).
    missing = q(json.dumps({"ok": False, "unreachable": True, "error": "no control socket"}))
    cmd = (f"cd {q(node.run_dir)} 2>/dev/null && test -S {sock} || {{ echo {missing}; exit 1; }}; "
           f"python3 faultfs.py ctl {sock} {q(json.dumps(req))}")
    res = node.remote.run(cmd, check=False, timeout=timeout)
    try:
        answer = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        detail = (res.stderr.strip().splitlines() or ["no answer"])[-1]
        raise UserError(f"faultfs: {node.name}: no faultfs control at {target}: {detail}") from None
    if not answer.get("ok"):
        if answer.get("unreachable"):
            raise UserError(f"faultfs: {node.name}: no faultfs mounted at {target} ({answer.get('error')})")
        raise UserError(f"faultfs: {node.name}: {answer.get('error')}")
    return answer


def status(node, target: str) -> dict | None:
    """The faultfs's state (mode, blocked operations, unsynced bytes), None when none answers."""
    try:
        return request(node, target, {"op": "status"}, timeout=15)
    except UserError:
        return None


def set_mode(node, target: str, mode: str, **params) -> dict:
    """Switches the faultfs at `target`: passthrough, stall, slow (delay_ms),
    fail; `ops` picks what it hits (all, write, fsync; default: the mount's).
    `lose-unfsynced` drops the unsynced writes instead. Returns its state."""
    if mode == "lose-unfsynced":
        return lose_unfsynced(node, target)
    if mode not in MODES:
        raise UserError(f"faultfs mode {mode!r}: expected one of {', '.join(MODES + ('lose-unfsynced',))}")
    unknown = set(params) - {"ops", "delay_ms"}
    if unknown:
        raise UserError(f"faultfs mode {mode}: unknown parameter(s) {', '.join(sorted(unknown))} (ops, delay_ms)")
    return request(node, target, {"op": "mode", "mode": mode, **params})


def lose_unfsynced(node, target: str, *, torn: bool | None = None, seed: int = 0) -> dict:
    """Puts every file under `target` back to its last fsync; the answer's
    `dropped` says how much was lost (files, bytes cut and restored) and
    its `mode`: with `torn` (default: the mount's power-loss setting) each
    file's last unsynced write keeps a prefix drawn from `seed` (`torn`,
    `torn_examples`: path, offset, kept, of)."""
    req = {"op": "lose-unfsynced", "seed": seed, **({} if torn is None else {"torn": torn})}
    return request(node, target, req, timeout=120)


def corrupt(node, target: str, *, seed: int, **params) -> dict:
    """Arms bit flips in the faultfs at `target`: `direction` (reads or
    writes), `files` (FILE_KINDS), `fraction`; missing ones from the
    mount's settings, the fraction then drawn by `seed`. The answer's
    `armed` says what was armed."""
    unknown = set(params) - {"direction", "files", "fraction"}
    if unknown:
        raise UserError(f"faultfs corrupt: unknown parameter(s) {', '.join(sorted(unknown))} "
                        "(direction, files, fraction)")
    if "files" in params and not isinstance(params["files"], str):
        params["files"] = list(params["files"])
    return request(node, target, {"op": "corrupt", "seed": seed, **params})


def corrupt_off(node, target: str) -> dict:
    """No more flips; `disarmed` counts the matching operations and the flips
    since the arm. Flipped writes stay on the disk."""
    return request(node, target, {"op": "corrupt-off"})


def flips(node, target: str, path: str | None = None) -> list[dict]:
    """The flips the faultfs made (of one file, by its path under the mount,
    like `/p-0/0.log`): op, path, offset, bit; the newest 1000."""
    return request(node, target, {"op": "flips", **({} if path is None else {"path": path})})["flips"]


def _kill(node, name: str) -> None:
    r = node.remote
    if r.pid_of(name) is not None:
        r.signal(name, "KILL")
        r.wait_stopped(name, timeout=5)


def unmount(node, target: str, timeout: float = 10.0) -> dict:
    """Releases any stall, unmounts, and stops the daemon; says what it did.
    Raises UserError when the mount is still there at the end."""
    r = node.remote
    q = shlex.quote
    name = label_of(target)
    done: dict = {"node": node.name, "target": target}
    if r.pid_of(name) is not None:
        try:
            set_mode(node, target, "passthrough")  # a stalled operation would keep the mount busy
        except UserError as e:
            done["release_error"] = str(e)
    if is_mounted(node, target):
        # Lazy: detached at once; the daemon leaves when the last open file is closed.
        r.run(f"fusermount3 -u -z {q(target)} 2>/dev/null || umount -l {q(target)}", check=False)
        done["unmounted"] = True
    if r.pid_of(name) is not None and not r.wait_stopped(name, timeout=timeout / 2):
        r.signal(name, "TERM")
        if not r.wait_stopped(name, timeout=timeout / 2):
            _kill(node, name)
            done["killed"] = True
    if is_mounted(node, target):  # a daemon gone without its helper: abort the connection
        r.run(f"d=$(awk -v t={q(target)} '$5 == t {{print $3}}' /proc/self/mountinfo | head -n1); "
              f"[ -n \"$d\" ] && echo 1 > /sys/fs/fuse/connections/${{d#*:}}/abort; "
              f"fusermount3 -u -z {q(target)} 2>/dev/null || umount -l {q(target)}", check=False)
        done["aborted"] = True
    r.run(f"rm -f {q(node.run_dir)}/{q(_socket(target))}", check=False)
    if is_mounted(node, target):
        raise UserError(f"faultfs: {node.name}: {target} is still mounted")
    return done


# ----------------------------------------------------------------------------
# Under a system's data dirs, for a run


@dataclass
class SystemMounts:
    """The faultfs mounts of a run, one per node under the system's data dir;
    also a log source for `collect_logs` (its `nodes` and `log_files`)."""

    name: str = "faultfs"
    mounts: dict = field(default_factory=dict)  # node name -> Mount
    _nodes: list = field(default_factory=list)

    def nodes(self, cluster=None) -> list:
        return [n for n in self._nodes if n.name in self.mounts]

    def log_files(self, node) -> list[str]:
        m = self.mounts.get(node.name)
        return [f"{node.log_dir}/{m.daemon}.log"] if m else []

    def to_dict(self) -> dict:
        return {name: {"source": m.source, "target": m.target} for name, m in self.mounts.items()}


def data_dir_of(system, node) -> str:
    if not isinstance(system, DataDir):
        raise UserError(f"disk faults need a system with a fixed data dir; {system.name} has none")
    return system.data_dir(node).rstrip("/")


def mount_system(cluster, system, settings: dict | None = None) -> SystemMounts:
    """A faultfs under `system.data_dir(node)` on every node of the cluster,
    the data itself in `<data_dir>.raw`. Partly mounted is unmounted again."""
    s = validate_settings(settings or {})
    mounts = SystemMounts(_nodes=list(cluster.nodes))

    def one(node):
        target = data_dir_of(system, node)
        m = mount(node, target + RAW_SUFFIX, target, slow_ms=s.get("slow-ms", 100.0), ops=s.get("ops", "all"),
                  corrupt=s.get("corrupt", "reads"), corrupt_files=s.get("corrupt-files", ("segments",)),
                  corrupt_fraction=s.get("corrupt-fraction"), power_loss=s.get("power-loss", "drop"))
        mounts.mounts[node.name] = m
        return m

    try:
        parallel(one, list(cluster.nodes))
    except BaseException:
        unmount_system(cluster, mounts)
        raise
    return mounts


def unmount_system(cluster, mounts: SystemMounts) -> dict:
    """Unmounts every mount of the run; raises UserError naming those left."""
    nodes = [n for n in cluster.nodes if n.name in mounts.mounts]
    errors = {}

    def one(node):
        try:
            return unmount(node, mounts.mounts[node.name].target)
        except UserError as e:
            errors[node.name] = str(e)
            return None

    done = parallel(one, nodes)
    if errors:
        raise UserError(f"faultfs: not unmounted on {', '.join(sorted(errors))}: {next(iter(errors.values()))}")
    return {n.name: d for n, d in zip(nodes, done)}


def release_all(cluster, system) -> dict:
    """Every node's faultfs back to passthrough and its bit flips off (heal);
    node -> what it was (`stall`, `corrupt-reads`, `slow, corrupt-writes`),
    for those that were faulty. Nodes without a faultfs are skipped."""
    def one(node):
        target = data_dir_of(system, node)
        st = status(node, target)
        if st is None:
            return None
        was = []
        if st.get("mode") != "passthrough":
            set_mode(node, target, "passthrough")
            was.append(st.get("mode"))
        armed = (st.get("corrupt") or {}).get("armed")
        if armed:
            corrupt_off(node, target)
            was.append(f"corrupt-{armed.get('direction')}")
        return ", ".join(was) or None

    if not isinstance(system, DataDir):
        return {}
    modes = parallel(one, list(cluster.nodes))
    return {n.name: m for n, m in zip(cluster.nodes, modes) if m}
