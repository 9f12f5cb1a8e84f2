"""Read order and send order: nonmonotonic-poll, poll-skip, nonmonotonic-send.

Each process's reads of a partition, in the order it was given them, and
each producer's acknowledged sends to a partition, in the order it invoked
them, come from one window pass over small rows: the read runs of
`anomalies.read_runs` (a run's inside steps are all +1, so only the step
into each run is looked at), the events that restart read order, and the
acknowledged sends of the by-value frame. Only the odd steps (backwards, or
jumping forwards) leave the pass; they are few in any real history and are
classified on the driver, the known offsets that a jump skipped found by a
join with the by-position frame.

Read order restarts where the contract says: an `assign` or `crash` of the
process restarts every partition it reads, a `seek` the partition it names.
Only an operation that happened restarts it: one completed `ok`, or `info`
(it may have happened), at its completion; a `fail` or an invocation that
never completed does not. An `info` seek that names no partition takes its
invocation's; one that names none at all restarts them all, to stay on the
safe side.
"""

from __future__ import annotations

from checkers.anomalies import MAX_EXAMPLES, OK, Frames, offset_of, partition_of, pos_of
from checkers.spark import broadcast_if_small, local_frame

# Gaps in a consumer's offsets up to this wide are checked offset by offset;
# wider ones (rare: a jump to the end of a log) by ordering the known offsets.
NARROW_GAP = 1024
# Odd steps of read order (backwards or jumping) are classified on the driver up to this many.
STEPS_ON_DRIVER = 100_000
_STEP_SCHEMA = ("process long, partition long, index long, slot int, offset long, value long, "
                "prev_offset long, prev_value long, prev_index long")
_READ, _SEND = 0, 1  # the kinds of ordered streams


def _F():
    from pyspark.sql import functions as F

    return F


def order_steps(frames: Frames):
    """The odd steps of read order (backwards or jumping) and of send order
    (backwards) from one window pass, partitioned by kind (reads or sends),
    process and partition, ordered by index (and slot, within a poll): each
    process's consecutive read runs of a partition, and its successive
    acknowledged sends to a partition. Few in any real history:
    `order_checks` takes them to the driver."""
    from pyspark.sql import Window

    F = _F()
    runs = frames.runs
    null_long = F.lit(None).cast("long")
    # Events that restart a process's read order: assign and crash for every
    # partition it reads, a seek for its own partition; each at its
    # completion, if it happened (ok or info), with an info seek's partition
    # taken from its invocation.
    proc_parts = runs.select("process", "partition").distinct()
    by_op = Window.partitionBy("process", "f").orderBy("index")
    invoked = F.last(F.when(F.col("type") == "invoke", F.col("partition")), ignorenulls=True).over(by_op)
    resets = (frames.client.where(F.col("f").isin("assign", "crash", "seek"))
              .select("process", "index", "f", "type", F.coalesce(F.col("partition"), invoked).alias("named"))
              .where(F.col("type").isin("ok", "info"))
              .select("process", "index", F.when(F.col("f") == "seek", F.col("named")).alias("only")))
    resets = resets.join(proc_parts, "process").where(
        F.col("only").isNull() | (F.col("only") == F.col("partition"))).select(
        F.lit(_READ).alias("kind"), "process", "partition", "index", F.lit(0).alias("slot"),
        *[null_long.alias(c) for c in ("first_offset", "first_value", "last_offset", "last_value", "ack_index")])
    # A producer's acknowledged sends, in invocation order, as one-record runs.
    ack_offset = offset_of(F.col("ack_pos"))
    sends = frames.by_value.where(F.col("outcome") == OK).select(
        F.lit(_SEND).alias("kind"), "process", partition_of(F.col("ack_pos")).alias("partition"),
        F.col("inv_index").alias("index"), F.lit(0).alias("slot"),
        ack_offset.alias("first_offset"), F.col("value").alias("first_value"),
        ack_offset.alias("last_offset"), F.col("value").alias("last_value"), F.col("comp_index").alias("ack_index"))
    stream = (runs.select(F.lit(_READ).alias("kind"), "process", "partition", "index",
                          F.col("first_slot").alias("slot"), "first_offset", "first_value", "last_offset",
                          "last_value", null_long.alias("ack_index"))
              .unionByName(resets).unionByName(sends))
    w = Window.partitionBy("kind", "process", "partition").orderBy("index", "slot")
    offset, prev_offset = F.col("offset"), F.col("prev_offset")
    # A restart has no records: it is never a step, and the run after it has none before it.
    return stream.select(
        "kind", "process", "partition", "index", "slot", F.col("first_offset").alias("offset"),
        F.col("first_value").alias("value"), F.lag("last_offset").over(w).alias("prev_offset"),
        F.lag("last_value").over(w).alias("prev_value"), F.lag("index").over(w).alias("prev_index"), "ack_index",
    ).where(offset.isNotNull() & prev_offset.isNotNull()).where(
        F.when(F.col("kind") == _SEND, offset < prev_offset)
        .otherwise((offset <= prev_offset) | (offset > prev_offset + 1)))


