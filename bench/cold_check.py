"""Benchmark: a cold `harness check` from the shell against a bare cold Spark
scan-and-group-by of the same history, alternated, each in a fresh process.

    harness bench cold HISTORY [--tries 3]

The bare scan is Spark's floor for any check from the shell: a Python
process that starts a session as `harness check` does (`local[*]`, its
settings, the driver's class-data archive `make setup` made), reads the
history's Parquet files, groups by process with a count, the records' sum
and the latest time, and collects. The stock bare scan is the same with a
session as Spark starts it out of the box: without the archive. The check
is the installed `harness check HISTORY --out DIR` (its results written to
a temporary folder). Each is timed as a whole process, tries alternated so
a change in the machine's load falls on all three; the medians and the
check's ratio to each bare scan are printed, and recorded (bench/record.py)
against TARGETS.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench import record
from checkers.load import file_uri
from checkers.spark import get_session
from core.errors import UserError
from core.history.files import resolve

TARGETS = (
    record.Target("ratio", "<=", 1.3, "issue 16: a cold harness check of a 60 s run's history (about 60,000 "
                  "events) at most 1.3x a bare cold Spark scan of it"),
)


def configure(parser) -> None:
    """Flags, for `harness bench cold`."""
    parser.add_argument("history", help="a Parquet history (a file, a folder of parts, or a run folder)")
    parser.add_argument("--tries", type=int, default=3, help="alternated tries of each (default 3)")
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")


def scan(spark, files) -> None:
    """The bare scan: the history's Parquet files read, grouped by process
    with a count, the records' sum and the latest time, collected (also
    what `checker_cost` times warm). Here, not there, so that the cold
    process imports no more than a session needs."""
    from pyspark.sql import functions as F

    spark.read.parquet(*[file_uri(f) for f in files]).groupBy("process").agg(
        F.count("*"), F.sum(F.size("records")), F.max("time")).collect()


def bare_scan(history: str, stock: bool = False) -> None:
    """The bare cold scan itself (run in a process of its own by `run`);
    `stock`: without the driver's class-data archive."""
    scan(get_session(class_archive=not stock), resolve(history).files)


def _timed(argv: list[str]) -> float:
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode not in (0, 1):  # 1: the check found anomalies, which is a check done
        raise UserError(f"{' '.join(argv[:4])} ...: exit {proc.returncode}: "
                        f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return seconds


def run(args) -> int:
    """Alternate the two, print each try and the medians' ratio; record them."""
    begun = record.start()
    source = resolve(args.history)
    if source.format != "parquet":
        raise UserError(f"{args.history}: a Parquet history, please (the bare scan reads Parquet)")
    if args.tries < 1:
        raise UserError("--tries: at least 1")
    stock, bare, check = [], [], []
    with tempfile.TemporaryDirectory(prefix="harness-bench-cold-") as out:
        for i in range(args.tries):
            stock.append(_timed([sys.executable, "-m", "bench.cold_check", "--stock", args.history]))
            bare.append(_timed([sys.executable, "-m", "bench.cold_check", "--bare", args.history]))
            check.append(_timed([sys.executable, "-m", "harness.cli", "check", args.history, "--out", out]))
            print(f"try {i + 1}: stock bare cold scan {stock[-1]:.2f} s, bare cold scan {bare[-1]:.2f} s, "
                  f"cold harness check {check[-1]:.2f} s")
    ratio = statistics.median(check) / statistics.median(bare)
    ratio_stock = statistics.median(check) / statistics.median(stock)
    print(f"median: stock bare cold scan {statistics.median(stock):.2f} s, bare cold scan "
          f"{statistics.median(bare):.2f} s, cold harness check {statistics.median(check):.2f} s: "
          f"{ratio:.2f}x the bare scan, {ratio_stock:.2f}x the stock one")
    measured = {"history": args.history, "stock_bare_s": stock, "bare_s": bare, "check_s": check,
                "ratio_of_medians": round(ratio, 3), "ratio_to_stock": round(ratio_stock, 3)}
    if args.out:
        Path(args.out).write_bytes(orjson.dumps(measured))
    record.write(args, "cold", begun, {
        "events": events(source.files), "check_s": round(statistics.median(check), 2),
        "bare_scan_s": round(statistics.median(bare), 2), "stock_bare_scan_s": round(statistics.median(stock), 2),
        "ratio": round(ratio, 2), "ratio_to_stock": round(ratio_stock, 2)}, TARGETS, details=measured)
    return 0


def events(files) -> int:
    """Events in the history's Parquet files, from their footers."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


if __name__ == "__main__":
    if sys.argv[1:2] in (["--bare"], ["--stock"]) and len(sys.argv) == 3:
        bare_scan(sys.argv[2], stock=sys.argv[1] == "--stock")
    else:
        sys.exit("usage: python -m bench.cold_check --bare|--stock HISTORY (harness bench cold runs it)")
