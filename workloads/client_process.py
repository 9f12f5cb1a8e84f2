"""One client instance as an OS process of its own: `python -m workloads.client_process`.

So that a fault can hit a client as it hits a broker (`kill -9`, a pause),
a group member can run in a child process (workloads/process_slot.py
starts and supervises it). The child is one history process id: it reads
what to be from the first line of its standard input (the workload's
settings, the bootstrap list, its process id and its group), runs that
member until its standard input ends (the workload stopping) or its
instance becomes unusable, and writes every event it records as one JSON
line to its standard output, each with one `write` as it happens: what it
recorded before a `kill -9` is in the pipe, and the parent records it in
the history with the time it reads it. Its own log (librdkafka's too) goes
to its standard error, which the parent passes to its log.

Exit status: 0 after a clean stop, CRASHED when its instance became
unusable (the parent records the `crash` and starts a successor).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any

from workloads.clients import ClientContext
from workloads.config import WorkloadConfig
from workloads.consumer import CLOSE_BOUND_S
from workloads.group import GroupReader
from workloads.recording import ProcessIds, Stats

CRASHED = 3


class EventPipe:
    """The child's `record`: each event one JSON line on a file descriptor, in one write."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()  # the commit callback records from the library's threads too

    def __call__(self, process: int, type_: str, f: str, **fields: Any) -> None:
        line = json.dumps({"process": process, "type": type_, "f": f, **fields}, separators=(",", ":")) + "\n"
        data = line.encode()
        with self._lock:
            while data:
                data = data[os.write(self._fd, data):]

    abandoned = False

    def abandon(self) -> None:
        """Nothing to drop: the parent stops reading once the child is gone."""


def _stop_on_eof(stopping: threading.Event) -> None:
    """The parent closes the child's standard input to stop it."""
    try:
        while sys.stdin.readline():
            pass
    finally:
        stopping.set()


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    order = json.loads(sys.stdin.readline())
    config = WorkloadConfig.from_mapping(order["config"])
    group = next(g for g in config.groups if g.name == order["group"])
    pid = int(order["pid"])
    clients = ClientContext(config, order["bootstrap"], None, EventPipe(sys.stdout.fileno()), Stats(),
                            ProcessIds(pid + 1))
    threading.Thread(target=_stop_on_eof, args=(clients.stopping,), name="stdin", daemon=True).start()
    member = GroupReader(clients, pid, group)
    member.serve(clients.stopping)
    if member.crash_reason is None:
        member.commit_before_leaving()
    member.close(CLOSE_BOUND_S)
    return 0 if member.crash_reason is None else CRASHED


if __name__ == "__main__":
    sys.exit(main())
