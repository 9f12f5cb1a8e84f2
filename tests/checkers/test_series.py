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
