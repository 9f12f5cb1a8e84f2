"""Loading a history into Spark, validated, in the columns the checkers use.

JSONL is validated line by line in Python while it is written to a Parquet
file in a scratch folder (the checkers then read that); Parquet is validated
in streaming batches and read as it is. Either way the checkers see one
DataFrame in `core.history.parquet.arrow_schema()`'s columns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from core.history.files import HistorySource, iter_source_jsonl
from core.history.jsonl import ReadReport
from core.history.parquet import validate_parquet, write_parquet
from core.errors import HistoryError

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A validated history as Parquet files Spark can read."""

    files: list[Path]
    events: int
    format: str
    warnings: list[str] = field(default_factory=list)
    # Offsets too large for the checker's packed positions (checkers/offsets.py).
    to_fold: set[int] = field(default_factory=set)


@dataclass
class Loaded:
    df: object  # pyspark DataFrame
    events: int
    format: str
    warnings: list[str] = field(default_factory=list)


def prepare(source: HistorySource, scratch: Path) -> Prepared:
    """Validate a history; JSONL is converted to Parquet in `scratch` on the way."""
    to_fold: set[int] = set()
    if source.format == "jsonl":
        report = ReadReport()
        dest = scratch / "history.parquet"
        n = write_parquet(iter_source_jsonl(source, report), dest, big_offsets=to_fold)
        return Prepared([dest], n, "jsonl", list(report.warnings), to_fold)
    n = validate_parquet(source.files, big_offsets=to_fold)
    return Prepared(list(source.files), n, "parquet", to_fold=to_fold)


def load(spark, prepared: Prepared) -> Loaded:
    df = spark.read.parquet(*[str(f) for f in prepared.files])
    return Loaded(normalise(df), prepared.events, prepared.format, prepared.warnings)


def normalise(df):
    """Cast to the checkers' column types, adding optional columns as nulls."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    want = {
        "index": T.LongType(), "time": T.LongType(), "process": T.LongType(),
        "type": T.StringType(), "f": T.StringType(),
        "key": T.LongType(), "value": T.LongType(), "partition": T.LongType(),
        "offset": T.LongType(), "error": T.StringType(),
        "records": T.ArrayType(T.StructType([
            T.StructField("partition", T.LongType()), T.StructField("offset", T.LongType()),
            T.StructField("key", T.LongType()), T.StructField("value", T.LongType())])),
        "partitions": T.ArrayType(T.LongType()),
        "offsets": T.ArrayType(T.StructType([
            T.StructField("partition", T.LongType()), T.StructField("offset", T.LongType())])),
        "ends": T.ArrayType(T.StructType([
            T.StructField("partition", T.LongType()), T.StructField("offset", T.LongType())])),
        "extra": T.StringType(),
    }
    cols = []
    present = set(df.columns)
    for name, typ in want.items():
        if name == "records" and name in present and df.schema["records"].dataType != typ:
            # A user's Parquet may order struct fields differently or lack `key`.
            fields = {f.name for f in df.schema["records"].dataType.elementType.fields}
            cols.append(F.transform("records", lambda r: F.struct(
                r["partition"].cast("long").alias("partition"), r["offset"].cast("long").alias("offset"),
                (r["key"].cast("long") if "key" in fields else F.lit(None).cast("long")).alias("key"),
                r["value"].cast("long").alias("value"))).alias(name))
        elif name in present:
            cols.append(F.col(name).cast(typ).alias(name))
        else:
            cols.append(F.lit(None).cast(typ).alias(name))
    try:
        return df.select(*cols)
    except Exception as e:
        raise HistoryError(f"history columns do not fit HISTORY.md: {str(e).splitlines()[0]}") from None
