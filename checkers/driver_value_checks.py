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
from checkers.driver_by_value import NONE, least, lookup


def value_checks(frame: dict[str, np.ndarray], max_read: dict[int, int], logs: FinalLogs) -> dict:
    """`anomalies.value_checks` over the driver's by-value columns (`frame`,
    let go here): refuses a history whose sends break the contract, and
    returns the same counts, with "frame" the columns `examples` and
    `write_multi_rows` read."""
    c = frame
    outcome, ack_pos = c["outcome"], c["ack_pos"]
    invoked, completed, read = (c[k] != NONE for k in ("inv_index", "comp_index", "read_index"))
    unfinished = invoked & ~completed
    acked = ack_pos != NONE
    ack_part = np.where(acked, ack_pos >> POS_BITS, NONE)
    maxread = lookup(max_read, ack_part)
    ack_end = lookup(logs.ends, ack_part)
    never_read = ~read
    # An offset is never below -1, the lookup's "none".
    read_past = acked & ((ack_pos & MAX_OFFSET) < maxread)
    fin_min, fin_max, run_part = c["final_part_min"], c["final_part_max"], c["run_part_min"]
    # Each pair of a minimum and a maximum is -1 together.
    multi = (fin_min != fin_max) | (run_part != c["run_part_max"])

    def in_final(p):
        return (p != NONE) & ((fin_min == p) | (fin_max == p))

    ok = outcome == OK
    lost_write = ok & never_read & read_past
    unsettled = (outcome == NONE) | (outcome == INFO)
    flags = {
        "lost-write": lost_write,
        "lost-acked": ok & (ack_end != NONE) & ~in_final(ack_part) & ~lost_write & ~multi,
        "dirty-read": unsettled & (run_part != NONE) & ~in_final(run_part) & ~multi,
        "unseen": ok & never_read & ~read_past & (ack_end == NONE),
        "aborted-read": (outcome == FAIL) & read,
        "duplicate": c["first_pos"] != c["last_pos"],
    }

    def first_index(cond, column):
        at = c[column][cond]
        return int(at.min()) if len(at) else None

    broken = {
        "bad_dup_send": first_index(c["inv_index"] != c["inv_index_last"], "inv_index_last"),
        "bad_orphan": first_index(completed & ~invoked, "comp_index"),
        "bad_double": first_index(c["comp_index"] != c["comp_index_last"], "comp_index_last"),
        "bad_early": first_index(completed & invoked & (c["comp_index"] < c["inv_index"]), "comp_index"),
        "bad_process": first_index(completed & (c["process_max"] != c["process"]), "comp_index"),
    }
    refuse_broken_sends(broken)
    unsure = (outcome == INFO) | unfinished
    counts = {
        "ok": ok, "fail": outcome == FAIL, "info": outcome == INFO, "unfinished": unfinished,
        "info_read": unsure & read, "info_unread": unsure & never_read, "unknown_values": ~invoked & read,
        "multi": multi, "send_invokes": invoked, **flags,
    }
    result = {**broken, **{name: int(np.count_nonzero(cond)) for name, cond in counts.items()}}
    kept = {name: c[name] for name in EXAMPLE_COLUMNS if name in c}
    kept.update(max_read_offset=maxread, final_end=ack_end, run_final_end=lookup(logs.ends, run_part), multi=multi,
                first_seen=least(c["read_index"], c["comp_index"]),
                **{"is_" + name: cond for name, cond in flags.items()})
    frame.clear()
    result["frame"] = kept
    return result


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
        at = np.asarray(inconsistent_at, np.int64)
        lists["acked-at"] = (np.flatnonzero((c["outcome"] == OK) & np.isin(c["ack_pos"], at)), None)
        lists["read-at"] = (np.flatnonzero((c["read_index"] != NONE) & (c["first_pos"] == c["last_pos"])
                                           & np.isin(c["first_pos"], at)), None)
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
