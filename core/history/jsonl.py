"""Reading a JSONL history: `read_jsonl` / `iter_jsonl` validate it line by
line, `follow_jsonl` while it is still being written; a cut last line is
dropped with a warning, any other bad line is a `HistoryError` naming it.
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

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
        raise _no_events(path, report)


def _no_events(path: Path, report: ReadReport) -> HistoryError:
    return HistoryError(f"{path}: the history is empty" if not report.warnings
                        else f"{path}: the history holds no complete event")


# At most this much of a file being followed is read at once: a follower that
# starts late, or falls behind, does not hold a whole history in memory.
FOLLOW_READ = 64 << 20


def follow_jsonl(path: str | os.PathLike, wait: Callable[[], bool],
                 report: ReadReport | None = None) -> Iterator[list[dict]]:
    """The validated events of a JSONL file that is still being written, a
    list per read: the complete lines written since the read before.

    `wait()` blocks until there may be more to read and returns True once the
    writer has closed the file; the file is then read to its end and the last
    list yielded. Every line is judged as `iter_jsonl` judges it: the newest
    complete line is held back until a line follows it, so that only the
    file's last line can be dropped as cut short.
    """
    report = report if report is not None else ReadReport()
    order = OrderCheck()
    path = Path(path)
    name = path.name
    with open(path, "rb") as f:
        line_no = 0
        pending: tuple[int, bytes] | None = None
        rest = b""  # a line still being written
        closed = False
        while True:
            data = f.read(FOLLOW_READ)
            rest += data
            more = len(data) == FOLLOW_READ  # read on before waiting
            final = closed and not more  # the file read to its end: a last line may lack its newline
            cut = len(rest) if final else rest.rfind(b"\n") + 1
            events = []
            for raw in io.BytesIO(rest[:cut]):  # splits at newlines only, as iter_jsonl's file does
                line_no += 1
                if pending is not None:
                    events.append(_parse_line(name, *pending, last=False, order=order, report=report))
                pending = (line_no, raw)
            rest = rest[cut:]
            if final and pending is not None and (
                    event := _parse_line(name, *pending, last=True, order=order, report=report)) is not None:
                events.append(event)
            if events:
                yield events
            if final:
                break
            if not more and not closed:
                closed = wait()
    if order.next_index == 0:
        raise _no_events(path, report)


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


