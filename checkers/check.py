"""Check one history: read it, run the kernel, decide.

`check_history` is the checker as a function from a history to results
(the dict written as results.json, shape in docs/history.md):

1. the driver validates the history, reading it once in batches, and folds
   what spans it as it goes (checkers/history_read.py, checkers/folds/);
2. an engine runs the kernel (checkers/kernel/) on shards of it: Spark's
   (default; checkers/engines/spark.py) or the in-process one
   (`--engine local`, checkers/engines/local.py); liveness is measured
   beside it on the driver (checkers/liveness.py);
3. the shards' results are merged, the examples' events looked up, and
   each anomaly of the registry (checkers/registry.py) counted, with
   whether it is an error for what the run promised.
"""

from __future__ import annotations

import gc
import gzip
import logging
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from checkers import group_balance, liveness, node_logs, offsets, registry, stats
from checkers.engines import local as local_engine
from checkers.engines import spark as spark_engine
from checkers.folds import Groups, Transactions
from checkers.folds import liveness as liveness_facts
from checkers.history_read import HistoryRead, give_back_read_memory
from checkers.kernel import rows as r
from checkers.kernel.extract import extract
from checkers.kernel.facts import ranges
from checkers.kernel import series
from checkers.kernel.stages import Found, merge, problem_message
from checkers.kernel.transactions import Spans
from checkers.load import events_ahead, prepare, scratch_for
from checkers.spark import QUICK_START_JAVA, Beside, SessionStart, default_master
from core.errors import HistoryError, UserError
from core.history.batches import decode, file_tables
from core.history.dumps import dumps as find_dumps
from core.history.files import load_run_json, resolve
from core.history.format import FINAL_READS, TXN, TYPES
from core.history.jsonl import iter_jsonl
from core.history.parquet import events_at, write_parquet
from core.history.states import read_states

log = logging.getLogger(__name__)

ENGINES = ("spark", "local")


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
    engine: str = "spark"  # ENGINES: Spark's executors run the kernel, or this process does
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
    unknown = sorted(opts.allow - set(registry.NAMES))
    if unknown:
        raise UserError(f"--allow {unknown[0]}: not an anomaly (known: {', '.join(registry.NAMES)})")
    if opts.engine not in ENGINES:
        raise UserError(f"--engine {opts.engine}: expected one of {', '.join(ENGINES)}")
    source = resolve(path)
    run = load_run_json(source.run_json)
    promised = promises(run, opts)
    started = time.monotonic()
    ahead = events_ahead(source)  # before the read: Parquet's footers, JSONL's size
    in_spark = opts.engine == "spark"
    master = (spark.sparkContext.master if spark is not None else (opts.master or default_master())) if in_spark \
        else "local"
    dumps = find_dumps(source.root)
    seconds: dict[str, float] = {}
    with _old_objects_frozen(), scratch_for(source, master, opts.scratch) as scratch:
        starting = None
        if in_spark and spark is None:
            # A session for this one check, once the options are known good: its
            # JVM starts while the driver reads the history.
            starting = SessionStart(master=opts.master, conf=opts.spark_conf,
                                    java_options=QUICK_START_JAVA if ahead <= spark_engine.SMALL_EVENTS else "")
        read = HistoryRead(keep_rows=not in_spark, shards=local_engine.SHARDS)
        read.liveness.keep = ahead <= liveness_facts.HOLD_EVENTS
        t = time.monotonic()
        try:
            prepared = prepare(source, scratch, read.absorb, digest=read.digest)
        except BaseException:
            if starting is not None:
                starting.abandon()  # a refused history: no session left behind
            raise
        seconds["validate"] = round(time.monotonic() - t, 3)
        give_back_read_memory()
        fold = offsets.folding(prepared.to_fold)
        facts = read.facts(fold, sorted(dumps), read_states(source.root / "states.jsonl"))
        faults = read.faults()
        known = read.liveness.known()
        chunks = read.liveness.chunks(known) if read.liveness.keep else \
            liveness_facts.chunks_again(prepared.files, known)

        def measured() -> dict:
            t = time.monotonic()
            live = liveness.measure(chunks, known, faults, opts.fault_ends, opts.hang_s)
            seconds["liveness"] = round(time.monotonic() - t, 3)
            return live

        live = Beside(measured, name="liveness", spark_jobs=False)  # no Spark job: a plain thread
        t = time.monotonic()
        extra = _unfinished_processing(read, prepared.files, fold)
        spans = Spans.of(read.fold(Transactions).spans)
        if in_spark:
            if spark is None:
                spark = starting.result()
            shards = spark_engine.shards_for(prepared.events, spark.sparkContext.defaultParallelism)
            with _sized(spark, opts.spark_conf):
                partials = spark_engine.run(spark, prepared.files, facts, read.names, dumps, fold, extra, shards,
                                            spans)
        else:
            batches = read.rows if not fold else _rows_again(prepared.files, fold, local_engine.SHARDS)
            read.rows = None
            partials = local_engine.run(batches + [extra.split(local_engine.SHARDS)], facts, dumps, fold, spans)
            del batches
        seconds["kernel"] = round(time.monotonic() - t, 3)
        del spans
        found = merge(partials)
        problem = problem_message(found.problems)
        if problem is not None:
            live.wait()
            raise HistoryError(problem)
        t = time.monotonic()
        results = _results(found, read, facts, faults, promised, opts, prepared.files)
        results["liveness"] = {**live.result(), **group_balance.measure(read.few, known.end, read.fold(Groups).last)}
        seconds["results"] = round(time.monotonic() - t, 3)
        results = offsets.unfold(results, fold)
        if fold:
            results["warnings"].append(offsets.warning(fold))
        results["warnings"] = prepared.warnings + results["warnings"]
    results["checker"] = {"engine": opts.engine, "master": master if not in_spark else spark.sparkContext.master,
                          "seconds": round(time.monotonic() - started, 3), "stages": seconds,
                          "history": str(source.files[0] if len(source.files) == 1 else source.root),
                          "format": source.format, "events": prepared.events,
                          # The transactions' dependency graph as its cycles were searched: its segments, and
                          # the largest one's transactions and edges (checkers/kernel/txn_segments.py).
                          "cycles": {"segments": found.graph.segments,
                                     "largest_segment": {"transactions": found.graph.transactions,
                                                         "edges": found.graph.edges}}}
    results["promises"] = promised
    if (source.root / "nodes").is_dir():
        # A run folder: its brokers' logs are part of the evidence (errors, unexpected exits).
        results["node_logs"] = node_logs.scan(source.root)
        results["warnings"] += node_logs.warnings(results["node_logs"])
    return _ordered(results)


@contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """The objects alive before a check (modules, Numba's, the Spark
    session's py4j objects) left out of the garbage collector's full passes
    while it runs: each pass walked them all, every thread stopped, and a
    large check makes several (docs/decisions.md, "The objects alive before
    a check kept out of the collector"). Given back after, so that garbage
    among them is still collected."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def _sized(spark, user_conf: dict[str, str]):
    """Spark's settings for one check, then the session's own back (a
    session may check many histories: tests, `harness nightly`): adaptive
    execution off (the kernel's shuffles have their sizes; re-planning after
    each would only add jobs). What the user set with --spark-conf wins."""
    conf = {k: v for k, v in {"spark.sql.adaptive.enabled": "false"}.items() if k not in user_conf}
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


READ_COLUMNS = spark_engine.COLUMNS


def _rows_again(files: list[Path], fold: dict[int, int], shards: int) -> list[list[r.Shard]]:
    """The kernel's rows of the history read again, offsets folded (a history
    with offsets to fold is known only once it is read: rare), each batch's
    cut in `shards`."""
    read = HistoryRead()
    return [extract(decode(table, read.names), fold, shards)
            for file in files for table in file_tables(file, READ_COLUMNS)]


def _unfinished_processing(read: HistoryRead, files: list[Path], fold: dict[int, int]) -> r.Shard:
    """The records of `process` invocations never completed (PROCESSED_OPEN
    rows: they may have been handled) or answered fail or info
    (PROCESSED_FAIL, PROCESSED_INFO: the completion need not repeat them).
    Few: about one per crash, read from the history by their indexes."""
    ended, how = read.pairs.process_ended()
    kind_of = {int(i): (r.PROCESSED_FAIL if t == TYPES.index("fail") else r.PROCESSED_INFO)
               for i, t in zip(ended.tolist(), how.tolist())}
    kind_of.update({int(i): r.PROCESSED_OPEN for i in read.unanswered("process").tolist()})
    if not kind_of:
        return r.Shard()
    events = events_at(files, sorted(kind_of), ("process", "records"))
    parts = []
    for index, e in sorted(events.items()):
        records = e["records"] or []
        parts.append(r.Rows.of(kind_of[index], len(records), value=[x["value"] for x in records],
                               pos=r.packed(np.array([x["partition"] for x in records], np.int64),
                                            np.array([fold.get(x["offset"], x["offset"]) for x in records],
                                                     np.int64)),
                               index=np.full(len(records), index), process=np.full(len(records), e["process"])))
    return r.Shard({r.PROCESSED: r.Rows.joined(parts)})


def _results(found: Found, read: HistoryRead, facts, faults: list[dict], promised: dict, opts: Options,
             files: list[Path]) -> dict:
    """results.json (but liveness and the checker's own facts) from the merged results and the folds."""
    examples = _enriched(found, files)
    anomalies = {}
    for name, a in registry.ANOMALIES.items():
        count = found.anomalies[name][0]
        entry = {"count": count, "error": bool(a.is_error(promised["idempotent"]) and count > 0
                                               and name not in opts.allow),
                 "examples": examples[name]}
        if name in opts.allow:
            entry["allowed"] = True
        anomalies[name] = entry
    sends = found.counts
    lat = stats.latency(read.pairs.histograms())
    # Events by f and type: invocations counted while pairing (sends by value),
    # completions from the latency histograms.
    totals: dict[str, dict[str, int]] = {f: {"invoke": n} for f, n in read.pairs.invokes.items() if f != "send"}
    if sends["send_invokes"]:
        totals["send"] = {"invoke": int(sends["send_invokes"])}
    for f, by_type in lat.completions.items():
        totals.setdefault(f, {}).update(by_type)
    # Invocations left without a completion, by f (sends are counted by value).
    unfinished_other = {f: n for f, t in totals.items() if f != "send"
                        and (n := t.get("invoke", 0) - sum(v for k, v in t.items() if k != "invoke")) > 0}

    def outcomes(f: str, extra_info: int = 0) -> dict:
        t = totals.get(f, {})
        out = {k: int(t.get(k, 0)) for k in ("ok", "fail", "info")}
        out["info"] += extra_info
        return out

    counts = {
        "events": sum(sum(t.values()) for t in totals.values()) + len(faults),
        "ops": sum(t.get("invoke", 0) for t in totals.values()),
        "sends": {"ok": sends["ok"], "fail": sends["fail"], "info": sends["info"] + sends["unfinished"]},
        "polls": outcomes("poll", unfinished_other.get("poll", 0)),
        "records_read": int(sum(read.reads.records.values())),
        "unfinished": {"send": sends["unfinished"], **unfinished_other},
    }
    counts["other_ops"] = {f: outcomes(f, unfinished_other.get(f, 0))
                           for f in ("assign", "seek", "commit", "crash", FINAL_READS, "process", "committed", TXN)
                           if f in totals}
    logs = facts.logs
    warnings = logs.warnings() + _unchecked(facts)
    if sends["unknown_values"]:
        warnings.append(f"{sends['unknown_values']} values were read that no send in the history wrote")
    return {
        "valid": not any(a["error"] for a in anomalies.values()),
        "counts": counts,
        "anomalies": anomalies,
        "stats": {
            "info_sends": {"read": sends["info_read"], "unread": sends["info_unread"]},
            "reads_of_unknown_values": sends["unknown_values"],
            # Which partitions' final logs were known, and where each ends.
            "final_logs": {"checked": logs.present, "ends": {str(p): e for p, e in sorted(logs.ends.items())},
                           "not_reached": logs.not_reached()},
            "throughput": lat.throughput,
            "latency": lat.overall,
            "latency_by_second": lat.per_second,
            "faults": faults,
        },
        "missing": found.missing,
        "series": series.as_results(found.series, facts.clock),
        "warnings": warnings,
    }


def _unchecked(facts) -> list[str]:
    """What the checker could not decide, said: the replicas without their
    dumps, and each consumer group's checks it lacks the events for."""
    replicas = registry.REPLICA_DIVERGENCE.name
    loss, twice = registry.CONSUMER_LOSS.name, registry.REDELIVERY.name
    out = []
    if not facts.replica_nodes:
        out.append(f"{replicas} was not checked: no replica dumps (disk/NODE.jsonl.gz) beside the history")
    elif facts.logs.present and facts.logs.not_reached():
        out.append(f"{replicas} of partitions {ranges(facts.logs.not_reached())} was not checked: "
                   "their final logs are not known")
    for g in sorted(set(facts.member.values())):
        name = facts.groups[g]
        if g not in facts.processing:
            out.append(f"{loss} and {twice} of group {name!r} were not checked: its members recorded no "
                       "processing (`process`, or a `txn` committing the group's offsets)")
        elif not any(gg == g for gg, _ in facts.final_committed):
            out.append(f"{loss} of group {name!r} was not checked: no final committed read of it "
                       "(`committed` with `final`)")
    return out


def _enriched(found: Found, files: list[Path]) -> dict[str, list[dict]]:
    """Each anomaly's examples, with the fields its record reads from the
    events they name (`Anomaly.enrich`), in one look-up of those events."""
    wanted: dict[str, set[int]] = {}
    for name, a in registry.ANOMALIES.items():
        for index_field, column, _ in a.enrich:
            for e in found.anomalies[name][1]:
                if e.get(index_field) is not None:
                    wanted.setdefault(column, set()).add(e[index_field])
    fields = events_at(files, set().union(*wanted.values()), tuple(wanted)) if wanted else {}
    out = {}
    for name, a in registry.ANOMALIES.items():
        examples = found.anomalies[name][1]
        for index_field, column, key in a.enrich:
            for e in examples:
                at = e.get(index_field)
                e[key] = fields[at][column] if at in fields else None
        out[name] = examples
    return out


def _ordered(results: dict) -> dict:
    keys = ("valid", "checker", "promises", "counts", "anomalies", "missing", "liveness", "stats", "series",
            "node_logs", "warnings")
    return {k: results[k] for k in keys if k in results}


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
    a few times only (docs/decisions.md, "The check service, claimed when the
    run heals"). Its conversion to Parquet, Python
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
            _prime_dumps(Path(folder))
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
    # A consumer group: 0 committed past without being handled (consumer-loss), 1 handled
    # twice (redelivery), an acknowledged commit a later read does not return (lost-commit).
    add(3, "invoke", "assign", partitions=[0], group="g1", generation=1)
    add(3, "ok", "assign", partitions=[0], group="g1", generation=1)
    poll(3, (0, 0, 0), (0, 1, 1))
    for _ in range(2):
        add(3, "invoke", "process", records=[{"partition": 0, "offset": 1, "value": 1}])
        add(3, "ok", "process", records=[{"partition": 0, "offset": 1, "value": 1}])
    add(3, "invoke", "commit", group="g1", offsets=[{"partition": 0, "offset": 2}])
    add(3, "ok", "commit", group="g1", offsets=[{"partition": 0, "offset": 2}])
    add(3, "invoke", "committed", group="g1", partitions=[0])
    add(3, "ok", "committed", offsets=[{"partition": 0, "offset": 1}])
    add(2, "invoke", "final-reads", partitions=[0, 1])
    poll(2, (0, 0, 0), (1, 0, 7), (1, 1, 6), (1, 3, 10))
    add(2, "ok", "final-reads", ends=[{"partition": 0, "offset": 1}, {"partition": 1, "offset": 4}])
    add(2, "invoke", "committed", group="g1", partitions=[0], final=True)
    add(2, "ok", "committed", offsets=[{"partition": 0, "offset": 1}])
    # Transactions on partitions 3 to 5: two whose writes cross (a ww cycle, one of them reading its own
    # record), two that read each other's (a wr cycle), one that reads a record of one invoked after it
    # completed (a wr and a realtime edge), and a consumer that sees part of one.
    def txn(process, sends, records=()):
        add(process, "invoke", "txn", sends=[{"key": 0, "value": v} for v, _, _ in sends])
        add(process, "ok", "txn", sends=[{"key": 0, "value": v, "partition": p, "offset": o} for v, p, o in sends],
            records=[{"partition": p, "offset": o, "key": 0, "value": v} for p, o, v in records])

    txn(4, [(20, 3, 0), (21, 4, 1)])
    txn(5, [(22, 3, 1), (23, 4, 0)], records=[(3, 1, 22)])
    add(4, "invoke", "txn", sends=[{"key": 0, "value": 24}])
    add(5, "invoke", "txn", sends=[{"key": 0, "value": 25}])
    add(4, "ok", "txn", sends=[{"key": 0, "value": 24, "partition": 3, "offset": 2}],
        records=[{"partition": 3, "offset": 3, "key": 0, "value": 25}])
    add(5, "ok", "txn", sends=[{"key": 0, "value": 25, "partition": 3, "offset": 3}],
        records=[{"partition": 3, "offset": 2, "key": 0, "value": 24}])
    txn(7, [], records=[(3, 4, 26)])
    txn(8, [(26, 3, 4)])
    txn(9, [(27, 5, 0), (28, 5, 1), (29, 5, 2)])
    poll(6, (5, 0, 27))
    poll(6, (5, 2, 29))
    return events


def _prime_dumps(folder: Path) -> None:
    """The priming history's replica dumps: n2's replica of partition 0 holds
    another value than the final log's at offset 0 (replica-divergence)."""
    (folder / "disk").mkdir()
    for node, value in (("n1", 0), ("n2", 999)):
        with gzip.open(folder / "disk" / f"{node}.jsonl.gz", "wb") as f:
            f.write(b"[0, 0, 0, 0, %d]\n" % value)


