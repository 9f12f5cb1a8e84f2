"""Check one history: load it, compute every anomaly and statistic, decide.

`check_history` is the checker as a function from a history to results
(the dict written as results.json, shape in docs/history.md).
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from checkers import anomalies as an
from checkers import liveness, node_logs, offsets, stats
from checkers.load import load, prepare
from checkers.spark import get_session
from core.history.files import load_run_json, resolve
from core.history.format import FINAL_READS
from core.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class Options:
    allow: set[str] = field(default_factory=set)
    idempotent: bool | None = None  # None: learn it from run.json
    master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
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
    with tempfile.TemporaryDirectory(prefix="harness-check-") as scratch:
        # Validate before Spark starts: bad input fails fast, with line numbers.
        prepared = prepare(source, Path(scratch))
        if spark is None:
            spark = get_session(opts.master, opts.spark_conf)
        loaded = load(spark, prepared)
        df, folded = offsets.fold(loaded.df, prepared.to_fold)
        results = offsets.unfold(_analyse(df, promised, opts), folded)
        if folded:
            results["warnings"].append(offsets.warning(folded))
        # Liveness reads its few columns with Arrow, not Spark: sorted arrays and
        # searchsorted beat a shuffle here (docs/benchmarks.md).
        t = time.monotonic()
        results["liveness"] = liveness.measure(liveness.load_columns(prepared.files), results["stats"]["faults"],
                                               opts.fault_ends, opts.hang_s)
        results["stages"]["liveness"] = round(time.monotonic() - t, 3)
        results["warnings"] = loaded.warnings + results.get("warnings", [])
    results["checker"] = {"engine": "spark", "master": spark.sparkContext.master,
                          "seconds": round(time.monotonic() - started, 3),
                          "stages": results.pop("stages"),
                          "history": str(source.files[0] if len(source.files) == 1 else source.root),
                          "format": source.format, "events": loaded.events}
    results["promises"] = promised
    if (source.root / "nodes").is_dir():
        # A run folder: its brokers' logs are part of the evidence (errors, unexpected exits).
        results["node_logs"] = node_logs.scan(source.root)
        results["warnings"] += node_logs.warnings(results["node_logs"])
    return _ordered(results)


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


def _analyse(df, promised: dict, opts: Options) -> dict:
    stage = _Stages()
    logs = an.final_logs(df)
    frames = an.build(df, logs)
    cached = list(frames.cached)
    try:
        ops, pipelined = stats.ordered_ops(df)
        cached.append(ops)
        stage.done("pair-operations")
        max_read = an.max_read_offsets(frames)
        stage.done("max-read")
        checked = an.value_checks(frames, max_read, logs)
        stage.done("by-value")
        multi = an.multi_partition_checks(checked, frames, logs)
        examples = an.value_examples(checked, frames, multi)
        missing = an.missing_values(checked, multi)
        found = {name: (int(checked[name]) + multi.get(name, (0, []))[0], examples.get(name, []))
                 for name in ("lost-write", "lost-acked", "dirty-read", "unseen", "aborted-read", "duplicate")}
        stage.done("by-value-examples")
        by_pos = an.by_position(frames, checked["duplicate"]).persist()
        cached.append(by_pos)
        found["inconsistent-offset"] = an.inconsistent(by_pos, frames)
        stage.done("by-position")
        found.update(an.read_order(frames, by_pos))
        stage.done("read-order")
        found["nonmonotonic-send"] = an.send_order(frames)
        stage.done("send-order")
        totals, throughput = stats.op_counts(df)
        # Invocations left without a completion, by f (sends are counted by value).
        unfinished_other = {f: n for f, t in totals.items() if f != "send"
                             and (n := t.get("invoke", 0) - sum(v for k, v in t.items() if k != "invoke")) > 0}
        stage.done("throughput")
        overall, per_second = stats.latency(frames.by_value, ops, pipelined)
        stage.done("latency")
        faults = stats.faults(df)
        stage.done("faults")
    finally:
        for frame in cached:
            frame.unpersist()

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
        "records_read": int(checked["records_read"] or 0),
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


def _ordered(results: dict) -> dict:
    keys = ("valid", "checker", "promises", "counts", "anomalies", "missing", "liveness", "stats", "node_logs",
            "warnings")
    return {k: results[k] for k in keys if k in results}
