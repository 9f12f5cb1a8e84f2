"""A client run as OS processes, one after another, as a supervisor runs them.

`ProcessSlot` is a thread of the workload that starts a client (a group
member, a producer, or a plain consumer) as a child process
(workloads/client_process.py, one history process id), records every
event the child writes, in the
order it writes them, and when the child ends:

- its invocations still open end as `info` (error: how it ended, such as
  `SIGKILL`): a killed client's history is whole up to its last event,
  and nothing after it is invented;
- unless it stopped cleanly, its `crash` is recorded and a successor with
  a new process id is started (a member joins the group again; a producer
  sends values of a block of its own, VALUE_BLOCK values from the first
  value, so that no two processes send one value; a plain consumer resumes
  its partitions where its predecessor's recorded reads and seeks left them).

The workload stopping writes `stop SECONDS` to the child's standard input
(what is left of the workload's stop deadline) and closes it: a member
commits what is due and leaves its group, a producer lets its sends
complete; a child still running past the deadline and CLOSE_BOUND_S is
killed, and one whose harness dies gets SIGTERM (core/processes.py).
`os_pid` is the running child's, for the faults that hit clients, and
`gid` the group id its children run with (infra/client_net.py: a
network cut of this client is a rule on that group id; None unless root);
a producer's slot counts its sends and acknowledgements as a producer
thread does (`Stats.add_producer`), for the final reads' targets.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Iterator

from core.processes import die_with_parent
from infra.client_net import client_gid
from workloads.clients import ClientContext, client_log as library_log
from workloads.config import GroupConfig
from workloads.consumer import CLOSE_BOUND_S, REPLACE_BACKOFF_S

log = logging.getLogger(__name__)
child_log = logging.getLogger("workloads.client_process")
client_log = logging.getLogger(library_log.name + ".process")  # a child's client-library lines, here
_LEVELS = {name: logging.getLevelName(name) for name in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")}
# librdkafka's own printing (rd_kafka_log_print): `%7|1796010020.123|CGRP|rdkafka#consumer-1| text`.
_LIBRDKAFKA_LINE = re.compile(r"^%(?P<level>\d)\|(?P<at>\d+\.\d{3})\|(?P<facility>[^|]*)\|(?P<name>[^|]*)\| ?(?P<text>.*)$")
_SYSLOG_LEVELS = {"0": logging.CRITICAL, "1": logging.CRITICAL, "2": logging.CRITICAL, "3": logging.ERROR,
                  "4": logging.WARNING, "5": logging.INFO, "6": logging.INFO, "7": logging.DEBUG}

MEMBER, PRODUCER, CONSUMER = "member", "producer", "consumer"
VALUE_BLOCK = 1 << 32  # values a producer process may send, from the first of its block
_SLOTS = itertools.count()  # every slot of this harness process its own group id


class ProcessSlot(threading.Thread):
    """One client, as successive child processes (module docstring): a member of
    `group`, a producer (`blocks`: the first values of the blocks to send), or
    a plain `consumer` (`partitions`: those it is assigned, None to subscribe)."""

    def __init__(self, clients: ClientContext, slot: int, group: GroupConfig | None = None,
                 blocks: Iterator[int] | None = None, consumer: bool = False, partitions: list[int] | None = None):
        self.role = MEMBER if group is not None else CONSUMER if consumer else PRODUCER
        super().__init__(name=f"wl-{group.name if group else self.role}-{slot}-proc", daemon=True)
        self.clients = clients
        self.group = group
        self.blocks = blocks
        self.partitions = partitions
        # A plain consumer's positions as its events say (the offset after the last read,
        # or where a seek put it): where its successor starts, as a supervisor would resume it.
        self.positions: dict[int, int] = {}
        self.pid: int | None = None  # the running child's history process id
        self.os_pid: int | None = None
        self.gid = client_gid(next(_SLOTS))
        self._child: subprocess.Popen | None = None
        self._lock = threading.Lock()
        # A producer's counts, as Stats reads them of a producer client.
        self.invoked = self.acked = 0
        self.acked_max: dict[int, int] = {}
        self.open_sends: set[int] = set()
        if self.role == PRODUCER:
            clients.stats.add_producer(self)

    @property
    def outstanding(self) -> int:
        return len(self.open_sends)

    @property
    def what(self) -> str:
        return f"group {self.group.name} member" if self.group is not None else self.role

    def run(self) -> None:
        try:
            while not self.clients.stopping.is_set():
                self._one_child()
                if not self.clients.stopping.is_set():
                    self.clients.stopping.wait(REPLACE_BACKOFF_S)
        except Exception as e:
            log.exception("%s process slot failed", self.what)
            self.clients.stats.thread_failed(f"{self.name}: {type(e).__name__}: {e}")

    # -- one child

    def _one_child(self) -> None:
        clients = self.clients
        pid = clients.new_pid()
        order = {"config": clients.config.to_dict(), "bootstrap": clients.bootstrap, "pid": pid, "role": self.role}
        if self.role == MEMBER:
            order["group"] = self.group.name
        elif self.role == CONSUMER:
            order["partitions"], order["start"] = self.partitions, self.positions
        else:
            order["first_value"] = next(self.blocks)
        # Its own session (a Ctrl-C to the harness is the harness's to handle), and SIGTERM
        # when this thread's process dies, even of a kill -9: no client outlives its run.
        child = subprocess.Popen([sys.executable, "-m", "workloads.client_process"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                 preexec_fn=die_with_parent(os.getpid()), group=self.gid)
        try:
            child.stdin.write((json.dumps(order) + "\n").encode())
            child.stdin.flush()
        except OSError:  # it died at once: its exit status says how, below
            pass
        with self._lock:
            self.pid, self.os_pid, self._child = pid, child.pid, child
        threading.Thread(target=_pass_log, args=(child.stderr, pid), name=f"{self.name}-log", daemon=True).start()
        threading.Thread(target=self._stop_when_asked, args=(child,), name=f"{self.name}-stop", daemon=True).start()
        self.open_sends = set()
        open_ops: Counter = Counter()
        for line in child.stdout:
            if not line.endswith(b"\n"):  # cut by its death mid-write: never recorded
                log.warning("%s process %d: a cut last event dropped", self.what, pid)
                break
            event = json.loads(line)
            type_, f = event.pop("type"), event.pop("f")
            event.pop("process", None)
            if f == "send":
                self._count_send(type_, event)
            else:
                open_ops[f] += 1 if type_ == "invoke" else -1
                if self.role == CONSUMER and type_ == "ok" and f in ("poll", "seek"):
                    self._follow(f, event)
            clients.record(pid, type_, f, **event)
            if f != "send":
                clients.stats.op(f, type_)
        code = child.wait()
        with self._lock:
            self.os_pid = self._child = None
        ended = f"{signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        for value in sorted(self.open_sends):
            clients.record(pid, "info", "send", value=value, error=ended)
            clients.stats.completion("send", "info", ended)
        self.open_sends = set()
        for f, n in open_ops.items():
            for _ in range(max(0, n)):
                clients.record(pid, "info", f, error=ended)
        if code != 0:
            log.info("%s process %d (pid %d) ended: %s", self.what, pid, child.pid, ended)
            clients.record_crash(pid)

    def _follow(self, f: str, event: dict) -> None:
        """A plain consumer's positions after an ok poll or seek of its child."""
        if f == "seek":
            if isinstance(event.get("partition"), int) and isinstance(event.get("offset"), int):
                self.positions[event["partition"]] = event["offset"]
            return
        for r in event.get("records") or ():
            p, o = r.get("partition"), r.get("offset")
            if isinstance(p, int) and isinstance(o, int) and o + 1 > self.positions.get(p, -1):
                self.positions[p] = o + 1

    def _count_send(self, type_: str, event: dict) -> None:
        """A producer's send event, counted as Stats counts a producer client's."""
        value = event.get("value")
        if type_ == "invoke":
            self.open_sends.add(value)
            self.invoked += 1
            return
        self.open_sends.discard(value)
        if type_ == "ok":
            self.acked += 1
            p, o = event.get("partition"), event.get("offset")
            if isinstance(p, int) and isinstance(o, int) and o > self.acked_max.get(p, -1):
                self.acked_max[p] = o
        else:
            self.clients.stats.completion("send", type_, event.get("error"))

    def _stop_when_asked(self, child: subprocess.Popen) -> None:
        """The workload stopping: tell the child the time it has, and kill it if it has not gone in time."""
        clients = self.clients
        while child.poll() is None and not clients.stopping.wait(0.2):
            pass
        if child.poll() is not None:
            return
        left = max(0.0, clients.stop_deadline - time.monotonic())
        try:
            child.stdin.write(f"stop {left:.3f}\n".encode())
            child.stdin.close()
        except OSError:
            pass
        bound = min(CLOSE_BOUND_S, left) + 1.0 if self.role != PRODUCER else left + 1.0
        try:
            child.wait(bound)
        except subprocess.TimeoutExpired:
            log.warning("%s process %d did not stop within %.1f s: killed", self.what, self.pid, bound)
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
    """The child's log lines into this process's log: the client library's
    at their own level under its logger (so a run's clients.log keeps its
    debug lines, and harness.log counts its warnings), the rest at INFO.
    The library's lines come through Python's logging (`NAME LEVEL text`),
    or as librdkafka prints them itself (`%LEVEL|EPOCH.MS|FACILITY|NAME| text`),
    which keeps the time it logged them."""
    for raw in stream:
        line = raw.decode(errors="replace").rstrip()
        printed = _LIBRDKAFKA_LINE.match(line)
        if printed:
            logged = time.strftime("%H:%M:%S", time.gmtime(float(printed["at"]))) + printed["at"][-4:]
            client_log.log(_SYSLOG_LEVELS.get(printed["level"], logging.INFO), "process %d: logged %s UTC: %s [%s] %s",
                           pid, logged, printed["facility"], printed["name"], printed["text"])
            continue
        name, _, rest = line.partition(" ")
        level, _, message = rest.partition(" ")
        if name == library_log.name and level in _LEVELS:
            client_log.log(_LEVELS[level], "process %d: %s", pid, message)
        else:
            child_log.info("process %d: %s", pid, line)
