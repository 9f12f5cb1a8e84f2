"""The run store: results/<test-name>/<timestamp>/ and the index of all runs.

A run directory holds run.json, history.jsonl and history.parquet,
results.json, report.html, harness.log and nodes/<node>/ with the logs
collected from each node. `results/latest` points at the newest run and
`results/index.html` lists every run.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from core.errors import UserError
from core.files import write_whole
from core.runs import runs
from harness.pages.runs import index_page

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


def write_index(root: Path) -> Path:
    """results/index.html: every run under `root`, newest first."""
    return write_whole(root / "index.html", index_page(runs(root)))
