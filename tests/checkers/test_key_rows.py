"""`checkers.key_rows`: each key's row among the distinct keys."""

from __future__ import annotations

import numpy as np
import pytest

from checkers.key_rows import MAX_PARTITION, distinct_pairs, key_rows, seen_keys, seen_rows


@pytest.mark.parametrize("spread", ["dense", "blocks far apart", "wide", "negative", "extremes"])
def test_each_key_s_row_is_its_rank_among_the_distinct_keys(spread):
    # A table of the blocks of numbers the keys use, or a sort where they
    # are spread wide: either way, np.unique's answer.
    rng = np.random.default_rng(7)
    for _ in range(40):
        sizes = rng.integers(0, 3000, 2)
        if spread == "dense":
            keys = [rng.integers(0, 4000, n) for n in sizes]
        elif spread == "blocks far apart":
            keys = [rng.integers(0, 3000, n) + rng.integers(0, 5, n) * 10_000_000 for n in sizes]
        elif spread == "wide":
            keys = [rng.integers(-2 ** 62, 2 ** 62, n) for n in sizes]
        elif spread == "negative":
            keys = [rng.integers(-70_000, -60_000, n) for n in sizes]
        else:
            keys = [rng.integers(0, 100, sizes[0]), np.array([2 ** 63 - 1, -2 ** 63, 5])]
        keys = [k.astype(np.int64) for k in keys]
        values, row_of = key_rows(keys)
        assert values.dtype == np.int64
        assert values.tolist() == np.unique(np.concatenate(keys)).tolist()
        for k in keys:
            assert values[row_of(k)].tolist() == k.tolist()
    values, row_of = key_rows([np.empty(0, np.int64), np.empty(0, np.int64)])
    assert len(values) == 0 and len(row_of(np.empty(0, np.int64))) == 0


@pytest.mark.parametrize("top", [3, (1 << 40) - 1, 1 << 40, (1 << 63) - 1])
def test_distinct_pairs_are_numpy_s_whether_or_not_the_first_column_fits_packed(top):
    """(process, partition) pairs packed in one int64 up to first numbers of
    40 bits, and sorted as pairs above: the same pairs either way, at the
    bound too, with partitions up to the largest; none of no rows."""
    rng = np.random.default_rng(top % 1000)
    process = np.concatenate((rng.integers(0, 4, 500), [top, top, 0]))
    partition = np.concatenate((rng.integers(0, 3, 500), [MAX_PARTITION, 0, MAX_PARTITION]))
    expected = np.unique(np.stack((process, partition), axis=1), axis=0)
    first, second = distinct_pairs(process, partition)
    assert first.tolist() == expected[:, 0].tolist() and second.tolist() == expected[:, 1].tolist()
    assert [len(c) for c in distinct_pairs(process[:0], partition[:0])] == [0, 0]


@pytest.mark.parametrize("distinct", [1, 33, 5_000])
def test_seen_rows_number_the_keys_in_the_order_first_seen_after_those_known(distinct):
    # A table that doubles many times over, keys spread over all of int64
    # (colliding in its slots), some of them already known.
    rng = np.random.default_rng(distinct)
    pool = np.unique(np.concatenate((rng.integers(-2 ** 63, 2 ** 63 - 1, distinct, dtype=np.int64),
                                     [-2 ** 63, 2 ** 63 - 1, 0, 1 << 20, 2 << 20])))
    keys = rng.choice(pool, 20_000)
    known = rng.choice(pool, min(10, len(pool)), replace=False)
    for before in (None, known):
        rows, seen = seen_rows(keys, before)
        first = [] if before is None else before.tolist()
        for k in keys.tolist():
            if k not in first:
                first.append(k)
        assert seen.tolist() == first
        assert (seen[rows] == keys).all()
    assert seen_keys(keys).tolist() == seen_rows(keys)[1].tolist()
    rows, seen = seen_rows(np.empty(0, np.int64), known)
    assert len(rows) == 0 and seen.tolist() == known.tolist()
