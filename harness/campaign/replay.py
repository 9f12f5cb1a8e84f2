"""harness replay RUN: run a run again with its exact spec and fault schedule, N times.

The run folder's run.json holds the spec (flat settings) and the schedule
as it was planned; the replay writes both into one spec file (the schedule
as `[[schedule]]` tables, which the runner follows instead of planning from
the seed) and runs `harness run --config` on it N times, each in a process
of its own (like `harness calibrate`). Then it tallies, per anomaly, how many
replays showed it: the reproduction rate. replay.json (beside the run,
or in --out) holds every replay's record and the rates.

A replay repeats the schedule's intent, not every node: steps aimed at a
role (a partition's leader or replicas, the controller) hit whichever node
holds that role when the step runs, as in the first run; steps with
explicit node picks hit the same nodes.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from core.errors import UserError
from core.files import write_whole
from harness.campaign import calibrate, subrun
from harness.campaign.subrun import NOT_RUN
from harness.run import spec as specs

DEFAULT_TIMES = 3


def configure(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a run folder (holding run.json)")
    parser.add_argument("--times", type=int, default=DEFAULT_TIMES, metavar="N",
                        help=f"how many replays (default {DEFAULT_TIMES})")
    parser.add_argument("--out", metavar="DIR", help="where replay.json and the replays go (default: RUN)")
    parser.add_argument("--lock", metavar="FILE",
                        help="hold this lock file (flock) around each replay, for a machine shared with other runs")


# -- the run's spec, as a spec file


def load_run(run_dir: str | Path) -> tuple[dict, dict]:
    """A run folder -> (spec values with its schedule, run.json); a one-line UserError if it is not one."""
    path = Path(run_dir)
    try:
        info = json.loads((path / "run.json").read_text())
    except OSError:
        raise UserError(f"{run_dir}: no run.json (not a run folder)") from None
    except ValueError as e:
        raise UserError(f"{run_dir}/run.json: not JSON ({e})") from None
    if not isinstance(info, dict) or not isinstance(info.get("spec"), dict):
        raise UserError(f"{run_dir}/run.json: holds no spec")
    if not isinstance(info.get("schedule"), list):
        raise UserError(f"{run_dir}/run.json: holds no schedule (the run never got to plan one)")
    values = {k: v for k, v in info["spec"].items() if v is not None and k != "results"}
    values["schedule"] = info["schedule"]
    if not values["schedule"]:  # an empty list means "plan from the seed"; no faults were planned
        values["nemesis"] = []
    build(values, f"{run_dir}/run.json")
    return values, info


def build(values: dict, where: str) -> specs.TestSpec:
    """The spec these values make; a UserError naming `where` if they do not make one."""
    try:
        return specs.build(values)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


# -- one run of a spec file


@contextmanager
def held(lock: str | None):
    """flock(2) on `lock` while the body runs (the same lock as flock(1) takes); nothing without one."""
    if not lock:
        yield
        return
    try:
        f = open(lock, "a")
    except OSError as e:
        raise UserError(f"--lock {lock}: cannot open: {e.strerror}") from None
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_config(config: Path, out: Path, label: str, lock: str | None = None) -> calibrate.RunRecord:
    """`harness run --config CONFIG --results OUT/runs` in a process of its own
    (`harness.campaign.subrun`, as calibrate and nightly run theirs), holding `lock`
    around it; its record. Its seconds are the run's own, not the wait for
    the lock. A Ctrl-C lets the run heal and tear down, then goes on up."""
    with held(lock):
        o = subrun.run(["run", "--config", str(config), "--results", str(out / "runs")],
                       out / "logs" / f"{label}.log")
    record = calibrate.RunRecord(scenario=label, system="", seed=0, expect={}, verdict=o.verdict, met=False,
                                 run_dir=o.run_dir, seconds=o.seconds)
    if record.verdict == NOT_RUN:
        record.problem = o.problem
        return record
    record.counts = anomaly_counts(o.results)
    return record


def anomaly_counts(results: dict) -> dict[str, int]:
    """anomaly -> count, those a results.json found only."""
    return {a: v.get("count", 0) for a, v in sorted((results or {}).get("anomalies", {}).items())
            if isinstance(v, dict) and v.get("count", 0) > 0}


def rates(records: list) -> dict[str, list[int]]:
    """anomaly -> [replays showing it, replays carried out]."""
    done = [r for r in records if r.verdict != NOT_RUN]
    names = sorted({a for r in done for a in r.counts})
    return {a: [sum(a in r.counts for r in done), len(done)] for a in names}


def table(original: dict[str, int], records: list) -> str:
    done = [r for r in records if r.verdict != NOT_RUN]
    shown = rates(records)
    rows = ["| anomaly | in the run | replays showing it | rate |", "| --- | --- | --- | --- |"]
    for a in sorted(set(original) | set(shown)):
        k = shown.get(a, [0, len(done)])[0]
        rows.append(f"| {a} | {original.get(a, 0)} | {k} of {len(done)} | "
                    + (f"{k / len(done):.0%}" if done else "-") + " |")
    if len(rows) == 2:
        rows.append(f"| (none) | 0 | 0 of {len(done)} | - |")
    invalid = sum(r.verdict == "invalid" for r in done)
    rows.append(f"\n{len(records)} replays: {invalid} invalid, {len(done) - invalid} valid"
                + (f", {len(records) - len(done)} could not run" if len(done) < len(records) else ""))
    return "\n".join(rows)


# -- the command


def run(args) -> int:
    if args.times < 1:
        raise UserError(f"--times {args.times}: expected 1 or more")
    values, info = load_run(args.run_dir)
    original = anomaly_counts(subrun.read_json(Path(args.run_dir) / "results.json"))
    out = Path(args.out or args.run_dir)
    try:
        (out / "replay").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {out}: cannot create: {e.strerror}") from None
    config = out / "replay" / "spec.toml"
    config.write_text(specs.spec_file(values, f"harness replay of {args.run_dir}: its spec and fault schedule"))
    records: list = []
    started = time.monotonic()
    interrupted = False
    previous = signal.signal(signal.SIGTERM, calibrate._raise_interrupt)
    try:
        for i in range(1, args.times + 1):
            print(f"[{i}/{args.times}] replaying {args.run_dir} ...", file=sys.stderr, flush=True)
            record = run_config(config, out / "replay", f"replay-{i}", args.lock)
            records.append(record)
            _save(out, args.run_dir, original, records, started)
            print(f"    {record.verdict} ({record.seconds:.0f} s) "
                  f"{', '.join(record.counts) or record.problem or 'no anomalies'}  {record.run_dir or ''}",
                  file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    _save(out, args.run_dir, original, records, started)
    print(table(original, records))
    print(f"\nrecords: {out / 'replay.json'}")
    if interrupted:
        print(f"harness replay: interrupted after {len(records)} replays", file=sys.stderr)
        return 130
    return 0


def _save(out: Path, run_dir: str, original: dict, records: list, started: float) -> None:
    data = {"run": str(run_dir), "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - started, 1), "original": original,
            "rates": rates(records), "replays": [dataclasses.asdict(r) for r in records]}
    write_whole(out / "replay.json", json.dumps(data, indent=1) + "\n")
