"""The anomalies of docs/history.md, computed with Spark.

The history is reshaped a few ways, each by one shuffle, and every anomaly
is read off one of them:

- by value: a send's invocation and completion, and every read of the value
  (lost-write, lost-acked, dirty-read, unseen, aborted-read, duplicate; and
  the contract's checks across events: values are unique, each send
  completes once, after its invocation, in its process);
- by position (partition, offset): the distinct values seen there
  (inconsistent-offset), and which offsets are known at all (poll-skip);
- in each process's order: consecutive reads of one partition
  (nonmonotonic-poll, poll-skip) and successive acknowledged sends
  (nonmonotonic-send).

Aggregations use only numbers, so that Spark keeps them in its fast hash
aggregation: an operation's type is a small code, and a position is one long,
`partition << 40 | offset`. Examples (at most 20 of each) are looked up
afterwards, with the history indexes that prove them.

Durability is read from the final log: the `final-reads` operations are
few, so their brackets (which polls are final reads) and the ends they
report are collected on the driver (`final_logs`), and each read is marked
final or not on its way into the by-value frame. A value's partitions in
the final log, and the partitions it was read from during the run, are kept
as min/max per value; the rare value seen in two partitions or more (a
duplicate across partitions) is settled exactly by a second, small pass.

Read order restarts where the contract says: an `assign` or `crash` of the
process restarts every partition it reads, a `seek` the partition it names.
Only an operation that happened restarts it: one completed `ok`, or `info`
(it may have happened), at its completion; a `fail` or an invocation that
never completed does not. An `info` seek that names no partition takes its
invocation's; one that names none at all restarts them all, to stay on the
safe side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import HistoryError
from core.history.format import FINAL_READS, MAX_OFFSET, MAX_PARTITION, NEMESIS_PROCESS_ID

# The anomaly vocabulary, defined here only: every anomaly the checker
# reports, in report order, with when it counts as an error and what it
# means (the words of `harness check`'s summary and of the HTML report).
ALWAYS = "always"
IF_IDEMPOTENT = "if-idempotent"  # only where the run's configuration promises to prevent it
NEVER = "never"
_VOCABULARY: dict[str, tuple[str, str]] = {
    "lost-write": (ALWAYS, "acknowledged, never read, though reads went past it"),
    "lost-acked": (ALWAYS, "acknowledged, not in the topic at the end (the final reads did not find it)"),
    "dirty-read": (ALWAYS, "a consumer was given a record whose send never settled, and the topic did not keep it"),
    "duplicate": (IF_IDEMPOTENT, "one value at two or more positions"),
    "inconsistent-offset": (ALWAYS, "two values at one position"),
    "aborted-read": (ALWAYS, "a read returned a value whose send failed"),
    "nonmonotonic-poll": (ALWAYS, "a consumer went back without assign/seek"),
    "poll-skip": (ALWAYS, "a consumer jumped over a known record"),
    "nonmonotonic-send": (IF_IDEMPOTENT, "a producer's acks went backwards"),
    "unseen": (NEVER, "acknowledged, never read, no read reached it"),
}
ANOMALIES = tuple(_VOCABULARY)
MEANING = {name: meaning for name, (_, meaning) in _VOCABULARY.items()}
ALWAYS_ERRORS = frozenset(name for name, (when, _) in _VOCABULARY.items() if when == ALWAYS)
IDEMPOTENCE_ERRORS = frozenset(name for name, (when, _) in _VOCABULARY.items() if when == IF_IDEMPOTENT)
MAX_EXAMPLES = 20
# Missing records looked up on the replicas' disks, as Kafka's system tests
# look up their first 1,000: data loss, or a reader that missed them?
MISSING_SAMPLE = 1000

OK, FAIL, INFO = 1, 2, 3  # a send's outcome, as a small number
KIND_NAMES = {OK: "ok", FAIL: "fail", INFO: "info"}
POS_BITS = 40  # history validation keeps offsets within 40 bits and partitions within 23
assert MAX_OFFSET == (1 << POS_BITS) - 1 and MAX_PARTITION < (1 << (63 - POS_BITS))
# Gaps in a consumer's offsets up to this wide are checked offset by offset;
# wider ones (rare: a jump to the end of a log) by ordering the known offsets.
NARROW_GAP = 1024
# Odd steps of read order (backwards or jumping) are classified on the driver up to this many.
STEPS_ON_DRIVER = 100_000
# Whether the ok polls are cached (see `build`).
CACHE_POLLS = True
_STEP_SCHEMA = ("process long, partition long, index long, slot int, offset long, value long, "
                "prev_offset long, prev_value long, prev_index long")


def _F():
    from pyspark.sql import functions as F

    return F


def pos_of(partition, offset):
    F = _F()
    return F.shiftleft(partition, POS_BITS).bitwiseOR(offset)


def partition_of(pos):
    F = _F()
    return F.shiftright(pos, POS_BITS)


def offset_of(pos):
    return pos.bitwiseAND(MAX_OFFSET)


def type_code(col):
    """A completion's type as its outcome code."""
    F = _F()
    return F.when(col == "ok", OK).when(col == "fail", FAIL).otherwise(INFO)


