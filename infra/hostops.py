"""Small helpers for the control machine itself: commands, /proc, mounts, keys.

Everything here acts on this machine (not on a node) and is shared by the
local provider and `harness clean`, which must find what a killed run left by
its names alone: namespaces, links, tagged iptables rules, tagged processes
and mounts under the state root.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from core.errors import UserError
from infra.state import DAEMON_ENV


class HostCommandError(UserError):
    """A command on the control machine failed; names the command."""


def sh(argv: list[str], check: bool = True, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        res = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise HostCommandError(f"`{argv[0]}` is not installed on this machine (make setup installs it)") from None
    except subprocess.TimeoutExpired:
        raise HostCommandError(f"`{shlex.join(argv)}` timed out after {timeout:g}s") from None
    if check and res.returncode != 0:
        detail = " ".join((res.stderr or res.stdout).split())[:300] or f"exit status {res.returncode}"
        raise HostCommandError(f"`{shlex.join(argv)[:160]}` failed: {detail}")
    return res


def missing_tools(tools: list[str]) -> list[str]:
    extra_path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [t for t in tools if shutil.which(t, path=extra_path) is None]


# ----------------------------------------------------------------------
# Network objects


def list_netns() -> list[str]:
    try:
        return sorted(p.name for p in Path("/run/netns").iterdir())
    except OSError:
        return []


def list_links() -> list[str]:
    res = sh(["ip", "-j", "link", "show"], check=False)
    try:
        return [link["ifname"] for link in json.loads(res.stdout or "[]")]
    except ValueError:
        return []


def host_prefixes() -> list[str]:
    """Every IPv4 prefix this machine routes or owns (default route excluded)."""
    out = []
    for argv in (["ip", "-4", "-j", "route", "show", "table", "all"], ["ip", "-4", "-j", "addr", "show"]):
        res = sh(argv, check=False)
        try:
            data = json.loads(res.stdout or "[]")
        except ValueError:
            continue
        for item in data:
            if "dst" in item and item["dst"] not in ("default", ""):
                out.append(item["dst"])
            for a in item.get("addr_info", []):
                out.append(f"{a['local']}/{a.get('prefixlen', 32)}")
    return out


def iptables_rules(tag_fragment: str) -> list[str]:
    """The host's filter-table rules (as `iptables -S` lines) whose comment contains the fragment."""
    if missing_tools(["iptables"]):
        return []
    res = sh(["iptables", "-w", "-S"], check=False)
    return [line for line in res.stdout.splitlines() if line.startswith("-A ") and tag_fragment in line]


def delete_iptables_rule(rule_line: str) -> None:
    """Deletes a rule given as its `iptables -S` line (`-A CHAIN ...`)."""
    args = shlex.split(rule_line)
    args[0] = "-D"
    sh(["iptables", "-w", *args], check=False)


# ----------------------------------------------------------------------
# Processes


@dataclass
class ProcInfo:
    pid: int
    comm: str
    netns_inode: int | None
    daemon_tag: str | None


def scan_processes() -> list[ProcInfo]:
    """Every process with its network namespace inode and HARNESS_DAEMON tag."""
    out = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net")
            inode = int(ns[ns.index("[") + 1: -1])
        except (OSError, ValueError):
            inode = None
        tag = None
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(DAEMON_ENV.encode() + b"="):
                        tag = item.split(b"=", 1)[1].decode("utf-8", "replace")
                        break
        except OSError:
            pass
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        out.append(ProcInfo(pid, comm, inode, tag))
    return out


def netns_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kill_and_wait(pids: list[int], timeout: float = 5.0) -> list[int]:
    """SIGKILLs the processes (CONT first, for stopped ones); returns those still alive."""
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if is_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if is_alive(p)]
    return alive


# ----------------------------------------------------------------------
# Mounts


@dataclass
class MountInfo:
    mount_point: str
    fstype: str
    device: str  # major:minor


def _unescape(path: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \ooo octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mounts_under(root: Path) -> list[MountInfo]:
    """Mounts at or below `root`, deepest first."""
    root_s = str(root).rstrip("/")
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5:
            continue
        mp = _unescape(fields[4])
        fstype = right.split()[0] if right else ""
        if mp == root_s or mp.startswith(root_s + "/"):
            out.append(MountInfo(mp, fstype, fields[2]))
    out.sort(key=lambda m: m.mount_point.count("/"), reverse=True)
    return out


def abort_fuse(m: MountInfo) -> None:
    """Aborts a FUSE connection so processes blocked on it wake up."""
    minor = m.device.split(":")[-1]
    path = Path(f"/sys/fs/fuse/connections/{minor}/abort")
    try:
        path.write_text("1")
    except OSError:
        pass


def unmount(m: MountInfo) -> bool:
    if m.fstype.startswith("fuse") and not missing_tools(["fusermount3"]):
        if sh(["fusermount3", "-u", "-z", m.mount_point], check=False).returncode == 0:
            return True
    return sh(["umount", "-l", m.mount_point], check=False).returncode == 0


def remove_tree(path: Path) -> bool:
    """Removes a directory, refusing if anything is still mounted below it."""
    if not path.exists():
        return False
    if mounts_under(path):
        raise HostCommandError(f"{path} still has mounts below it; not removing it")
    shutil.rmtree(path, ignore_errors=True)
    return True


# ----------------------------------------------------------------------
# SSH keys


def write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def generate_ed25519(path: Path) -> str:
    """Writes an OpenSSH ed25519 private key (0600); returns the public key line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    write_private(path, private)
    line = public.decode()
    Path(str(path) + ".pub").write_text(line + "\n")
    return line
