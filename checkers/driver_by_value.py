"""The by-value frame made on the driver, for histories that fit its memory.

`checkers.anomalies.add_by_value` defines the by-value frame: every send
event and every record read, as rows of one union, grouped by value, each
column a minimum or maximum of its role's field. In Spark that is the
check's largest cost (a 10M-event history: 18.6M rows hashed, shuffled and
kept, about 9.5 s of a 23.5 s check on two cores; docs/benchmarks.md).

`ValueRows` gathers the same rows while the driver reads the history
(`checkers.reading.HistoryReader`): per send event its value, invocation or
completion index, outcome, acknowledged position and process; per record
read its value, position, and its poll's index and process. Once the
history is read and its final logs are known, `write` marks each read
final (inside a final-reads bracket of its process), in the final log, or
read during the run, exactly as `anomalies.build` does, takes the same
minimum and maximum of each column per value with NumPy (sorted by value,
reduced per run of equal values), and writes the frame's rows to Parquet,
which Spark reads in place of its own aggregation. The rows and the
functions over them are the same, so the frame is the same: a test checks
every anomaly kind both ways. The reads' values, positions and indexes,
and each value's acknowledged position, are kept for `by_position`, which
makes the by-position facts from them (checkers/driver_by_position.py).

It holds about 40 bytes per send event and per record read until the frame
is written, more while it aggregates, and 24 bytes per record read until
the positions are made: a 10M-event history's check peaked at 2.2 to 2.4
GiB on the Python side, against 1.3 GiB without it. So only histories up
to `check.DRIVER_FRAMES_EVENTS` (or --driver-frames-up-to) take it; Spark
aggregates larger ones, and those whose check has no scratch folder its
executors read (a Parquet history on a cluster without --scratch).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from checkers.anomalies import FAIL, INFO, OK, POS_BITS, FinalLogs
from checkers.driver_by_position import Positions, duplicate_reads, positions
from checkers.spark import arrow_schema

# Every index, position, partition, process and outcome gathered is >= 0,
# so -1 is "none", written as null. A maximum skips it as it is; a minimum
# skips it when taken over the same bits as unsigned, where -1 is the
# largest number: either is -1 only for a value with nothing of a column,
# with no identity to put in its place first.
_NONE = -1

# The by-value frame's columns, in `anomalies.add_by_value`'s order and types.
SPARK_SCHEMA = ("value long, inv_index long, inv_index_last long, process long, process_max long, "
                "comp_index long, comp_index_last long, outcome int, ack_pos long, read_index long, "
                "final_part_min long, final_part_max long, run_part_min long, run_part_max long, "
                "run_index long, first_pos long, last_pos long")
SCHEMA = arrow_schema(SPARK_SCHEMA)


class ValueRows:
    """The by-value rows of a history, gathered batch by batch (`add_sends`,
    `add_reads`), then aggregated and written to `path` (`write`)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._sends: list[list] = []  # a batch's columns each
        self._reads: list[list] = []
        # What `write` keeps for `by_position`, and where that writes the
        # duplicated values' reads (None: no value is duplicated).
        self._for_positions: tuple | None = None
        self.duplicate_reads: Path | None = None

    def add_sends(self, value: np.ndarray, index: np.ndarray, invoke: np.ndarray, ok: np.ndarray,
                  fail: np.ndarray, partition: np.ndarray, offset: np.ndarray, process: np.ndarray) -> None:
        """A batch's client send events: each one's value, index, whether it
        is an invocation, an ok or a failed completion (an info otherwise),
        its partition and offset (read where ok), and its process."""
        outcome = np.where(invoke, _NONE, np.where(ok, OK, np.where(fail, FAIL, INFO)))
        ack = np.where(ok, (partition << POS_BITS) | offset, _NONE)
        self._sends.append([value, index, invoke, outcome, ack, process])

    def add_reads(self, value: np.ndarray, partition: np.ndarray, offset: np.ndarray, index: np.ndarray,
                  process: np.ndarray) -> None:
        """A batch's records of ok client polls: each one's value, partition
        and offset, and its poll's index and process."""
        self._reads.append([value, partition, offset, index, process])

    def write(self, logs: FinalLogs) -> None:
        """Aggregate what was gathered by value, with the final logs' marks,
        and write the frame's rows (the gathered rows are let go on the way).
        The reads are aggregated in a thread beside the sends: NumPy's sorts
        and reductions run outside Python's lock, on both cores."""
        (read_value, partition, offset, read_index, process), self._reads = _joined(self._reads, 5), []
        read_pos = (partition << POS_BITS) | offset
        with ThreadPoolExecutor(1, thread_name_prefix="by-value-reads") as beside:
            by_read = beside.submit(_read_columns, read_value, partition, offset, read_pos, read_index, process, logs)
            del partition, offset, process
            sends, self._sends = _joined(self._sends, 6), []
            send_values, send_columns = _send_columns(*sends)
            del sends
            read_values, read_columns = by_read.result()
        # Every value once, sorted: the two sorted runs merged (a stable sort
        # of two runs is a merge), then the repeats dropped.
        values = np.concatenate((send_values, read_values))
        values.sort(kind="stable")
        values = values[np.concatenate(([True], values[1:] != values[:-1]))[:len(values)]]
        out = {"value": values}
        for keys, columns in ((send_values, send_columns), (read_values, read_columns)):
            at = np.searchsorted(values, keys)
            for name in list(columns):  # each let go once placed
                full = np.full(len(values), _NONE)
                full[at] = columns.pop(name)
                out[name] = full
            del at
        # least/greatest of the acknowledged and read positions, nulls skipped.
        out["first_pos"] = _least(out["ack_pos"], out.pop("read_first_pos"))
        out["last_pos"] = np.maximum(out["ack_pos"], out.pop("read_last_pos"))
        acked = out["ack_pos"] != _NONE
        ack_pos, ack_value = out["ack_pos"][acked], values[acked]
        duplicated = values[(out["first_pos"] != _NONE) & (out["first_pos"] != out["last_pos"])]
        del acked
        arrays = []
        for field in SCHEMA:
            column = out.pop(field.name)
            none = column == _NONE  # a masked slot's number is not read: it keeps its -1
            arrays.append(pa.array(column, type=field.type, mask=none if none.any() else None))
        pq.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA), str(self.path), compression="none",
                       use_dictionary=False, write_statistics=False)
        self._for_positions = (ack_pos, ack_value, duplicated, read_value, read_pos, read_index)

    def by_position(self) -> Positions:
        """The positions known to hold a value, from the rows `write` kept
        (let go here), and the duplicated values' reads, written to
        `duplicate_reads` if any value is duplicated
        (checkers/driver_by_position.py). NumPy's sorts run outside
        Python's lock: Spark's passes over the by-value frame run beside."""
        ack_pos, ack_value, duplicated, read_value, read_pos, read_index = self._for_positions
        self._for_positions = None
        if len(duplicated):
            self.duplicate_reads = self.path.with_name("duplicate_reads.parquet")
            pq.write_table(duplicate_reads(duplicated, read_value, read_pos, read_index), str(self.duplicate_reads),
                           compression="none", write_statistics=False)
        del read_index
        return positions(ack_pos, ack_value, read_pos, read_value)


