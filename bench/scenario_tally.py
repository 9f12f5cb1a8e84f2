"""Run one named scenario several times and tally what the checker found.

    python -m bench.scenario_tally kafka-acks1-leader-kill --runs 10 [--results DIR] [--first-seed 1]
                                   [-- EXTRA harness run FLAGS]

Each run is `harness run --scenario NAME --seed S` (seeds first-seed,
first-seed+1, ...) in a subprocess, as a user runs it. Prints one line per
run (exit status, each anomaly found with its count, whether the
scenario's expectation was met, seconds) and a summary such as
"lost-write in 9 of 10 runs"; `--json FILE` keeps the raw numbers, and the
tally is recorded (bench/record.py), figures named by scenario
(`kafka-acks1-leader-kill.found.lost-write`: runs that found it).
docs/scenarios.md records the tallies. It uses nothing of the project but
the `harness` command and bench/record.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import record

HARNESS = str(Path(sys.executable).with_name("harness"))


def one_run(name: str, seed: int, results: Path, extra: list[str]) -> dict:
    """`harness run --scenario NAME --seed SEED` in a subprocess: its exit and what it found."""
    started = time.monotonic()
    proc = subprocess.run([HARNESS, "run", "--scenario", name, "--seed", str(seed), "--results", str(results),
                           *extra], capture_output=True, text=True)
    seconds = time.monotonic() - started
    runs = sorted(results.glob(f"{name}/*/run.json"), key=lambda p: p.stat().st_mtime)
    row = {"seed": seed, "exit": proc.returncode, "seconds": round(seconds, 1), "found": None, "met": None,
           "dir": str(runs[-1].parent) if runs else None}
    if runs and (runs[-1].parent / "results.json").is_file():
        results_json = json.loads((runs[-1].parent / "results.json").read_text())
        row["found"] = {name: a["count"] for name, a in results_json["anomalies"].items() if a["count"]}
        row["met"] = json.loads(runs[-1].read_text()).get("expectation", {}).get("met")
    if proc.returncode == 2:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--results", help="results folder (default: a temporary one, removed)")
    parser.add_argument("--json", help="write the rows here")
    record.add_arguments(parser)
    # Anything else (after --) goes to `harness run` as it is.
    args, extra = parser.parse_known_args(argv)
    begun = record.start()
    args.extra = [a for a in extra if a != "--"]
    tmp = None
    results = Path(args.results) if args.results else Path(tmp := tempfile.mkdtemp(prefix="tally-"))
    rows = []
    for i in range(args.runs):
        row = one_run(args.scenario, args.first_seed + i, results, args.extra)
        rows.append(row)
        found = ", ".join(f"{name} {n}" for name, n in (row["found"] or {}).items()) or "nothing"
        print(f"seed {row['seed']:>3}: exit {row['exit']}  found {found}  expectation met {row['met']}  "
              f"{row['seconds']:.0f} s" + (f"  {row['error']}" if "error" in row else ""), flush=True)
    runs_with: dict[str, int] = {}
    for r in rows:
        for name in r["found"] or {}:
            runs_with[name] = runs_with.get(name, 0) + 1
    met = sum(1 for r in rows if r["met"])
    tally = "; ".join(f"{name} in {n} of {len(rows)} runs" for name, n in runs_with.items()) or "nothing found"
    print(f"{args.scenario}: {tally}; expectation met in {met} of {len(rows)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    name = f"{args.scenario}."
    record.write(args, "scenario_tally", begun, {
        name + "runs": len(rows), name + "expectation_met": met,
        name + "median_s": statistics.median(r["seconds"] for r in rows) if rows else None,
        **{f"{name}found.{anomaly}": n for anomaly, n in runs_with.items()}}, details=rows)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
