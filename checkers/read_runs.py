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
Asked to (`keep_order`, for a history the driver's memory holds), it also
keeps the columns read order's steps take (`order_columns`), about 64
bytes per run, so that the driver finds them (`order.driver_steps`).
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

# The same columns as Spark reads them (a DDL string).
_SPARK_TYPES = {pa.int64(): "long", pa.int32(): "int", pa.bool_(): "boolean"}
SPARK_SCHEMA = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in SCHEMA)


@dataclass
class RunTotals:
    """Per partition, over every record read: the highest offset and how many."""

    highest: dict[int, int] = field(default_factory=dict)
    records: dict[int, int] = field(default_factory=dict)


class RunsWriter:
    """Appends each batch's read runs to a Parquet file at `path` (`add`),
    and counts `totals`; `close` when the history is read."""

    # The columns `order_columns` gives, in `add`'s order.
    ORDER_COLUMNS = ("process", "partition", "index", "first_slot", "first_offset", "first_value", "last_offset",
                     "last_value")

    def __init__(self, path: Path, keep_order: bool = False) -> None:
        self.path = Path(path)
        self.totals = RunTotals()
        # Plain: with dictionaries, compression and statistics, writing a
        # 10M-event history's runs took 0.3 s of the driver's read, not 0.06.
        self._writer = pq.ParquetWriter(str(self.path), SCHEMA, compression="none", use_dictionary=False,
                                        write_statistics=False)
        # Each batch's ORDER_COLUMNS, or None: not kept (a value read was
        # null, which only Spark's rows tell as such).
        self._order: list[list[np.ndarray]] | None = [] if keep_order else None

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
        take_first, take_last = pa.array(starts), pa.array(ends)
        of_run = poll[starts]
        # Each gathered once: for the file, the kept order columns and the totals.
        run_process, run_index, run_partition = process[of_run], index[of_run], partition[starts]
        first_slot, first_offset, last_offset = slot[starts], offset[starts], offset[ends]
        run_records = (ends - starts + 1).astype(np.int64)
        first_value, last_value = value.take(take_first).cast(pa.int64()), value.take(take_last).cast(pa.int64())
        self._writer.write_table(pa.Table.from_arrays([
            run_process, run_index, run_partition, time[of_run], run_records,
            first_slot.astype(np.int32), slot[ends].astype(np.int32), first_offset, last_offset,
            first_value, last_value, np.ones(len(starts), bool)], schema=SCHEMA))
        if self._order is not None:
            if first_value.null_count or last_value.null_count:
                self._order = None
            else:
                self._order.append([run_process, run_partition, run_index, first_slot.astype(np.int64),
                                    first_offset, first_value.to_numpy(), last_offset, last_value.to_numpy()])
        # The totals from the runs (a run's last offset is its highest), a tenth as many as the records.
        parts, where = np.unique(run_partition, return_inverse=True)
        where = where.reshape(-1)
        highest = np.full(len(parts), np.iinfo(np.int64).min)
        np.maximum.at(highest, where, last_offset)
        for p, m, k in zip(parts.tolist(), highest.tolist(),
                           np.bincount(where, weights=run_records, minlength=len(parts)).astype(np.int64).tolist()):
            self.totals.highest[p] = max(self.totals.highest.get(p, m), m)
            self.totals.records[p] = self.totals.records.get(p, 0) + k

    def order_columns(self) -> dict[str, np.ndarray] | None:
        """Every run's ORDER_COLUMNS, in the history's order, if kept (let go
        here: called once), else None."""
        kept, self._order = self._order, None
        if kept is None:
            return None
        return {name: np.concatenate([batch[i] for batch in kept]) if kept else np.empty(0, np.int64)
                for i, name in enumerate(self.ORDER_COLUMNS)}

    def close(self) -> None:
        """Finish the file (empty if no poll read anything)."""
        self._writer.close()
