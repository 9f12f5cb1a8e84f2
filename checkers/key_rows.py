"""Each key's row among the distinct keys, without a sort where they are dense.

The kernel's by-value frame (checkers/kernel/by_value.py) has a row per
value sent or read, and its by-position frame (checkers/kernel/by_position.py)
a row per position known; each send, read or acknowledgement is reduced
into its key's row (in a compiled pass). A history's keys are mostly dense: values
0, 1, 2, ... (a run's), or such runs far apart (`harness gen-history`'s
parts; a shard of Spark's engine holds whole blocks of them); a partition's
offsets 0, 1, 2, ... . So `key_rows` finds the rows
by a table of the blocks of 2**BLOCK_BITS numbers the keys use: which
blocks are used, then which numbers of them; the running count of those
is each key's row, each of these steps one compiled pass over the keys
(checkers/compiled.py). Keys spread wider (the blocks used would hold more
than DENSE_SPREAD times as many numbers as there are keys) are sorted instead.

Keys that are few however spread (a batch's (process, partition) groups,
its latency cells, the (key, partition) pairs acknowledged) get their rows
in the order first seen from a hash table instead (`seen_rows`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from checkers.compiled import compiled
from core.history.format import MAX_PARTITION

BLOCK_BITS = 16
DENSE_SPREAD = 2
# A partition's bits, below the other column's where a pair is packed in one int64.
PARTITION_BITS = MAX_PARTITION.bit_length()


def key_rows(keys: list[np.ndarray]) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """The distinct keys of the `keys` arrays (int64), sorted, and a
    function that gives any of those arrays its elements' rows among them
    (their ranks), in compiled passes: quicker than NumPy's passes, and far
    quicker than a sort (docs/decisions.md, "Numba for the driver's hot
    loops"). Where the keys are not dense in their blocks, the rows are
    found by a binary search of the sorted keys."""
    keys = [k for k in keys if len(k)]
    total = sum(len(k) for k in keys)
    if not total:
        return np.empty(0, np.int64), lambda k: np.zeros(0, np.intp)
    bounds = [_bounds(k) for k in keys]
    low = min(b[0] for b in bounds)
    blocks = ((max(b[1] for b in bounds) - low) >> BLOCK_BITS) + 1
    if blocks <= total:  # so every key less `low` is below 2**63
        used = np.zeros(blocks, bool)
        for k in keys:
            _mark_blocks(k, low, used)
        first = np.flatnonzero(used)  # the blocks used, each one's first number less `low`
        if len(first) << BLOCK_BITS <= DENSE_SPREAD * total + (1 << BLOCK_BITS):
            # What each used block's numbers move by to their slots: down to
            # the block's place among the used ones, and by `low`.
            shift = ((np.cumsum(used, dtype=np.int64) - 1 - np.arange(blocks)) << BLOCK_BITS) - low
            del used

            present = np.zeros(len(first) << BLOCK_BITS, bool)
            for k in keys:
                _mark(k, low, shift, present)
            rank = np.cumsum(present, dtype=np.int32 if len(present) < 1 << 31 else np.int64)
            rank -= 1  # in place: each column here is tens of megabytes first touched
            distinct = _numbers(present, first, low, np.empty(int(rank[-1]) + 1, np.int64))
            del present
            return distinct, lambda k: _rows(k, low, shift, rank, np.empty(len(k), np.intp))
    distinct = np.unique(np.concatenate(keys))
    return distinct, lambda k: np.searchsorted(distinct, k)


def seen_rows(keys: np.ndarray, known: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each of `keys`' row among the distinct keys in the order they first
    appear, after those `known` (distinct, rows 0, 1, ...), and those keys:
    one compiled pass with a hash table of the keys seen, for keys that are
    few (a batch's (process, partition) groups, or its latencies' cells),
    however spread."""
    n = 0 if known is None else len(known)
    rows = np.empty(len(keys), np.int64)
    distinct = np.empty(n + len(keys), np.int64)
    if n:
        distinct[:n] = known
    return rows, distinct[:_seen_rows(keys, rows, distinct, n)]


def seen_keys(keys: np.ndarray) -> np.ndarray:
    """`seen_rows`' distinct keys alone."""
    distinct = np.empty(len(keys), np.int64)
    return distinct[:_seen_rows(keys, np.empty(0, np.int64), distinct, 0)].copy()


def fits_above_partition(*columns: np.ndarray) -> bool:
    """Whether every number of `columns` is >= 0 and fits above a partition's
    bits, so that it packs with one in an int64 (`x << PARTITION_BITS | partition`)."""
    return all(not len(c) or (int(c.min()) >= 0 and not int(c.max()) >> (63 - PARTITION_BITS)) for c in columns)


def distinct_pairs(first: np.ndarray, partition: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (first, partition) pairs of two columns of numbers >= 0
    (partitions up to MAX_PARTITION), sorted, as two arrays: each pair packed
    in one int64 where `first` fits above a partition's bits (a sort of
    pairs, `np.unique(axis=0)`, is slow on a large history's read runs), else
    sorted as pairs."""
    if len(first) and fits_above_partition(first):
        # A table of the pairs seen, then a sort of those: where the pairs
        # are few against the rows, quicker than np.unique's sort of them all.
        packed = np.sort(seen_keys((first << PARTITION_BITS) | partition))
        return packed >> PARTITION_BITS, packed & MAX_PARTITION
    pairs = np.unique(np.stack((first, partition)), axis=1)
    return pairs[0], pairs[1]


@compiled
def _bounds(keys):
    """The least and greatest of `keys` (not empty), in one pass."""
    low = high = keys[0]
    for k in keys:
        if k < low:
            low = k
        elif k > high:
            high = k
    return low, high


_GOLDEN = -7046029254386353131  # 2**64 / the golden ratio, as an int64: Fibonacci hashing


@compiled
def _seen_rows(keys, rows, distinct, n):
    """`seen_rows` into `rows` (unless it is empty) and `distinct` (its
    first `n` known); how many distinct keys. The table (open addressing,
    each slot the row of its key) doubles whenever it is half full."""
    keep_rows = len(rows) > 0
    bits = 6
    while 1 << bits < 2 * n + 2:
        bits += 1
    table = _table(distinct, n, bits)
    for i in range(len(keys)):
        k = keys[i]
        mask = (1 << bits) - 1
        h = ((k * _GOLDEN) >> (64 - bits)) & mask
        while table[h] >= 0 and distinct[table[h]] != k:
            h = (h + 1) & mask
        if table[h] >= 0:
            if keep_rows:
                rows[i] = table[h]
            continue
        table[h] = n
        distinct[n] = k
        if keep_rows:
            rows[i] = n
        n += 1
        if 2 * n > 1 << bits:
            bits += 1
            table = _table(distinct, n, bits)
    return n


@compiled
def _table(distinct, n, bits):
    """`_seen_rows`' table of 2**`bits` slots holding the first `n` of `distinct`."""
    mask = (1 << bits) - 1
    table = np.full(1 << bits, -1, np.int64)
    for r in range(n):
        h = ((distinct[r] * _GOLDEN) >> (64 - bits)) & mask
        while table[h] >= 0:
            h = (h + 1) & mask
        table[h] = r
    return table


@compiled
def _mark_blocks(keys, low, used):
    """Mark the blocks `keys` use (`used`, by block less `low`'s)."""
    for k in keys:
        used[(k - low) >> BLOCK_BITS] = True


# A key's slot is `key + shift[(key - low) >> BLOCK_BITS]`: its place among the used blocks' numbers.


@compiled
def _mark(keys, low, shift, present):
    """Mark the slots `keys` take (`present`)."""
    for k in keys:
        present[k + shift[(k - low) >> BLOCK_BITS]] = True


@compiled
def _numbers(present, first, low, out):
    """The number of each slot marked `present`, in order, into `out`: its
    block's first number (`first`, less `low`) and its place in the block."""
    k = 0
    for slot in range(len(present)):
        if present[slot]:
            out[k] = (first[slot >> BLOCK_BITS] << BLOCK_BITS) + (slot & ((1 << BLOCK_BITS) - 1)) + low
            k += 1
    return out


@compiled
def _rows(keys, low, shift, rank, out):
    """Each of `keys`' row (`rank` of its slot), into `out`."""
    for i in range(len(keys)):
        k = keys[i]
        out[i] = rank[k + shift[(k - low) >> BLOCK_BITS]]
    return out
