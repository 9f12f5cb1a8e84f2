"""Spark's engine: the kernel's two stages as one Spark job, in the executors.

Spark reads the history: a task per Parquet row group (and per replica's
disk dump), each read by the executor's Python with Arrow and made into
the kernel's rows (checkers/kernel/extract.py), which no Spark scan of the
nested records matches for speed. The rows are shuffled by value (blocks
of 2**16 consecutive values go to one shard, so a shard's values stay dense
for checkers/key_rows.py) to the first stage, whose tasks each run
`first_stage` on their shard and give the rows it hands on, keyed by
partition, with their partial results; those are shuffled by partition to
the second stage, whose tasks run `second_stage` and give their partial
results with the first stage's, and the transactions' dependency edges
(the first stage's wr passed through the shuffle, each task's ww) as
Arrow rows, kept by Spark (persisted, so that the stages run once).

The cycles (checkers/kernel/txn_segments.py): each second-stage task also
gives its edges' backward intervals, merged; the driver collects them (far
fewer than the edges: two int64 arrays) with the partial results, merges
them into the segments, and broadcasts the segments with the spans of the
transactions whose completion or invocation a segment holds (a part of
what it holds already). A third stage cuts the edges (those in no segment
dropped in the executors), shuffles them by segment, and searches each
task's segments (`cycle_stage`). Every row crosses between the JVM and
Python as Arrow (`mapInArrow`). The driver collects only partial results
(counts and the first examples of each shard) and the backward intervals:
never the edges, nor the history's rows.

The executors need Python with this project installed, as this process
has it (on `local[*]` and a standalone cluster on this machine, the same
virtual environment: `spark.pyspark.python` names it).
"""

from __future__ import annotations

import gc
from functools import partial
from pathlib import Path

import numpy as np
import orjson

from checkers.kernel import rows as r
from checkers.kernel.extract import extract, replica_rows
from checkers.kernel.facts import Facts
from checkers.kernel.stages import cycle_stage, first_stage, second_stage
from checkers.kernel.transactions import Spans
from checkers.kernel.txn_segments import WR, Cut, backward, by_graph, cut, edge_pairs, merged
from core.history.batches import Names, decode, file_tables
from core.history.dumps import columns, read_dump

# The history's columns the kernel's rows are made of.
COLUMNS = ("index", "time", "process", "type", "f", "key", "value", "partition", "offset", "records", "offsets",
           "group", "sends", "isolation")
# Rows handed from one stage to the next at most in one Arrow batch.
BATCH_ROWS = 1 << 20
_HISTORY, _DUMP = 0, 1
# What the second stage gives: edges (kind WW or WR: a -> b), its backward
# intervals (INTERVAL: [a, b]) and partial results (RESULT); and what the
# cut gives, by segment (txn_segments.Cut).
STAGED = "kind byte, a long, b long, result binary"
_INTERVAL, _RESULT = 8, 9
CUT = "segment long, kind byte, a long, b long"


def tasks(files: list[Path], dumps: dict[str, Path], replica_nodes: list[str]) -> list[tuple[int, str, int]]:
    """What the reading tasks read: (kind, path, row group or node number)."""
    import pyarrow.parquet as pq

    found = [(_HISTORY, str(Path(f).absolute()), g) for f in files
             for g in range(pq.ParquetFile(str(f)).metadata.num_row_groups)]
    return found + [(_DUMP, str(Path(dumps[name]).absolute()), node) for node, name in enumerate(replica_nodes)]


def run(spark, files: list[Path], facts: Facts, names: Names, dumps: dict[str, Path], fold: dict[int, int],
        extra: r.Rows, shards: int, spans: Spans) -> list[dict]:
    """The shards' partial results of a Spark job over the history's
    Parquet `files`, the nodes' `dumps` and `extra` rows (the driver's,
    few), and of one over the cycles' segments where there are any;
    `shards` partitions each shuffle; `spans`: the completed transactions'
    (none: no edge, so no second job and nothing persisted)."""
    import pyarrow as pa
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    work = tasks(files, dumps, facts.replica_nodes)
    table = pa.table({"kind": pa.array([w[0] for w in work], pa.int8()), "path": [w[1] for w in work],
                      "part": pa.array([w[2] for w in work], pa.int64())})
    read = spark.createDataFrame(table).repartition(max(1, len(work))).mapInArrow(
        partial(_read, names=Names(names.ops, names.groups), fold=fold), r.SPARK_SCHEMA)
    if len(extra):
        read = read.unionByName(spark.createDataFrame(pa.Table.from_batches([r.to_arrow(extra.rows())]),
                                                      r.SPARK_SCHEMA))
    handed = read.repartition(shards, F.shiftright("value", r.VALUE_BLOCK_BITS)).mapInArrow(
        partial(_first, facts=facts), r.SPARK_SCHEMA_KEYED)
    staged = handed.repartition(shards, "partition").mapInArrow(partial(_second, facts=facts), STAGED)
    if not len(spans):
        return _partials(staged.toArrow())
    staged = staged.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        head = staged.filter(F.col("kind") >= _INTERVAL).toArrow()
        partials = _partials(head)
        kind = head.column("kind").to_numpy()
        at = np.flatnonzero(kind == _INTERVAL)
        segments = merged(head.column("a").to_numpy()[at], head.column("b").to_numpy()[at])
        del head, kind, at
        if not len(segments):
            return partials
        inside = (segments.of(spans.done) >= 0) | (segments.of(spans.invoked) >= 0)
        shared = spark.sparkContext.broadcast((segments, spans.take(np.flatnonzero(inside))))
        del inside
        try:
            rows = staged.filter(F.col("kind") <= WR).mapInArrow(partial(_cut, shared=shared), CUT)
            found = rows.repartition(shards, "segment").mapInArrow(partial(_search, shared=shared), "result binary")
            return partials + [orjson.loads(row["result"]) for row in found.collect()]
        finally:
            shared.destroy()
    finally:
        staged.unpersist()


