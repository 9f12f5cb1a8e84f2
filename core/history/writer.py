"""`HistoryWriter` appends events to `history.jsonl` from many client threads,
at a cost to them of a struct pack and a buffer append per event.

Formatting JSON costs about a microsecond per event, as much as the rest of
a producer's loop per send, and in one Python process it holds the GIL
whatever thread does it. So the client threads only pack each event into a
shared in-memory buffer (one atomic `bytearray.extend` under the GIL, in the
order the events happened), a shipper thread hands the buffer to a writer
*process* every 50 ms through a pipe, and that process numbers the events,
formats them as JSON lines and writes them to the file at once.

Durability: what the writer process has received is in the file (the page
cache) moments later, and `close()` fsyncs it. If the harness is killed with
`kill -9`, the writer process reads the pipe to its end, writes what it got,
fsyncs and exits: what is lost is what was still in the client's buffer, at
most one shipping interval. A cut last line (the writer process itself
killed mid-write) is what the JSONL reader already drops with a warning.

Time: each event's time is read when it is recorded, before it is appended;
a thread switch between the two can put a later-appended event a moment
earlier in time, so the writer process raises such a time to its
predecessor's: file order, index order and time order agree.

`python -m core.history.writer` is the writer process (it reads the frames
on its standard input and writes to a file descriptor it is handed).
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------
# The frames a client's event becomes: a kind byte and the time, then the
# kind's fields. The two hottest events (a send's invoke and its ok) are all
# integers; any other event carries its JSON without index and time.

SEND_INVOKE, SEND_OK, JSON_EVENT = 1, 2, 3
_SEND_INVOKE = struct.Struct("<Bqqqq")    # kind, time, process, key, value
_SEND_OK = struct.Struct("<Bqqqqq")       # kind, time, process, value, partition, offset
_JSON_EVENT = struct.Struct("<BqI")       # kind, time, length of the JSON that follows
_KIND_SIZES = {SEND_INVOKE: _SEND_INVOKE.size, SEND_OK: _SEND_OK.size}

_SEND_INVOKE_LINE = b'{"index":%d,"time":%d,"process":%d,"type":"invoke","f":"send","key":%d,"value":%d}\n'
_SEND_OK_LINE = (b'{"index":%d,"time":%d,"process":%d,"type":"ok","f":"send","value":%d,'
                 b'"partition":%d,"offset":%d}\n')


class HistoryWriter:
    """Appends events to a new JSONL history; safe to call from many threads.

    `record` is the general method; `send_invoked` and `send_acked` record
    the two events a producer makes per send, cheaper. After `close()` every
    one of them raises RuntimeError.
    """

    SHIP_INTERVAL_S = 0.05

    def __init__(self, path: str | os.PathLike, origin_ns: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._origin = time.monotonic_ns() if origin_ns is None else origin_ns
        with open(self.path, "xb") as file:  # a history is never appended to: fail here, in the caller
            self._process = subprocess.Popen(
                [sys.executable, "-m", "core.history.writer", "--fd", str(file.fileno()),
                 "--origin", str(self._origin)],
                stdin=subprocess.PIPE, pass_fds=(file.fileno(),), cwd=_PROJECT_ROOT)
        self._pipe = self._process.stdin
        self._buffer = bytearray()
        self._extend = self._buffer.extend
        self._closed = False
        self._ship_lock = threading.Lock()  # the shipper and close() take turns draining the buffer
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._shipper = threading.Thread(target=self._ship_loop, name="history-ship", daemon=True)
        self._shipper.start()

    @property
    def origin_ns(self) -> int:
        return self._origin

    def now(self) -> int:
        """Nanoseconds since the run started, on the history's clock."""
        return time.monotonic_ns() - self._origin

    def record(self, process: int | str, type: str, f: str, **fields: Any) -> None:
        """Append one event (its index and time are given as it is recorded)."""
        if self._closed:
            raise RuntimeError(f"history {self.path} is closed")
        body = orjson.dumps({"process": process, "type": type, "f": f, **fields})
        self._extend(_JSON_EVENT.pack(JSON_EVENT, time.monotonic_ns(), len(body)) + body)

    def send_invoked(self, process: int, key: int, value: int) -> None:
        """`record(process, "invoke", "send", key=key, value=value)`, cheaper."""
        if self._closed:
            raise RuntimeError(f"history {self.path} is closed")
        try:
            self._extend(_SEND_INVOKE.pack(SEND_INVOKE, time.monotonic_ns(), process, key, value))
        except struct.error:  # beyond int64: the general form keeps it exact
            self.record(process, "invoke", "send", key=key, value=value)

    def send_acked(self, process: int, value: int, partition: int, offset: int) -> None:
        """`record(process, "ok", "send", value=..., partition=..., offset=...)`, cheaper."""
        if self._closed:
            raise RuntimeError(f"history {self.path} is closed")
        try:
            self._extend(_SEND_OK.pack(SEND_OK, time.monotonic_ns(), process, value, partition, offset))
        except struct.error:
            self.record(process, "ok", "send", value=value, partition=partition, offset=offset)

    def _ship(self) -> None:
        """Hand what the buffer holds to the writer process. Each extend is
        atomic, so a copy holds whole frames; deleting exactly the copied
        prefix keeps whatever was appended meanwhile."""
        with self._ship_lock:
            if self._error is not None:
                return
            data = bytes(self._buffer)
            if not data:
                return
            del self._buffer[:len(data)]
            try:
                self._pipe.write(data)
                self._pipe.flush()
            except OSError as e:  # the writer process is gone: close() says so
                self._error = e
                log.error("history writer process is gone (%s): %d bytes of events not written", e, len(data))

    def _ship_loop(self) -> None:
        while not self._stop.wait(self.SHIP_INTERVAL_S):
            self._ship()

    def flush(self) -> None:
        """Hand everything recorded so far to the writer process."""
        self._ship()

    def close(self) -> None:
        """Refuse further events, write everything recorded, fsync, and wait
        for the writer process. Raises RuntimeError if it could not write it all."""
        with self._ship_lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self._shipper.join()
        self._ship()  # what came in between the last ship and `_closed`
        try:
            self._pipe.close()
        except OSError as e:
            self._error = self._error or e
        status = self._process.wait()
        if self._error is not None or status != 0:
            raise RuntimeError(f"history {self.path}: the writer process failed "
                               f"({self._error or f'exit status {status}'}); the file may lack the last events")

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# The writer process is started from the project's root, so `-m` finds this module.
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


