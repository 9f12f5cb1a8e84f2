"""Writing a file whole: the one way the harness replaces a file that readers
or a later run may open (results.json, reports, pages, summaries, state), so
that a kill at any moment leaves the old file or the new one, never half."""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, data: str | bytes, fsync: bool = False) -> Path:
    """Writes `data` to a hidden temporary file beside `path` and renames it
    over `path`. `fsync` also makes it durable before the rename (files a
    killed process's successor must find, as the nightly's summary)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    return path
