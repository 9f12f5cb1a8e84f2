"""The kernel: a shard's frames, every anomaly's condition over them, and the
shard's partial results; and how partial results merge.

Two stages, each a function of a shard's rows (checkers/kernel/rows.py)
and the history's facts (checkers/kernel/facts.py):

1. `first_stage`, over a shard of values (every row of each of its values):
   the by-value frame and the groups' frames of values, their anomalies,
   the sends' counts and the contract's checks across a value's sends; it
   hands on the rows the second stage needs, with those it passes through;
2. `second_stage`, over a shard of partitions: the by-position frame, read
   order, send order, the replicas and the groups' commits; it gives the
   transactions' dependency edges of both stages (wr by value, ww by
   partition) as EDGE rows, never in its partial results;
3. `cycle_stage`, over whole segments of the transactions' dependency
   graph, cut from those edges (checkers/kernel/txn_segments.py): the
   cycles' anomalies.

Each frame's anomalies are the registry's records of that frame
(checkers/registry.py): a record's condition is a mask over the frame's
rows; the shard keeps its count and its first examples by the record's
order, each example with the numbers it was ordered by, so that `merge`
puts the shards' examples in one order. The in-process engine runs each
stage on one shard, Spark's executors on many: the results are the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from checkers import registry
from checkers.anomaly import MAX_EXAMPLES, MISSING_SAMPLE
from checkers.kernel import rows as r
from checkers.kernel import series
from checkers.kernel.by_position import by_position
from checkers.kernel.by_value import SEND_PROBLEMS, by_value, counts, send_problems
from checkers.kernel.facts import Facts
from checkers.kernel.groups import commits, group_records, group_values
from checkers.kernel.read_order import read_order
from checkers.kernel.replicas import replicas
from checkers.kernel.send_order import send_order
from checkers.kernel.transactions import Spans, torn, txn_values
from checkers.kernel.txn_segments import WR, WW, Cut, Sizes, edge_rows, search

NONE = r.NONE
# The sends' counts a shard keeps (checkers/kernel/by_value.py's `counts`).
COUNTS = ("ok", "fail", "info", "unfinished", "info_read", "info_unread", "unknown_values", "send_invokes")


@dataclass
class Partial:
    """One shard's results: per anomaly its count and first examples (each
    as [order key, example]), the `missing` sample's rows (each [order key,
    [value, partition, offset]]), the sends' counts, and the first index of
    each of the contract's problems (-1: none)."""

    found: dict[str, dict] = field(default_factory=dict)
    missing: dict[str, list] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[int] = field(default_factory=list)
    series: dict[str, dict] = field(default_factory=dict)  # checkers/kernel/series.py
    graph: dict[str, int] = field(default_factory=dict)  # the cycles' segments' sizes (txn_segments.Sizes)

    def decide(self, frame_name: str, frame, facts: Facts) -> None:
        """Every anomaly of `frame_name` over `frame`."""
        for a in registry.of_frame(frame_name):
            self.found[a.name] = found = {"count": 0, "examples": []}
            if not len(frame):
                continue
            rows = np.flatnonzero(a.condition(frame))
            rows = _ordered(frame, rows, a.order)
            key_columns = getattr(frame, "key", None)
            if key_columns is not None and len(rows):
                rows = _first_of_each(frame, rows, key_columns)
            found["count"] = int(len(rows))
            shown = rows[:MAX_EXAMPLES]
            keys = _keys(frame, shown, a.order)
            found["examples"] = [[k, e] for k, e in zip(keys, a.example(frame, shown, facts))]
            if a.missing is not None and len(rows):
                sampled = rows[:MISSING_SAMPLE]
                self.missing[a.name] = [[k, m] for k, m in zip(_keys(frame, sampled, a.order),
                                                               a.missing(frame, sampled).tolist())]

    def as_dict(self) -> dict:
        return {"found": self.found, "missing": self.missing, "counts": self.counts, "problems": self.problems,
                "series": self.series, "graph": self.graph}


def _ordered(frame, rows: np.ndarray, order: tuple[str, ...]) -> np.ndarray:
    """`rows` by the frame's `order` columns (the first the most significant)."""
    if len(rows) < 2:
        return rows
    return rows[np.lexsort(tuple(getattr(frame, c)[rows] for c in reversed(order)))]


def _first_of_each(frame, rows: np.ndarray, key: tuple[str, ...]) -> np.ndarray:
    """The first of `rows` (in order) of each distinct `key`, still in order."""
    by_key = np.lexsort(tuple([np.arange(len(rows))] + [getattr(frame, c)[rows] for c in reversed(key)]))
    same = np.ones(len(rows) - 1, bool)
    for c in key:
        column = getattr(frame, c)[rows][by_key]
        same &= column[1:] == column[:-1]
    first = np.concatenate(([True], ~same))
    return rows[np.sort(by_key[first])]


def _keys(frame, rows: np.ndarray, order: tuple[str, ...]) -> list[list[int]]:
    return np.stack([getattr(frame, c)[rows].astype(np.int64) for c in order], axis=1).tolist() if len(rows) else []


