"""Statistics of a history for reports: throughput and latency.

No pass of its own: the driver's read of the history (checkers/folds/pairs.py)
pairs every operation with its invocation (sends by value, every other
operation by order within its process and `f`: the k-th completion answers
the k-th invocation), counts invocations, and counts completions in
log-scale latency histograms (buckets 4 % wide) by operation, outcome and
second. This module reads quantiles off the histograms, per second and
overall, and completions per second and in all. Quantiles are exact to within a bucket; maxima are exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

import numpy as np

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
    rows (`reading.HistoryReader.histogram_rows`; a key may come more than
    once): a row per (second, f, outcome, bucket) seen, so sized by the
    run's length and the spread of its latencies, not by its events."""
    if not rows:
        return Latency([], [], [], {})
    overall = _quantiles(rows, ["f", "type"])
    per_second = _quantiles([r for r in rows if r["f"] in ("send", "poll")], ["second", "f", "type"])
    by_second: dict[tuple, int] = {}
    for r in rows:
        key = (r["second"], r["f"], r["type"])
        by_second[key] = by_second.get(key, 0) + r["n"]
    throughput = [{"second": second, "f": f, "type": t, "count": n} for (second, f, t), n in sorted(by_second.items())]
    completions: dict[str, dict[str, int]] = {}
    for row in overall:  # each (f, outcome)'s count, in order
        completions.setdefault(row["f"], {})[row["type"]] = row["count"]
    return Latency(overall, per_second, throughput, completions)


def _quantiles(rows: list, keys: list[str]) -> list[dict]:
    """Quantiles per group of `keys`, from histogram rows (keys, bucket, n,
    max), sorted by `keys`. Vectorised with NumPy: thousands of per-second
    groups would take long one by one (and pandas, which did this before,
    was a costly import in every `harness` command: docs/decisions.md, "A
    cold check's start")."""
    if not rows:
        return []
    # Each row's group and fields taken by `itemgetter`, in C: a generator
    # per row was where this spent its time.
    of_row = list(map(itemgetter(*keys), rows)) if len(keys) > 1 else [(k,) for k in map(itemgetter(*keys), rows)]
    groups = sorted(set(of_row))
    size = len(rows)
    group = np.fromiter(map(dict(zip(groups, range(len(groups)))).__getitem__, of_row), np.int64, size)
    bucket, n, top = (np.fromiter(map(itemgetter(name), rows), np.int64, size) for name in ("bucket", "n", "max"))
    order = np.lexsort((bucket, group))
    # Each group's rows in bucket order (a bucket given twice is counted where it is).
    group, bucket, n, top = group[order], bucket[order], n[order], top[order]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    lengths = np.diff(np.r_[starts, len(group)])
    count = np.add.reduceat(n, starts)
    tops = np.maximum.reduceat(top, starts).astype(float).tolist()
    cum = np.cumsum(n)
    within = cum - np.repeat(cum[starts] - n[starts], lengths)  # the count up to each row, in its group
    total = np.repeat(count, lengths)
    columns = {}
    for q in QUANTILES:
        # The first bucket whose cumulative count reaches q of the group's:
        # the group's first row, moved on by its rows that fall short.
        first = bucket[starts + np.add.reduceat((within < q * total).astype(np.int64), starts)].tolist()
        # The bucket's upper edge, never above the largest latency seen.
        columns[f"p{int(q * 100)}_ms"] = [round(min(BUCKET_FLOOR_NS * BUCKET_GROWTH ** b, top) / 1e6, 3)
                                          for b, top in zip(first, tops)]
    out = []
    for i, key in enumerate(groups):
        row = dict(zip(keys, key))
        row["count"] = int(count[i])
        for name, values in columns.items():
            row[name] = values[i]
        row["max_ms"] = round(tops[i] / 1e6, 3)
        out.append(row)
    return out
