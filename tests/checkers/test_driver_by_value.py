"""The by-value frame made on the driver (checkers/driver_by_value.py) is
Spark's (`anomalies.add_by_value`) row for row, and a check refuses the same
histories at the same events either way; `harness check
--driver-frames-up-to` decides which way a history goes."""

from __future__ import annotations

import numpy as np
import pytest

from checkers import anomalies as an
from checkers import check as check_module
from checkers.check import Options, check_history
from checkers.driver_by_value import COLUMNS, NONE, ValueRows, in_brackets
from checkers.load import load, prepare
from checkers.reading import HistoryReader
from core.errors import HistoryError
from core.history.files import resolve
from harness.cli import main
from tests.checkers.conftest import Hist, every_role

pytestmark = pytest.mark.spark


def _frames_both_ways(spark, path) -> tuple[list[dict], list[dict]]:
    """The by-value rows made on the driver and by Spark, sorted by value."""
    source = resolve(path)
    values = ValueRows()
    read = HistoryReader(values=values)
    prepared = prepare(source, None, read.add)
    logs = an.final_logs(read.few)
    columns = values.aggregate(logs)
    assert list(columns) == list(COLUMNS)
    on_driver = [{name: (v if v != NONE else None) for name, v in zip(columns, row)}
                 for row in zip(*(c.tolist() for c in columns.values()))]
    frames = an.build(load(spark, prepared), logs)
    an.add_by_value(frames, logs)
    try:
        by_spark = [r.asDict() for r in frames.by_value.collect()]
    finally:
        for frame in frames.kept:
            check_module.release(frame)
    return sorted(on_driver, key=lambda r: r["value"]), sorted(by_spark, key=lambda r: r["value"])


def test_the_driver_s_frame_is_spark_s_row_for_row(spark, tmp_path):
    path = every_role().write(tmp_path, parquet=True)
    on_driver, by_spark = _frames_both_ways(spark, path)
    assert on_driver == by_spark
    by_value = {r["value"]: r for r in on_driver}
    assert sorted(by_value) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    # Spot checks that the comparison covers what matters.
    assert by_value[1]["final_part_min"] == 0 and by_value[1]["run_part_min"] == 0
    assert by_value[9]["comp_index"] != by_value[9]["comp_index_last"]
    assert by_value[13]["run_part_min"] is None and by_value[6]["inv_index"] is None
    assert by_value[7]["first_pos"] != by_value[7]["last_pos"]


@pytest.mark.parametrize("padding,process,widths", [
    (0, 5, (np.int8, np.int8)),
    (200, 40_000, (np.int16, np.int32)),
    (17_000, 1 << 40, (np.int32, np.int64)),
])
def test_the_frame_is_spark_s_whatever_width_its_indexes_and_processes_take(spark, tmp_path, monkeypatch, padding,
                                                                            process, widths):
    # The driver keeps indexes and processes in the narrowest type that holds
    # the history's (checkers/driver_by_value.py): each width, row for row.
    h = every_role()
    for _ in range(padding):
        h.poll(12)  # two events each, no records
    h.send(process, 100, 0, 9)
    h.poll(12, (0, 9, 100))
    h.send(process, 101, 1, 9, outcome="info")
    path = h.write(tmp_path, parquet=True)
    made = []
    real = ValueRows.aggregate

    def aggregate(self, logs):
        made.append(real(self, logs))
        return made[-1]

    monkeypatch.setattr(ValueRows, "aggregate", aggregate)
    on_driver, by_spark = _frames_both_ways(spark, path)
    assert on_driver == by_spark
    assert (made[0]["inv_index"].dtype, made[0]["process"].dtype) == widths
    assert {r["value"]: r["process"] for r in on_driver}[100] == process


def test_a_history_without_sends_or_records_gives_an_empty_frame_both_ways(spark, tmp_path):
    h = Hist()
    h.poll(0)
    h.assign(0, [0])
    on_driver, by_spark = _frames_both_ways(spark, h.write(tmp_path, parquet=True))
    assert on_driver == by_spark == []


def test_brackets_are_strict_and_per_process():
    import numpy as np

    process = np.array([1, 1, 1, 1, 2, 2, 3])
    index = np.array([5, 6, 9, 10, 6, 12, 7])
    inside = in_brackets(process, index, {1: [(5, 10)], 2: [(0, 3), (11, 13)]})
    assert inside.tolist() == [False, True, True, False, False, True, False]
    assert not in_brackets(process, index, {}).any()
    # Many processes and spans, unsorted, processes without any and large ones: a plain reading's answer.
    rng = np.random.default_rng(5)
    brackets = {int(p): [(int(lo), int(lo + rng.integers(1, 40))) for lo in rng.integers(0, 300, rng.integers(1, 4))]
                for p in rng.choice(np.arange(-1, 60), 25, replace=False).tolist() + [2 ** 40]}
    process = rng.choice(np.arange(-1, 70).tolist() + [2 ** 40], 5_000)
    index = rng.integers(0, 330, 5_000)
    plain = [any(lo < i < hi for lo, hi in brackets.get(p, [])) for p, i in zip(process.tolist(), index.tolist())]
    assert in_brackets(process, index, brackets).tolist() == plain
    assert 100 < sum(plain) < 4_900


