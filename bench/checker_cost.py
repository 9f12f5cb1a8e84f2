"""Benchmark: the checker's wall time and peak memory on large synthetic
Parquet histories, against a bare Spark scan-and-group-by of the same parts
in the same Spark session.

    harness bench check [--sizes 1000000,10000000,100000000] [--cache .cache/bench] [--repeat 2]
                        [--engine spark|local] [--driver-memory 4g] [--no-cold] [--no-txn] [--out FILE]
                        [--spark-master URL] [--spark-conf KEY=VALUE]... [--standalone [--standalone-memory 1g]]

`--engine` is the checker's (docs/checker.md): Spark's executors run the
kernel (default), or this process does (`local`). The warm check of each
size is set against the bare scan in the same session; the cold `harness
check` of the largest size (JVM start included) against a bare cold scan,
each in a fresh process (bench/cold_check.py), measured in the same run.

`--standalone` measures the same sizes again on a standalone Spark cluster
of two workers of one core on 127.0.0.1 (lab/spark_cluster.py), in a
`harness bench check --spark-master spark://...` of its own (one Spark
context per process), and prints the two side by side; the executors'
memory is sampled from the workers' process trees meanwhile.

Each size's history is made once into a cache folder (`check-SIZE/`:
history.parquet/, a folder of Parquet parts of 1M events, and
expected.json) by `harness gen-history --parts`, run as a user runs it: the
generator belongs to the top of the harness, which a benchmark does not
import. Every part plants PLANTED; the bench fails (exit 2) if the
checker's counts differ from expected.json's.

Transactions: each size is also checked as a history whose producers are
mostly transactional (`check-txn-overlap-SIZE/`: `gen-history
--transactions` with TXN_FLAGS, TXN_PLANTED in each part besides PLANTED;
unless `--no-txn`), and its cost reported per million transactions: the
whole check's seconds (`s_per_million_txn`), and what it took beyond the
plain history's check of the same size (`txn_extra_s_per_million_txn`:
the transactions' frames, their dependency graph and its cycles, and the
events they add), with the segments the graph was cut into for the
cycles' search and the largest one's transactions and edges (results.json's
`checker.cycles`). The transactions overlap (`--txn-overlap 10`, ten open
at once in each producer's set): their backward edges cut the graph into
hundreds of segments per million events, of hundreds of transactions
each, the largest of thousands, every one searched, as a run's concurrent
transactions make them; transactions one at a time would leave only the
plants' segments of two or three (lab/synthetic.py).

The result is recorded (bench/record.py), its figures named engine, size
and measure (`spark.10M.cold_ratio`), against TARGETS.
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

from bench import record
from bench.cold_check import scan
from checkers.check import Options, check_history
from checkers.spark import conf_pairs, get_session
from lab.spark_cluster import standalone
from lab.synthetic import ANOMALY_OF
from core.errors import UserError
from core.history.files import resolve
from core.processes import descendants

PLANTED = dict(lost=5, duplicates=5, inconsistent=5, aborted=5, nonmonotonic_polls=5, skips=5,
               nonmonotonic_sends=5, unseen=5)  # in each part
# A transactional history's plants (lab/synthetic.py), in each part, and how it makes transactions.
TXN_PLANTED = dict(ww_cycles=5, wr_cycles=5, precommitted=5, torn=5, ww_realtime_cycles=5, ww_wr_realtime_cycles=5)
TXN_FLAGS = ("--transactions", "0.9", "--txn-producers", "4", "--txn-partitions", "4", "--txn-overlap", "10")
PART_EVENTS = 1_000_000
# Issue 46's goals for the checker whose anomalies one kernel decides, run by
# Spark or in process. Figures are named engine.size.measure.
TARGETS = (
    record.Target("spark.10M.cold_ratio", "<=", 5.0, "issue 46: a cold harness check of 10M events through Spark "
                  "at most 5x a bare cold Spark scan of the same history"),
    record.Target("local.10M.ratio", "<=", 3.0, "issue 46: a warm check of 10M events in process "
                  "(--engine local) at most 3x the warm bare scan"),
    record.Target("spark.100M.peak_rss_mib", "<=", 8192, "issue 46: 100M events through Spark within 8 GiB, "
                  "the driver and its JVM (on local[*], the whole job)"),
    record.Target("spark.100M.python_peak_rss_mib", "<=", 2048, "issue 46: 100M events through Spark, "
                  "the driver's Python under 2 GiB"),
)
# Generated histories are kept in the project's own folder, whatever the
# working folder: a bench started elsewhere reuses them, not a new copy.
CACHE = Path(__file__).resolve().parents[1] / ".cache" / "bench"


def configure(parser) -> None:
    """Flags, for `harness bench check`."""
    parser.add_argument("--sizes", default="1000000,10000000",
                        help="comma list of history sizes in events (default 1000000,10000000; "
                             "100000000 is 100 parts, about 1.3 GB)")
    parser.add_argument("--cache", default=str(CACHE), help="where generated histories are kept "
                                                           "(default the project's .cache/bench)")
    parser.add_argument("--engine", choices=("spark", "local"), default="spark",
                        help="the checker's engine (default spark; local: this process runs the kernel)")
    parser.add_argument("--spark-master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--spark-conf", metavar="KEY=VALUE", action="append", default=[],
                        help="extra Spark setting, as for harness check (repeatable)")
    parser.add_argument("--driver-memory", default=os.environ.get("HARNESS_SPARK_MEMORY", "4g"), metavar="SIZE",
                        help="the Spark driver's memory (spark.driver.memory; default HARNESS_SPARK_MEMORY "
                             "or 4g, as harness check)")
    parser.add_argument("--repeat", type=int, default=2, help="measured runs of each (best is reported)")
    parser.add_argument("--no-cold", dest="cold", action="store_false",
                        help="leave out the cold `harness check` of the largest history")
    parser.add_argument("--no-txn", dest="txn", action="store_false",
                        help="leave out the transactional history of each size (the cost per million transactions)")
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


def ensure_history(size: int, cache: Path, txn: bool = False) -> Path:
    """The folder of a history of about `size` events in parts of PART_EVENTS,
    with PLANTED in each part (and, `txn`, transactions: TXN_FLAGS and
    TXN_PLANTED): made once by `harness gen-history --parts`, then reused. A
    folder not of that making (the earlier one-file layout, a generation cut
    short, fewer plants than these, other flags than these: `flags.json`
    names a folder's) is made again. The transactional folder's name says
    its transactions overlap: the serial ones' (`check-txn-SIZE/`, which
    had no `flags.json`) is left to a bench of before."""
    folder = cache / (f"check-txn-overlap-{size}" if txn else f"check-{size}")
    parts = max(1, round(size / PART_EVENTS))
    expected = folder / "expected.json"
    plants = {**PLANTED, **(TXN_PLANTED if txn else {})}
    flags = list(TXN_FLAGS if txn else ())
    if (folder / "history.parquet").is_dir() and expected.is_file():
        made = orjson.loads(expected.read_bytes())
        made_with = orjson.loads((folder / "flags.json").read_bytes()) if (folder / "flags.json").is_file() else []
        if made.get("parts") == parts and made_with == flags and all(
                made["anomalies"].get(ANOMALY_OF[name], 0) >= n * parts for name, n in plants.items()):
            return folder
    folder.mkdir(parents=True, exist_ok=True)
    for stale in ("results.json", "flags.json"):  # a check of what was there before, and its flags
        (folder / stale).unlink(missing_ok=True)
    print(f"generating a {size}-event history in {parts} part(s) into {folder} ...", file=sys.stderr, flush=True)
    planted = [f"--{name.replace('_', '-')}={n * parts}" for name, n in plants.items()]
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "gen-history", "--events", str(size),
                           "--parts", str(parts), "--seed", "0", "--partitions", "6", *planted,
                           *flags, "--out", str(folder)], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise UserError(f"harness gen-history failed (exit {proc.returncode}, its message above)")
    (folder / "flags.json").write_bytes(orjson.dumps(flags))
    print(proc.stdout.strip(), file=sys.stderr, flush=True)
    return folder


def expected_of(folder: Path) -> dict:
    """expected.json of a history `ensure_history` made."""
    return orjson.loads((folder / "expected.json").read_bytes())


def differences(counts: dict[str, int], planted: dict[str, int]) -> str:
    """What the checker found against what was planted, for each anomaly where they differ ("" if none)."""
    return ", ".join(f"{name} {counts.get(name, 0)} against {planted.get(name, 0)}"
                     for name in sorted(set(counts) | set(planted)) if counts.get(name, 0) != planted.get(name, 0))


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds the processes `pids` have spent so far
    (/proc; a process gone counts nothing)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        except (OSError, IndexError, ValueError):
            pass
    return total


class CPUTime:
    """CPU seconds spent between enter and exit by this process and its
    children (the JVM: on local[*], the whole check's; on a cluster, the
    driver's), `total`, and by this (Python) process alone, `own`. On two
    cores a wall time can be no less than half its CPU time: what a check
    costs beside the bare scan shows here, whatever its threads overlap."""

    def __init__(self) -> None:
        self.total = self.own = 0.0
        self._start = (0.0, 0.0)

    @staticmethod
    def _now() -> tuple[float, float]:
        me = os.getpid()
        return cpu_seconds([me, *descendants(me)]), cpu_seconds([me])

    def __enter__(self):
        self._start = self._now()
        return self

    def __exit__(self, *exc):
        end = self._now()
        self.total, self.own = end[0] - self._start[0], end[1] - self._start[1]


class PeakRSS:
    """Peak resident memory of this process and its children (the JVM), sampled,
    and of this (Python) process alone; or of the descendants of `roots` (the
    processes a standalone worker launched: its executors), the roots
    themselves left out."""

    def __init__(self, interval: float = 0.05, roots: list[int] | None = None):
        self.interval = interval
        self.roots = roots
        self.peak = 0
        self.own_peak = 0  # this process alone: the Python side of the driver
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

    def _sample(self) -> None:
        self.peak = max(self.peak, self._now())
        self.own_peak = max(self.own_peak, self._rss(os.getpid()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def bare_scan(spark, files: list[Path]) -> float:
    """Seconds of a plain read-group-aggregate of the parts: Spark's floor for them."""
    started = time.monotonic()
    scan(spark, files)
    return time.monotonic() - started


def run(args) -> int:
    """Generate (once), check each size, print the table; --out keeps the numbers as JSON;
    the result is recorded (bench/record.py)."""
    begun = record.start()
    sizes = _sizes(args.sizes)
    if args.repeat < 1:
        raise UserError("--repeat must be at least 1")
    cache = Path(args.cache)
    folders = {size: ensure_history(size, cache) for size in sizes}
    txn_folders = {size: ensure_history(size, cache, txn=True) for size in sizes} if args.txn else {}
    conf = conf_pairs(args.spark_conf)
    conf.setdefault("spark.driver.memory", args.driver_memory)  # for any master: the driver is this process's JVM
    started = time.monotonic()
    spark = get_session(args.spark_master, conf)
    startup = time.monotonic() - started
    master = spark.sparkContext.master
    files = {size: resolve(folder).files for size, folder in folders.items()}
    bare_scan(spark, files[sizes[0]])  # warm the JVM once, like a second check would
    measured = []
    for size in sizes:
        expected = expected_of(folders[size])
        tries = []
        for _ in range(args.repeat):
            with CPUTime() as bare_cpu:
                bare = bare_scan(spark, files[size])
            with PeakRSS() as mem, CPUTime() as cpu:
                t0 = time.monotonic()
                results = check_history(folders[size], Options(engine=args.engine), spark=spark)
                seconds = time.monotonic() - t0
            counts = {k: v["count"] for k, v in results["anomalies"].items()}
            differ = differences(counts, expected["anomalies"])
            if differ:
                raise UserError(f"{folders[size]}: the checker's counts differ from the planted ones: {differ}")
            tries.append({"events": expected["events"], "parts": len(files[size]), "check_s": round(seconds, 2),
                          "bare_scan_s": round(bare, 2), "ratio": round(seconds / bare, 2),
                          "cpu_s": round(cpu.total, 2), "python_cpu_s": round(cpu.own, 2),
                          "bare_scan_cpu_s": round(bare_cpu.total, 2),
                          "peak_rss_mb": round(mem.peak / 2**20), "python_peak_rss_mb": round(mem.own_peak / 2**20),
                          "stages": results["checker"]["stages"]})
        # The first check of a size pays for compiling and warming what it
        # runs (Spark's plans, the JIT, Numba's loops on a fresh machine); the
        # best of the repeats is a warm check's time.
        best = {**min(tries, key=lambda t: t["check_s"]), "first_check_s": tries[0]["check_s"]}
        if size in txn_folders:
            best.update(txn_cost(spark, txn_folders[size], args, best["check_s"], best["events"]))
        measured.append(best)
        print(f"{best['events']} events: check {best['check_s']:.2f} s (the first {best['first_check_s']:.2f} s), "
              f"bare scan {best['bare_scan_s']:.2f} s, CPU {best['cpu_s']:.1f} s (Python {best['python_cpu_s']:.1f} s; "
              f"the bare scan's {best['bare_scan_cpu_s']:.1f} s), "
              f"peak RSS {best['peak_rss_mb']} MiB, of Python alone {best['python_peak_rss_mb']} MiB "
              "(counts as planted)", file=sys.stderr, flush=True)
    report = {"cpus": os.cpu_count(), "master": master, "engine": args.engine,
              "driver_memory": conf["spark.driver.memory"], "session_start_s": round(startup, 2), "runs": measured}
    # A cold, end-to-end `harness check` of the largest history: JVM start included.
    # This session stops first: on a cluster it holds every core, and the
    # check's own application would wait for one for ever.
    spark.stop()
    if args.cold:
        report.update(cold_check(folders[sizes[-1]], args.spark_master, conf, args.engine))
    if args.standalone:
        report["standalone"] = on_standalone(args)
    print_table(report)
    if args.out:
        Path(args.out).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    record.write(args, "check", begun, figures(report, sizes), TARGETS, details=report)
    return 0


def txn_cost(spark, folder: Path, args, plain_check_s: float, plain_events: int) -> dict:
    """The best of `args.repeat` checks of the transactional history in
    `folder`, its counts as planted, and its cost per million transactions:
    whole, and beyond `plain_check_s` (the plain history's check of
    `plain_events`, scaled to this one's events), with the best check's
    CPU seconds and peak RSS (where the transactions' graph would show)."""
    expected = expected_of(folder)
    tries = []
    for _ in range(args.repeat):
        with PeakRSS() as mem, CPUTime() as cpu:
            t0 = time.monotonic()
            results = check_history(folder, Options(engine=args.engine), spark=spark)
            tries.append((time.monotonic() - t0, cpu, mem))
        counts = {k: v["count"] for k, v in results["anomalies"].items()}
        differ = differences(counts, expected["anomalies"])
        if differ:
            raise UserError(f"{folder}: the checker's counts differ from the planted ones: {differ}")
    transactions = sum(results["counts"]["other_ops"].get("txn", {}).values())
    graph = results["checker"]["cycles"]
    (seconds, cpu, mem), events = min(tries, key=lambda t: t[0]), expected["events"]
    millions = transactions / 1e6
    plain = plain_check_s * events / plain_events
    print(f"{events} events with {transactions} transactions: check {seconds:.2f} s, "
          f"{seconds / millions:.1f} s per million transactions, {(seconds - plain) / millions:.1f} s of them beyond "
          f"a plain history's check (counts as planted); the cycles searched in {graph['segments']} segments, "
          f"the largest of {graph['largest_segment']['transactions']} transactions and "
          f"{graph['largest_segment']['edges']} edges; CPU {cpu.total:.1f} s, peak RSS {round(mem.peak / 2**20)} MiB, "
          f"of Python alone {round(mem.own_peak / 2**20)} MiB", file=sys.stderr, flush=True)
    return {"txn_events": events, "transactions": transactions, "txn_check_s": round(seconds, 2),
            "s_per_million_txn": round(seconds / millions, 2),
            "txn_extra_s_per_million_txn": round((seconds - plain) / millions, 2), "txn_cpu_s": round(cpu.total, 2),
            "txn_peak_rss_mb": round(mem.peak / 2**20), "txn_python_peak_rss_mb": round(mem.own_peak / 2**20),
            "txn_stages": results["checker"]["stages"], "segments": graph["segments"],
            "largest_segment_txns": graph["largest_segment"]["transactions"],
            "largest_segment_edges": graph["largest_segment"]["edges"]}


def figures(report: dict, sizes: list[int]) -> dict:
    """The report's figures, named engine.size.measure (sizes as asked:
    `10M`), the standalone cluster's under `standalone.`."""
    out = {}

    def runs(prefix: str, part: dict) -> None:
        for size, row in zip(sizes, part["runs"]):
            name = f"{prefix}{part.get('engine', 'spark')}.{record.size_label(size)}."
            out.update({name + "events": row["events"], name + "check_s": row["check_s"],
                        name + "first_check_s": row["first_check_s"], name + "bare_scan_s": row["bare_scan_s"],
                        name + "ratio": row["ratio"], name + "cpu_s": row["cpu_s"],
                        name + "peak_rss_mib": row["peak_rss_mb"],
                        name + "python_peak_rss_mib": row["python_peak_rss_mb"]})
            out.update({name + key: row[key] for key in ("transactions", "txn_check_s", "s_per_million_txn",
                                                          "txn_extra_s_per_million_txn", "txn_cpu_s", "segments",
                                                          "largest_segment_txns", "largest_segment_edges")
                        if key in row})
            out.update({name + key.replace("_mb", "_mib"): row[key] for key in ("txn_peak_rss_mb",
                                                                               "txn_python_peak_rss_mb") if key in row})
        if "cold_cli_s" in part:
            name = f"{prefix}{part.get('engine', 'spark')}.{record.size_label(sizes[-1])}."
            out.update({name + "cold_s": part["cold_cli_s"], name + "cold_bare_scan_s": part["cold_bare_scan_s"],
                        name + "cold_ratio": part["cold_ratio"]})

    runs("", report)
    if "standalone" in report:
        runs("standalone.", report["standalone"])
        out["standalone.executors_peak_rss_mib"] = report["standalone"]["executors_peak_rss_mb"]
    return out


def cold_check(folder: Path, master: str | None, conf: dict[str, str], engine: str) -> dict:
    """`harness check` of `folder` in a fresh process, timed, and a bare cold
    Spark scan of it in another (bench/cold_check.py), one after the other."""
    on_master = (["--spark-master", master] if master else []) + _conf_args(f"{k}={v}" for k, v in conf.items())
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "check", str(folder), "--out", str(folder),
                           "--engine", engine, *on_master], capture_output=True, text=True)
    cold = round(time.monotonic() - t0, 2)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "bench.cold_check", "--bare", str(folder)], capture_output=True, check=True)
    bare = round(time.monotonic() - t0, 2)
    return {"cold_cli_s": cold, "cold_cli_exit": proc.returncode, "cold_bare_scan_s": bare,
            "cold_ratio": round(cold / bare, 2)}


