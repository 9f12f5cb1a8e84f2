"""The history of a run: the contract of docs/history.md, in code.

- `HistoryWriter` appends events to `history.jsonl` from many client threads:
  one lock assigns index and time (so both are in file order), a background
  thread flushes at least every 100 ms, `close()` flushes and fsyncs.
- `read_jsonl` validates a JSONL history line by line (a cut last line is
  dropped with a warning; any other bad line is a `HistoryError` naming it).
- `write_parquet` / `jsonl_to_parquet` store the same rows columnar
  (`ARROW_SCHEMA`), and `validate_parquet` checks a Parquet history in
  streaming batches, so histories larger than memory can be checked.
- `resolve` turns what a user names (a file, a folder of parts, a run
  directory) into the files to read and the `run.json` beside them.

Checks that span events (every completion has its invocation, values are
unique) need joins over the whole history; the checker does them in Spark.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import orjson

from harness.errors import HistoryError

log = logging.getLogger(__name__)

TYPES = ("invoke", "ok", "fail", "info")
COMPLETIONS = ("ok", "fail", "info")
CLIENT_FS = ("send", "poll", "assign", "seek", "commit", "crash", "final-reads")
FINAL_READS = "final-reads"
NEMESIS = "nemesis"
# Parquet stores `process` as int64; the nemesis is this id there.
NEMESIS_PROCESS_ID = -1
BASE_FIELDS = ("index", "time", "process", "type", "f")
# Fields with a column of their own in Parquet; every other field goes to `extra`.
COLUMN_FIELDS = ("key", "value", "partition", "offset", "error", "records", "partitions", "offsets", "ends")
# Positions are packed into one long by the checker (partition << 40 | offset):
# both formats reject what would not fit, so no two positions collide.
MAX_PARTITION = (1 << 23) - 1
MAX_OFFSET = (1 << 40) - 1


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


# --------------------------------------------------------------------------
# Validation of single events


def _is_int(x: Any) -> bool:
    return type(x) is int


def _check_int(event: dict, name: str, where: str, nullable: bool = False) -> None:
    if name not in event:
        raise HistoryError(f"{where}: missing field '{name}'")
    x = event[name]
    if x is None and nullable:
        return
    if not _is_int(x):
        raise HistoryError(f"{where}: field '{name}' must be an integer, not {_show(x)}")


def _show(x: Any) -> str:
    text = orjson.dumps(x).decode() if not isinstance(x, bytes) else repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def check_event(event: Any, where: str) -> None:
    """Raise HistoryError if one event breaks HISTORY.md on its own.

    `where` names the event in the message (e.g. "line 12").
    """
    if not isinstance(event, dict):
        raise HistoryError(f"{where}: expected a JSON object, got {_show(event)}")
    for name in ("index", "time"):
        _check_int(event, name, where)
    if event["time"] < 0:
        raise HistoryError(f"{where}: 'time' must not be negative")
    if "process" not in event:
        raise HistoryError(f"{where}: missing field 'process'")
    process = event["process"]
    if not (_is_int(process) and process >= 0) and process != NEMESIS:
        raise HistoryError(f"{where}: 'process' must be a non-negative integer or \"nemesis\", not {_show(process)}")
    type_ = event.get("type")
    if type_ not in TYPES:
        raise HistoryError(f"{where}: 'type' must be one of invoke, ok, fail, info; got {_show(type_)}")
    f = event.get("f")
    if not isinstance(f, str) or not f:
        raise HistoryError(f"{where}: 'f' must be a non-empty string, got {_show(f)}")
    if type_ != "invoke" and type_ != "ok" and "error" in event and not isinstance(event["error"], (str, type(None))):
        raise HistoryError(f"{where}: 'error' must be a string")
    if process == NEMESIS:
        return  # a nemesis event's value is free-form
    if f not in CLIENT_FS:
        raise HistoryError(f"{where}: unknown client operation f={_show(f)} (expected one of {', '.join(CLIENT_FS)})")
    if f == "send":
        _check_int(event, "value", where)
        if type_ == "invoke" and "key" in event:
            _check_int(event, "key", where, nullable=True)
        if type_ == "ok":
            _check_position(event, where)
    elif f == "poll" and type_ == "ok":
        _check_objects(event, "records", where, _check_record)
    elif (f == "assign" and type_ in ("invoke", "ok")) or (f == FINAL_READS and type_ == "invoke"):
        parts = event.get("partitions")
        if not isinstance(parts, list) or not all(_is_int(p) for p in parts):
            raise HistoryError(f"{where}: 'partitions' must be a list of integers")
    elif f == FINAL_READS and type_ == "ok":
        _check_objects(event, "ends", where, _check_position)
    elif f == "seek" and type_ in ("invoke", "ok"):
        _check_position(event, where)
    elif f == "commit" and type_ in ("invoke", "ok"):
        _check_objects(event, "offsets", where, _check_position)


def _check_position(x: dict, where: str) -> None:
    """`partition` and `offset`: integers, not negative (the checker packs them into one long)."""
    for name in ("partition", "offset"):
        _check_int(x, name, where)
        if x[name] < 0 or x[name] > (MAX_OFFSET if name == "offset" else MAX_PARTITION):
            raise HistoryError(f"{where}: '{name}' {x[name]} is out of range")


def _check_record(r: dict, where: str) -> None:
    _check_position(r, where)
    _check_int(r, "value", where)
    if "key" in r:
        _check_int(r, "key", where, nullable=True)


def _check_objects(event: dict, name: str, where: str, check_one) -> None:
    """`event[name]` is a list of objects, each passing `check_one(obj, where)`."""
    items = event.get(name)
    if not isinstance(items, list):
        raise HistoryError(f"{where}: '{name}' must be a list")
    for i, item in enumerate(items):
        at = f"{where}: {name}[{i}]"
        if not isinstance(item, dict):
            raise HistoryError(f"{at} must be an object")
        check_one(item, at)


class OrderCheck:
    """Checks what spans events, fed one event at a time in file order:
    index i on the i-th event, time non-decreasing, and with `pairs` on,
    each completion answering an outstanding invocation of its process (by
    value for sends, by order for the rest) and send values unique.

    Pairing keeps every send value in memory, so the Parquet path leaves it
    to the checker's Spark pass instead.
    """

    def __init__(self, pairs: bool = True) -> None:
        self.next_index = 0
        self.last_time = 0
        self.pairs = pairs
        self._sent: dict[int, object] = {}  # value -> process while outstanding, None once complete
        self._open: dict[tuple, int] = {}  # (process, f) -> outstanding invocations

    def event(self, event: dict, where: str) -> None:
        if event["index"] != self.next_index:
            raise HistoryError(f"{where}: 'index' is {event['index']}, expected {self.next_index} (indexes count 0, 1, 2, ... in file order)")
        if event["time"] < self.last_time:
            raise HistoryError(f"{where}: 'time' {event['time']} is before the previous event's {self.last_time}")
        self.next_index += 1
        self.last_time = event["time"]
        if self.pairs:
            self._pair(event, where)

    def _pair(self, e: dict, where: str) -> None:
        process, f = e["process"], e["f"]
        if f == "send" and process != NEMESIS:
            value = e["value"]
            if e["type"] == "invoke":
                if value in self._sent:
                    raise HistoryError(f"{where}: value {value} sent twice (values must be unique across the history)")
                self._sent[value] = process
                return
            owner = self._sent.get(value, ...)
            if owner is ...:
                raise HistoryError(f"{where}: a send completion for value {value}, which was never invoked")
            if owner is None:
                raise HistoryError(f"{where}: a second completion of the send of value {value}")
            if owner != process:
                raise HistoryError(f"{where}: value {value} was sent by process {owner} but completed by {process}")
            self._sent[value] = None
            return
        key = (process, f)
        if e["type"] == "invoke":
            self._open[key] = self._open.get(key, 0) + 1
        elif self._open.get(key, 0) == 0:
            raise HistoryError(f"{where}: a completion of '{f}' without an invocation by process {process} before it")
        else:
            self._open[key] -= 1


# --------------------------------------------------------------------------
# Reading JSONL


@dataclass
class ReadReport:
    """What reading a history found besides its events."""

    events: int = 0
    warnings: list[str] = field(default_factory=list)


def iter_jsonl(path: str | os.PathLike, report: ReadReport | None = None,
               order: OrderCheck | None = None) -> Iterator[dict]:
    """Yield the validated events of one JSONL file, in order.

    A last line that is cut short is dropped with a warning in `report` (and
    the log); any other malformed line raises HistoryError naming it.
    `order` carries index and time on from a previous part.
    """
    report = report if report is not None else ReadReport()
    order = order if order is not None else OrderCheck()
    start = order.next_index
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise HistoryError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        line_no = 0
        pending: tuple[int, bytes] | None = None  # a line is judged once we know whether it is the last
        for raw in f:
            line_no += 1
            if pending is not None:
                yield _parse_line(path, *pending, last=False, order=order, report=report)
            pending = (line_no, raw)
        if pending is not None:
            event = _parse_line(path, *pending, last=True, order=order, report=report)
            if event is not None:
                yield event
    if order.next_index == start:
        raise HistoryError(f"{path}: the history is empty" if not report.warnings
                           else f"{path}: the history holds no complete event")


def _parse_line(path: Path, line_no: int, raw: bytes, last: bool, order: OrderCheck,
                report: ReadReport) -> dict | None:
    where = f"{path.name} line {line_no}"
    stripped = raw.strip()
    if not stripped:
        if last:
            return None
        raise HistoryError(f"{where}: empty line")
    try:
        event = orjson.loads(stripped)
    except orjson.JSONDecodeError as e:
        if last and (not raw.endswith(b"\n") or _looks_cut(stripped)):
            msg = f"{where}: last line is cut short; ignored"
            report.warnings.append(msg)  # the caller shows it; not twice
            log.info(msg)
            return None
        raise HistoryError(f"{where}: not valid JSON ({str(e).split(':')[0]})") from None
    check_event(event, where)
    order.event(event, where)
    report.events += 1
    return event


def _looks_cut(text: bytes) -> bool:
    # A writer that died mid-line leaves a prefix of a JSON object.
    return text.startswith(b"{") and not text.endswith(b"}")


def read_jsonl(path: str | os.PathLike, report: ReadReport | None = None) -> list[dict]:
    return list(iter_jsonl(path, report))


# --------------------------------------------------------------------------
# Columnar form


def arrow_schema():
    import pyarrow as pa

    pos = [("partition", pa.int64()), ("offset", pa.int64())]
    return pa.schema([
        ("index", pa.int64()), ("time", pa.int64()), ("process", pa.int64()),
        ("type", pa.string()), ("f", pa.string()),
        ("key", pa.int64()), ("value", pa.int64()),
        ("partition", pa.int64()), ("offset", pa.int64()), ("error", pa.string()),
        ("records", pa.list_(pa.struct(pos + [("key", pa.int64()), ("value", pa.int64())]))),
        ("partitions", pa.list_(pa.int64())),
        ("offsets", pa.list_(pa.struct(pos))),
        ("ends", pa.list_(pa.struct(pos))),  # final-reads completions
        # Every other field of the event as a JSON object (a nemesis op's value, probes).
        ("extra", pa.string()),
    ])


def _to_columns(events: Iterable[dict]) -> dict[str, list]:
    cols: dict[str, list] = {name: [] for name in BASE_FIELDS + COLUMN_FIELDS + ("extra",)}
    for e in events:
        process = e["process"]
        cols["index"].append(e["index"])
        cols["time"].append(e["time"])
        cols["type"].append(e["type"])
        cols["f"].append(e["f"])
        extra = {k: v for k, v in e.items() if k not in BASE_FIELDS and k not in COLUMN_FIELDS}
        if process == NEMESIS:
            cols["process"].append(NEMESIS_PROCESS_ID)
            for name in COLUMN_FIELDS:
                cols[name].append(None)
            # A nemesis event's fields are free-form: keep them all as JSON.
            extra = {k: v for k, v in e.items() if k not in BASE_FIELDS}
        else:
            cols["process"].append(process)
            for name in COLUMN_FIELDS:
                cols[name].append(e.get(name))
        cols["extra"].append(orjson.dumps(extra).decode() if extra else None)
    return cols


def events_to_table(events: Iterable[dict]):
    import pyarrow as pa

    return pa.Table.from_pydict(_to_columns(events), schema=arrow_schema())


def write_parquet(events: Iterable[dict], dest: str | os.PathLike, batch_rows: int = 250_000) -> int:
    """Write events to one Parquet file in row groups of `batch_rows`; return the count."""
    import pyarrow.parquet as pq

    schema = arrow_schema()
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    n = 0
    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        batch: list[dict] = []
        for e in events:
            batch.append(e)
            if len(batch) >= batch_rows:
                writer.write_table(events_to_table(batch))
                n += len(batch)
                batch = []
        if batch or n == 0:
            writer.write_table(events_to_table(batch))
            n += len(batch)
    os.replace(tmp, dest)
    return n


def jsonl_to_parquet(src: str | os.PathLike, dest: str | os.PathLike, report: ReadReport | None = None) -> int:
    """Validate a JSONL history and write it as Parquet; return the event count."""
    return write_parquet(iter_jsonl(src, report), dest)


def table_to_events(table) -> list[dict]:
    """Rows of an Arrow table in ARROW_SCHEMA back to HISTORY.md events."""
    events = []
    for row in table.to_pylist():
        extra = orjson.loads(row["extra"]) if row.get("extra") else {}
        if row["process"] == NEMESIS_PROCESS_ID:
            e = {k: row[k] for k in BASE_FIELDS}
            e["process"] = NEMESIS
        else:
            e = {k: row[k] for k in BASE_FIELDS}
            for name in COLUMN_FIELDS:
                if row.get(name) is not None:
                    e[name] = row[name]
        e.update(extra)
        events.append(e)
    return events


def read_parquet_events(path: str | os.PathLike) -> list[dict]:
    import pyarrow.parquet as pq

    return table_to_events(pq.read_table(path))


# --------------------------------------------------------------------------
# Validating Parquet in batches


REQUIRED_PARQUET = {"index": "int", "time": "int", "process": "int", "type": "string", "f": "string"}


def parquet_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.parquet") if p.is_file())
        return files
    return [path]


def validate_parquet(files: list[Path]) -> int:
    """Check Parquet parts against HISTORY.md in streaming batches; return the event count.

    Parts are read in name order and must continue each other's indexes.
    Per-row checks are vectorised; a bad row is reported by its index.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    order = OrderCheck(pairs=False)
    for file in files:
        try:
            pf = pq.ParquetFile(file)
        except (OSError, pa.ArrowException) as e:
            raise HistoryError(f"{file}: not a readable Parquet file ({_first_line(e)})") from None
        schema = pf.schema_arrow
        for name, kind in REQUIRED_PARQUET.items():
            if name not in schema.names:
                raise HistoryError(f"{file.name}: missing column '{name}'")
            t = schema.field(name).type
            ok = pa.types.is_integer(t) if kind == "int" else (pa.types.is_string(t) or pa.types.is_large_string(t)
                                                                 or pa.types.is_dictionary(t))
            if not ok:
                raise HistoryError(f"{file.name}: column '{name}' must be {kind}, not {t}")
        needed = [c for c in ("index", "time", "process", "type", "f", "value", "partition", "offset", "records",
                              "partitions", "offsets", "ends")
                  if c in schema.names]
        try:
            batches = pf.iter_batches(batch_size=1 << 20, columns=needed)
            for batch in batches:
                _check_parquet_batch(file, batch, order, pa, pc)
        except (OSError, pa.ArrowException) as e:
            raise HistoryError(f"{file}: cannot read ({_first_line(e)})") from None
    if order.next_index == 0:
        raise HistoryError(f"{files[0] if files else 'history'}: the history is empty")
    return order.next_index


