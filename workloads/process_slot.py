"""A group member run as OS processes, one after another, as a supervisor runs them.

`ProcessSlot` is a thread of the workload that starts a member as a child
process (workloads/client_process.py, one history process id), records
every event the child writes, in the order it writes them, and when the
child ends:

- its invocations still open end as `info` (error: how it ended, such as
  `SIGKILL`): a killed client's history is whole up to its last event,
  and nothing after it is invented;
- unless it stopped cleanly, its `crash` is recorded and a successor with
  a new process id is started, which joins the group again.

The workload stopping closes the child's standard input (it commits what
is due, leaves the group and exits); a child still running past the
workload's stop deadline and CLOSE_BOUND_S is killed. `os_pid` is the
running child's, for the faults that hit clients.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

from workloads.clients import ClientContext
from workloads.config import GroupConfig
from workloads.consumer import CLOSE_BOUND_S, REPLACE_BACKOFF_S

log = logging.getLogger(__name__)
child_log = logging.getLogger("workloads.client_process")


class ProcessSlot(threading.Thread):
    """One member of `group`, as successive child processes (module docstring)."""

    def __init__(self, clients: ClientContext, slot: int, group: GroupConfig):
        super().__init__(name=f"wl-{group.name}-{slot}-proc", daemon=True)
        self.clients = clients
        self.group = group
        self.pid: int | None = None  # the running child's history process id
        self.os_pid: int | None = None
        self._child: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self.started_children = 0

    def run(self) -> None:
        try:
            while not self.clients.stopping.is_set():
                self._one_child()
                if not self.clients.stopping.is_set():
                    self.clients.stopping.wait(REPLACE_BACKOFF_S)
        except Exception as e:
            log.exception("group %s: member process slot failed", self.group.name)
            self.clients.stats.thread_failed(f"{self.name}: {type(e).__name__}: {e}")

    # -- one child

    def _one_child(self) -> None:
        clients = self.clients
        pid = clients.new_pid()
        child = subprocess.Popen([sys.executable, "-m", "workloads.client_process"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        order = {"config": clients.config.to_dict(), "bootstrap": clients.bootstrap, "pid": pid,
                 "group": self.group.name}
        try:
            child.stdin.write((json.dumps(order) + "\n").encode())
            child.stdin.flush()
        except OSError:  # it died at once: its exit status says how, below
            pass
        with self._lock:
            self.pid, self.os_pid, self._child = pid, child.pid, child
            self.started_children += 1
        threading.Thread(target=_pass_log, args=(child.stderr, pid), name=f"{self.name}-log", daemon=True).start()
        stopper = threading.Thread(target=self._stop_when_asked, args=(child,), name=f"{self.name}-stop",
                                   daemon=True)
        stopper.start()
        open_sends: set[int] = set()
        open_ops: Counter = Counter()
        for line in child.stdout:
            if not line.endswith(b"\n"):  # cut by its death mid-write: never recorded
                log.warning("group %s member process %d: a cut last event dropped", self.group.name, pid)
                break
            event = json.loads(line)
            type_, f = event.pop("type"), event.pop("f")
            event.pop("process", None)
            if f == "send":
                (open_sends.add if type_ == "invoke" else open_sends.discard)(event.get("value"))
            else:
                open_ops[f] += 1 if type_ == "invoke" else -1
            clients.record(pid, type_, f, **event)
            clients.stats.op(f, type_)
        code = child.wait()
        with self._lock:
            self.os_pid = self._child = None
        ended = f"{signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        for value in sorted(open_sends):
            clients.record(pid, "info", "send", value=value, error=ended)
        for f, n in open_ops.items():
            for _ in range(max(0, n)):
                clients.record(pid, "info", f, error=ended)
        if code != 0:
            log.info("group %s member process %d (pid %d) ended: %s", self.group.name, pid, child.pid, ended)
            clients.record_crash(pid)

    def _stop_when_asked(self, child: subprocess.Popen) -> None:
        """The workload stopping: close the child's input, and kill it if it has not gone in time."""
        clients = self.clients
        while child.poll() is None and not clients.stopping.wait(0.2):
            pass
        if child.poll() is not None:
            return
        try:
            child.stdin.close()
        except OSError:
            pass
        bound = min(CLOSE_BOUND_S, max(0.0, clients.stop_deadline - time.monotonic())) + 1.0
        try:
            child.wait(bound)
        except subprocess.TimeoutExpired:
            log.warning("group %s member process %d did not stop within %.1f s: killed", self.group.name,
                        self.pid, bound)
            child.kill()

    # -- for the faults that hit clients

    def signal(self, sig: int) -> int | None:
        """Send `sig` to the running child; its history process id, or None if none runs."""
        with self._lock:
            child, pid = self._child, self.pid
        if child is None or child.poll() is not None:
            return None
        child.send_signal(sig)
        return pid


def _pass_log(stream, pid: int) -> None:
    for line in stream:
        child_log.info("process %d: %s", pid, line.decode(errors="replace").rstrip())
