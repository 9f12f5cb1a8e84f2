"""The columnar form of a history: `write_parquet` / `jsonl_to_parquet`
store the same rows as JSONL (`arrow_schema`), and `validate_parquet` checks
Parquet parts in streaming batches against the same rules as JSONL, so
histories larger than memory can be checked.
"""

from __future__ import annotations

import os
import queue
from functools import cache
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator

import orjson

from core.errors import HistoryError, first_line
from core.history.format import (BASE_FIELDS, CLIENT_FS, COLUMN_FIELDS, COMMITTED, FINAL_READS, FOLD_ABOVE,
                                  ISOLATION, MAX_PARTITION, MAX_STORED_OFFSET, NEMESIS, NEMESIS_PROCESS_ID, NO_OFFSET,
                                  TXN, TYPES, OrderCheck)
from core.history.jsonl import ReadReport, iter_jsonl

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
        # A consumer group's: on assign, commit and committed (docs/history.md, "Consumer groups").
        ("group", pa.string()), ("generation", pa.int64()), ("final", pa.bool_()),
        # A transaction's sends (docs/history.md, "Transactions"), and the isolation a poll or transaction read at.
        ("sends", pa.list_(pa.struct(pos + [("key", pa.int64()), ("value", pa.int64())]))),
        ("isolation", pa.string()),
        # Every other field of the event as a JSON object (a nemesis op's value, probes).
        ("extra", pa.string()),
    ])


_NAMED = frozenset(BASE_FIELDS + COLUMN_FIELDS)
ROW_GROUP = 250_000  # rows per row group of a history's Parquet file


def _to_columns(events: Iterable[dict]) -> dict[str, list]:
    """The events' columns, a list comprehension each: quicker than a loop
    appending to fifteen lists per event."""
    rows = events if isinstance(events, list) else list(events)
    cols: dict[str, list] = {name: [e[name] for e in rows] for name in BASE_FIELDS}
    for name in COLUMN_FIELDS:
        cols[name] = [e.get(name) for e in rows]
    extra: list[str | None] = [None] * len(rows)
    for i, e in enumerate(rows):
        if not e.keys() <= _NAMED:
            extra[i] = orjson.dumps({k: v for k, v in e.items() if k not in _NAMED}).decode()
    process = cols["process"]
    for i in [i for i, p in enumerate(process) if p == NEMESIS]:
        # A nemesis event's fields are free-form: keep them all as JSON.
        e = rows[i]
        process[i] = NEMESIS_PROCESS_ID
        for name in COLUMN_FIELDS:
            cols[name][i] = None
        fields = {k: v for k, v in e.items() if k not in BASE_FIELDS}
        extra[i] = orjson.dumps(fields).decode() if fields else None
    cols["extra"] = extra
    return cols


def events_to_table(events: Iterable[dict]):
    import pyarrow as pa

    return pa.Table.from_pydict(_to_columns(events), schema=arrow_schema())


def write_parquet(events: Iterable[dict], dest: str | os.PathLike, batch_rows: int = ROW_GROUP,
                  big_offsets: set[int] | None = None, on_batch: Callable | None = None) -> int:
    """Write events to one Parquet file in row groups of `batch_rows`; return
    the count. Offsets the checker must fold go into `big_offsets` if given;
    `on_batch` is given each row group as an Arrow table (`arrow_schema`), in
    order, so that a reader of the whole history need not read the file again."""
    import pyarrow.parquet as pq

    schema = arrow_schema()
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    n = 0

    def write(rows: list[dict]) -> None:
        table = events_to_table(rows)
        if big_offsets is not None:
            big_offsets.update(offsets_to_fold(table))
        if on_batch is not None:
            on_batch(table)
        writer.write_table(table)

    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        batch: list[dict] = []
        for e in events:
            batch.append(e)
            if len(batch) >= batch_rows:
                write(batch)
                n += len(batch)
                batch = []
        if batch or n == 0:
            write(batch)
            n += len(batch)
    os.replace(tmp, dest)
    return n


