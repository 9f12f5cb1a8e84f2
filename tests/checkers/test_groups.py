"""Consumer groups (docs/history.md, "Consumer groups") on hand-made histories:
consumer-loss (the seed notes' auto-commit loss), redelivery (at-least-once)
and lost-commit, with their near misses and the warnings for what cannot
be checked. Every check also compares the reference checker and the
in-process engine."""

from __future__ import annotations

import pytest

from checkers.check import Options, check_history
from core.errors import HistoryError
from tests.checkers.test_anomalies import ZERO, only

pytestmark = pytest.mark.spark


def _log(hist, values=range(4), partition=0) -> None:
    """Values acknowledged at offsets 0, 1, 2, ... of `partition`."""
    for o, v in enumerate(values):
        hist.send(0, v, partition, o)


def _final(hist, ends: dict[int, list[int]], process=20) -> None:
    """The final reads: each partition's values at offsets 0, 1, ..., read to their end."""
    hist.final_reads(process, sorted(ends))
    hist.poll(process, *[(p, o, v) for p, values in ends.items() for o, v in enumerate(values)])
    hist.final_reads_ok(process, {p: len(values) for p, values in ends.items()})


def test_the_auto_commit_loss_a_record_committed_past_and_never_handled(hist, check):
    # The seed notes: the client committed what it was given, the consumer
    # died before it handled it: the group moved past a record never handled.
    _log(hist)
    hist.assign(4, [0], group="g1", generation=1)
    hist.committed(4, "g1", {0: -1})
    hist.poll(4, (0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3))
    hist.process(4, (0, 0, 0), (0, 1, 1))
    hist.process(4, (0, 2, 2), outcome=None)  # never completed: it may have been handled
    hist.commit(4, "g1", {0: 4})  # the library's auto-commit: what was delivered
    hist.crash(4)
    _final(hist, {0: [0, 1, 2, 3]})
    hist.committed(21, "g1", {0: 4}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == only(consumer_loss=1)
    assert r["valid"] is False and r["anomalies"]["consumer-loss"]["error"] is True
    (loss,) = r["anomalies"]["consumer-loss"]["examples"]
    assert loss == {"group": "g1", "value": 3, "partition": 0, "offset": 3, "final_committed": 4,
                    "first_delivered": 0, "read_index": 13, "read_process": 4}


def test_committing_only_what_was_handled_loses_nothing_and_may_redeliver(hist, check):
    # The seed's remedy: commit after processing. A member dies after
    # handling 2 and before committing it; the next member is given 2 again.
    _log(hist)
    hist.assign(4, [0], group="g1", generation=1)
    hist.poll(4, (0, 0, 0), (0, 1, 1), (0, 2, 2))
    hist.process(4, (0, 0, 0), (0, 1, 1))
    hist.commit(4, "g1", {0: 2})
    hist.process(4, (0, 2, 2))
    hist.crash(4)
    hist.assign(5, [0], group="g1", generation=2)
    hist.committed(5, "g1", {0: 2})
    hist.poll(5, (0, 2, 2), (0, 3, 3))
    hist.process(5, (0, 2, 2), (0, 3, 3))
    hist.commit(5, "g1", {0: 4})
    _final(hist, {0: [0, 1, 2, 3]})
    hist.committed(21, "g1", {0: 4}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == only(redelivery=1)
    assert r["valid"] is True and r["anomalies"]["redelivery"]["error"] is False  # at-least-once: information
    assert r["anomalies"]["redelivery"]["examples"] == [
        {"group": "g1", "value": 2, "times": 2, "first_index": 17, "second_index": 27}]


def test_no_consumer_loss_above_the_commit_below_the_first_delivery_or_after_a_failed_process(hist, check):
    _log(hist, range(6))
    hist.assign(4, [0], group="g1")
    hist.committed(4, "g1", {0: 2})
    hist.poll(4, (0, 2, 2), (0, 3, 3), (0, 4, 4))  # the group began at 2: 0 and 1 were never its to handle
    hist.process(4, (0, 2, 2))
    hist.process(4, (0, 3, 3), outcome="info")  # perhaps handled
    hist.process(4, (0, 4, 4), outcome="fail")  # certainly not: lost, below the commit
    _final(hist, {0: list(range(6))})
    hist.committed(21, "g1", {0: 5}, final=True)  # 5 is above the commit: not concluded
    r = check(hist)
    assert r["counts_by_anomaly"] == only(consumer_loss=1)
    assert [e["value"] for e in r["anomalies"]["consumer-loss"]["examples"]] == [4]


def test_a_step_that_ended_unknown_or_failed_handled_its_invocation_s_records(hist, check):
    # The contract has only an ok completion repeat the records: a step cut by a
    # kill (info) or refused (fail) is answered by its error alone, as a
    # supervisor records it for a killed client.
    _log(hist, range(6))
    hist.assign(4, [0], group="g1")
    hist.committed(4, "g1", {0: 2})
    hist.poll(4, (0, 2, 2), (0, 3, 3), (0, 4, 4))
    hist.process(4, (0, 2, 2))
    hist.process(4, (0, 3, 3), outcome=None)
    hist.add(4, "info", "process", error="SIGKILL")  # perhaps handled
    hist.process(4, (0, 4, 4), outcome=None)
    hist.add(4, "fail", "process", error="REFUSED")  # certainly not: lost, below the commit
    _final(hist, {0: list(range(6))})
    hist.committed(21, "g1", {0: 5}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == only(consumer_loss=1)
    assert [e["value"] for e in r["anomalies"]["consumer-loss"]["examples"]] == [4]


def test_each_group_answers_for_its_own_members(hist, check):
    _log(hist, range(3))
    for process, group in ((4, "g1"), (5, "g2")):
        hist.assign(process, [0], group=group)
        hist.poll(process, (0, 0, 0), (0, 1, 1), (0, 2, 2))
    hist.process(4, (0, 0, 0), (0, 1, 1), (0, 2, 2))
    hist.process(5, (0, 0, 0), (0, 2, 2))  # g2 never handled 1
    hist.process(5, (0, 2, 2))  # g2 handled 2 twice; g1 once
    _final(hist, {0: [0, 1, 2]})
    hist.committed(21, "g1", {0: 3}, final=True)
    hist.committed(22, "g2", {0: 3}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == only(consumer_loss=1, redelivery=1)
    assert [(e["group"], e["value"]) for e in r["anomalies"]["consumer-loss"]["examples"]] == [("g2", 1)]
    assert [(e["group"], e["value"]) for e in r["anomalies"]["redelivery"]["examples"]] == [("g2", 2)]


def test_what_cannot_be_checked_is_said(hist, check):
    _log(hist, range(2))
    hist.assign(4, [0], group="quiet")  # no processing recorded
    hist.poll(4, (0, 0, 0), (0, 1, 1))
    hist.assign(5, [0], group="busy")  # processing, but no final committed read
    hist.poll(5, (0, 0, 0))
    hist.process(5, (0, 0, 0))
    _final(hist, {0: [0, 1]})
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO
    assert ("consumer-loss of group 'busy' was not checked: no final committed read of it (`committed` with "
            "`final`)") in r["warnings"]
    assert ("consumer-loss and redelivery of group 'quiet' were not checked: its members recorded no "
            "processing (`process`, or a `txn` committing the group's offsets)") in r["warnings"]


def test_an_acknowledged_commit_read_back_lower_is_lost(hist, check):
    hist.assign(4, [0, 1], group="g1")
    hist.commit(4, "g1", {0: 5, 1: 7})
    hist.committed(4, "g1", {0: 3, 1: 7})  # partition 0's commit is gone; 1's is there
    hist.committed(4, "g1", {0: -1})  # and then none at all: a second occurrence
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_commit=2)
    assert r["valid"] is False
    assert [(e["partition"], e["acked"], e["returned"]) for e in r["anomalies"]["lost-commit"]["examples"]] == [
        (0, 5, 3), (0, 5, -1)]


def test_a_commit_taken_back_or_not_yet_acknowledged_is_not_lost(hist, check):
    hist.assign(4, [0], group="g1")
    hist.commit(4, "g1", {0: 5})
    hist.commit(4, "g1", {0: 3})  # a lower commit after it (a rebalance's reset): 3 is what stands
    hist.committed(4, "g1", {0: 3})
    hist.add(4, "invoke", "committed", group="g1", partitions=[0])
    hist.commit(5, "g1", {0: 9})  # acknowledged while the read was under way: not before it began
    hist.add(4, "ok", "committed", offsets=[{"partition": 0, "offset": 3}])
    hist.commit(6, "g2", {0: 9})  # another group's
    hist.commit(4, "g1", {0: 12}, outcome="fail")  # not acknowledged
    hist.committed(6, "g2", {0: 9})
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO


def test_a_process_in_two_groups_is_refused(hist, tmp_path):
    hist.assign(4, [0], group="g1")
    hist.assign(4, [0], group="g2")
    with pytest.raises(HistoryError, match="process 4 is a member of group 'g2', after 'g1'"):
        check_history(hist.write(tmp_path), Options(engine="local"))


def test_the_contract_s_example_of_a_member_s_life(hist, check):
    # docs/history.md's example, with what precedes and follows it.
    hist.send(0, 90412, 2, 5121)
    hist.assign(4, [2], group="g1", generation=3)
    hist.committed(4, "g1", {2: 5121})
    hist.poll(4, (2, 5121, 90412))
    hist.process(4, (2, 5121, 90412))
    hist.commit(4, "g1", {2: 5122})
    hist.final_reads(20, [0, 1, 2])
    hist.poll(20, (2, 5121, 90412))
    hist.final_reads_ok(20, {0: 0, 1: 0})  # partition 2 not read to its end: nothing concluded of it
    hist.committed(20, "g1", {0: 4410, 1: -1, 2: 5122}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO and r["valid"] is True
