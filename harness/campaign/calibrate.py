"""harness calibrate: run named scenarios several times each and tally how often the verdict is right.

For every scenario named (default: every scenario with an [expect] table),
N runs with distinct seeds (1..N, or --seeds), one after another, each the
command a user would type: `harness run --scenario NAME --seed S` in a
process of its own (so each run provisions, heals and tears down its own
cluster exactly as that command does). Each run becomes one record (seed,
verdict, anomaly counts, whether the expectation was met, run directory)
in DIR/calibration.json, written after every run; DIR/calibration.md holds
the table, which is also printed. Running the same command again resumes:
a (scenario, seed) already recorded is not run again. A run that could not
be carried out is recorded as such and counts as a miss, never as a pass;
a run cut short by Ctrl-C is not recorded at all.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.errors import UserError
from core.files import write_whole
from harness.campaign import subrun
from harness.campaign.subrun import NOT_RUN
from harness.run import scenarios
from harness.run import spec as specs

DEFAULT_RUNS = 5
DEFAULT_OUT = "results/calibration"


def configure(parser) -> None:
    parser.add_argument("--runs", type=int, default=None, metavar="N",
                        help=f"runs per scenario, seeds 1..N (default {DEFAULT_RUNS})")
    parser.add_argument("--scenario", action="append", metavar="NAME",
                        help="a scenario to calibrate (repeatable; default every one with an [expect] table)")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="S", help="these seeds instead of 1..N")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"where calibration.json, calibration.md and the runs go (default {DEFAULT_OUT})")


@dataclass
class RunRecord:
    """One run of one scenario with one seed, as the calibration keeps it."""

    scenario: str
    system: str
    seed: int
    expect: dict
    verdict: str  # valid, invalid, or "could not run"
    met: bool  # a run that could not be carried out never meets its expectation
    counts: dict = field(default_factory=dict)  # anomaly -> count, those found only
    misses: list = field(default_factory=list)
    run_dir: str | None = None
    problem: str | None = None  # why it could not be carried out
    seconds: float = 0.0


def seeds_for(runs: int | None, seeds: list[int] | None) -> list[int]:
    """The seeds each scenario runs with; a UserError for nonsense."""
    if runs is not None and runs < 1:
        raise UserError(f"--runs {runs}: expected 1 or more")
    if seeds is not None:
        if any(s < 0 for s in seeds):
            raise UserError(f"--seeds: expected non-negative integers, not {min(seeds)}")
        if len(set(seeds)) != len(seeds):
            raise UserError("--seeds: each seed once (the same seed twice is the same run)")
        if runs is not None and runs != len(seeds):
            raise UserError(f"--runs {runs} with {len(seeds)} --seeds: give one or the other")
        return list(seeds)
    return list(range(1, (runs or DEFAULT_RUNS) + 1))


def chosen_scenarios(names: list[str] | None) -> list[dict]:
    """The scenarios named (each must exist and have an [expect] table), or all that do."""
    if not names:
        known = [s for s in scenarios.all_scenarios() if s["expect"]]
        if not known:
            raise UserError(f"no scenario with an [expect] table in {specs.SCENARIOS}")
        return known
    return [scenarios.load(specs.scenario_file(name)) for name in dict.fromkeys(names)]


def run_one(scenario: dict, seed: int, out: Path) -> RunRecord:
    """`harness run --scenario NAME --seed S` in a process of its own
    (`harness.campaign.subrun`); its record. A Ctrl-C lets the run heal and tear
    down, then KeyboardInterrupt goes on up, unrecorded."""
    name = scenario["name"]
    o = subrun.run(["run", "--scenario", name, "--seed", str(seed), "--results", str(out / "runs")],
                   out / "logs" / f"{name}-seed{seed}.log")
    record = RunRecord(scenario=name, system=scenario["system"], seed=seed, expect=scenario["expect"],
                       verdict=o.verdict, met=False, run_dir=o.run_dir, seconds=o.seconds)
    if record.verdict == NOT_RUN:
        record.problem = o.problem
        record.misses = [f"not carried out: {record.problem}"]
        return record
    results = o.results
    record.counts = {a: v.get("count", 0) for a, v in sorted(results.get("anomalies", {}).items())
                     if isinstance(v, dict) and v.get("count", 0) > 0}
    record.met, record.misses = specs.expectation(scenario["expect"], results)
    return record


# -- the record file


def load_records(path: Path) -> list[RunRecord]:
    """The records of an earlier, possibly interrupted, calibration in this folder."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        return [RunRecord(**r) for r in data["runs"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{path}: not a calibration record ({type(e).__name__}: {e}); "
                        "move it away or choose another --out") from None


