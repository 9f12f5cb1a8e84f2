"""`kill`, `pause` and `partition` of a client: targets `consumers`, `producers`, `clients`.

The producers, the consumer groups' members and the plain consumers can
run as OS processes of their own (a run's `client-processes`,
workloads/process_slot.py). With the target `consumers` the fault hits one
of the groups' members, with `producers` one of the producers, with
`clients` any of them or a plain consumer, drawn by the seed (the step's
first pick, modulo their number), instead of a broker:

- kill: SIGKILL of the member's process; verified when it is gone. Its
  supervisor, like a service manager, starts a successor (a new process id
  that joins the group again), so the fault's end starts nothing: it
  verifies that a member runs in that place again;
- pause: SIGSTOP; verified when the process is in state T; its end sends
  SIGCONT and verifies it left that state.

- partition (targets consumers and producers; shapes isolate-consumer and
  isolate-producer): the client cut off the network on the control host
  (infra/client_net.py: every packet its processes send dropped), it and
  the successors its supervisor starts meanwhile, as a client host the
  network cut off; verified when the client's TCP probes of the brokers'
  ports time out, and after its end when they answer again. (`clients`
  with a partition keeps its own meaning: nemesis/partition.py's
  cut-clients.)

The history's value names the client's process id (`clients`), its role
(`role`: member or producer), a member's group, and its OS pid (a cut: its
group id). The heal resumes every client process and lifts every client's
cut.
"""

from __future__ import annotations

import signal

from core.waiting import holds_within
from infra import client_net
from infra.nodes import parallel
from infra.system import BrokerSystem
from nemesis.fault import Context, FaultError, Step, verdict

CONSUMERS, PRODUCERS, CLIENTS = "consumers", "producers", "clients"
CLIENT_TARGETS = (CONSUMERS, PRODUCERS, CLIENTS)
_ROLES = {CONSUMERS: ("member",), PRODUCERS: ("producer",), CLIENTS: ("member", "producer", "consumer")}
# A partition's shapes that cut one client off the network -> the target drawing it.
CUT_SHAPES = {"isolate-consumer": CONSUMERS, "isolate-producer": PRODUCERS}
MAX_CUT_PROBES = 3  # brokers' ports a cut client probes


def processes(ctx: Context, target: str) -> list:
    """The clients running as processes (their supervisors) that `target` names, in a fixed order."""
    found = [s for s in (ctx.clients.client_processes() if ctx.clients is not None else [])
             if s.role in _ROLES[target]]
    if not found:
        raise FaultError(f"{target}: no such client runs as a process of its own "
                         "(a run needs client-processes = true, and [[groups]] for consumers)")
    return found


def _chosen(ctx: Context, step: Step, target: str | None = None):
    found = processes(ctx, target or step.mode)
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


def broker_addresses(ctx: Context) -> list[tuple[str, int]]:
    """The brokers' (host, port) the clients bootstrap from, as the system lists them."""
    found = []
    for entry in (ctx.system.bootstrap().split(",") if isinstance(ctx.system, BrokerSystem) else []):
        host, _, port = entry.strip().rpartition(":")
        if host and port.isdigit():
            found.append((host.strip("[]"), int(port)))
    return found


def _probe_cut(gid: int, brokers: list[tuple[str, int]], healed: bool) -> dict:
    reached = parallel(lambda b: client_net.can_connect(gid, *b), brokers)
    return {"ok": bool(brokers) and all(r == healed for r in reached),
            "probes": {f"{h}:{p}": ("reached" if r else "cut") for (h, p), r in zip(brokers, reached)}}


def start_cut(ctx: Context, step: Step) -> tuple[dict, dict]:
    """The client the step draws cut off the network (module docstring)."""
    member = _chosen(ctx, step, CUT_SHAPES[step.mode])
    if member.gid is None:
        raise FaultError(f"{step.mode}: cutting a client off the network needs the harness to run as root")
    client_net.cut(member.gid)
    brokers = broker_addresses(ctx)[:MAX_CUT_PROBES]
    value = {"mode": step.mode, "clients": [member.pid] if member.pid is not None else [], **_what(member),
             "gid": member.gid, "verified": _probe_cut(member.gid, brokers, healed=False)}
    return value, {"client_cut": member.gid, "member": member, "brokers": brokers}


def stop_cut(ctx: Context, state: dict) -> dict:
    member, gid = state["member"], state["client_cut"]
    removed = client_net.restore(gid)
    return {"clients": [member.pid] if member.pid is not None else [], **_what(member), "gid": gid,
            "healed": {"control": removed}, "verified": _probe_cut(gid, state["brokers"], healed=True)}


def sweep_cuts() -> dict:
    """Every client's cut lifted: how many rules there were."""
    removed = client_net.restore_all()
    return {"client_cuts_removed": removed} if removed else {}


def describe_cut(value: dict, stopping: bool) -> tuple[str, str]:
    """`consumer process 7 of group g1 cut off the network`, `verified: 3 brokers cut`."""
    what, _ = describe({k: v for k, v in value.items() if k != "verified"}, stopping, {})
    v = value.get("verified") if isinstance(value.get("verified"), dict) else {}
    probes = list((v.get("probes") or {}).values()) if isinstance(v.get("probes"), dict) else []
    if stopping:
        answered = sum(1 for x in probes if x == "reached")
        return f"{what}: cut lifted", verdict(value, f"{answered} of {len(probes)} brokers answer again")
    cut = sum(1 for x in probes if x == "cut")
    return f"{what} cut off the network", verdict(value, f"{cut} of {len(probes)} brokers cut")


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
