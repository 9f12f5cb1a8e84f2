"""The results' series (checkers/kernel/series.py) on the report's hand-made history:
the count of acknowledged values not yet read per partition, and each
consumer's realtime lag, with the leaders' high watermarks from
states.jsonl, through Spark and in process alike."""

from __future__ import annotations

import json

import pytest

from checkers.check import Options, check_history
from tests.checkers.conftest import without_timing
from tests.harness.pages.test_figures import ROWS as PLOT_ROWS
from tests.harness.pages.test_figures import _rec

pytestmark = pytest.mark.spark

MS = 1_000_000


# The report's tests' hand-made history (tests/harness/pages/test_figures.py), and final reads after it.
ROWS = PLOT_ROWS + [
    (9, "invoke", "final-reads", 70, {"partitions": [0, 1]}),
    (9, "invoke", "poll", 71, {}),
    (9, "ok", "poll", 72, {"records": [_rec(0, 0, 10)]}),  # a final read: no lag, but a read
    (9, "ok", "final-reads", 73, {"ends": []}),
]


@pytest.fixture
def history(tmp_path):
    events = [{"index": i, "time": t * MS, "process": p, "type": ty, "f": f, **fields}
              for i, (p, ty, f, t, fields) in enumerate(ROWS)]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return tmp_path


def _both(spark, history) -> dict:
    in_spark = check_history(history, Options(), spark=spark)
    local = check_history(history, Options(engine="local"))
    assert without_timing(in_spark) == without_timing(local)
    return in_spark["series"]


def test_unread_counts_acknowledged_values_no_poll_returned_yet(spark, history):
    series = _both(spark, history)
    assert series["bucket_s"] == 0.001
    assert series["unread"] == {
        "0": [[0.01, 1], [0.02, 2], [0.025, 1], [0.035, 0], [0.04, 1]],
        "1": [[0.03, 1], [0.035, 0]],  # 14, read at 55 ms before its ack at 60 ms, never counts
    }


def test_lag_is_the_head_minus_the_offset_each_poll_returned(spark, history):
    series = _both(spark, history)
    # Per process, each poll's worst partition; the final reads' polls left out.
    assert series["lag"] == {"2": [[0.025, 1], [0.05, 1]], "3": [[0.035, 0], [0.055, 0]]}
    # The leaders' high watermark (the next offset) raises the head where it is ahead of the acks.
    states = [{"time": 48 * MS, "kind": "partition", "partition": 0, "leader": "n1", "epoch": 0, "isr": ["n1"],
               "hw": 6},
              {"time": 49 * MS, "kind": "partition", "partition": 1, "leader": "n1", "epoch": 0, "isr": ["n1"],
               "hw": None}]
    (history / "states.jsonl").write_text("".join(json.dumps(s) + "\n" for s in states))
    assert _both(spark, history)["lag"]["2"] == [[0.025, 1], [0.05, 4]]


@pytest.mark.parametrize("local_shards, spark_shards", [(1, 3), (2, 1)])
def test_unread_has_no_point_where_changes_in_different_shards_cancel(spark, tmp_path, monkeypatch, local_shards,
                                                                      spark_shards):
    # Values 0 and 65536 are in different blocks of values (rows.VALUE_BLOCK_BITS):
    # in different first-stage shards in process with two shards, through Spark
    # with three, in one shard with one. At 3 ms 65536's acknowledgement (+1) and
    # 0's first read (-1) fall in one bucket: the count does not change there, so
    # no point, however the shards split them.
    from checkers.engines import local as local_engine
    from checkers.engines import spark as spark_engine
    from tests.checkers.conftest import Hist

    hist = Hist()
    hist.send(0, 0, 0, 0)  # acknowledged at 1 ms
    hist.send(0, 65536, 0, 1)  # acknowledged at index 3
    hist.poll(1, (0, 0, 0))  # returns 0 at index 5
    hist.poll(1, (0, 1, 65536))  # at 7 ms
    for e in hist.events[3:6]:
        e["time"] = 3 * MS
    monkeypatch.setattr(local_engine, "SHARDS", local_shards)
    monkeypatch.setattr(spark_engine, "shards_for", lambda events, cores: spark_shards)
    assert _both(spark, hist.write(tmp_path))["unread"] == {"0": [[0.001, 1], [0.007, 0]]}
