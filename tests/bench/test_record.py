"""A benchmark's result as a file (bench/record.py): what one holds, its
name, and `harness bench latest` reading them back, each figure's newest
value under the result that holds it. Nothing here asserts a time."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from datetime import datetime, timezone

import orjson

from bench import record
from tests.support import REPO, harness


def measured() -> tuple[record.Start, dict]:
    """A small real measurement: sorting a shuffled list, its size and seconds."""
    begun = record.start()
    items = list(range(200_000, 0, -7))
    t0 = time.monotonic()
    ordered = sorted(items)
    return begun, {"items": len(ordered), "sort_s": round(time.monotonic() - t0, 4), "unmeasured": None}


TARGETS = (
    record.Target("items", ">=", 1_000, "at least a thousand sorted"),
    record.Target("items", "<=", 10, "at most ten sorted"),
    record.Target("absent", "<=", 1, "a figure this run did not measure"),
)


def test_a_result_holds_the_command_commit_machine_figures_and_targets(tmp_path):
    begun, figures = measured()
    args = argparse.Namespace(record=True, record_dir=str(tmp_path))
    path = record.write(args, "sorting", begun, figures, TARGETS, details={"how": "sorted()"})
    assert path.parent == tmp_path and re.fullmatch(r"sorting-\d{8}T\d{6}Z\.json", path.name)
    result = orjson.loads(path.read_bytes())
    assert result["benchmark"] == "sorting"
    assert result["command"] == record.command_line() and result["command"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert result["commit"] == head.stdout.strip() and isinstance(result["dirty"], bool)
    assert result["time"] == begun.utc.strftime("%Y-%m-%dT%H:%M:%SZ") and path.name[8:-5] in \
        result["time"].replace("-", "").replace(":", "")
    assert result["seconds"] >= 0
    machine = result["machine"]
    assert machine["cores"] == os.cpu_count() and machine["memory_mib"] > 0
    assert len(machine["load_start"]) == 3 and len(machine["load_end"]) == 3
    assert result["figures"] == {"items": figures["items"], "sort_s": figures["sort_s"]}  # None: not measured
    assert [(t["figure"], t["op"], t["bound"], t["value"], t["met"]) for t in result["targets"]] == [
        ("items", ">=", 1_000, figures["items"], True), ("items", "<=", 10, figures["items"], False),
        ("absent", "<=", 1, None, None)]
    assert result["targets"][0]["goal"] == "at least a thousand sorted"
    assert result["details"] == {"how": "sorted()"}
    # A second result in the same second is a file of its own; --no-record writes none.
    again = record.write(args, "sorting", begun, figures, TARGETS)
    assert again != path and again.is_file() and path.is_file()
    assert record.write(argparse.Namespace(record=False, record_dir=str(tmp_path)), "sorting", begun, figures) is None
    assert len(list(tmp_path.iterdir())) == 2


def test_the_command_is_said_as_a_user_types_it():
    assert record.command_line(["/x/.venv/bin/harness", "bench", "check", "--sizes", "1,2"]) == \
        "harness bench check --sizes 1,2"
    assert record.command_line(["/x/harness/cli.py", "bench", "cold", "a b"]) == "harness bench cold 'a b'"
    assert record.command_line(["/x/bench/workload_overhead.py", "--seconds", "8"]) == \
        "python -m bench.workload_overhead --seconds 8"
    assert record.size_label(10_000_000) == "10M" and record.size_label(20_000) == "20K"
    assert record.size_label(1_234) == "1234"


def test_every_benchmark_records_and_declares_its_targets_as_data():
    from bench import (broker_vs_kafka, checker_cost, cluster_up, cold_check, faultfs_overhead, own_broker_failover,
                       own_broker_throughput, report_cost, scenario_tally, targets, workload_overhead)

    modules = [m for m, _ in targets.TARGETS.values() if m is not record]
    modules += [faultfs_overhead, workload_overhead, scenario_tally]
    for module in modules:
        source = open(module.__file__).read()
        assert "record.start()" in source and "record.write(" in source, module.__name__
        assert all(isinstance(t, record.Target) and t.op in ("<=", ">=") for t in getattr(module, "TARGETS", ()))
    assert {m.__name__ for m in modules} >= {m.__name__ for m in (
        broker_vs_kafka, checker_cost, cluster_up, cold_check, own_broker_failover, own_broker_throughput,
        report_cost)}


def test_latest_prints_each_figure_s_newest_value_under_its_result(tmp_path):
    def at(day: int) -> record.Start:
        return record.Start(datetime(2026, 11, day, 12, 0, tzinfo=timezone.utc), time.monotonic(), (0.5, 0.4, 0.3))

    args = argparse.Namespace(record=True, record_dir=str(tmp_path))
    _, figures = measured()
    record.write(args, "sorting", at(1), {"items": 5, "old_only": 1.5}, TARGETS)
    record.write(args, "sorting", at(3), {"items": figures["items"], "sort_s": figures["sort_s"]}, TARGETS)
    record.write(args, "other", at(2), {"x": 7})
    (tmp_path / "notes.json").write_text("[]")  # not a result: skipped
    found = record.latest(record.load(tmp_path))
    assert [(r["time"][:10], sorted(f)) for r, f in found["sorting"]] == [
        ("2026-11-03", ["items", "sort_s"]), ("2026-11-01", ["old_only"])]
    proc = harness("bench", "latest", "--record-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "other" and lines[3] == "sorting"
    assert lines[4].startswith("  2026-11-03T12:00:00Z  ") and f"{os.cpu_count()} cores, load 0.5 to " in lines[4]
    assert lines[4].endswith(f"$ {record.command_line()}")
    assert re.match(rf"    items +{figures['items']:,}   target >= 1000: met   target <= 10: MISSED$", lines[5])
    assert re.match(r"    sort_s +[\d.]+$", lines[6])
    assert lines[7].startswith("  2026-11-01T12:00:00Z ") and re.match(r"    old_only +1\.5$", lines[8])
    assert "notes.json" in proc.stderr
    only = harness("bench", "latest", "other", "--record-dir", str(tmp_path))
    assert only.stdout.splitlines()[0] == "other" and "sorting" not in only.stdout


def test_the_cluster_benchmarks_name_their_figures_as_their_targets_do():
    # They need clusters to run; their figures are made from a report of the shape they print.
    from bench import broker_vs_kafka, workload_overhead

    def system(kind: str, rate: int) -> dict:
        return {"kind": kind, "saturation": {"records_per_s": rate, "p99_ms": 40.0}, "paced": {"p99_ms": 9.0}}

    named = broker_vs_kafka.figures({"compare": [system("own", 300_000), system("kafka", 100_000)],
                                     "bring_up": [{"mode": "zk", "nodes_s": 0.2, "zookeeper_s": 1.5,
                                                   "kafka_s": 11.0, "total_s": 12.9}]},
                                    argparse.Namespace(size=100))
    assert named["100B.own_over_kafka"] == 3.0 and named["bring_up.zk.total_s"] == 12.9
    assert "bring_up.kraft.total_s" not in named
    assert {t.figure for t in broker_vs_kafka.TARGETS} == {"100B.own_over_kafka", "bring_up.zk.total_s",
                                                           "bring_up.kraft.total_s"}
    named = workload_overhead.figures({
        "overhead": {"median": {"recorded": 700_000.0, "unrecorded": 840_000.0, "bare": 1e6},
                     "recorded_over_unrecorded": 0.8333, "recorded_over_bare": 0.7, "writer_us_per_event": 0.15,
                     "cpu_us_per_send": {"recorded": 1.4, "unrecorded": 1.3, "bare": 1.0}},
        "send_invoked_us_per_event": 0.2, "sends_acked_us_per_event": 0.05, "highest_sustained_target": None,
        "in_flight_latency": {"max.in.flight=5 (workload default)": {"p50": 5.5, "p99": 9.4}}})
    assert named["recorded_over_unrecorded"] == 0.833 and named["recorded_per_s"] == 700_000
    assert named["in_flight_5.p99_ms"] == 9.4
    assert [t.figure for t in workload_overhead.TARGETS] == ["recorded_over_unrecorded"]
