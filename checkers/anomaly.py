"""What an anomaly's record holds (checkers/registry.py is the table of them).

An anomaly is decided over one frame of the kernel (checkers/kernel/), each
frame a set of NumPy columns with a row per thing the anomaly counts (a
value, a position, a step of a consumer, ...):

- `condition(frame)`: which rows are the anomaly, as a boolean mask, written
  once as vectorised NumPy over the frame's columns; every engine runs it,
  none restates it;
- `order`: the frame's columns that order its examples (the first
  `limit` are kept; -1, "none", sorts first);
- `example(frame, rows, facts)`: the examples of `rows` (indexes into the
  frame, in order), each a dict naming the history's events that prove it
  (its `*_index` fields);
- `enrich`: fields read from the history's events once the examples are
  chosen: (the example's index field, the event's column, the example's
  key it goes to), e.g. a failed send's error;
- `missing`: for anomalies of acknowledged records gone, the record of a row
  as [value, partition, offset], for the sample the report looks up on the
  replicas' disks (`MISSING_SAMPLE` of them);
- `line(example, clock)`: one line that says what an example shows (the
  terminal's summary, the report's table); `clock` turns a history time
  into words;
- `story(explainer, name, example)`: the story the report tells of an
  example, from the history, the cluster-state timeline and the disk
  dumps (checkers/explain.py's explainer), or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ALWAYS = "always"
IF_IDEMPOTENT = "if-idempotent"  # only where the run's configuration promises to prevent it
NEVER = "never"

MAX_EXAMPLES = 20
# Missing records looked up on the replicas' disks, as Kafka's system tests
# look up their first 1,000: data loss, or a reader that missed them?
MISSING_SAMPLE = 1000

# The frames of the kernel, by name (checkers/kernel/stages.py makes them).
FRAMES = ("by-value", "group-records", "group-values", "by-position", "read-order", "send-order", "replicas",
          "commits", "txn-values", "torn", "cycles")


@dataclass(frozen=True)
class Anomaly:
    """One anomaly of docs/history.md (module docstring)."""

    name: str
    when: str  # ALWAYS, IF_IDEMPOTENT or NEVER: when a count above 0 is an error
    meaning: str  # in a Kafka user's words
    counted: str  # what one counts: "distinct values", "occurrences", ...
    frame: str
    condition: Callable[[object], np.ndarray]
    order: tuple[str, ...]
    example: Callable[[object, np.ndarray, object], list[dict]]
    line: Callable[[dict, Callable[[int], str]], str]
    story: Callable | None = None
    enrich: tuple[tuple[str, str, str], ...] = ()
    missing: Callable[[object, np.ndarray], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.when not in (ALWAYS, IF_IDEMPOTENT, NEVER):
            raise ValueError(f"anomaly {self.name!r}: when must be one of {ALWAYS}, {IF_IDEMPOTENT}, {NEVER}")
        if self.frame not in FRAMES:
            raise ValueError(f"anomaly {self.name!r}: no frame {self.frame!r} (known: {', '.join(FRAMES)})")

    def is_error(self, idempotent: bool) -> bool:
        """Whether a count above 0 is an error, given what the run promised."""
        return self.when == ALWAYS or (self.when == IF_IDEMPOTENT and idempotent)


def run_seconds(ns: int | None) -> str:
    """A history time as a reader of a terminal sees it: seconds into the run."""
    return "?" if ns is None else f"{ns / 1e9:.1f} s into the run"


def none_if_absent(x: int) -> int | None:
    """A frame's -1 ("none") as an example's None."""
    return None if x == -1 else x


class Lazy:
    """A frame's column made only at the rows asked for: `column[at]` is
    `of(at)` (`at` the rows, as an array or a slice). For a column no
    condition reads whole, only the examples and the order they are taken
    in: made for every row, it would be an array of the frame's length,
    first touched memory, to read a few rows of."""

    def __init__(self, n: int, of: Callable[[np.ndarray], np.ndarray]) -> None:
        self.n, self.of = n, of

    def __getitem__(self, at) -> np.ndarray:
        return self.of(at)

    def __len__(self) -> int:
        return self.n


def pick(frame, at: np.ndarray, **fields: str) -> list[dict]:
    """Examples of rows `at`: each field of the example from the frame's
    column of that name (`field="column"`), ints, -1 as None (but a
    `value`'s, which may be any int)."""
    columns = {name: getattr(frame, column)[at].tolist() for name, column in fields.items()}
    out = []
    for i in range(len(at)):
        out.append({name: (x if name in ("value", "prev_value") else none_if_absent(x))
                    if not isinstance(x, bool) else x for name, x in ((n, c[i]) for n, c in columns.items())})
    return out
