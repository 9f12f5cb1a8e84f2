"""Latency quantiles read off log-scale histograms (checkers.stats._quantiles),
checked against exact quantiles of known latencies; no Spark needed."""

from __future__ import annotations

import math
import random

from checkers import stats


def histogram(samples: dict[tuple, list[int]], keys: list[str]) -> list[dict]:
    """The rows the driver's read counts: (keys..., bucket, n, max) per bucket
    (as dicts of stats.HISTOGRAM_COLUMNS, the keys not given blank)."""
    rows: dict[tuple, list[int]] = {}
    for key, latencies in samples.items():
        for ns in latencies:
            b = 0 if ns <= stats.BUCKET_FLOOR_NS else math.ceil(math.log(ns / stats.BUCKET_FLOOR_NS,
                                                                          stats.BUCKET_GROWTH))
            n, top = rows.get((*key, b), [0, 0])
            rows[(*key, b)] = [n + 1, max(top, ns)]
    return [{"f": "", "type": "", "second": 0, **dict(zip(keys + ["bucket", "n", "max"], (*k, n, top)))}
            for k, (n, top) in rows.items()]


def cells(rows: list[dict]) -> stats.Histograms:
    return stats.Histograms.of_rows(rows)


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
    rows = stats._quantiles(cells(histogram(samples, ["f", "type"])), ["f", "type"])
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
    rows = stats._quantiles(cells(histogram(samples, ["second", "f", "type"])), ["second", "f", "type"])
    assert [r["second"] for r in rows] == [0, 2, 3]
    assert [r["count"] for r in rows] == [1, 3, 4]
    assert [r["max_ms"] for r in rows] == [1.0, 3.0, 4.0]
    assert all(r["p50_ms"] == r["max_ms"] for r in rows)  # one latency per second: the edge is capped by the max


def test_latency_merges_a_key_given_twice_and_counts_every_completion():
    rng = random.Random(3)
    samples = {(second, f, t): [rng.randrange(1_000, 90_000_000) for _ in range(rng.randrange(1, 40))]
               for second in range(5) for f, t in (("send", "ok"), ("send", "info"), ("poll", "ok"), ("assign", "ok"))}
    rows = histogram(samples, ["second", "f", "type"])
    # Each key's count split over two rows, the second with a smaller max, in another order.
    split = []
    for r in rows:
        if r["n"] > 1:
            split += [dict(r, n=r["n"] - 1), dict(r, n=1, max=r["max"] - 1)]
        else:
            split.append(r)
    rng.shuffle(split)
    whole, parts = stats.latency(cells(rows)), stats.latency(cells(split))
    assert parts == whole
    assert whole.completions == {"assign": {"ok": sum(len(v) for (_, f, _), v in samples.items() if f == "assign")},
                                 "poll": {"ok": sum(len(v) for (_, f, _), v in samples.items() if f == "poll")},
                                 "send": {t: sum(len(v) for (_, f, t2), v in samples.items() if f == "send" and t2 == t)
                                          for t in ("info", "ok")}}
    assert [(r["second"], r["f"], r["type"], r["count"]) for r in whole.throughput] == \
        [(s, f, t, len(v)) for (s, f, t), v in sorted(samples.items())]
    assert {r["f"] for r in whole.per_second} == {"send", "poll"}
    assert [(r["f"], r["type"]) for r in whole.overall] == [("assign", "ok"), ("poll", "ok"), ("send", "info"),
                                                            ("send", "ok")]
    assert stats.latency(cells([])) == stats.Latency([], [], [], {})