# --------------------------------------------------------------------------
# The writer process


class _Formatter:
    """Turns a stream of frames into JSON lines, numbering them from 0."""

    def __init__(self, origin_ns: int):
        self.origin = origin_ns
        self.index = 0
        self.last_time = 0
        self.pending = b""

    def lines(self, data: bytes) -> bytes:
        """The lines of every whole frame in `pending + data`; the rest waits."""
        buf = self.pending + data if self.pending else data
        out = []
        pos, end = 0, len(buf)
        index, last = self.index, self.last_time
        while pos < end:
            kind = buf[pos]
            size = _KIND_SIZES.get(kind)
            if size is None:
                if kind != JSON_EVENT:
                    raise ValueError(f"unknown frame kind {kind} at byte {pos}")
                if pos + _JSON_EVENT.size > end:
                    break
                _, t, length = _JSON_EVENT.unpack_from(buf, pos)
                size = _JSON_EVENT.size + length
                if pos + size > end:
                    break
                t = max(t - self.origin, last)
                body = buf[pos + _JSON_EVENT.size:pos + size]
                out.append(b'{"index":%d,"time":%d,%s\n' % (index, t, body[1:]))
            else:
                if pos + size > end:
                    break
                if kind == SEND_INVOKE:
                    _, t, process, key, value = _SEND_INVOKE.unpack_from(buf, pos)
                    t = max(t - self.origin, last)
                    out.append(_SEND_INVOKE_LINE % (index, t, process, key, value))
                else:
                    _, t, process, value, partition, offset = _SEND_OK.unpack_from(buf, pos)
                    t = max(t - self.origin, last)
                    out.append(_SEND_OK_LINE % (index, t, process, value, partition, offset))
            index += 1
            last = t
            pos += size
        self.index, self.last_time = index, last
        self.pending = buf[pos:]
        return b"".join(out)


def _read_pipe(pipe, received: queue.SimpleQueue) -> None:
    """Everything the pipe delivers, then None at its end."""
    while data := pipe.read(1 << 20):
        received.put(data)
    received.put(None)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main(argv: list[str] | None = None) -> int:
    """Read frames from stdin until it closes, writing each batch's lines at once; fsync at the end."""
    parser = argparse.ArgumentParser(description="the history's writer process (started by HistoryWriter)")
    parser.add_argument("--fd", type=int, required=True, help="the history file, open for writing")
    parser.add_argument("--origin", type=int, required=True, help="the run's start on the monotonic clock, ns")
    args = parser.parse_args(argv)
    # Ctrl-C and SIGTERM are for the harness, which closes the pipe when it is done; a harness
    # killed outright closes it too, and this process then writes what it received.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A thread empties the pipe as fast as it fills, so that the harness's buffer never waits
    # on formatting: what is in this process survives a harness killed outright.
    received: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_read_pipe, args=(sys.stdin.buffer.raw, received), daemon=True).start()
    formatter = _Formatter(args.origin)
    while (data := received.get()) is not None:
        while len(data) < 1 << 20 and not received.empty():  # a backlog is formatted in large batches
            more = received.get()
            if more is None:
                received.put(None)
                break
            data += more
        lines = formatter.lines(data)
        if lines:
            _write_all(args.fd, lines)
    os.fsync(args.fd)
    os.close(args.fd)
    if formatter.pending:  # a frame cut short: only a harness killed mid-write leaves one
        print(f"history writer: {len(formatter.pending)} bytes of a cut event at the end dropped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
