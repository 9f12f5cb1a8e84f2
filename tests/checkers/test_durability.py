"""Durability read from the final log (docs/history.md): lost-acked,
dirty-read and the narrowed unseen on hand-written histories with final
reads, their near-misses, and the read-order resets that only an operation
that happened makes. Every check also compares the reference checker."""

from __future__ import annotations

import pytest

from tests.checkers.conftest import NO_DUMPS
from tests.checkers.test_anomalies import ZERO, only

pytestmark = pytest.mark.spark

NOT_CHECKED = ("durability was not checked: the history has no final-reads operation, so no final log "
               "is known (lost-acked and dirty-read are 0)")


def test_values_read_then_lost_by_every_replica_are_lost_acked(hist, check):
    # The Kafka power-loss run: consumers read what was acknowledged, then
    # every replica lost it; the final reads find partition 0 empty.
    for v in range(3):
        hist.send(0, v, 0, v)
    read = hist.poll(1, (0, 0, 0), (0, 1, 1), (0, 2, 2))
    hist.final_reads(2, [0])
    hist.poll(2)
    hist.final_reads_ok(2, {0: 0})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_acked=3)
    assert r["valid"] is False and r["anomalies"]["lost-acked"]["error"] is True
    first = r["anomalies"]["lost-acked"]["examples"][0]
    assert first == {"value": 0, "partition": 0, "offset": 0, "invoke_index": 0, "ack_index": 1,
                     "read_index": read, "final_end": 0, "read_time": read * 1_000_000}
    assert r["stats"]["final_logs"] == {"checked": True, "ends": {"0": 0}, "not_reached": []}
    assert r["warnings"] == [NO_DUMPS]
    # The same history without its final reads: the classic definitions see nothing.
    bare = type(hist)()
    bare.events = [e for e in hist.events if e["process"] != 2]
    r = check(bare)
    assert r["counts_by_anomaly"] == ZERO and r["valid"] is True
    assert r["warnings"] == [NOT_CHECKED, NO_DUMPS]


def test_an_acked_value_beyond_the_final_log_is_lost_acked_not_unseen(hist, check):
    hist.send(0, 1, 0, 0)
    hist.send(0, 2, 0, 1)
    hist.final_reads(5, [0])
    hist.poll(5, (0, 0, 1))
    hist.final_reads_ok(5, {0: 1})  # the log ends at 1: offset 1 is not in it
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_acked=1)
    assert r["anomalies"]["lost-acked"]["examples"][0]["read_index"] is None
    assert r["anomalies"]["lost-acked"]["examples"][0]["read_time"] is None


def test_a_lost_write_is_not_also_lost_acked(hist, check):
    hist.send(0, 1, 0, 0)
    hist.send(0, 2, 0, 1)
    hist.send(0, 3, 0, 2)
    hist.final_reads(5, [0])
    hist.poll(5, (0, 0, 1), (0, 2, 3))
    hist.final_reads_ok(5, {0: 3})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_write=1, poll_skip=1)


def test_unseen_only_where_the_final_log_is_not_known(hist, check):
    hist.send(0, 1, 0, 0)
    hist.send(0, 2, 1, 0)
    hist.final_reads(5, [0, 1])
    hist.poll(5)
    hist.final_reads_ok(5, {0: 0})  # partition 1 was not read to its end
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_acked=1, unseen=1)
    assert r["anomalies"]["unseen"]["examples"][0]["value"] == 2
    assert r["stats"]["final_logs"]["not_reached"] == [1]
    assert r["warnings"] == ["durability of partitions 1 was not checked: "
                             "the final reads did not report reaching their end", NO_DUMPS]


def test_another_value_at_the_acked_offset_is_inconsistent_and_lost_acked(hist, check):
    # Nothing was read past offset 0, so this is no lost-write; yet the value
    # acknowledged at 0 is not in the final log, which holds another there.
    hist.send(0, 1, 0, 0)
    hist.send(0, 2, outcome="info")
    hist.final_reads(5, [0])
    hist.poll(5, (0, 0, 2))
    hist.final_reads_ok(5, {0: 1})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_acked=1, inconsistent_offset=1)


