"""Each anomaly of HISTORY.md on hand-written histories: the anomaly itself,
near-misses that must not be flagged, and how anomalies interact. Every
check also compares the Spark checker with the reference implementation."""

from __future__ import annotations

import pytest

from tests.checkers.conftest import NO_DUMPS

pytestmark = pytest.mark.spark

ZERO = {"lost-write": 0, "lost-acked": 0, "dirty-read": 0, "duplicate": 0, "inconsistent-offset": 0,
        "aborted-read": 0, "nonmonotonic-poll": 0, "poll-skip": 0, "nonmonotonic-send": 0, "unseen": 0,
        "replica-divergence": 0, "consumer-loss": 0, "redelivery": 0, "lost-commit": 0,
        "precommitted-read": 0, "torn-transaction": 0, "G0": 0, "G1c": 0, "G0-realtime": 0, "G1c-realtime": 0,
        "wr-cycle": 0}


def only(**counts) -> dict:
    expected = dict(ZERO)
    expected.update({k.replace("_", "-"): v for k, v in counts.items()})
    return expected


def test_a_clean_history_is_valid(hist, check):
    for v in range(3):
        hist.send(0, v, 0, v)
    hist.add("nemesis", "invoke", "start-partition", value={"grudge": {"n1": ["n2"]}})
    hist.add("nemesis", "ok", "start-partition", value={"grudge": {"n1": ["n2"]}}, verified=True)
    hist.poll(1, (0, 0, 0), (0, 1, 1))
    hist.poll(1, (0, 2, 2))
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO
    assert r["valid"] is True
    assert r["counts"]["sends"] == {"ok": 3, "fail": 0, "info": 0}
    assert r["counts"]["records_read"] == 3
    assert [f["f"] for f in r["stats"]["faults"]] == ["start-partition", "start-partition"]
    assert r["stats"]["faults"][1]["verified"] is True


def test_lost_write_read_past_is_also_a_poll_skip(hist, check):
    hist.send(0, 10, 0, 0)
    ack = hist.send(0, 11, 0, 1)
    hist.send(0, 12, 0, 2)
    read = hist.poll(1, (0, 0, 10), (0, 2, 12))
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_write=1, poll_skip=1)
    assert r["valid"] is False
    lost = r["anomalies"]["lost-write"]
    assert lost["error"] is True
    assert lost["examples"] == [{"value": 11, "partition": 0, "offset": 1, "invoke_index": ack - 1,
                                 "ack_index": ack, "max_read_offset": 2}]
    skip = r["anomalies"]["poll-skip"]["examples"][0]
    assert (skip["prev_offset"], skip["offset"], skip["skipped_offset"], skip["index"]) == (0, 2, 1, read)


def test_a_lost_write_needs_a_read_past_it_in_its_own_partition(hist, check):
    # Partition 0 is read far; partition 1's acknowledged write at 5 is not reached.
    hist.send(0, 1, 1, 5)
    for i in range(10):
        hist.send(0, 100 + i, 0, i)
    hist.poll(1, *[(0, i, 100 + i) for i in range(10)])
    hist.poll(1, (1, 3, 999))  # some other record of partition 1, below offset 5
    r = check(hist)
    assert r["counts_by_anomaly"] == only(unseen=1)
    assert r["valid"] is True  # unseen is not an error
    assert r["anomalies"]["unseen"]["error"] is False
    assert r["warnings"][1:] == [NO_DUMPS, "1 values were read that no send in the history wrote"]
    assert r["warnings"][0].startswith("durability was not checked")  # no final reads in this history


def test_duplicate_is_an_error_only_where_idempotence_promises(hist, check):
    hist.send(0, 7, 0, 0)
    hist.poll(1, (0, 0, 7), (0, 1, 7))
    r = check(hist)
    assert r["counts_by_anomaly"] == only(duplicate=1)
    assert r["valid"] is True and r["anomalies"]["duplicate"]["error"] is False
    assert r["promises"]["idempotent"] is False
    example = r["anomalies"]["duplicate"]["examples"][0]
    assert example["positions"] == [{"partition": 0, "offset": 0, "ack_index": 1, "read_index": 3},
                                    {"partition": 0, "offset": 1, "read_index": 3}]
    r = check(hist, idempotent=True)
    assert r["valid"] is False and r["anomalies"]["duplicate"]["error"] is True
    r = check(hist, run_json={"producer": {"enable.idempotence": True}})
    assert r["valid"] is False and r["promises"] == {"idempotent": True, "source": "run.json"}


