"""The run store: results/<test-name>/<timestamp>/ and the index of all runs.

A run directory holds run.json, history.jsonl and history.parquet,
results.json, report.html, harness.log and nodes/<node>/ with the logs
collected from each node. `results/latest` points at the newest run and
`results/index.html` lists every run.
"""

from __future__ import annotations

import datetime as dt
import html
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from core.errors import UserError
from core.files import write_whole

log = logging.getLogger(__name__)


@dataclass
class RunDir:
    root: Path  # the results folder
    path: Path  # root/<name>/<timestamp>

    @property
    def nodes(self) -> Path:
        return self.path / "nodes"

    def write_json(self, name: str, data: dict) -> Path:
        return write_whole(self.path / name, orjson.dumps(
            data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str))


def create(results: str | os.PathLike, name: str) -> RunDir:
    root = Path(results)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    try:
        base = root / name
        base.mkdir(parents=True, exist_ok=True)
        path = base / stamp
        n = 1
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                n += 1
                path = base / f"{stamp}-{n}"
    except OSError as e:
        raise UserError(f"cannot create a run directory under {root}: {e.strerror}") from None
    return RunDir(root, path)


def point_latest(run: RunDir) -> None:
    link = run.root / "latest"
    tmp = run.root / ".latest.tmp"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(run.path.relative_to(run.root))
        os.replace(tmp, link)
    except OSError as e:
        log.warning("cannot point %s at the run: %s", link, e)


@dataclass(frozen=True)
class RunEntry:
    """One run of the results folder as the index lists it: its folder, what
    its run.json and results.json say ({} where a file is missing or torn)."""

    path: Path  # root/<name>/<timestamp>
    rel: str  # <name>/<timestamp>, with forward slashes
    run: dict
    results: dict

    @property
    def started(self) -> str:
        return str(self.run.get("started", ""))

    @property
    def spec(self) -> dict:
        spec = self.run.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def system(self) -> str:
        return str(self.spec.get("system", ""))

    @property
    def scenario(self) -> str:
        return str(self.spec.get("scenario", "") or "")

    @property
    def verdict(self) -> str:
        """VALID, INVALID, or "no results"."""
        if "valid" in self.results:
            return "VALID" if self.results["valid"] else "INVALID"
        return "no results"

    @property
    def errors(self) -> list[str]:
        """The anomalies the checker counted as errors."""
        anomalies = self.results.get("anomalies", {})
        return [n for n, a in anomalies.items() if isinstance(a, dict) and a.get("error")]

    @property
    def has_report(self) -> bool:
        return (self.path / "report.html").is_file()


def _json_or_empty(path: Path) -> dict:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def runs(root: Path) -> list[RunEntry]:
    """Every run under `root` (a folder <name>/<timestamp>/ holding run.json,
    and the nightly's nightly/<night>/runs/<name>/<timestamp>/), newest first."""
    root = Path(root)
    found = []
    for run_json in [*root.glob("*/*/run.json"), *root.glob("nightly/*/runs/*/*/run.json")]:
        run = _json_or_empty(run_json)
        if not run:
            continue
        run_dir = run_json.parent
        found.append(RunEntry(run_dir, run_dir.relative_to(root).as_posix(), run,
                              _json_or_empty(run_dir / "results.json")))
    found.sort(key=lambda r: r.started, reverse=True)
    return found


def index_page(entries: list[RunEntry], before: str = "", compare: bool = False) -> str:
    """The index's HTML: one row per run, links relative to the results
    folder. `before` is HTML put above the table (`harness serve` puts its
    filters there); `compare` adds the two radio columns of a compare form."""
    e = html.escape
    body = []
    for r in entries:
        verdict = r.verdict
        sends = r.results.get("counts", {}).get("sends", {})
        link = f"<a href='{e(r.rel)}/report.html'>report</a>" if r.has_report else ""
        picks = (f"<td><input type='radio' name='a' value='{e(r.rel)}' aria-label='compare: first'></td>"
                 f"<td><input type='radio' name='b' value='{e(r.rel)}' aria-label='compare: second'></td>"
                 if compare else "")
        nemesis = r.spec.get("nemesis", [])
        body.append(f"<tr>{picks}<td>{e(r.started)}</td><td>{e(str(r.run.get('name', '')))}</td>"
                    f"<td>{e(r.system)}</td><td>{e(r.scenario)}</td>"
                    f"<td>{e(','.join(map(str, nemesis)) if isinstance(nemesis, list) else str(nemesis))}</td>"
                    f"<td>{e(str(r.run.get('outcome', '')))}</td><td class='{verdict.lower().replace(' ', '-')}'>{verdict}</td>"
                    f"<td>{e(', '.join(r.errors))}</td><td>{e(str(sends.get('ok', '')))}</td><td>{link}</td>"
                    f"<td><a href='{e(r.rel)}/'>{e(r.rel)}</a></td></tr>")
    head = ("<th>a</th><th>b</th>" if compare else "") + (
        "<th>started</th><th>test</th><th>system</th><th>scenario</th><th>nemesis</th><th>run</th>"
        "<th>verdict</th><th>errors</th><th>sends ok</th><th></th><th>folder</th>")
    table = f"<table><tr>{head}</tr>{''.join(body)}</table>"
    if compare:
        table = (f"<form method='get' action='/compare'>{table}"
                 "<p><button type='submit'>compare the runs picked as a and b</button></p></form>")
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'><title>harness runs</title><style>"
            "body{font-family:system-ui,sans-serif;margin:2em} table{border-collapse:collapse}"
            "td,th{border:1px solid #dee2e6;padding:.25em .6em} .valid{color:#2b8a3e;font-weight:bold}"
            ".invalid{color:#c92a2a;font-weight:bold} form.filters{margin:0 0 1em}"
            "form.filters label{margin-right:1em}</style></head><body><h1>harness runs</h1>"
            f"{before}{table}</body></html>")


def write_index(root: Path) -> Path:
    """results/index.html: every run under `root`, newest first."""
    return write_whole(root / "index.html", index_page(runs(root)))
