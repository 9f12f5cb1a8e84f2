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
history is read and its final logs are known, `aggregate` marks each
read final (inside a final-reads bracket of its process), in the final
log, or read during the run, exactly as `anomalies.build` does, and takes
the same minimum and maximum of each column per value with NumPy (each
event's value given its row by `value_rows`, each column reduced into the
rows by `ufunc.at`): the frame's columns, which the
driver checks (checkers/driver_value_checks.py) in place of Spark's
aggregation and checks. The rows and the functions over them are the
same, so the frame is the same: a test checks every anomaly kind both
ways. The reads' values, positions and indexes, and each value's
acknowledged position, are kept for `by_position`, which makes the
by-position facts from them (checkers/driver_by_position.py).

It holds about 40 bytes per send event and per record read until the frame
is made, more while it aggregates, and 24 bytes per record read until
the positions are made: a 10M-event history's check peaked at 2.2 to 2.4
GiB on the Python side, against 1.3 GiB without it. So only histories up
to `check.DRIVER_FRAMES_EVENTS` (or --driver-frames-up-to) take it; Spark
aggregates larger ones, and those whose check has no scratch folder its
executors read (a Parquet history on a cluster without --scratch).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from checkers.anomalies import FAIL, INFO, OK, POS_BITS, FinalLogs
from checkers.driver_by_position import Positions, duplicate_reads, positions

# Every index, position, partition, process and outcome gathered is >= 0,
# so -1 is "none", Spark's null. A maximum skips it as it is; a minimum
# skips it when taken over the same bits as unsigned, where -1 is the
# largest number: either is -1 only for a value with nothing of a column,
# with no identity to put in its place first.
NONE = -1

# The by-value frame's columns, in `anomalies.add_by_value`'s order.
COLUMNS = ("value", "inv_index", "inv_index_last", "process", "process_max", "comp_index", "comp_index_last",
           "outcome", "ack_pos", "read_index", "final_part_min", "final_part_max", "run_part_min", "run_part_max",
           "run_index", "first_pos", "last_pos")


class ValueRows:
    """The by-value rows of a history, gathered batch by batch (`add_sends`,
    `add_reads`), then aggregated (`aggregate`)."""

    def __init__(self) -> None:
        self._sends: list[list] = []  # a batch's columns each
        self._reads: list[list] = []
        # What `aggregate` keeps for `by_position`, and the duplicated
        # values' reads that makes (None: no value is duplicated).
        self._for_positions: tuple | None = None
        self.duplicate_reads: pa.Table | None = None

    def add_sends(self, value: np.ndarray, index: np.ndarray, invoke: np.ndarray, ok: np.ndarray,
                  fail: np.ndarray, partition: np.ndarray, offset: np.ndarray, process: np.ndarray) -> None:
        """A batch's client send events: each one's value, index, whether it
        is an invocation, an ok or a failed completion (an info otherwise),
        its partition and offset (read where ok), and its process."""
        outcome = np.where(invoke, NONE, np.where(ok, OK, np.where(fail, FAIL, INFO)))
        ack = np.where(ok, (partition << POS_BITS) | offset, NONE)
        self._sends.append([value, index, invoke, outcome, ack, process])

    def add_reads(self, value: np.ndarray, partition: np.ndarray, offset: np.ndarray, index: np.ndarray,
                  process: np.ndarray) -> None:
        """A batch's records of ok client polls: each one's value, partition
        and offset, and its poll's index and process."""
        self._reads.append([value, partition, offset, index, process])

    def aggregate(self, logs: FinalLogs) -> dict[str, np.ndarray]:
        """Aggregate what was gathered by value, with the final logs' marks:
        the frame's columns (`COLUMNS`), one array each, -1 for null (the
        gathered rows are let go on the way). The reads are aggregated in a
        thread beside the sends."""
        (read_value, partition, offset, read_index, process), self._reads = _joined(self._reads, 5), []
        read_pos = (partition << POS_BITS) | offset
        sends, self._sends = _joined(self._sends, 6), []
        values, (send_row, read_row) = value_rows(sends[0], read_value)
        out = {"value": values}
        with ThreadPoolExecutor(1, thread_name_prefix="by-value-reads") as beside:
            by_read = beside.submit(_read_columns, len(values), read_row, partition, offset, read_pos, read_index,
                                    process, logs)
            del partition, offset, process, read_row
            out.update(_send_columns(len(values), send_row, *sends[1:]))
            del sends, send_row
            out.update(by_read.result())
        # least/greatest of the acknowledged and read positions, nulls skipped.
        out["first_pos"] = least(out["ack_pos"], out.pop("read_first_pos"))
        out["last_pos"] = np.maximum(out["ack_pos"], out.pop("read_last_pos"))
        acked = out["ack_pos"] != NONE
        ack_pos, ack_value = out["ack_pos"][acked], values[acked]
        duplicated = values[(out["first_pos"] != NONE) & (out["first_pos"] != out["last_pos"])]
        del acked
        self._for_positions = (ack_pos, ack_value, duplicated, read_value, read_pos, read_index)
        return {name: out[name] for name in COLUMNS}

    def by_position(self) -> Positions:
        """The positions known to hold a value, from the rows `aggregate`
        kept (let go here), and the duplicated values' reads as
        `duplicate_reads` if any value is duplicated
        (checkers/driver_by_position.py). NumPy's sorts run outside
        Python's lock: the by-value checks run beside."""
        ack_pos, ack_value, duplicated, read_value, read_pos, read_index = self._for_positions
        self._for_positions = None
        if len(duplicated):
            self.duplicate_reads = duplicate_reads(duplicated, read_value, read_pos, read_index)
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


