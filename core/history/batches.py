"""A history in batches: the one way the checker, its stories and the report's
pages read a history.

`tables` gives every event in order as Arrow tables in the Parquet layout
(`core.history.parquet.arrow_schema`), only the columns asked for: a
Parquet history's row groups as they are stored (the operation names and
types read as their dictionaries' codes), a JSONL one converted a chunk at
a time, so that only one chunk is ever Python objects. `decode` turns a
table into NumPy columns (-1 for null, operation and group names as small
ids that stay the same from batch to batch: `Names`), and `flatten` a list
column (a poll's records, a commit's offsets) into one row per item.
Nothing here validates: `core.history.parquet.validate_parquet` and the
JSONL reader do, and a reader of a history that was checked reads it here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from core.history.files import HistorySource, iter_source_jsonl
from core.history.format import READ_UNCOMMITTED, TXN, TYPES
from core.history.jsonl import ReadReport
from core.history.parquet import events_to_table, string_codes

BATCH_ROWS = 1 << 18  # events per table of a JSONL history's conversion (Parquet's come as row groups)
NONE = -1


def tables(source: HistorySource, columns: Sequence[str] | None = None,
           batch_rows: int = BATCH_ROWS) -> Iterator:
    """The history's events in order as Arrow tables with `columns` (default
    all; those the history has no column for are left out)."""
    if source.format == "parquet":
        for file in source.files:
            yield from file_tables(file, columns)
        return
    chunk: list[dict] = []
    for event in iter_source_jsonl(source, ReadReport()):
        chunk.append(event)
        if len(chunk) >= batch_rows:
            yield _selected(events_to_table(chunk), columns)
            chunk = []
    if chunk:
        yield _selected(events_to_table(chunk), columns)


def file_tables(file: Path, columns: Sequence[str] | None = None, groups: Sequence[int] | None = None) -> Iterator:
    """One Parquet file's events in order, a row group at a time (or just
    row groups `groups`), with `columns`."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(str(file))
    names = pf.schema_arrow.names
    strings = [c for c in ("type", "f") if c in names and (columns is None or c in columns)]
    if strings:
        pf = pq.ParquetFile(str(file), read_dictionary=strings)
    present = [c for c in columns if c in names] if columns is not None else None
    for group in (range(pf.metadata.num_row_groups) if groups is None else groups):
        yield pf.read_row_group(group, columns=present)


def _selected(table, columns: Sequence[str] | None):
    return table if columns is None else table.select([c for c in columns if c in table.column_names])


class Names:
    """Operation names (`f`) and consumer groups as small ids, in the order
    first seen: one per history, shared by its batches, so that an id means
    the same name in every batch (and in every process that was handed it)."""

    def __init__(self, ops: dict[str, int] | None = None, groups: dict[str, int] | None = None) -> None:
        self.ops: dict[str, int] = dict(ops or {})
        self.groups: dict[str, int] = dict(groups or {})

    def op(self, name: str) -> int:
        """The id of operation `name`, -1 if none was seen."""
        return self.ops.get(name, NONE)

    def ids(self, table: dict[str, int], names: list) -> np.ndarray:
        """The ids of `names` (a dictionary's strings) in `table`, new ones added; null -1."""
        for name in names:
            if name is not None:
                table.setdefault(name, len(table))
        return np.array([table.get(name, NONE) if name is not None else NONE for name in names] + [NONE], np.int64)


@dataclass
class Events:
    """A batch of events as NumPy columns: integers as int64 with -1 for
    null, `typ` as TYPES' index, `f` and `group` as `Names`' ids; `table`
    is the batch itself (its list columns, `extra`)."""

    table: object
    index: np.ndarray
    time: np.ndarray
    process: np.ndarray
    key: np.ndarray
    value: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    typ: np.ndarray
    f: np.ndarray
    group: np.ndarray
    names: Names = field(repr=False, default_factory=Names)
    _polled: "Items | None" = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.index)

    def is_op(self, name: str) -> np.ndarray:
        """Which rows are a client's operation `name`."""
        return (self.f == self.names.op(name)) & (self.process >= 0)

    def is_type(self, name: str) -> np.ndarray:
        return self.typ == TYPES.index(name)

    def polled(self) -> "Items":
        """The records of the batch's reads, flattened (made once): of its ok
        polls by clients and its transactions' completions, but those read
        at read_uncommitted (docs/history.md, "Transactions")."""
        if self._polled is None:
            self._polled = flatten(self.table, "records", self.reading())
        return self._polled

    def reading(self) -> np.ndarray:
        """Which rows' records are reads: ok polls and transactions' completions, read_committed."""
        rows = self.is_op("poll") & self.is_type("ok")
        if TXN in self.names.ops:
            rows |= self.is_op(TXN) & ~self.is_type("invoke")
        if "isolation" in self.table.column_names and rows.any():
            rows &= ~uncommitted(self.table)
        return rows


