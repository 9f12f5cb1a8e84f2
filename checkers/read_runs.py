"""The read runs, made on the driver while it reads the history.

A read run is what `checkers.anomalies.read_runs` makes in Spark: records
of one poll from one partition whose offsets rise by one with their place
in the poll, with the first and last slot, offset and value. Read order
(`checkers.order`) then compares each run only with the one before it.
Here a run is records next to each other in the poll, so every run is
contiguous: records of one partition with another's between them are runs
apart, and the step between them is looked at, which in Spark's grouping
takes `exact_runs`.

A poll's records are in one event, so in one batch of the driver's read:
`RunsWriter` makes each batch's runs with NumPy and appends them to a
Parquet file, which Spark reads instead of grouping the records itself
(a 10M-event history: 866,292 runs from 9.9M records; docs/benchmarks.md).
It also counts, per partition, the highest offset read and the records
read. The file must be where Spark's executors read it: `check_history`
writes it in the check's scratch folder, and where there is none (a
Parquet history on a cluster, no --scratch) Spark makes the runs itself.
Asked to (`keep_order`, for a history the driver's memory holds), it keeps
the runs instead, about 80 bytes each, so that the driver finds read
order's steps in them (`order_columns`, `order.driver_steps`), and writes
them only where it does not (`file`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# The columns of `anomalies.read_runs`, in its order and types.
SCHEMA = pa.schema([("process", pa.int64()), ("index", pa.int64()), ("partition", pa.int64()),
                    ("time", pa.int64()), ("n", pa.int64()), ("first_slot", pa.int32()),
                    ("last_slot", pa.int32()), ("first_offset", pa.int64()), ("last_offset", pa.int64()),
                    ("first_value", pa.int64()), ("last_value", pa.int64()), ("contiguous", pa.bool_())])

# The columns a run is kept as (`contiguous` holds for every one made here).
_KEPT = tuple(f.name for f in SCHEMA if f.name != "contiguous")

# The same columns as Spark reads them (a DDL string).
_SPARK_TYPES = {pa.int64(): "long", pa.int32(): "int", pa.bool_(): "boolean"}
SPARK_SCHEMA = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in SCHEMA)


@dataclass
class RunTotals:
    """Per partition, over every record read: the highest offset and how many."""

    highest: dict[int, int] = field(default_factory=dict)
    records: dict[int, int] = field(default_factory=dict)


class RunsWriter:
    """Makes each batch's read runs (`add`) and counts `totals`: the runs
    appended to a Parquet file at `path` as they come (`close` it when the
    history is read), or kept (`keep_order`) for `order_columns`, and
    written by `file` only if asked."""

    # The columns `order_columns` gives.
    ORDER_COLUMNS = ("process", "partition", "index", "first_slot", "first_offset", "first_value", "last_offset",
                     "last_value")

    def __init__(self, path: Path, keep_order: bool = False) -> None:
        self.path = Path(path)
        self.totals = RunTotals()
        # Kept (`keep_order`): each batch's runs, a list per column of SCHEMA
        # (joined once `order_columns` asks), written only if Spark is to read
        # them (`file`): the driver mostly finds read order's steps itself, and
        # writing them took 0.05 s of a 10M-event history's read. Else written
        # as they come, in a plain file: with dictionaries, compression and
        # statistics, a 10M-event history's runs took 0.3 s, not 0.06.
        self._kept: dict[str, list] | None = {name: [] for name in _KEPT} if keep_order else None
        self._writer = None if keep_order else self._open()

    def _open(self):
        return pq.ParquetWriter(str(self.path), SCHEMA, compression="none", use_dictionary=False,
                                write_statistics=False)

    def add(self, poll: np.ndarray, process: np.ndarray, index: np.ndarray, time: np.ndarray,
            partition: np.ndarray, offset: np.ndarray, slot: np.ndarray, value: pa.Array) -> None:
        """One batch's records of ok polls, in file order: each record's poll
        (its place in `process`, `index` and `time`, which are the polls'),
        and its partition, offset, place in the poll's records (`slot`) and
        value (nulls kept)."""
        n = len(poll)
        if not n:
            return
        # A run begins at another poll, another partition, or an offset that
        # does not follow the record before it (`offset - slot` changes).
        shift = offset - slot
        new = np.ones(n, bool)
        new[1:] = (poll[1:] != poll[:-1]) | (partition[1:] != partition[:-1]) | (shift[1:] != shift[:-1])
        starts = np.flatnonzero(new)
        ends = np.append(starts[1:], n) - 1
        of_run = poll[starts]
        # Each gathered once: for the runs and the totals.
        runs = {"process": process[of_run], "index": index[of_run], "partition": partition[starts],
                "time": time[of_run], "n": (ends - starts + 1).astype(np.int64), "first_slot": slot[starts],
                "last_slot": slot[ends], "first_offset": offset[starts], "last_offset": offset[ends],
                "first_value": value.take(pa.array(starts)).cast(pa.int64()),
                "last_value": value.take(pa.array(ends)).cast(pa.int64())}
        if self._kept is not None and (runs["first_value"].null_count or runs["last_value"].null_count):
            # A value read is null, which only Spark's rows tell as such:
            # read order is Spark's, and the runs are written from here on.
            self._writer = self._write_kept(self._open())
        if self._kept is None:
            self._writer.write_table(_table(runs))
        else:
            for name, column in runs.items():
                self._kept[name].append(column.to_numpy() if isinstance(column, pa.Array) else column)
        # The totals from the runs (a run's last offset is its highest), a tenth as many as the records.
        parts, where = np.unique(runs["partition"], return_inverse=True)
        where = where.reshape(-1)
        highest = np.full(len(parts), np.iinfo(np.int64).min)
        np.maximum.at(highest, where, runs["last_offset"])
        for p, m, k in zip(parts.tolist(), highest.tolist(),
                           np.bincount(where, weights=runs["n"], minlength=len(parts)).astype(np.int64).tolist()):
            self.totals.highest[p] = max(self.totals.highest.get(p, m), m)
            self.totals.records[p] = self.totals.records.get(p, 0) + k

    def order_columns(self) -> dict[str, np.ndarray] | None:
        """Every run's ORDER_COLUMNS, in the history's order, if kept (a
        value read was null: not), else None."""
        if self._kept is None:
            return None
        self._kept = {name: [np.concatenate(batches) if batches else np.empty(0, np.int64)]
                      for name, batches in self._kept.items()}
        return {name: self._kept[name][0].astype(np.int64, copy=False) for name in self.ORDER_COLUMNS}

    def file(self) -> Path:
        """The runs' Parquet file (`path`), written now if they were kept (and then let go)."""
        if self._kept is not None:
            self._write_kept(self._open()).close()
        return self.path

    def let_go(self) -> None:
        """Let the kept runs go: read order has its steps without them."""
        self._kept = None

    def close(self) -> None:
        """Finish the file of the runs written as they came (empty if no poll read anything)."""
        if self._writer is not None:
            self._writer.close()

    def _write_kept(self, writer):
        """`writer`, once the kept runs are written to it (and let go)."""
        kept, self._kept = self._kept, None
        for batch in zip(*kept.values()):
            writer.write_table(_table(dict(zip(kept, batch))))
        return writer


def _table(runs: dict) -> pa.Table:
    """Runs, a column each by name, as a table of SCHEMA (each run's records contiguous)."""
    return pa.Table.from_arrays([runs[f.name] if f.name != "contiguous" else np.ones(len(runs["n"]), bool)
                                 for f in SCHEMA], schema=SCHEMA)
