"""Benchmark: the checker's wall time and peak memory on large synthetic
Parquet histories, against a bare Spark scan-and-group-by of the same file
in the same Spark session.

    harness bench check [--sizes 1000000,10000000] [--cache .cache/bench] [--repeat 2] [--out FILE]

Histories are generated once into a cache folder (a 10M-event history is
written part by part: independent simulations on disjoint partitions,
processes and values, one after another in time), then reused. Each part
comes from `harness gen-history`, run as a user runs it: the generator
belongs to the top of the harness, which a benchmark does not import.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

from checkers.check import Options, check_history
from checkers.spark import get_session
from core.errors import UserError
from core.history.parquet import arrow_schema, events_to_table

PLANTED = dict(lost=5, duplicates=5, inconsistent=5, aborted=5, nonmonotonic_polls=5, skips=5,
               nonmonotonic_sends=5, unseen=5)
PART_EVENTS = 1_000_000


def configure(parser) -> None:
    """Flags, for `harness bench check`."""
    parser.add_argument("--sizes", default="1000000,10000000",
                        help="comma list of history sizes in events (default 1000000,10000000)")
    parser.add_argument("--cache", default=".cache/bench", help="where generated histories are kept")
    parser.add_argument("--spark-master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--repeat", type=int, default=2, help="measured runs of each (best is reported)")
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--sizes {text!r}: expected a comma list of integers") from None
    if not sizes or min(sizes) < 10_000:
        raise UserError("--sizes: each size must be at least 10000 events")
    return sizes


def synthetic_part(events: int, seed: int, scratch: Path) -> tuple[list[dict], dict[str, int]]:
    """One simulation of about `events` events with PLANTED anomalies (6
    partitions), from `harness gen-history` writing under `scratch`: its
    events and expected counts."""
    planted = [f"--{name.replace('_', '-')}={n}" for name, n in PLANTED.items()]
    with tempfile.TemporaryDirectory(prefix="part-", dir=scratch) as tmp:
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "gen-history", "--events", str(events),
                               "--seed", str(seed), "--partitions", "6", *planted, "--format", "jsonl",
                               "--out", tmp], capture_output=True, text=True)
        if proc.returncode != 0:
            raise UserError(f"harness gen-history failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        with open(Path(tmp) / "history.jsonl", "rb") as f:
            events_out = [orjson.loads(line) for line in f]
        expected = orjson.loads((Path(tmp) / "expected.json").read_bytes())["anomalies"]
    return events_out, expected


def ensure_history(size: int, cache: Path) -> Path:
    """A Parquet history of about `size` events with planted anomalies, made once."""
    folder = cache / f"check-{size}"
    path = folder / "history.parquet"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    import pyarrow.parquet as pq

    parts = max(1, round(size / PART_EVENTS))
    expected: dict[str, int] = {}
    index = time_base = value_base = 0
    tmp = path.with_name("history.parquet.tmp")
    print(f"generating a {size}-event history in {parts} part(s) into {folder} ...", file=sys.stderr)
    with pq.ParquetWriter(tmp, arrow_schema(), compression="zstd") as writer:
        for k in range(parts):
            events, part_expected = synthetic_part(size // parts, k, folder)
            n_proc = 1 + max(e["process"] for e in events if e["process"] != "nemesis")
            shifted = []
            for e in events:
                e = dict(e)
                e["index"] += index
                e["time"] += time_base
                if e["process"] != "nemesis":
                    e["process"] += k * 1000 if n_proc < 1000 else k * n_proc
                if e["f"] == "send" and e["process"] != "nemesis":
                    e["value"] += value_base
                    if "partition" in e:
                        e["partition"] += 6 * k
                if e.get("records") is not None:
                    e["records"] = [{**r, "partition": r["partition"] + 6 * k, "value": r["value"] + value_base}
                                    for r in e["records"]]
                shifted.append(e)
            for start in range(0, len(shifted), 250_000):
                writer.write_table(events_to_table(shifted[start:start + 250_000]))
            index += len(events)
            time_base = shifted[-1]["time"] + 1_000_000
            value_base += 10_000_000
            for name, n in part_expected.items():
                expected[name] = expected.get(name, 0) + n
    os.replace(tmp, path)
    (folder / "expected.json").write_bytes(orjson.dumps({"events": index, "anomalies": expected}))
    return path


class PeakRSS:
    """Peak resident memory of this process and its children (the JVM), sampled."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    @staticmethod
    def _tree(root: int) -> list[int]:
        children: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(name))
                except (OSError, ValueError, IndexError):
                    pass
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, []))
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, sum(self._rss(p) for p in self._tree(os.getpid())))

    def __enter__(self):
        self.peak = sum(self._rss(p) for p in self._tree(os.getpid()))
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def bare_scan(spark, path: Path) -> float:
    """Seconds of a plain read-group-aggregate of the file: Spark's floor for it."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    spark.read.parquet(str(path)).groupBy("process").agg(
        F.count("*"), F.sum(F.size("records")), F.max("time")).collect()
    return time.monotonic() - started


def run(args) -> int:
    """Generate (once), check each size, print; --out keeps the numbers as JSON."""
    sizes = _sizes(args.sizes)
    cache = Path(args.cache)
    paths = {size: ensure_history(size, cache) for size in sizes}
    started = time.monotonic()
    spark = get_session(args.spark_master)
    startup = time.monotonic() - started
    bare_scan(spark, paths[sizes[0]])  # warm the JVM once, like a second check would
    measured = []
    for size in sizes:
        expected = orjson.loads((paths[size].parent / "expected.json").read_bytes())
        best = None
        for _ in range(max(1, args.repeat)):
            bare = bare_scan(spark, paths[size])
            with PeakRSS() as mem:
                t0 = time.monotonic()
                results = check_history(paths[size], Options(), spark=spark)
                seconds = time.monotonic() - t0
            counts = {k: v["count"] for k, v in results["anomalies"].items()}
            if counts != expected["anomalies"]:
                raise UserError(f"checker counts {counts} differ from the planted {expected['anomalies']}")
            row = {"events": expected["events"], "check_s": round(seconds, 2), "bare_scan_s": round(bare, 2),
                   "ratio": round(seconds / bare, 2), "peak_rss_mb": round(mem.peak / 2**20),
                   "stages": results["checker"]["stages"]}
            if best is None or row["check_s"] < best["check_s"]:
                best = row
        measured.append(best)
        print(f"{best['events']:>10} events: check {best['check_s']:6.2f} s, bare scan {best['bare_scan_s']:5.2f} s "
              f"({best['ratio']:.1f}x), peak RSS {best['peak_rss_mb']} MiB")
    if len(measured) > 1:
        growth = measured[-1]["check_s"] / measured[0]["check_s"]
        print(f"growth {measured[0]['events']} -> {measured[-1]['events']} events: {growth:.1f}x")
    # A cold, end-to-end `harness check` of the largest history: JVM start included.
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "check", str(paths[sizes[-1]]), "--out",
                           str(paths[sizes[-1]].parent)], capture_output=True, text=True)
    cold = time.monotonic() - t0
    print(f"cold `harness check` of {sizes[-1]} events (JVM start included): {cold:.1f} s "
          f"(exit {proc.returncode}); Spark session start in this process: {startup:.1f} s")
    report = {"cpus": os.cpu_count(), "master": spark.sparkContext.master, "session_start_s": round(startup, 2),
              "cold_cli_s": round(cold, 2), "runs": measured}
    if args.out:
        Path(args.out).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return 0