@dataclass
class FinalLogs:
    """What the history's `final-reads` operations say (docs/history.md).

    `brackets`: process -> [(invoke index, completion index)], the spans in
    which that process's polls are final reads (an invocation never completed
    runs to the end of the history). `ends`: partition -> the end of its
    known final log, from the latest ok completion that lists it. `asked`:
    every partition some final-reads invocation named.
    """

    present: bool = False
    brackets: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    asked: set[int] = field(default_factory=set)

    def not_reached(self) -> list[int]:
        """Partitions some final reads asked for whose log is not known."""
        return sorted(self.asked - set(self.ends))

    def warnings(self) -> list[str]:
        if not self.present:
            return ["durability was not checked: the history has no final-reads operation, so no final log "
                    "is known (lost-acked and dirty-read are 0)"]
        short = self.not_reached()
        if short:
            return [f"durability of partitions {_ranges(short)} was not checked: "
                    "the final reads did not report reaching their end"]
        return []


def _ranges(ps: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, start = [], None
    for i, p in enumerate(ps):
        if start is None:
            start = p
        if i + 1 == len(ps) or ps[i + 1] != p + 1:
            out.append(str(start) if start == p else f"{start}-{p}")
            start = None
    return ", ".join(out)


def few_events(df):
    """The nemesis's events and the `final-reads` operations: few in any
    history (faults and final reads, not records), the rows `final_logs` and
    `stats.faults` read on the driver (collected with the first pass)."""
    F = _F()
    return (df.where((F.col("process") == NEMESIS_PROCESS_ID)
                     | ((F.col("process") >= 0) & (F.col("f") == FINAL_READS)))
            .select("process", "index", "time", "type", "f", "partitions", "ends", "extra"))


def final_logs(few: list) -> FinalLogs:
    """The final-reads operations (of `few_events`), paired by order within their process."""
    rows = sorted((r for r in few if r["process"] >= 0 and r["f"] == FINAL_READS), key=lambda r: r["index"])
    logs = FinalLogs(present=bool(rows))
    open_: dict[int, list[int]] = {}
    end_at: dict[int, int] = {}  # partition -> index of the completion that set its end
    last_index = 1 << 62
    for r in rows:
        if r["type"] == "invoke":
            open_.setdefault(r["process"], []).append(r["index"])
            logs.asked.update(r["partitions"] or [])
            continue
        pending = open_.get(r["process"])
        if not pending:
            continue  # a completion with no invocation: ordered_ops reports it
        logs.brackets.setdefault(r["process"], []).append((pending.pop(0), r["index"]))
        if r["type"] == "ok":
            for e in r["ends"] or []:
                if e["partition"] not in end_at or end_at[e["partition"]] < r["index"]:
                    logs.ends[e["partition"]], end_at[e["partition"]] = e["offset"], r["index"]
    for process, pending in open_.items():
        logs.brackets.setdefault(process, []).extend((i, last_index) for i in pending)
    return logs


def _in_brackets(brackets: dict[int, list[tuple[int, int]]]):
    """Whether an event (by its process and index) lies inside a final-reads bracket."""
    F = _F()
    if not brackets:
        return F.lit(False)
    pairs = []
    for process, spans in brackets.items():
        pairs += [F.lit(process), F.array(*[F.struct(F.lit(lo).alias("lo"), F.lit(hi).alias("hi"))
                                            for lo, hi in spans])]
    spans = F.element_at(F.create_map(*pairs), F.col("process"))
    return F.coalesce(F.exists(spans, lambda b: (F.col("index") > b["lo"]) & (F.col("index") < b["hi"])),
                      F.lit(False))


@dataclass
class Frames:
    """The DataFrames an analysis shares; `cached` lists what to unpersist."""

    client: object  # client events
    polls: object  # the ok polls: process, index, time, records
    poll_parts: object  # one row per (ok poll, partition it returned): first and last record, in-poll steps
    cached: list
    # One row per record read: process, index, time, slot, partition, offset, value, and
    # `final` (read by the final reads), `in_final` (so, and below its partition's known end),
    # `in_run` (read during the run, from a partition whose final log is known). Set by `add_by_value`.
    reads: object = None
    by_value: object = None


def build(df) -> Frames:
    """The frames that need nothing from the driver: the client's events, the
    ok polls, and the polls per partition."""
    F = _F()
    client = df.where(F.col("process") >= 0)
    # The ok polls, kept: the records are read from the history once, then
    # exploded into one row per record (the by-value frame, example look-ups)
    # and summarised per (poll, partition) (read order, highest offsets) from
    # this cache instead of from the files each time.
    polls = (client.where((F.col("f") == "poll") & (F.col("type") == "ok"))
             .select("process", "index", "time", "records"))
    if CACHE_POLLS:
        polls = polls.persist()
    poll_parts = _poll_parts(polls).persist()
    return Frames(client, polls, poll_parts, [poll_parts] + ([polls] if CACHE_POLLS else []))


def add_by_value(frames: Frames, logs: FinalLogs) -> None:
    """The reads and the by-value frame (persisted), which need the final logs."""
    F = _F()
    client = frames.client
    reads = (frames.polls.select("process", "index", "time", _in_brackets(logs.brackets).alias("final"),
                                 F.posexplode("records").alias("slot", "r"))
             .select("process", "index", "time", "slot",
                     F.col("r.partition").alias("partition"), F.col("r.offset").alias("offset"),
                     F.col("r.value").alias("value"), "final"))
    if logs.ends:
        end = _lookup(logs.ends, F.col("partition"))
        reads = reads.select("*", (F.col("final") & (F.col("offset") < end)).alias("in_final"),
                             (~F.col("final") & end.isNotNull()).alias("in_run"))
    else:
        reads = reads.select("*", F.lit(False).alias("in_final"), F.lit(False).alias("in_run"))
    # Each side fills only the columns of its role, so that the aggregation
    # below is plain min/max/count over columns (nulls skipped), no CASE per row.
    typ, index, time, null = F.col("type"), F.col("index"), F.col("time"), F.lit(None).cast("long")
    inv = typ == "invoke"
    sends = client.where(F.col("f") == "send").select(
        "value", F.when(inv, index).alias("inv_index"), F.when(inv, time).alias("inv_time"),
        F.when(~inv, index).alias("comp_index"), F.when(~inv, time).alias("comp_time"),
        F.when(~inv, type_code(typ)).alias("outcome"),
        F.when(typ == "ok", pos_of(F.col("partition"), F.col("offset"))).alias("ack_pos"),
        F.col("process").alias("send_process"), null.alias("read_pos"), null.alias("read_index"),
        null.alias("final_part"), null.alias("run_part"), null.alias("run_index"))
    union = sends.unionByName(reads.select(
        "value", *[null.alias(c) for c in ("inv_index", "inv_time", "comp_index", "comp_time")],
        F.lit(None).cast("int").alias("outcome"), null.alias("ack_pos"), null.alias("send_process"),
        pos_of(F.col("partition"), F.col("offset")).alias("read_pos"), F.col("index").alias("read_index"),
        F.when(F.col("in_final"), F.col("partition")).alias("final_part"),
        F.when(F.col("in_run"), F.col("partition")).alias("run_part"),
        F.when(F.col("in_run"), F.col("index")).alias("run_index")))
    by_value = union.groupBy("value").agg(
        F.count("inv_index").alias("n_inv"),
        F.min("inv_index").alias("inv_index"),
        F.max("inv_index").alias("inv_index_last"),
        F.min("inv_time").alias("inv_time"),
        F.min("send_process").alias("process"),
        F.max("send_process").alias("process_max"),
        F.count("comp_index").alias("n_comp"),
        F.min("comp_index").alias("comp_index"),
        F.max("comp_index").alias("comp_index_last"),
        F.min("comp_time").alias("comp_time"),
        F.max("outcome").alias("outcome"),
        F.max("ack_pos").alias("ack_pos"),
        F.count("read_index").alias("n_read"),
        F.min("read_pos").alias("read_first_pos"),
        F.max("read_pos").alias("read_last_pos"),
        F.min("read_index").alias("read_index"),
        # The partitions whose final log holds the value, and those it was read
        # from during the run (final log known), as ranges: almost always one.
        F.min("final_part").alias("final_part_min"),
        F.max("final_part").alias("final_part_max"),
        F.min("run_part").alias("run_part_min"),
        F.max("run_part").alias("run_part_max"),
        F.min("run_index").alias("run_index"),
    )
    # least/greatest skip nulls: two or more distinct positions iff they differ.
    by_value = by_value.select(
        "*", F.least("ack_pos", "read_first_pos").alias("first_pos"),
        F.greatest("ack_pos", "read_last_pos").alias("last_pos")).persist()
    # `reads` itself is not cached: one pass feeds the by-value frame; the
    # example look-ups (only when anomalies were found) explode the cached polls again.
    frames.reads, frames.by_value = reads, by_value
    frames.cached.append(by_value)


def _poll_parts(polls):
    """Each ok poll, once per partition it returned: the first and the last
    record of that partition in the poll, the largest offset, and the steps
    within the poll that go back or jump (usually none). Consecutive reads
    inside one poll are compared here, row by row, with no shuffle; only
    the boundaries between polls need ordering across rows."""
    F = _F()
    records = F.transform("records", lambda r, i: F.struct(
        i.alias("slot"), r["partition"].alias("partition"), r["offset"].alias("offset"), r["value"].alias("value")))
    parts = (polls.select("process", "index", records.alias("recs"),
                          F.explode(F.array_distinct(F.transform("records", lambda r: r["partition"]))).alias("partition")))
    seq = F.filter("recs", lambda r: r["partition"] == F.col("partition"))
    parts = parts.select("process", "index", "partition", seq.alias("seq"))
    n = F.size("seq")
    pairs = F.zip_with(F.slice("seq", 1, n - 1), F.slice("seq", 2, n - 1),
                       lambda a, b: F.struct(a.alias("a"), b.alias("b")))
    odd = F.filter(pairs, lambda x: (x["b"]["offset"] <= x["a"]["offset"]) | (x["b"]["offset"] > x["a"]["offset"] + 1))
    return parts.select("process", "index", "partition", F.col("seq")[0].alias("first"),
                        F.element_at("seq", -1).alias("last"),
                        F.array_max(F.transform("seq", lambda r: r["offset"])).alias("max_offset"),
                        odd.alias("odd"))


def max_read_offsets(frames: Frames):
    """The highest offset read of each partition: (partition, m), a few rows."""
    F = _F()
    return frames.poll_parts.groupBy("partition").agg(F.max("max_offset").alias("m"))


def _lookup(mapping: dict[int, int], column):
    """`mapping[column]` as a Spark expression (null where absent)."""
    F = _F()
    if not mapping:
        return F.lit(None).cast("long")
    pairs = []
    for k, v in mapping.items():
        pairs += [F.lit(k), F.lit(v)]
    return F.element_at(F.create_map(*pairs), column)


def value_checks(frames: Frames, max_read: dict[int, int], logs: FinalLogs) -> dict:
    """One pass over the by-value frame: contract violations, counts, value anomalies.

    lost-acked and dirty-read are settled here for values seen in one
    partition (of the final log, and of the run's reads); the rest are
    flagged `multi` and settled by `multi_partition_checks`.
    """
    F = _F()
    v = frames.by_value
    outcome, n_read = F.col("outcome"), F.col("n_read")
    unfinished = (F.col("n_inv") == 1) & (F.col("n_comp") == 0)
    ack_part = partition_of(F.col("ack_pos"))
    maxread = _lookup(max_read, ack_part)
    ack_end = _lookup(logs.ends, ack_part)
    never_read = n_read == 0
    read_past = offset_of(F.col("ack_pos")) < F.coalesce(maxread, F.lit(-1))
    fin_min, fin_max = F.col("final_part_min"), F.col("final_part_max")
    run_part = F.col("run_part_min")
    multi = F.coalesce((fin_min != fin_max) | (run_part != F.col("run_part_max")), F.lit(False))

    def in_final(p):
        return F.coalesce((fin_min == p) | (fin_max == p), F.lit(False))

    lost_write = (outcome == OK) & never_read & read_past
    unsettled = outcome.isNull() | (outcome == INFO)  # no send of it completed ok or fail
    flags = {
        "lost-write": lost_write,
        "lost-acked": (outcome == OK) & ack_end.isNotNull() & ~in_final(ack_part) & ~lost_write & ~multi,
        "dirty-read": unsettled & run_part.isNotNull() & ~in_final(run_part) & ~multi,
        "unseen": (outcome == OK) & never_read & ~read_past & ack_end.isNull(),
        "aborted-read": (outcome == FAIL) & (n_read > 0),
        "duplicate": F.col("first_pos") != F.col("last_pos"),
    }

    def first_index(cond, col):
        return F.min(F.when(cond, F.col(col)))

    def count_if(cond):
        return F.count(F.when(cond, 1))

    row = v.agg(
        first_index(F.col("n_inv") > 1, "inv_index_last").alias("bad_dup_send"),
        first_index((F.col("n_comp") > 0) & (F.col("n_inv") == 0), "comp_index").alias("bad_orphan"),
        first_index(F.col("n_comp") > 1, "comp_index_last").alias("bad_double"),
        first_index(F.col("comp_index") < F.col("inv_index"), "comp_index").alias("bad_early"),
        first_index((F.col("n_comp") > 0) & (F.col("process_max") != F.col("process")),
                    "comp_index").alias("bad_process"),
        count_if(outcome == OK).alias("ok"), count_if(outcome == FAIL).alias("fail"),
        count_if(outcome == INFO).alias("info"), count_if(unfinished).alias("unfinished"),
        count_if(((outcome == INFO) | unfinished) & (n_read > 0)).alias("info_read"),
        count_if(((outcome == INFO) | unfinished) & never_read).alias("info_unread"),
        count_if((F.col("n_inv") == 0) & (n_read > 0)).alias("unknown_values"),
        count_if(multi).alias("multi"),
        F.sum("n_read").alias("records_read"),
        F.sum("n_inv").alias("send_invokes"),
        *[count_if(cond).alias(name) for name, cond in flags.items()],
    ).collect()[0]
    problems = [
        ("bad_dup_send", "value sent twice (values must be unique across the history)"),
        ("bad_orphan", "a send completion without an invocation of its value"),
        ("bad_double", "a second completion of the same send"),
        ("bad_early", "a send completion before its invocation"),
        ("bad_process", "a send completion by another process than its invocation's"),
    ]
    for key, message in problems:
        if row[key] is not None:
            raise HistoryError(f"index {row[key]}: {message}")
    result = row.asDict()
    result["frame"] = v.select("*", maxread.alias("max_read_offset"), ack_end.alias("final_end"),
                               _lookup(logs.ends, run_part).alias("run_final_end"), multi.alias("multi"),
                               *[cond.alias("is_" + name) for name, cond in flags.items()])
    return result


def multi_partition_checks(checked: dict, frames: Frames, logs: FinalLogs) -> dict[str, tuple[int, list[dict]]]:
    """lost-acked and dirty-read, exactly, for the values seen in two partitions
    or more (of the final log, or of the run's reads): per (value, partition)."""
    F = _F()
    found = {"lost-acked": (0, []), "dirty-read": (0, [])}
    if not checked["multi"]:
        return found
    values = checked["frame"].where(F.col("multi")).select(
        "value", "outcome", "ack_pos", "inv_index", "comp_index", "read_index", "is_lost-write")
    per_part = (frames.reads.join(values.select("value"), "value", "left_semi")
                .groupBy("value", "partition")
                .agg(F.max("in_final").alias("in_final"), F.max("in_run").alias("in_run"),
                     F.min(F.when(F.col("in_run"), F.col("index"))).alias("run_index")))
    dirty_part = F.col("in_run") & ~F.col("in_final")
    per_value = per_part.groupBy("value").agg(
        F.collect_list(F.when(F.col("in_final"), F.col("partition"))).alias("final_parts"),
        F.min(F.when(dirty_part, F.col("partition"))).alias("dirty_partition"),
        F.min(F.when(dirty_part, F.col("run_index"))).alias("dirty_index"))
    rows = values.join(per_value, "value", "left").orderBy("value").collect()
    lost, dirty = [], []
    for r in rows:
        if r["outcome"] == OK and not r["is_lost-write"]:
            p = r["ack_pos"] >> POS_BITS
            if p in logs.ends and p not in (r["final_parts"] or []):
                lost.append(_lost_example(r, logs.ends[p]))
        if r["outcome"] in (None, INFO) and r["dirty_partition"] is not None:
            dirty.append(_dirty_example(r, r["dirty_partition"], r["dirty_index"],
                                        logs.ends[r["dirty_partition"]]))
    return {"lost-acked": (len(lost), lost[:MAX_EXAMPLES]), "dirty-read": (len(dirty), dirty[:MAX_EXAMPLES])}


# How each value anomaly's examples are ordered (ties by value): the first
# acknowledged, the first read.
_EXAMPLE_ORDER = {"lost-write": "comp_index", "lost-acked": "comp_index", "dirty-read": "run_index",
                  "unseen": "comp_index", "aborted-read": "read_index", "duplicate": "first_seen"}
_EXAMPLE_COLUMNS = ("value", "inv_index", "comp_index", "ack_pos", "read_index", "outcome", "max_read_offset",
                    "final_end", "run_part_min", "run_index", "run_final_end")


def examples(checked: dict, frames: Frames, multi: dict[str, tuple[int, list[dict]]],
             inconsistent_at: list[int]) -> tuple[dict[str, list[dict]], dict[str, list[list[int]]], list[dict]]:
    """Every example results.json shows, gathered in a few jobs whatever was found:

    - one over the by-value frame: the first MAX_EXAMPLES values of each value
      anomaly (MISSING_SAMPLE of lost-write and lost-acked, which also fill
      `missing`), and the acknowledged values at the inconsistent positions;
    - one over the reads, for the reads of those values and positions;
    - one over the client events, for the errors and times the examples name.

    Returns the value anomalies' examples (`multi`'s merged in), the
    `missing` sample, and the inconsistent-offset examples (positions
    `inconsistent_at`, in order).
    """
    F = _F()
    frame = checked["frame"].select("*", F.least("read_index", "comp_index").alias("first_seen"))
    branches = []
    for name, key in _EXAMPLE_ORDER.items():
        if checked[name]:
            limit = MISSING_SAMPLE if name in ("lost-write", "lost-acked") else MAX_EXAMPLES
            branches.append(frame.where(F.col("is_" + name)).orderBy(key, "value").limit(limit).select(
                F.lit(name).alias("name"), F.col(key).alias("k"), *_EXAMPLE_COLUMNS))
    if inconsistent_at:
        branches.append(frame.where((F.col("outcome") == OK) & F.col("ack_pos").isin(inconsistent_at)).select(
            F.lit("acked-at").alias("name"), F.lit(None).cast("long").alias("k"), *_EXAMPLE_COLUMNS))
    rows: dict[str, list] = {}
    if branches:
        union = branches[0]
        for b in branches[1:]:
            union = union.unionByName(b)
        for r in union.collect():
            rows.setdefault(r["name"], []).append(r)
        for name, found in rows.items():
            found.sort(key=lambda r: (r["k"] if r["k"] is not None else -1, r["value"]))

    # The reads of the values whose examples list positions, and of the inconsistent positions.
    values = [r["value"] for name in ("aborted-read", "duplicate") for r in rows.get(name, [])[:MAX_EXAMPLES]]
    reads: dict[tuple[int, int, int], int] = {}
    if values or inconsistent_at:
        pos = pos_of(F.col("partition"), F.col("offset"))
        cond = F.lit(False)
        if values:
            cond = cond | F.col("value").isin(values)
        if inconsistent_at:
            cond = cond | pos.isin(inconsistent_at)
        for r in (frames.reads.where(cond).groupBy("value", "partition", "offset")
                  .agg(F.min("index").alias("index")).collect()):
            reads[(r["value"], r["partition"], r["offset"])] = r["index"]

    out: dict[str, list[dict]] = {}
    for name, found in rows.items():
        found = found[:MAX_EXAMPLES]
        if name in ("lost-write", "unseen"):
            out[name] = [{"value": r["value"], "partition": r["ack_pos"] >> POS_BITS,
                          "offset": r["ack_pos"] & MAX_OFFSET, "invoke_index": r["inv_index"],
                          "ack_index": r["comp_index"], "max_read_offset": r["max_read_offset"]} for r in found]
        elif name == "lost-acked":
            out[name] = [_lost_example(r, r["final_end"]) for r in found]
        elif name == "dirty-read":
            out[name] = [_dirty_example(r, r["run_part_min"], r["run_index"], r["run_final_end"]) for r in found]
        elif name == "aborted-read":
            out[name] = [{"value": r["value"], "invoke_index": r["inv_index"], "fail_index": r["comp_index"],
                          "error": None, "read_index": r["read_index"],
                          "positions": _positions(r, reads)} for r in found]
        elif name == "duplicate":
            out[name] = [{"value": r["value"], "invoke_index": r["inv_index"], "positions": _positions(r, reads)}
                         for r in found]
    for name, key in (("lost-acked", "ack_index"), ("dirty-read", "read_index")):
        merged = sorted(out.get(name, []) + multi[name][1], key=lambda e: (e[key], e["value"]))[:MAX_EXAMPLES]
        if merged:
            out[name] = merged

    # The errors of failed sends read (aborted-read) and when lost-acked and
    # dirty-read values were read (the report tells the story in time).
    timed = [e for name in ("lost-acked", "dirty-read") for e in out.get(name, [])]
    indexes = {e["fail_index"] for e in out.get("aborted-read", [])} | {
        e["read_index"] for e in timed if e["read_index"] is not None}
    fields = {}
    if indexes:
        fields = {r["index"]: r for r in frames.client.where(F.col("index").isin(sorted(indexes)))
                  .select("index", "error", "time").collect()}
    for e in out.get("aborted-read", []):
        e["error"] = fields[e["fail_index"]]["error"] if e["fail_index"] in fields else None
    for e in timed:
        e["read_time"] = fields[e["read_index"]]["time"] if e["read_index"] in fields else None

    missing = {}
    for name in ("lost-write", "lost-acked"):
        sample = [(r["comp_index"], r["value"], r["ack_pos"] >> POS_BITS, r["ack_pos"] & MAX_OFFSET)
                  for r in rows.get(name, [])]
        sample += [(e["ack_index"], e["value"], e["partition"], e["offset"]) for e in multi.get(name, (0, []))[1]]
        if sample:
            missing[name] = [[v, p, o] for _, v, p, o in sorted(sample)[:MISSING_SAMPLE]]

    seen: dict[int, dict[int, dict]] = {k: {} for k in inconsistent_at}
    for (value, p, o), index in reads.items():
        if (p << POS_BITS) | o in seen:
            seen[(p << POS_BITS) | o].setdefault(value, {})["read_index"] = index
    for r in rows.get("acked-at", []):
        seen[r["ack_pos"]].setdefault(r["value"], {})["ack_index"] = r["comp_index"]
    positions = [{"partition": k >> POS_BITS, "offset": k & MAX_OFFSET,
                  "values": [{"value": value, **refs} for value, refs in sorted(seen[k].items())][:MAX_EXAMPLES]}
                 for k in inconsistent_at]
    return out, missing, positions


def _lost_example(r, final_end: int) -> dict:
    return {"value": r["value"], "partition": r["ack_pos"] >> POS_BITS, "offset": r["ack_pos"] & MAX_OFFSET,
            "invoke_index": r["inv_index"], "ack_index": r["comp_index"], "read_index": r["read_index"],
            "final_end": final_end}


def _dirty_example(r, partition: int, read_index: int, final_end: int) -> dict:
    send = {OK: "ok", FAIL: "fail", INFO: "info"}.get(r["outcome"])
    if send is None:
        send = "never completed" if r["inv_index"] is not None else "no send"
    return {"value": r["value"], "partition": partition, "read_index": read_index, "send": send,
            "invoke_index": r["inv_index"], "completion_index": r["comp_index"], "final_end": final_end}


def _positions(r, reads: dict) -> list[dict]:
    """The distinct positions of one by-value row, each with the events that show it."""
    found: dict[tuple[int, int], dict] = {}
    if r["outcome"] == OK:
        found[(r["ack_pos"] >> POS_BITS, r["ack_pos"] & MAX_OFFSET)] = {"ack_index": r["comp_index"]}
    for (v, p, o), index in reads.items():
        if v == r["value"]:
            found.setdefault((p, o), {})["read_index"] = index
    return [{"partition": p, "offset": o, **found[(p, o)]} for (p, o) in sorted(found)]


def by_position(frames: Frames, duplicates: int):
    """The distinct values at each position: value -> positions, turned around.

    A value at one position contributes that position; only duplicated
    values (rare) need their reads looked at again for every position.
    """
    F = _F()
    v = frames.by_value
    single = v.where(F.col("first_pos").isNotNull() & (F.col("first_pos") == F.col("last_pos"))).select(
        F.col("first_pos").alias("pos"), "value")
    if not duplicates:
        return single.groupBy("pos").agg(F.count("*").alias("n_values"), F.min("value").alias("some_value"))
    dup_values = v.where(F.col("first_pos") != F.col("last_pos"))
    dup_acks = dup_values.where(F.col("ack_pos").isNotNull()).select(F.col("ack_pos").alias("pos"), "value")
    # `duplicates` values: few beside the reads, so they go to every task rather than the reads to a shuffle.
    dup_reads = frames.reads.join(_small(dup_values.select("value"), duplicates), "value", "left_semi").select(
        pos_of(F.col("partition"), F.col("offset")).alias("pos"), "value")
    positions = single.unionByName(dup_acks.unionByName(dup_reads).distinct())
    return positions.groupBy("pos").agg(F.count("*").alias("n_values"), F.min("value").alias("some_value"))


# A side of a join with at most this many rows is broadcast (sent whole to every task).
BROADCAST_ROWS = 1_000_000


def _small(frame, rows: int):
    """`frame`, hinted for broadcast if `rows` (known on the driver) is small."""
    F = _F()
    return F.broadcast(frame) if rows <= BROADCAST_ROWS else frame


def inconsistent_first(by_pos):
    """The first MAX_EXAMPLES positions that hold two values or more (`pos`)."""
    F = _F()
    return by_pos.where(F.col("n_values") >= 2).orderBy("pos").limit(MAX_EXAMPLES).select("pos")


def inconsistent_positions(by_pos, first: list) -> tuple[int, list[int]]:
    """How many positions hold two values or more (counted only when there are
    MAX_EXAMPLES or more), and the first of them, from `inconsistent_first`'s rows."""
    F = _F()
    keys = sorted(r["pos"] for r in first)
    n = by_pos.where(F.col("n_values") >= 2).count() if len(keys) == MAX_EXAMPLES else len(keys)
    return n, keys


_READ, _SEND = 0, 1  # the kinds of ordered streams


def order_steps(frames: Frames):
    """The odd steps of read order (backwards or jumping) and of send order
    (backwards) from one window pass, partitioned by kind (reads or sends),
    process and partition, ordered by index: each process's consecutive reads
    of a partition, and its successive acknowledged sends to a partition.
    Few in any real history: `order_checks` takes them to the driver."""
    from pyspark.sql import Window

    F = _F()
    parts = frames.poll_parts
    rec = parts.schema["first"].dataType
    null_long = F.lit(None).cast("long")
    # Steps inside one poll were found row by row.
    inside = parts.select("process", "partition", "index", F.explode("odd").alias("s")).select(
        F.lit(_READ).alias("kind"), "process", "partition", "index", F.col("s.b.slot").alias("slot"),
        F.col("s.b.offset").alias("offset"), F.col("s.b.value").alias("value"),
        F.col("s.a.offset").alias("prev_offset"), F.col("s.a.value").alias("prev_value"),
        F.col("index").alias("prev_index"), null_long.alias("ack_index"))
    # Steps from one poll to the next: events that restart a process's read
    # order come between them: assign and crash for every partition it reads,
    # a seek for its own partition; each at its completion, if it happened
    # (ok or info), with an info seek's partition taken from its invocation.
    proc_parts = parts.select("process", "partition").distinct()
    by_op = Window.partitionBy("process", "f").orderBy("index")
    invoked = F.last(F.when(F.col("type") == "invoke", F.col("partition")), ignorenulls=True).over(by_op)
    resets = (frames.client.where(F.col("f").isin("assign", "crash", "seek"))
              .select("process", "index", "f", "type", F.coalesce(F.col("partition"), invoked).alias("named"))
              .where(F.col("type").isin("ok", "info"))
              .select("process", "index", F.when(F.col("f") == "seek", F.col("named")).alias("only")))
    resets = resets.join(proc_parts, "process").where(
        F.col("only").isNull() | (F.col("only") == F.col("partition"))).select(
        F.lit(_READ).alias("kind"), "process", "partition", "index", F.lit(None).cast(rec).alias("first"),
        F.lit(None).cast(rec).alias("last"), null_long.alias("ack_index"))
    # A producer's acknowledged sends, in invocation order, as one-record "polls".
    ack_part = partition_of(F.col("ack_pos"))
    sent = F.struct(F.lit(0).alias("slot"), ack_part.alias("partition"), offset_of(F.col("ack_pos")).alias("offset"),
                    F.col("value").alias("value"))
    sends = frames.by_value.where(F.col("outcome") == OK).select(
        F.lit(_SEND).alias("kind"), "process", ack_part.alias("partition"), F.col("inv_index").alias("index"),
        sent.alias("first"), sent.alias("last"), F.col("comp_index").alias("ack_index"))
    stream = (parts.select(F.lit(_READ).alias("kind"), "process", "partition", "index", "first", "last",
                           null_long.alias("ack_index"))
              .unionByName(resets).unionByName(sends))
    w = Window.partitionBy("kind", "process", "partition").orderBy("index")
    offset, prev_offset = F.col("offset"), F.col("prev_offset")
    between = stream.select(
        "kind", "process", "partition", "index", "first", "ack_index", F.lag("last").over(w).alias("prev"),
        F.lag("index").over(w).alias("prev_index"),
    ).where(F.col("first").isNotNull() & F.col("prev").isNotNull()).select(
        "kind", "process", "partition", "index", F.col("first.slot").alias("slot"),
        F.col("first.offset").alias("offset"), F.col("first.value").alias("value"),
        F.col("prev.offset").alias("prev_offset"), F.col("prev.value").alias("prev_value"), "prev_index",
        "ack_index",
    ).where(F.when(F.col("kind") == _SEND, offset < prev_offset)
            .otherwise((offset <= prev_offset) | (offset > prev_offset + 1)))
    return inside.unionByName(between)


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
        gaps_df = _local_frame(spark, [tuple(r[c] for c in columns) for r in gaps], _STEP_SCHEMA)
        return {(r["process"], r["partition"], r["index"], r["slot"]): r["skipped_offset"]
                for r in _skips(gaps_df, by_pos).collect()}
    key = ["process", "partition", "index", "slot"]
    found = []
    if narrow:
        n_df = _local_frame(spark, [tuple(r[c] for c in key + ["prev_offset", "offset"]) for r in narrow],
                            _GAP_SCHEMA)
        inside = n_df.select(*key, F.explode(F.sequence(F.col("prev_offset") + 1, F.col("offset") - 1))
                             .alias("inside")).select(*key, "inside", pos_of(F.col("partition"), F.col("inside"))
                                                      .alias("pos"))
        width = sum(r["offset"] - r["prev_offset"] - 1 for r in narrow)
        found.append(by_pos.select("pos").join(_small(inside, width), "pos")
                     .groupBy(*key).agg(F.min("inside").alias("skipped_offset")))
    if wide:
        w_df = _local_frame(spark, [tuple(r[c] for c in key + ["prev_offset", "offset"]) for r in wide],
                            _GAP_SCHEMA)
        known = by_pos.select(partition_of(F.col("pos")).alias("p"), offset_of(F.col("pos")).alias("o"))
        found.append(known.join(F.broadcast(w_df), (F.col("p") == F.col("partition"))
                                & (F.col("o") > F.col("prev_offset")) & (F.col("o") < F.col("offset")))
                     .groupBy(*key).agg(F.min("o").alias("skipped_offset")))
    union = found[0] if len(found) == 1 else found[0].unionByName(found[1])
    return {(r["process"], r["partition"], r["index"], r["slot"]): r["skipped_offset"] for r in union.collect()}


_GAP_SCHEMA = "process long, partition long, index long, slot int, prev_offset long, offset long"


def _local_frame(spark, rows: list[tuple], schema: str):
    """A DataFrame of rows the driver holds (a DDL schema of `long` and `int`
    columns), handed to Spark as Arrow: the JVM reads it, and no Python runs
    on the executors. `createDataFrame` of Python tuples would start a Python
    worker on every executor that reads the rows, which a cluster's executors
    may lack (or have in another version than the driver's)."""
    import pyarrow as pa

    fields = [field.split() for field in schema.split(", ")]
    types = {"long": pa.int64(), "int": pa.int32()}
    table = pa.table({name: pa.array([r[i] for r in rows], type=types[kind])
                      for i, (name, kind) in enumerate(fields)})
    return spark.createDataFrame(table, schema)


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
