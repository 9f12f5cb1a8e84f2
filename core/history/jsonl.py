"""Reading a JSONL history: `read_jsonl` / `iter_jsonl` validate it line by
line; a cut last line is dropped with a warning, any other bad line is a
`HistoryError` naming it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import orjson

from core.errors import HistoryError
from core.history.format import OrderCheck, check_event

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------
# Reading JSONL


@dataclass
class ReadReport:
    """What reading a history found besides its events."""

    events: int = 0
    warnings: list[str] = field(default_factory=list)


def iter_jsonl(path: str | os.PathLike, report: ReadReport | None = None,
               order: OrderCheck | None = None) -> Iterator[dict]:
    """Yield the validated events of one JSONL file, in order.

    A last line that is cut short is dropped with a warning in `report` (and
    the log); any other malformed line raises HistoryError naming it.
    `order` carries index and time on from a previous part.
    """
    report = report if report is not None else ReadReport()
    order = order if order is not None else OrderCheck()
    start = order.next_index
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise HistoryError(f"{path}: cannot read: {e.strerror}") from None
    name = path.name  # once: each line's messages name it
    with f:
        line_no = 0
        pending: tuple[int, bytes] | None = None  # a line is judged once we know whether it is the last
        for raw in f:
            line_no += 1
            if pending is not None:
                yield _parse_line(name, *pending, last=False, order=order, report=report)
            pending = (line_no, raw)
        if pending is not None:
            event = _parse_line(name, *pending, last=True, order=order, report=report)
            if event is not None:
                yield event
    if order.next_index == start:
        raise HistoryError(f"{path}: the history is empty" if not report.warnings
                           else f"{path}: the history holds no complete event")


def _parse_line(name: str, line_no: int, raw: bytes, last: bool, order: OrderCheck,
                report: ReadReport) -> dict | None:
    where = f"{name} line {line_no}"
    stripped = raw.strip()
    if not stripped:
        if last:
            return None
        raise HistoryError(f"{where}: empty line")
    try:
        event = orjson.loads(stripped)
    except orjson.JSONDecodeError as e:
        if last and (not raw.endswith(b"\n") or _looks_cut(stripped)):
            msg = f"{where}: last line is cut short; ignored"
            report.warnings.append(msg)  # the caller shows it; not twice
            log.info(msg)
            return None
        raise HistoryError(f"{where}: not valid JSON ({str(e).split(':')[0]})") from None
    check_event(event, where)
    order.event(event, where)
    report.events += 1
    return event


def _looks_cut(text: bytes) -> bool:
    # A writer that died mid-line leaves a prefix of a JSON object.
    return text.startswith(b"{") and not text.endswith(b"}")


def read_jsonl(path: str | os.PathLike, report: ReadReport | None = None) -> list[dict]:
    return list(iter_jsonl(path, report))


