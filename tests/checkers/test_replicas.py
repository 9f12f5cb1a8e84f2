"""Replicas at the end (docs/history.md, "Replica logs at the end"):
replica-divergence on hand-made histories with hand-made disk dumps, its
near misses, and what cannot be checked. Every check also compares the
reference checker and the in-process engine."""

from __future__ import annotations

import pytest

from tests.checkers.conftest import NO_DUMPS
from tests.checkers.test_anomalies import ZERO, only

pytestmark = pytest.mark.spark


def _history(hist) -> None:
    """Partition 0 holds 10, 11, 12 (its final log, to offset 3); partition 1's final log is not known."""
    for o, v in enumerate((10, 11, 12)):
        hist.send(0, v, 0, o)
    hist.send(0, 20, 1, 0)
    hist.final_reads(9, [0, 1])
    hist.poll(9, (0, 0, 10), (0, 1, 11), (0, 2, 12), (1, 0, 20))
    hist.final_reads_ok(9, {0: 3})


def test_a_replica_that_kept_another_record_diverges(hist, check):
    # The seed notes' truncation rules exist for this: a follower that kept a
    # tail its new leader overwrote, invisible until it leads again.
    _history(hist)
    dumps = {"n1": [[0, 0, 0, None, 10], [0, 1, 0, None, 11], [0, 2, 0, None, 12]],
             "n2": [[0, 0, 0, None, 10], [0, 1, 1, None, 77], [0, 2, 1, None, 78]],  # kept its own tail
             "n3": [[0, 0, 0, None, 10], [0, 1, 0, None, 11], [0, 2, 2, None, "not a number"]]}  # corrupt
    r = check(hist, dumps=dumps)
    assert r["counts_by_anomaly"] == only(replica_divergence=2)
    assert r["valid"] is False and NO_DUMPS not in r["warnings"]
    first, second = r["anomalies"]["replica-divergence"]["examples"]
    assert (first["partition"], first["offset"], first["value"]) == (0, 1, 11)
    assert [x for x in first["replicas"] if x["diverges"]] == [{"node": "n2", "value": 77, "epoch": 1,
                                                               "diverges": True}]
    assert [(x["node"], x["value"]) for x in second["replicas"] if x["diverges"]] == [("n2", 78), ("n3", None)]


def test_a_replica_shorter_or_longer_than_the_log_or_of_an_unknown_log_does_not_diverge(hist, check):
    _history(hist)
    dumps = {"n1": [[0, 0, 0, None, 10]],  # it lags: shorter
             "n2": [[0, 0, 0, None, 10], [0, 1, 0, None, 11], [0, 2, 0, None, 12], [0, 3, 1, None, 99]],  # more
             "n3": [[1, 0, 0, None, 55]]}  # partition 1's final log is not known
    r = check(hist, dumps=dumps)
    assert r["counts_by_anomaly"] == ZERO
    assert ("replica-divergence of partitions 1 was not checked: their final logs are not known"
            in r["warnings"])


def test_an_offset_the_final_reads_returned_nothing_at_is_not_concluded(hist, check):
    for o, v in ((0, 10), (2, 12)):
        hist.send(0, v, 0, o)
    hist.final_reads(9, [0])
    hist.poll(9, (0, 0, 10), (0, 2, 12))  # nothing at offset 1 (a gap: a marker, a record no reader decoded)
    hist.final_reads_ok(9, {0: 3})
    r = check(hist, dumps={"n1": [[0, 0, 0, None, 10], [0, 1, 0, None, 11], [0, 2, 0, None, 12]]})
    assert r["counts_by_anomaly"] == ZERO
