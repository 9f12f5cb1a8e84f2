"""`HistoryWriter` appends events to `history.jsonl` from many client threads:
one lock assigns index and time (so both are in file order), a background
thread flushes at least every 100 ms, and `close()` flushes and fsyncs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import orjson

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------
# Writing


class HistoryWriter:
    """Appends events to a JSONL history; safe to call from many threads.

    Each `record` assigns the next index and the time since `origin_ns` under
    one lock, so file order, index order and time order agree.
    """

    FLUSH_INTERVAL_S = 0.1

    def __init__(self, path: str | os.PathLike, origin_ns: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "xb", buffering=1 << 20)
        self._write = self._file.write
        self._lock = threading.Lock()
        self._index = 0
        self._origin = time.monotonic_ns() if origin_ns is None else origin_ns
        self._listeners: list[Callable[[dict], None]] = []
        self._closed = threading.Event()
        self._dirty = False
        self._flusher = threading.Thread(target=self._flush_loop, name="history-flush", daemon=True)
        self._flusher.start()

    @property
    def origin_ns(self) -> int:
        return self._origin

    def now(self) -> int:
        """Nanoseconds since the run started, on the history's clock."""
        return time.monotonic_ns() - self._origin

    def subscribe(self, listener: Callable[[dict], None]) -> None:
        """Call `listener(event)` after each event is recorded (progress displays)."""
        self._listeners.append(listener)

    def record(self, process: int | str, type: str, f: str, **fields: Any) -> dict:
        """Append one event and return it, with its index and time."""
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError(f"history {self.path} is closed")
            event = {"index": self._index, "time": time.monotonic_ns() - self._origin,
                     "process": process, "type": type, "f": f, **fields}
            self._write(orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE))
            self._index += 1
            self._dirty = True
        if self._listeners:
            for listener in self._listeners:
                try:
                    listener(event)
                except Exception:  # a display must never lose an event
                    log.exception("history listener failed")
        return event

    def _flush_loop(self) -> None:
        while not self._closed.wait(self.FLUSH_INTERVAL_S):
            with self._lock:
                if self._dirty and not self._file.closed:
                    self._file.flush()
                    self._dirty = False

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        self._flusher.join(timeout=1)

    def __len__(self) -> int:
        return self._index

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


