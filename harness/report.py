"""harness report DIR: render a run's report.html from its history and results.

One self-contained page (styles inline, plots as inline PNG), and
timeline.html beside it: what is on them is harness/pages/report.py's, what
they read of the run's folder harness/run/evidence.py's. Only the command
line lives here.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from core.errors import UserError
from harness.run.report import render


def configure(parser) -> None:
    parser.add_argument("run_dir", metavar="DIR", help="a run directory holding results.json and the history")


def run(args) -> int:
    run_dir = Path(args.run_dir)
    results_path = run_dir / "results.json"
    if not results_path.is_file():
        raise UserError(f"{run_dir}: no results.json (run `harness check {run_dir}` first)")
    try:
        results = orjson.loads(results_path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise UserError(f"{results_path}: not readable JSON ({e})") from None
    if not isinstance(results, dict) or "anomalies" not in results:
        raise UserError(f"{results_path}: not a results file (no 'anomalies')")
    path = render(run_dir, results)
    print(f"report: {path}")
    return 0