def _first_line(e: Exception) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _check_parquet_batch(file: Path, batch, order: OrderCheck, pa, pc) -> None:
    """One batch of Parquet rows against the same rules `check_event` applies to JSONL."""
    n = batch.num_rows
    if n == 0:
        return
    cols = {name: batch.column(name) for name in batch.schema.names}
    index = cols["index"].cast(pa.int64())
    time_ = cols["time"].cast(pa.int64())
    first = order.next_index

    def bad(mask, message: str, rows=None):
        """Raise for the first row where `mask` holds (null counts as bad);
        `rows` maps the mask's items to batch rows (for flattened lists)."""
        mask = pc.fill_null(mask, True)
        if pc.any(mask).as_py():
            i = pc.index(mask, True).as_py()
            row = i if rows is None else rows[i].as_py()
            raise HistoryError(f"{file.name} index {first + row}: {message}")

    for name in ("index", "time", "process", "type", "f"):
        bad(pc.is_null(cols[name]), f"'{name}' is missing")
    expected = pa.array(range(first, first + n), pa.int64())
    if not pc.all(pc.equal(index, expected)).as_py():
        i = pc.index(pc.not_equal(index, expected), True).as_py()
        raise HistoryError(f"{file.name} row {first + i}: 'index' is {index[i].as_py()}, expected {first + i}")
    bad(pc.less(time_, 0), "'time' must not be negative")
    prev = pa.concat_arrays([pa.array([order.last_time], pa.int64()), time_.slice(0, n - 1)])
    bad(pc.less(time_, prev), "'time' is before the previous event's")
    type_ = cols["type"].cast(pa.string())
    bad(pc.invert(pc.is_in(type_, pa.array(TYPES))), "'type' must be one of invoke, ok, fail, info")
    f = cols["f"].cast(pa.string())
    process = cols["process"].cast(pa.int64())
    client = pc.greater_equal(process, 0)
    bad(pc.and_(pc.not_equal(process, NEMESIS_PROCESS_ID), pc.less(process, 0)),
        f"'process' must be non-negative (or {NEMESIS_PROCESS_ID}, the nemesis)")
    bad(pc.and_(client, pc.invert(pc.is_in(f, pa.array(CLIENT_FS)))), "unknown client operation 'f'")

    def rows_of(name: str, types: tuple[str, ...]):
        """Client rows of operation `name` whose type is one of `types`."""
        return pc.and_(pc.and_(client, pc.equal(f, name)), pc.is_in(type_, pa.array(types)))

    def present(mask, name: str, what: str) -> bool:
        """Where `mask` holds, column `name` must be there and not null."""
        if name not in cols:
            bad(mask, what)
            return False
        bad(pc.and_(mask, pc.is_null(cols[name])), what)
        return True

    def in_range(mask, column, name: str, top: int | None, rows=None) -> None:
        """Where `mask` holds, `column` (an integer named `name`) is present, >= 0 and <= top."""
        bad(pc.and_(mask, pc.is_null(column)), f"'{name}' is missing", rows)
        bad(pc.and_(mask, pc.fill_null(pc.less(column, 0), False)), f"'{name}' must not be negative", rows)
        if top is not None:
            bad(pc.and_(mask, pc.fill_null(pc.greater(column, top), False)), f"'{name}' is out of range", rows)

    def positions(mask, name: str) -> None:
        """Where `mask` holds, list column `name` holds positions in range (and `value`s for records)."""
        if not present(mask, name, f"'{name}' must be a list"):
            return
        items = cols[name]
        flat = pc.list_flatten(items)
        if not len(flat):
            return
        rows = pc.list_parent_indices(items)
        in_rows = pc.take(mask, rows)
        fields = [flat.type.field(i).name for i in range(flat.type.num_fields)]
        wanted = ("partition", "offset", "value") if name == "records" else ("partition", "offset")
        for field in wanted:
            if field not in fields:
                raise HistoryError(f"{file.name}: {name} lack '{field}'")
            top = {"partition": MAX_PARTITION, "offset": MAX_OFFSET}.get(field)
            column = pc.struct_field(flat, field)
            if top is None:
                bad(pc.and_(in_rows, pc.is_null(column)), f"a record lacks '{field}'", rows)
            else:
                in_range(in_rows, column, field, top, rows)

    is_send = pc.and_(client, pc.equal(f, "send"))
    present(is_send, "value", "a send needs 'value'")
    for mask in (rows_of("send", ("ok",)), rows_of("seek", ("invoke", "ok"))):
        for name, top in (("partition", MAX_PARTITION), ("offset", MAX_OFFSET)):
            if present(mask, name, f"'{name}' is missing"):
                in_range(mask, cols[name], name, top)
    positions(rows_of("poll", ("ok",)), "records")
    positions(rows_of("commit", ("invoke", "ok")), "offsets")
    positions(rows_of(FINAL_READS, ("ok",)), "ends")
    for mask in (rows_of("assign", ("invoke", "ok")), rows_of(FINAL_READS, ("invoke",))):
        present(mask, "partitions", "'partitions' must be a list of integers")
    order.next_index = first + n
    order.last_time = time_[n - 1].as_py()


