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
the same minimum and maximum of each column per value (each event's
value given its row by `checkers.key_rows`, every column of a batch
reduced into the rows in one compiled pass, checkers/compiled.py): the
frame's columns, which the
driver checks (checkers/driver_value_checks.py) in place of Spark's
aggregation and checks. The rows and the functions over them are the
same, so the frame is the same: a test checks every anomaly kind both
ways. Each value's acknowledged position is reduced first: with the
reads' positions and values it is all the by-position facts need
(checkers/driver_by_position.py), and those are made in a thread beside
the rest of the frame, read by `by_position`. Indexes and processes are
kept in the narrowest integer type that holds the history's.

It holds about 40 bytes per send event and per record read until the frame
is made and the positions with it: a 10M-event history's check peaked at
2.1 to 2.8 GiB on the Python side (liveness measured beside the frame),
against 1.3 GiB without it. So only histories up
to `check.DRIVER_FRAMES_EVENTS` (or --driver-frames-up-to) take it; Spark
aggregates larger ones, and those whose check has no scratch folder its
executors read (a Parquet history on a cluster without --scratch).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from checkers.anomalies import FAIL, INFO, MAX_OFFSET, OK, POS_BITS, FinalLogs
from checkers.compiled import compiled, first_not_below
from checkers.driver_by_position import Positions, duplicate_reads, positions
from checkers.key_rows import key_rows

# Every index, position, partition, process and outcome gathered is >= 0,
# so -1 is "none", Spark's null. A maximum skips it as it is; a minimum
# skips it by a test (`lower_at`), or when taken over the same bits as
# unsigned, where -1 is the largest number (`least`): either is -1 only for
# a value with nothing of a column, with no identity to put in its place first.
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
        # What `aggregate` leaves `by_position`: the by-position facts being
        # made, the duplicated values and the reads (None: none duplicated);
        # and the duplicated values' reads `by_position` finds.
        self._positions: Future | None = None
        self._for_duplicates: tuple | None = None
        self.duplicate_reads: pa.Table | None = None

    def add_sends(self, send: np.ndarray, invoke: np.ndarray, typ: np.ndarray, ok: int, fail: int,
                  value: np.ndarray, index: np.ndarray, partition: np.ndarray, offset: np.ndarray,
                  process: np.ndarray) -> None:
        """A batch's client send events (where `send` holds, of its events'
        columns): each one's value, index, whether it is an invocation, an
        ok or a failed completion (`typ` is `ok` or `fail`; an info
        otherwise), its partition and offset (read where ok), and its
        process. Kept as value, index, invocation, outcome, acknowledged
        position and process, made in one compiled pass (NumPy's eight
        gathers and five passes took 0.1 s of a 10M-event history's read)."""
        n = int(np.count_nonzero(send))
        rows = [np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, bool), np.empty(n, np.int8),
                np.empty(n, np.int64), np.empty(n, np.int64)]
        _send_rows(send, invoke, typ, ok, fail, value, index, partition, offset, process, *rows)
        self._sends.append(rows)

    def add_reads(self, value: np.ndarray, partition: np.ndarray, offset: np.ndarray, index: np.ndarray,
                  process: np.ndarray) -> None:
        """A batch's records of ok client polls: each one's value, partition
        and offset, and its poll's index and process."""
        self._reads.append([value, (partition << POS_BITS) | offset, index, process])

    def aggregate(self, logs: FinalLogs) -> dict[str, np.ndarray]:
        """Aggregate what was gathered by value, with the final logs' marks:
        the frame's columns (`COLUMNS`), one array each, -1 for null (the
        gathered rows are let go on the way). Each batch is reduced into
        the values' rows as it is (its temporaries, a batch long, reuse
        warm memory), in one compiled pass. Each value's
        acknowledged position comes first: with the reads' positions it is
        all the by-position facts need, and those are made in a thread of
        their own from then on (`by_position`)."""
        sends, reads, self._sends, self._reads = self._sends, self._reads, [], []
        values, row_of = key_rows([batch[0] for batch in sends] + [batch[0] for batch in reads])
        # Indexes and processes in the fewest bytes that hold the history's:
        # each column is a fresh array per value, and memory first touched
        # was a fifth of a 10M-event check's CPU time (docs/benchmarks.md).
        index_type = narrowest(_top([b[1] for b in sends] + [b[2] for b in reads]))
        process_type = narrowest(_top([b[-1] for b in sends + reads]))
        send_rows = [row_of(batch[0]) for batch in sends]
        ack_pos = np.full(len(values), NONE, np.int64)
        for rows, batch in zip(send_rows, sends):
            greatest_at(ack_pos, rows, batch[4])
        acked = ack_pos != NONE
        beside = ThreadPoolExecutor(1, thread_name_prefix="by-position")
        self._positions = beside.submit(positions, [ack_pos[acked]] + [batch[1] for batch in reads],
                                        [values[acked]] + [batch[0] for batch in reads])
        beside.shutdown(wait=False)  # the thread ends with its one task
        del acked
        out = {"value": values, "ack_pos": ack_pos,
               **_send_columns(len(values), send_rows, sends, index_type, process_type)}
        del sends, send_rows
        # The least and greatest of the acknowledged and read positions (nulls
        # skipped): the reads' reduced into copies of the acknowledged.
        out.update(_read_columns(row_of, reads, logs, index_type, ack_pos))
        duplicated = values[(out["first_pos"] != NONE) & (out["first_pos"] != out["last_pos"])]
        self._for_duplicates = (duplicated, reads) if len(duplicated) else None
        return {name: out[name] for name in COLUMNS}

    def by_position(self) -> Positions:
        """The positions known to hold a value, once their thread has made
        them, and the duplicated values' reads as `duplicate_reads` if any
        value is duplicated (checkers/driver_by_position.py). Their work
        runs outside Python's lock: the by-value checks run beside."""
        if self._for_duplicates is not None:
            duplicated, reads = self._for_duplicates
            self._for_duplicates = None
            self.duplicate_reads = duplicate_reads(duplicated, [b[0] for b in reads], [b[1] for b in reads],
                                                   [b[2] for b in reads])
        made, self._positions = self._positions, None
        return made.result()


