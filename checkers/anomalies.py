"""The anomalies of docs/history.md, computed with Spark.

The history is reshaped a few ways, each by one shuffle, and every anomaly
is read off one of them:

- by value: a send's invocation and completion, and every read of the value
  (lost-write, lost-acked, dirty-read, unseen, aborted-read, duplicate; and
  the contract's checks across events: values are unique, each send
  completes once, after its invocation, in its process);
- by position (partition, offset): the distinct values seen there
  (inconsistent-offset), and which offsets are known at all (poll-skip);
- read runs: each poll's records from one partition, in runs of offsets
  rising by one, which `checkers.order` puts in each process's order
  (nonmonotonic-poll, poll-skip; nonmonotonic-send is the driver's,
  checkers/send_order.py).

Aggregations use only numbers, so that Spark keeps them in its fast hash
aggregation: an operation's type is a small code, and a position is one long,
`partition << 40 | offset`. What later passes read again is kept (a local
checkpoint, `checkers.spark.keep`); the records themselves are read from the
history again by the few look-ups that need them, not kept. Examples (at
most 20 of each) are looked up afterwards, with the history indexes that
prove them.

Histories the driver's memory holds have their by-value and by-position
frames made, and checked, on the driver by the same definitions
(checkers/driver_by_value.py, checkers/driver_by_position.py,
checkers/driver_value_checks.py); tests compare the two ways.

Durability is read from the final log: the `final-reads` operations are
few, so their brackets (which polls are final reads) and the ends they
report are collected on the driver (`final_logs`), and each read is marked
final or not on its way into the by-value frame. A value's partitions in
the final log, and the partitions it was read from during the run, are kept
as min/max per value; the rare value seen in two partitions or more (a
duplicate across partitions) is settled exactly by a second, small pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from checkers.spark import broadcast_if_small, keep, long_array, long_map
from core.errors import HistoryError
from core.history.format import FINAL_READS, MAX_OFFSET, MAX_PARTITION

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
POS_BITS = 40  # history validation keeps offsets within 40 bits and partitions within 23
assert MAX_OFFSET == (1 << POS_BITS) - 1 and MAX_PARTITION < (1 << (63 - POS_BITS))

def _F():
    from pyspark.sql import functions as F

    return F


def pos_of(partition, offset):
    F = _F()
    return F.shiftleft(partition, POS_BITS).bitwiseOR(offset)


def at_two_positions():
    """A by-value row's value is a duplicate: its positions (acknowledged or
    read) are not all one. least/greatest skip nulls, so two distinct
    positions make first_pos and last_pos differ."""
    F = _F()
    return F.col("first_pos") != F.col("last_pos")


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


def final_logs(few: list) -> FinalLogs:
    """The final-reads operations (of `reading.HistoryReader.few`), paired by order within their process."""
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


# Final-reads brackets up to this many are tested by a plain expression per read,
# compiled with the rest of its stage; more (readers replaced many times), by
# looking the process up in a map of spans, which Spark evaluates row by row.
BRACKETS_INLINE = 32


def _in_brackets(brackets: dict[int, list[tuple[int, int]]]):
    """Whether an event (by its process and index) lies inside a final-reads bracket."""
    F = _F()
    spans = [(process, lo, hi) for process, pairs in brackets.items() for lo, hi in pairs]
    if not spans:
        return F.lit(False)
    if all(len(spans_of) == 1 for spans_of in brackets.values()):
        # One bracket per process (a reader's final reads), its bounds looked up by
        # process: a number in an expression is compiled into the code, so other
        # bounds would mean another compile in every check (docs/benchmarks.md).
        lo = _lookup({process: spans_of[0][0] for process, spans_of in brackets.items()}, F.col("process"))
        hi = _lookup({process: spans_of[0][1] for process, spans_of in brackets.items()}, F.col("process"))
        return F.coalesce((F.col("index") > lo) & (F.col("index") < hi), F.lit(False))
    if len(spans) <= BRACKETS_INLINE:
        inside = F.lit(False)
        for process, lo, hi in spans:
            inside = inside | ((F.col("process") == process) & (F.col("index") > lo) & (F.col("index") < hi))
        return inside
    # Each process's spans, as SQL text: one call to the JVM (checkers.spark.long_array).
    spans_of_process = F.expr("array(" + ", ".join(
        "array(" + ", ".join(f"named_struct('lo', {int(lo)}L, 'hi', {int(hi)}L)" for lo, hi in spans_of) + ")"
        for spans_of in brackets.values()) + ")")
    spans_col = F.element_at(F.map_from_arrays(long_array(list(brackets)), spans_of_process), F.col("process"))
    return F.coalesce(F.exists(spans_col, lambda b: (F.col("index") > b["lo"]) & (F.col("index") < b["hi"])),
                      F.lit(False))


@dataclass
class Frames:
    """The DataFrames an analysis shares; `kept` lists the checkpoints to release."""

    client: object  # client events
    # One row per record read: process, index, time, slot, partition, offset, value, and
    # `final` (read by the final reads), `in_final` (so, and below its partition's known end),
    # `in_run` (read during the run, from a partition whose final log is known). Not kept:
    # read from the history again by the few look-ups that need it.
    reads: object
    by_value: object = None  # kept
    # The reads of duplicated values (`add_duplicate_reads`): value, partition,
    # offset and the first read's index; kept, only where duplicates were found.
    dup_reads: object = None
    kept: list = field(default_factory=list)


def build(df, logs: FinalLogs) -> Frames:
    """The client's events and their reads, marked by the final logs."""
    F = _F()
    client = df.where(F.col("process") >= 0)
    polls = client.where((F.col("f") == "poll") & (F.col("type") == "ok"))
    reads = (polls.select("process", "index", "time", _in_brackets(logs.brackets).alias("final"),
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
    return Frames(client, reads)


def read_runs(reads):
    """The reads as runs: the records of one poll from one partition whose
    offsets rise by one with their place in the poll (`offset - slot` is the
    same), grouped by (process, index, partition, offset - slot). A poll's
    records are all in one row of the history, so Spark's partial
    aggregation settles each poll where it is read and only the runs, about
    one per poll and partition, cross a shuffle.

    Within a run whose slots are contiguous (no other record between them:
    `contiguous`) every step is +1, so read order only has to compare each
    run with the one before it (`checkers.order`); a gap (a record the
    history does not know) or a step back inside a poll starts a new run.
    Only a run whose slots are not contiguous (records of another partition
    between, the offsets rising by exactly as many) hides steps: `exact_runs`
    replaces the polls that have one."""
    F = _F()
    shift = F.col("offset") - F.col("slot")
    runs = reads.groupBy("process", "index", "partition", shift.alias("shift")).agg(
        F.min("time").alias("time"), F.count("*").alias("n"),
        F.min("slot").alias("first_slot"), F.max("slot").alias("last_slot"),
        F.min_by("value", "slot").alias("first_value"), F.max_by("value", "slot").alias("last_value"))
    return runs.select("process", "index", "partition", "time", "n", "first_slot", "last_slot",
                       (F.col("shift") + F.col("first_slot")).alias("first_offset"),
                       (F.col("shift") + F.col("last_slot")).alias("last_offset"),
                       "first_value", "last_value",
                       (F.col("last_slot") - F.col("first_slot") + 1 == F.col("n")).alias("contiguous"))


def exact_runs(runs, reads, polls_to_split: int):
    """`runs` with every record of the polls that have a run whose slots are
    not contiguous (`polls_to_split` of them, counted by `run_totals`) as a
    run of its own: one record is a run, trivially."""
    F = _F()
    if not polls_to_split:
        return runs
    split = broadcast_if_small(runs.where(~F.col("contiguous")).select("process", "index").distinct(), polls_to_split)
    singles = reads.join(split, ["process", "index"], "left_semi").select(
        "process", "index", "partition", "time", F.lit(1).cast("long").alias("n"),
        F.col("slot").alias("first_slot"), F.col("slot").alias("last_slot"),
        F.col("offset").alias("first_offset"), F.col("offset").alias("last_offset"),
        F.col("value").alias("first_value"), F.col("value").alias("last_value"), F.lit(True).alias("contiguous"))
    return runs.join(split, ["process", "index"], "left_anti").unionByName(singles)


def run_totals(runs) -> list:
    """Two small frames of the runs, for `_together`: per partition the
    highest offset read and the records read (`partition`, `m`, `n`), and how
    many polls `exact_runs` must split (`polls`)."""
    F = _F()
    per_partition = runs.groupBy("partition").agg(F.max("last_offset").alias("m"), F.sum("n").alias("n"))
    split = runs.where(~F.col("contiguous")).select("process", "index").distinct().agg(F.count("*").alias("polls"))
    return [per_partition, split]


def add_by_value(frames: Frames, logs: FinalLogs) -> None:
    """The by-value frame (kept), which needs the final logs."""
    F = _F()
    client = frames.client
    reads = frames.reads
    # Each side fills only the columns of its role, so that the aggregation
    # below is plain min/max over columns (nulls skipped), no CASE per row.
    # Counts are not kept: two invocations (or completions) of one value have
    # two indexes, so their min and max differ, and a value no read returned
    # has no read index.
    typ, index, null = F.col("type"), F.col("index"), F.lit(None).cast("long")
    inv = typ == "invoke"
    sends = client.where(F.col("f") == "send").select(
        "value", F.when(inv, index).alias("inv_index"), F.when(~inv, index).alias("comp_index"),
        F.when(~inv, type_code(typ)).alias("outcome"),
        F.when(typ == "ok", pos_of(F.col("partition"), F.col("offset"))).alias("ack_pos"),
        F.col("process").alias("send_process"), null.alias("read_pos"), null.alias("read_index"),
        null.alias("final_part"), null.alias("run_part"), null.alias("run_index"))
    union = sends.unionByName(reads.select(
        "value", *[null.alias(c) for c in ("inv_index", "comp_index")],
        F.lit(None).cast("int").alias("outcome"), null.alias("ack_pos"), null.alias("send_process"),
        pos_of(F.col("partition"), F.col("offset")).alias("read_pos"), F.col("index").alias("read_index"),
        F.when(F.col("in_final"), F.col("partition")).alias("final_part"),
        F.when(F.col("in_run"), F.col("partition")).alias("run_part"),
        F.when(F.col("in_run"), F.col("index")).alias("run_index")))
    by_value = union.groupBy("value").agg(
        F.min("inv_index").alias("inv_index"),
        F.max("inv_index").alias("inv_index_last"),
        F.min("send_process").alias("process"),
        F.max("send_process").alias("process_max"),
        F.min("comp_index").alias("comp_index"),
        F.max("comp_index").alias("comp_index_last"),
        F.max("outcome").alias("outcome"),
        F.max("ack_pos").alias("ack_pos"),
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
    # The reads' own range is not kept: every later pass reads the frame again.
    by_value = keep(by_value.select(
        *[c for c in by_value.columns if c not in ("read_first_pos", "read_last_pos")],
        F.least("ack_pos", "read_first_pos").alias("first_pos"),
        F.greatest("ack_pos", "read_last_pos").alias("last_pos")))
    frames.by_value = by_value
    frames.kept.append(by_value)


# A mapping of non-negative keys below this (partitions) is looked up as an
# array, by index; a map literal is searched key by key, for every row.
DENSE_KEYS = 4096


def _lookup(mapping: dict[int, int], column):
    """`mapping[column]` as a Spark expression (null where absent)."""
    F = _F()
    if not mapping:
        return F.lit(None).cast("long")
    if min(mapping) >= 0 and max(mapping) < DENSE_KEYS:
        return F.get(long_array([mapping.get(k) for k in range(max(mapping) + 1)]), column.cast("int"))
    return F.element_at(long_map(mapping), column)


# The contract's checks across a value's send events, in the order a
# history is refused by them: (the by-value pass's key, what is wrong).
SEND_PROBLEMS = (
    ("bad_dup_send", "value sent twice (values must be unique across the history)"),
    ("bad_orphan", "a send completion without an invocation of its value"),
    ("bad_double", "a second completion of the same send"),
    ("bad_early", "a send completion before its invocation"),
    ("bad_process", "a send completion by another process than its invocation's"),
)


def refuse_broken_sends(checked: dict) -> None:
    """Raise HistoryError at the first event of `SEND_PROBLEMS` the by-value
    pass found (its key: that event's index, or None)."""
    for key, message in SEND_PROBLEMS:
        if checked[key] is not None:
            raise HistoryError(f"index {checked[key]}: {message}")


def value_checks(frames: Frames, max_read: dict[int, int], logs: FinalLogs) -> dict:
    """One pass over the by-value frame: contract violations, counts, value anomalies.

    lost-acked and dirty-read are settled here for values seen in one
    partition (of the final log, and of the run's reads); the rest are
    flagged `multi` and settled by `multi_partition_checks`.
    """
    F = _F()
    v = frames.by_value
    outcome = F.col("outcome")
    invoked, completed, read = (F.col(c).isNotNull() for c in ("inv_index", "comp_index", "read_index"))
    unfinished = invoked & ~completed
    ack_part = partition_of(F.col("ack_pos"))
    maxread = _lookup(max_read, ack_part)
    ack_end = _lookup(logs.ends, ack_part)
    never_read = ~read
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
        "aborted-read": (outcome == FAIL) & read,
        "duplicate": at_two_positions(),
    }

    def first_index(cond, col):
        return F.min(F.when(cond, F.col(col)))

    def count_if(cond):
        return F.count(F.when(cond, 1))

    row = v.agg(
        first_index(F.col("inv_index") != F.col("inv_index_last"), "inv_index_last").alias("bad_dup_send"),
        first_index(completed & ~invoked, "comp_index").alias("bad_orphan"),
        first_index(F.col("comp_index") != F.col("comp_index_last"), "comp_index_last").alias("bad_double"),
        first_index(F.col("comp_index") < F.col("inv_index"), "comp_index").alias("bad_early"),
        first_index(completed & (F.col("process_max") != F.col("process")),
                    "comp_index").alias("bad_process"),
        count_if(outcome == OK).alias("ok"), count_if(outcome == FAIL).alias("fail"),
        count_if(outcome == INFO).alias("info"), count_if(unfinished).alias("unfinished"),
        count_if(((outcome == INFO) | unfinished) & read).alias("info_read"),
        count_if(((outcome == INFO) | unfinished) & never_read).alias("info_unread"),
        count_if(~invoked & read).alias("unknown_values"),
        count_if(multi).alias("multi"),
        # Each value is invoked once, or the history is refused (bad_dup_send).
        count_if(invoked).alias("send_invokes"),
        *[count_if(cond).alias(name) for name, cond in flags.items()],
    ).collect()[0]
    result = row.asDict()
    refuse_broken_sends(result)
    result["frame"] = v.select("*", maxread.alias("max_read_offset"), ack_end.alias("final_end"),
                               _lookup(logs.ends, run_part).alias("run_final_end"), multi.alias("multi"),
                               *[cond.alias("is_" + name) for name, cond in flags.items()])
    return result


# What `multi_partition_checks` reads of the by-value rows of values seen in two partitions or more.
MULTI_COLUMNS = ("value", "outcome", "ack_pos", "inv_index", "comp_index", "read_index", "is_lost-write")


def multi_partition_checks(checked: dict, frames: Frames, logs: FinalLogs,
                           values=None) -> dict[str, tuple[int, list[dict]]]:
    """lost-acked and dirty-read, exactly, for the values seen in two partitions
    or more (of the final log, or of the run's reads): per (value, partition).
    `values`: those values' by-value rows (MULTI_COLUMNS) as a DataFrame;
    default, taken from `checked`'s frame (`value_checks`'). Where no
    value is (`checked["multi"]` 0), nothing is read."""
    F = _F()
    found = {"lost-acked": (0, []), "dirty-read": (0, [])}
    if not checked["multi"]:
        return found
    if values is None:
        values = checked["frame"].where(F.col("multi")).select(*MULTI_COLUMNS)
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
EXAMPLE_ORDER = {"lost-write": "comp_index", "lost-acked": "comp_index", "dirty-read": "run_index",
                 "unseen": "comp_index", "aborted-read": "read_index", "duplicate": "first_seen"}
# The example lists that also give the `missing` sample (MISSING_SAMPLE
# rows), and those taken whole (the values at the inconsistent positions);
# every other list takes MAX_EXAMPLES rows.
SAMPLED_LISTS = ("lost-write", "lost-acked")
WHOLE_LISTS = ("acked-at", "read-at")


def example_limit(name: str) -> int | None:
    """How many rows example list `name` takes (None: all)."""
    return None if name in WHOLE_LISTS else MISSING_SAMPLE if name in SAMPLED_LISTS else MAX_EXAMPLES


EXAMPLE_COLUMNS = ("value", "inv_index", "comp_index", "ack_pos", "read_index", "outcome", "max_read_offset",
                   "final_end", "run_part_min", "run_index", "run_final_end", "first_pos", "last_pos")


def examples(checked: dict, frames: Frames, multi: dict[str, tuple[int, list[dict]]], inconsistent_at: list[int],
             events_at: Callable[[set[int], tuple[str, ...]], dict[int, dict]]
             ) -> tuple[dict[str, list[dict]], dict[str, list[list[int]]], list[dict]]:
    """Every example results.json shows, gathered in a few jobs whatever was found:

    - one over the by-value frame: the first MAX_EXAMPLES values of each value
      anomaly (MISSING_SAMPLE of lost-write and lost-acked, which also fill
      `missing`), and the values acknowledged or read at the inconsistent
      positions (`example_rows`);
    - one over the reads of the duplicated values (`Frames.dup_reads`, kept),
      if any, for the reads of those values and positions (`examples_from`).

    Returns what `examples_from` returns.
    """
    F = _F()

    def dup_reads(values: list[int], positions: list[int]) -> list[tuple[int, int, int, int]]:
        if frames.dup_reads is None:
            return []
        cond = F.lit(False)
        if values:
            cond = cond | F.col("value").isin(values)
        if positions:
            cond = cond | pos_of(F.col("partition"), F.col("offset")).isin(positions)
        return [(r["value"], r["partition"], r["offset"], r["index"]) for r in frames.dup_reads.where(cond).collect()]

    return examples_from(example_rows(checked, inconsistent_at), dup_reads, multi, inconsistent_at, events_at)


def example_rows(checked: dict, inconsistent_at: list[int]) -> dict[str, list]:
    """The by-value rows each example list shows, in one scan of the frame:
    {list: its first rows (by its `EXAMPLE_ORDER` key, then value), each with
    `EXAMPLE_COLUMNS` and that key as `k`}; "acked-at" and "read-at": every
    value acknowledged, or read at one position, at an inconsistent one."""
    from pyspark.sql import Window

    F = _F()
    frame = checked["frame"].select("*", F.least("read_index", "comp_index").alias("first_seen"))
    # Each row once per example list it may join (its anomalies, an
    # acknowledgement at an inconsistent position, its reads there), then the
    # first of each list by a window over those few rows.
    wanted = [F.when(F.col("is_" + name), F.struct(F.lit(name).alias("name"), F.col(key).alias("k")))
              for name, key in EXAMPLE_ORDER.items() if checked[name]]
    if inconsistent_at:
        wanted.append(F.when((F.col("outcome") == OK) & F.col("ack_pos").isin(inconsistent_at),
                             F.struct(F.lit("acked-at").alias("name"), F.lit(None).cast("long").alias("k"))))
        wanted.append(F.when(F.col("read_index").isNotNull() & ~at_two_positions()
                             & F.col("first_pos").isin(inconsistent_at),
                             F.struct(F.lit("read-at").alias("name"), F.lit(None).cast("long").alias("k"))))
    rows: dict[str, list] = {}
    if wanted:
        any_ = F.lit(False)
        for w in wanted:
            any_ = any_ | w.isNotNull()
        lists = frame.where(any_).select(F.explode(F.filter(F.array(*wanted), lambda x: x.isNotNull())).alias("e"),
                                         *EXAMPLE_COLUMNS).select("e.name", "e.k", *EXAMPLE_COLUMNS)
        limit = (F.when(F.col("name").isin(*SAMPLED_LISTS), MISSING_SAMPLE)
                 .when(F.col("name").isin(*WHOLE_LISTS), F.lit(None)).otherwise(MAX_EXAMPLES))
        rank = F.row_number().over(Window.partitionBy("name").orderBy("k", "value"))
        for r in lists.select("*", rank.alias("rank")).where(limit.isNull() | (F.col("rank") <= limit)).collect():
            rows.setdefault(r["name"], []).append(r)
        for name, found in rows.items():
            found.sort(key=lambda r: (r["k"] if r["k"] is not None else -1, r["value"]))
    return rows


def examples_from(rows: dict[str, list], dup_reads: Callable[[list[int], list[int]], list[tuple[int, int, int, int]]],
                  multi: dict[str, tuple[int, list[dict]]], inconsistent_at: list[int],
                  events_at: Callable[[set[int], tuple[str, ...]], dict[int, dict]]
                  ) -> tuple[dict[str, list[dict]], dict[str, list[list[int]]], list[dict]]:
    """The examples from their by-value rows (`example_rows`, or the
    driver's: rows that index like dicts, None for null), whoever found them:

    - `dup_reads(values, positions)`: the first read (value, partition,
      offset, index) of each position of the duplicated values among
      `values`, and of the duplicated values read at `positions`. A value at
      one position was read only there, first at its `read_index`, so its
      row has its reads, and the history's records are not read again;
    - `events_at(indexes, columns)` reads the events the examples name, for
      their errors and times, by index from the history's files
      (`core.history.parquet.events_at`).

    Returns the value anomalies' examples (`multi`'s merged in), the
    `missing` sample, and the inconsistent-offset examples (positions
    `inconsistent_at`, in order).
    """
    # The reads of the values whose examples list positions, and of the
    # inconsistent positions: (value, partition, offset) -> the first read's
    # index. A value read at one position only: its first read, from its
    # row; a duplicated value's, from `dup_reads`.
    listed = [r for name in ("aborted-read", "duplicate") for r in rows.get(name, [])[:MAX_EXAMPLES]]
    reads: dict[tuple[int, int, int], int] = {}
    for r in listed + rows.get("read-at", []):
        if r["read_index"] is not None and r["first_pos"] == r["last_pos"]:
            reads[(r["value"], r["first_pos"] >> POS_BITS, r["first_pos"] & MAX_OFFSET)] = r["read_index"]
    values = [r["value"] for r in listed if r["first_pos"] != r["last_pos"]]
    if values or inconsistent_at:
        for value, partition, offset, index in dup_reads(values, inconsistent_at):
            reads[(value, partition, offset)] = index

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
    fields = events_at(indexes, ("error", "time")) if indexes else {}
    for e in out.get("aborted-read", []):
        e["error"] = fields[e["fail_index"]]["error"] if e["fail_index"] in fields else None
    for e in timed:
        e["read_time"] = fields[e["read_index"]]["time"] if e["read_index"] in fields else None

    missing = {}
    for name in SAMPLED_LISTS:
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


def add_duplicate_reads(frames: Frames, duplicates: int) -> None:
    """`Frames.dup_reads` (kept), if `duplicates` values have two positions or
    more: every read of them, by (value, partition, offset), with the first
    read's index. One scan of the history's records, which `by_position`
    (their positions) and `examples` (their reads) share."""
    F = _F()
    if not duplicates:
        return
    dup_values = frames.by_value.where(at_two_positions()).select("value")
    # `duplicates` values: few beside the reads, so they go to every task rather than the reads to a shuffle.
    frames.dup_reads = keep(frames.reads.join(broadcast_if_small(dup_values, duplicates), "value", "left_semi")
                            .groupBy("value", "partition", "offset").agg(F.min("index").alias("index")))
    frames.kept.append(frames.dup_reads)


def by_position(frames: Frames, duplicates: int):
    """The distinct values at each position: value -> positions, turned around.

    A value at one position contributes that position; only duplicated
    values (rare) need their reads (`add_duplicate_reads`) for every position.
    """
    F = _F()
    v = frames.by_value
    single = v.where(F.col("first_pos").isNotNull() & ~at_two_positions()).select(
        F.col("first_pos").alias("pos"), "value")
    if not duplicates:
        return single.groupBy("pos").agg(F.count("*").alias("n_values"), F.min("value").alias("some_value"))
    dup_acks = v.where(at_two_positions() & F.col("ack_pos").isNotNull()).select(
        F.col("ack_pos").alias("pos"), "value")
    dup_reads = frames.dup_reads.select(pos_of(F.col("partition"), F.col("offset")).alias("pos"), "value")
    positions = single.unionByName(dup_acks.unionByName(dup_reads).distinct())
    return positions.groupBy("pos").agg(F.count("*").alias("n_values"), F.min("value").alias("some_value"))


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
