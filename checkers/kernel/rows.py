"""The rows the kernel's stages take and hand on, in one layout whatever the engine.

A history becomes rows of a few kinds (`extract`): a send event, a record
read, a record processed, a read run, a commit's offset, a record on a
replica's disk. The first stage takes the rows of a shard of values (every
row of a value together: `BY_VALUE`), the second the rows of a shard of
partitions (`BY_PARTITION`): what the first hands on (each acknowledged
send with its invocation, the positions reads found that no
acknowledgement holds, the final logs' records) and the rows it passes
through untouched. Every row has the same columns, int64 but the kind:
the in-process engine holds them as NumPy arrays, Spark's executors get
and give them as Arrow batches (`to_arrow`, `from_arrow`).

A position is one number, `partition << POS_BITS | offset`: a history's
partitions are below 2**23 and its offsets below 2**40 (larger ones are
folded below it first, checkers/offsets.py), so every position is >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.history.format import MAX_OFFSET

POS_BITS = 40
NONE = -1

# The kinds of rows. What each column holds, by kind (x and y: see each):
SEND_INVOKE = 0  # value, index, process (y: the send's key)
SEND_OK = 1  # value, pos (acknowledged), index, process
SEND_FAIL = 2  # value, index, process
SEND_INFO = 3  # value, index, process
READ = 4  # value, pos, index (the poll's), process
PROCESSED_OK = 5  # a record a `process` completion holds: value, pos, index, process
PROCESSED_FAIL = 6
PROCESSED_INFO = 7
PROCESSED_OPEN = 8  # a record of a `process` invocation never completed (the driver's pairing names them)
RUN = 9  # a read run (checkers/kernel/read_order.py): value (its first), pos (its first), index, process,
#          x its last value, y its first slot << 32 | its records
COMMIT_INVOKE = 10  # one offset of a commit: pos (partition, the offset committed), index, process, x its group
COMMIT_OK = 11
COMMIT_FAIL = 12
COMMIT_INFO = 13
REPLICA = 14  # a record on a node's disk at the end: value, pos, process (the node's number), x its leader epoch
ACK = 15  # (stage 1 ->) an acknowledged send: value, pos, index (its completion), process, x its invocation's
#           index, y the first read of the value at that position (-1: none)
EXTRA = 16  # (stage 1 ->) a position a value was read at that is not its acknowledged one: value, pos, index
#             (the first read there)
FINAL = 17  # (stage 1 ->) a record of a final log: value, pos
RESULT = 18  # a shard's partial results (Spark's engine: their bytes in a column of their own)

BY_VALUE = frozenset({SEND_INVOKE, SEND_OK, SEND_FAIL, SEND_INFO, READ, PROCESSED_OK, PROCESSED_FAIL,
                      PROCESSED_INFO, PROCESSED_OPEN})
# Passed through the first stage, to the second.
PASSED = frozenset({RUN, COMMIT_INVOKE, COMMIT_OK, COMMIT_FAIL, COMMIT_INFO, REPLICA})

COLUMNS = ("kind", "value", "pos", "index", "process", "x", "y")


@dataclass
class Rows:
    """Rows of every kind, a NumPy array per column (COLUMNS)."""

    kind: np.ndarray
    value: np.ndarray
    pos: np.ndarray
    index: np.ndarray
    process: np.ndarray
    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.kind)

    @staticmethod
    def empty() -> "Rows":
        return Rows(np.empty(0, np.int8), *(np.empty(0, np.int64) for _ in COLUMNS[1:]))

    @staticmethod
    def of(kind: int, n: int, **columns: np.ndarray) -> "Rows":
        """`n` rows of `kind`, each column given or -1."""
        full = {name: np.asarray(columns[name], np.int64) if name in columns else np.full(n, NONE, np.int64)
                for name in COLUMNS[1:]}
        return Rows(np.full(n, kind, np.int8), **full)

    @staticmethod
    def joined(parts: list["Rows"]) -> "Rows":
        parts = [p for p in parts if len(p)]
        if not parts:
            return Rows.empty()
        if len(parts) == 1:
            return parts[0]
        return Rows(*(np.concatenate([getattr(p, name) for p in parts]) for name in COLUMNS))

    def take(self, at: np.ndarray) -> "Rows":
        return Rows(*(getattr(self, name)[at] for name in COLUMNS))

    def of_kinds(self, kinds) -> "Rows":
        """The rows of these kinds, in order."""
        if not len(self):
            return self
        wanted = np.zeros(max(max(kinds), int(self.kind.max())) + 1, bool)
        wanted[list(kinds)] = True
        return self.take(np.flatnonzero(wanted[self.kind]))


def partition_of(pos: np.ndarray) -> np.ndarray:
    return pos >> POS_BITS


def offset_of(pos: np.ndarray) -> np.ndarray:
    return pos & MAX_OFFSET


def packed(partition: np.ndarray, offset: np.ndarray) -> np.ndarray:
    return (partition << POS_BITS) | offset


# Spark's and Arrow's layout of rows: the columns and, for the second stage's
# shuffle, each row's partition (-1 for a result), and a result's bytes.
SPARK_SCHEMA = "kind byte, value long, pos long, `index` long, process long, x long, y long"
SPARK_SCHEMA_KEYED = SPARK_SCHEMA + ", partition long, result binary"


def to_arrow(rows: Rows, keyed: bool = False, results: list[bytes] = ()):
    """`rows` as an Arrow record batch (SPARK_SCHEMA, or SPARK_SCHEMA_KEYED
    with each row's partition and, after them, a RESULT row per `results`)."""
    import pyarrow as pa

    if not keyed:
        return pa.RecordBatch.from_arrays([pa.array(getattr(rows, name)) for name in COLUMNS],
                                          names=list(COLUMNS))
    n = len(rows) + len(results)
    columns = [pa.array(np.concatenate((rows.kind, np.full(len(results), RESULT, np.int8))))]
    for name in COLUMNS[1:]:
        columns.append(pa.array(np.concatenate((getattr(rows, name), np.full(len(results), NONE, np.int64)))))
    has_pos = rows.pos >= 0
    columns.append(pa.array(np.concatenate((np.where(has_pos, rows.pos >> POS_BITS, NONE),
                                            np.full(len(results), NONE, np.int64)))))
    columns.append(pa.array([None] * len(rows) + list(results), pa.binary()) if results
                   else pa.nulls(n, pa.binary()))
    return pa.RecordBatch.from_arrays(columns, names=list(COLUMNS) + ["partition", "result"])


def from_arrow(batches) -> tuple[Rows, list[bytes]]:
    """Record batches (either layout) as Rows, and the results they carry."""
    import pyarrow as pa

    parts, results = [], []
    for batch in batches:
        if not batch.num_rows:
            continue
        kind = batch.column(0).to_numpy(zero_copy_only=False)
        if "result" in batch.schema.names and (kind == RESULT).any():
            at = np.flatnonzero(kind == RESULT)
            results += batch.column("result").take(pa.array(at)).to_pylist()
            batch = batch.take(pa.array(np.flatnonzero(kind != RESULT)))
            kind = batch.column(0).to_numpy(zero_copy_only=False)
        parts.append(Rows(kind.astype(np.int8, copy=False),
                          *(batch.column(name).to_numpy(zero_copy_only=False) for name in COLUMNS[1:])))
    return Rows.joined(parts), results