def test_the_same_position_read_twice_is_no_duplicate(hist, check):
    hist.send(0, 7, 0, 0)
    hist.poll(1, (0, 0, 7))
    hist.poll(2, (0, 0, 7))
    hist.assign(1, [0])
    hist.poll(1, (0, 0, 7))
    assert check(hist)["counts_by_anomaly"] == ZERO


def test_inconsistent_offset(hist, check):
    hist.send(0, 1, 0, 0)
    hist.send(0, 2, 0, 1)
    hist.poll(1, (0, 0, 1), (0, 1, 2))
    hist.poll(2, (0, 0, 3))  # another value at offset 0
    r = check(hist)
    assert r["counts_by_anomaly"] == only(inconsistent_offset=1)
    e = r["anomalies"]["inconsistent-offset"]["examples"][0]
    assert (e["partition"], e["offset"]) == (0, 0)
    assert e["values"] == [{"value": 1, "ack_index": 1, "read_index": 5}, {"value": 3, "read_index": 7}]


def test_two_acks_at_one_offset_are_inconsistent(hist, check):
    hist.send(0, 1, 0, 0)
    hist.send(1, 2, 0, 0)
    hist.poll(2, (0, 0, 2))
    r = check(hist)
    # Value 1 is never read but nothing was read past offset 0: unseen, not lost.
    assert r["counts_by_anomaly"] == only(inconsistent_offset=1, unseen=1)


def test_aborted_read_and_info_sends(hist, check):
    hist.send(0, 1, outcome="fail", error="NOT_ENOUGH_REPLICAS")
    hist.send(0, 2, outcome="info", error="_MSG_TIMED_OUT")  # read later: it happened
    hist.send(0, 3, outcome="info", error="_MSG_TIMED_OUT")  # never read
    hist.send(0, 4, outcome=None)  # never completed: counts as info
    hist.poll(1, (0, 0, 1), (0, 1, 2), (0, 2, 4))
    r = check(hist)
    assert r["counts_by_anomaly"] == only(aborted_read=1)
    e = r["anomalies"]["aborted-read"]["examples"][0]
    assert (e["value"], e["fail_index"], e["error"], e["read_index"]) == (1, 1, "NOT_ENOUGH_REPLICAS", 8)
    assert r["counts"]["sends"] == {"ok": 0, "fail": 1, "info": 3}
    assert r["counts"]["unfinished"]["send"] == 1
    assert r["stats"]["info_sends"] == {"read": 2, "unread": 1}


def test_examples_read_in_one_poll_are_in_value_order(hist, check):
    # Equal keys (one poll's index) are ordered by value, however the
    # values were sent: the driver's examples and Spark's alike (`check`
    # compares them).
    for value in (9, 7, 8):
        hist.send(0, value, outcome="fail")
    for value in (5, 3, 4):
        hist.send(0, value, outcome="info")
    hist.poll(1, (0, 0, 9), (0, 1, 7), (0, 2, 8), (1, 0, 5), (1, 1, 3), (1, 2, 4))
    hist.final_reads(2, [1])
    hist.poll(2)
    hist.final_reads_ok(2, {1: 0})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(aborted_read=3, dirty_read=3)
    assert [e["value"] for e in r["anomalies"]["aborted-read"]["examples"]] == [7, 8, 9]
    assert [e["value"] for e in r["anomalies"]["dirty-read"]["examples"]] == [3, 4, 5]


def test_nonmonotonic_poll_and_what_excuses_it(hist, check):
    for v in range(3):
        hist.send(0, v, 0, v)
    hist.poll(1, (0, 0, 0), (0, 1, 1), (0, 2, 2))
    hist.poll(1, (0, 1, 1))  # back, nothing in between
    r = check(hist)
    assert r["counts_by_anomaly"] == only(nonmonotonic_poll=1)
    e = r["anomalies"]["nonmonotonic-poll"]["examples"][0]
    assert (e["process"], e["partition"], e["prev_offset"], e["offset"]) == (1, 0, 2, 1)