def order_checks(steps, rows: list, by_pos) -> dict[str, tuple[int, list[dict]]]:
    """nonmonotonic-poll, poll-skip and nonmonotonic-send from `order_steps`:
    `rows` are its first STEPS_ON_DRIVER + 1 rows, classified on the driver
    unless there are more (a pathological history), then in Spark."""
    F = _F()
    offset, prev_offset = F.col("offset"), F.col("prev_offset")
    if len(rows) <= STEPS_ON_DRIVER:
        found = _classify_steps([r for r in rows if r["kind"] == _READ], by_pos)
        back = sorted((r for r in rows if r["kind"] == _SEND), key=lambda r: r["index"])
        found["nonmonotonic-send"] = (len(back), [_send_step(r) for r in back[:MAX_EXAMPLES]])
        return found
    steps = steps.persist()
    try:
        reads, sends = steps.where(F.col("kind") == _READ), steps.where(F.col("kind") == _SEND)
        backwards = reads.where(offset <= prev_offset)
        back_rows = backwards.orderBy("index", "slot").limit(MAX_EXAMPLES).collect()
        skips = _skips(reads.where(offset > prev_offset + 1), by_pos)
        skip_rows = skips.orderBy("index", "slot").limit(MAX_EXAMPLES).collect()
        send_rows = sends.orderBy("index").limit(MAX_EXAMPLES).collect()
        return {"nonmonotonic-poll": (backwards.count(), [_step(r) for r in back_rows]),
                "poll-skip": (skips.count(), [_step(r, skipped=True) for r in skip_rows]),
                "nonmonotonic-send": (sends.count(), [_send_step(r) for r in send_rows])}
    finally:
        steps.unpersist()


def _send_step(r) -> dict:
    return {"process": r["process"], "partition": r["partition"],
            "prev_value": r["prev_value"], "prev_offset": r["prev_offset"], "prev_invoke_index": r["prev_index"],
            "value": r["value"], "offset": r["offset"], "invoke_index": r["index"], "ack_index": r["ack_index"]}


# Wide gaps up to this many are matched against the known offsets of their
# partition by a broadcast join (no sort); more, by ordering the known offsets.
WIDE_GAPS_BROADCAST = 1000


def _classify_steps(rows: list, by_pos) -> dict[str, tuple[int, list[dict]]]:
    """nonmonotonic-poll and poll-skip from the odd steps of reads, collected."""
    order = lambda r: (r["index"], r["slot"])  # noqa: E731
    back = sorted((r for r in rows if r["offset"] <= r["prev_offset"]), key=order)
    gaps = [r for r in rows if r["offset"] > r["prev_offset"] + 1]
    skipped = []
    if gaps:
        first_known = _skipped_offsets(gaps, by_pos)
        for r in gaps:
            key = (r["process"], r["partition"], r["index"], r["slot"])
            if key in first_known:
                skipped.append({**r, "skipped_offset": first_known[key]})
        skipped.sort(key=order)
    return {"nonmonotonic-poll": (len(back), [_step(r) for r in back[:MAX_EXAMPLES]]),
            "poll-skip": (len(skipped), [_step(r, skipped=True) for r in skipped[:MAX_EXAMPLES]])}


