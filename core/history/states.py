"""The cluster-state timeline beside a history, `states.jsonl` (docs/history.md,
"states.jsonl"): what the system said about its partitions and nodes during
the run. `read_states` is its one reader: the checker (the high watermarks
of the lag series), the stories and the report's lane chart read it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson

log = logging.getLogger(__name__)


def read_states(path: Path) -> list[dict] | None:
    """The lines of a states.jsonl, in file order, each with `line` (its
    1-based line number); None without the file. A line that is not a JSON
    object with an integer `time` and a `kind` is skipped, with one warning
    (the observer may have been cut off mid-line)."""
    path = Path(path)
    if not path.is_file():
        return None
    out, bad = [], 0
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                x = orjson.loads(raw)
            except orjson.JSONDecodeError:
                bad += 1
                continue
            if isinstance(x, dict) and type(x.get("time")) is int and isinstance(x.get("kind"), str):
                x["line"] = n
                out.append(x)
            else:
                bad += 1
    if bad:
        log.warning("%s: %d unreadable line(s) skipped", path, bad)
    return out


def high_watermarks(states: list[dict]) -> dict[int, list[tuple[int, int]]]:
    """Each partition's high watermarks the leaders reported: (time, hw), in time order."""
    found: dict[int, list[tuple[int, int]]] = {}
    for s in states:
        if s["kind"] == "partition" and type(s.get("partition")) is int and type(s.get("hw")) is int:
            found.setdefault(s["partition"], []).append((s["time"], s["hw"]))
    for hws in found.values():
        hws.sort()
    return found