@compiled
def _send_rows(send, invoke, typ, ok, fail, value, index, partition, offset, process, out_value, out_index,
               out_invoke, out_outcome, out_ack, out_process):
    """`ValueRows.add_sends`' pass: each send's row into the `out_` columns."""
    k = 0
    for i in range(len(send)):
        if not send[i]:
            continue
        out_value[k], out_index[k], out_process[k], out_invoke[k] = value[i], index[i], process[i], invoke[i]
        out_outcome[k] = out_ack[k] = NONE
        if not invoke[i]:
            out_outcome[k] = OK if typ[i] == ok else FAIL if typ[i] == fail else INFO
            if typ[i] == ok:
                out_ack[k] = (partition[i] << POS_BITS) | offset[i]
        k += 1


def narrowest(top: int) -> type:
    """The narrowest signed type of a column of numbers 0..`top` and NONE."""
    return next(kind for kind in (np.int8, np.int16, np.int32, np.int64) if top <= np.iinfo(kind).max)


def _top(columns: list[np.ndarray]) -> int:
    """The largest number of the columns (0 for none)."""
    return max((int(c.max()) for c in columns if len(c)), default=0)


def _unsigned(a: np.ndarray) -> np.ndarray:
    """`a`'s bits as the unsigned type of its width: NONE is its largest number."""
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def least(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The elementwise minimum of two columns, NONE skipped (as unsigned, the largest)."""
    if a.dtype != b.dtype:
        a, b = a.astype(np.int64), b.astype(np.int64)
    return np.minimum(_unsigned(a), _unsigned(b)).view(a.dtype)


def _send_columns(n: int, rows: list[np.ndarray], batches: list[list], index_type: type,
                  process_type: type) -> dict[str, np.ndarray]:
    """Per value (`n`, each send event's row in `rows`, a batch each): the
    send columns of the by-value frame from `add_sends`' batches, but its
    acknowledged position; indexes and processes as `index_type` and
    `process_type`."""
    out = {name: np.full(n, NONE, kind) for name, kind in (
        ("inv_index", index_type), ("inv_index_last", index_type), ("process", process_type),
        ("process_max", process_type), ("comp_index", index_type), ("comp_index_last", index_type),
        ("outcome", np.int8))}
    for row, (_, index, invoke, outcome, _, process) in zip(rows, batches):
        _reduce_sends(row, index, invoke, outcome, process, *out.values())
    return out


@compiled
def _reduce_sends(rows, index, invoke, outcome, process, inv_min, inv_max, proc_min, proc_max, comp_min,
                  comp_max, outcome_max):
    """`_send_columns`' reduction of one batch, in one pass."""
    for i in range(len(rows)):
        r, x = rows[i], index[i]
        if invoke[i]:
            lower_at(inv_min, r, x)
            raise_at(inv_max, r, x)
        else:
            lower_at(comp_min, r, x)
            raise_at(comp_max, r, x)
        lower_at(proc_min, r, process[i])
        raise_at(proc_max, r, process[i])
        raise_at(outcome_max, r, outcome[i])


@compiled
def greatest_at(out, rows, column):
    """Each row's greatest of `column` (`rows`: each element's), into `out`
    (ack_pos's reduction, the latencies' largest)."""
    for i in range(len(rows)):
        raise_at(out, rows[i], column[i])
    return out


@compiled
def lower_at(column, r, x):
    """Row `r` of a minimum's column takes `x` if less (NONE: nothing yet)."""
    if column[r] == NONE or x < column[r]:
        column[r] = x


@compiled
def raise_at(column, r, x):
    """Row `r` of a maximum's column takes `x` if greater (NONE is below any)."""
    if x > column[r]:
        column[r] = x


def _read_columns(row_of: Callable, batches: list[list], logs: FinalLogs, index_type: type,
                  ack_pos: np.ndarray) -> dict[str, np.ndarray]:
    """Per value (each record read's row `row_of` its value, as `ack_pos`'):
    the read columns of the by-value frame, from `add_reads`' batches, with
    `anomalies.build`'s marks: final (inside a final-reads bracket), in the
    final log (final, below its partition's known end), read during the run
    (not final, its partition's end known); and the first and last
    positions, of the reads and the acknowledgement (`ack_pos`)."""
    n = len(ack_pos)
    out = {"first_pos": ack_pos.copy(), "last_pos": ack_pos.copy(),
           **{name: np.full(n, NONE, kind) for name, kind in (
               ("read_index", index_type), ("final_part_min", np.int32), ("final_part_max", np.int32),
               ("run_part_min", np.int32), ("run_part_max", np.int32), ("run_index", index_type))}}
    for value, pos, index, process in batches:
        end = lookup(logs.ends, pos >> POS_BITS)
        _reduce_reads(row_of(value), pos, index, end, in_brackets(process, index, logs.brackets), *out.values())
    return out


@compiled
def _reduce_reads(rows, pos, index, end, final, first_pos, last_pos, read_index, final_min, final_max, run_min,
                  run_max, run_index):
    """`_read_columns`' reduction of one batch, in one pass: `end` is each
    read's partition's known end (NONE: not known), `final` whether it lies
    in a final-reads bracket."""
    for i in range(len(rows)):
        r, p, x = rows[i], pos[i], index[i]
        lower_at(first_pos, r, p)
        raise_at(last_pos, r, p)
        lower_at(read_index, r, x)
        if end[i] == NONE:
            continue
        partition = p >> POS_BITS
        if not final[i]:
            lower_at(run_min, r, partition)
            raise_at(run_max, r, partition)
            lower_at(run_index, r, x)
        elif (p & MAX_OFFSET) < end[i]:
            lower_at(final_min, r, partition)
            raise_at(final_max, r, partition)


# A mapping whose keys are all below this (a history's partitions) is looked
# up in a table: a binary search of 9.9M reads' partitions took 0.15 s.
TABLE_KEYS = 1 << 16


def lookup(mapping: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """`mapping[key]` for each of `keys`, NONE where a key is not in it."""
    if not mapping:
        return np.full(len(keys), NONE)
    if 0 <= min(mapping) and max(mapping) < TABLE_KEYS:
        table = np.full(max(mapping) + 2, NONE)  # the last for every key outside the table
        table[list(mapping)] = list(mapping.values())
        return table[np.clip(keys, -1, len(table) - 1)]  # -1 is the last too
    known = np.array(sorted(mapping), np.int64)
    found = np.array([mapping[k] for k in known.tolist()], np.int64)
    where = np.minimum(np.searchsorted(known, keys), len(known) - 1)
    return np.where(known[where] == keys, found[where], NONE)


def in_brackets(process: np.ndarray, index: np.ndarray, brackets: dict[int, list[tuple[int, int]]]) -> np.ndarray:
    """Whether each event (by its process and index) lies strictly inside a
    final-reads bracket of its process (`anomalies._in_brackets`' test): one
    compiled pass, each event's process looked for among the few with
    brackets (NumPy's masks per process took 0.09 s of a 10M-event check)."""
    inside = np.zeros(len(process), bool)
    if not brackets:
        return inside
    procs = np.array(sorted(brackets), np.int64)
    spans = [sorted(brackets[p]) for p in procs.tolist()]
    first = np.cumsum([0] + [len(s) for s in spans], dtype=np.int64)
    low = np.array([lo for s in spans for lo, _ in s], np.int64)
    high = np.array([hi for s in spans for _, hi in s], np.int64)
    return _inside(process, index, procs, first, low, high, inside)


@compiled
def _inside(process, index, procs, first, low, high, inside):
    """`in_brackets`' pass: process `procs[k]`'s brackets are (`low`, `high`)
    from `first[k]` to `first[k + 1]`."""
    for i in range(len(process)):
        p = process[i]
        lo = first_not_below(procs, p, 0, len(procs))
        if lo == len(procs) or procs[lo] != p:
            continue
        for k in range(first[lo], first[lo + 1]):
            if low[k] < index[i] < high[k]:
                inside[i] = True
                break
    return inside