def _conf_args(pairs) -> list[str]:
    """--spark-conf pairs as arguments again, for a command this one runs."""
    return [arg for pair in pairs for arg in ("--spark-conf", pair)]


def on_standalone(args) -> dict:
    """The same sizes on a two-worker standalone cluster: `harness bench check
    --spark-master` of the cluster in a process of its own (this one's Spark
    context is local), its report, and the executors' peak memory."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        out = Path(tmp) / "standalone.json"
        with standalone(workers=2, cores=1, memory=args.standalone_memory) as cluster:
            print(f"on a standalone cluster ({cluster.url}: 2 workers x 1 core, {args.standalone_memory} each):",
                  file=sys.stderr, flush=True)
            with PeakRSS(interval=0.2, roots=cluster.pids) as executors:
                proc = subprocess.run([sys.executable, "-m", "harness.cli", "bench", "check", "--sizes", args.sizes,
                                       "--cache", args.cache, "--repeat", str(args.repeat),
                                       "--driver-memory", args.driver_memory, "--engine", args.engine,
                                       *([] if args.cold else ["--no-cold"]), *([] if args.txn else ["--no-txn"]),
                                       "--spark-master", cluster.url, "--out", str(out), "--no-record",
                                       # An executor as large as its worker: Spark's default (1g)
                                       # would wait for ever on smaller workers.
                                       "--spark-conf", f"spark.executor.memory={args.standalone_memory}",
                                       *_conf_args(args.spark_conf)],
                                      env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}, stdout=subprocess.DEVNULL)
            if proc.returncode != 0:
                raise UserError(f"the bench on the standalone cluster failed (exit {proc.returncode}, "
                                "its output above)")
        report = orjson.loads(out.read_bytes())
    report.update({"workers": 2, "cores_per_worker": 1, "memory_per_worker": args.standalone_memory,
                   "executors_peak_rss_mb": round(executors.peak / 2**20)})
    return report


def print_table(report: dict) -> None:
    """One table: each size's best check and its first, its bare scan, their
    ratio (of the best), the best check's CPU seconds and the bare scan's
    (the driver's, Python and JVM, on a cluster), and the driver's peak RSS
    (Python and JVM, and Python alone), on local[*] and, if measured, beside
    it on the standalone cluster."""
    cluster = report.get("standalone")
    where = f"engine {report.get('engine', 'spark')}, {report['master']}, {report['cpus']} CPUs"
    print(f"driver memory {report['driver_memory']}; {where}"
          + (f" | standalone: 2 workers x 1 core, {cluster['memory_per_worker']} each" if cluster else ""))
    head = (f"{'check s':>9} {'first s':>8} {'bare s':>7} {'ratio':>6} {'CPU s':>6} {'bare CPU':>8} "
            f"{'peak RSS':>10} {'Python':>10}")
    print(f"{'events':>12} {head}" + (f" | {head}" if cluster else ""))

    def cells(row: dict) -> str:
        return (f"{row['check_s']:>9.2f} {row['first_check_s']:>8.2f} {row['bare_scan_s']:>7.2f} {row['ratio']:>5.1f}x "
                f"{row['cpu_s']:>6.1f} {row['bare_scan_cpu_s']:>8.1f} "
                f"{row['peak_rss_mb']:>6,} MiB {row['python_peak_rss_mb']:>6,} MiB")

    for i, row in enumerate(report["runs"]):
        print(f"{row['events']:>12,} {cells(row)}" + (f" | {cells(cluster['runs'][i])}" if cluster else ""))
    if len(report["runs"]) > 1:
        first, last = report["runs"][0], report["runs"][-1]
        print(f"growth {first['events']:,} -> {last['events']:,} events: {last['check_s'] / first['check_s']:.1f}x")
    if "cold_cli_s" in report:
        print(f"cold `harness check` of the largest (JVM start included): {report['cold_cli_s']:.1f} s "
              f"(exit {report['cold_cli_exit']}), a bare cold scan {report['cold_bare_scan_s']:.1f} s: "
              f"{report['cold_ratio']:.1f}x" + (f"; standalone {cluster['cold_cli_s']:.1f} s" if cluster else "")
              + f"; Spark session start in this process: {report['session_start_s']:.1f} s")
    if cluster:
        print(f"executors' peak RSS on the cluster (both, whole run): {cluster['executors_peak_rss_mb']:,} MiB")
