"""Check one history: load it, compute every anomaly and statistic, decide.

`check_history` is the checker as a function from a history to results
(the dict written as results.json, shape in docs/history.md).
"""

from __future__ import annotations

import gc
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from checkers import anomalies as an
from checkers import driver_value_checks, liveness, node_logs, offsets, order, stats
from checkers.driver_by_position import Positions
from checkers.driver_by_value import ValueRows
from checkers.load import events_ahead, file_uri, load, prepare, scratch_for
from checkers.read_runs import SPARK_SCHEMA as RUNS_SCHEMA, RunsWriter
from checkers.reading import HistoryReader
from checkers.spark import QUICK_START_JAVA, Beside, SessionStart, default_master, keep, release
from core.history.files import load_run_json, resolve
from core.history.format import FINAL_READS
from core.history.jsonl import iter_jsonl
from core.history.parquet import events_at, write_parquet
from core.errors import UserError

log = logging.getLogger(__name__)


# Histories up to this many events have their by-value and by-position
# frames made on the driver (checkers/driver_by_value.py,
# checkers/driver_by_position.py), where a scratch folder lets Spark's
# executors read them. They raise the Python side's peak at 10M events from
# 1.3 to 2.1-2.8 GiB (up to about 160 bytes an event more, liveness measured
# beside them): this bound keeps it within about 3.5 GB, and larger
# histories (100M: 8 GB in all) are Spark's
# (docs/benchmarks.md). `Options.driver_frames_up_to` (--driver-frames-up-to) moves it.
DRIVER_FRAMES_EVENTS = 12_000_000


@dataclass
class Options:
    allow: set[str] = field(default_factory=set)
    idempotent: bool | None = None  # None: learn it from run.json
    master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    # Where a JSONL history's Parquet conversion goes (--scratch): a folder every
    # executor reads. None: beside the history on a cluster, the temporary folder
    # on a local master (checkers.load.scratch_for).
    scratch: str | Path | None = None
    # Histories up to this many events (as known before the read) have their
    # by-value and by-position frames made on the driver; 0: never.
    driver_frames_up_to: int = DRIVER_FRAMES_EVENTS
    # Liveness (checkers/liveness.py): each fault's start action -> its stop action
    # (the fault registry's pairs; checkers do not import nemesis), and the HANG limit.
    fault_ends: dict[str, str] = field(default_factory=dict)
    hang_s: float = liveness.HANG_S


def promises(run: dict, opts: Options) -> dict:
    """What the run's configuration promises, and where we learned it."""
    if opts.idempotent:
        return {"idempotent": True, "source": "--idempotent"}
    producer = run.get("producer") if isinstance(run.get("producer"), dict) else {}
    value = producer.get("enable.idempotence")
    if value in (True, "true", "True", 1):
        return {"idempotent": True, "source": "run.json"}
    return {"idempotent": False, "source": "run.json" if run else "none (a bare history promises at-least-once)"}


