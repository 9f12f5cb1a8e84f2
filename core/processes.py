"""Child processes: those that must not outlive the harness process that
started them, a process's descendants, and the priority of a session.

`die_with_parent` is the `preexec_fn` for such a child: the kernel sends it
SIGTERM when its parent dies (PR_SET_PDEATHSIG), even of a `kill -9`. The
signal follows the parent *thread* that forked it, so such children are
started from a thread that lives as long as they should (the main thread).

`set_session_nice` is for a process that leads a session of its own (started
with setsid, or by sshd) and should yield the CPU: where the kernel groups
processes by session (autogroups: `kernel.sched_autogroup_enabled`, on in
Debian's kernels), it first shares the CPU among sessions, each equally,
and a nice value weighs only within its session. A niced process alone in
its session would take a full share; the session's own nice value, in
/proc/PID/autogroup (`session_nice` reads it), is what weighs against the
others.
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> Callable[[], None]:
    """A `preexec_fn` that asks for SIGTERM when process `parent` dies; `parent`
    is the starting process's pid (os.getpid()), read before the fork."""
    def pre_exec() -> None:  # in the child, before exec: no Python-level locks are touched
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the prctl: act as if told
            os.kill(os.getpid(), signal.SIGTERM)
    return pre_exec


def descendants(root: int) -> list[int]:
    """Every process below `root` (children, their children, ...), from /proc's
    parent links; `root` itself not included."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


# A shell command's prefix that runs the command niced by N, its session too
# (`set_session_nice`): for a command alone in a session made for it (sshd's,
# docker exec's).
SESSION_NICE_PREFIX = "sh -c 'echo {n} >/proc/self/autogroup 2>/dev/null; exec nice -n {n} \"$@\"' niced"


def session_nice(pid: int | str = "self") -> int | None:
    """The nice value of process `pid`'s session; None where the kernel has no
    autogroups or the process is gone."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return int(f.read().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return None


def set_session_nice(nice: int, pid: int | str = "self") -> bool:
    """Give the session of process `pid` the weight of `nice` against other
    sessions (module docstring); False where the kernel has no autogroups or
    refuses (raising a session's priority needs root)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
        return True
    except OSError:
        return False
