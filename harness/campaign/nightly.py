"""harness nightly: run a matrix of scenarios and specs (MATRIX.toml), one run after another, and write what a CI server and a person read.

Each run is `harness run -c SPEC --seed S` in a process of its own on a fresh
cluster, with a time limit of its own (`harness.campaign.subrun`); a run that crashes,
hangs or cannot start is recorded with its reason and the matrix goes on.
Into RESULTS/nightly/NIGHT/ (NIGHT: today's UTC date unless --night): the
runs (runs/), their output (logs/), the spec files they ran (specs/), and,
rewritten after every run, summary.json, junit.xml and nightly.html; then
RESULTS/trends.html across nights. The matrix file, the classes (PASS, FAIL,
FLAKY, HANG, ERROR) and the pages: `harness.campaign.matrix`, `harness.campaign.trends`,
docs/nightly.md. Exit status: 0 every run PASS or FLAKY, 1 otherwise, 2 bad
input, 130 interrupted (Ctrl-C or SIGTERM: the current run heals and tears
down, then the summary is written).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shutil
import signal
import sys
import time
from pathlib import Path

from core.errors import UserError
from core.files import write_whole
from harness.campaign import matrix as mx, subrun, trends
from harness.run import spec as specs

_NIGHT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def configure(parser) -> None:
    parser.add_argument("matrix", metavar="MATRIX.toml", help="the matrix: scenarios and inline specs, systems, "
                                                              "seeds, repeats (nightly/smoke.toml, nightly/default.toml)")
    parser.add_argument("--results", default="results", metavar="DIR",
                        help="results folder (default results): nights in DIR/nightly/NIGHT, DIR/trends.html")
    parser.add_argument("--night", metavar="NAME",
                        help="the night's folder name (default today's UTC date; -2, -3 ... if taken)")
    parser.add_argument("--repeat", type=int, metavar="N", help="run every (test, seed) N times (overrides repeats)")
    parser.add_argument("--until-fail", action="store_true",
                        help="run the matrix again and again until a run ends other than PASS (or --rounds)")
    parser.add_argument("--rounds", type=int, metavar="N",
                        help="passes over the whole matrix (default 1; with --until-fail, no limit)")
    parser.add_argument("--deflake", type=int, default=0, metavar="N",
                        help="re-run a failed run up to N times: a failure that does not come back is FLAKY")
    parser.add_argument("--keep", type=int, metavar="N", help="afterwards, delete all but the newest N nights")


def run(args) -> int:
    if args.deflake < 0:
        raise UserError(f"--deflake {args.deflake}: expected 0 or more")
    if args.rounds is not None and args.rounds < 1:
        raise UserError(f"--rounds {args.rounds}: expected 1 or more")
    if args.keep is not None and args.keep < 1:
        raise UserError(f"--keep {args.keep}: expected 1 or more")
    if args.night is not None and not _NIGHT_RE.match(args.night):
        raise UserError(f"--night {args.night!r}: use letters, digits, '.', '_', '-'")
    matrix = mx.load(args.matrix, args.repeat)
    results = Path(args.results)
    night = _night_dir(results, args.night)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    spec_files = _write_specs(night, matrix.cells)
    rounds = args.rounds or (None if args.until_fail else 1)
    planned = len(matrix.cells) * rounds if rounds else None
    options = {"repeat": args.repeat, "deflake": args.deflake, "until_fail": args.until_fail, "rounds": args.rounds}
    records: list[mx.CellRecord] = []

    def save(complete: bool = False, interrupted: bool = False) -> None:
        data = mx.summary(matrix.name, matrix.path, night.name, started, records, planned, complete, interrupted,
                          options)
        write_whole(night / "junit.xml", mx.junit(matrix.name, records, started), fsync=True)
        write_whole(night / "summary.json", json.dumps(data, indent=1) + "\n", fsync=True)
        trends.write_pages(results, night)

    print(f"nightly {matrix.name}: {len(matrix.cells)} runs"
          + (" per round, until one fails" if args.until_fail else "") + f", into {night}",
          file=sys.stderr, flush=True)
    save()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        with subrun.shared_checks(night / "logs"):
            round_no = 0
            while rounds is None or round_no < rounds:
                round_no += 1
                stop = False
                for i, cell in enumerate(matrix.cells, 1):
                    cell = dataclasses.replace(cell, round=round_no)
                    total = f"{len(matrix.cells)}" + (f", round {round_no}" if rounds != 1 else "")
                    print(f"[{i}/{total}] {cell.key} ({cell.system}) ...", file=sys.stderr, flush=True)
                    rec = mx.CellRecord.of(cell)
                    records.append(rec)
                    try:
                        while not rec.attempts or mx.needs_rerun(rec.attempts, args.deflake):
                            rec.attempts.append(_attempt(night, cell, spec_files[cell.label], len(rec.attempts)))
                            _say_attempt(rec.attempts[-1], len(rec.attempts) - 1)
                    except KeyboardInterrupt as e:
                        outcome = getattr(e, "outcome", None)
                        if outcome is not None:
                            rec.attempts.append(mx.attempt(outcome, cell.expect))
                        rec.outcome = mx.classify(rec.attempts)
                        if not rec.attempts:
                            records.pop()
                        raise
                    rec.outcome = mx.classify(rec.attempts)
                    print(f"    => {rec.outcome}", file=sys.stderr, flush=True)
                    save()
                    if args.until_fail and rec.outcome != mx.PASS:
                        stop = True
                        break
                if stop:
                    break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
        (night / "current.json").unlink(missing_ok=True)
    save(complete=not interrupted, interrupted=interrupted)
    if args.keep:
        for old in _prune(results, args.keep, night):
            print(f"deleted the night {old}", file=sys.stderr)
    counts = {c: sum(r.outcome == c for r in records) for c in mx.CLASSES}
    for r in records:
        print(f"{r.outcome:<11} {r.key} ({r.system})" + (f": {mx.message(r)}" if r.outcome != mx.PASS else ""))
    print(f"\nnightly {matrix.name}: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n)
          + f"\nsummary: {night / 'summary.json'}\njunit: {night / 'junit.xml'}\npage: {night / 'nightly.html'}"
          + f"\ntrends: {results / 'trends.html'}")
    if interrupted:
        print(f"harness nightly: interrupted; {len(records)} run(s) recorded", file=sys.stderr)
        return 130
    return 0 if all(r.outcome in (mx.PASS, mx.FLAKY) for r in records) else 1


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _night_dir(results: Path, name: str | None) -> Path:
    base = name or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    root = results / trends.NIGHTLY
    try:
        root.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            path = root / (base if n == 1 else f"{base}-{n}")
            try:
                path.mkdir()
                return path
            except FileExistsError:
                n += 1
    except OSError as e:
        raise UserError(f"cannot create the night's folder under {root}: {e.strerror}") from None


def _write_specs(night: Path, cells: list[mx.Cell]) -> dict[str, Path]:
    """specs/LABEL.toml: the settings each test runs with, as a spec file (the seed on the command line)."""
    folder = night / "specs"
    folder.mkdir()
    files = {}
    for cell in cells:
        if cell.label not in files:
            files[cell.label] = folder / f"{cell.label}.toml"
            files[cell.label].write_text(specs.spec_file(cell.values))
    return files


def _attempt(night: Path, cell: mx.Cell, spec_file: Path, index: int) -> mx.Attempt:
    """One `harness run` of the cell; its record. current.json names the run
    in progress (its pid: the owner of its cluster) until it ends."""
    name = cell.key.replace(" ", "-") + (f"-rerun{index}" if index else "")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def note(child) -> None:
        write_whole(night / "current.json", json.dumps({"pid": child.pid, "test": cell.key, "attempt": index,
                                                       "started": started, "log": str(night / "logs" / f"{name}.log")}))

    argv = ["run", "-c", str(spec_file), "--seed", str(cell.seed), "--results", str(night / "runs")]
    outcome = subrun.run(argv, night / "logs" / f"{name}.log", limit_s=cell.limit_s, on_start=note)
    (night / "current.json").unlink(missing_ok=True)
    return mx.attempt(outcome, cell.expect, started)


def _say_attempt(a: mx.Attempt, index: int) -> None:
    what = "" if index == 0 else f"re-run {index}: "
    words = (f"{a.verdict}, expectation {'met' if a.met else 'NOT met'}" if a.status not in ("error", "interrupted")
             else f"{a.verdict}: {a.problem}")
    print(f"    {what}{a.status} ({words}, {a.seconds:.0f} s) {a.run_dir or ''}", file=sys.stderr, flush=True)


def _prune(results: Path, keep: int, current: Path) -> list[Path]:
    """Deletes all but the newest `keep` nights (folders holding a summary.json); the deleted."""
    old = [n.dir for n in trends.nights(results)][:-keep]
    gone = []
    for path in old:
        if path.resolve() == current.resolve() or not (path / "summary.json").is_file():
            continue
        shutil.rmtree(path, ignore_errors=True)
        gone.append(path)
    if gone:
        trends.write_pages(results, current)
    return gone
