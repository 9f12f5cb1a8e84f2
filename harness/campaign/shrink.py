"""harness shrink RUN: search for a smaller fault schedule that still fails, and write it as a scenario.

From a failing run, a delta-debugging search (after Zeller's ddmin, kept
simple and bounded) tries smaller versions of the run's spec, in this order:

  1. drop fault steps (a start with the stop of the same fault, which need
     not be the next stop when faults overlap): first half of them, then
     quarters, ... then one at a time; the others keep their times; await
     steps stay (alone they inject nothing);
  2. halve every fault's duration (at least 1 s), each fault keeping its
     start time, steps re-ordered by time where the stops move;
  3. fewer nodes (5 -> 3; faults whose picked nodes are gone go with them);
  4. fewer topic partitions (halved);
  5. a lower rate (halved);
  6. a shorter run: the time limit cut to the last fault's end plus a
     margin, and a shorter lead-in before the first fault.

A candidate is replayed (`harness run --config`, as `harness replay` does)
until it has failed k times or can no longer reach k of n; it is accepted
when at least k of n replays show the target anomalies (by default the
original run's first error anomaly, the one its ending line names). After
an acceptance the search starts again from the smaller spec; it ends when
no reduction is accepted (the result is minimal for these reductions), or
the budget of replays is spent. The smallest accepted spec is written as a
scenario file (a comment header says its reproduction rate and how it was
found); `harness run --config FILE` runs it. Ctrl-C stops after the current
replay and writes the best so far.

The search (`search`) is a pure function of the spec and a replay function;
the command supplies real replays.
"""

from __future__ import annotations

import copy
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from checkers.registry import NAMES as ANOMALIES
from core.errors import UserError
from core.files import write_whole
from harness.campaign import calibrate, replay, subrun
from harness.campaign.subrun import NOT_RUN
from harness.run import spec as specs
from nemesis.schedule import ROLE_MODES

DEFAULT_K, DEFAULT_N, DEFAULT_BUDGET = 2, 3, 30
MARGIN_S = 10.0  # seconds of run kept after the last fault ends: time for the loss to show (elections, truncation)
LEAD_IN_S = 5.0  # the least lead-in before the first fault: the clients and leaders settle first
MIN_RATE = 50.0


def configure(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a failing run's folder (holding run.json and results.json)")
    parser.add_argument("--k", type=int, default=DEFAULT_K, metavar="K",
                        help=f"replays that must fail, of --n (default {DEFAULT_K})")
    parser.add_argument("--n", type=int, default=DEFAULT_N, metavar="N",
                        help=f"replays per candidate at most (default {DEFAULT_N})")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, metavar="R",
                        help=f"most replays in all (default {DEFAULT_BUDGET}); each is a whole run")
    parser.add_argument("--anomaly", action="append", metavar="NAME",
                        help="a replay fails when it shows this anomaly (repeatable: all of them); "
                             "default: the run's first error anomaly")
    parser.add_argument("--out", metavar="FILE", help="the scenario file to write (default RUN/shrunk.toml)")
    parser.add_argument("--work", metavar="DIR",
                        help="where the candidates, their runs and shrink.json go (default RUN/shrink)")
    parser.add_argument("--lock", metavar="FILE",
                        help="hold this lock file (flock) around each replay, for a machine shared with other runs")


# -- candidates


def pairs(schedule: list[dict]) -> list[list[int]]:
    """The fault steps as [start index, stop index], in the order they start (a start
    never stopped: [start index]). A stop goes with the start of the fault it names:
    faults may overlap, never two of one name. Await steps are in no pair."""
    out: list[list[int]] = []
    open_: dict[str, list[int]] = {}
    for i, step in enumerate(schedule):
        if step["action"] == "start":
            out.append([i])
            open_[step["fault"]] = out[-1]
        elif step["action"] == "stop" and step.get("fault") in open_:
            open_.pop(step["fault"]).append(i)
    return out


def halved(schedule: list[dict], ps: list[list[int]]) -> list[dict]:
    """Every fault half as long (at least 1 s; one already shorter keeps its length), each
    keeping its start time; the steps in time order again (a stop that moved before other
    steps goes before them; steps at one time keep their order)."""
    at, t = [], 0.0
    for step in schedule:
        t += step["delay"]
        at.append(t)
    when = list(at)
    for p in ps:
        if len(p) == 2:
            length = at[p[1]] - at[p[0]]
            when[p[1]] = at[p[0]] + max(min(1.0, length), round(length / 2, 3))
    order = sorted(range(len(schedule)), key=lambda i: (when[i], i))
    out, last = [], 0.0
    for i in order:
        out.append(dict(schedule[i], delay=round(max(0.0, when[i] - last), 3)))
        last = max(last, when[i])
    return out


