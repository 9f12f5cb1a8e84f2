"""The replicas' logs at the end of a run (docs/history.md, "Replica logs at
the end"): `disk/NODE.jsonl.gz` (or `.jsonl`) beside a history, one file per
node, one JSON array per line, `[partition, offset, leader_epoch, key,
value]`, key and value integers where the record's bytes are a decimal
number (the workload's), else text or null (a record the run did not
write: a corrupt one). `dumps` finds them, `read_dump` reads one in chunks
of such lists, `columns` makes a chunk NumPy columns. A line that is not
such an array (a dump cut short) ends the file's reading with a warning,
never a crash: the dumps are evidence, not the history.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Iterator

import numpy as np
import orjson

log = logging.getLogger(__name__)

CHUNK = 1 << 18  # records per chunk
SUFFIXES = (".jsonl.gz", ".jsonl")


def dumps(root: Path) -> dict[str, Path]:
    """node -> its dump, of the `disk/` folder under `root` (empty without one)."""
    folder = Path(root) / "disk"
    found: dict[str, Path] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        for suffix in SUFFIXES:
            if path.is_file() and path.name.endswith(suffix) and not path.name.startswith("."):
                found.setdefault(path.name[:-len(suffix)], path)
                break
    return found


def read_dump(path: Path, chunk: int = CHUNK) -> Iterator[list[list]]:
    """A dump's records in chunks of [partition, offset, epoch, key, value] lists."""
    opener = gzip.open if path.name.endswith(".gz") else open
    rows: list = []
    try:
        with opener(path, "rb") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                record = orjson.loads(line)
                if not (isinstance(record, list) and len(record) == 5
                        and all(type(x) is int for x in record[:3])):
                    raise ValueError(f"line {n} is not [partition, offset, epoch, key, value]")
                rows.append(record)
                if len(rows) >= chunk:
                    yield rows
                    rows = []
    except (OSError, EOFError, ValueError) as e:
        log.warning("%s: disk dump read up to an unreadable part: %s", path, e)
    if rows:
        yield rows


def columns(rows: list[list]) -> tuple[np.ndarray, ...]:
    """A chunk as (partition, offset, epoch, value, whether the value is an
    integer) columns: a value that is not one (text, null) as 0."""
    partition = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    offset = np.fromiter((r[1] for r in rows), np.int64, len(rows))
    epoch = np.fromiter((r[2] for r in rows), np.int64, len(rows))
    numeric = np.fromiter((type(r[4]) is int for r in rows), bool, len(rows))
    value = np.fromiter((r[4] if type(r[4]) is int else 0 for r in rows), np.int64, len(rows))
    return partition, offset, epoch, value, numeric