def _refused(spark, path, driver: bool) -> str:
    with pytest.raises(HistoryError) as refused:
        check_history(path, Options(driver_frames_up_to=1 << 40 if driver else 0), spark=spark)
    return str(refused.value)


@pytest.mark.parametrize("events,words", [
    ([("invoke", 0, 1), ("ok", 0, 1), ("invoke", 0, 1)], ("index 2", "sent twice")),
    ([("invoke", 0, 1), ("ok", 0, 1), ("ok", 0, 1)], ("index 2", "second completion")),
    ([("ok", 0, 1), ("invoke", 0, 1)], ("index 0", "before its invocation")),
    ([("invoke", 0, 1), ("ok", 3, 1)], ("index 1", "another process")),
    ([("ok", 0, 1)], ("index 0", "without an invocation of its value")),
])
def test_both_ways_refuse_a_broken_send_at_the_same_event(spark, tmp_path, events, words):
    # A Parquet history's sends are only paired by the by-value pass (JSONL's
    # are refused line by line while read): the same message either way.
    h = Hist()
    for type_, process, value in events:
        fields = {"partition": 0, "offset": len(h.events)} if type_ == "ok" else {"key": 0}
        h.add(process, type_, "send", value=value, **fields)
    path = h.write(tmp_path, parquet=True)
    on_driver, by_spark = _refused(spark, path, True), _refused(spark, path, False)
    assert on_driver == by_spark
    assert all(w in on_driver for w in words), on_driver


def test_harness_check_s_bound_decides_who_makes_the_frame(spark, tmp_path, driver_frames, capsys):
    made = driver_frames
    h = Hist()
    h.send(0, 1, 0, 0)
    h.poll(1, (0, 0, 1))
    path = h.write(tmp_path)
    assert main(["check", str(path), "--driver-frames-up-to", "0"]) == 0
    assert made == []
    assert main(["check", str(path), "--driver-frames-up-to", "2"]) == 0
    assert made == []
    assert main(["check", str(path)]) == 0
    assert len(made) == 1
    capsys.readouterr()


@pytest.mark.parametrize("mapping", [{0: 10, 2: 12, 5: 0}, {0: 10, 2: 12, 70_000: 3}, {-3: 1, 4: 2}, {}])
def test_a_lookup_gives_none_for_keys_not_mapped(mapping):
    # Small keys (partitions) by a table, others by a binary search.
    import numpy as np

    from checkers.driver_by_value import lookup

    keys = np.array([-5, -3, -1, 0, 1, 2, 3, 4, 5, 7, 100, 70_000, 2 ** 62])
    assert lookup(mapping, keys).tolist() == [mapping.get(k, NONE) for k in keys.tolist()]


def test_values_seen_in_two_partitions_are_settled_once_both_ways(check):
    # A value read from two partitions is settled per partition by Spark's
    # small second pass (`multi_partition_checks`), never also by the
    # one-partition conditions: an info send read from two partitions in the
    # run, an acknowledged one read again from another partition, and one
    # whose final reads found it in two. The `check` fixture compares the
    # driver's results with Spark's and the counts with the reference's.
    h = Hist()
    h.send(0, 1, outcome="info")
    h.send(0, 2, 0, 1)
    h.send(0, 3, 1, 1)
    h.send(0, 4, 0, 2)
    h.send(0, 5, 1, 2)
    h.send(0, 6, 0, 3)
    h.assign(1, [0, 1])
    h.poll(1, (0, 0, 1), (1, 0, 1))  # value 1 in both partitions, never acknowledged
    h.poll(1, (0, 1, 2), (1, 1, 2))  # value 2 acknowledged in 0, read in 1 too
    h.poll(1, (1, 2, 5), (0, 3, 6), (1, 3, 6))  # value 6 too, and missing from the final log below
    h.final_reads(2, [0, 1])
    h.poll(2, (0, 1, 2), (0, 2, 4), (1, 1, 3), (1, 2, 4))  # value 4 in both final logs
    h.final_reads_ok(2, {0: 4, 1: 3})
    counts = check(h)["counts_by_anomaly"]
    assert counts["dirty-read"] == 1 and counts["lost-acked"] == 2 and counts["duplicate"] >= 3  # 5 and 6
