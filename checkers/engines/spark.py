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
results with the first stage's. Every row crosses between the JVM and
Python as Arrow (`mapInArrow`). The driver collects only the partial
results: counts and the first examples of each shard.

The executors need Python with this project installed, as this process
has it (on `local[*]` and a standalone cluster on this machine, the same
virtual environment: `spark.pyspark.python` names it).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import orjson

from checkers.kernel import rows as r
from checkers.kernel.extract import extract, replica_rows
from checkers.kernel.facts import Facts
from checkers.kernel.stages import first_stage, second_stage
from core.history.batches import Names, decode, file_tables
from core.history.dumps import columns, read_dump

# The history's columns the kernel's rows are made of.
COLUMNS = ("index", "time", "process", "type", "f", "key", "value", "partition", "offset", "records", "offsets",
           "group", "sends", "isolation")
# Rows handed from one stage to the next at most in one Arrow batch.
BATCH_ROWS = 1 << 20
_HISTORY, _DUMP = 0, 1


def tasks(files: list[Path], dumps: dict[str, Path], replica_nodes: list[str]) -> list[tuple[int, str, int]]:
    """What the reading tasks read: (kind, path, row group or node number)."""
    import pyarrow.parquet as pq

    found = [(_HISTORY, str(Path(f).absolute()), g) for f in files
             for g in range(pq.ParquetFile(str(f)).metadata.num_row_groups)]
    return found + [(_DUMP, str(Path(dumps[name]).absolute()), node) for node, name in enumerate(replica_nodes)]


def run(spark, files: list[Path], facts: Facts, names: Names, dumps: dict[str, Path], fold: dict[int, int],
        extra: r.Rows, shards: int) -> list[dict]:
    """The shards' partial results of one Spark job over the history's
    Parquet `files`, the nodes' `dumps` and `extra` rows (the driver's,
    few); `shards` partitions each shuffle."""
    import pyarrow as pa
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
    results = handed.repartition(shards, "partition").mapInArrow(partial(_second, facts=facts), "result binary")
    return [orjson.loads(row["result"]) for row in results.collect()]


def _read(batches, names: Names, fold: dict[int, int]):
    """A reading task's rows: each task row names a row group of the history or a node's dump."""
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
    shard, _ = r.from_arrow(batches)
    handed, found = first_stage(shard, facts)
    del shard
    yield from _batches(handed.rows(), keyed=True)
    yield r.to_arrow(r.Rows.empty(), keyed=True, results=[orjson.dumps(found, option=orjson.OPT_NON_STR_KEYS)])


def _second(batches, facts: Facts):
    import pyarrow as pa

    shard, results = r.from_arrow(batches)
    results.append(orjson.dumps(second_stage(shard, facts), option=orjson.OPT_NON_STR_KEYS))
    yield pa.RecordBatch.from_arrays([pa.array(results, pa.binary())], names=["result"])


def shards_for(events: int, cores: int) -> int:
    """The shards of each stage for a history of `events`: one for a small
    history (what it pays for is tasks, not work), else about
    EVENTS_PER_SHARD each and at least two per core."""
    if events <= SMALL_EVENTS:
        return 1
    return max(2 * cores, -(-events // EVENTS_PER_SHARD))


SMALL_EVENTS = 300_000
EVENTS_PER_SHARD = 2_500_000