def save(out: Path, records: list[RunRecord]) -> None:
    """calibration.json and calibration.md, each replaced whole (a crash leaves the old one)."""
    data = {"written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": "harness calibrate " + " ".join(sys.argv[2:]),
            "runs": [asdict(r) for r in records]}
    write_whole(out / "calibration.json", json.dumps(data, indent=1) + "\n")
    write_whole(out / "calibration.md", table(records) + "\n")


def table(records: list[RunRecord]) -> str:
    """The markdown table: one row per scenario, in the order first recorded."""
    rows = ["| scenario | system | expected | runs | expectation met | seeds | anomalies (runs showing them) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    by_name: dict[str, list[RunRecord]] = {}
    for r in records:
        by_name.setdefault(r.scenario, []).append(r)
    for name, runs in by_name.items():
        not_run = sum(r.verdict == NOT_RUN for r in runs)
        shown: dict[str, int] = {}
        for r in runs:
            for anomaly in r.counts:
                shown[anomaly] = shown.get(anomaly, 0) + 1
        rows.append("| " + " | ".join([
            f"`{name}`", runs[0].system, specs.expect_words(runs[0].expect),
            f"{len(runs)}" + (f" ({not_run} could not run)" if not_run else ""),
            f"{sum(r.met for r in runs)}/{len(runs)}",
            ", ".join(str(r.seed) for r in runs),
            ", ".join(f"{a} ({n})" for a, n in sorted(shown.items())) or "none",
        ]) + " |")
    return "\n".join(rows)


# -- the command


def run(args) -> int:
    seeds = seeds_for(args.runs, args.seeds)
    chosen = chosen_scenarios(args.scenario)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {args.out}: cannot create: {e.strerror}") from None
    records = load_records(out / "calibration.json")
    done = {(r.scenario, r.seed) for r in records}
    todo = [(s, seed) for s in chosen for seed in seeds if (s["name"], seed) not in done]
    if len(todo) < len(chosen) * len(seeds):
        print(f"resuming: {len(chosen) * len(seeds) - len(todo)} of {len(chosen) * len(seeds)} runs "
              f"already recorded in {out / 'calibration.json'}", file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        with subrun.shared_checks(out / "logs"):
            for i, (scenario, seed) in enumerate(todo, 1):
                print(f"[{i}/{len(todo)}] {scenario['name']} seed {seed} ...", file=sys.stderr, flush=True)
                record = run_one(scenario, seed, out)
                records.append(record)
                save(out, records)
                verdict = record.verdict + ("" if record.verdict == NOT_RUN else
                                            f", expectation {'met' if record.met else 'NOT met'}")
                print(f"    {verdict} ({record.seconds:.0f} s) {record.run_dir or record.problem}",
                      file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    save(out, records)
    print(table([r for r in records if r.scenario in {s["name"] for s in chosen}]))
    print(f"\nrecords: {out / 'calibration.json'}, table: {out / 'calibration.md'}")
    if interrupted:
        print(f"harness calibrate: interrupted; {len(records)} runs recorded; the same command resumes",
              file=sys.stderr)
        return 130
    return 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
