"""Send order (checkers/kernel/send_order.py) on hand-made histories: what
counts as a step back and what the examples say, whichever engine and
however the history's batches fall. Every check also compares the
reference checker and the in-process engine."""

from __future__ import annotations

from checkers.anomaly import MAX_EXAMPLES
from checkers.check import Options, check_history
from core.history.parquet import write_parquet
from lab.synthetic import Plan, generate
from tests.checkers.conftest import without_timing
from tests.checkers.reference import reference_counts


def test_sends_acknowledged_out_of_invocation_order_are_steps_back(hist, check):
    hist.add(0, "invoke", "send", key=0, value=1)
    hist.add(0, "invoke", "send", key=0, value=2)
    hist.add(0, "ok", "send", value=2, partition=0, offset=5)  # acknowledged first, invoked second
    ack = hist.add(0, "ok", "send", value=1, partition=0, offset=6)
    hist.send(1, 3, partition=0, offset=3)  # another producer: its own order
    hist.send(0, 4, partition=1, offset=0)  # another partition: its own order
    hist.send(0, 5, outcome="fail")  # not acknowledged: no place in the order
    hist.send(0, 6, outcome="info")
    hist.send(0, 7, partition=0, offset=7)
    found = check(hist)["anomalies"]["nonmonotonic-send"]
    assert found["count"] == 1
    assert found["examples"] == [{"process": 0, "partition": 0, "prev_value": 1, "prev_offset": 6,
                                  "prev_invoke_index": 0, "value": 2, "offset": 5, "invoke_index": 1,
                                  "ack_index": 2}]
    assert ack == 3


def test_equal_offsets_are_not_a_step_back(hist, check):
    for v, o in enumerate((0, 1, 1, 2)):  # an equal offset is a duplicate's matter, not order's
        hist.send(0, v, partition=0, offset=o)
    assert check(hist)["counts_by_anomaly"]["nonmonotonic-send"] == 0


def test_examples_are_the_first_by_invocation_and_name_true_offsets(hist, check):
    big = 1 << 45  # folded by the checker (checkers/offsets.py), unfolded in the examples
    hist.send(2, 5000, partition=3, offset=big)
    hist.send(2, 5001, partition=3, offset=7)
    n = MAX_EXAMPLES + 5
    for p in (1, 0):  # partition 1's steps come first in the file, partition 0's sort first
        for i in range(n):
            hist.send(0, p * 1000 + i, partition=p, offset=(n - i) * 10)
    found = check(hist)["anomalies"]["nonmonotonic-send"]
    assert found["count"] == 1 + 2 * (n - 1)
    examples = found["examples"]
    assert len(examples) == MAX_EXAMPLES
    assert [e["invoke_index"] for e in examples] == sorted(e["invoke_index"] for e in examples)
    assert (examples[0]["process"], examples[0]["prev_offset"], examples[0]["offset"]) == (2, big, 7)
    assert {e["partition"] for e in examples[1:]} == {1}, "the earliest invocations, not the lowest partition"


def test_a_send_never_answered_has_no_place_in_the_order(hist, check):
    hist.add(0, "invoke", "send", key=0, value=100)  # never answered
    hist.send(0, 1, partition=0, offset=10)
    hist.send(1, 2, partition=0, offset=11)
    hist.add(0, "invoke", "send", key=0, value=3)
    hist.add(0, "invoke", "send", key=0, value=4)
    hist.send(1, 5, partition=0, offset=3)  # process 1 steps back
    hist.add(0, "ok", "send", value=4, partition=0, offset=12)
    hist.add(0, "ok", "send", value=3, partition=0, offset=13)  # invoked before 4: process 0 steps back
    examples = check(hist)["anomalies"]["nonmonotonic-send"]["examples"]
    assert [(e["process"], e["prev_offset"], e["offset"], e["invoke_index"]) for e in examples] \
        == [(0, 13, 12, 6), (1, 11, 3, 7)]


def test_a_send_and_its_acknowledgement_in_different_row_groups(spark, tmp_path):
    events = generate(Plan(events=5_000, seed=7, nonmonotonic_sends=3)).events
    results = []
    for rows in (97, 1_000_000):
        path = tmp_path / f"history-{rows}.parquet"
        write_parquet(events, path, batch_rows=rows)
        results.append(check_history(path, Options(), spark=spark))
    assert results[0]["anomalies"]["nonmonotonic-send"]["count"] == reference_counts(events)["nonmonotonic-send"] == 3
    assert without_timing(results[0])["anomalies"] == without_timing(results[1])["anomalies"]
