"""Read order: nonmonotonic-poll, poll-skip.

Each process's reads of a partition, in the order it was given them, come
from one window pass over small rows: the read runs of
`anomalies.read_runs` (a run's inside steps are all +1, so only the step
into each run is looked at) and the events that restart read order. Only
the odd steps (backwards, or jumping forwards) leave the pass; they are few
in any real history and are classified on the driver, the known offsets
that a jump skipped found by a join with the by-position frame. Where the
driver made the runs and holds them (a history up to the driver-frames
bound), it finds the same steps itself (`driver_steps`) and no Spark pass
runs. (Send order is the driver's alone: checkers/send_order.py.)

Read order restarts where the contract says: an `assign` or `crash` of the
process restarts every partition it reads, a `seek` the partition it names.
Only an operation that happened restarts it: one completed `ok`, or `info`
(it may have happened), at its completion; a `fail` or an invocation that
never completed does not. An `info` seek that names no partition takes its
invocation's; one that names none at all restarts them all, to stay on the
safe side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from checkers.anomalies import MAX_EXAMPLES, offset_of, partition_of, pos_of
from checkers.key_rows import PARTITION_BITS, distinct_pairs, fits_above_partition, seen_rows
from checkers.spark import broadcast_if_small, keep, local_frame, release

# Gaps in a consumer's offsets up to this wide are checked offset by offset;
# wider ones (rare: a jump to the end of a log) by ordering the known offsets.
NARROW_GAP = 1024
# Odd steps of read order (backwards or jumping) are classified on the driver up to this many.
STEPS_ON_DRIVER = 100_000
_STEP_SCHEMA = ("process long, partition long, index long, slot int, offset long, value long, "
                "prev_offset long, prev_value long, prev_index long")
STEP_COLUMNS = tuple(c.split()[0] for c in _STEP_SCHEMA.split(", "))


def _F():
    from pyspark.sql import functions as F

    return F


@dataclass
class Known:
    """The positions known to hold a value (the by-position frame's), which
    poll-skip's gaps meet: `frame()` gives them as a Spark frame with a
    column `pos`; `first_known`, where the driver holds them
    (`driver_by_position.Positions.first_known`), finds the first known
    offset inside each of a few gaps without Spark."""

    frame: Callable[[], object]
    first_known: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None


def order_steps(runs, restarts: list):
    """The odd steps of read order (backwards or jumping) from one window
    pass, partitioned by process and partition, ordered by index (and slot,
    within a poll): each process's consecutive read runs of a partition. Few
    in any real history: `order_checks` takes them to the driver.
    `runs`: `anomalies.read_runs`; `restarts`: (process, index, partition
    or None for all), from `reading.HistoryReader.restarts`."""
    from pyspark.sql import Window

    F = _F()
    null_long = F.lit(None).cast("long")
    # Events that restart a process's read order (gathered on the driver: a
    # few per consumer and fault), for every partition it reads or the one named.
    restarts = local_frame(runs.sparkSession, [(p, i, -1 if only is None else only) for p, i, only in restarts],
                           "process long, index long, only long")
    proc_parts = runs.select("process", "partition").distinct()
    resets = restarts.join(proc_parts, "process").where(
        (F.col("only") < 0) | (F.col("only") == F.col("partition"))).select(
        "process", "partition", "index", F.lit(0).alias("slot"),
        *[null_long.alias(c) for c in ("first_offset", "first_value", "last_offset", "last_value")])
    stream = runs.select("process", "partition", "index", F.col("first_slot").alias("slot"), "first_offset",
                         "first_value", "last_offset", "last_value").unionByName(resets)
    w = Window.partitionBy("process", "partition").orderBy("index", "slot")
    offset, prev_offset = F.col("offset"), F.col("prev_offset")
    # A restart has no records: it is never a step, and the run after it has none before it.
    return stream.select(
        "process", "partition", "index", "slot", F.col("first_offset").alias("offset"),
        F.col("first_value").alias("value"), F.lag("last_offset").over(w).alias("prev_offset"),
        F.lag("last_value").over(w).alias("prev_value"), F.lag("index").over(w).alias("prev_index"),
    ).where(offset.isNotNull() & prev_offset.isNotNull()).where((offset <= prev_offset) | (offset > prev_offset + 1))


def driver_steps(runs: dict[str, np.ndarray], restarts: list) -> dict[str, np.ndarray] | None:
    """`order_steps`' rows, made on the driver with NumPy from the read runs
    it made (`read_runs.RunsWriter.order_columns`) and the same restarts,
    as a column each (STEP_COLUMNS): each process's runs and restarts of a
    partition, ordered by (index, slot), each run compared with the row
    before it, where a restart (no records) leaves no step. None where
    there are more than STEPS_ON_DRIVER: Spark's pass keeps them then
    (`order_checks`). A 10M-event history's 866,292 runs take a sort and a
    few passes, rather than Spark's window pass of about 2 CPU seconds."""
    process, partition, index, slot = runs["process"], runs["partition"], runs["index"], runs["first_slot"]
    # Each restart, for every partition its process reads or the one it names.
    reset_process, reset_partition, reset_index = [], [], []
    if restarts and len(process):
        read_by: dict[int, list[int]] = {}
        for p, q in zip(*(column.tolist() for column in distinct_pairs(process, partition))):
            read_by.setdefault(p, []).append(q)
        for p, i, only in restarts:
            for q in read_by.get(p, ()):
                if only is None or only == q:
                    reset_process.append(p)
                    reset_partition.append(q)
                    reset_index.append(i)
    n = len(process)
    order = _by_group_then_index(process, partition, index, slot, np.array(reset_process, np.int64),
                                 np.array(reset_partition, np.int64), np.array(reset_index, np.int64))
    # Rows that follow a run of their own process and partition (a restart's
    # place in `order` is n or more; its neighbours' steps are left out).
    run_rows = order < n
    ordered = np.minimum(order, n - 1) if n else order
    after_run = (run_rows[1:] & run_rows[:-1] & (process[ordered[1:]] == process[ordered[:-1]])
                 & (partition[ordered[1:]] == partition[ordered[:-1]]))
    at = np.flatnonzero(after_run) + 1
    this, before = order[at], order[at - 1]
    offset, prev_offset = runs["first_offset"][this], runs["last_offset"][before]
    odd = (offset <= prev_offset) | (offset > prev_offset + 1)
    if int(odd.sum()) > STEPS_ON_DRIVER:
        return None
    this, before = this[odd], before[odd]
    return dict(zip(STEP_COLUMNS, (process[this], partition[this], index[this], slot[this], offset[odd],
                                   runs["first_value"][this], prev_offset[odd], runs["last_value"][before],
                                   index[before])))


def _by_group_then_index(process, partition, index, slot, reset_process, reset_partition, reset_index):
    """The order of the runs, then the restarts (numbered after them), by
    process and partition, then index and slot (a restart's slot: 0). The
    runs come in the history's order, so by (index, slot), and the
    restarts by index: a merge of the two by index, then a stable sort by
    the (process, partition) pair's number (as first seen: any order of the
    pairs keeps each one's rows together), a radix sort where they are few,
    where a sort by the four keys took 0.04 s of 866,292 runs."""
    if not fits_above_partition(process, reset_process):
        return np.lexsort((np.concatenate((slot, np.zeros(len(reset_index), np.int64))),
                           np.concatenate((index, reset_index)), np.concatenate((partition, reset_partition)),
                           np.concatenate((process, reset_process))))
    by_index = np.argsort(np.concatenate((index, reset_index)), kind="stable")
    group, pairs = seen_rows(np.concatenate(((process << PARTITION_BITS) | partition,
                                             (reset_process << PARTITION_BITS) | reset_partition)))
    if len(pairs) <= np.iinfo(np.int16).max:
        group = group.astype(np.int16)
    return by_index[np.argsort(group[by_index], kind="stable")]


def order_checks(steps, rows: list | dict[str, np.ndarray], known: Known) -> dict[str, tuple[int, list[dict]]]:
    """nonmonotonic-poll and poll-skip from `order_steps`:
    `rows` are its first STEPS_ON_DRIVER + 1 rows (or every step, as
    `driver_steps`' columns, with no frame: `steps` None), classified on
    the driver unless there are more (a history with many gaps: records it
    does not know), then in Spark. The gaps meet the known positions on the
    driver where it holds them, else by `_skipped`."""
    F = _F()
    offset, prev_offset = F.col("offset"), F.col("prev_offset")
    if isinstance(rows, dict) or len(rows) <= STEPS_ON_DRIVER:
        c = rows if isinstance(rows, dict) else _columns(rows, STEP_COLUMNS)
        back = np.flatnonzero(c["offset"] <= c["prev_offset"])
        gaps = np.flatnonzero(c["offset"] > c["prev_offset"] + 1)
        skipped = {name: np.empty(0, np.int64) for name in STEP_COLUMNS + ("skipped_offset",)}
        if len(gaps) and known.first_known is not None:
            first = known.first_known(c["partition"][gaps], c["prev_offset"][gaps], c["offset"][gaps])
            at = gaps[first >= 0]
            skipped = {**{name: c[name][at] for name in STEP_COLUMNS}, "skipped_offset": first[first >= 0]}
        elif len(gaps):
            by_pos = known.frame()
            widths = c["offset"][gaps] - c["prev_offset"][gaps] - 1
            gaps_df = local_frame(by_pos.sparkSession, list(zip(*(c[name][gaps].tolist() for name in STEP_COLUMNS))),
                                  _STEP_SCHEMA)
            found = _skipped(gaps_df, by_pos, int(widths[widths <= NARROW_GAP].sum()),
                             int((widths > NARROW_GAP).sum())).collect()
            if found:
                skipped = _columns(found, STEP_COLUMNS + ("skipped_offset",))
        return {"nonmonotonic-poll": (len(back), _first_steps({name: c[name][back] for name in STEP_COLUMNS})),
                "poll-skip": (len(skipped["index"]), _first_steps(skipped))}
    kept = [keep(steps)]
    try:
        steps = kept[0]
        backwards = steps.where(offset <= prev_offset)
        gaps = steps.where(offset > prev_offset + 1).select(*STEP_COLUMNS)
        width = offset - prev_offset - 1
        sizes = gaps.agg(F.sum(F.when(width <= NARROW_GAP, width)).alias("narrow"),
                         F.count(F.when(width > NARROW_GAP, 1)).alias("wide")).collect()[0]
        skips = keep(_skipped(gaps, known.frame(), sizes["narrow"] or 0, sizes["wide"]))
        kept.append(skips)
        examples = {name: frame.orderBy(*keys).limit(MAX_EXAMPLES).collect()
                    for name, frame, keys in (("back", backwards, ("index", "slot")), ("skip", skips, ("index", "slot")))}
        return {"nonmonotonic-poll": (backwards.count(), [_step(r) for r in examples["back"]]),
                "poll-skip": (skips.count(), [_step(r, skipped=True) for r in examples["skip"]])}
    finally:
        for frame in kept:
            release(frame)


# Wide gaps up to this many are matched against the known offsets of their
# partition by a broadcast join (no sort); more, by ordering the known offsets.
WIDE_GAPS_BROADCAST = 1000


def _skipped(gaps, by_pos, narrow_width: int, wide: int):
    """The gaps (`_STEP_SCHEMA` rows: prev_offset, offset) that skipped a known
    offset, each with the first such (`skipped_offset`). `narrow_width`: the
    offsets inside the narrow gaps (up to NARROW_GAP wide) together; `wide`:
    how many are wider (both counted by the caller).

    Narrow gaps are spelled out offset by offset and, where that makes few
    rows, go to every task (broadcast) to meet the known positions where
    they lie, so the known positions are neither shuffled nor sorted; so do
    wide ones, as ranges, when few; many wide gaps (a history that jumps
    about) take the offset known next after each `prev_offset`, by ordering
    the known offsets of each partition."""
    from pyspark.sql import Window

    F = _F()
    key = ["process", "partition", "index", "slot"]
    width = F.col("offset") - F.col("prev_offset") - 1
    found = []
    if narrow_width:
        inside = (gaps.where(width <= NARROW_GAP).select(
            *key, F.explode(F.sequence(F.col("prev_offset") + 1, F.col("offset") - 1)).alias("inside"))
            .select(*key, "inside", pos_of(F.col("partition"), F.col("inside")).alias("pos")))
        found.append(by_pos.select("pos").join(broadcast_if_small(inside, narrow_width), "pos")
                     .groupBy(*key).agg(F.min("inside").alias("skipped_offset")))
    if wide and wide <= WIDE_GAPS_BROADCAST:
        known = by_pos.select(partition_of(F.col("pos")).alias("p"), offset_of(F.col("pos")).alias("o"))
        found.append(known.join(F.broadcast(gaps.where(width > NARROW_GAP)),
                                (F.col("p") == F.col("partition")) & (F.col("o") > F.col("prev_offset"))
                                & (F.col("o") < F.col("offset")))
                     .groupBy(*key).agg(F.min("o").alias("skipped_offset")))
    elif wide:
        # The offset known next after `prev_offset` (itself known: a record read) lies before `offset`.
        wk = Window.partitionBy("partition").orderBy("prev_offset")
        next_known = by_pos.select(partition_of(F.col("pos")).alias("partition"),
                                   offset_of(F.col("pos")).alias("prev_offset"))
        next_known = next_known.select("*", F.lead("prev_offset").over(wk).alias("skipped_offset"))
        found.append(gaps.where(width > NARROW_GAP).join(next_known, ["partition", "prev_offset"])
                     .where(F.col("skipped_offset") < F.col("offset")).select(*key, "skipped_offset"))
    if not found:
        return gaps.select("*", F.lit(None).cast("long").alias("skipped_offset")).limit(0)
    union = found[0] if len(found) == 1 else found[0].unionByName(found[1])
    return gaps.join(union, key)


def _columns(rows: list, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Spark's rows as a column each (of Python objects where one is null)."""
    columns = {name: [r[name] for r in rows] for name in names}
    return {name: np.array(values, object if None in values else np.int64) for name, values in columns.items()}


def _first_steps(steps: dict[str, np.ndarray]) -> list[dict]:
    """The first MAX_EXAMPLES steps (columns) by (index, slot), as examples."""
    first = np.lexsort((steps["slot"], steps["index"]))[:MAX_EXAMPLES]
    names = list(steps)
    return [_step(dict(zip(names, values)), skipped="skipped_offset" in steps)
            for values in zip(*(steps[name][first].tolist() for name in names))]


def _step(r, skipped: bool = False) -> dict:
    step = {"process": r["process"], "partition": r["partition"],
            "prev_offset": r["prev_offset"], "prev_value": r["prev_value"], "prev_index": r["prev_index"],
            "offset": r["offset"], "value": r["value"], "index": r["index"]}
    if skipped:
        step["skipped_offset"] = r["skipped_offset"]
    return step
