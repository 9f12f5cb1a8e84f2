"""The transactions' kernel's distinct numbers and pairs
(checkers/kernel/transactions.py: `distinct`, `packed`, `_pairs`,
`_pair_numbers`) and a cut's distinct rows (checkers/kernel/txn_segments.py:
`Cut.distinct`): the same as NumPy's `np.unique` or a sort of the rows on
random and extreme columns (pairs whose ranges just fit in an int64, and
those that do not, sorted as rows instead), and the segments' search
making them by sorts,
never by `np.unique`'s hash table or its sort of rows (each some tens of
times slower on a large graph)."""

from __future__ import annotations

import numpy as np
import pytest

from checkers.kernel.transactions import _pair_numbers, _pairs, cycles, distinct, packed, unpacked
from checkers.kernel.txn_segments import Cut
from tests.checkers.test_txn_segments import _random_graph, by_segments, rows_of


def _columns(rng, kind: int, n: int) -> np.ndarray:
    """(n, 2) int64: small, signed, packing just within an int64, and not packing."""
    if kind == 0:
        return rng.integers(0, 50, (n, 2))
    if kind == 1:
        return rng.integers(-10**6, 10**6, (n, 2))
    if kind == 2:
        return np.stack((rng.integers(0, 1 << 32, n), rng.integers(-(1 << 30), 1 << 30, n)), axis=1)
    return rng.integers(-(1 << 62), 1 << 62, (n, 2))


@pytest.mark.parametrize("kind", range(4))
def test_distinct_numbers_pairs_and_pair_numbers_are_numpy_s_unique(kind):
    rng = np.random.default_rng(kind)
    for n in (0, 1, 2, 7, 300, 5000):
        pairs = _columns(rng, kind, n).astype(np.int64)
        pairs = np.concatenate((pairs, pairs[: n // 3]))  # repeats
        want = np.unique(pairs, axis=0) if len(pairs) else np.empty((0, 2), np.int64)
        got = _pairs(pairs)
        assert got.dtype == np.int64 and got.shape == want.shape and (got == want).all()
        assert (distinct(pairs[:, 0]) == np.unique(pairs[:, 0])).all()
        if len(pairs):
            _, inverse = np.unique(pairs.T, axis=1, return_inverse=True)
            assert (_pair_numbers(pairs[:, 0], pairs[:, 1]) == inverse.reshape(-1)).all()


def test_columns_pack_while_their_ranges_fit_in_an_int64():
    a, b = np.array([0, (1 << 32) - 1, 5]), np.array([-(1 << 30), (1 << 30) - 1, 0])
    key, lows, widths = packed(a, b)  # 2**32 * 2**31 keys: the largest 2**63 - 1
    assert int(key.max()) == (1 << 63) - 1 and np.argsort(key).tolist() == [0, 2, 1]
    assert [c.tolist() for c in unpacked(key, lows, widths)] == [a.tolist(), b.tolist()]
    assert packed(np.array([0, 1 << 32]), b) is None
    assert packed(np.empty(0, np.int64)) is None


@pytest.mark.parametrize("spread", (1, 1 << 40))
def test_a_cut_s_distinct_rows_are_its_rows_sorted_once_packed_or_not(spread):
    # Nodes 2**40 apart: a, kind and b too wide to pack in an int64, sorted as rows.
    rng = np.random.default_rng(spread)
    n = 3000
    a = rng.integers(0, 500, n) * spread
    # Segments as `cut` makes them: each row's a inside its segment, numbered in
    # their nodes' order, some numbers held by no row.
    bounds = np.sort(rng.choice(np.arange(1, 500), 30, replace=False)) * spread
    segment = np.searchsorted(bounds, a, side="right") * 2 + 7
    kind = rng.integers(0, 4, n).astype(np.int8)
    b = a + rng.integers(-9, 9, n) * spread  # an edge's b in its a's segment too
    edge = (kind < 2) & (np.searchsorted(bounds, b, side="right") * 2 + 7 == segment) & (b >= 0)
    kind, b = np.where(edge | (kind >= 2), kind, 2).astype(np.int8), np.where(edge, b, -1)
    rows = Cut(segment, kind, a, b)
    rows = Cut.joined([rows, rows.take(slice(0, n // 2))])
    assert (packed(rows.a, rows.kind, rows.b) is None) == (spread > 1)
    got = rows.distinct()
    assert got.kind.dtype == np.int8 and got.segment.dtype == got.a.dtype == got.b.dtype == np.int64
    assert list(zip(*(c.tolist() for c in (got.a, got.kind, got.b, got.segment)))) == sorted(
        set(zip(*(c.tolist() for c in (rows.a, rows.kind, rows.b, rows.segment)))))


def test_the_segments_search_sorts_and_never_takes_numpy_s_hash_table_or_row_sort(monkeypatch):
    rng = np.random.default_rng(7)
    ww, wr, spans = _random_graph(rng, 300, 600, 4, 0.1)
    want = rows_of(cycles(ww, wr, spans))
    unique = np.unique

    def sorted_only(ar, *args, **kwargs):
        # With an index, inverse or counts asked for, np.unique sorts; without, a 1-d array's
        # goes to a hash table, and `axis` sorts rows as records.
        assert kwargs.get("axis") is None and any(kwargs.get(k) for k in
                                                  ("return_index", "return_inverse", "return_counts"))
        return unique(ar, *args, **kwargs)

    monkeypatch.setattr(np, "unique", sorted_only)
    assert rows_of(cycles(ww, wr, spans)) == want
    assert by_segments(ww, wr, spans, 50, 2)[0] == sorted(want)
