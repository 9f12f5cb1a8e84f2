"""What a user names: `resolve` turns a file, a folder of parts or a run
directory into the files to read and the `run.json` beside them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson

from core.errors import HistoryError, first_line
from core.history.format import OrderCheck
from core.history.jsonl import ReadReport, iter_jsonl

# --------------------------------------------------------------------------
# What the user names


@dataclass
class HistorySource:
    """The files of one history and the run.json beside them, if any."""

    format: str  # "jsonl" or "parquet"
    files: list[Path]
    run_json: Path | None
    root: Path  # the run directory (or the history's folder)


def resolve(path: str | os.PathLike) -> HistorySource:
    """Find the history a user names: a file, a folder of parts, or a run directory."""
    p = Path(path)
    if not p.exists():
        raise HistoryError(f"{p}: no such file or directory")
    if p.is_file():
        fmt = _format_of(p)
        return HistorySource(fmt, [p], _run_json_near(p.parent), p.parent)
    # A run directory: prefer Parquet (faster), fall back to JSONL.
    for name, fmt in (("history.parquet", "parquet"), ("history.jsonl", "jsonl")):
        candidate = p / name
        if candidate.is_file() or (candidate.is_dir() and any(candidate.iterdir())):
            src = resolve(candidate)
            return HistorySource(src.format, src.files, _run_json_near(p), p)
    parquet = sorted(x for x in p.iterdir() if x.is_file() and x.suffix == ".parquet")
    jsonl = sorted(x for x in p.iterdir() if x.is_file() and x.suffix == ".jsonl")
    if parquet and jsonl:
        raise HistoryError(f"{p}: holds both .parquet and .jsonl parts; name one")
    if parquet:
        return HistorySource("parquet", parquet, _run_json_near(p), p)
    if jsonl:
        return HistorySource("jsonl", jsonl, _run_json_near(p), p)
    raise HistoryError(f"{p}: no history here (expected history.jsonl, history.parquet, or .jsonl/.parquet parts)")


def _format_of(p: Path) -> str:
    if p.suffix == ".parquet":
        return "parquet"
    with open(p, "rb") as f:
        head = f.read(4)
    if head == b"PAR1":
        return "parquet"
    return "jsonl"


def _run_json_near(directory: Path) -> Path | None:
    for d in (directory, directory.parent):
        candidate = d / "run.json"
        if candidate.is_file():
            return candidate
    return None


def iter_source_jsonl(source: HistorySource, report: ReadReport) -> Iterator[dict]:
    """Events of JSONL parts in order, indexes continuing across parts.

    Only the last part may end with a cut line: an earlier part was complete
    when the next one was started.
    """
    order = OrderCheck()
    for i, file in enumerate(source.files):
        before = len(report.warnings)
        yield from iter_jsonl(file, report, order)
        if len(report.warnings) > before and i < len(source.files) - 1:
            raise HistoryError(f"{file.name}: a part other than the last ends with a cut line")


def load_run_json(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise HistoryError(f"{path}: not readable JSON ({first_line(e)})") from None
    if not isinstance(data, dict):
        raise HistoryError(f"{path}: expected a JSON object")
    return data