def offsets_to_fold(batch) -> set[int]:
    """The distinct offsets above FOLD_ABOVE in a table or batch (`offset`, and
    the offsets of `records`, `ends` and `offsets`): too near or above the
    largest that the checker's packed positions hold, so it folds them
    (checkers/offsets.py). In a real history: none, or the few a corrupt
    batch's base offset produced."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found: set[int] = set()
    names = batch.schema.names
    columns = [batch.column(names.index("offset"))] if "offset" in names else []
    for name in ("records", "ends", "offsets", "sends"):
        if name in names:
            flat = pc.list_flatten(batch.column(names.index(name)))
            if isinstance(flat, pa.ChunkedArray):
                flat = flat.combine_chunks()
            if len(flat) and "offset" in [flat.type.field(i).name for i in range(flat.type.num_fields)]:
                columns.append(pc.struct_field(flat, "offset"))
    for column in columns:
        column = column.cast(pa.int64(), safe=False) if column.type != pa.int64() else column
        top = pc.max(column).as_py()
        if top is None or top <= FOLD_ABOVE:  # nearly always: one pass, no mask
            continue
        big = pc.filter(column, pc.fill_null(pc.greater(column, FOLD_ABOVE), False))
        if len(big):
            found.update(pc.unique(big).to_pylist())
    return found


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


def events_at(files: list[Path], indexes, columns: tuple[str, ...]) -> dict[int, dict]:
    """The events at `indexes` of a validated Parquet history, by index, each
    with `columns` (None where the history has no such column). Validation
    keeps the parts' indexes running from 0 without a gap, so index i is the
    i-th row: only the row groups that hold them are read, not the history
    (its few examples once took a Spark job of their own), and of them only
    `columns`: not even `index`, the costliest to decode, since the row says
    it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = sorted(set(indexes))
    found: dict[int, dict] = {}
    start = 0
    for file in files:
        if not wanted:
            break
        pf = pq.ParquetFile(file)
        groups, rows, first = [], [], 0  # the groups read; the wanted rows among theirs, and their indexes
        for group in range(pf.metadata.num_row_groups):
            size = pf.metadata.row_group(group).num_rows
            taken = [i for i in wanted if i < start + size]
            if taken:
                wanted = wanted[len(taken):]
                groups.append(group)
                rows += [(first + i - start, i) for i in taken]
                first += size
            start += size
        if not groups:
            continue
        present = [c for c in columns if c in pf.schema_arrow.names]
        events = (pf.read_row_groups(groups, columns=present).take(pa.array([row for row, _ in rows])).to_pylist()
                  if present else [{}] * len(rows))  # none of the columns: nothing to read
        for (_, index), event in zip(rows, events):
            found[index] = {c: event.get(c) for c in columns}
    return found


# --------------------------------------------------------------------------
# Validating Parquet in batches


REQUIRED_PARQUET = {"index": "int", "time": "int", "process": "int", "type": "string", "f": "string"}
# A consumer group's columns, where a history has them.
GROUP_COLUMNS = {"group": "string", "generation": "int", "final": "bool", "isolation": "string"}


def _is_kind(t, kind: str, pa) -> bool:
    """Whether Arrow type `t` is an integer, a string (or a dictionary of them) or a bool."""
    if kind == "int":
        return pa.types.is_integer(t)
    if kind == "bool":
        return pa.types.is_boolean(t)
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)


def parquet_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.parquet") if p.is_file())
        return files
    return [path]


# Columns `validate_parquet` hands to `on_batch` besides those it checks, where present.
PASSED_ON = ("key", "extra", "generation", "final")