def _worker_objects_set_aside() -> None:
    """Everything a task's Python worker holds as the task begins (its
    modules, Numba's, pyarrow's, pandas') left out of the collector's
    reach: PySpark's daemon runs a full collection after every task of a
    reused worker, which walked them all, more CPU than a small history's
    tasks themselves take (docs/decisions.md, "The executors' Python
    workers kept out of the collector"). What the task makes is collected
    as before."""
    gc.freeze()


def _partials(table) -> list[dict]:
    """The partial results of a table of STAGED rows."""
    kind = table.column("kind").to_numpy()
    return [orjson.loads(b) for b in table.column("result").take(np.flatnonzero(kind == _RESULT)).to_pylist()]


def _read(batches, names: Names, fold: dict[int, int]):
    """A reading task's rows: each task row names a row group of the history or a node's dump."""
    _worker_objects_set_aside()
    for batch in batches:
        for kind, path, part in zip(*(batch.column(i).to_pylist() for i in range(3))):
            if kind == _HISTORY:
                for table in file_tables(Path(path), COLUMNS, [part]):
                    yield from _batches(extract(decode(table, names), fold)[0].rows())
            else:
                for chunk in read_dump(Path(path)):
                    yield from _batches(replica_rows(part, *columns(chunk), fold))


def _batches(rows: r.Rows, keyed: bool = False):
    for start in range(0, len(rows), BATCH_ROWS):
        yield r.to_arrow(rows.take(slice(start, start + BATCH_ROWS)), keyed=keyed)


def _first(batches, facts: Facts):
    _worker_objects_set_aside()
    shard, _ = r.from_arrow(batches)
    handed, found = first_stage(shard, facts)
    del shard
    yield from _batches(handed.rows(), keyed=True)
    yield r.to_arrow(r.Rows.empty(), keyed=True, results=[orjson.dumps(found, option=orjson.OPT_NON_STR_KEYS)])


def _second(batches, facts: Facts):
    _worker_objects_set_aside()
    shard, results = r.from_arrow(batches)
    found, edges = second_stage(shard, facts)
    del shard
    results.append(orjson.dumps(found, option=orjson.OPT_NON_STR_KEYS))
    intervals = backward(*edge_pairs(edges))
    for start in range(0, len(edges), BATCH_ROWS):
        part = edges.take(slice(start, start + BATCH_ROWS))
        yield _staged(part.value.astype(np.int8), part.x, part.y)
    yield _staged(np.full(len(intervals), _INTERVAL, np.int8), intervals.lo, intervals.hi)
    yield _staged(np.full(len(results), _RESULT, np.int8), np.full(len(results), r.NONE), np.full(len(results), r.NONE),
                  results)


def _staged(kind: np.ndarray, a: np.ndarray, b: np.ndarray, results: list[bytes] = ()):
    """STAGED rows as an Arrow record batch."""
    import pyarrow as pa

    result = pa.array(results, pa.binary()) if len(results) else pa.nulls(len(kind), pa.binary())
    return pa.RecordBatch.from_arrays([pa.array(kind), pa.array(a), pa.array(b), result],
                                      names=["kind", "a", "b", "result"])


def _cut(batches, shared):
    """A task's edges cut by segment (txn_segments.cut)."""
    _worker_objects_set_aside()
    import pyarrow as pa

    segments, spans = shared.value
    parts = [by_graph(*(batch.column(name).to_numpy(zero_copy_only=False) for name in ("kind", "a", "b")))
             for batch in batches]
    ww, wr = (np.concatenate([p[i] for p in parts] or [np.empty((0, 2), np.int64)]) for i in (0, 1))
    rows = cut(ww, wr, segments, spans)
    del parts, ww, wr
    for start in range(0, max(len(rows), 1), BATCH_ROWS):
        part = rows.take(slice(start, start + BATCH_ROWS))
        yield pa.RecordBatch.from_arrays([pa.array(part.segment), pa.array(part.kind), pa.array(part.a),
                                          pa.array(part.b)], names=["segment", "kind", "a", "b"])


def _search(batches, shared):
    """A task's segments searched (`cycle_stage`): its partial result."""
    _worker_objects_set_aside()
    import pyarrow as pa

    _, spans = shared.value
    rows = Cut.joined([Cut(*(batch.column(name).to_numpy(zero_copy_only=False)
                             for name in ("segment", "kind", "a", "b"))) for batch in batches if batch.num_rows])
    found = orjson.dumps(cycle_stage(rows, spans), option=orjson.OPT_NON_STR_KEYS)
    yield pa.RecordBatch.from_arrays([pa.array([found], pa.binary())], names=["result"])


def shards_for(events: int, cores: int) -> int:
    """The shards of each stage for a history of `events`: one for a small
    history (what it pays for is tasks, not work), else about
    EVENTS_PER_SHARD each and at least two per core."""
    if events <= SMALL_EVENTS:
        return 1
    return max(2 * cores, -(-events // EVENTS_PER_SHARD))


SMALL_EVENTS = 300_000
EVENTS_PER_SHARD = 2_500_000
