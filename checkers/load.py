"""Loading a history into Spark, validated, in the columns the checkers use.

JSONL is validated line by line in Python while it is written to a Parquet
file in a scratch folder (the checkers then read that); Parquet is validated
in streaming batches and read as it is. Either way the checkers see one
DataFrame in `core.history.parquet.arrow_schema()`'s columns.

Spark's executors read those Parquet files themselves, so on a cluster they
must be at a path every executor sees: `scratch_for` puts the conversion
beside the history (or in a folder the user names), not on the driver's
local temporary folder, and `load` names each file by an absolute `file:`
URI, never a path relative to the driver's working folder or resolved
against a cluster's default filesystem (HDFS on YARN).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from core.history.files import HistorySource, iter_source_jsonl
from core.history.jsonl import ReadReport
from core.history.parquet import validate_parquet, write_parquet
from core.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A validated history as Parquet files Spark can read."""

    files: list[Path]
    events: int
    format: str
    warnings: list[str] = field(default_factory=list)
    # Offsets too large for the checker's packed positions (checkers/offsets.py).
    to_fold: set[int] = field(default_factory=set)


def is_local(master: str) -> bool:
    """Whether every executor of `master` runs on this machine (local, local[N],
    local-cluster[...]) and so reads the driver's temporary folder."""
    return master.startswith("local")


def scratch_folder(named: str | os.PathLike) -> Path:
    """A folder the user named for the conversion (--scratch), checked before
    anything is read: it must exist and be a folder."""
    folder = Path(named)
    if not folder.exists():
        raise UserError(f"--scratch {named}: no such folder")
    if not folder.is_dir():
        raise UserError(f"--scratch {named}: not a folder")
    return folder


@contextmanager
def scratch_for(source: HistorySource, master: str, named: str | os.PathLike | None = None) -> Iterator[Path | None]:
    """The folder for what one check writes for Spark to read (a JSONL
    history's Parquet conversion, the driver's read runs), removed
    afterwards.

    `named` (--scratch) if given; else, on a local master, the system's
    temporary folder, as always (only this machine's executors read it);
    else, for a JSONL history, beside it (a hidden `.harness-check-*`
    folder in its folder), which executors that read the history read too.
    A Parquet history on a cluster, with no --scratch, gets none (None): it
    is read where it is, and Spark makes the read runs itself. A folder
    that cannot be written to is a one-line error, which names --scratch
    where the default was taken: falling back to the driver's local disk
    would fail later, on the executors of other hosts, with a less telling
    error.
    """
    parent = scratch_folder(named) if named is not None else None
    if source.format != "jsonl" and parent is None and not is_local(master):
        yield None
        return
    if parent is None and not is_local(master):
        parent = source.root
    try:
        # Hidden where it sits beside the user's files (`harness serve` and
        # `resolve` skip it); the system's temporary folder keeps its old name.
        folder = Path(tempfile.mkdtemp(prefix="harness-check-" if parent is None else ".harness-check-",
                                       dir=parent))
    except OSError as e:
        if named is not None:
            raise UserError(f"--scratch {named}: cannot write there ({e.strerror})") from None
        raise UserError(f"{parent}: cannot write the JSONL history's Parquet conversion beside it ({e.strerror}); "
                        f"name a folder every executor of {master} reads with --scratch DIR") from None
    try:
        if parent is not None:
            # mkdtemp makes a folder only its owner reads; executors may run as
            # another user (YARN's): read access as the folder it sits in grants.
            bits = stat.S_IMODE(parent.stat().st_mode) & 0o755
            folder.chmod(bits | 0o700)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# A JSONL event takes more than 100 bytes on average (a poll's invocation
# fewer, a poll with records many more): one per 100 bytes is the guess,
# erring towards more events.
JSONL_BYTES_PER_EVENT = 100


def events_ahead(source: HistorySource) -> int:
    """How many events the history holds, before it is read: a Parquet
    history's from its files' footers, a JSONL one's guessed from its size.
    0 where a file cannot be read (its validation says why)."""
    try:
        if source.format == "jsonl":
            return sum(f.stat().st_size for f in source.files) // JSONL_BYTES_PER_EVENT
        return sum(pq.read_metadata(f).num_rows for f in source.files)
    except (OSError, pa.ArrowException):
        return 0


def prepare(source: HistorySource, scratch: Path | None, on_batch: Callable | None = None,
            digest: Callable | None = None) -> Prepared:
    """Validate a history; JSONL is converted to Parquet in `scratch` on the way.
    `on_batch` is given every batch of the history, in order, once it is
    validated: the one read of the whole history on the driver; given
    `digest`, it is given `digest(batch)`, made in a thread of its own as
    the history is read where it is Parquet (`validate_parquet`)."""
    if digest is not None and on_batch is not None and source.format == "jsonl":
        on_batch = _then(digest, on_batch)
    to_fold: set[int] = set()
    if source.format == "jsonl":
        if scratch is None:
            raise ValueError("a JSONL history needs a scratch folder for its conversion (scratch_for)")
        report = ReadReport()
        dest = scratch / "history.parquet"
        n = write_parquet(iter_source_jsonl(source, report), dest, big_offsets=to_fold, on_batch=on_batch)
        return Prepared([dest], n, "jsonl", list(report.warnings), to_fold)
    n = validate_parquet(source.files, big_offsets=to_fold, on_batch=on_batch, digest=digest)
    return Prepared(list(source.files), n, "parquet", to_fold=to_fold)


def _then(digest: Callable, on_batch: Callable) -> Callable:
    """`on_batch` of `digest` of a batch."""
    def both(batch) -> None:
        on_batch(digest(batch))
    return both


def file_uri(path: Path) -> str:
    """`file:` and the absolute path, as Hadoop's paths take it: not `as_uri()`,
    whose percent-escapes (a space as %20) Hadoop would read literally."""
    return "file://" + str(Path(path).absolute())