def _skipped_offsets(gaps: list, by_pos) -> dict[tuple, int]:
    """(process, partition, index, slot) -> the first known offset strictly inside
    that gap, for the gaps (collected steps) that skipped one; in one job.

    Narrow gaps are spelled out offset by offset and wide ones kept as ranges;
    both go to every task (broadcast) and meet the known positions where they
    lie, so the known positions are neither shuffled nor sorted."""
    F = _F()
    spark = by_pos.sparkSession
    columns = [c.split()[0] for c in _STEP_SCHEMA.split(", ")]
    narrow = [r for r in gaps if r["offset"] - r["prev_offset"] - 1 <= NARROW_GAP]
    wide = [r for r in gaps if r["offset"] - r["prev_offset"] - 1 > NARROW_GAP]
    if len(wide) > WIDE_GAPS_BROADCAST:
        gaps_df = local_frame(spark, [tuple(r[c] for c in columns) for r in gaps], _STEP_SCHEMA)
        return {(r["process"], r["partition"], r["index"], r["slot"]): r["skipped_offset"]
                for r in _skips(gaps_df, by_pos).collect()}
    key = ["process", "partition", "index", "slot"]
    found = []
    if narrow:
        n_df = local_frame(spark, [tuple(r[c] for c in key + ["prev_offset", "offset"]) for r in narrow],
                            _GAP_SCHEMA)
        inside = n_df.select(*key, F.explode(F.sequence(F.col("prev_offset") + 1, F.col("offset") - 1))
                             .alias("inside")).select(*key, "inside", pos_of(F.col("partition"), F.col("inside"))
                                                      .alias("pos"))
        width = sum(r["offset"] - r["prev_offset"] - 1 for r in narrow)
        found.append(by_pos.select("pos").join(broadcast_if_small(inside, width), "pos")
                     .groupBy(*key).agg(F.min("inside").alias("skipped_offset")))
    if wide:
        w_df = local_frame(spark, [tuple(r[c] for c in key + ["prev_offset", "offset"]) for r in wide],
                            _GAP_SCHEMA)
        known = by_pos.select(partition_of(F.col("pos")).alias("p"), offset_of(F.col("pos")).alias("o"))
        found.append(known.join(F.broadcast(w_df), (F.col("p") == F.col("partition"))
                                & (F.col("o") > F.col("prev_offset")) & (F.col("o") < F.col("offset")))
                     .groupBy(*key).agg(F.min("o").alias("skipped_offset")))
    union = found[0] if len(found) == 1 else found[0].unionByName(found[1])
    return {(r["process"], r["partition"], r["index"], r["slot"]): r["skipped_offset"] for r in union.collect()}


_GAP_SCHEMA = "process long, partition long, index long, slot int, prev_offset long, offset long"


def _skips(gaps, by_pos):
    """The gaps (prev_offset, offset) with a known offset strictly inside, and the first such offset
    (in Spark, for histories with too many odd steps to collect)."""
    from pyspark.sql import Window

    F = _F()
    width = F.col("offset") - F.col("prev_offset") - 1
    key = ["process", "partition", "index", "slot"]
    known = by_pos.select("pos")
    narrow = (gaps.where(width <= NARROW_GAP)
              .select("*", F.explode(F.sequence(F.col("prev_offset") + 1, F.col("offset") - 1)).alias("inside"))
              .join(known, pos_of(F.col("partition"), F.col("inside")) == F.col("pos"), "left_semi")
              .groupBy(*key).agg(F.min("inside").alias("skipped_offset")))
    narrow = gaps.join(narrow, key)
    wide = gaps.where(width > NARROW_GAP)
    if wide.limit(1).count() == 0:
        return narrow
    # Wide gaps: the offset known next after `prev_offset` lies before `offset`.
    wk = Window.partitionBy("partition").orderBy("prev_offset")
    next_known = known.select(partition_of(F.col("pos")).alias("partition"),
                              offset_of(F.col("pos")).alias("prev_offset"))
    next_known = next_known.select("*", F.lead("prev_offset").over(wk).alias("skipped_offset"))
    wide = wide.join(next_known, ["partition", "prev_offset"]).where(F.col("skipped_offset") < F.col("offset"))
    return narrow.unionByName(wide)


def _step(r, skipped: bool = False) -> dict:
    step = {"process": r["process"], "partition": r["partition"],
            "prev_offset": r["prev_offset"], "prev_value": r["prev_value"], "prev_index": r["prev_index"],
            "offset": r["offset"], "value": r["value"], "index": r["index"]}
    if skipped:
        step["skipped_offset"] = r["skipped_offset"]
    return step