@pytest.mark.parametrize("between", ["seek", "assign", "crash"])
def test_a_reread_after_seek_assign_or_crash_is_fine(hist, check, between):
    for v in range(3):
        hist.send(0, v, 0, v)
    hist.poll(1, (0, 0, 0), (0, 1, 1), (0, 2, 2))
    {"seek": lambda: hist.seek(1, 0, 0), "assign": lambda: hist.assign(1, [0]),
     "crash": lambda: hist.crash(1)}[between]()
    hist.poll(1, (0, 0, 0))
    assert check(hist)["counts_by_anomaly"] == ZERO


def test_a_seek_of_another_partition_does_not_excuse_a_rewind(hist, check):
    for v in range(2):
        hist.send(0, v, 0, v)
    hist.poll(1, (0, 0, 0), (0, 1, 1))
    hist.seek(1, 5, 0)
    hist.poll(1, (0, 0, 0))
    assert check(hist)["counts_by_anomaly"] == only(nonmonotonic_poll=1)


def test_a_gap_with_nothing_known_inside_is_no_skip(hist, check):
    # Offsets 1-2 hold records the history does not know (markers, other writers).
    hist.send(0, 0, 0, 0)
    hist.send(0, 3, 0, 3)
    hist.poll(1, (0, 0, 0), (0, 3, 3))
    assert check(hist)["counts_by_anomaly"] == ZERO


def test_a_skip_over_a_record_another_consumer_read(hist, check):
    hist.send(0, 0, 0, 0)
    hist.send(0, 1, 0, 1, outcome="info")  # unknown outcome, but process 2 read it at 1
    hist.send(0, 2, 0, 2)
    hist.poll(1, (0, 0, 0), (0, 2, 2))
    hist.poll(2, (0, 0, 0), (0, 1, 1), (0, 2, 2))
    r = check(hist)
    assert r["counts_by_anomaly"] == only(poll_skip=1)
    assert r["anomalies"]["poll-skip"]["examples"][0]["skipped_offset"] == 1


def test_a_wide_gap_skip_is_found(hist, check):
    hist.send(0, 0, 0, 0)
    hist.send(0, 1, 0, 1500)
    hist.send(0, 2, 0, 5000)
    hist.poll(1, (0, 0, 0), (0, 5000, 2))
    hist.poll(2, (0, 1500, 1))
    r = check(hist)
    assert r["counts_by_anomaly"] == only(poll_skip=1)
    assert r["anomalies"]["poll-skip"]["examples"][0]["skipped_offset"] == 1500


def test_nonmonotonic_send(hist, check):
    hist.add(0, "invoke", "send", key=0, value=1)
    hist.add(0, "invoke", "send", key=0, value=2)
    hist.add(0, "ok", "send", value=2, partition=0, offset=4)
    hist.add(0, "ok", "send", value=1, partition=0, offset=5)
    hist.poll(1, (0, 4, 2), (0, 5, 1))
    r = check(hist)
    assert r["counts_by_anomaly"] == only(nonmonotonic_send=1)
    assert r["valid"] is True  # at-least-once promises no order
    e = r["anomalies"]["nonmonotonic-send"]["examples"][0]
    assert (e["prev_value"], e["prev_offset"], e["value"], e["offset"]) == (1, 5, 2, 4)
    assert check(hist, idempotent=True)["valid"] is False


def test_sends_of_different_processes_or_partitions_are_not_ordered(hist, check):
    hist.send(0, 1, 0, 5)
    hist.send(1, 2, 0, 4)  # another process
    hist.send(0, 3, 1, 0)  # another partition
    hist.poll(2, (0, 4, 2), (0, 5, 1), (1, 0, 3))
    assert check(hist)["counts_by_anomaly"] == ZERO


