"""`HistoryWriter` appends events to `history.jsonl` from many client threads,
at a cost to them of an array of int64 and a buffer append per burst of a
producer's invokes or poll's acknowledgements (a JSON dump per other event).

Formatting JSON costs as much per event as the rest of a producer's loop
costs per send, and in one Python process it holds the GIL whatever thread
does it. So the client threads only pack each event into an
in-memory buffer of its kind (one atomic `bytearray.extend` under the GIL):
a send's invokes and oks as groups of int64, the events of one call at one
time (`sends_invoked` for a burst of invokes, `sends_acked` for the
acknowledgements one poll served, `send_invoked` and `send_acked` for
one), any other event as its
JSON without index and time (`record`). A shipper thread hands the three
buffers to a writer *process* every 50 ms through a pipe, and that process
orders the events by time, numbers them, formats them as JSON lines and
writes them to the file at once.

Order: every event's time is read as it is recorded, and the file is in time
order (a stable sort of each batch; ties keep the order of the kinds, then of
the appends). Before taking the buffers the shipper reads the clock (the
batch's *cut*): whatever was appended by then with a time up to the cut is in
the batch, and the writer writes only events up to the cut, holding back the
later ones for the next batch, where they sort among the rest. An event whose
thread read the clock before a cut but appended after the buffers were taken
(a thread switch between the two) arrives a batch late with a time already
passed: the writer raises it to the last time written, so time never
decreases in file order. It still comes before anything that depends on it:
whatever happened after its append read the clock after the cut.

The writer process formats a batch at once, not one event by one in Python:
numpy unpacks the groups into rows (`_group_rows`), orders them and writes
the lines of a send's events as rows of a byte matrix kept from batch to
batch, four digits at a time from a table, every number of a kind's lines
in the same columns (a number whose width varies between lines is cut out
of the shorter ones; the digits that all lines share are written once); one
Arrow cast of binary views puts the lines of all kinds in file order
(`_Batcher`, `_Lines`, `_number_views`).
Only JSON events (polls, the nemesis, errors: few at saturation) and sends
with a negative number take a Python step each. Whole 4 KB blocks go to the
file with O_DIRECT where the file system takes it (`_Output`): the kernel
copies no page cache for them, which was where the writer's kernel CPU
went.

Cost: recorded against unrecorded throughput of the workload's producer
loop is what the workload recorder bench measures (`python -m
bench.workload_overhead`, docs/benchmarks.md, "Workload recorder
overhead"); each step that brought it there, and what was not kept, is in
docs/decisions.md, "Recorded off the client's thread".

Durability: what the writer process has received is in the file (the page
cache) moments later, and `close()` fsyncs it. If the harness is killed with
`kill -9`, the writer process reads the pipe to its end, writes what it got,
fsyncs and exits: what is lost is what was still in the client's buffers, at
most one shipping interval. A cut last line (the writer process itself
killed mid-write) is what the JSONL reader already drops with a warning.
`close()` seals the buffers before its last shipping, so that an event
recorded after that raises instead of being left behind unsaid.

`python -m core.history.writer` is the writer process (it reads batches on
its standard input and writes to a file descriptor it is handed).
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------
# What the client's events become: a send's invokes and its oks are groups of
# int64 in a buffer of their kind, each group the events one call recorded at
# one time: its head (time, process, n), then n invokes as their n keys and
# their n values, or n oks as (value, partition, offset) each, as the
# producer's lists already hold them (no rows are built in the client's
# thread). Any other event is its time, the length of its JSON (without index
# and time), and the JSON, in a third buffer. The shipper sends the three at
# once as a batch: its cut, the three lengths, then the buffers.

_GROUP_HEAD = 3                        # int64s of a group's head: time, process, n
_JSON_HEAD = struct.Struct("<qq")      # time, length of the JSON that follows
_BATCH_HEAD = struct.Struct("<qqqq")   # cut, bytes of invokes, of oks, of JSON events that follow
_NEVER = (1 << 63) - 1                 # the cut of the last batch: everything is written


class HistoryWriter:
    """Appends events to a new JSONL history; safe to call from many threads.

    `record` is the general method; `sends_invoked(process, keys, values)`
    (a burst's invokes, at one time), `sends_acked(process, acks)` (one
    poll's acknowledgements, at one time), `send_invoked(process, key,
    value)` and `send_acked(process, value, partition, offset)` record the events a
    producer makes per send, cheaper (functions made per writer, see
    `_send_recorders`). After `close()` every one of them raises RuntimeError.
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
                stdin=subprocess.PIPE, pass_fds=(file.fileno(),), cwd=_PROJECT_ROOT, env=_WRITER_ENV)
        self._pipe = self._process.stdin
        try:  # a pipe of 1 MB (Linux's default most) rather than 64 KB: fewer, larger reads
            fcntl.fcntl(self._pipe.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        # invokes, oks, JSON events: each append is one extend, atomic under the GIL
        self._buffers = (bytearray(), bytearray(), bytearray())
        self._append_json = self._buffers[2].extend
        # Set by close(): views of the buffers, so that they cannot grow any more: an event
        # appended after the last shipping raises BufferError, not silently left behind.
        self._sealed: list[memoryview] | None = None
        self._closed = False
        self._ship_lock = threading.Lock()  # the shipper and close() take turns draining the buffers
        self._error: BaseException | None = None
        self.send_invoked, self.send_acked, self.sends_invoked, self.sends_acked = _send_recorders(
            self._buffers[0].extend, self._buffers[1].extend, self.record, self.path)
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
        t = time.monotonic_ns()
        body = orjson.dumps({"process": process, "type": type, "f": f, **fields})
        try:
            self._append_json(_JSON_HEAD.pack(t, len(body)) + body)
        except BufferError:  # sealed: closed since the check above
            raise RuntimeError(f"history {self.path} is closed") from None

    def _ship(self, last: bool = False) -> None:
        """Hand what the buffers hold to the writer process, with the time
        read just before taking them (the cut). Each extend is atomic, so a
        copy holds whole events; deleting exactly the copied prefix keeps
        whatever was appended meanwhile. The `last` shipping seals the
        buffers first, then takes all of them."""
        with self._ship_lock:
            if self._error is not None or self._sealed is not None:
                return
            if last:
                self._sealed = [memoryview(buffer) for buffer in self._buffers]
                cut, parts = _NEVER, [bytes(view) for view in self._sealed]
            else:
                cut, parts = time.monotonic_ns(), []
                for buffer in self._buffers:
                    data = bytes(buffer)
                    del buffer[:len(data)]
                    parts.append(data)
            # Sent even when empty: its cut releases what the writer held back from the last one.
            batch = b"".join((_BATCH_HEAD.pack(cut, *map(len, parts)), *parts))
            try:
                self._pipe.write(batch)
                self._pipe.flush()
            except OSError as e:  # the writer process is gone: close() says so
                self._error = e
                log.error("history writer process is gone (%s): %d bytes of events not written", e, len(batch))

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
        self._ship(last=True)  # what came in since the last shipping; nothing can come after
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


def _send_recorders(append_invoke, append_ok, record, path: Path):
    """A writer's `send_invoked`, `send_acked`, `sends_invoked` and
    `sends_acked`: functions rather than methods, each one array of int64
    (`array.fromlist`, a C loop over the lists the producer has) and one
    append, with nothing looked up on the way (the producer's loop calls
    `sends_invoked` once per burst and `sends_acked` once per poll). A group
    with a number beyond int64 takes the general form, `record`, which keeps
    it exact; a closed writer's sealed buffer refuses the append."""

    def sends_invoked(process: int, keys: list[int], values: list[int], _now=time.monotonic_ns,
                      _array=array) -> None:
        """`record(process, "invoke", "send", key=key, value=value)` for each
        pair, all at one time (a producer's burst: one clock read, one append)."""
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        if not values:
            return
        try:
            group = _array("q", (_now(), process, len(values)))
            group.fromlist(keys)
            group.fromlist(values)
        except (OverflowError, TypeError):  # a number beyond int64
            for key, value in zip(keys, values):
                record(process, "invoke", "send", key=key, value=value)
            return
        try:
            append_invoke(group)
        except BufferError:
            raise RuntimeError(f"history {path} is closed") from None

    def sends_acked(process: int, acks: list[int], _now=time.monotonic_ns, _array=array) -> None:
        """`record(process, "ok", "send", value=..., partition=..., offset=...)`
        for each triple of `acks` (values, partitions and offsets interleaved),
        all at one time: a producer's acknowledgements served by one poll."""
        if len(acks) % 3:
            raise ValueError(f"{len(acks)} numbers are not (value, partition, offset) triples")
        if not acks:
            return
        try:
            group = _array("q", (_now(), process, len(acks) // 3))
            group.fromlist(acks)
        except (OverflowError, TypeError):  # a number beyond int64
            for i in range(0, len(acks), 3):
                record(process, "ok", "send", value=acks[i], partition=acks[i + 1], offset=acks[i + 2])
            return
        try:
            append_ok(group)
        except BufferError:
            raise RuntimeError(f"history {path} is closed") from None

    def send_invoked(process: int, key: int, value: int) -> None:
        """One send's invoke: `sends_invoked` of one."""
        sends_invoked(process, [key], [value])

    def send_acked(process: int, value: int, partition: int, offset: int) -> None:
        """One send's ok: `sends_acked` of one."""
        sends_acked(process, [value, partition, offset])

    return send_invoked, send_acked, sends_invoked, sends_acked


# The writer process is started from the project's root, so `-m` finds this module.
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
# Its batches' arrays (megabytes each) come from glibc's heap and go back to it, not to the
# kernel: fresh pages for every batch cost as much CPU as formatting it.
_WRITER_ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


# --------------------------------------------------------------------------
# The writer process

# The two integer kinds: their columns in a row (time is column 0), the line
# each row becomes, as literal pieces and the names of the numbers between
# them, and whether a group lays its numbers out column by column (an invoke
# group's keys, then its values) or event by event.
_KINDS = (
    (("time", "process", "key", "value"),
     (b'{"index":', "index", b',"time":', "time", b',"process":', "process",
      b',"type":"invoke","f":"send","key":', "key", b',"value":', "value", b"}\n"), True),
    (("time", "process", "value", "partition", "offset"),
     (b'{"index":', "index", b',"time":', "time", b',"process":', "process",
      b',"type":"ok","f":"send","value":', "value", b',"partition":', "partition", b',"offset":', "offset", b"}\n"),
     False),
)
_JSON = len(_KINDS)  # the kind number of JSON events
_DIGITS4 = np.frombuffer(b"".join(b"%04d" % i for i in range(10000)), "<u4")  # "0000".."9999" as 4 bytes
_TEN = [10 ** i for i in range(20)]


class _Batcher:
    """Turns the shipper's stream of batches into JSON lines, numbering them from 0.

    `lines(data)` takes any piece of the stream and returns the lines of the
    batches it completes; `finish()` the lines still held back (the stream
    ended). Per batch: the rows of each kind, and the events held back from
    the batch before, are put in time order (a stable sort: ties keep the
    order of the kinds, then of arrival), those up to the batch's cut are
    numbered and written, the rest held back. A time below the last one
    written is raised to it.
    """

    def __init__(self, origin_ns: int):
        self.origin = origin_ns
        self.index = 0
        self.last_time = 0
        self._chunks: list = []  # the stream received and not yet made into lines
        self._size = 0
        self._need: int | None = None  # the size of the batch the chunks begin, once its head is in
        # held back from the last batch: each integer kind's rows, and JSON events as (times, bodies)
        self._held: list[np.ndarray] = [np.empty((0, len(columns)), np.int64) for columns, *_ in _KINDS]
        self._held_json: tuple[np.ndarray, list[bytes]] = (np.empty(0, np.int64), [])
        self._matrices = [_Matrix() for _ in _KINDS]  # each kind's byte matrix, kept from batch to batch

    @property
    def pending(self) -> int:
        """Bytes of a batch received only in part."""
        return self._size

    def lines(self, data) -> list:
        """The lines (bytes-like pieces, in order) of every batch that `data` completes."""
        if len(data):
            self._chunks.append(data)
            self._size += len(data)
        out = []
        while self._size >= (self._need or _BATCH_HEAD.size):
            buf = self._joined()
            if self._need is None:
                cut, *sizes = _BATCH_HEAD.unpack_from(buf)
                if min(sizes) < 0 or any(size % 8 for size in sizes[:len(_KINDS)]):
                    raise ValueError(f"not a batch's head: cut {cut}, sizes {sizes}")
                self._need = _BATCH_HEAD.size + sum(sizes)
                continue
            cut, *sizes = _BATCH_HEAD.unpack_from(buf)
            start, rows = _BATCH_HEAD.size, []
            for size, (columns, _, by_column) in zip(sizes, _KINDS):
                rows.append(_group_rows(buf[start:start + size], len(columns), by_column))
                start += size
            out += self._batch(cut, rows, _json_events(buf, start, self._need))
            self._chunks = [buf[self._need:]] if self._size > self._need else []
            self._size -= self._need
            self._need = None
        return out

    def _joined(self) -> memoryview:
        if len(self._chunks) > 1:
            self._chunks = [b"".join(self._chunks)]
        return memoryview(self._chunks[0])

    def finish(self) -> list:
        """The lines of everything held back: the stream has ended."""
        empty = [np.empty((0, len(columns)), np.int64) for columns, *_ in _KINDS]
        return self._batch(_NEVER, empty, (np.empty(0, np.int64), []))

    def _batch(self, cut: int, rows: list[np.ndarray], json: tuple[np.ndarray, list[bytes]]) -> list:
        # Each kind's rows, those held back first, in time order.
        kinds = []
        for held, new in zip(self._held, rows):
            r = np.concatenate((held, new)) if len(held) else new
            if len(r) > 1 and (r[1:, 0] < r[:-1, 0]).any():
                r = r[np.argsort(r[:, 0], kind="stable")]
            kinds.append(r)
        json_times = np.concatenate((self._held_json[0], json[0]))
        json_bodies = self._held_json[1] + json[1]
        if len(json_times) > 1 and (json_times[1:] < json_times[:-1]).any():
            order = np.argsort(json_times, kind="stable")
            json_times, json_bodies = json_times[order], [json_bodies[i] for i in order.tolist()]
        # All of them in time order; those up to the cut are written now.
        times = np.concatenate([r[:, 0] for r in kinds] + [json_times])
        order = np.argsort(times, kind="stable")
        ordered = times[order]
        written = int(np.searchsorted(ordered, cut, side="right"))
        if not written:
            self._held, self._held_json = kinds, (json_times, json_bodies)
            return []
        rank = np.empty(len(order), np.int64)  # each event's place in file order
        rank[order] = np.arange(len(order))
        out_times = ordered[:written] - self.origin
        out_times[0] = max(out_times[0], self.last_time)
        np.maximum.accumulate(out_times, out=out_times)
        self.last_time = int(out_times[-1])
        lines = _Lines(written)
        at = 0
        for kind, r in enumerate(kinds):
            n = int(np.count_nonzero(rank[at:at + len(r)] < written))  # a prefix: the kind is in time order
            if n:
                ranks, block = rank[at:at + n], r[:n]
                names, pieces, _ = _KINDS[kind]
                by_column = np.ascontiguousarray(block.T)
                columns = dict(zip(names, by_column))
                bounds = dict(zip(names, zip(by_column.min(axis=1).tolist(), by_column.max(axis=1).tolist())))
                columns["index"] = self.index + ranks  # both in file order, so their bounds are their ends
                columns["time"] = out_times[ranks]
                bounds["index"] = (int(columns["index"][0]), int(columns["index"][-1]))
                bounds["time"] = (int(columns["time"][0]), int(columns["time"][-1]))
                lines.add_numbers(ranks, pieces, columns, bounds, self._matrices[kind])
            self._held[kind] = r[n:]
            at += len(r)
        n = int(np.count_nonzero(rank[at:] < written))
        if n:
            ranks = rank[at:at + n]
            lines.add_texts(ranks, [b'{"index":%d,"time":%d,%b\n' % (i, t, body[1:]) for i, t, body in
                                    zip((self.index + ranks).tolist(), out_times[ranks].tolist(), json_bodies)])
        self._held_json = (json_times[n:], json_bodies[n:])
        self.index += written
        return [lines.text()]


def _group_rows(data: memoryview, width: int, by_column: bool) -> np.ndarray:
    """The rows (time, process, then the events' numbers: `width` columns in
    all) of one integer kind's groups, which `data` holds whole."""
    ints = np.frombuffer(data, np.int64)  # native, as the client's `array("q")` wrote them
    numbers = width - 2
    heads = []
    at, end, view = 0, len(ints), data.cast("q")
    while at < end:  # a group per call of the client's: a burst's invokes, a poll's oks
        n = view[at + 2] if at + _GROUP_HEAD <= end else -1
        if n < 0 or at + _GROUP_HEAD + numbers * n > end:
            raise ValueError(f"a group of {n} sends does not fit its batch")
        heads.append(at)
        at += _GROUP_HEAD + numbers * n
    head = np.array(heads, np.int64)
    count = ints[head + 2]
    rows = np.empty((int(count.sum()), width), np.int64)
    rows[:, 0], rows[:, 1] = np.repeat(ints[head], count), np.repeat(ints[head + 1], count)
    # Each column's numbers, in order: a mask from +1 where a group's numbers of
    # it start to -1 where they end (event by event: all of a group's numbers).
    spans = [(0, numbers)] if not by_column else [(j, j + 1) for j in range(numbers)]
    for j, (lo, hi) in enumerate(spans):
        edges = np.zeros(end + 1, np.int8)
        edges[head + _GROUP_HEAD + lo * count] = 1
        edges[head + _GROUP_HEAD + hi * count] -= 1
        taken = ints[np.cumsum(edges[:end], dtype=np.int8).view(bool)]
        if by_column:
            rows[:, 2 + j] = taken
        else:
            rows[:, 2:] = taken.reshape(-1, numbers)
    return rows


def _json_events(buf, start: int, end: int) -> tuple[np.ndarray, list[bytes]]:
    """The times and JSON bodies of the JSON events in buf[start:end]."""
    times, bodies = [], []
    while start < end:
        t, length = _JSON_HEAD.unpack_from(buf, start)
        start += _JSON_HEAD.size
        if length < 2 or start + length > end:
            raise ValueError(f"a JSON event of {length} bytes does not fit its batch")
        times.append(t)
        bodies.append(bytes(buf[start:start + length]))
        start += length
    return np.array(times, np.int64), bodies


class _Lines:
    """A batch's lines, put together in file order from the pieces each kind
    made, without copying them in between: each line is one or more pieces
    of a byte matrix or text, as views in Arrow's binary-view layout (16
    bytes: the piece's length, then up to 12 bytes of it, or its first 4
    bytes, the buffer and the offset), which one cast to plain binary copies
    into the text to write, in order.
    """

    def __init__(self, n: int):
        self.n = n
        self.buffers: list = []
        self.pieces: list[tuple[np.ndarray, np.ndarray]] = []  # (line numbers, views (lines, pieces, 4))

    def add_numbers(self, ranks: np.ndarray, pieces: tuple, columns: dict[str, np.ndarray],
                    bounds: dict[str, tuple[int, int]], matrix: "_Matrix") -> None:
        """The lines `pieces` makes of the rows of `columns` (whose least and
        greatest numbers are `bounds`), to be lines `ranks`; `matrix` holds them."""
        if any(least < 0 for least, _ in bounds.values()):  # those rows are formatted one by one
            names = [p for p in pieces if not isinstance(p, bytes)]
            negative = np.zeros(len(ranks), bool)
            for name in names:
                negative |= columns[name] < 0
            rows = np.flatnonzero(negative)
            self.add_texts(ranks[rows], [
                b"".join(p if isinstance(p, bytes) else b"%d" % row[names.index(p)] for p in pieces)
                for row in zip(*(columns[name][rows].tolist() for name in names))])
            keep = np.flatnonzero(~negative)
            if not len(keep):
                return
            ranks, columns = ranks[keep], {name: x[keep] for name, x in columns.items()}
            bounds = {name: (int(x.min()), int(x.max())) for name, x in columns.items()}
        self.pieces.append((ranks, _number_views(pieces, columns, bounds, matrix, len(self.buffers))))
        self.buffers.append(matrix.storage)

    def add_texts(self, ranks: np.ndarray, lines: list[bytes]) -> None:
        """`lines` (each longer than 12 bytes), to be lines `ranks`."""
        text = b"".join(lines)
        lengths = np.fromiter(map(len, lines), np.int64, len(lines))
        views = np.empty((len(lines), 1, 4), np.int32)
        views[:, 0, 0] = lengths
        views[:, 0, 1] = _PREFIX_OF_LINE
        views[:, 0, 2] = len(self.buffers)
        views[:, 0, 3] = np.cumsum(lengths) - lengths
        self.buffers.append(text)
        self.pieces.append((ranks, views))

    def text(self) -> pa.Buffer:
        """All the lines, in order, as one text."""
        (ranks, views), *others = self.pieces
        if not others and isinstance(self.buffers[0], bytes) and (ranks == np.arange(self.n)).all():
            return pa.py_buffer(self.buffers[0])  # text lines only, already in order
        if not others and (ranks == np.arange(self.n)).all():
            in_order = views
        else:  # every line as many views as the line of most pieces; the rest empty
            in_order = np.empty((self.n, max(v.shape[1] for _, v in self.pieces), 4), np.int32)
            for ranks, views in self.pieces:
                in_order[ranks, :views.shape[1]] = views
                in_order[ranks, views.shape[1]:] = 0
        in_order = in_order.reshape(-1, 4)
        array = pa.Array.from_buffers(pa.binary_view(), len(in_order),
                                      [None, pa.py_buffer(in_order), *map(pa.py_buffer, self.buffers)])
        text = array.cast(pa.binary())
        end = int(np.frombuffer(text.buffers()[1], np.int32, 1, (text.offset + len(text)) * 4)[0])
        return text.buffers()[2][:end]


_PREFIX_OF_LINE = int.from_bytes(b'{"in', "little", signed=True)  # every line's first 4 bytes


class _Matrix:
    """A kind's byte matrix, kept from batch to batch: while the lines have
    the same template, only the numbers are written again."""

    def __init__(self) -> None:
        self.template = b""
        self.rows = 0
        self.storage = np.empty(0, np.uint8)
        self.row_starts = np.empty(0, np.int32)
        self.written: set[int] = set()  # the byte positions of a row that hold numbers, not the template

    def rows_of(self, template: bytes, n: int, written: set[int]) -> np.ndarray:
        """Room for n lines of `template` (12 bytes more after them: a short
        piece's view copies 12 bytes from its start), with the template in
        place but where the numbers will be `written` (byte positions)."""
        width = len(template)
        if width != len(self.template) or n > self.rows:
            self.rows = max(n, 2 * self.rows if width == len(self.template) else n)
            self.storage = np.zeros(self.rows * width + 12, np.uint8)
            self.storage[:self.rows * width].reshape(self.rows, width)[:] = np.frombuffer(template, np.uint8)
            self.row_starts = np.arange(0, self.rows * width, width, dtype=np.int32)
        else:  # put back what the last batch wrote, and the template's changes, where nothing is written now
            matrix = self.storage[:self.rows * width].reshape(self.rows, width)
            changed = np.flatnonzero(np.frombuffer(template, np.uint8) != np.frombuffer(self.template, np.uint8))
            for j in (self.written | set(changed.tolist())) - written:
                matrix[:, j] = template[j]
        self.template, self.written = template, written
        return self.storage[:n * width].reshape(n, width)


def _number_views(pieces: tuple, columns: dict[str, np.ndarray], bounds: dict[str, tuple[int, int]],
                  kept: _Matrix, buffer: int) -> np.ndarray:
    """The lines `pieces` makes of each row of `columns` (numbers >= 0, the
    least and greatest of each in `bounds`), written in the byte matrix
    `kept`, a row per line with each number in the same columns in every
    row; returned as each line's pieces, views into it (`buffer`: its number).

    A number whose width is the same in every row is written right-aligned,
    the digits that every row shares only once, in the template. One whose
    width differs is written left-aligned in the room of the widest (times
    a power of ten; below 10,000 from a table), and the rest of the room is
    left out of the line: the line is then more than one piece, one ending
    after the number's digits, the next starting at the literal after its
    room. Digits are written four at a time from a table, one 4-byte word
    per row (a word that reaches beyond its number's room writes over the
    literal there, which is then put back).
    """
    n = len(columns["index"])
    template, numbers, begins, stops = bytearray(), [], [0], []
    for piece in pieces:
        if isinstance(piece, bytes):
            template += piece
            continue
        x, (least, most) = columns[piece], bounds[piece]
        digits = b"%d" % most
        start, end = len(template), len(template) + len(digits)
        template += digits
        if len(b"%d" % least) == len(digits):
            varying = len(digits)  # digits from the right that differ between rows
            while varying and least // _TEN[varying - 1] == most // _TEN[varying - 1]:
                varying -= 1
            numbers.append((x, start, end, varying))
        elif most < 10000:
            numbers.append((x, start, end, None))  # left-aligned from a table
            stops.append(start + _WIDTH4[x])
            begins.append(end)
        else:
            narrowest = len(b"%d" % least)
            width = np.full(n, narrowest, np.int64)  # each row's number of digits
            for j in range(narrowest, len(digits)):
                width += x >= _TEN[j]
            numbers.append((x.astype(np.uint64) * _TEN_U64[len(digits) - width], start, end, len(digits)))
            stops.append(start + width)
            begins.append(end)
    stops.append(len(template))
    template = bytes(template)
    written = set()
    for x, start, end, varying in numbers:
        written.update(range(start, end) if varying is None else range(max(start, end - 4 * -(-varying // 4)), end))
    matrix = kept.rows_of(template, n, written)
    width, storage = len(template), kept.storage
    literal = np.ones(width + 4, bool)  # which bytes of a row are the template's literal pieces
    for x, start, end, varying in numbers:
        literal[start:end] = False
        if varying is None:
            np.ndarray((n,), "<u4", storage, start, (width,))[...] = _LEFT4[x]
            for j in range(start + 4 - 1, end - 1, -1):  # the literal the word wrote over
                if j >= end:
                    matrix[:, j] = template[j]
            continue
        words = -(-varying // 4)
        rest = x
        for i in range(1, words + 1):
            if i < words or end - start > 4 * words:  # digits above these: divide them off
                above = rest // 10000
                digits, rest = rest - above * 10000, above
            else:
                digits = rest
            np.ndarray((n,), "<u4", storage, end - 4 * i, (width,))[...] = _DIGITS4[digits]
        for j in range(end - 4 * words, start):  # the literal the word wrote over
            matrix[:, j] = template[j]
    views = np.empty((n, len(begins), 4), np.int32)
    for k, (begin, stop) in enumerate(zip(begins, stops)):
        length = stop - begin
        view = views[:, k]
        view[:, 0] = length
        if np.min(length) > 12:  # in the matrix: its first 4 bytes, the buffer, the offset
            view[:, 1] = (int.from_bytes(template[begin:begin + 4], "little", signed=True)
                          if literal[begin:begin + 4].all() else np.ndarray((n,), "<i4", storage, begin, (width,)))
            view[:, 2] = buffer
            np.add(kept.row_starts[:n], begin, out=view[:, 3])
        else:  # in the view: 12 bytes, zeros after the piece
            inline = np.ndarray((n, 12), np.uint8, storage, begin, (width, 1)).copy()
            for j in range(int(np.min(length)), 12):
                inline[:, j] *= length > j
            if np.max(length) > 12:  # some pieces of this place are long, some short
                long = np.empty((n, 3), np.int32)
                long[:, 0] = np.ndarray((n,), "<i4", storage, begin, (width,))
                long[:, 1] = buffer
                np.add(kept.row_starts[:n], begin, out=long[:, 2])
                view[:, 1:] = np.where((length > 12)[:, None], long, inline.view("<i4"))
            else:
                view[:, 1:] = inline.view("<i4")
    return views


_TEN_U64 = np.array(_TEN, np.uint64)
# 0..9999 left-aligned in 4 bytes (the rest zeros), and their widths
_LEFT4 = np.frombuffer(b"".join(b"%-4d" % i for i in range(10000)).replace(b" ", b"0"), "<u4")
_WIDTH4 = np.array([len(str(i)) for i in range(10000)], np.int64)


def _read_pipe(pipe, received: queue.SimpleQueue) -> None:
    """Everything the pipe delivers, then None at its end."""
    while data := pipe.read(1 << 20):
        received.put(data)
    received.put(None)


class _Output:
    """The history file, written past the page cache where it can be.

    Whole 4 KB blocks are written with O_DIRECT: the kernel neither copies
    them into its page cache nor writes them back later, CPU that a small
    machine's brokers would otherwise lose (docs/decisions.md, "Recorded off
    the client's thread"). What is left after the last whole
    block is written the ordinary way, at once, so that every line received
    reaches the file moments later, and again with the next block. Where the
    file system refuses O_DIRECT, every write is an ordinary one.
    """

    BLOCK = 4096

    def __init__(self, fd: int):
        self.fd = fd
        self.done = os.lseek(fd, 0, os.SEEK_CUR)  # the file up to here is written for good
        self.tail = b""  # after that: written the ordinary way, to be written again with the next block
        self.direct: int | None = None
        if self.done % self.BLOCK == 0:
            try:
                self.direct = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_DIRECT)
            except OSError:
                pass
        self.buffer = np.empty(0, np.uint8)  # page-aligned, as O_DIRECT needs

    def write(self, data) -> None:
        if self.direct is None:
            _pwrite_all(self.fd, data, self.done)
            self.done += len(data)
            return
        size = len(self.tail) + len(data)
        whole = size - size % self.BLOCK
        if not whole:
            self.tail += bytes(data)
            _pwrite_all(self.fd, self.tail, self.done)
            return
        if len(self.buffer) < size:
            room = np.empty(2 * size + self.BLOCK, np.uint8)
            self.buffer = room[-room.ctypes.data % self.BLOCK:][:2 * size]
        self.buffer[:len(self.tail)] = np.frombuffer(self.tail, np.uint8)
        self.buffer[len(self.tail):size] = np.frombuffer(data, np.uint8)
        try:
            _pwrite_all(self.direct, memoryview(self.buffer[:whole]), self.done)
        except OSError:  # refused: ordinary writes from here on
            os.close(self.direct)
            self.direct = None
            _pwrite_all(self.fd, memoryview(self.buffer[:size]), self.done)
            self.done += size
            return
        self.done += whole
        self.tail = bytes(self.buffer[whole:size])
        _pwrite_all(self.fd, self.tail, self.done)

    def close(self) -> None:
        if self.direct is not None:
            os.close(self.direct)
        os.fsync(self.fd)
        os.close(self.fd)


def _pwrite_all(fd: int, data, at: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written


def main(argv: list[str] | None = None) -> int:
    """Read batches from stdin until it closes, writing each batch's lines at once; fsync at the end."""
    parser = argparse.ArgumentParser(description="the history's writer process (started by HistoryWriter)")
    parser.add_argument("--fd", type=int, required=True, help="the history file, open for writing")
    parser.add_argument("--origin", type=int, required=True, help="the run's start on the monotonic clock, ns")
    args = parser.parse_args(argv)
    # Ctrl-C and SIGTERM are for the harness, which closes the pipe when it is done; a harness
    # killed outright closes it too, and this process then writes what it received.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A thread empties the pipe as fast as it fills, so that the harness's buffers never wait
    # on formatting: what is in this process survives a harness killed outright.
    received: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_read_pipe, args=(sys.stdin.buffer.raw, received), daemon=True).start()
    batcher, output = _Batcher(args.origin), _Output(args.fd)
    while (data := received.get()) is not None:
        for lines in batcher.lines(data):
            output.write(lines)
    for lines in batcher.finish():
        output.write(lines)
    output.close()
    if batcher.pending:  # a batch cut short: only a harness killed mid-write leaves one
        print(f"history writer: {batcher.pending} bytes of a cut batch at the end dropped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