def first_frames(shard: r.Shard, facts: Facts, cut: int = 1) -> tuple[dict[str, object], r.Shard]:
    """A shard of values' frames, by name (an empty tuple for a frame with
    nothing to make it of), and the rows it hands on to the second stage
    (its acknowledgements in `cut` parts, as `Shard.split` cuts them)."""
    v, handed = by_value(shard, facts, cut)
    frames: dict[str, object] = {"by-value": v, "group-records": (), "group-values": ()}
    frames["txn-values"], txn_acks = txn_values(v, shard.parts(r.SENDS))
    if len(txn_acks):
        handed.blocks[r.TXN_ACKS] = [txn_acks]
    if len(frames["txn-values"].wr):
        handed.blocks[r.EDGES] = [edge_rows(WR, frames["txn-values"].wr)]
    processed = shard[r.PROCESSED]
    if facts.processing and len(processed):
        processed = processed.take(np.flatnonzero(_held(v.value, processed.value)))  # a value no poll delivered: none
        processed_row = np.searchsorted(v.value, processed.value)
        final = handed[r.FINALS]
        frames["group-records"] = group_records(v.value, np.searchsorted(v.value, final.value), final.pos,
                                                processed, processed_row, *v.reads_joined(), facts)
        frames["group-values"] = group_values(v.value, processed, processed_row, facts)
    return frames, r.Shard({**handed.blocks, **shard.only(*r.PASSED).blocks})


def first_stage(shard: r.Shard, facts: Facts, cut: int = 1) -> tuple[r.Shard, dict]:
    """A shard of values: its frames' anomalies, and the rows for the second
    stage (its wr edges among them, passed on by it); `cut`: the second
    stage's shards, if the rows are cut for them (the in-process engine's:
    `Shard.split` then copies none of the acknowledgements)."""
    partial = Partial()
    frames, handed = first_frames(shard, facts, cut)
    for name, frame in frames.items():
        partial.decide(name, frame, facts)
    v = frames["by-value"]
    partial.counts = counts(v)
    partial.problems = send_problems(v)
    partial.series["unread"] = series.unread(v, facts)
    return handed, partial.as_dict()


def _held(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which of `values` are among `sorted_values`."""
    if not len(sorted_values):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    return sorted_values[at] == values


def second_frames(shard: r.Shard, facts: Facts) -> dict[str, object]:
    """A shard of partitions' frames, by name."""
    acks = shard[r.ACKS]
    known = by_position(acks, shard[r.EXTRAS])
    on_disk = shard[r.REPLICAS]
    # A committed read is decided where the commits of its partition are: all of them are in one shard,
    # and a read of a partition nobody committed to has nothing acknowledged to lose.
    commit_rows = shard[r.COMMITS]
    partitions = set(np.unique(commit_rows.pos >> r.POS_BITS).tolist())
    steps = read_order(shard[r.RUNS], facts.restarts, known)
    return {"by-position": known,
            "read-order": steps,
            "torn": torn(shard[r.TXN_ACKS], shard[r.RUNS], steps),
            "send-order": send_order(acks, shard[r.TXN_ACKS]),
            "replicas": replicas(on_disk, shard[r.FINALS], facts.logs.ends) if len(on_disk) else (),
            "commits": commits(commit_rows, facts, partitions) if facts.committed else ()}


def second_stage(shard: r.Shard, facts: Facts) -> tuple[dict, r.Rows]:
    """A shard of partitions: its frames' anomalies, and the dependency
    edges, its ww and the wr the first stage handed it, as EDGE rows."""
    partial = Partial()
    frames = second_frames(shard, facts)
    for name, frame in frames.items():
        partial.decide(name, frame, facts)
    partial.series["lag"] = series.lag(shard[r.RUNS], shard[r.ACKS], facts)
    return partial.as_dict(), r.Rows.joined([shard[r.EDGES], edge_rows(WW, frames["torn"].ww)])


@dataclass
class Found:
    """The merged results of every shard: per anomaly (count, examples), the
    `missing` samples, the sends' counts, and the contract's problems."""

    anomalies: dict[str, tuple[int, list[dict]]]
    missing: dict[str, list[list[int]]]
    counts: dict[str, int]
    problems: list[int]
    series: dict
    graph: Sizes  # the cycles' segments


def cycle_stage(rows: Cut, spans: Spans) -> dict:
    """Whole segments of the transactions' dependency graph (every row
    `cut` gave of each, checkers/kernel/txn_segments.py): their cycles'
    anomalies and their sizes, as a partial result for `merge`; `spans`:
    at least those of the transactions whose completion or invocation a
    segment holds."""
    partial = Partial()
    found, sizes = search(rows, spans)
    partial.decide("cycles", found, None)
    partial.graph = asdict(sizes)
    return partial.as_dict()


def merge(partials: list[dict]) -> Found:
    """One set of results from the shards' (`Partial.as_dict`), ordered as one shard's would be."""
    anomalies: dict[str, tuple[int, list[dict]]] = {}
    for name in registry.NAMES:
        count, examples = 0, []
        for p in partials:
            got = p["found"].get(name)
            if got is not None:
                count += got["count"]
                examples += got["examples"]
        examples.sort(key=lambda pair: pair[0])
        anomalies[name] = (count, [e for _, e in examples[:MAX_EXAMPLES]])
    missing = {}
    for name in registry.NAMES:
        rows = sorted((row for p in partials for row in p["missing"].get(name, [])), key=lambda pair: pair[0])
        if rows:
            missing[name] = [m for _, m in rows[:MISSING_SAMPLE]]
    totals = {name: sum(p["counts"].get(name, 0) for p in partials) for name in COUNTS}
    problems = [NONE] * len(SEND_PROBLEMS)
    for p in partials:
        for i, at in enumerate(p["problems"]):
            if at != NONE and (problems[i] == NONE or at < problems[i]):
                problems[i] = at
    graph = Sizes()
    for p in partials:
        if p.get("graph"):
            graph = graph.larger(Sizes(**p["graph"]))
    return Found(anomalies, missing, totals, problems, series.merged([p["series"] for p in partials]), graph)


def problem_message(problems: list[int]) -> str | None:
    """The first of the contract's problems found (in SEND_PROBLEMS' order), as the line that refuses the history."""
    for (message, _, _), at in zip(SEND_PROBLEMS, problems):
        if at != NONE:
            return f"index {at}: {message}"
    return None