# --------------------------------------------------------------------------
# What the user names


@dataclass
class HistorySource:
    """The files of one history and the run.json beside them, if any."""

    format: str  # "jsonl" or "parquet"
    files: list[Path]
    run_json: Path | None
    root: Path  # the run directory (or the history's folder)


def resolve(path: str | os.PathLike) -> HistorySource:
    """Find the history a user names: a file, a folder of parts, or a run directory."""
    p = Path(path)
    if not p.exists():
        raise HistoryError(f"{p}: no such file or directory")
    if p.is_file():
        fmt = _format_of(p)
        return HistorySource(fmt, [p], _run_json_near(p.parent), p.parent)
    # A run directory: prefer Parquet (faster), fall back to JSONL.
    for name, fmt in (("history.parquet", "parquet"), ("history.jsonl", "jsonl")):
        candidate = p / name
        if candidate.is_file() or (candidate.is_dir() and any(candidate.iterdir())):
            src = resolve(candidate)
            return HistorySource(src.format, src.files, _run_json_near(p), p)
    parquet = sorted(x for x in p.iterdir() if x.is_file() and x.suffix == ".parquet")
    jsonl = sorted(x for x in p.iterdir() if x.is_file() and x.suffix == ".jsonl")
    if parquet and jsonl:
        raise HistoryError(f"{p}: holds both .parquet and .jsonl parts; name one")
    if parquet:
        return HistorySource("parquet", parquet, _run_json_near(p), p)
    if jsonl:
        return HistorySource("jsonl", jsonl, _run_json_near(p), p)
    raise HistoryError(f"{p}: no history here (expected history.jsonl, history.parquet, or .jsonl/.parquet parts)")


def _format_of(p: Path) -> str:
    if p.suffix == ".parquet":
        return "parquet"
    with open(p, "rb") as f:
        head = f.read(4)
    if head == b"PAR1":
        return "parquet"
    return "jsonl"


def _run_json_near(directory: Path) -> Path | None:
    for d in (directory, directory.parent):
        candidate = d / "run.json"
        if candidate.is_file():
            return candidate
    return None


def iter_source_jsonl(source: HistorySource, report: ReadReport) -> Iterator[dict]:
    """Events of JSONL parts in order, indexes continuing across parts.

    Only the last part may end with a cut line: an earlier part was complete
    when the next one was started.
    """
    order = OrderCheck()
    for i, file in enumerate(source.files):
        before = len(report.warnings)
        yield from iter_jsonl(file, report, order)
        if len(report.warnings) > before and i < len(source.files) - 1:
            raise HistoryError(f"{file.name}: a part other than the last ends with a cut line")


def load_run_json(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise HistoryError(f"{path}: not readable JSON ({_first_line(e)})") from None
    if not isinstance(data, dict):
        raise HistoryError(f"{path}: expected a JSON object")
    return data