def _joined(batches: list[list], width: int) -> list[np.ndarray]:
    """The batches' columns, each as one array; each batch's column is let
    go once joined, so no more than one column is held twice."""
    joined = []
    for i in range(width):
        joined.append(np.concatenate([b[i] for b in batches]) if batches else np.empty(0, np.int64))
        for b in batches:
            b[i] = None
    return joined


def _by_value(value: np.ndarray, columns: list[tuple]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The distinct values, sorted, and per value each column's minimum and
    maximum, _NONE skipped: {name: reduced}, _NONE where a value has nothing
    of the column. `columns`: (make, name of its minimum or None, name of
    its maximum or None), `make` a function that makes the column, called
    in turn so that one is held at a time; each is put in value order once
    for both. Equal values may come in any order (a minimum and a maximum
    do not depend on it): NumPy's default sort, not a stable one, which
    took 2.6 times as long over a 10M-event history's reads."""
    order = np.argsort(value)
    ordered = value[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))[:len(value)]
    out = {}
    for make, low, high in columns:
        column = make()[order]
        if not len(starts):
            out.update({name: column for name in (low, high) if name is not None})
            continue
        if high is not None:
            out[high] = np.maximum.reduceat(column, starts)
        if low is not None:
            out[low] = np.minimum.reduceat(column.view(np.uint64), starts).view(np.int64)
    return ordered[starts], out


def _least(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The elementwise minimum of two columns, _NONE skipped (as unsigned, the largest)."""
    return np.minimum(a.view(np.uint64), b.view(np.uint64)).view(np.int64)


def _send_columns(value, index, invoke, outcome, ack, process) -> tuple[np.ndarray, dict]:
    """Per value sent: the send columns of the by-value frame."""
    def inv():
        return np.where(invoke, index, _NONE)

    def comp():
        return np.where(invoke, _NONE, index)

    return _by_value(value, [(inv, "inv_index", "inv_index_last"), (lambda: process, "process", "process_max"),
                             (comp, "comp_index", "comp_index_last"), (lambda: outcome, None, "outcome"),
                             (lambda: ack, None, "ack_pos")])


def _read_columns(value, partition, offset, pos, index, process, logs: FinalLogs) -> tuple[np.ndarray, dict]:
    """Per value read: the read columns of the by-value frame, with
    `anomalies.build`'s marks: final (inside a final-reads bracket), in the
    final log (final, below its partition's known end), read during the run
    (not final, its partition's end known)."""
    final = in_brackets(process, index, logs.brackets)
    end = np.full(len(partition), _NONE)
    if logs.ends:
        known = np.array(sorted(logs.ends), np.int64)
        ends = np.array([logs.ends[p] for p in known.tolist()], np.int64)
        where = np.minimum(np.searchsorted(known, partition), len(known) - 1)
        end = np.where(known[where] == partition, ends[where], _NONE)
    has_end = end != _NONE
    in_final = final & has_end & (offset < end)
    in_run = ~final & has_end
    del final, end, has_end

    def final_part():
        return np.where(in_final, partition, _NONE)

    def run_part():
        return np.where(in_run, partition, _NONE)

    return _by_value(value, [(lambda: pos, "read_first_pos", "read_last_pos"), (lambda: index, "read_index", None),
                             (final_part, "final_part_min", "final_part_max"),
                             (run_part, "run_part_min", "run_part_max"),
                             (lambda: np.where(in_run, index, _NONE), "run_index", None)])


def in_brackets(process: np.ndarray, index: np.ndarray, brackets: dict[int, list[tuple[int, int]]]) -> np.ndarray:
    """Whether each event (by its process and index) lies strictly inside a
    final-reads bracket of its process (`anomalies._in_brackets`' test)."""
    inside = np.zeros(len(process), bool)
    if not brackets:
        return inside
    rows = np.flatnonzero(np.isin(process, list(brackets)))
    for p, spans in brackets.items():
        of_p = rows[process[rows] == p]
        for lo, hi in spans:
            inside[of_p[(index[of_p] > lo) & (index[of_p] < hi)]] = True
    return inside
