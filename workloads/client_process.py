"""One client instance as an OS process of its own: `python -m workloads.client_process`.

So that a fault can hit a client as it hits a broker (`kill -9`, a pause),
a group member, a producer or a plain consumer can run in a child process
(workloads/process_slot.py starts and supervises it). The child is one
history process id: it reads what to be from the first line of its
standard input (the workload's settings, the bootstrap list, its process
id, and its group, a producer's first value, or a plain consumer's
partitions and where to start them), runs that client until
its standard input says stop (with the seconds left to finish) or ends,
or its instance becomes unusable, and writes every event it records as
one JSON line to its standard output, each burst in one `write` as it
happens: what it recorded before a `kill -9` is in the pipe, and the
parent records it in the history with the time it reads it. Its own log
(librdkafka's too) goes to its standard error, which the parent passes to
its log (the client library's lines under the library's logger, so that
a run asking for librdkafka's `debug` keeps them in its clients.log; then
librdkafka prints its lines itself, each with the time it logged it).

A producer whose instance must be replaced (an indeterminate send, a
fatal error) stops sending, lets what it has in flight complete for
`retire_flush_s` (the rest is purged: `info`) and exits; its supervisor
starts a successor, where a producer thread switches at once.

Exit status: 0 after a clean stop, CRASHED when its instance became
unusable (the parent records the `crash` and starts a successor).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from workloads.clients import ClientContext
from workloads.config import WorkloadConfig
from workloads.consumer import CLOSE_BOUND_S, Reader, read_on
from workloads.group import GroupReader
from workloads.producer import PURGE_GRACE_S, ProducerClient, ProducerSlot
from workloads.recording import ProcessIds, Stats

CRASHED = 3


class EventPipe:
    """The child's `record`: each event one JSON line on a file descriptor, in one write."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()  # the commit callback records from the library's threads too

    def __call__(self, process: int, type_: str, f: str, **fields: Any) -> None:
        self.lines([{"process": process, "type": type_, "f": f, **fields}])

    abandoned = False

    def abandon(self) -> None:
        """Nothing to drop: the parent stops reading once the child is gone."""

    def lines(self, rows: list[dict]) -> None:
        """Events in one write (one, or a producer's burst)."""
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
        with self._lock:
            while data:
                data = data[os.write(self._fd, data):]


class PipeHistory:
    """The history writer's send paths a producer uses, as lines of the pipe."""

    def __init__(self, pipe: EventPipe) -> None:
        self.pipe = pipe

    def sends_invoked(self, process: int, keys: list[int], values: list[int]) -> None:
        self.pipe.lines([{"process": process, "type": "invoke", "f": "send", "key": k, "value": v}
                         for k, v in zip(keys, values)])

    def sends_acked(self, process: int, acks: list[int]) -> None:
        self.pipe.lines([{"process": process, "type": "ok", "f": "send", "value": v, "partition": p, "offset": o}
                         for v, p, o in zip(acks[0::3], acks[1::3], acks[2::3])])


def _stop_when_told(clients: ClientContext) -> None:
    """The parent writes `stop SECONDS` (the time left to finish) and closes the child's input."""
    try:
        for line in sys.stdin:
            word, _, seconds = line.strip().partition(" ")
            if word == "stop":
                clients.stop_deadline = time.monotonic() + float(seconds or 0)
                break
    finally:
        clients.stopping.set()


class _OneInstance(ProducerSlot):
    """A producer slot that ends with its instance: replacing it is the supervisor's."""

    crash_reason: str | None = None

    def _replace(self, old: ProducerClient) -> ProducerClient:
        self.crash_reason = old.tainted
        self.clients.stop_deadline = min(self.clients.stop_deadline,
                                         time.monotonic() + self.clients.config.retire_flush_s + PURGE_GRACE_S)
        self.clients.stopping.set()
        return old


def _plain_consumer(clients: ClientContext, pid: int, order: dict) -> int:
    """A plain consumer (workloads/consumer.py's ConsumerSlot, one instance):
    its partitions from where the order says, read and committed until told
    to stop or its instance is unusable."""
    partitions = order.get("partitions")
    start = {int(p): int(o) for p, o in (order.get("start") or {}).items()}
    reader = Reader(clients, pid, subscribe=partitions is None, partitions=partitions, start=start,
                    commit_interval_s=clients.config.commit_interval_s)
    read_on(reader, clients)
    reader.close(min(CLOSE_BOUND_S, max(0.0, clients.stop_deadline - time.monotonic())))
    return 0 if reader.crash_reason is None else CRASHED


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    order = json.loads(sys.stdin.readline())
    config = WorkloadConfig.from_mapping(order["config"])
    pid = int(order["pid"])
    pipe = EventPipe(sys.stdout.fileno())
    clients = ClientContext(config, order["bootstrap"], PipeHistory(pipe), pipe, Stats(), ProcessIds(pid + 1))
    if config.producer_settings.get("debug") or config.consumer_settings.get("debug"):
        # librdkafka's debug log asked for: printed by librdkafka itself on stderr, when
        # and where it logs, with its own timestamp (not served late by a poll after a
        # blocking commit); the parent keeps the lines in the run's clients.log.
        clients.logger = None
    threading.Thread(target=_stop_when_told, args=(clients,), name="stdin", daemon=True).start()
    if order.get("role") == "producer":
        slot = _OneInstance(clients, 0, itertools.count(int(order["first_value"])), ProducerClient(clients, pid))
        slot.run()
        return 0 if slot.crash_reason is None else CRASHED
    if order.get("role") == "consumer":
        return _plain_consumer(clients, pid, order)
    group = next(g for g in config.groups if g.name == order["group"])
    member = GroupReader(clients, pid, group)
    member.serve(clients.stopping)
    if member.crash_reason is None:
        member.commit_before_leaving()
    member.close(CLOSE_BOUND_S)
    return 0 if member.crash_reason is None else CRASHED


if __name__ == "__main__":
    sys.exit(main())