def test_only_offsets_below_the_end_are_the_final_log(hist, check):
    hist.send(0, 1, 0, 0)
    hist.send(0, 2, 0, 1)
    hist.final_reads(5, [0])
    hist.poll(5, (0, 0, 1), (0, 1, 2))
    hist.final_reads_ok(5, {0: 1})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_acked=1)
    assert r["anomalies"]["lost-acked"]["examples"][0]["value"] == 2


def test_dirty_reads_are_unsettled_values_a_consumer_got_that_the_log_did_not_keep(hist, check):
    hist.send(0, 1, outcome="info")           # timed out, read, gone: dirty
    hist.send(0, 2, outcome=None)             # never completed, read, gone: dirty
    hist.send(0, 3, outcome="fail")           # failed, read: aborted-read, not dirty
    hist.send(0, 4, outcome="info")           # timed out, read, kept: nothing
    hist.send(0, 5, 0, 4)                     # acknowledged, read, gone: lost-acked
    run_read = hist.poll(1, (0, 0, 1), (0, 1, 2), (0, 2, 3), (0, 3, 99), (0, 4, 5))
    hist.final_reads(7, [0])
    hist.poll(7, (0, 0, 4))
    hist.final_reads_ok(7, {0: 1})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(dirty_read=3, aborted_read=1, lost_acked=1, inconsistent_offset=1)
    examples = r["anomalies"]["dirty-read"]["examples"]
    assert [(e["value"], e["send"]) for e in examples] == [(1, "info"), (2, "never completed"), (99, "no send")]
    assert examples[0] == {"value": 1, "partition": 0, "read_index": run_read, "send": "info",
                           "invoke_index": 0, "completion_index": 1, "final_end": 1,
                           "read_time": run_read * 1_000_000}
    assert "1 values were read that no send in the history wrote" in r["warnings"]


def test_no_dirty_read_where_the_partition_was_not_read_to_its_end(hist, check):
    hist.send(0, 1, outcome="info")
    hist.poll(1, (1, 0, 1))
    hist.final_reads(7, [0, 1])
    hist.final_reads_ok(7, {0: 0})
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO


def test_polls_outside_the_bracket_are_reads_of_the_run(hist, check):
    hist.send(0, 1, outcome="info")
    hist.poll(7, (0, 0, 1))  # the same process, before it began its final reads
    hist.final_reads(7, [0])
    hist.poll(7)
    hist.final_reads_ok(7, {0: 0})
    hist.poll(7, (0, 0, 1))  # and after it completed them
    r = check(hist)
    assert r["counts_by_anomaly"] == only(dirty_read=1, nonmonotonic_poll=1)


def test_final_reads_of_several_readers_make_one_final_log(hist, check):
    for v in range(4):
        hist.send(0, v, 0, v)
    hist.final_reads(5, [0])
    hist.poll(5, (0, 0, 0), (0, 1, 1))
    hist.final_reads_ok(5, {})
    hist.crash(5)
    hist.final_reads(6, [0])
    hist.poll(6, (0, 2, 2), (0, 3, 3))
    hist.final_reads_ok(6, {0: 4})
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO and r["valid"] is True
    assert r["warnings"] == [NO_DUMPS]


@pytest.mark.parametrize("completion", ["info", "fail", None])
def test_final_reads_that_did_not_complete_ok_know_no_log(hist, check, completion):
    hist.send(0, 1, 0, 0)
    hist.poll(1, (0, 0, 1))
    hist.final_reads(5, [0])
    hist.poll(5)
    if completion:
        hist.add(5, completion, "final-reads", error="_TIMED_OUT")
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO
    assert r["stats"]["final_logs"] == {"checked": True, "ends": {}, "not_reached": [0]}


