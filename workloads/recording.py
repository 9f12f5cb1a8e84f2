"""What the producer and consumer threads of one workload share to record a history.

- `ProcessIds`: unique client process ids over a run (a crashed client's
  successor, and the final readers, draw new ones).
- `Stats`: live counters for a progress display, and the highest offset
  acknowledged per partition (what final reads must reach).
- `Recorder`: the history writer's `record`, which after the workload has
  abandoned its clients (a wedged instance left behind at stop) drops late
  events instead of raising in a client thread.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict
from typing import Any

log = logging.getLogger(__name__)


class ProcessIds:
    """Hands out 0, 1, 2, ... (from `first`), safe across threads."""

    def __init__(self, first: int = 0):
        self._next = first
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            pid = self._next
            self._next += 1
            return pid

    def peek(self) -> int:
        return self._next


class Stats:
    """Counters per (f, type), errors by name, acknowledged offsets; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, Counter] = defaultdict(Counter)
        self._errors: Counter = Counter()
        self._records_read = 0
        self._crashes = 0
        self._processes = 0
        self._thread_failures: list[str] = []
        self._skipped_records = 0
        # Producer clients count their own invokes and acks (lock-free hot path).
        self._producers: list = []

    def add_producer(self, client) -> None:
        """`client` has int `invoked`, `acked` and dict `acked_max` (partition -> offset)."""
        with self._lock:
            self._producers.append(client)

    def op(self, f: str, type_: str, n: int = 1) -> None:
        with self._lock:
            self._ops[f][type_] += n

    def completion(self, f: str, type_: str, error: str | None) -> None:
        with self._lock:
            self._ops[f][type_] += 1
            if error is not None:
                self._errors[error] += 1

    def error(self, name: str) -> None:
        """A client error event that is not an operation's completion."""
        with self._lock:
            self._errors[name] += 1

    def read(self, records: int) -> None:
        with self._lock:
            self._ops["poll"]["ok"] += 1
            self._records_read += records

    def skipped_record(self) -> None:
        with self._lock:
            self._skipped_records += 1

    def process_started(self) -> None:
        with self._lock:
            self._processes += 1

    def crashed(self) -> None:
        with self._lock:
            self._crashes += 1

    def thread_failed(self, what: str) -> None:
        with self._lock:
            self._thread_failures.append(what)

    def acked_offsets(self) -> dict[int, int]:
        """partition -> the highest offset an ok send reported."""
        with self._lock:
            producers = list(self._producers)
        acked: dict[int, int] = {}
        for client in producers:
            for p, o in dict(client.acked_max).items():  # dict() copies atomically under the GIL
                if o > acked.get(p, -1):
                    acked[p] = o
        return acked

    def snapshot(self) -> dict[str, Any]:
        acked = self.acked_offsets()
        with self._lock:
            ops = {f: Counter(c) for f, c in self._ops.items()}
            if self._producers:
                send = ops.setdefault("send", Counter())
                send["invoke"] += sum(c.invoked for c in self._producers)
                send["ok"] += sum(c.acked for c in self._producers)
            return {
                "ops": {f: dict(c) for f, c in sorted(ops.items())},
                "errors": dict(self._errors.most_common()),
                "records_read": self._records_read,
                "processes": self._processes,
                "crashes": self._crashes,
                "acked_offsets": dict(sorted(acked.items())),
                "skipped_records": self._skipped_records,
                "thread_failures": list(self._thread_failures),
            }


class Recorder:
    """`history.record`, plus: once `abandon()` is called, a late event from
    a client left behind is logged and dropped rather than raising."""

    def __init__(self, history) -> None:
        self._history = history
        self._abandoned = False

    def __call__(self, process: int, type_: str, f: str, **fields: Any):
        try:
            return self._history.record(process, type_, f, **fields)
        except RuntimeError:  # the writer is closed
            if self._abandoned:
                log.debug("dropped a late event of process %s: %s %s", process, type_, f)
                return None
            raise

    def abandon(self) -> None:
        self._abandoned = True

    @property
    def abandoned(self) -> bool:
        return self._abandoned
