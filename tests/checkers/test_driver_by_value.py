"""The by-value frame made on the driver (checkers/driver_by_value.py) is
Spark's (`anomalies.add_by_value`) row for row, and a check refuses the same
histories at the same events either way."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from checkers import anomalies as an
from checkers import check as check_module
from checkers.check import Options, check_history
from checkers.driver_by_value import ValueRows, in_brackets
from checkers.load import load, prepare
from checkers.reading import HistoryReader
from core.errors import HistoryError
from core.history.files import resolve
from tests.checkers.conftest import Hist

pytestmark = pytest.mark.spark


def _every_role() -> Hist:
    """A history with a value in each role the frame's columns tell apart."""
    h = Hist()
    h.send(0, 1, 0, 0)  # acknowledged, read in the run and by the final reads
    h.send(0, 2, 0, 1)  # acknowledged, read only by the final reads
    h.send(0, 3, outcome="fail")  # failed, read anyway
    h.send(1, 4, outcome="info")  # unsettled, read in the run only
    h.send(1, 5, outcome=None)  # invoked, never completed
    h.send(1, 7, 1, 0)  # acknowledged in partition 1, read there and at partition 0's offset 5
    h.send(1, 13, 2, 0)  # in partition 2, whose final log is not known
    h.add(2, "ok", "send", value=8, partition=0, offset=9)  # a completion with no invocation
    h.send(2, 9, 0, 2)
    h.add(2, "ok", "send", value=9, partition=0, offset=3)  # completed twice
    h.send(2, 10, 0, 4)
    h.add(2, "invoke", "send", key=0, value=10)  # invoked twice
    h.add(3, "invoke", "send", key=0, value=11)
    h.add(4, "ok", "send", value=11, partition=0, offset=6)  # completed by another process
    h.add(4, "ok", "send", value=12, partition=0, offset=7)  # completed before its invocation
    h.add(4, "invoke", "send", key=0, value=12)
    h.poll(10, (0, 0, 1), (0, 5, 7), (1, 0, 7), (0, 8, 6))  # 6 was never sent
    h.poll(11, (0, 0, 3), (0, 1, 4), (2, 0, 13))
    for process in (20, 21):  # two readers, one with two brackets
        h.final_reads(process, [0, 1, 2])
        h.poll(process, (0, 0, 1), (0, 1, 2), (1, 0, 7))
        h.poll(process, (0, 3, 9))  # at the final log's end: not in it
        h.final_reads_ok(process, {0: 3, 1: 1})
    h.final_reads(21, [0])
    h.poll(21, (0, 2, 9), (0, 4, 10))  # 10 at the end, 4, that this bracket reports: not in the log
    h.final_reads_ok(21, {0: 4})
    h.poll(12, (0, 2, 9), (1, 0, 7))  # after the final reads: in the run
    return h


def _frames_both_ways(spark, path) -> tuple[list[dict], list[dict]]:
    """The by-value rows made on the driver and by Spark, sorted by value."""
    source = resolve(path)
    values = ValueRows(path.parent / "by_value.parquet")
    read = HistoryReader(values=values)
    prepared = prepare(source, None, read.add)
    logs = an.final_logs(read.few)
    values.write(logs)
    on_driver = pq.read_table(values.path).to_pylist()
    frames = an.build(load(spark, prepared), logs)
    an.add_by_value(frames, logs)
    try:
        by_spark = [r.asDict() for r in frames.by_value.collect()]
    finally:
        for frame in frames.kept:
            check_module.release(frame)
    return sorted(on_driver, key=lambda r: r["value"]), sorted(by_spark, key=lambda r: r["value"])


def test_the_driver_s_frame_is_spark_s_row_for_row(spark, tmp_path):
    path = _every_role().write(tmp_path, parquet=True)
    on_driver, by_spark = _frames_both_ways(spark, path)
    assert on_driver == by_spark
    by_value = {r["value"]: r for r in on_driver}
    assert sorted(by_value) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    # Spot checks that the comparison covers what matters.
    assert by_value[1]["final_part_min"] == 0 and by_value[1]["run_part_min"] == 0
    assert by_value[9]["comp_index"] != by_value[9]["comp_index_last"]
    assert by_value[13]["run_part_min"] is None and by_value[6]["inv_index"] is None
    assert by_value[7]["first_pos"] != by_value[7]["last_pos"]


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


def _refused(spark, path, monkeypatch, driver: bool) -> str:
    monkeypatch.setattr(check_module, "DRIVER_BY_VALUE_EVENTS", 1 << 40 if driver else -1)
    with pytest.raises(HistoryError) as refused:
        check_history(path, Options(), spark=spark)
    return str(refused.value)


@pytest.mark.parametrize("events,words", [
    ([("invoke", 0, 1), ("ok", 0, 1), ("invoke", 0, 1)], ("index 2", "sent twice")),
    ([("invoke", 0, 1), ("ok", 0, 1), ("ok", 0, 1)], ("index 2", "second completion")),
    ([("ok", 0, 1), ("invoke", 0, 1)], ("index 0", "before its invocation")),
    ([("invoke", 0, 1), ("ok", 3, 1)], ("index 1", "another process")),
    ([("ok", 0, 1)], ("index 0", "without an invocation of its value")),
])
def test_both_ways_refuse_a_broken_send_at_the_same_event(spark, tmp_path, monkeypatch, events, words):
    # A Parquet history's sends are only paired by the by-value pass (JSONL's
    # are refused line by line while read): the same message either way.
    h = Hist()
    for type_, process, value in events:
        fields = {"partition": 0, "offset": len(h.events)} if type_ == "ok" else {"key": 0}
        h.add(process, type_, "send", value=value, **fields)
    path = h.write(tmp_path, parquet=True)
    on_driver, by_spark = _refused(spark, path, monkeypatch, True), _refused(spark, path, monkeypatch, False)
    assert on_driver == by_spark
    assert all(w in on_driver for w in words), on_driver
