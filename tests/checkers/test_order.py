"""Read order's steps found on the driver (checkers/order.py, `driver_steps`)
are the steps Spark's window pass finds (`order_steps`) in the same read
runs, with every kind of restart; more than STEPS_ON_DRIVER are left to
Spark; runs with a null value are not kept for the driver. The whole
checker's nonmonotonic-poll and poll-skip both ways is test_passes.py's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from checkers import order
from checkers.load import file_uri, prepare
from checkers.read_runs import SPARK_SCHEMA, RunsWriter
from checkers.reading import HistoryReader
from core.history.files import resolve
from core.history.parquet import write_parquet
from harness.synthetic import Plan, generate
from tests.checkers.conftest import Hist


def _restarting() -> Hist:
    """Two consumers reading two partitions, with steps back and gaps between
    restarts of every kind: assign, crash, an ok seek of one partition, an
    info seek naming none (its invocation's), and a failed seek (no
    restart)."""
    h = Hist()
    for v in range(12):
        h.send(0, v, 0, v)
        h.send(0, 100 + v, 1, v)
    h.assign(1, [0, 1])
    h.poll(1, (0, 0, 0), (0, 1, 1), (1, 0, 100))
    h.poll(1, (0, 3, 3), (1, 1, 101))  # a gap in 0
    h.poll(1, (0, 2, 2), (1, 0, 100))  # back in both
    h.seek(1, 0, 0)
    h.poll(1, (0, 0, 0), (1, 1, 101))  # 0 restarted; 1 goes on
    h.add(1, "invoke", "seek", partition=1, offset=0)
    h.add(1, "info", "seek")  # its invocation's partition: 1
    h.poll(1, (1, 0, 100), (0, 0, 0))  # 1 restarted, 0 not: back in 0
    h.assign(1, [0, 1])  # both again
    h.poll(1, (0, 5, 5), (1, 5, 105))
    h.add(1, "invoke", "seek", partition=0, offset=0)
    h.add(1, "fail", "seek", partition=0, offset=0, error="SOME_ERROR")  # did not happen
    h.poll(1, (0, 4, 4))  # back
    h.crash(1)
    h.poll(1, (0, 0, 0), (1, 0, 100))
    h.poll(2, (1, 3, 103), (0, 7, 7), (1, 2, 102), (0, 6, 6))  # another consumer: its own order
    h.poll(2, (1, 3, 103), (0, 9, 9), (0, 11, 11))  # a run that jumps inside one poll
    return h


def _rows(steps: dict) -> list[tuple]:
    """`driver_steps`' columns as rows, in order_steps' column order."""
    return list(zip(*(steps[name].tolist() for name in order.STEP_COLUMNS)))


def _steps_both_ways(spark, path, tmp_path) -> tuple[list, list]:
    runs = RunsWriter(tmp_path / "runs.parquet", keep_order=True)
    read = HistoryReader(runs=runs)
    prepare(resolve(path), tmp_path, read.add)
    runs.close()
    on_driver = _rows(order.driver_steps(runs.order_columns(), read.restarts))
    by_spark = order.order_steps(spark.read.schema(SPARK_SCHEMA).parquet(file_uri(runs.file())), read.restarts)
    return sorted(tuple(r) for r in on_driver), sorted(tuple(r) for r in by_spark.collect())


@pytest.mark.spark
def test_the_driver_finds_spark_s_steps_with_every_kind_of_restart(spark, tmp_path):
    on_driver, by_spark = _steps_both_ways(spark, _restarting().write(tmp_path, parquet=True), tmp_path)
    assert on_driver == by_spark
    # (process, partition, index, slot, offset, value, prev_offset, prev_value, prev_index)
    # (process, partition, offset, prev_offset) of each, by process, partition and index:
    # consumer 1's gap and steps back, none after a restart of the partition, one after
    # a failed seek; consumer 2's steps back and jumps inside its polls.
    assert [(r[0], r[1], r[4], r[6]) for r in on_driver] == [
        (1, 0, 3, 1), (1, 0, 2, 3), (1, 0, 0, 0), (1, 0, 4, 5), (1, 1, 0, 1),
        (2, 0, 6, 7), (2, 0, 9, 6), (2, 0, 11, 9), (2, 1, 2, 3)]


@pytest.mark.spark
def test_the_driver_finds_spark_s_steps_in_a_planted_history(spark, tmp_path):
    syn = generate(Plan(events=6_000, seed=5, partitions=3, producers=2, consumers=3, batch=12,
                        nonmonotonic_polls=3, skips=3, hole_rate=0.02))
    path = tmp_path / "history.parquet"
    write_parquet(syn.events, path)
    on_driver, by_spark = _steps_both_ways(spark, path, tmp_path)
    assert on_driver == by_spark and len(on_driver) >= 6


def test_more_steps_than_the_driver_classifies_are_left_to_spark(monkeypatch):
    columns = {name: np.array(values, np.int64) for name, values in (
        ("process", [1, 1, 1]), ("partition", [0, 0, 0]), ("index", [1, 3, 5]), ("first_slot", [0, 0, 0]),
        ("first_offset", [5, 2, 9]), ("first_value", [50, 20, 90]), ("last_offset", [6, 3, 9]),
        ("last_value", [60, 30, 90]))}
    assert _rows(order.driver_steps(columns, [])) == [(1, 0, 3, 0, 2, 20, 6, 60, 1),
                                                                    (1, 0, 5, 0, 9, 90, 3, 30, 3)]
    # A restart between the first two runs: only the third's step is left.
    assert [r[2] for r in _rows(order.driver_steps(columns, [(1, 2, None)]))] == [5]
    assert [r[2] for r in _rows(order.driver_steps(columns, [(1, 2, 7)]))] == [3, 5]  # another partition's
    # A process number too large to pack with a partition: sorted by the four keys instead.
    wide = {**columns, "process": columns["process"] << 45}
    assert [r[1:] for r in _rows(order.driver_steps(wide, [(1 << 45, 2, None)]))] == \
        [r[1:] for r in _rows(order.driver_steps(columns, [(1, 2, None)]))]
    monkeypatch.setattr(order, "STEPS_ON_DRIVER", 1)
    assert order.driver_steps(columns, []) is None


def test_runs_with_a_null_value_are_not_kept_for_the_driver(tmp_path):
    def add(writer, values):
        n = len(values)
        writer.add(np.arange(n), np.zeros(n, np.int64), np.arange(n), np.arange(n), np.zeros(n, np.int64),
                   np.arange(n) * 3, np.zeros(n, np.int64), pa.array(values, pa.int64()))

    kept = RunsWriter(tmp_path / "kept.parquet", keep_order=True)
    add(kept, [1, 2])
    add(kept, [3])
    kept.close()
    assert not kept.path.exists()  # written only if Spark is to read it
    assert kept.order_columns()["first_value"].tolist() == [1, 2, 3]
    assert pq.read_table(kept.file()).column("first_value").to_pylist() == [1, 2, 3]
    dropped = RunsWriter(tmp_path / "dropped.parquet", keep_order=True)
    add(dropped, [1, 2])
    add(dropped, [3, None])
    dropped.close()
    assert dropped.order_columns() is None
    assert pq.read_table(dropped.file()).column("first_value").to_pylist() == [1, 2, 3, None]
    plain = RunsWriter(tmp_path / "plain.parquet")
    add(plain, [1, 2])
    plain.close()
    assert plain.order_columns() is None

