"""Statistics of a history for reports: counts, throughput, latency, faults.

No pass of its own: invocations are counted while operations are paired
(`ordered_ops`), completions per second and in all are summed from the
latency histograms, and the nemesis's events come with the final reads
(`anomalies.few_events`).

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

from dataclasses import dataclass

import orjson
import pandas as pd

from checkers.anomalies import KIND_NAMES
from core.errors import HistoryError
from core.history.format import NEMESIS, NEMESIS_PROCESS_ID

QUANTILES = (0.5, 0.95, 0.99)
BUCKET_GROWTH = 1.04
BUCKET_FLOOR_NS = 1000  # latencies under 1 µs share the first bucket


def _F():
    from pyspark.sql import functions as F

    return F


def ordered_ops(df):
    """Every operation but sends, with its place among its process's operations of that f.

    Returns the frame (persisted) and its summary by f (a few rows, for
    `paired`): the first completion with no invocation left to answer,
    whether a process had several of one f outstanding (pipelined), and
    the client's invocations.
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
    summary = ops.groupBy("f").agg(
        F.min(F.when(~inv & (F.col("k_comp") > F.col("k_inv")), F.col("index"))).alias("orphan"),
        F.count(F.when(~inv & (F.col("k_comp") < F.col("k_inv")), 1)).alias("pipelined"),
        F.count(F.when(inv & (F.col("process") >= 0), 1)).alias("invokes"))
    return ops, summary


def paired(summary: list) -> tuple[bool, dict[str, int]]:
    """From `ordered_ops`' summary rows: whether any process pipelined, and the
    client's invocations by f. Raises HistoryError at the first completion
    with no invocation left to answer."""
    orphans = [r["orphan"] for r in summary if r["orphan"] is not None]
    if orphans:
        raise HistoryError(f"index {min(orphans)}: a completion without an invocation (same process and f) before it")
    return any(r["pipelined"] > 0 for r in summary), {r["f"]: r["invokes"] for r in summary if r["invokes"]}


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


@dataclass
class Latency:
    overall: list[dict]  # quantiles by (f, outcome)
    per_second: list[dict]  # quantiles by (second of completion, f, outcome), sends and polls
    throughput: list[dict]  # completions by (second, f, outcome)
    completions: dict[str, dict[str, int]]  # f -> outcome -> completions


HISTOGRAM_COLUMNS = ("f", "type", "second", "bucket", "n", "max")


def latency_histogram(by_value, ops, pipelined: bool):
    """Completions by (f, outcome, second, latency bucket): count and largest latency.
    Every completion is counted: each answers one invocation."""
    F = _F()
    outcome = F.col("outcome")
    sends = by_value.where(F.col("n_comp") > 0).select(
        F.lit("send").alias("f"),
        F.when(outcome == 1, KIND_NAMES[1]).when(outcome == 2, KIND_NAMES[2]).otherwise(KIND_NAMES[3]).alias("type"),
        F.col("comp_time").alias("time"), (F.col("comp_time") - F.col("inv_time")).alias("latency"))
    lat = sends.unionByName(_op_latencies(ops, pipelined))
    bucket = F.when(F.col("latency") <= BUCKET_FLOOR_NS, 0).otherwise(
        F.ceil(F.log(BUCKET_GROWTH, F.col("latency") / BUCKET_FLOOR_NS))).cast("int")
    return (lat.groupBy("f", "type", F.floor(F.col("time") / 1e9).cast("long").alias("second"),
                        bucket.alias("bucket"))
            .agg(F.count("*").alias("n"), F.max("latency").alias("max")))


def latency(rows: list) -> Latency:
    """Latency quantiles in ms by (f, outcome), overall and per second of
    completion, and completions per second and in all, from `latency_histogram`'s
    rows: a row per (second, f, outcome, bucket) seen, so sized by the run's
    length and the spread of its latencies, not by its events."""
    pdf = pd.DataFrame([[r[c] for c in HISTOGRAM_COLUMNS] for r in rows], columns=list(HISTOGRAM_COLUMNS))
    if pdf.empty:
        return Latency([], [], [], {})
    overall = _quantiles(pdf, ["f", "type"])
    per_second = _quantiles(pdf[pdf["f"].isin(["send", "poll"])], ["second", "f", "type"])
    for row in per_second:
        row["second"] = int(row["second"])
    counts = pdf.groupby(["second", "f", "type"], sort=True)["n"].sum()
    throughput = [{"second": int(sec), "f": f, "type": t, "count": int(n)} for (sec, f, t), n in counts.items()]
    completions: dict[str, dict[str, int]] = {}
    for (f, t), n in pdf.groupby(["f", "type"], sort=True)["n"].sum().items():
        completions.setdefault(f, {})[t] = int(n)
    return Latency(overall, per_second, throughput, completions)


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


def faults(few: list) -> list[dict]:
    """The nemesis's events, in order, from `anomalies.few_events`' rows."""
    rows = sorted((r for r in few if r["process"] == NEMESIS_PROCESS_ID), key=lambda r: r["index"])
    events = []
    for r in rows:
        extra = orjson.loads(r["extra"]) if r["extra"] else {}
        events.append({"index": r["index"], "time": r["time"], "type": r["type"], "f": r["f"],
                       "process": NEMESIS, **extra})
    return events

