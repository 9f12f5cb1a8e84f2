"""The history's clock: which index each moment's events begin at.

The kernel's rows name events by index, not time; the series of the
results (checkers/kernel/series.py) count what happened per stretch of
time. This fold keeps the first index of each `step` of time the history
reaches (a millisecond at first, doubled whenever that would keep more
than MAX_STEPS of them: a history's length in time does not make the
driver's memory grow), and `SeriesClock` cuts the run into at most
`points` stretches of whole steps, each a bucket of the series.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.history.batches import Events

MAX_STEPS = 1 << 16
FIRST_STEP_NS = 1_000_000


@dataclass
class SeriesClock:
    """Buckets of `bucket_ns` from `start_ns`: bucket k holds the events of
    indexes `bounds[k]` up to `bounds[k + 1]` (its time stretch's)."""

    start_ns: int
    bucket_ns: int
    bounds: np.ndarray
    # The clock's own steps (`Clock`): each step's start and its first index, for `index_at`.
    step_ns: int = 0
    step_starts: np.ndarray = None
    step_first: np.ndarray = None

    def bucket(self, index: np.ndarray) -> np.ndarray:
        """Each event's bucket, by its index."""
        return np.searchsorted(self.bounds, index, "right") - 1

    def index_at(self, time_ns: int) -> int:
        """The first index of the clock's step `time_ns` falls in, or of the
        first step after it (past the end: one past the last index)."""
        at = np.searchsorted(self.step_starts, time_ns // self.step_ns)
        return int(self.step_first[at]) if at < len(self.step_first) else int(self.bounds[-1])

    def time_of(self, bucket: int) -> float:
        """A bucket's start, in seconds on the history's clock."""
        return round((self.start_ns + bucket * self.bucket_ns) / 1e9, 6)


class Clock:
    """The fold (checkers/folds/__init__.py)."""

    def __init__(self) -> None:
        self.step = FIRST_STEP_NS
        self.steps = np.empty(0, np.int64)  # each step reached (time // step), rising
        self.first = np.empty(0, np.int64)  # the first index in it
        self.last_index = -1

    def add(self, ev: Events) -> None:
        if not len(ev):
            return
        steps = ev.time // self.step
        new = np.flatnonzero(np.concatenate(([True], steps[1:] != steps[:-1])))
        if len(self.steps) and steps[0] == self.steps[-1]:
            new = new[1:]
        self.steps = np.concatenate((self.steps, steps[new]))
        self.first = np.concatenate((self.first, ev.index[new]))
        self.last_index = int(ev.index[-1])
        while len(self.steps) > MAX_STEPS:
            self.step *= 2
            self.steps //= 2
            keep = np.concatenate(([True], self.steps[1:] != self.steps[:-1]))
            self.steps, self.first = self.steps[keep], self.first[keep]

    def series(self, points: int) -> SeriesClock:
        """At most `points` buckets of whole steps over the history's time."""
        if not len(self.steps):
            return SeriesClock(0, self.step, np.zeros(1, np.int64), self.step, self.steps, self.first)
        per = max(1, -(-int(self.steps[-1] - self.steps[0] + 1) // points))
        bucket = (self.steps - self.steps[0]) // per
        count = int(bucket[-1]) + 1
        # A bucket no event falls in begins where the next one does.
        bounds = self.first[np.minimum(np.searchsorted(bucket, np.arange(count)), len(bucket) - 1)]
        return SeriesClock(int(self.steps[0]) * self.step, per * self.step, np.append(bounds, self.last_index + 1),
                           self.step, self.steps, self.first)