def without(schedule: list[dict], drop: set[int]) -> list[dict]:
    """The schedule without the steps at `drop`; each dropped wait goes to the next step kept, so the
    others keep their times."""
    out, carry = [], 0.0
    for i, step in enumerate(schedule):
        if i in drop:
            carry += step["delay"]
            continue
        out.append(dict(step, delay=round(step["delay"] + carry, 3)))
        carry = 0.0
    return out


def _with(values: dict, **changes) -> dict:
    v = copy.deepcopy(values)
    v.update(changes)
    if not v.get("schedule"):  # no steps left: no faults (an empty schedule would mean "plan from the seed")
        v["schedule"], v["nemesis"] = [], []
    return v


def fault_time(schedule: list[dict]) -> float:
    """When the last step happens, in seconds from the start of the fault phase."""
    return sum(s["delay"] for s in schedule)


def reductions(values: dict) -> Iterator[tuple[str, dict]]:
    """Smaller versions of a spec, each with what changed, in the order they are tried."""
    schedule = values["schedule"]
    ps = pairs(schedule)
    # 1. Drop fault steps, ddmin's way: halves, quarters, ... single ones; at least one fault stays.
    chunks = 2
    while len(ps) > 1 and chunks <= 2 * len(ps):
        size = max(1, -(-len(ps) // chunks))
        for first in range(0, len(ps), size):
            chunk = ps[first:first + size]
            if len(chunk) == len(ps):
                continue
            drop = {i for p in chunk for i in p}
            which = (f"fault {first + 1}" if len(chunk) == 1 else f"faults {first + 1}-{first + len(chunk)}")
            yield f"drop {which} of {len(ps)}", _with(values, schedule=without(schedule, drop))
        if size == 1:
            break
        chunks *= 2
    # 2. Halve every fault's duration; later faults keep their start times.
    if any(len(p) == 2 and fault_time(schedule[:p[1] + 1]) - fault_time(schedule[:p[0] + 1]) > 1.0 for p in ps):
        yield "halve fault durations", _with(values, schedule=halved(schedule, ps))
    # 3. Fewer nodes.
    if values.get("nodes", 5) > 3:
        n = 3
        drop: set[int] = set()
        steps = copy.deepcopy(schedule)
        for p in ps:
            start = steps[p[0]]
            fits = [x for x in start.get("picks", []) if x < n]
            if start["mode"] not in ROLE_MODES and start["fault"] != "partition" and len(fits) < len(start["picks"]):
                drop |= set(p)  # a fault on nodes that are gone
            start["picks"] = fits
        steps = without(steps, drop)
        if pairs(steps):
            rf = min(values.get("replication_factor", 3), n)
            yield f"{n} nodes instead of {values.get('nodes', 5)}", _with(
                values, nodes=n, zk_nodes=min(values.get("zk_nodes", 3), n), replication_factor=rf,
                min_insync=min(values.get("min_insync", 2), rf), schedule=steps)
    # 4. Fewer topic partitions.
    partitions = values.get("partitions", 5)
    if partitions > 1:
        p2 = max(1, partitions // 2)
        steps = [dict(s, partition=s["partition"] % p2) if "partition" in s else dict(s) for s in schedule]
        yield f"{p2} partition{'s' if p2 > 1 else ''} instead of {partitions}", _with(values, partitions=p2,
                                                                                        schedule=steps)
    # 5. A lower rate.
    rate = values.get("rate", 500.0)
    if rate and rate / 2 >= MIN_RATE:
        yield f"rate {rate / 2:g}/s instead of {rate:g}", _with(values, rate=rate / 2)
    # 6. A shorter run: the tail after the last fault, and the lead-in before the first.
    end = fault_time(schedule) + MARGIN_S
    limit = values.get("time_limit", 60.0)
    if ps and end < limit - 1:
        yield f"time limit {end:g} s instead of {limit:g}", _with(values, time_limit=round(end, 3))
    if ps and schedule[0]["delay"] > LEAD_IN_S:
        lead = max(LEAD_IN_S, round(schedule[0]["delay"] / 2, 3))
        cut = schedule[0]["delay"] - lead
        steps = [dict(schedule[0], delay=lead)] + [dict(s) for s in schedule[1:]]
        yield (f"first fault after {lead:g} s instead of {schedule[0]['delay']:g}",
               _with(values, schedule=steps, time_limit=round(max(limit - cut, fault_time(steps) + 1), 3)))


# -- the search


@dataclass
class Trial:
    """One candidate, as the search tried it."""

    change: str
    failed: int  # replays that showed the target anomalies
    replays: int  # replays run
    accepted: bool
    note: str = ""


@dataclass
class Result:
    values: dict  # the smallest spec that was accepted (the original if none was)
    changes: list[str] = field(default_factory=list)  # the accepted changes, in order
    failed: int | None = None  # the best's replays that failed, and how many ran (None: the original, not replayed)
    replays: int | None = None
    trials: list[Trial] = field(default_factory=list)
    used: int = 0  # replays in all
    stop: str = ""  # why the search ended: minimal, budget, interrupted


def search(values: dict, fails: Callable[[dict], bool], k: int = DEFAULT_K, n: int = DEFAULT_N,
           budget: int = DEFAULT_BUDGET, progress: Callable[[str], None] = lambda line: None,
           accepted: Callable[[Result], None] = lambda result: None) -> Result:
    """The smallest spec the reductions reach from `values` whose replays fail
    at least k times of n, within `budget` replays. `fails(spec values)`
    replays once and says whether the target anomalies showed; a
    KeyboardInterrupt from it ends the search with the best so far.
    `accepted` hears of each acceptance (to save the best at once)."""
    result = Result(values=copy.deepcopy(values))
    tried: set[str] = set()
    try:
        while True:
            for change, candidate in reductions(result.values):
                key = json.dumps(candidate, sort_keys=True)
                if key in tried:
                    continue
                tried.add(key)
                if result.used >= budget:
                    result.stop = "budget"
                    return result
                failed = ran = 0
                while ran < n and failed < k and failed + (n - ran) >= k and result.used < budget:
                    ran += 1
                    result.used += 1
                    progress(f"[{result.used}/{budget}] {change}: replay {ran} ...")
                    failed += bool(fails(candidate))
                ok = failed >= k
                note = "" if ok or failed + (n - ran) < k else "budget spent"
                result.trials.append(Trial(change, failed, ran, ok, note))
                progress(f"    {change}: failed {failed} of {ran}: " + ("accepted" if ok else "rejected")
                         + (f" ({note})" if note else ""))
                if ok:
                    result.values, result.failed, result.replays = candidate, failed, ran
                    result.changes.append(change)
                    accepted(result)
                    break
            else:
                result.stop = "minimal"
                return result
    except KeyboardInterrupt:
        result.stop = "interrupted"
        return result


# -- the command


def targets_of(results: dict | None, chosen: list[str] | None, where: str) -> list[str]:
    """The anomalies a replay must show to count as failing."""
    if chosen:
        for name in chosen:
            if name not in ANOMALIES:
                raise UserError(f"--anomaly {name!r}: not an anomaly (known: {', '.join(ANOMALIES)})")
        return list(dict.fromkeys(chosen))
    if not results or not isinstance(results.get("anomalies"), dict):
        raise UserError(f"{where}: no results.json (the run was not checked); nothing to shrink")
    top = next((a for a, v in results["anomalies"].items()
                if isinstance(v, dict) and v.get("error") and v.get("count")), None)
    if top is None:
        raise UserError(f"{where}: the run found no error anomaly; nothing to shrink")
    return [top]


def summary(values: dict) -> str:
    """A spec's size in words: faults, nodes, partitions, rate, time."""
    faults = len(pairs(values["schedule"]))
    return (f"{faults} fault{'' if faults == 1 else 's'}, {values.get('nodes')} nodes, "
            f"{values.get('partitions')} partitions, rate {values.get('rate'):g}/s, "
            f"time limit {values.get('time_limit'):g} s")


def scenario_text(original: dict, result: Result, run_dir: str, targets: list[str], k: int, n: int,
                  budget: int, seconds: float) -> str:
    """The shrunk spec as a scenario file, its header saying how it was found."""
    best = copy.deepcopy(result.values)
    best["name"] = f"{original.get('name', 'run')}-shrunk"[:100]
    best["expect"] = {"valid": False, **{a: "present" for a in targets}}
    best["description"] = (f"Shrunk by `harness shrink` from {run_dir} ({original.get('name', '')}): "
                           f"{summary(best)}, the fault schedule explicit. Expected: {', '.join(targets)}.")
    if result.failed is None:
        rate = "not replayed (no smaller candidate was accepted; this is the original)"
    else:
        rate = f"{result.failed} of {result.replays} replays (accepted at {k} of {n})"
    header = "\n".join([
        f"harness shrink {run_dir}",
        f"reproduces {', '.join(targets)}: {rate}",
        f"original: {summary(original)}",
        f"shrunk:   {summary(best)}",
        f"search: {result.used} replays of a budget of {budget}, {len(result.trials)} candidates, "
        f"{seconds / 60:.0f} min; ended: {result.stop or 'running'}",
        "accepted: " + ("; ".join(result.changes) or "none"),
        "run it: harness run --config THIS-FILE",
    ])
    return specs.spec_file(best, header)


def run(args) -> int:
    if args.n < 1 or not 1 <= args.k <= args.n:
        raise UserError(f"--k {args.k} --n {args.n}: expected 1 <= K <= N")
    if args.budget < 1:
        raise UserError(f"--budget {args.budget}: expected 1 or more")
    values, info = replay.load_run(args.run_dir)
    targets = targets_of(subrun.read_json(Path(args.run_dir) / "results.json"), args.anomaly, args.run_dir)
    if not pairs(values["schedule"]):
        raise UserError(f"{args.run_dir}: the run injected no faults; nothing to shrink")
    out = Path(args.out or Path(args.run_dir) / "shrunk.toml")
    work = Path(args.work or Path(args.run_dir) / "shrink")
    try:
        (work / "candidates").mkdir(parents=True, exist_ok=True)
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {work} or {out.parent}: {e.strerror}") from None
    started = time.monotonic()
    runs: list[dict] = []

    def fails(candidate: dict) -> bool:
        i = len(runs) + 1
        config = work / "candidates" / f"replay-{i:03d}.toml"
        config.write_text(specs.spec_file(candidate, f"harness shrink candidate, replay {i}"))
        record = replay.run_config(config, work, f"replay-{i:03d}", args.lock)
        hit = record.verdict != NOT_RUN and all(a in record.counts for a in targets)
        runs.append({"config": str(config), "failed": hit, **asdict(record)})
        print(f"      {record.verdict} ({record.seconds:.0f} s): {', '.join(record.counts) or record.problem or 'none'}",
              file=sys.stderr, flush=True)
        return hit

    def save(result: Result) -> None:
        seconds = time.monotonic() - started
        write_whole(out, scenario_text(values, result, args.run_dir, targets, args.k, args.n,
                                              args.budget, seconds))
        write_whole(work / "shrink.json", json.dumps({
            "run": str(args.run_dir), "targets": targets, "k": args.k, "n": args.n, "budget": args.budget,
            "seconds": round(seconds, 1), "stop": result.stop, "accepted": result.changes,
            "failed": result.failed, "replays": result.replays, "used": result.used,
            "trials": [asdict(t) for t in result.trials], "runs": runs, "best": result.values}, indent=1) + "\n")

    print(f"shrinking {args.run_dir}: {summary(values)}; a replay fails when it shows {', '.join(targets)}; "
          f"accept at {args.k} of {args.n}, at most {args.budget} replays", file=sys.stderr, flush=True)
    previous = signal.signal(signal.SIGTERM, calibrate._raise_interrupt)
    try:
        result = search(values, fails, args.k, args.n, args.budget,
                        progress=lambda line: print(line, file=sys.stderr, flush=True), accepted=save)
    finally:
        signal.signal(signal.SIGTERM, previous)
    save(result)
    print(f"{summary(values)}\n  -> {summary(result.values)}"
          + (f", failing {result.failed} of {result.replays} replays" if result.failed is not None else "")
          + f"\nsearch ended ({result.stop}) after {result.used} replays, "
            f"{(time.monotonic() - started) / 60:.0f} min\nscenario: {out}  (harness run --config {out})")
    return 130 if result.stop == "interrupted" else 0
