"""Statistics of a history for reports: counts, throughput, latency, faults.

Latency pairs a completion with its invocation: sends by value (from the
by-value frame), every other operation by order within its process and `f`
(the k-th completion answers the k-th invocation), which is also where a
completion without an invocation is caught.

Latency quantiles come from log-scale histograms (buckets 4 % wide) that
Spark counts with a plain hash aggregation; the driver reads the quantiles
off the histograms, per second and overall. Quantiles are exact to within a
bucket; maxima are exact.
"""

from __future__ import annotations

import orjson

from checkers.anomalies import KIND_NAMES
from core.errors import HistoryError
from core.history.format import NEMESIS, NEMESIS_PROCESS_ID

QUANTILES = (0.5, 0.95, 0.99)
BUCKET_GROWTH = 1.04
BUCKET_FLOOR_NS = 1000  # latencies under 1 µs share the first bucket


def _F():
    from pyspark.sql import functions as F

    return F


def op_counts(df) -> tuple[dict, list[dict]]:
    """Client events by (f, type), and completions per second by (f, type)."""
    F = _F()
    rows = (df.where(F.col("process") >= 0)
            .groupBy(F.floor(F.col("time") / 1e9).cast("long").alias("second"), "f", "type")
            .count().collect())
    totals: dict = {}
    per_second = []
    for r in rows:
        totals.setdefault(r["f"], {}).setdefault(r["type"], 0)
        totals[r["f"]][r["type"]] += r["count"]
        if r["type"] != "invoke":
            per_second.append({"second": r["second"], "f": r["f"], "type": r["type"], "count": r["count"]})
    per_second.sort(key=lambda x: (x["second"], x["f"], x["type"]))
    return totals, per_second


def ordered_ops(df):
    """Every operation but sends, with its place among its process's operations of that f.

    Raises HistoryError at the first completion with no invocation left to
    answer. Returns the frame (persisted) and whether any process had
    several of one f outstanding (pipelined).
    """
    from pyspark.sql import Window

    F = _F()
    w = Window.partitionBy("process", "f").orderBy("index")
    inv = F.col("type") == "invoke"
    ops = (df.where((F.col("process") < 0) | (F.col("f") != "send"))
           .select("process", "f", "type", "index", "time",
                   F.count(F.when(inv, 1)).over(w).alias("k_inv"),
                   F.count(F.when(~inv, 1)).over(w).alias("k_comp"),
                   F.last(F.when(inv, F.col("time")), ignorenulls=True).over(w).alias("last_inv_time"))
           .persist())
    row = ops.where(~inv).agg(
        F.min(F.when(F.col("k_comp") > F.col("k_inv"), F.col("index"))).alias("orphan"),
        F.count(F.when(F.col("k_comp") < F.col("k_inv"), 1)).alias("pipelined")).collect()[0]
    if row["orphan"] is not None:
        ops.unpersist()
        raise HistoryError(f"index {row['orphan']}: a completion without an invocation (same process and f) before it")
    return ops, row["pipelined"] > 0


def _op_latencies(ops, pipelined: bool):
    """(f, type, time, latency) of client completions, from `ordered_ops`."""
    F = _F()
    comp = ops.where((F.col("type") != "invoke") & (F.col("process") >= 0))
    # Usually one invocation is outstanding: the last one answers. Where a
    # process pipelined, the k-th invocation answers the k-th completion.
    direct = comp.where(F.col("k_inv") == F.col("k_comp")).select(
        "f", "type", "time", (F.col("time") - F.col("last_inv_time")).alias("latency"))
    if not pipelined:
        return direct
    invs = ops.where(F.col("type") == "invoke").select(
        "process", "f", F.col("k_inv").alias("k"), F.col("time").alias("inv_time"))
    piped = (comp.where(F.col("k_inv") > F.col("k_comp")).withColumnRenamed("k_comp", "k")
             .join(invs, ["process", "f", "k"])
             .select("f", "type", "time", (F.col("time") - F.col("inv_time")).alias("latency")))
    return direct.unionByName(piped)


def latency(by_value, ops, pipelined: bool) -> tuple[list[dict], list[dict]]:
    """Latency quantiles in ms by (f, outcome), overall and per second of completion."""
    F = _F()
    outcome = F.col("outcome")
    sends = by_value.where(F.col("n_comp") > 0).select(
        F.lit("send").alias("f"),
        F.when(outcome == 1, KIND_NAMES[1]).when(outcome == 2, KIND_NAMES[2]).otherwise(KIND_NAMES[3]).alias("type"),
        F.col("comp_time").alias("time"), (F.col("comp_time") - F.col("inv_time")).alias("latency"))
    lat = sends.unionByName(_op_latencies(ops, pipelined))
    bucket = F.when(F.col("latency") <= BUCKET_FLOOR_NS, 0).otherwise(
        F.ceil(F.log(BUCKET_GROWTH, F.col("latency") / BUCKET_FLOOR_NS))).cast("int")
    hist = (lat.groupBy("f", "type", F.floor(F.col("time") / 1e9).cast("long").alias("second"),
                        bucket.alias("bucket"))
            .agg(F.count("*").alias("n"), F.max("latency").alias("max")))
    pdf = hist.toPandas()
    if pdf.empty:
        return [], []
    overall = _quantiles(pdf, ["f", "type"])
    per_second = _quantiles(pdf[pdf["f"].isin(["send", "poll"])], ["second", "f", "type"])
    for row in per_second:
        row["second"] = int(row["second"])
    return overall, per_second


def _quantiles(pdf, keys: list[str]) -> list[dict]:
    """Quantiles per group of `keys`, from histogram rows (keys, bucket, n,
    max), sorted by `keys`. Vectorised: thousands of per-second groups would
    take seconds one by one."""
    g = (pdf.groupby(keys + ["bucket"], sort=True).agg(n=("n", "sum"), max=("max", "max"))
         .reset_index())
    by_group = g.groupby(keys, sort=True)
    cum, total = by_group["n"].cumsum(), by_group["n"].transform("sum")
    out = by_group.agg(count=("n", "sum"), top=("max", "max")).reset_index()
    tops = out["top"].astype(float).tolist()
    columns = {}
    for q in QUANTILES:
        # The first bucket whose cumulative count reaches q of the group's.
        first = g[cum >= q * total].groupby(keys, sort=True)["bucket"].first().tolist()
        # The bucket's upper edge, never above the largest latency seen.
        columns[f"p{int(q * 100)}_ms"] = [round(min(BUCKET_FLOOR_NS * BUCKET_GROWTH ** b, top) / 1e6, 3)
                                          for b, top in zip(first, tops)]
    rows = []
    for i, key in enumerate(out[keys].itertuples(index=False, name=None)):
        row = dict(zip(keys, key))
        row["count"] = int(out["count"].iat[i])
        for name, values in columns.items():
            row[name] = values[i]
        row["max_ms"] = round(tops[i] / 1e6, 3)
        rows.append(row)
    return rows


def faults(df) -> list[dict]:
    """The nemesis's events, in order."""
    F = _F()
    rows = sorted(df.where(F.col("process") == NEMESIS_PROCESS_ID)
                  .select("index", "time", "type", "f", "extra").collect(), key=lambda r: r["index"])
    events = []
    for r in rows:
        extra = orjson.loads(r["extra"]) if r["extra"] else {}
        events.append({"index": r["index"], "time": r["time"], "type": r["type"], "f": r["f"],
                       "process": NEMESIS, **extra})
    return events

