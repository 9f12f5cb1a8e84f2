"""Each benchmark's result as data: one JSON file a run, under results/bench/.

A benchmark module declares its targets next to its code, as data
(`TARGETS`, a tuple of `Target`: the figure a target applies to, the bound,
the goal in words), takes `start()` when it begins and calls `write()` at
its end. The file, named by benchmark and UTC time, holds the benchmark's
name, the command line that produced it, the git commit (and whether the
tree was dirty), the UTC time, the machine (cores, memory, load average at
start and end), the figures (a flat dict of numbers, named so that one name
means one measure: `spark.10M.cold_ratio`), each target with its figure's
value and whether it was met (None: not measured by this run), and the
benchmark's own report as `details`.

`harness bench latest [NAME]...` prints, for each benchmark, the newest
value of each figure it has recorded, under the result that holds it: a run
that measured only some sizes or one engine leaves the others' figures to
the results before it. docs/benchmarks.md quotes these.

The folder is the project's results/bench/ (results/ is kept out of git)
whatever the working folder, or `--record-dir DIR`; `--no-record` writes
nothing (a benchmark that runs another as a part of itself passes it).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import orjson

from core.files import write_whole
from core.provenance import git_state

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results" / "bench"


@dataclass(frozen=True)
class Target:
    """A goal for one figure: `figure op bound` (op "<=" or ">="); `goal`
    says it in words, with the issue that set it."""

    figure: str
    op: str
    bound: float
    goal: str

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value <= self.bound if self.op == "<=" else value >= self.bound


@dataclass(frozen=True)
class Start:
    """When a benchmark began: UTC, the monotonic clock, the load average."""

    utc: datetime
    clock: float
    load: tuple[float, float, float]


def start() -> Start:
    return Start(datetime.now(timezone.utc), time.monotonic(), os.getloadavg())


def add_arguments(parser) -> None:
    """The two flags every benchmark takes."""
    parser.add_argument("--record-dir", default=str(RESULTS), metavar="DIR",
                        help="where the result is recorded as JSON (default the project's results/bench)")
    parser.add_argument("--no-record", dest="record", action="store_false", help="record no result")


def size_label(n: int) -> str:
    """10000000 -> "10M", 20000 -> "20K": a size as part of a figure's name."""
    for unit, scale in (("M", 1_000_000), ("K", 1_000)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def command_line(argv: list[str] | None = None) -> str:
    """The command as a user types it: `harness ...` or `python -m bench.NAME ...`."""
    argv = list(sys.argv if argv is None else argv)
    head = Path(argv[0])
    if head.name == "harness" or head.parts[-2:] == ("harness", "cli.py"):
        first = ["harness"]
    elif head.parent.name == "bench" and head.suffix == ".py":
        first = ["python", "-m", f"bench.{head.stem}"]
    else:
        first = argv[:1]
    return shlex.join(first + argv[1:])


def memory_mib() -> int | None:
    """The machine's memory (MemTotal)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return None


def result(name: str, started: Start, figures: dict, targets=(), details=None) -> dict:
    """The record of one run of benchmark `name` (a figure of None, not measured, is left out)."""
    figures = {k: v for k, v in figures.items() if v is not None}
    return {"benchmark": name, "command": command_line(), **git_state(),
            "time": started.utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(time.monotonic() - started.clock, 1),
            "machine": {"cores": os.cpu_count(), "memory_mib": memory_mib(),
                        "load_start": [round(x, 2) for x in started.load],
                        "load_end": [round(x, 2) for x in os.getloadavg()]},
            "figures": figures,
            "targets": [{"figure": t.figure, "op": t.op, "bound": t.bound, "goal": t.goal,
                         "value": figures.get(t.figure), "met": t.met(figures.get(t.figure))} for t in targets],
            "details": details}


def write(args, name: str, started: Start, figures: dict, targets=(), details=None) -> Path | None:
    """Record the result under args.record_dir (unless args.record is off);
    say where, and each measured target, on stderr."""
    if not getattr(args, "record", True):
        return None
    record = result(name, started, figures, targets, details)
    folder = Path(getattr(args, "record_dir", RESULTS))
    folder.mkdir(parents=True, exist_ok=True)
    stamp = started.utc.strftime("%Y%m%dT%H%M%SZ")
    path, n = folder / f"{name}-{stamp}.json", 1
    while path.exists():
        path, n = folder / f"{name}-{stamp}-{n}.json", n + 1
    write_whole(path, orjson.dumps(record, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    for t in record["targets"]:
        if t["met"] is not None:
            print(f"target {t['figure']} {t['op']} {t['bound']:g}: {t['value']:g}, "
                  f"{'met' if t['met'] else 'MISSED'}", file=sys.stderr)
    print(f"recorded {path}", file=sys.stderr)
    return path


def load(folder: Path) -> list[dict]:
    """Every result recorded in `folder`, oldest first (a file that is not one is skipped, said on stderr)."""
    results = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = orjson.loads(path.read_bytes())
            if not isinstance(data.get("figures"), dict) or not data.get("benchmark") or not data.get("time"):
                raise ValueError("not a benchmark result")
        except (OSError, ValueError, AttributeError) as e:
            print(f"skipped {path}: {e}", file=sys.stderr)
            continue
        results.append({**data, "path": str(path)})
    return sorted(results, key=lambda r: (r["time"], r["path"]))


def latest(results: list[dict]) -> dict[str, list[tuple[dict, dict]]]:
    """benchmark -> [(result, the figures whose newest value it holds)], newest first."""
    out: dict[str, list[tuple[dict, dict]]] = {}
    seen: dict[str, set] = {}
    for r in reversed(results):
        names = seen.setdefault(r["benchmark"], set())
        fresh = {k: v for k, v in r["figures"].items() if k not in names}
        names.update(fresh)
        if fresh:
            out.setdefault(r["benchmark"], []).append((r, fresh))
    return out


def configure(parser) -> None:
    """Flags, for `harness bench latest`."""
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these benchmarks (default every one)")
    parser.add_argument("--record-dir", default=str(RESULTS), metavar="DIR",
                        help="where results are recorded (default the project's results/bench)")


def _value(v) -> str:
    return f"{v:,.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def run(args) -> int:
    """Print the newest figures of each benchmark, the targets they meet or miss beside them."""
    found = latest([r for r in load(Path(args.record_dir)) if not args.names or r["benchmark"] in args.names])
    if not found:
        print(f"no results recorded in {args.record_dir}")
        return 0
    for name in sorted(found):
        print(name)
        for r, figures in found[name]:
            m = r.get("machine", {})
            commit = (r.get("commit") or "?")[:7] + (" dirty" if r.get("dirty") else "")
            loads = " to ".join(f"{x[0]:.1f}" for x in (m.get("load_start"), m.get("load_end")) if x)
            print(f"  {r['time']}  {commit}  {m.get('cores', '?')} cores, load {loads or '?'}  "
                  f"$ {r.get('command', '?')}")
            for key in sorted(figures):
                marks = [f"target {t['op']} {t['bound']:g}: {'met' if t['met'] else 'MISSED'}"
                         for t in r.get("targets", []) if t["figure"] == key and t.get("met") is not None]
                print(f"    {key:<40} {_value(figures[key])}" + "".join(f"   {m}" for m in marks))
    return 0
