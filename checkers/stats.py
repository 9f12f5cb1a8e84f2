"""Statistics of a history for reports: counts, throughput, latency, faults.

No pass of its own: the driver's read of the history (checkers/reading.py)
pairs every operation with its invocation (sends by value, every other
operation by order within its process and `f`: the k-th completion answers
the k-th invocation), counts invocations, and counts completions in
log-scale latency histograms (buckets 4 % wide) by operation, outcome and
second; it also keeps the nemesis's events. This module reads quantiles off
the histograms, per second and overall, and completions per second and in
all. Quantiles are exact to within a bucket; maxima are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pandas as pd

from core.history.format import NEMESIS, NEMESIS_PROCESS_ID

QUANTILES = (0.5, 0.95, 0.99)
BUCKET_GROWTH = 1.04
BUCKET_FLOOR_NS = 1000  # latencies under 1 µs share the first bucket


@dataclass
class Latency:
    overall: list[dict]  # quantiles by (f, outcome)
    per_second: list[dict]  # quantiles by (second of completion, f, outcome), sends and polls
    throughput: list[dict]  # completions by (second, f, outcome)
    completions: dict[str, dict[str, int]]  # f -> outcome -> completions


HISTOGRAM_COLUMNS = ("f", "type", "second", "bucket", "n", "max")


def latency(rows: list) -> Latency:
    """Latency quantiles in ms by (f, outcome), overall and per second of
    completion, and completions per second and in all, from the histograms'
    rows (`send_histogram`'s, `op_rows`' paired ones, `piped_histogram`'s; a
    key may come more than once): a row per (second, f, outcome, bucket) seen,
    so sized by the run's length and the spread of its latencies, not by its
    events."""
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
    """The nemesis's events, in order, from `anomalies.FewEvents`' rows."""
    rows = sorted((r for r in few if r["process"] == NEMESIS_PROCESS_ID), key=lambda r: r["index"])
    events = []
    for r in rows:
        extra = orjson.loads(r["extra"]) if r["extra"] else {}
        events.append({"index": r["index"], "time": r["time"], "type": r["type"], "f": r["f"],
                       "process": NEMESIS, **extra})
    return events