def uncommitted(table) -> np.ndarray:
    """Which rows of `table` read at read_uncommitted."""
    import pyarrow.compute as pc

    column = table["isolation"]
    if not column.null_count < len(column):
        return np.zeros(table.num_rows, bool)
    return pc.fill_null(pc.equal(column.cast("string"), READ_UNCOMMITTED), False).to_numpy(zero_copy_only=False)


def decode(table, names: Names) -> Events:
    """`table` (the Parquet layout, any subset of its columns) as `Events`;
    `names` gives (and learns) the ids of its operations and groups."""
    n = table.num_rows

    def ints(name: str) -> np.ndarray:
        if name not in table.column_names:
            return np.full(n, NONE, np.int64)
        return int64s(table[name], NONE)

    f = _codes(table, "f", lambda d: names.ids(names.ops, d))
    group = _codes(table, "group", lambda d: names.ids(names.groups, d))
    # The names as of this batch: a reader in another thread may learn more meanwhile.
    return Events(table, ints("index"), ints("time"), ints("process"), ints("key"), ints("value"),
                  ints("partition"), ints("offset"), _codes(table, "type", _type_ids), f, group,
                  Names(names.ops, names.groups))


def _type_ids(names: list) -> np.ndarray:
    return np.array([TYPES.index(name) if name in TYPES else NONE for name in names] + [NONE], np.int64)


def _codes(table, name: str, ids_of) -> np.ndarray:
    """A string column's rows as the ids `ids_of` gives its distinct strings (-1 for null, or no column)."""
    if name not in table.column_names:
        return np.full(table.num_rows, NONE, np.int64)
    codes = string_codes(table[name])
    return ids_of(codes.dictionary.to_pylist())[int64s(codes.indices, NONE)]


def int64s(column, default: int = NONE) -> np.ndarray:
    """An Arrow integer column as int64, `default` for null: no copy where
    it is int64 and has no nulls."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    column = pc.cast(column, pa.int64())
    return (pc.fill_null(column, default) if column.null_count else column).to_numpy(zero_copy_only=False)


@dataclass
class Items:
    """A list column flattened: each item's row in the batch (`parent`), its
    place in that row's list (`slot`), and its fields as int64 (-1 null)."""

    parent: np.ndarray
    slot: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.parent)

    def take(self, at: np.ndarray) -> "Items":
        return Items(*(getattr(self, name)[at] for name in ("parent", "slot", "partition", "offset", "value")))


# `flatten` of rows fewer than one in SPARSE of a batch's takes their lists first.
SPARSE = 8


def flatten(table, column: str, rows: np.ndarray | None = None) -> Items:
    """The items of list column `column` (structs of partition, offset and,
    where it has one, value), of the rows where `rows` holds (default all).
    A few rows' (a batch's commits, its `process` completions) are taken
    from the column first: the passes below then go over their lists, not
    over the whole batch's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    empty = np.empty(0, np.int64)
    if column not in table.column_names or not table.num_rows:
        return Items(empty, empty, empty, empty, empty)
    lists = table[column]
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks() if lists.num_chunks != 1 else lists.chunk(0)
    if rows is not None:
        at = np.flatnonzero(rows)
        if len(at) * SPARSE < len(rows):
            items = flatten(pa.table({column: lists.take(pa.array(at))}), column)
            items.parent = at[items.parent]
            return items
    length = int64s(pc.list_value_length(lists), 0)
    if rows is not None:
        length = np.where(rows, length, 0)
    parent = int64s(pc.list_parent_indices(lists))
    flat = pc.list_flatten(lists)
    if rows is not None and not rows[parent].all():
        kept = np.flatnonzero(rows[parent])
        parent, flat = parent[kept], flat.take(pa.array(kept))
    if not len(flat):
        return Items(empty, empty, empty, empty, empty)
    fields = {flat.type.field(i).name for i in range(flat.type.num_fields)}

    def field_of(name: str) -> np.ndarray:
        return int64s(pc.struct_field(flat, name), NONE) if name in fields else np.full(len(flat), NONE, np.int64)

    return Items(parent, _slots(length, np.empty(len(parent), np.int64)), field_of("partition"), field_of("offset"),
                 field_of("value"))


def _slots(length: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Each item's place in its row's list (`length`: each row's count of items)."""
    if not len(out):
        return out
    starts = np.cumsum(length) - length
    out[:] = np.arange(len(out)) - np.repeat(starts, length)
    return out
