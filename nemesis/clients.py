"""`kill` and `pause` of a client: targets `consumers`, `producers`, `clients`.

The producers and the consumer groups' members can run as OS processes of
their own (a run's `client-processes`, workloads/process_slot.py). With the
target `consumers` the fault hits one of the members, with `producers` one
of the producers, with `clients` any of them, drawn by the seed (the
step's first pick, modulo their number), instead of a broker:

- kill: SIGKILL of the member's process; verified when it is gone. Its
  supervisor, like a service manager, starts a successor (a new process id
  that joins the group again), so the fault's end starts nothing: it
  verifies that a member runs in that place again;
- pause: SIGSTOP; verified when the process is in state T; its end sends
  SIGCONT and verifies it left that state.

The history's value names the client's process id (`clients`), its role
(`role`: member or producer), a member's group, and its OS pid. The heal
resumes every client process.
"""

from __future__ import annotations

import signal

from core.waiting import holds_within
from nemesis.fault import Context, FaultError, Step, verdict

CONSUMERS, PRODUCERS, CLIENTS = "consumers", "producers", "clients"
CLIENT_TARGETS = (CONSUMERS, PRODUCERS, CLIENTS)
_ROLES = {CONSUMERS: ("member",), PRODUCERS: ("producer",), CLIENTS: ("member", "producer")}


def processes(ctx: Context, target: str) -> list:
    """The clients running as processes (their supervisors) that `target` names, in a fixed order."""
    found = [s for s in (ctx.clients.client_processes() if ctx.clients is not None else [])
             if s.role in _ROLES[target]]
    if not found:
        raise FaultError(f"{target}: no such client runs as a process of its own "
                         "(a run needs client-processes = true, and [[groups]] for consumers)")
    return found


def _chosen(ctx: Context, step: Step):
    found = processes(ctx, step.mode)
    return found[(step.picks[0] if step.picks else 0) % len(found)]


def _what(member) -> dict:
    return {"role": member.role, **({"group": member.group.name} if member.group is not None else {})}


def os_state(os_pid: int) -> str | None:
    """A process's state letter (R, S, T, ...) from /proc; None when it is gone."""
    try:
        with open(f"/proc/{os_pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _signalled(ctx: Context, step: Step, sig: int, key: str, took) -> tuple:
    """Send `sig` to the client the step draws and verify `took(os_pid)` within
    5 s: (the history's value, the client's supervisor, its process id, its OS pid)."""
    member = _chosen(ctx, step)
    os_pid = member.os_pid
    pid = member.signal(sig)
    if pid is None:
        raise FaultError(f"{step.mode}: {member.what} {member.name} runs no process now")
    ok = holds_within(lambda: took(os_pid), 5)
    return {"clients": [pid], **_what(member), "os_pid": os_pid, "verified": {"ok": ok, key: {str(pid): ok}}}, \
        member, pid, os_pid


def start_kill(ctx: Context, step: Step) -> tuple[dict, dict]:
    value, member, pid, _ = _signalled(ctx, step, signal.SIGKILL, "process_gone",
                                       lambda os_pid: os_state(os_pid) in (None, "Z"))
    return value, {"member": member, "killed": pid}


def after_kill(ctx: Context, state: dict) -> dict:
    """A successor runs in the killed member's place (its supervisor started it)."""
    member = state["member"]
    running = holds_within(lambda: member.os_pid is not None and member.pid != state["killed"], 15)
    return {"clients": [member.pid] if running else [], **_what(member),
            "verified": {"ok": running, "successor_running": running}}


def start_pause(ctx: Context, step: Step) -> tuple[dict, dict]:
    value, member, pid, os_pid = _signalled(ctx, step, signal.SIGSTOP, "stopped",
                                            lambda os_pid: os_state(os_pid) == "T")
    return value, {"member": member, "paused": pid, "os_pid": os_pid}


def stop_pause(ctx: Context, state: dict) -> dict:
    member = state["member"]
    member.signal(signal.SIGCONT)
    resumed = holds_within(lambda: os_state(state["os_pid"]) != "T", 5)
    return {"clients": [state["paused"]], **_what(member),
            "verified": {"ok": resumed, "resumed": {str(state["paused"]): resumed}}}


def sweep(ctx: Context) -> dict:
    """Every client process resumed (a paused member would hold its partitions)."""
    if ctx.clients is None:
        return {}
    resumed = [m.pid for m in ctx.clients.client_processes() if m.signal(signal.SIGCONT) is not None]
    return {"clients_resumed": resumed} if resumed else {}


def describe(value: dict, stopping: bool, yes_no: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """`consumer process 7 of group g1`, `producer process 3`, `verified:
    process gone`; `yes_no`: the probe's key -> its words when it held and when not."""
    pids = value.get("clients") or []
    role = "producer" if value.get("role") == "producer" else "consumer"
    what = f"{role} process {' '.join(str(p) for p in pids) or '(none)'}"
    if value.get("group"):
        what += f" of group {value['group']}"
    v = value.get("verified") if isinstance(value.get("verified"), dict) else {}
    words = [yes if (all(x.values()) if isinstance(x, dict) else bool(x)) else no
             for key, (yes, no) in yes_no.items() if (x := v.get(key)) is not None]
    return what, verdict(value, "; ".join(words))
