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

log = logging.getLogger(__name__)


@dataclass
class RunDir:
    root: Path  # the results folder
    path: Path  # root/<name>/<timestamp>

    @property
    def nodes(self) -> Path:
        return self.path / "nodes"

    def write_json(self, name: str, data: dict) -> Path:
        target = self.path / name
        tmp = target.with_name(f".{name}.tmp")
        tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str))
        os.replace(tmp, target)
        return target


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


def write_index(root: Path) -> Path:
    """results/index.html: every run under `root`, newest first."""
    rows = []
    for run_json in root.glob("*/*/run.json"):
        run_dir = run_json.parent
        try:
            run = orjson.loads(run_json.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        results = {}
        if (run_dir / "results.json").is_file():
            try:
                results = orjson.loads((run_dir / "results.json").read_bytes())
            except (OSError, orjson.JSONDecodeError):
                pass
        rows.append((run.get("started", ""), run_dir, run, results))
    rows.sort(key=lambda r: r[0], reverse=True)
    e = html.escape
    body = []
    for started, run_dir, run, results in rows:
        rel = run_dir.relative_to(root).as_posix()
        if "valid" in results:
            verdict = "VALID" if results["valid"] else "INVALID"
        else:
            verdict = "no results"
        errors = ", ".join(n for n, a in results.get("anomalies", {}).items() if a.get("error"))
        sends = results.get("counts", {}).get("sends", {})
        link = f"<a href='{e(rel)}/report.html'>report</a>" if (run_dir / "report.html").exists() else ""
        spec = run.get("spec", {})
        body.append(f"<tr><td>{e(str(started))}</td><td>{e(str(run.get('name', '')))}</td>"
                    f"<td>{e(str(spec.get('system', '')))}</td><td>{e(','.join(spec.get('nemesis', [])))}</td>"
                    f"<td>{e(str(run.get('outcome', '')))}</td><td class='{verdict.lower().replace(' ', '-')}'>{verdict}</td>"
                    f"<td>{e(errors)}</td><td>{e(str(sends.get('ok', '')))}</td><td>{link}</td>"
                    f"<td><a href='{e(rel)}/'>{e(rel)}</a></td></tr>")
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>harness runs</title><style>"
            "body{font-family:system-ui,sans-serif;margin:2em} table{border-collapse:collapse}"
            "td,th{border:1px solid #dee2e6;padding:.25em .6em} .valid{color:#2b8a3e;font-weight:bold}"
            ".invalid{color:#c92a2a;font-weight:bold}</style></head><body><h1>harness runs</h1><table>"
            "<tr><th>started</th><th>test</th><th>system</th><th>nemesis</th><th>run</th><th>verdict</th>"
            "<th>errors</th><th>sends ok</th><th></th><th>folder</th></tr>" + "".join(body) + "</table></body></html>")
    path = root / "index.html"
    tmp = root / ".index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, path)
    return path