def validate_parquet(files: list[Path], big_offsets: set[int] | None = None, on_batch: Callable | None = None,
                     digest: Callable | None = None) -> int:
    """Check Parquet parts against HISTORY.md in streaming batches; return the event count.

    Parts are read in name order and must continue each other's indexes.
    Per-row checks are vectorised; a bad row is reported by its index.
    `on_batch` is given each batch once it is checked (the checked columns
    and PASSED_ON), in order: one read of the history serves a pass over all
    of it (the checker's liveness, the few nemesis events); given `digest`,
    it is given `digest(batch)` instead. The batches are then read in a
    thread, a batch or two ahead of `on_batch`, and checked (without
    `digest`: in the same thread) and digested in another: Arrow and NumPy
    work outside Python's lock, so they share the cores (docs/decisions.md,
    "The driver's read of a Parquet history"). Either way a batch reaches
    `digest` and `on_batch` only once it passed, and the first error in file
    order (a batch's check, its digest, then `on_batch`'s) is the one raised.
    """
    order = OrderCheck(pairs=False)
    read = _read_batches(files, bool(on_batch))
    if on_batch is None:
        for _ in _checked(read, order, big_offsets):
            pass
    else:
        if digest is None:
            ahead = _ahead(_checked(read, order, big_offsets))
        else:
            # The checks in the digest's thread, before each digest: the
            # reading thread, the busiest of the three, only decodes.
            ahead = _ahead(_each(digest, _checked(_ahead(read), order, big_offsets)))
        try:
            for batch in ahead:
                on_batch(batch)
        finally:
            ahead.close()  # on_batch's error or Ctrl-C: the thread stops now, not when collected
    if order.next_index == 0:
        raise HistoryError(f"{files[0] if files else 'history'}: the history is empty")
    return order.next_index


def _read_batches(files: list[Path], passed_on: bool) -> Iterator:
    """The Parquet parts' batches, each with its file (`(file, batch)`): the
    columns checked, and PASSED_ON if `passed_on`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in files:
        try:
            pf = pq.ParquetFile(file)
        except (OSError, pa.ArrowException) as e:
            raise HistoryError(f"{file}: not a readable Parquet file ({first_line(e)})") from None
        schema = pf.schema_arrow
        for name, kind in REQUIRED_PARQUET.items():
            if name not in schema.names:
                raise HistoryError(f"{file.name}: missing column '{name}'")
            if not _is_kind(schema.field(name).type, kind, pa):
                raise HistoryError(f"{file.name}: column '{name}' must be {kind}, not {schema.field(name).type}")
        for name, kind in GROUP_COLUMNS.items():
            if name in schema.names and not _is_kind(schema.field(name).type, kind, pa):
                raise HistoryError(f"{file.name}: column '{name}' must be {kind}, not {schema.field(name).type}")
        needed = [c for c in ("index", "time", "process", "type", "f", "value", "partition", "offset",
                              "partitions", "offsets", "ends", "group", "sends", "isolation")
                  + (PASSED_ON if passed_on else ())
                  if c in schema.names]
        if "records" in schema.names:
            needed += _record_leaves(pf.schema)
        # The operation names and types, a handful of strings, read as the
        # codes of their Parquet dictionaries: neither the strings nor their
        # encoding again, the strings compared once per value, not per row
        # (docs/decisions.md, "The driver's read of a Parquet history").
        names = [c for c in ("type", "f") if pa.types.is_string(schema.field(c).type)]
        try:
            if names:
                pf = pq.ParquetFile(file, read_dictionary=names)
            for batch in pf.iter_batches(batch_size=1 << 20, columns=needed):
                yield file, batch
        except (OSError, pa.ArrowException) as e:
            raise HistoryError(f"{file}: cannot read ({first_line(e)})") from None


def _checked(read: Iterator, order: OrderCheck, big_offsets: set[int] | None) -> Iterator:
    """The batches of `_read_batches`, each once it passed `_check_parquet_batch`
    (and its offsets to fold were added to `big_offsets`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        for file, batch in read:
            try:
                _check_parquet_batch(file, batch, order, pa, pc)
                if big_offsets is not None:
                    big_offsets.update(offsets_to_fold(batch))
            except (OSError, pa.ArrowException) as e:
                raise HistoryError(f"{file}: cannot read ({first_line(e)})") from None
            yield batch
    finally:
        if hasattr(read, "close"):
            read.close()


# The fields of a record that are checked and handed on: not its key.
RECORD_FIELDS = ("partition", "offset", "value")


def _record_leaves(schema) -> list[str]:
    """The Parquet paths of the records' RECORD_FIELDS, read without the
    rest of each record (its key: less to decode, docs/decisions.md, "The
    driver's read of a Parquet history"); or `records` whole
    where its fields are not one struct holding each of them once, which
    the checks then report."""
    paths = [schema.column(i).path for i in range(len(schema))]
    leaves = [path for path in paths if path.startswith("records.") and path.rsplit(".", 1)[-1] in RECORD_FIELDS]
    parents = {path.rsplit(".", 1)[0] for path in leaves}
    if len(leaves) != len(RECORD_FIELDS) or len(parents) != 1:
        return ["records"]
    return leaves


_DONE = object()


def _ahead(items: Iterator, depth: int = 2) -> Iterator:
    """`items`, produced in a thread up to `depth` ahead of the caller; an
    exception the thread meets is raised here, in its place. If the caller
    stops early (its own error, Ctrl-C), the thread stops at its next item."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread, raised there
            offer(e)
            return
        finally:
            if hasattr(items, "close"):
                items.close()  # a generator of another `_ahead`'s items: its thread stops too
        offer(_DONE)

    thread = threading.Thread(target=produce, name="history-check-ahead", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def _each(function: Callable, items: Iterator) -> Iterator:
    """`function` of each of `items`, closing `items` when closed."""
    try:
        for item in items:
            yield function(item)
    finally:
        if hasattr(items, "close"):
            items.close()


# Each check below is a few Arrow or NumPy passes over a batch; a batch that
# passes (nearly all do) is let through by the one or two passes of these,
# and only a batch that may fail takes the checks that say which row and
# why: the checks' CPU went to batches that pass, and to masks made for
# columns with no nulls to look for under them, so each mask is made only
# where a column has nulls (docs/decisions.md, "The driver's read of a
# Parquet history"). A mask is given as a function that makes it (`Mask`,
# made once), called only then.

Mask = Callable[[], object]  # a batch's rows (or list items) a rule is about, as an Arrow boolean array


def _all_present(column, mask: Mask, pc) -> bool:
    """Whether `column` is not null wherever `mask` holds (False: perhaps not)."""
    if not column.null_count:
        return True
    rows = mask()
    return not rows.null_count and not pc.any(pc.and_(rows, pc.is_null(column))).as_py()


def _plainly_in_range(column, mask: Mask, top: int | None, pc) -> bool:
    """Whether `column` is present and within 0..`top` wherever `mask` holds
    (False: perhaps not): all of its values in range are all of the masked ones."""
    if not _all_present(column, mask, pc):
        return False
    bounds = pc.min_max(column)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    return low is None or (low >= 0 and (top is None or high <= top))


def string_codes(column):
    """A column of strings as a dictionary array of distinct strings: the
    column itself where it is one already (a Parquet column read as its
    dictionary's codes), else encoded."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_dictionary(kind) and (pa.types.is_string(kind.value_type) or pa.types.is_large_string(
            kind.value_type)) and not column.dictionary.null_count:
        names = column.dictionary.to_pylist()
        if len(set(names)) == len(names):
            return column
    return pc.dictionary_encode(column.cast(pa.string()))