# Values are given their rows by a table where they are dense in blocks of
# 2**BLOCK_BITS numbers: a history's values are usually 0, 1, 2, ... (a
# run's), or such runs far apart (`harness gen-history`'s parts). The blocks
# they use may hold at most DENSE_SPREAD times as many numbers as there are
# sends and reads; more spread out values are given their rows by a sort.
BLOCK_BITS = 16
DENSE_SPREAD = 2


def value_rows(*keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The distinct values of the `keys` arrays, sorted, and for each array
    its elements' rows among them (their ranks). Where the values are dense
    in their blocks (BLOCK_BITS, DENSE_SPREAD), a table says which numbers
    of the blocks used are present, and their running count is each one's
    rank: no sort. A 10M-event history's 14M sends and reads: 0.9 s in a
    check, most of it fresh memory's first touch, against 2.3 s sorted
    (docs/benchmarks.md)."""
    total = sum(len(k) for k in keys)
    if not total:
        return np.empty(0, np.int64), [np.empty(0, np.intp) for _ in keys]
    low = min(int(k.min()) for k in keys if len(k))
    blocks = ((max(int(k.max()) for k in keys if len(k)) - low) >> BLOCK_BITS) + 1
    if blocks <= total:  # so every value less `low` is below 2**63
        shifted = [k - low for k in keys]
        used = np.zeros(blocks, bool)
        for k in shifted:
            used[k >> BLOCK_BITS] = True
        first = np.flatnonzero(used)  # the blocks used, each one's first number less `low`
        if len(first) << BLOCK_BITS <= DENSE_SPREAD * total + (1 << BLOCK_BITS):
            block = np.cumsum(used, dtype=np.intp) - 1
            del used
            slots = [(block[k >> BLOCK_BITS] << BLOCK_BITS) | (k & ((1 << BLOCK_BITS) - 1)) for k in shifted]
            del shifted, block
            present = np.zeros(len(first) << BLOCK_BITS, bool)
            for slot in slots:
                present[slot] = True
            rank = np.cumsum(present, dtype=np.intp) - 1
            taken = np.flatnonzero(present)
            values = (first[taken >> BLOCK_BITS] << BLOCK_BITS) + (taken & ((1 << BLOCK_BITS) - 1)) + low
            return values.astype(np.int64), [rank[slot] for slot in slots]
    values, rows = np.unique(np.concatenate(keys), return_inverse=True)
    return values, np.split(rows.reshape(-1), np.cumsum([len(k) for k in keys[:-1]]))


def _reduced(n: int, row: np.ndarray, columns: list[tuple]) -> dict[str, np.ndarray]:
    """Per value (`n` of them, each element's `row`), each column's minimum
    and maximum, NONE skipped: {name: reduced}, NONE where a value has
    nothing of the column. `columns`: (make, name of its minimum or None,
    name of its maximum or None), `make` a function that makes the column,
    called in turn so that one is held at a time. NONE is the identity of
    both: the least number for a maximum, and, as unsigned, the greatest
    for a minimum."""
    out = {}
    for make, low, high in columns:
        column = make()
        if high is not None:
            out[high] = np.full(n, NONE)
            np.maximum.at(out[high], row, column)
        if low is not None:
            reduced = np.full(n, NONE).view(np.uint64)
            np.minimum.at(reduced, row, column.view(np.uint64))
            out[low] = reduced.view(np.int64)
    return out


def least(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The elementwise minimum of two columns, NONE skipped (as unsigned, the largest)."""
    return np.minimum(a.view(np.uint64), b.view(np.uint64)).view(np.int64)


def _send_columns(n: int, row: np.ndarray, index, invoke, outcome, ack, process) -> dict[str, np.ndarray]:
    """Per value (`n`, each send event's `row`): the send columns of the by-value frame."""
    def inv():
        return np.where(invoke, index, NONE)

    def comp():
        return np.where(invoke, NONE, index)

    return _reduced(n, row, [(inv, "inv_index", "inv_index_last"), (lambda: process, "process", "process_max"),
                             (comp, "comp_index", "comp_index_last"), (lambda: outcome, None, "outcome"),
                             (lambda: ack, None, "ack_pos")])


def _read_columns(n: int, row: np.ndarray, partition, offset, pos, index, process,
                  logs: FinalLogs) -> dict[str, np.ndarray]:
    """Per value (`n`, each record read's `row`): the read columns of the by-value frame, with
    `anomalies.build`'s marks: final (inside a final-reads bracket), in the
    final log (final, below its partition's known end), read during the run
    (not final, its partition's end known)."""
    final = in_brackets(process, index, logs.brackets)
    end = lookup(logs.ends, partition)
    has_end = end != NONE
    in_final = final & has_end & (offset < end)
    in_run = ~final & has_end
    del final, end, has_end

    def final_part():
        return np.where(in_final, partition, NONE)

    def run_part():
        return np.where(in_run, partition, NONE)

    return _reduced(n, row, [(lambda: pos, "read_first_pos", "read_last_pos"), (lambda: index, "read_index", None),
                             (final_part, "final_part_min", "final_part_max"),
                             (run_part, "run_part_min", "run_part_max"),
                             (lambda: np.where(in_run, index, NONE), "run_index", None)])


def lookup(mapping: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """`mapping[key]` for each of `keys`, NONE where a key is not in it."""
    if not mapping:
        return np.full(len(keys), NONE)
    known = np.array(sorted(mapping), np.int64)
    found = np.array([mapping[k] for k in known.tolist()], np.int64)
    where = np.minimum(np.searchsorted(known, keys), len(known) - 1)
    return np.where(known[where] == keys, found[where], NONE)


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
