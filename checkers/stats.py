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


@dataclass
class Histograms:
    """The histograms' rows as columns: a row per (f, type, second, bucket)
    seen (a key may come more than once), f and type as codes into `fs` and
    `types` (their names), and each row's count `n` and largest latency."""

    fs: list[str]
    types: list[str]
    f: np.ndarray
    type: np.ndarray
    second: np.ndarray
    bucket: np.ndarray
    n: np.ndarray
    max: np.ndarray

    def __len__(self) -> int:
        return len(self.n)

    @staticmethod
    def of_rows(rows: list) -> "Histograms":
        """Rows as dicts of HISTOGRAM_COLUMNS, as columns."""
        fs, types = sorted({r["f"] for r in rows}), sorted({r["type"] for r in rows})
        f_code, type_code = {f: i for i, f in enumerate(fs)}, {t: i for i, t in enumerate(types)}
        size = len(rows)

        def column(name: str, code=None) -> np.ndarray:
            values = map(itemgetter(name), rows)
            return np.fromiter(values if code is None else map(code.__getitem__, values), np.int64, size)

        return Histograms(fs, types, column("f", f_code), column("type", type_code), column("second"),
                          column("bucket"), column("n"), column("max"))

    def take(self, at: np.ndarray) -> "Histograms":
        return Histograms(self.fs, self.types, self.f[at], self.type[at], self.second[at], self.bucket[at],
                          self.n[at], self.max[at])

    def sort_key(self, name: str) -> np.ndarray:
        """Column `name` as numbers in the order of its values (f and type by their names' order)."""
        if name == "second":
            return self.second
        names = self.fs if name == "f" else self.types
        rank = np.empty(len(names), np.int64)
        rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
        return rank[getattr(self, name)]

    def values(self, name: str, at: np.ndarray) -> list:
        """Column `name`'s values (f and type as names) at rows `at`."""
        if name == "second":
            return self.second[at].tolist()
        names = self.fs if name == "f" else self.types
        return [names[i] for i in getattr(self, name)[at].tolist()]


def latency(cells: Histograms) -> Latency:
    """Latency quantiles in ms by (f, outcome), overall and per second of
    completion, and completions per second and in all, from the histograms
    (`Pairs.histograms`; a key may come more than once): a row per (second,
    f, outcome, bucket) seen, so sized by the run's length and the spread of
    its latencies, not by its events."""
    if not len(cells):
        return Latency([], [], [], {})
    overall = _quantiles(cells, ["f", "type"])
    of_second = np.isin(cells.f, [i for i, f in enumerate(cells.fs) if f in ("send", "poll")])
    per_second = _quantiles(cells.take(np.flatnonzero(of_second)), ["second", "f", "type"])
    order, starts = _groups(cells, ["second", "f", "type"])
    count = np.add.reduceat(cells.n[order], starts).tolist()
    first = order[starts]
    throughput = [{"second": second, "f": f, "type": t, "count": n} for second, f, t, n in
                  zip(cells.values("second", first), cells.values("f", first), cells.values("type", first), count)]
    completions: dict[str, dict[str, int]] = {}
    for row in overall:  # each (f, outcome)'s count, in order
        completions.setdefault(row["f"], {})[row["type"]] = row["count"]
    return Latency(overall, per_second, throughput, completions)


def _groups(cells: Histograms, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The rows in the order of `keys` then bucket (a stable sort: rows of
    one key and bucket in their order), and where each key's rows start."""
    sort = [cells.sort_key(k) for k in keys]
    order = np.lexsort((cells.bucket, *reversed(sort)))
    new = np.zeros(len(order), bool)
    new[0] = True
    for column in sort:
        ordered = column[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    return order, np.flatnonzero(new)


def _quantiles(cells: Histograms, keys: list[str]) -> list[dict]:
    """Quantiles per group of `keys`, from the histograms, sorted by `keys`.
    Vectorised with NumPy: thousands of per-second groups would take long
    one by one (and pandas, which did this before, was a costly import in
    every `harness` command: docs/decisions.md, "A cold check's start")."""
    if not len(cells):
        return []
    order, starts = _groups(cells, keys)
    bucket, n, top = cells.bucket[order], cells.n[order], cells.max[order]
    # Each group's rows in bucket order (a bucket given twice is counted where it is).
    lengths = np.diff(np.r_[starts, len(order)])
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
    key_values = [cells.values(k, order[starts]) for k in keys]
    out = []
    for i, key in enumerate(zip(*key_values)):
        row = dict(zip(keys, key))
        row["count"] = int(count[i])
        for name, values in columns.items():
            row[name] = values[i]
        row["max_ms"] = round(tops[i] / 1e6, 3)
        out.append(row)
    return out