def test_a_later_completion_sets_the_end(hist, check):
    hist.send(0, 1, 0, 0)
    hist.send(0, 2, 0, 1)
    hist.final_reads(5, [0])
    hist.poll(5, (0, 0, 1))
    hist.final_reads_ok(5, {0: 1})
    hist.final_reads(6, [0])
    hist.poll(6, (0, 0, 1), (0, 1, 2))
    hist.final_reads_ok(6, {0: 2})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(nonmonotonic_poll=0)
    assert r["stats"]["final_logs"]["ends"] == {"0": 2}


def test_values_in_two_partitions_are_settled_per_partition(hist, check):
    hist.send(0, 1, outcome="info")   # read in 0 and 1 during the run; the final log keeps it in 0 only
    hist.send(0, 2, 1, 0)             # acked in 1; the final log has it in 0 and not in 1
    hist.send(0, 3, 0, 2)             # acked in 0; read in both; the final log has it in both
    hist.poll(1, (0, 0, 1), (1, 1, 1))
    hist.poll(2, (1, 0, 2))
    hist.final_reads(7, [0, 1])
    hist.poll(7, (0, 0, 1), (0, 1, 2), (0, 2, 3), (1, 2, 3))
    hist.final_reads_ok(7, {0: 3, 1: 3})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(dirty_read=1, lost_acked=1, duplicate=3)
    assert [(e["value"], e["partition"]) for e in r["anomalies"]["dirty-read"]["examples"]] == [(1, 1)]
    assert [e["value"] for e in r["anomalies"]["lost-acked"]["examples"]] == [2]


@pytest.mark.parametrize("parquet", [False, True])
def test_both_formats_give_the_same_durability(hist, check, parquet):
    hist.send(0, 1, 0, 0)
    hist.send(0, 2, outcome="info")
    hist.poll(1, (0, 0, 1), (0, 1, 2))
    hist.final_reads(5, [0])
    hist.poll(5)
    hist.final_reads_ok(5, {0: 0})
    r = check(hist, parquet=parquet)
    assert r["counts_by_anomaly"] == only(lost_acked=1, dirty_read=1)


# -- what restarts read order: only operations that happened


def _read_back_after(hist, op):
    hist.poll(1, (0, 5, 50))
    op()
    hist.poll(1, (0, 3, 30))


@pytest.mark.parametrize("outcome,restarts", [("ok", True), ("info", True), ("fail", False), (None, False)])
def test_a_seek_restarts_read_order_only_if_it_happened(hist, check, outcome, restarts):
    def seek():
        hist.add(1, "invoke", "seek", partition=0, offset=3)
        if outcome == "ok":
            hist.add(1, "ok", "seek", partition=0, offset=3)
        elif outcome:
            hist.add(1, outcome, "seek", error="SOME_ERROR")  # names no partition: its invocation's counts

    _read_back_after(hist, seek)
    r = check(hist)
    assert r["counts_by_anomaly"]["nonmonotonic-poll"] == (0 if restarts else 1)


@pytest.mark.parametrize("outcome,restarts", [("ok", True), ("info", True), ("fail", False), (None, False)])
def test_an_assign_restarts_read_order_only_if_it_happened(hist, check, outcome, restarts):
    def assign():
        hist.add(1, "invoke", "assign", partitions=[0])
        if outcome == "ok":
            hist.add(1, "ok", "assign", partitions=[0])
        elif outcome:
            hist.add(1, outcome, "assign", error="SOME_ERROR")

    _read_back_after(hist, assign)
    r = check(hist)
    assert r["counts_by_anomaly"]["nonmonotonic-poll"] == (0 if restarts else 1)


def test_an_info_seek_restarts_only_its_invocations_partition(hist, check):
    hist.poll(1, (0, 5, 50), (1, 5, 51))
    hist.add(1, "invoke", "seek", partition=1, offset=3)
    hist.add(1, "info", "seek", error="_TIMED_OUT")
    hist.poll(1, (0, 3, 30), (1, 3, 31))
    r = check(hist)
    assert r["counts_by_anomaly"]["nonmonotonic-poll"] == 1
    assert r["anomalies"]["nonmonotonic-poll"]["examples"][0]["partition"] == 0
