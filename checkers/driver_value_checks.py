"""The by-value checks and their examples made on the driver, over its frame.

`checkers.anomalies.value_checks` defines them in Spark: one aggregation
over the by-value frame for the contract's checks across a value's sends,
the counts and each value anomaly (lost-write, lost-acked, dirty-read,
unseen, aborted-read, duplicate), then `anomalies.example_rows` for the
first values of each. Where the driver made the frame
(checkers/driver_by_value.py) it holds its columns, one NumPy array each
with -1 for null, and checks them here: the same conditions, column by
column, with none of Spark's jobs (a 10M-event history: 2.5 s of Spark's
by-value aggregation and example scan, docs/benchmarks.md).

Spark's conditions treat a null as unknown, and a row counts only where a
condition is true; with -1 for null, each comparison here is made false
where Spark's would be null and the outcome differs (a position, partition
or index is never -1 otherwise). The property test
(tests/checkers/test_property.py) checks generated histories with every
kind of anomaly both ways, and the checker tests' `check` fixture every
hand-made history, and each compares the whole results.

Values seen in two partitions or more are settled per partition by
`anomalies.multi_partition_checks` in Spark, from their rows written for
it (`write_multi_rows`): they are rare, and the reads they need are not kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from checkers.anomalies import (EXAMPLE_COLUMNS, EXAMPLE_ORDER, FAIL, INFO, MAX_OFFSET, MULTI_COLUMNS, OK, POS_BITS,
                                FinalLogs, example_limit, refuse_broken_sends)
from checkers.compiled import compiled, first_not_below
from checkers.driver_by_value import NONE, least, lookup, lower_at


def value_checks(frame: dict[str, np.ndarray], max_read: dict[int, int], logs: FinalLogs) -> dict:
    """`anomalies.value_checks` over the driver's by-value columns (`frame`,
    let go here): refuses a history whose sends break the contract, and
    returns the same counts, with "frame" the columns `examples` and
    `write_multi_rows` read. Each value's conditions are taken in one
    compiled pass (`_conditions`), not a NumPy pass and an array each."""
    c = frame
    ack_pos, run_part = c["ack_pos"], c["run_part_min"]
    ack_part = np.where(ack_pos != NONE, ack_pos >> POS_BITS, NONE)
    maxread, ack_end = lookup(max_read, ack_part), lookup(logs.ends, ack_part)
    del ack_part
    flags = np.zeros((len(FLAGS), len(ack_pos)), np.bool_)
    counts = np.zeros(len(COUNTS), np.int64)
    broken = np.full(len(BROKEN), NONE, np.int64)
    _conditions(c["outcome"], ack_pos, maxread, ack_end, c["inv_index"], c["inv_index_last"], c["comp_index"],
                c["comp_index_last"], c["read_index"], c["process"], c["process_max"], c["final_part_min"],
                c["final_part_max"], run_part, c["run_part_max"], c["first_pos"], c["last_pos"], flags, counts,
                broken)
    refuse_broken_sends({name: (None if at == NONE else at) for name, at in zip(BROKEN, broken.tolist())})
    result = {**{name: None for name in BROKEN}, **dict(zip(COUNTS, counts.tolist()))}
    kept = {name: c[name] for name in EXAMPLE_COLUMNS if name in c}
    kept.update(max_read_offset=maxread, final_end=ack_end, run_final_end=lookup(logs.ends, run_part),
                multi=flags[FLAGS.index("multi")], first_seen=least(c["read_index"], c["comp_index"]),
                **{"is_" + name: flags[i] for i, name in enumerate(FLAGS) if name != "multi"})
    frame.clear()
    result["frame"] = kept
    return result


# `_conditions`' outputs, in order: each value's flags, the counts, the first index of each broken send.
FLAGS = ("lost-write", "lost-acked", "dirty-read", "unseen", "aborted-read", "duplicate", "multi")
COUNTS = ("ok", "fail", "info", "unfinished", "info_read", "info_unread", "unknown_values", "send_invokes") + FLAGS
BROKEN = ("bad_dup_send", "bad_orphan", "bad_double", "bad_early", "bad_process")


@compiled
def _conditions(outcome, ack_pos, maxread, ack_end, inv, inv_last, comp, comp_last, read_index, process,
                process_max, fin_min, fin_max, run_min, run_max, first_pos, last_pos, flags, counts, broken):
    """Per value: `anomalies.value_checks`' conditions (-1 for null, each
    comparison false where Spark's would be null) into `flags` (FLAGS'
    rows), their counts and the other COUNTS into `counts`, and the least
    index of each broken send (BROKEN) into `broken`."""
    for r in range(len(ack_pos)):
        invoked, completed, read = inv[r] != NONE, comp[r] != NONE, read_index[r] != NONE
        acked = ack_pos[r] != NONE
        ack_part = ack_pos[r] >> POS_BITS if acked else NONE
        read_past = acked and (ack_pos[r] & MAX_OFFSET) < maxread[r]
        multi = fin_min[r] != fin_max[r] or run_min[r] != run_max[r]
        ok, fail, info = outcome[r] == OK, outcome[r] == FAIL, outcome[r] == INFO
        unsettled = outcome[r] == NONE or info
        lost_write = ok and not read and read_past
        ack_in_final = ack_part != NONE and (fin_min[r] == ack_part or fin_max[r] == ack_part)
        run_in_final = run_min[r] != NONE and (fin_min[r] == run_min[r] or fin_max[r] == run_min[r])
        found = (lost_write,
                 ok and ack_end[r] != NONE and not ack_in_final and not lost_write and not multi,
                 unsettled and run_min[r] != NONE and not run_in_final and not multi,
                 ok and not read and not read_past and ack_end[r] == NONE,
                 fail and read,
                 first_pos[r] != last_pos[r],
                 multi)
        unfinished = invoked and not completed
        unsure = info or unfinished
        tallies = (ok, fail, info, unfinished, unsure and read, unsure and not read, not invoked and read, invoked)
        for i in range(len(tallies)):
            if tallies[i]:
                counts[i] += 1
        for i in range(len(found)):
            if found[i]:
                flags[i, r] = True
                counts[len(tallies) + i] += 1
        if inv[r] != inv_last[r]:
            lower_at(broken, 0, inv_last[r])
        if completed and not invoked:
            lower_at(broken, 1, comp[r])
        if comp[r] != comp_last[r]:
            lower_at(broken, 2, comp_last[r])
        if completed and invoked and comp[r] < inv[r]:
            lower_at(broken, 3, comp[r])
        if completed and process_max[r] != process[r]:
            lower_at(broken, 4, comp[r])


def write_multi_rows(checked: dict, path: Path) -> Path:
    """The by-value rows of the values seen in two partitions or more,
    written to `path` as Parquet, as `anomalies.multi_partition_checks`
    reads them (MULTI_COLUMNS, nulls for -1)."""
    c = checked["frame"]
    at = np.flatnonzero(c["multi"])
    arrays = {}
    for name in MULTI_COLUMNS:
        column = c[name][at]
        if column.dtype == bool:
            arrays[name] = pa.array(column)
        else:
            column = column.astype(np.int64)  # the frame's narrower columns too
            none = column == NONE
            arrays[name] = pa.array(column, pa.int32() if name == "outcome" else pa.int64(),
                                    mask=none if none.any() else None)
    pq.write_table(pa.table(arrays), str(path), compression="none")
    return path


def example_rows(checked: dict, inconsistent_at: list[int]) -> dict[str, list[dict]]:
    """`anomalies.example_rows` from the driver's columns: per example list,
    its first rows by its key then value, as dicts with None for null."""
    c = checked["frame"]
    lists: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    for name, key in EXAMPLE_ORDER.items():
        if checked[name]:
            lists[name] = (np.flatnonzero(c["is_" + name]), c[key])
    if inconsistent_at:
        at = np.unique(np.asarray(inconsistent_at, np.int64))
        acked = _rows_among(c["ack_pos"], at)
        lists["acked-at"] = (acked[c["outcome"][acked] == OK], None)
        read = _rows_among(c["first_pos"], at)
        lists["read-at"] = (read[(c["read_index"][read] != NONE) & (c["last_pos"][read] == c["first_pos"][read])],
                            None)
    rows: dict[str, list[dict]] = {}
    for name, (at, key) in lists.items():
        if not len(at):
            continue
        k = key[at] if key is not None else np.full(len(at), NONE)
        # By key (null, -1, first, as Spark orders it), then value.
        order = np.lexsort((c["value"][at], k))[:example_limit(name)]
        at, k = at[order], k[order]
        columns = {"k": k.tolist(), **{column: c[column][at].tolist() for column in EXAMPLE_COLUMNS}}
        rows[name] = [{column: (v if v != NONE else None) for column, v in zip(columns, values)}
                      for values in zip(*columns.values())]
    return rows


def _rows_among(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The rows of `keys` that are one of `wanted` (sorted, a few example
    positions), in order: one compiled pass, where `np.isin` compared every
    key with each of them (40 ms of a 10M-event check's examples)."""
    return _among(keys, wanted, np.empty(len(keys), np.int64)) if len(wanted) else np.empty(0, np.int64)


@compiled
def _among(keys, wanted, rows):
    """`_rows_among`'s pass: the rows found, into the start of `rows`."""
    low, high, found = wanted[0], wanted[-1], 0
    for i in range(len(keys)):
        k = keys[i]
        if low <= k <= high:
            at = first_not_below(wanted, k, 0, len(wanted))
            if wanted[at] == k:
                rows[found] = i
                found += 1
    return rows[:found].copy()


def dup_reads_of(table: pa.Table | None):
    """`anomalies.examples_from`'s `dup_reads` over the duplicated values'
    reads the driver made (`driver_by_position.duplicate_reads`)."""
    def dup_reads(values: list[int], positions: list[int]) -> list[tuple[int, int, int, int]]:
        if table is None:
            return []
        value, partition, offset, index = (table.column(n).to_numpy() for n in ("value", "partition", "offset",
                                                                                 "index"))
        hit = np.isin(value, np.asarray(values, np.int64)) | np.isin((partition << POS_BITS) | offset,
                                                                     np.asarray(positions, np.int64))
        return list(zip(*(column[hit].tolist() for column in (value, partition, offset, index))))

    return dup_reads