def check_history(path: str | Path, opts: Options | None = None, spark=None) -> dict:
    opts = opts or Options()
    unknown = sorted(opts.allow - set(an.ANOMALIES))
    if unknown:
        raise UserError(f"--allow {unknown[0]}: not an anomaly (known: {', '.join(an.ANOMALIES)})")
    source = resolve(path)
    run = load_run_json(source.run_json)
    promised = promises(run, opts)
    started = time.monotonic()
    ahead = events_ahead(source)  # before the read: Parquet's footers, JSONL's size
    master = spark.sparkContext.master if spark is not None else (opts.master or default_master())
    with _old_objects_frozen(), scratch_for(source, master, opts.scratch) as scratch:
        starting = None
        if spark is None:
            # A session for this one check, once the options are known good,
            # sized by the history's events (from Parquet's footers, guessed
            # from JSONL's size): its JVM starts while the driver reads the
            # history (docs/benchmarks.md).
            small = ahead <= SMALL_EVENTS
            starting = SessionStart(master=opts.master, conf=opts.spark_conf,
                                    java_options=QUICK_START_JAVA if small else "")
        try:
            driver = _read_on_driver(source, scratch, opts, ahead)
        except BaseException:
            if starting is not None:
                starting.abandon()  # a refused history: no session left behind
            raise
        if spark is None:
            spark = starting.result()
        prepared, folded = driver.prepared, driver.folded
        with _sized(spark, prepared.events, opts.spark_conf):
            results = offsets.unfold(_analyse(spark, driver, promised, opts), folded)
        if folded:
            results["warnings"].append(offsets.warning(folded))
        results["liveness"] = driver.liveness.result()
        results["stages"] = {"validate": driver.seconds["validate"], **results["stages"],
                             "send-order": driver.seconds["send-order"], "liveness": driver.seconds["liveness"]}
        results["warnings"] = prepared.warnings + results.get("warnings", [])
    results["checker"] = {"engine": "spark", "master": spark.sparkContext.master,
                          "seconds": round(time.monotonic() - started, 3),
                          "stages": results.pop("stages"),
                          "history": str(source.files[0] if len(source.files) == 1 else source.root),
                          "format": source.format, "events": prepared.events}
    results["promises"] = promised
    if (source.root / "nodes").is_dir():
        # A run folder: its brokers' logs are part of the evidence (errors, unexpected exits).
        results["node_logs"] = node_logs.scan(source.root)
        results["warnings"] += node_logs.warnings(results["node_logs"])
    return _ordered(results)


@contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """The objects alive before a check (modules, the Spark session's py4j
    objects: some 200,000) left out of the garbage collector's full passes
    while it runs: each pass walked them all, 0.1 s at a time, two or three
    passes in a 10M-event check (docs/benchmarks.md). Given back after, so
    that garbage among them is still collected."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass
class _DriverRead:
    """What the driver takes from the history before Spark's passes."""

    prepared: object  # load.Prepared
    read: HistoryReader
    folded: dict[int, int]  # true offset -> the checker's (checkers/offsets.py)
    sends_back: tuple[int, list[dict]]  # nonmonotonic-send (checkers/send_order.py)
    faults: list[dict]  # the nemesis's events
    liveness: Beside  # its result(): results.json's liveness
    latency: Beside  # its result(): `stats.latency`'s, made once liveness is
    seconds: dict[str, float]  # validate, send-order, liveness (once it is measured)
    scratch: Path | None  # a folder Spark's executors read, if any


def _read_on_driver(source, scratch: Path | None, opts: Options, ahead: int) -> _DriverRead:
    """Validate the history and read it once on the driver (`checkers/reading.py`):
    bad input fails fast, with line numbers. The read runs and, for a history
    the driver's memory holds, the by-value rows are gathered on the way, where
    the scratch folder lets Spark's executors read them (checkers/read_runs.py,
    checkers/driver_by_value.py); `ahead` is the history's events as known
    before the read (`load.events_ahead`)."""
    read = HistoryReader()
    if scratch is not None:
        in_memory = ahead <= opts.driver_frames_up_to
        read.runs = RunsWriter(scratch / "runs.parquet", keep_order=in_memory)
        if in_memory:
            read.values = ValueRows()
    seconds = {}
    t = time.monotonic()
    try:
        prepared = prepare(source, scratch, read.absorb, digest=read.digest)
    finally:
        if read.runs is not None:
            read.runs.close()
    seconds["validate"] = round(time.monotonic() - t, 3)
    folded = offsets.folding(prepared.to_fold)
    if folded:
        # Made with the true offsets: Spark makes them with the folded ones.
        read.runs = read.values = None
    # Send order was settled while the history was read (the driver
    # pairs every send): what is left is the sends never answered.
    t = time.monotonic()
    sends_back = read.send_order.result(folded)
    seconds["send-order"] = round(time.monotonic() - t, 3)
    # Liveness works on sorted arrays on the driver, not in Spark:
    # searchsorted beats a shuffle here (docs/benchmarks.md). Where Spark
    # makes the frames, measured before its passes, so that its columns
    # (gigabytes for a large history) are let go before the JVM's memory
    # grows, not beside it; where the driver makes them, in a thread beside
    # them (at 10M events 0.3 s sooner, docs/benchmarks.md).
    faults = stats.faults(read.few)  # the nemesis's events: liveness's and the results' stats
    columns = read.columns()

    def measured() -> dict:
        t = time.monotonic()
        live = liveness.measure(columns, faults, opts.fault_ends, opts.hang_s)
        seconds["liveness"] = round(time.monotonic() - t, 3)
        return live

    # Neither runs a Spark job; the session may still be starting (SessionStart).
    live = Beside(measured, name="liveness", spark_jobs=False)
    if read.values is None:
        live.wait()

    def latency() -> stats.Latency:
        # At once, not after liveness: the check's end waited for them there,
        # where their Python (0.05 s at 10M events) costs less beside it.
        return stats.latency(read.histogram_rows())

    return _DriverRead(prepared, read, folded, sends_back, faults, live,
                       Beside(latency, name="latency", spark_jobs=False), seconds, scratch)


