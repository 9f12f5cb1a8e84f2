"""The results' series (checkers/kernel/series.py) on a hand-made history:
the count of acknowledged values not yet read per partition, and each
consumer's realtime lag, with the leaders' high watermarks from
states.jsonl, through Spark and in process alike."""

from __future__ import annotations

import json

import pytest

from checkers.check import Options, check_history
from tests.checkers.conftest import without_timing

pytestmark = pytest.mark.spark

MS = 1_000_000


def _rec(partition, offset, value):
    return {"partition": partition, "offset": offset, "key": 0, "value": value}


ROWS = [
    (1, "invoke", "send", 5, {"key": 0, "value": 10}),
    (1, "ok", "send", 10, {"key": 0, "value": 10, "partition": 0, "offset": 0}),
    (1, "invoke", "send", 11, {"key": 0, "value": 11}),
    (1, "ok", "send", 20, {"key": 0, "value": 11, "partition": 0, "offset": 1}),
    (2, "invoke", "poll", 21, {}),
    (2, "ok", "poll", 25, {"records": [_rec(0, 0, 10)]}),  # head 1: one behind
    (1, "invoke", "send", 26, {"key": 1, "value": 12}),
    (1, "ok", "send", 30, {"key": 1, "value": 12, "partition": 1, "offset": 0}),
    (3, "invoke", "poll", 31, {}),
    (3, "ok", "poll", 35, {"records": [_rec(0, 1, 11), _rec(1, 0, 12)]}),  # caught up on both
    (1, "invoke", "send", 36, {"key": 0, "value": 13}),
    (1, "ok", "send", 40, {"key": 0, "value": 13, "partition": 0, "offset": 2}),  # never read
    (2, "invoke", "poll", 41, {}),
    (2, "ok", "poll", 45, {"records": []}),  # an empty poll says nothing
    (2, "invoke", "poll", 46, {}),
    (2, "ok", "poll", 50, {"records": [_rec(0, 1, 11)]}),  # head 2 (acked), or 5 (HW 6 at 48 ms)
    (1, "invoke", "send", 51, {"key": 1, "value": 14}),
    (3, "invoke", "poll", 52, {}),
    (3, "ok", "poll", 55, {"records": [_rec(1, 1, 14)]}),  # read before its send's ack arrived
    (1, "ok", "send", 60, {"key": 1, "value": 14, "partition": 1, "offset": 1}),
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
