"""The rows the kernel's stages take and hand on, in one layout whatever the engine.

A history becomes rows of a few kinds (`extract`): a send event, a record
read, a record processed, a read run, a commit's offset, a record on a
replica's disk. The first stage takes the rows of a shard of values (every
row of a value together), the second the rows of a shard of
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

from checkers.compiled import compiled, modulo

POS_BITS = 40
NONE = -1

# The kinds of rows. What each column holds, by kind (x and y: see each):
SEND_INVOKE = 0  # value, index, process; x TXN_SEND for a transaction's send (-1: a plain send), y then its
#                 place in its event's list of sends
SEND_OK = 1  # value, pos (acknowledged), index, process
SEND_FAIL = 2  # value, index, process
SEND_INFO = 3  # value, index, process
READ = 4  # value, pos, index (the poll's), process, x the transaction that read it (its completion's index; -1: a
#          poll)
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
TXN_ACK = 19  # (stage 1 ->) a committed transaction's send: value, pos, index (the transaction: its completion's
#               index), process, x its place in its invocation's list of sends
EDGE = 20  # (stage 1 ->, stage 2 ->) a dependency edge between transactions: value its graph (ww or wr,
#            checkers/kernel/txn_segments.py), x the node it leaves, y the node it enters

# The x of a transaction's send rows.
TXN_SEND = 1

# Rows of one family go together (a `Shard` holds each family's as one block).
SENDS, READS, PROCESSED, RUNS, COMMITS, REPLICAS, ACKS, EXTRAS, FINALS, TXN_ACKS, EDGES = range(11)
FAMILY = np.array([SENDS] * 4 + [READS] + [PROCESSED] * 4 + [RUNS] + [COMMITS] * 4 + [REPLICAS, ACKS, EXTRAS, FINALS,
                                                                                      -1, TXN_ACKS, EDGES], np.int8)
assert len(FAMILY) == EDGE + 1
# Passed through the first stage, to the second.
PASSED = (RUNS, COMMITS, REPLICAS)
# The families the first stage's shards take, all of a value's rows in one
# shard; the rest go to the second stage's, all of a partition's in one.
BY_VALUE = (SENDS, READS, PROCESSED)
# Values go to the first stage's shards in blocks of 2**VALUE_BLOCK_BITS, so
# that a shard's values stay dense for checkers/key_rows.py.
VALUE_BLOCK_BITS = 16

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
        """`n` rows of `kind`, each column given or -1 (a column of one
        number takes no memory: `constant`)."""
        full = {name: np.asarray(columns[name], np.int64) if name in columns else constant(NONE, n)
                for name in COLUMNS[1:]}
        return Rows(constant(kind, n, np.int8), **full)

    @staticmethod
    def joined(parts: list["Rows"]) -> "Rows":
        parts = [p for p in parts if len(p)]
        if not parts:
            return Rows.empty()
        if len(parts) == 1:
            return parts[0]
        return Rows(*(_joined([getattr(p, name) for p in parts]) for name in COLUMNS))

    def take(self, at) -> "Rows":
        return Rows(*(_taken(getattr(self, name), at) for name in COLUMNS))

    def split_rows(self, family: int, k: int) -> list["Rows"]:
        """These rows (of `family`) in `k` parts, as `Shard.split` cuts them.
        Rows that all fall in one part are that part as they are, not a copy
        (a part of a shard cut as the second stage's shards are: `extract`
        cuts a batch's read runs and commits so)."""
        if k == 1:
            return [self]
        by_value = family in BY_VALUE
        only = _one_part(self.value if by_value else self.pos, by_value, k)
        if only >= 0:
            return [self if i == only else Rows.empty() for i in range(k)]
        key = shard_of_values(self.value, k) if by_value else (self.pos >> POS_BITS) % k
        return [self.take(np.flatnonzero(key == i)) for i in range(k)]



class Shard:
    """Rows by family: what a stage takes and gives. A family's rows are
    kept in the parts they came in (a batch's each, in order), joined only
    when a stage asks for them whole (`shard[family]`); `parts` gives them
    as they are, for the passes that go a part at a time. A family no row
    has is empty."""

    def __init__(self, blocks: dict[int, Rows | list[Rows]] | None = None) -> None:
        self.blocks: dict[int, list[Rows]] = {}
        for family, rows in (blocks or {}).items():
            parts = [p for p in (rows if isinstance(rows, list) else [rows]) if len(p)]
            if parts:
                self.blocks[family] = parts

    def __getitem__(self, family: int) -> Rows:
        parts = self.blocks.get(family)
        if not parts:
            return Rows.empty()
        if len(parts) > 1:
            self.blocks[family] = parts = [Rows.joined(parts)]
        return parts[0]

    def parts(self, family: int) -> list[Rows]:
        return self.blocks.get(family, [])

    def __len__(self) -> int:
        return sum(len(p) for parts in self.blocks.values() for p in parts)

    @staticmethod
    def of(rows: Rows) -> "Shard":
        """Rows of any families as a shard: each family's in their order."""
        if not len(rows):
            return Shard()
        family = FAMILY[rows.kind]
        if (family[1:] == family[:-1]).all():
            return Shard({int(family[0]): rows})
        order = np.argsort(family, kind="stable")
        edges = np.searchsorted(family[order], np.arange(len(FAMILY) + 1))
        return Shard({f: rows.take(order[edges[f]:edges[f + 1]]) for f in range(len(FAMILY) - 1)
                      if edges[f + 1] > edges[f]})

    @staticmethod
    def joined(shards: list["Shard"]) -> "Shard":
        """The shards' rows, each family's in the shards' order (their parts, not copied)."""
        out = Shard()
        for s in shards:
            for family, parts in s.blocks.items():
                out.blocks.setdefault(family, []).extend(parts)
        return out

    def split(self, k: int) -> list["Shard"]:
        """The rows in `k` shards: all of a value's rows of the BY_VALUE
        families in one, all of a partition's of the others in one."""
        if k == 1:
            return [self]
        out = [Shard() for _ in range(k)]
        for family, parts in self.blocks.items():
            for rows in parts:
                for shard, taken in zip(out, rows.split_rows(family, k)):
                    if len(taken):
                        shard.blocks.setdefault(family, []).append(taken)
        return out

    def only(self, *families: int) -> "Shard":
        return Shard({f: list(self.blocks[f]) for f in families if f in self.blocks})

    def rows(self) -> Rows:
        """Every row, one block."""
        return Rows.joined([p for parts in self.blocks.values() for p in parts])


def shard_of_values(value: np.ndarray, k: int) -> np.ndarray:
    """Each value's shard of `k`: by its block of 2**VALUE_BLOCK_BITS values."""
    return (value >> VALUE_BLOCK_BITS) % k


@compiled
def _one_part(column, by_value, k):
    """The part of `k` every row goes to (by `column`: its values, else its
    positions), or -1 where they go to more than one (or there are none)."""
    part = -1
    for x in column:
        p = modulo((x >> VALUE_BLOCK_BITS) if by_value else (x >> POS_BITS), k)
        if part < 0:
            part = p
        elif p != part:
            return -1
    return part


def constant(x: int, n: int, dtype=np.int64) -> np.ndarray:
    """A read-only column of `n` times `x`, in no memory (every element is the one number)."""
    return np.broadcast_to(np.array(x, dtype), (n,))


def _is_constant(column: np.ndarray) -> bool:
    return column.strides == (0,) and len(column) > 0


def _joined(columns: list[np.ndarray]) -> np.ndarray:
    if all(_is_constant(c) for c in columns) and len({int(c[0]) for c in columns}) == 1:
        return constant(columns[0][0], sum(len(c) for c in columns), columns[0].dtype)
    return np.concatenate(columns)


def _taken(column: np.ndarray, at) -> np.ndarray:
    if _is_constant(column):
        return constant(column[0], len(range(len(column))[at]) if isinstance(at, slice) else len(at), column.dtype)
    return column[at]


def packed(partition: np.ndarray, offset: np.ndarray) -> np.ndarray:
    return (partition << POS_BITS) | offset


# Spark's and Arrow's layout of rows: the columns and, for the second stage's
# shuffle, each row's partition (-1 for a result; an edge's node it leaves,
# which spreads the edges the second stage passes on over its shards), and a
# result's bytes.
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
    spread = np.where(rows.kind == EDGE, rows.x, NONE)
    columns.append(pa.array(np.concatenate((np.where(has_pos, rows.pos >> POS_BITS, spread),
                                            np.full(len(results), NONE, np.int64)))))
    columns.append(pa.array([None] * len(rows) + list(results), pa.binary()) if results
                   else pa.nulls(n, pa.binary()))
    return pa.RecordBatch.from_arrays(columns, names=list(COLUMNS) + ["partition", "result"])


def from_arrow(batches) -> tuple[Shard, list[bytes]]:
    """Record batches (either layout) as a shard, and the results they carry."""
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
    return Shard.of(Rows.joined(parts)), results