def test_allow_declares_an_anomaly_expected(hist, check):
    hist.send(0, 10, 0, 0)
    hist.send(0, 11, 0, 1)
    hist.send(0, 12, 0, 2)
    hist.poll(1, (0, 0, 10))
    hist.seek(1, 0, 2)
    hist.poll(1, (0, 2, 12))
    r = check(hist, allow={"lost-write"})
    assert r["counts_by_anomaly"] == only(lost_write=1)
    assert r["valid"] is True
    assert r["anomalies"]["lost-write"] == {**r["anomalies"]["lost-write"], "error": False, "allowed": True}


def test_examples_are_capped_at_twenty_and_counts_are_not(hist, check):
    n = 25
    for v in range(2 * n + 1):
        hist.send(0, v, 0, v)
    hist.poll(1, *[(0, o, o) for o in range(0, 2 * n + 1, 2)])  # every odd offset lost
    r = check(hist)
    assert r["anomalies"]["lost-write"]["count"] == n
    assert len(r["anomalies"]["lost-write"]["examples"]) == 20
    assert r["anomalies"]["poll-skip"]["count"] == n
    assert [e["value"] for e in r["anomalies"]["lost-write"]["examples"]] == list(range(1, 41, 2))


def test_results_have_every_anomaly_and_statistics(hist, check):
    hist.send(0, 1, 0, 0)
    hist.poll(1, (0, 0, 1))
    hist.add(1, "invoke", "commit", offsets=[{"partition": 0, "offset": 1}])
    hist.add(1, "ok", "commit", offsets=[{"partition": 0, "offset": 1}])
    r = check(hist)
    assert list(r["anomalies"]) == list(ZERO)
    assert set(r) >= {"valid", "checker", "counts", "anomalies", "stats"}
    assert r["checker"]["engine"] == "spark"
    lat = {(x["f"], x["type"]): x for x in r["stats"]["latency"]}
    assert lat[("send", "ok")]["count"] == 1 and lat[("poll", "ok")]["count"] == 1
    # One event apart is 1 ms in Hist's clock.
    assert lat[("send", "ok")]["max_ms"] == 1.0 and lat[("commit", "ok")]["p50_ms"] == 1.0
    assert r["counts"]["other_ops"]["commit"] == {"ok": 1, "fail": 0, "info": 0}
    assert sum(x["count"] for x in r["stats"]["throughput"] if x["f"] == "send") == 1


@pytest.mark.parametrize("parquet", [False, True])
def test_offsets_past_40_bits_are_checked_as_read(hist, check, parquet):
    """Kafka once served two old records again at offsets 2^42 + 924 and
    + 925 (a flipped bit in a batch's base offset, outside its CRC) to a
    consumer that checked CRCs. The history is valid input, and the checker
    must judge it as it would any other: here a re-delivery (duplicates), a
    skip ahead over known offsets and a rewind. Offsets near and above the
    packing limit are folded in order (checkers/offsets.py); the examples show
    the true offsets."""
    big = (1 << 42) + 924
    for v in range(6):
        hist.send(0, v, 0, v)
    hist.send(0, 7, 0, (1 << 40) - 5)  # an acknowledged offset near the limit: folded, and kept below `big`
    hist.poll(1, (0, 0, 0), (0, 1, 1), (0, 2, 2), (0, big, 1), (0, big + 1, 2), (0, 3, 3))
    hist.poll(1, (0, 4, 4), (0, 5, 5), (0, (1 << 40) - 5, 7), (0, (1 << 62) + 3, 5))
    r = check(hist, parquet=parquet)
    assert r["counts_by_anomaly"] == only(duplicate=3, poll_skip=2, nonmonotonic_poll=1)
    assert r["valid"] is False
    assert sorted(e["offset"] for e in r["anomalies"]["nonmonotonic-poll"]["examples"]) == [3]
    assert sorted(e["prev_offset"] for e in r["anomalies"]["nonmonotonic-poll"]["examples"]) == [big + 1]
    shown = {(e["value"], e.get("prev_offset"), e["offset"]) for e in r["anomalies"]["poll-skip"]["examples"]}
    assert shown == {(1, 2, big), (5, (1 << 40) - 5, (1 << 62) + 3)}
    assert any(w.startswith("4 distinct offsets at or above") and str(big) in w for w in r["warnings"]), r["warnings"]
