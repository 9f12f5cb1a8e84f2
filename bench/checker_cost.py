"""Benchmark: the checker's wall time and peak memory on large synthetic
Parquet histories, against a bare Spark scan-and-group-by of the same file
in the same Spark session.

    harness bench check [--sizes 1000000,10000000] [--cache .cache/bench] [--repeat 2] [--out FILE]
                        [--spark-master URL] [--spark-conf KEY=VALUE]... [--standalone [--standalone-memory 1g]]

`--standalone` measures the same sizes again on a standalone Spark cluster
of two workers of one core on 127.0.0.1 (checkers/spark_cluster.py), in a
`harness bench check --spark-master spark://...` of its own (one Spark
context per process), and prints the two side by side; the executors'
memory is sampled from the workers' process trees meanwhile.

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
from checkers.spark import conf_pairs, get_session
from checkers.spark_cluster import standalone
from core.errors import UserError
from core.processes import descendants
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
    parser.add_argument("--spark-conf", metavar="KEY=VALUE", action="append", default=[],
                        help="extra Spark setting, as for harness check (repeatable)")
    parser.add_argument("--repeat", type=int, default=2, help="measured runs of each (best is reported)")
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")
    parser.add_argument("--standalone", action="store_true",
                        help="also measure on a standalone cluster of 2 workers x 1 core on 127.0.0.1, side by side")
    parser.add_argument("--standalone-memory", default="1g", metavar="SIZE",
                        help="each worker's memory and its executor's (default 1g)")


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
            shifted = [_shifted(e, index, time_base, k * 1000 if n_proc < 1000 else k * n_proc, 6 * k, value_base)
                       for e in events]
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


def _shifted(e: dict, index: int, time_base: int, process_base: int, partition_base: int, value_base: int) -> dict:
    """Event `e` of one part moved onto the part's own indexes, times, processes,
    partitions and values, so that parts stitched into one history never meet:
    every field that names a partition moves (a send's or a seek's `partition`,
    `partitions` of an assign or a final-reads bracket, the `ends` of its
    completion, a commit's `offsets`, the records of a poll), or the parts'
    final-reads brackets would speak of each other's partitions."""
    e = dict(e)
    e["index"] += index
    e["time"] += time_base
    if e["process"] == "nemesis":
        return e
    e["process"] += process_base
    if e["f"] == "send":
        e["value"] += value_base
    if e.get("partition") is not None:
        e["partition"] += partition_base
    if e.get("partitions") is not None:
        e["partitions"] = [p + partition_base for p in e["partitions"]]
    for name in ("ends", "offsets"):
        if e.get(name) is not None:
            e[name] = [{**x, "partition": x["partition"] + partition_base} for x in e[name]]
    if e.get("records") is not None:
        e["records"] = [{**r, "partition": r["partition"] + partition_base, "value": r["value"] + value_base}
                        for r in e["records"]]
    return e


class PeakRSS:
    """Peak resident memory of this process and its children (the JVM), sampled;
    or of the descendants of `roots` (the processes a standalone worker launched:
    its executors), the roots themselves left out."""

    def __init__(self, interval: float = 0.05, roots: list[int] | None = None):
        self.interval = interval
        self.roots = roots
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
        return [root, *descendants(root)]

    def _now(self) -> int:
        if self.roots is None:
            return sum(self._rss(p) for p in self._tree(os.getpid()))
        return sum(self._rss(p) for root in self.roots for p in self._tree(root) if p != root)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._now())

    def __enter__(self):
        self.peak = self._now()
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
    spark = get_session(args.spark_master, conf_pairs(args.spark_conf))
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
    # This session stops first: on a cluster it holds every core, and the
    # check's own application would wait for one for ever.
    master = spark.sparkContext.master
    spark.stop()
    on_master = (["--spark-master", args.spark_master] if args.spark_master else []) + _conf_args(args.spark_conf)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "check", str(paths[sizes[-1]]), "--out",
                           str(paths[sizes[-1]].parent), *on_master], capture_output=True, text=True)
    cold = time.monotonic() - t0
    print(f"cold `harness check` of {sizes[-1]} events (JVM start included): {cold:.1f} s "
          f"(exit {proc.returncode}); Spark session start in this process: {startup:.1f} s")
    report = {"cpus": os.cpu_count(), "master": master, "session_start_s": round(startup, 2),
              "cold_cli_s": round(cold, 2), "runs": measured}
    if args.standalone:
        report["standalone"] = on_standalone(args)
        side_by_side(report)
    if args.out:
        Path(args.out).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return 0


def _conf_args(pairs: list[str]) -> list[str]:
    """--spark-conf pairs as arguments again, for a command this one runs."""
    return [arg for pair in pairs for arg in ("--spark-conf", pair)]


def on_standalone(args) -> dict:
    """The same sizes on a two-worker standalone cluster: `harness bench check
    --spark-master` of the cluster in a process of its own (this one's Spark
    context is local), its report, and the executors' peak memory."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        out = Path(tmp) / "standalone.json"
        with standalone(workers=2, cores=1, memory=args.standalone_memory) as cluster:
            print(f"on a standalone cluster ({cluster.url}: 2 workers x 1 core, {args.standalone_memory} each):")
            with PeakRSS(interval=0.2, roots=cluster.pids) as executors:
                proc = subprocess.run([sys.executable, "-m", "harness.cli", "bench", "check", "--sizes", args.sizes,
                                       "--cache", args.cache, "--repeat", str(args.repeat),
                                       "--spark-master", cluster.url, "--out", str(out),
                                       # An executor as large as its worker: Spark's default (1g)
                                       # would wait for ever on smaller workers.
                                       "--spark-conf", f"spark.executor.memory={args.standalone_memory}",
                                       *_conf_args(args.spark_conf)],
                                      env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
            if proc.returncode != 0:
                raise UserError(f"the bench on the standalone cluster failed (exit {proc.returncode}, "
                                "its output above)")
        report = orjson.loads(out.read_bytes())
    report.update({"workers": 2, "cores_per_worker": 1, "memory_per_worker": args.standalone_memory,
                   "executors_peak_rss_mb": round(executors.peak / 2**20)})
    return report


def side_by_side(report: dict) -> None:
    """Each size's best check on local[*] and on the standalone cluster."""
    cluster = report["standalone"]
    print(f"{'events':>10}  {'local[*]':>9}  {'standalone':>10}  {'bare scans':>11}  driver RSS local / standalone")
    for here, there in zip(report["runs"], cluster["runs"]):
        print(f"{here['events']:>10}  {here['check_s']:>7.2f} s  {there['check_s']:>8.2f} s  "
              f"{here['bare_scan_s']:>4.2f} / {there['bare_scan_s']:.2f}  "
              f"{here['peak_rss_mb']} / {there['peak_rss_mb']} MiB")
    print(f"cold `harness check`: {report['cold_cli_s']:.1f} s local, {cluster['cold_cli_s']:.1f} s standalone; "
          f"executors' peak RSS on the cluster (both, whole run): {cluster['executors_peak_rss_mb']} MiB")