def _check_parquet_batch(file: Path, batch, order: OrderCheck, pa, pc) -> None:
    """One batch of Parquet rows against the same rules `check_event` applies to JSONL."""
    import numpy as np

    n = batch.num_rows
    if n == 0:
        return
    cols = {name: batch.column(name) for name in batch.schema.names}
    first = order.next_index

    def bad(mask, message: str, rows=None):
        """Raise for the first row where `mask` holds (null counts as bad);
        `rows` maps the mask's items to batch rows (for flattened lists)."""
        if mask.null_count:
            mask = pc.fill_null(mask, True)
        if pc.any(mask).as_py():
            i = pc.index(mask, True).as_py()
            row = i if rows is None else rows[i].as_py()
            raise HistoryError(f"{file.name} index {first + row}: {message}")

    def bad_where(mask: np.ndarray, message: str) -> None:
        """`bad` of a NumPy mask of the batch's rows."""
        if mask.any():
            raise HistoryError(f"{file.name} index {first + int(np.argmax(mask))}: {message}")

    for name in ("index", "time", "process", "type", "f"):
        if cols[name].null_count:
            bad(pc.is_null(cols[name]), f"'{name}' is missing")
    # Present throughout (above): NumPy views of the columns, no copies.
    index = np.asarray(cols["index"].cast(pa.int64()))
    time_ = np.asarray(cols["time"].cast(pa.int64()))
    process = np.asarray(cols["process"].cast(pa.int64()))
    # first, first + 1, ...: rising throughout, from first to first + n - 1.
    if not (index[0] == first and index[-1] == first + n - 1 and bool((index[1:] > index[:-1]).all())):
        i = int(np.argmax(index != np.arange(first, first + n)))
        raise HistoryError(f"{file.name} row {first + i}: 'index' is {int(index[i])}, expected {first + i}")
    # Never back, from the last batch's last time (0 at first): never negative either.
    if time_[0] < order.last_time or not bool((time_[1:] >= time_[:-1]).all()):
        bad_where(time_ < 0, "'time' must not be negative")
        bad_where(time_ < np.append(order.last_time, time_[:-1]), "'time' is before the previous event's")
    # The operations and types as small codes, compared as numbers below; a
    # batch whose names are all known has no row to look for.
    f_codes, type_codes = string_codes(cols["f"]), string_codes(cols["type"])
    f_of = {name: i for i, name in enumerate(f_codes.dictionary.to_pylist())}
    type_of = {name: i for i, name in enumerate(type_codes.dictionary.to_pylist())}
    f_index, type_index = f_codes.indices.to_numpy(zero_copy_only=False), type_codes.indices.to_numpy(zero_copy_only=False)
    if not type_of.keys() <= set(TYPES):
        unknown = np.array([name not in TYPES for name in type_of], bool)
        bad_where(unknown[type_index], "'type' must be one of invoke, ok, fail, info")
    client = process >= 0
    bad_where(~client & (process != NEMESIS_PROCESS_ID),
              f"'process' must be non-negative (or {NEMESIS_PROCESS_ID}, the nemesis)")
    if not f_of.keys() <= set(CLIENT_FS):  # a nemesis's names: only a client's are looked at
        unknown = np.array([name not in CLIENT_FS for name in f_of], bool)
        bad_where(client & unknown[f_index], "unknown client operation 'f'")

    # Each row's (f, type) as one code, -1 for the nemesis's: the rows of an
    # operation and types are a lookup, cheaper than an np.isin per batch.
    op_type = f_index.astype(np.int32) * len(type_of)
    op_type += type_index
    op_type[~client] = -1

    def rows_of(name: str, types: tuple[str, ...]) -> Mask | None:
        """Client rows of operation `name` whose type is one of `types`;
        None where the batch's names have none of them."""
        codes = [f_of[name] * len(type_of) + type_of[t] for t in types if t in type_of] if name in f_of else []
        if not codes:
            return None

        def make():
            wanted = np.zeros(len(f_of) * len(type_of) + 1, bool)  # the last for -1
            wanted[codes] = True
            return pa.array(wanted[op_type])

        return cache(make)

    def present(mask: Mask, name: str, what: str) -> bool:
        """Where `mask` holds, column `name` must be there and not null."""
        if name not in cols:
            bad(mask(), what)
            return False
        if not _all_present(cols[name], mask, pc):
            bad(pc.and_(mask(), pc.is_null(cols[name])), what)
        return True

    def in_range(mask: Mask, column, name: str, top: int | None, rows: Mask | None = None) -> None:
        """Where `mask` holds, `column` (an integer named `name`) is present, >= 0 and <= top."""
        if _plainly_in_range(column, mask, top, pc):
            return
        at = rows() if rows is not None else None
        bad(pc.and_(mask(), pc.is_null(column)), f"'{name}' is missing", at)
        bad(pc.and_(mask(), pc.fill_null(pc.less(column, 0), False)), f"'{name}' must not be negative", at)
        if top is not None:
            bad(pc.and_(mask(), pc.fill_null(pc.greater(column, top), False)), f"'{name}' is out of range", at)

    def positions(mask: Mask | None, name: str, least_offset: int = 0, optional: bool = False,
                  values_only: bool = False) -> None:
        """Where `mask` holds, list column `name` holds positions in range (and
        `value`s for records and sends), offsets from `least_offset` on;
        `optional`: only where the list is there; `values_only`: a
        position only where the item has one (a transaction's sends but a
        committed one's)."""
        if mask is None:
            return
        if optional:
            if name not in cols or not pc.any(pc.and_(mask(), pc.is_valid(cols[name]))).as_py():
                return
            outer = mask
            mask = cache(lambda: pc.and_(outer(), pc.is_valid(cols[name])))
        if not present(mask, name, f"'{name}' must be a list"):
            return
        items = cols[name]
        flat = pc.list_flatten(items)
        if not len(flat):
            return
        rows = cache(lambda: pc.list_parent_indices(items))
        in_rows = cache(lambda: pc.take(mask(), rows()))
        fields = [flat.type.field(i).name for i in range(flat.type.num_fields)]
        wanted = ("partition", "offset", "value") if name in ("records", "sends") else ("partition", "offset")
        for field in wanted:
            if field not in fields:
                raise HistoryError(f"{file.name}: {name} lack '{field}'")
            top = {"partition": MAX_PARTITION, "offset": MAX_STORED_OFFSET}.get(field)
            column = pc.struct_field(flat, field)
            where = in_rows
            if values_only and top is not None:
                # A position where the item has one: its partition and offset both there, in range.
                other = pc.struct_field(flat, "offset" if field == "partition" else "partition")
                half = pc.xor(pc.is_valid(column), pc.is_valid(other))
                bad(pc.and_(in_rows(), half), "a send has a partition without an offset, or one without the other",
                    rows())
                where = cache(lambda c=column: pc.and_(in_rows(), pc.is_valid(c)))
            if top is None:
                if not _all_present(column, where, pc):
                    bad(pc.and_(where(), pc.is_null(column)), f"a record lacks '{field}'", rows())
            elif field == "offset" and least_offset:
                # Shifted so that `least_offset` is 0 (an int64 holds no offset above the top).
                in_range(where, pc.subtract(column.cast(pa.int64()), least_offset), field, None, rows)
            else:
                in_range(where, column, field, top, rows)

    is_send = cache(lambda: pa.array(client & (f_index == f_of.get("send", -1))))
    present(is_send, "value", "a send needs 'value'")
    for mask in (rows_of("send", ("ok",)), rows_of("seek", ("invoke", "ok"))):
        for name, top in (("partition", MAX_PARTITION), ("offset", MAX_STORED_OFFSET)):
            if mask is not None and present(mask, name, f"'{name}' is missing"):
                in_range(mask, cols[name], name, top)
    positions(rows_of("poll", ("ok",)), "records")
    positions(rows_of("process", ("invoke", "ok")), "records")
    positions(rows_of("commit", ("invoke", "ok")), "offsets")
    positions(rows_of(COMMITTED, ("ok",)), "offsets", least_offset=NO_OFFSET)
    committed = rows_of(COMMITTED, ("invoke",))
    if committed is not None:
        present(committed, "group", "a committed read needs 'group'")
        present(committed, "partitions", "'partitions' must be a list of integers")
    positions(rows_of(FINAL_READS, ("ok",)), "ends")
    positions(rows_of(TXN, ("ok",)), "sends")
    positions(rows_of(TXN, ("invoke", "fail", "info")), "sends", values_only=True)
    positions(rows_of(TXN, ("ok", "fail", "info")), "records", optional=True)
    txn_offsets = rows_of(TXN, TYPES)
    positions(txn_offsets, "offsets", optional=True)
    if txn_offsets is not None and "offsets" in cols:
        committing = pc.and_(txn_offsets(), pc.is_valid(cols["offsets"]))
        bad(pc.and_(committing, pc.is_null(cols["group"])) if "group" in cols else committing,
            "a transaction that commits offsets needs 'group'")
    if "isolation" in cols and cols["isolation"].null_count < n:
        named = pc.is_valid(cols["isolation"])
        bad(pc.and_(named, pc.invert(pc.is_in(cols["isolation"].cast(pa.string()), pa.array(ISOLATION)))),
            f"'isolation' must be one of {', '.join(ISOLATION)}")
    for mask in (rows_of("assign", ("invoke", "ok")), rows_of(FINAL_READS, ("invoke",))):
        if mask is not None:
            present(mask, "partitions", "'partitions' must be a list of integers")
    order.next_index = first + n
    order.last_time = int(time_[-1])


