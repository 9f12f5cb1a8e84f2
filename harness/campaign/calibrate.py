"""harness calibrate: run named scenarios several times each and tally how often the verdict is right.

For every scenario named (default: every scenario with an [expect] table),
N runs with distinct seeds (1..N, or --seeds), one after another, each the
command a user would type: `harness run --scenario NAME --seed S` in a
process of its own (so each run provisions, heals and tears down its own
cluster exactly as that command does). Each run becomes one record (seed,
verdict, anomaly counts, whether the expectation was met, run directory,
the commit it ran on) in DIR/calibration.json, written after every run;
DIR/calibration.md holds the table, which is also printed. Running the same command again resumes:
a (scenario, seed) already recorded is not run again. A run that could not
be carried out is recorded as such and counts as a miss, never as a pass;
a run cut short by Ctrl-C is not recorded at all.

With --mutants, the scenarios chosen are those that plant bugs in the own
broker (`debug-bug`), each run N times and its control N times (`harness
run --scenario NAME --control`: the same settings and faults without the
bugs, expecting a valid run or the scenario's [control-expect]); the
mutation score table says, per planted bug, how often it was caught and
how often its control met its expectation. A bug counts as caught only
beside a control that does: otherwise the scenario fails whatever the
broker does.
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
from core.provenance import git_state
from harness.campaign import subrun
from harness.campaign.subrun import NOT_RUN
from harness.run import scenarios
from harness.run import spec as specs
from infra.kafka_dist import DEFAULT_VERSION

DEFAULT_RUNS = 5
DEFAULT_OUT = "results/calibration"


def configure(parser) -> None:
    parser.add_argument("--runs", type=int, default=None, metavar="N",
                        help=f"runs per scenario, seeds 1..N (default {DEFAULT_RUNS})")
    parser.add_argument("--scenario", action="append", metavar="NAME",
                        help="a scenario to calibrate (repeatable; default every one with an [expect] table)")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="S", help="these seeds instead of 1..N")
    parser.add_argument("--mutants", action="store_true",
                        help="the scenarios that plant bugs (debug-bug), each with its control: the mutation score")
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
    bugs: list = field(default_factory=list)  # the bugs the scenario plants (debug-bug)
    control: bool = False  # the scenario's control: bugs left out, expecting specs.control_expectation
    commit: str | None = None  # the code the run was measured on (core.provenance.git_state)
    dirty: bool | None = None

    @property
    def label(self) -> str:
        return f"{self.scenario} (control)" if self.control else self.scenario


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


def chosen_scenarios(names: list[str] | None, mutants: bool = False) -> list[dict]:
    """The scenarios named (each must exist and have an [expect] table), or all
    that do; with `mutants`, of those the ones that plant bugs."""
    if not names:
        chosen = [s for s in scenarios.all_scenarios() if s["expect"]]
    else:
        chosen = [scenarios.load(specs.scenario_file(name)) for name in dict.fromkeys(names)]
    if mutants:
        chosen = [s for s in chosen if bugs_of(s)]
    if not chosen:
        raise UserError(f"no scenario {'that plants a bug ' if mutants else ''}with an [expect] table "
                        f"in {specs.SCENARIOS}" + (f" among {', '.join(names)}" if names else ""))
    return chosen


def bugs_of(scenario: dict) -> list[str]:
    """The bugs a scenario plants (its `debug-bug` setting, as `harness run --control` reads it)."""
    return specs.planted_bugs(scenario["settings"])


def system_label(scenario: dict) -> str:
    """The system a scenario runs, for the tables: Kafka with its release (and
    KRaft, on a release that also has ZooKeeper), since verdicts differ by release."""
    if scenario["system"] != "kafka":
        return scenario["system"]
    version = scenario["settings"].get("kafka_version") or DEFAULT_VERSION
    kraft = scenario["settings"].get("kafka_mode") == "kraft" and version.startswith("3.")
    return f"kafka {version}" + (" KRaft" if kraft else "")


def run_one(scenario: dict, seed: int, out: Path, control: bool = False) -> RunRecord:
    """`harness run --scenario NAME --seed S` (with `control`: `--control`) in a
    process of its own (`harness.campaign.subrun`); its record. A Ctrl-C lets
    the run heal and tear down, then KeyboardInterrupt goes on up, unrecorded."""
    name = scenario["name"]
    code = git_state()
    o = subrun.run(["run", "--scenario", name, "--seed", str(seed), "--results", str(out / "runs")]
                   + (["--control"] if control else []),
                   out / "logs" / f"{name}{'-control' if control else ''}-seed{seed}.log")
    record = RunRecord(scenario=name, system=system_label(scenario), seed=seed,
                       expect=specs.control_expectation(scenario["settings"]) if control else scenario["expect"],
                       verdict=o.verdict, met=False,
                       run_dir=o.run_dir, seconds=o.seconds, bugs=bugs_of(scenario), control=control, **code)
    if record.verdict == NOT_RUN:
        record.problem = o.problem
        record.misses = [f"not carried out: {record.problem}"]
        return record
    results = o.results
    record.counts = {a: v.get("count", 0) for a, v in sorted(results.get("anomalies", {}).items())
                     if isinstance(v, dict) and v.get("count", 0) > 0}
    record.met, record.misses = specs.expectation(record.expect, results)
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
    mutants = mutation_table(records)
    write_whole(out / "calibration.md", table(records) + "\n" + (f"\n{mutants}\n" if mutants else ""))


def measured_on(runs: list[RunRecord]) -> str:
    """The commits the runs were measured on, short, in order ("+" for a tree that differed)."""
    commits = dict.fromkeys((r.commit or "?")[:7] + ("+" if r.dirty else "") for r in runs)
    return ", ".join(commits)


def _shown(runs: list[RunRecord]) -> str:
    """The anomalies the runs showed, each with how many runs showed it."""
    shown: dict[str, int] = {}
    for r in runs:
        for anomaly in r.counts:
            shown[anomaly] = shown.get(anomaly, 0) + 1
    return ", ".join(f"{a} ({n})" for a, n in sorted(shown.items())) or "none"


def _cell(text: str) -> str:
    """Text for a markdown table's cell: a `|` in it (an expected log pattern's) escaped."""
    return text.replace("|", "\\|")


def table(records: list[RunRecord]) -> str:
    """The markdown table: one row per scenario (and control), in the order first recorded."""
    rows = ["| scenario | system | expected | runs | expectation met | seeds | anomalies (runs showing them) | commit |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    by_name: dict[str, list[RunRecord]] = {}
    for r in records:
        by_name.setdefault(r.label, []).append(r)
    for name, runs in by_name.items():
        not_run = sum(r.verdict == NOT_RUN for r in runs)
        rows.append("| " + " | ".join([
            f"`{name}`", runs[0].system, _cell(specs.expect_words(runs[0].expect)),
            f"{len(runs)}" + (f" ({not_run} could not run)" if not_run else ""),
            f"{sum(r.met for r in runs)}/{len(runs)}",
            ", ".join(str(r.seed) for r in runs),
            _shown(runs),
            measured_on(runs),
        ]) + " |")
    return "\n".join(rows)


def mutation_table(records: list[RunRecord]) -> str:
    """The mutation score: one row per scenario that plants bugs, how often the
    bug was caught (the scenario's expectation met) and how often its control
    met its own; '' when no run planted a bug."""
    planted: dict[str, list[RunRecord]] = {}
    controls: dict[str, list[RunRecord]] = {}
    for r in records:
        if r.bugs:
            (controls if r.control else planted).setdefault(r.scenario, []).append(r)
    if not planted:
        return ""
    rows = ["| planted bug | scenario | caught | control met | anomalies when caught (runs) | commit |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name, runs in planted.items():
        ctl = controls.get(name, [])
        rows.append(f"| {', '.join(f'`{b}`' for b in runs[0].bugs)} | `{name}` | "
                    f"{sum(r.met for r in runs)} of {len(runs)} | "
                    + (f"{sum(r.met for r in ctl)} of {len(ctl)}" if ctl else "not run")
                    + f" | {_shown([r for r in runs if r.met])} | {measured_on(runs + ctl)} |")
    return "\n".join(rows)


# -- the command


def run(args) -> int:
    seeds = seeds_for(args.runs, args.seeds)
    chosen = chosen_scenarios(args.scenario, args.mutants)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {args.out}: cannot create: {e.strerror}") from None
    records = load_records(out / "calibration.json")
    done = {(r.scenario, r.seed, r.control) for r in records}
    kinds = (False, True) if args.mutants else (False,)
    # Seed by seed: a calibration cut short holds runs of every scenario, not all of a few.
    planned = [(s, seed, control) for seed in seeds for s in chosen for control in kinds]
    todo = [(s, seed, control) for s, seed, control in planned if (s["name"], seed, control) not in done]
    if len(todo) < len(planned):
        print(f"resuming: {len(planned) - len(todo)} of {len(planned)} runs "
              f"already recorded in {out / 'calibration.json'}", file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        with subrun.shared_checks(out / "logs"):
            for i, (scenario, seed, control) in enumerate(todo, 1):
                print(f"[{i}/{len(todo)}] {scenario['name']}{' (control)' if control else ''} seed {seed} ...",
                      file=sys.stderr, flush=True)
                record = run_one(scenario, seed, out, control)
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
    shown = [r for r in records if r.scenario in {s["name"] for s in chosen}]
    print(table(shown))
    mutants = mutation_table(shown)
    if mutants:
        print("\n" + mutants)
    print(f"\nrecords: {out / 'calibration.json'}, table: {out / 'calibration.md'}")
    if interrupted:
        print(f"harness calibrate: interrupted; {len(records)} runs recorded; the same command resumes",
              file=sys.stderr)
        return 130
    return 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