# Histories up to this many events are "small": every shuffle goes to one
# partition and adaptive execution is off, since what such a check pays for
# is the number of Spark jobs, not their work (adaptive execution runs each
# shuffle's map side as a job of its own and re-plans after it).
SMALL_EVENTS = 300_000
# Larger ones get about this many events per shuffle partition (at least two
# per core), adaptive execution coalescing what turns out small. At one per
# million, a 10M-event check on 2 cores ran its large shuffles as 3 or 5
# tasks after coalescing, the last wave on one core: 4 partitions (two full
# waves) took 2 to 7 s less (docs/benchmarks.md).
EVENTS_PER_PARTITION = 2_500_000


def sized_conf(events: int, cores: int) -> dict[str, str]:
    """The Spark SQL settings for checking a history of `events` events on `cores` cores."""
    if events <= SMALL_EVENTS:
        # Without common subexpressions taken out, a plan compiles to the same
        # code whatever the history's numbers (the order they are taken out in
        # follows their hashes): a check of another history finds it compiled.
        return {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false",
                "spark.sql.subexpressionElimination.enabled": "false"}
    return {"spark.sql.shuffle.partitions": str(max(2 * cores, -(-events // EVENTS_PER_PARTITION))),
            "spark.sql.adaptive.enabled": "true", "spark.sql.subexpressionElimination.enabled": "true"}


@contextmanager
def _sized(spark, events: int, user_conf: dict[str, str]):
    """`sized_conf` for one check, then the session's own settings back (a
    session may check many histories: tests, `harness nightly`). What the
    user set with --spark-conf wins."""
    conf = {k: v for k, v in sized_conf(events, spark.sparkContext.defaultParallelism).items()
            if k not in user_conf}
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


class _Stages:
    """Wall time of each stage of an analysis, for benchmarks and -v."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._t = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self._t, 3)
        log.debug("stage %s: %.2f s", name, now - self._t)
        self._t = now


def _together(*frames) -> list[list[dict]]:
    """The rows of several small frames (aggregates, a few events), collected
    in one Spark job: each row as JSON, tagged with its frame. One job rather
    than several also runs the frames' independent stages side by side."""
    from pyspark.sql import functions as F

    tagged = [frame.select(F.lit(i).alias("tag"), F.to_json(F.struct(*[F.col(c) for c in frame.columns]),
                                                          {"ignoreNullFields": "false"}).alias("row"))
              for i, frame in enumerate(frames)]
    union = tagged[0]
    for t in tagged[1:]:
        union = union.unionByName(t)
    out: list[list[dict]] = [[] for _ in frames]
    for r in union.collect():
        row = orjson.loads(r["row"])
        out[r["tag"]].append({c: row.get(c) for c in frames[r["tag"]].columns})
    return out


def _order_steps(runs, restarts: list) -> tuple:
    """Read order's odd steps (`order.order_steps`), and the first
    STEPS_ON_DRIVER + 1 of them collected."""
    steps = order.order_steps(runs, restarts)
    return steps, steps.limit(order.STEPS_ON_DRIVER + 1).collect()


def _driver_order_steps(spark, runs: RunsWriter, restarts: list) -> tuple:
    """`_order_steps` of the runs the driver made: found by the driver
    (`order.driver_steps`) where it kept their columns and they are few
    enough, with no frame; else by Spark's pass over the runs' file."""
    columns = runs.order_columns()
    rows = order.driver_steps(columns, restarts) if columns is not None else None
    if rows is not None:
        runs.let_go()
        return None, rows
    del columns
    return _order_steps(spark.read.schema(RUNS_SCHEMA).parquet(file_uri(runs.file())), restarts)


def _driver_positions(spark, scratch: Path, positions: Positions) -> tuple:
    """What Spark's by-position pass gives, from the driver's positions:
    the known positions for read order (`order.Known`), how many positions
    hold two values or more and the first of them."""
    def frame():  # only for a history with too many odd read steps to classify on the driver
        path = positions.write(scratch / "by_position.parquet")
        return spark.read.schema("pos long").parquet(file_uri(path))

    known = order.Known(frame, positions.first_known)
    return known, len(positions.inconsistent), positions.inconsistent[:an.MAX_EXAMPLES].tolist()


def _driver_value_checks(spark, scratch: Path, columns: dict, frames: Callable[[], an.Frames],
                         max_read: dict[int, int], logs: an.FinalLogs) -> tuple[dict, dict]:
    """The by-value checks over the driver's frame (checkers/driver_value_checks.py),
    and the values seen in two partitions or more settled by Spark
    (`frames()`: the history's frames, loaded for them only)."""
    checked = driver_value_checks.value_checks(columns, max_read, logs)
    if not checked["multi"]:
        return checked, an.multi_partition_checks(checked, None, logs)
    path = driver_value_checks.write_multi_rows(checked, scratch / "multi_values.parquet")
    return checked, an.multi_partition_checks(checked, frames(), logs, spark.read.parquet(file_uri(path)))


def _analyse(spark, driver: _DriverRead, promised: dict, opts: Options) -> dict:
    # A history the driver's memory holds (`read.values`, `read.runs`) is
    # checked without a Spark job, but where read order has too many odd
    # steps to classify on the driver, or values are seen in two partitions
    # (docs/checker.md, "Passes"). Otherwise, four Spark jobs for a history
    # without anomalies; what the driver gathered while it validated the
    # history (`read`: the nemesis's events and the final reads, every
    # operation paired, latency histograms) takes none: (1) the read runs,
    # kept, and (2) their totals (highest offset read per partition, records
    # read), both only where Spark makes the runs, not the driver; (3) the
    # by-value aggregation, kept, and every by-value anomaly and count in
    # one aggregation over it; (4) the by-position aggregation (kept:
    # poll-skip joins it again), and read order from one window pass, where
    # the driver does not find its steps in the runs it made (send order,
    # the driver's `sends_back`). Examples and skipped offsets, only where
    # anomalies were found, take a few more.
    read, folded, faults, scratch = driver.read, driver.folded, driver.faults, driver.scratch
    stage = _Stages()
    kept: list = []  # what this keeps; the frames' builders list theirs in frames.kept
    built: list = []  # the history's frames, once some pass needs them

    def frames() -> an.Frames:
        """The history's frames (`anomalies.build`), loaded when a pass in
        Spark first needs them: a check whose passes are all the driver's
        lists no file in Spark (about 0.5 s at 10M events)."""
        if not built:
            built.append(an.build(offsets.fold(load(spark, driver.prepared), folded), logs))
        return built[0]

    # Read order needs only the runs: its steps are found in a thread beside
    # the by-value and by-position passes (Spark's window pass on the cores
    # their one-task stages leave idle, docs/benchmarks.md); begun before
    # the history is loaded where the driver made the runs.
    steps = by_position = None
    try:
        if read.runs is not None:  # made by the driver as it read the history
            steps = Beside(lambda: _driver_order_steps(spark, read.runs, read.restarts))
        logs = an.final_logs(read.folded_few(folded))
        invokes = {f: n for f, n in read.invokes.items() if f != "send"}
        stage.done("load")
        if read.runs is not None:
            max_read, records_read = read.runs.totals.highest, sum(read.runs.totals.records.values())
        else:
            runs = keep(an.read_runs(frames().reads))
            kept.append(runs)
            per_partition, split = _together(*an.run_totals(runs))
            if split[0]["polls"]:
                runs = keep(an.exact_runs(runs, frames().reads, split[0]["polls"]))
                kept.append(runs)
            max_read = {r["partition"]: r["m"] for r in per_partition}
            records_read = sum(r["n"] for r in per_partition)
            steps = Beside(lambda: _order_steps(runs, read.restarts))
        stage.done("read-runs")
        if read.values is not None:  # gathered by the driver as it read the history
            columns = read.values.aggregate(logs)
            # The by-position facts (begun by `aggregate`) and the duplicated
            # values' reads, waited for in a thread beside the checks.
            by_position = Beside(read.values.by_position, name="by-position")
            checked, multi = _driver_value_checks(spark, scratch, columns, frames, max_read, logs)
            del columns  # let go by the checks, but the columns the examples read
        else:
            an.add_by_value(frames(), logs)
            checked = an.value_checks(frames(), max_read, logs)
            multi = an.multi_partition_checks(checked, frames(), logs)
        stage.done("by-value")
        if by_position is not None:  # the driver's too (checkers/driver_by_position.py)
            known, n_inconsistent, inconsistent_at = _driver_positions(spark, scratch, by_position.result())
        else:
            an.add_duplicate_reads(frames(), checked["duplicate"])
            by_pos = keep(an.by_position(frames(), checked["duplicate"]))
            kept.append(by_pos)
            n_inconsistent, inconsistent_at = an.inconsistent_positions(
                by_pos, an.inconsistent_first(by_pos).collect())
            known = order.Known(lambda: by_pos)
        all_steps, first_steps = steps.result()
        stage.done("by-position-order")
        found = order.order_checks(all_steps, first_steps, known)
        found["nonmonotonic-send"] = driver.sends_back
        lat = driver.latency.result()
        stage.done("skips")

        def events_of(indexes, columns):
            return events_at(driver.prepared.files, indexes, columns)

        if read.values is not None:
            examples, missing, inconsistent = an.examples_from(
                driver_value_checks.example_rows(checked, inconsistent_at),
                driver_value_checks.dup_reads_of(read.values.duplicate_reads), multi, inconsistent_at, events_of)
        else:
            examples, missing, inconsistent = an.examples(checked, frames(), multi, inconsistent_at, events_of)
        found.update({name: (int(checked[name]) + multi.get(name, (0, []))[0], examples.get(name, []))
                      for name in ("lost-write", "lost-acked", "dirty-read", "unseen", "aborted-read", "duplicate")})
        found["inconsistent-offset"] = (n_inconsistent, inconsistent)
        stage.done("examples")
    finally:
        for beside in (steps, by_position):
            if beside is not None:
                beside.wait()  # steps' job reads the runs, released below
        for frame in kept + (built[0].kept if built else []):
            release(frame)
    # Events by f and type: invocations counted while pairing (sends by value),
    # completions from the latency histograms.
    totals: dict[str, dict[str, int]] = {f: {"invoke": n} for f, n in invokes.items()}
    if checked["send_invokes"]:
        totals["send"] = {"invoke": int(checked["send_invokes"])}
    for f, by_type in lat.completions.items():
        totals.setdefault(f, {}).update(by_type)
    throughput = lat.throughput
    overall, per_second = lat.overall, lat.per_second
    # Invocations left without a completion, by f (sends are counted by value).
    unfinished_other = {f: n for f, t in totals.items() if f != "send"
                        and (n := t.get("invoke", 0) - sum(v for k, v in t.items() if k != "invoke")) > 0}

    anomalies = {}
    for name in an.ANOMALIES:
        count, examples = found[name]
        is_error = name in an.ALWAYS_ERRORS or (name in an.IDEMPOTENCE_ERRORS and promised["idempotent"])
        entry = {"count": count, "error": bool(is_error and count > 0 and name not in opts.allow),
                 "examples": examples}
        if name in opts.allow:
            entry["allowed"] = True
        anomalies[name] = entry

    def outcomes(f: str, extra_info: int = 0) -> dict:
        t = totals.get(f, {})
        out = {k: int(t.get(k, 0)) for k in ("ok", "fail", "info")}
        out["info"] += extra_info
        return out

    sends = {"ok": int(checked["ok"]), "fail": int(checked["fail"]),
             "info": int(checked["info"]) + int(checked["unfinished"])}
    counts = {
        "events": sum(sum(t.values()) for t in totals.values()) + len(faults),
        "ops": sum(t.get("invoke", 0) for t in totals.values()),
        "sends": sends,
        "polls": outcomes("poll", unfinished_other.get("poll", 0)),
        "records_read": int(records_read),
        "unfinished": {"send": int(checked["unfinished"]), **unfinished_other},
    }
    counts["other_ops"] = {f: outcomes(f, unfinished_other.get(f, 0))
                           for f in ("assign", "seek", "commit", "crash", FINAL_READS) if f in totals}
    warnings = logs.warnings()
    if checked["unknown_values"]:
        warnings.append(f"{checked['unknown_values']} values were read that no send in the history wrote")
    return {
        "valid": not any(a["error"] for a in anomalies.values()),
        "counts": counts,
        "anomalies": anomalies,
        "stats": {
            "info_sends": {"read": int(checked["info_read"]), "unread": int(checked["info_unread"])},
            "reads_of_unknown_values": int(checked["unknown_values"]),
            # Which partitions' final logs were known, and where each ends.
            "final_logs": {"checked": logs.present, "ends": {str(p): e for p, e in sorted(logs.ends.items())},
                           "not_reached": logs.not_reached()},
            "throughput": throughput,
            "latency": overall,
            "latency_by_second": per_second,
            "faults": faults,
        },
        "missing": missing,
        "stages": stage.seconds,
        "warnings": warnings,
    }


# A history being written primes instead of the built-in one once it has this
# many complete lines; at most its first PRIME_BYTES are checked (a prefix of a
# history is a history).
PRIME_MIN_LINES = 1_000
PRIME_BYTES = 16 << 20


class PrimingStopped(Exception):
    """A prime given up because a real check wants the session (`prime`'s `stop`)."""


def prime(spark, scratch: str | Path | None = None, sample: str | Path | None = None,
          stop: threading.Event | None = None) -> dict:
    """Check a history nobody waits for, so that this JVM has compiled the
    checker's plans (Spark generates and compiles code for each the first time
    it runs) and its JIT has warmed up on them before a real check waits:
    `harness run`'s check service calls it while the workload runs.

    The history is a tiny built-in one with every kind of anomaly, or, given
    `sample` (a JSONL history being written: the run's own) with at least
    PRIME_MIN_LINES complete lines, those lines: a history of the real one's
    shape and nearly its size, which warms the JIT on loops the tiny one runs
    a few times only (docs/benchmarks.md). Its conversion to Parquet, Python
    that no Spark job cancel reaches, raises PrimingStopped soon after `stop`
    is set. Written in `scratch` (default: the temporary folder, which only
    executors on this machine read; on a cluster of several hosts, name a
    shared one)."""
    with tempfile.TemporaryDirectory(prefix="harness-prime-", dir=scratch) as folder:
        path = Path(folder) / "history.parquet"
        lines = _complete_lines(Path(sample), PRIME_BYTES) if sample is not None else b""
        if lines.count(b"\n") >= PRIME_MIN_LINES:
            so_far = Path(folder) / "history.jsonl"
            so_far.write_bytes(lines)
            write_parquet(_unless_stopped(iter_jsonl(so_far), stop), path)
        else:
            write_parquet(_prime_events(), path)
        return check_history(path, Options(), spark=spark)


def _unless_stopped(events: Iterator[dict], stop: threading.Event | None) -> Iterator[dict]:
    for n, event in enumerate(events):
        if n % 1000 == 0 and stop is not None and stop.is_set():
            raise PrimingStopped("a check wants the session")
        yield event


def _complete_lines(path: Path, limit: int) -> bytes:
    """The first complete lines of a file being appended to, at most `limit`
    bytes of them (nothing if it cannot be read yet)."""
    try:
        with open(path, "rb") as f:
            head = f.read(limit)
    except OSError:
        return b""
    return head[:head.rfind(b"\n") + 1]


def _prime_events() -> list[dict]:
    events: list[dict] = []

    def add(process, type_, f, **fields) -> None:
        events.append({"index": len(events), "time": len(events) * 1_000_000, "process": process,
                       "type": type_, "f": f, **fields})

    def send(process, value, partition, offset, outcome="ok") -> None:
        add(process, "invoke", "send", key=0, value=value)
        if outcome == "ok":
            add(process, "ok", "send", value=value, partition=partition, offset=offset)
        else:
            add(process, outcome, "send", value=value, error="SOME_ERROR")

    def poll(process, *records) -> None:
        add(process, "invoke", "poll")
        add(process, "ok", "poll", records=[{"partition": p, "offset": o, "key": 0, "value": v} for p, o, v in records])

    add("nemesis", "invoke", "start-partition", value={"grudge": {"n1": ["n2"]}})
    add("nemesis", "ok", "start-partition", value={"grudge": {"n1": ["n2"]}})
    for v in range(6):
        send(0, v, 0, v)
    send(0, 6, 1, 1)
    send(0, 7, 1, 0)  # nonmonotonic-send
    send(0, 8, 0, 2000)
    send(0, 9, 1, 5, outcome="fail")
    send(0, 10, 1, 5, outcome="info")
    send(0, 11, 2, 0)  # unseen: nothing of partition 2 is read, and its final log is not known
    send(0, 12, 1, 4, outcome="info")
    add("nemesis", "invoke", "stop-partition")
    add("nemesis", "ok", "stop-partition")
    add(1, "invoke", "assign", partitions=[0, 1])
    add(1, "ok", "assign", partitions=[0, 1])
    poll(1, (0, 0, 0), (0, 1, 1), (0, 3, 3))  # poll-skip, and 2 is a lost write
    poll(1, (0, 1, 1), (1, 0, 7), (1, 1, 6), (1, 2, 9), (1, 4, 12))  # nonmonotonic-poll, aborted-read, dirty-read
    poll(1, (0, 4, 0), (0, 2000, 8))  # a duplicate, an inconsistent offset, a wide gap
    add(1, "invoke", "seek", partition=1, offset=0)
    add(1, "ok", "seek", partition=1, offset=0)
    add(1, "invoke", "crash")
    add(1, "ok", "crash")
    add(2, "invoke", "final-reads", partitions=[0, 1])
    poll(2, (0, 0, 0), (1, 0, 7), (1, 1, 6), (1, 3, 10))
    add(2, "ok", "final-reads", ends=[{"partition": 0, "offset": 1}, {"partition": 1, "offset": 4}])
    return events


def _ordered(results: dict) -> dict:
    keys = ("valid", "checker", "promises", "counts", "anomalies", "missing", "liveness", "stats", "node_logs",
            "warnings")
    return {k: results[k] for k in keys if k in results}
