"""The driver's hottest loops, compiled to machine code (Numba).

A few of the checker's passes over every event of a history the driver
holds are loops NumPy can only take as several passes each, with a fresh
array per step (a scatter by `ufunc.at`, a gather, a mask): compiled, each
is one pass, with no temporaries. `compiled` is how each is compiled:
`cache` keeps the machine code beside the module (its `__pycache__`, or
Numba's cache folder where that cannot be written), so a process compiles
a loop only once per machine and types, and `nogil` lets the threads the
checker runs its passes in use both cores. `inlined` is for the small
steps a compiled loop calls per element: compiled into each loop that
calls them, not called as functions (each call passed every array
argument anew). Inlined or not, a step still counted each array it was
handed in and out (Numba's reference counts, an atomic add each: about
70 ns a step of eight arrays); `bare` compiles a loop without them, for
one that makes no array and calls such steps per element.

`first_not_below` is the binary search the compiled passes share,
`nondecreasing` their test of sortedness, and `modulo` their shard of a
number.
"""

from __future__ import annotations

import numba

compiled = numba.njit(cache=True, nogil=True)
inlined = numba.njit(cache=True, nogil=True, inline="always")
# Without the runtime (`_nrt`: Numba's own switch for it): no array may be made
# inside, and no reference is counted.
bare = numba.njit(cache=True, nogil=True, _nrt=False)


@compiled
def first_not_below(a, x, lo, hi):
    """The first place in `a[lo:hi]` (sorted) whose element is not below
    `x`, `hi` if none is: `np.searchsorted(a, x)` within those bounds."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@inlined
def modulo(x, k):
    """`x % k` for k > 0, as Python takes it (never negative): a mask where
    `k` is a power of two (the shards of a machine's cores, mostly), with no
    division; else the division."""
    return x & (k - 1) if k & (k - 1) == 0 else x % k


NONE = -1  # "nothing yet" in the columns the compiled reductions fill: every index, position and offset is >= 0


@compiled
def lower_at(column, r, x):
    """Row `r` of a minimum's column takes `x` if less (NONE: nothing yet)."""
    if column[r] == NONE or x < column[r]:
        column[r] = x


@compiled
def raise_at(column, r, x):
    """Row `r` of a maximum's column takes `x` if greater (NONE is below any)."""
    if x > column[r]:
        column[r] = x


@compiled
def nondecreasing(x):
    """Whether `x` never decreases: one compiled pass, no temporary."""
    for i in range(1, len(x)):
        if x[i] < x[i - 1]:
            return False
    return True
