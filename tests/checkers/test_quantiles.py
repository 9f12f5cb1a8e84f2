"""Latency quantiles read off log-scale histograms (checkers.stats._quantiles),
checked against exact quantiles of known latencies; no Spark needed."""

from __future__ import annotations

import math
import random

import pandas as pd

from checkers import stats


def histogram(samples: dict[tuple, list[int]], keys: list[str]) -> pd.DataFrame:
    """The rows Spark would count: (keys..., bucket, n, max) per bucket."""
    rows: dict[tuple, list[int]] = {}
    for key, latencies in samples.items():
        for ns in latencies:
            b = 0 if ns <= stats.BUCKET_FLOOR_NS else math.ceil(math.log(ns / stats.BUCKET_FLOOR_NS,
                                                                          stats.BUCKET_GROWTH))
            n, top = rows.get((*key, b), [0, 0])
            rows[(*key, b)] = [n + 1, max(top, ns)]
    return pd.DataFrame([(*k, n, top) for k, (n, top) in rows.items()], columns=keys + ["bucket", "n", "max"])


def nearest_rank(values: list[int], q: float) -> int:
    values = sorted(values)
    return values[math.ceil(q * len(values)) - 1]


def test_quantiles_are_within_a_bucket_of_the_exact_ones_and_maxima_exact():
    rng = random.Random(7)
    samples = {
        ("send", "ok"): [int(rng.lognormvariate(math.log(5e6), 0.6)) for _ in range(5000)],
        ("send", "info"): [10_000_000_000] * 3 + [2_000_000],
        ("poll", "ok"): [rng.randrange(500, 50_000_000) for _ in range(777)],
    }
    rows = stats._quantiles(histogram(samples, ["f", "type"]), ["f", "type"])
    assert [(r["f"], r["type"]) for r in rows] == sorted(samples)
    for row in rows:
        values = samples[(row["f"], row["type"])]
        assert row["count"] == len(values)
        assert row["max_ms"] == round(max(values) / 1e6, 3)
        for q in stats.QUANTILES:
            exact = nearest_rank(values, q) / 1e6
            got = row[f"p{int(q * 100)}_ms"]
            # The bucket's upper edge: never below the exact value, at most one bucket above.
            assert exact - 1e-3 <= got <= max(exact * stats.BUCKET_GROWTH, 1e-3) + 1e-3, (row, q, exact)


def test_per_second_groups_are_sorted_and_separate():
    samples = {(second, "send", "ok"): [(second + 1) * 1_000_000] * (second + 1) for second in (3, 0, 2)}
    rows = stats._quantiles(histogram(samples, ["second", "f", "type"]), ["second", "f", "type"])
    assert [r["second"] for r in rows] == [0, 2, 3]
    assert [r["count"] for r in rows] == [1, 3, 4]
    assert [r["max_ms"] for r in rows] == [1.0, 3.0, 4.0]
    assert all(r["p50_ms"] == r["max_ms"] for r in rows)  # one latency per second: the edge is capped by the max
