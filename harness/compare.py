"""harness compare: runs side by side, the differences first.

The differential view (core/runs.py `side_by_side`): the same scenario and
seed on several systems or versions, or one scenario over several seeds.
For each section (what each run is, its anomaly counts, liveness,
throughput, the first story of each anomaly, its settings) the rows that
differ between the runs are printed, and those the same in every run are
folded into a count (`--all` prints them too). `harness serve` shows the
same at /compare?run=...&run=... . It reads each run's run.json and
results.json; it starts nothing.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

from checkers.registry import NAMES as ANOMALIES
from core.errors import UserError
from core.runs import Row, run_at, side_by_side

LABEL_WIDTH = 34
COLUMN_MAX = 40  # a value wider than this goes on lines of its own


def configure(parser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="a run's folder (holding run.json and results.json)")
    parser.add_argument("--all", action="store_true", help="also print the rows the same in every run")
    parser.add_argument("--json", action="store_true", help="print the sections as JSON")


def run(args) -> int:
    if len(args.runs) < 2:
        raise UserError("harness compare: name two runs or more")
    entries = []
    for folder in args.runs:
        path = Path(folder)
        if not (path / "run.json").is_file() and not (path / "results.json").is_file():
            raise UserError(f"harness compare: {folder}: not a run's folder (no run.json or results.json in it)")
        entries.append(run_at(path))
    sections = side_by_side(entries, ANOMALIES)
    if args.json:
        print(json.dumps([{"section": s.title, "rows": [{"label": r.label, "values": list(r.values),
                                                          "differs": r.differs} for r in s.rows]}
                          for s in sections], indent=1, default=str))
        return 0
    width = min(COLUMN_MAX, max(16, (shutil.get_terminal_size((160, 24)).columns - LABEL_WIDTH) // len(entries) - 2))
    letters = [chr(ord("a") + i % 26) for i in range(len(entries))]
    for letter, e in zip(letters, entries):
        print(f"{letter}: {e.path}")
    for section in sections:
        differ, same = section.split()
        print(f"\n{section.title}: {len(differ)} of {len(section.rows)} differ")
        for row in section.rows if args.all else differ:
            print(_line(row, letters, width))
        if same and not args.all:
            print(f"  (the same in every run: {', '.join(r.label for r in same)})"
                  if len(same) <= 8 else f"  ({len(same)} the same in every run; --all prints them)")
    return 0


def _line(row: Row, letters: list[str], width: int) -> str:
    """One row: its values in columns, or under it, one run a line, when one is too long for a column."""
    texts = ["-" if v is None else v if isinstance(v, str) else json.dumps(v) for v in row.values]
    mark = "*" if row.differs else " "
    if all(len(t) <= width for t in texts):
        if len(row.label) <= LABEL_WIDTH - 3:
            return (f"{mark} {row.label:<{LABEL_WIDTH - 2}}" + "".join(f"{t:<{width + 2}}" for t in texts)).rstrip()
    lines = [f"{mark} {row.label}"]
    for letter, t in zip(letters, texts):
        lines.append(textwrap.fill(t, width=100, initial_indent=f"    {letter}: ", subsequent_indent="       "))
    return "\n".join(lines)
