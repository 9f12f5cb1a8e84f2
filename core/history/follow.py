"""A run's `history.jsonl` converted to `history.parquet` while it is
written, so that the check need not wait for the conversion.

Converting a run's history after the run was part of the check phase
(parsing and validating each line, then building the Arrow columns;
docs/decisions.md, "The history converted while written; Kafka's dumps
without a JVM"). `Follower.start` starts a process (niced, so that it
yields to the run's clients and brokers) that reads the lines as the writer
appends them, validates them with the same rules as `iter_jsonl`
(`follow_jsonl`) and builds their columns a read at a time; once told the
history is closed it reads the rest and writes the last row group: the same
rows as `jsonl_to_parquet` gives, in row groups that grow to its size
(`group_rows`).

The file appears only when the follower was told the history is closed and
read all of it: `history.parquet` is what a later check prefers to the
JSONL, so a partial one must never be left where a check would find it.
Anything else (the harness gone, a line it could not read while the file
was being written, an empty history) leaves no file, and the caller
converts the whole JSONL itself, as before, which also says exactly what is
wrong with it.

`python -m core.history.follow SRC DEST` is the follower process; it reads
its standard input for `end`, and writes a line `{"events": N, "warnings":
[...], ...}` on standard output when the file is in place.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from core.errors import HistoryError
from core.history.jsonl import ReadReport, follow_jsonl
from core.history.parquet import ROW_GROUP, arrow_schema, events_to_table

END = b"end\n"  # the harness's word that the history is closed
POLL_S = 0.1  # how often the file is read while nothing else wakes the follower
NICE = 10
FIRST_GROUP = 1 << 15  # rows in the first row groups (group_rows)
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


class Follower:
    """The follower process of one history."""

    def __init__(self, process: subprocess.Popen, errors):
        self.process = process
        self.errors = errors  # its stderr: a file, which unlike a pipe never fills and stops it

    @staticmethod
    def start(src: str | os.PathLike, dest: str | os.PathLike) -> "Follower":
        """Follow `src` (which must exist) into `dest`; raises OSError if the
        process cannot start."""
        errors = tempfile.TemporaryFile()
        try:
            process = subprocess.Popen([sys.executable, "-m", "core.history.follow", str(src), str(dest)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                                       cwd=_PROJECT_ROOT)
        except OSError:
            errors.close()
            raise
        return Follower(process, errors)

    def finish(self, timeout_s: float = 600.0) -> dict | str:
        """Say the history is closed and wait for the Parquet file: its
        `events` count, the reader's `warnings`, and the seconds from the
        word to the file (`after_told_s`, of them `last_row_group_s`
        writing); or why there is none (then the caller converts the JSONL
        itself). The answer comes before the process's exit, which is left
        to `abandon` to reap."""
        try:
            self.process.stdin.write(END)
            self.process.stdin.close()
        except OSError:  # gone already: why is on its stderr
            pass
        answer = self._answer(timeout_s)
        if answer is None:
            self.abandon()
            return f"not done after {timeout_s:g} s"
        try:
            done = orjson.loads(answer) if answer else None
        except orjson.JSONDecodeError:
            done = None
        if isinstance(done, dict) and isinstance(done.get("events"), int):
            return done
        try:
            status = self.process.wait(timeout=10)
            self.errors.seek(0)
            lines = self.errors.read().decode(errors="replace").strip().splitlines()
        except (subprocess.TimeoutExpired, OSError, ValueError):
            status, lines = None, []
        return lines[-1] if lines else f"no answer (exit status {status})"

    def _answer(self, timeout_s: float) -> bytes | None:
        """The follower's line on its stdout (b"" if it closed without one);
        None if none came in time."""
        fd, got = self.process.stdout.fileno(), b""
        deadline = time.monotonic() + timeout_s
        while not got.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            got += chunk
        return got

    def abandon(self) -> None:
        """Stop the follower, which then leaves no Parquet file (a run that
        recorded nothing, or that an error ended), or reap it after `finish`
        (its file in place before its answer). Idempotent."""
        try:
            self.process.stdin.close()  # without the word: it removes its temporary file and exits
            self.process.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.errors.close()


# --------------------------------------------------------------------------
# The follower process


def _waiter(control, timings: dict):
    """`follow_jsonl`'s wait: up to POLL_S for the harness's word; True once
    it said `end` (when, into `timings`). Its pipe closed without that word
    means the harness is gone before the history was closed: SystemExit,
    and no file."""
    said = b""

    def wait() -> bool:
        nonlocal said
        if select.select([control], [], [], POLL_S)[0]:
            data = os.read(control.fileno(), 64)
            said += data
            if END in said:
                timings["told"] = time.monotonic()
                return True
            if not data:
                raise SystemExit("the harness went away before the history was closed")
        return False
    return wait


def group_rows(written: int) -> int:
    """The rows of the next row group, `written` rows into the file: a
    quarter of those, from FIRST_GROUP up to ROW_GROUP. What is left when the
    history closes is written then, in the check's time, so a short run's
    groups are small, and so is the write left for the check; a long one's
    grow to `write_parquet`'s."""
    return min(ROW_GROUP, max(FIRST_GROUP, written // 4))


def convert(src: Path, dest: Path, wait, timings: dict | None = None) -> tuple[int, ReadReport]:
    """The conversion itself: `src` followed until `wait()` says it is closed,
    then written to `dest` (through a temporary file beside it); the last row
    group's write time into `timings`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    timings = timings if timings is not None else {}
    report = ReadReport()
    tmp = dest.with_name(dest.name + ".follow.tmp")
    tables, buffered, n = [], 0, 0
    try:
        with pq.ParquetWriter(tmp, arrow_schema(), compression="zstd") as writer:
            for events in follow_jsonl(src, wait, report):
                tables.append(events_to_table(events))
                buffered += len(events)
                while buffered >= (rows := group_rows(n)):  # a row group as soon as there is one
                    table = pa.concat_tables(tables)
                    writer.write_table(table.slice(0, rows))
                    tables, buffered, n = [table.slice(rows)], buffered - rows, n + rows
            if buffered:
                writing = time.monotonic()
                writer.write_table(pa.concat_tables(tables))
                n += buffered
                timings["last row group"] = time.monotonic() - writing
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return n, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="convert a history to Parquet while it is written "
                                                 "(started by the harness)")
    parser.add_argument("src", type=Path)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the harness, which then still checks
    try:
        os.nice(NICE)
    except OSError:
        pass
    timings: dict = {}
    try:
        n, report = convert(args.src, args.dest, _waiter(sys.stdin.buffer, timings), timings)
    except (HistoryError, OSError) as e:
        print(f"history follower: {e}", file=sys.stderr)
        return 3
    sys.stdout.buffer.write(orjson.dumps({
        "events": n, "warnings": report.warnings, "after_told_s": round(time.monotonic() - timings["told"], 3),
        "last_row_group_s": round(timings.get("last row group", 0.0), 3)}) + b"\n")
    sys.stdout.buffer.flush()  # the harness goes on at this line, before this process's exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
