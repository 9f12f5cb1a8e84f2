"""Transactions (docs/history.md, "Transactions") on hand-made histories with
known counts: the sends of a transaction as sends (lost, duplicated, an
aborted one read: Jepsen's G1a), precommitted-read, torn-transaction, and
the cycles of the dependency graph (G0, G1c, their realtime variants, and
wr-cycle), consume-transform-produce transactions as their group's handling
(consumer-loss, redelivery: exactly-once processing), with histories where
nothing is wrong. Every check also compares
the reference checker and the in-process engine; the cycles found segment
by segment (checkers/kernel/txn_segments.py) are also compared with one
search of the whole graph."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest

from checkers import registry
from tests.checkers.test_anomalies import ZERO, only

pytestmark = pytest.mark.spark


def txn(hist, process, sends=(), records=(), outcome="ok", isolation=None, group=None, offsets=None) -> tuple:
    """A transaction: `sends` (value, partition, offset) each, `records` its reads
    (partition, offset, value); `outcome` None: never completed. Returns its
    invocation's and completion's indexes."""
    extra = {"isolation": isolation} if isolation else {}
    if group is not None:
        extra.update(group=group, offsets=[{"partition": p, "offset": o} for p, o in sorted(offsets.items())])
    inv = hist.add(process, "invoke", "txn", sends=[{"key": 0, "value": v} for v, _, _ in sends], **extra)
    if outcome is None:
        return inv, None
    comp = hist.add(process, outcome, "txn",
                    sends=[{"key": 0, "value": v, **({"partition": p, "offset": o} if outcome == "ok" else {})}
                           for v, p, o in sends],
                    records=[{"partition": p, "offset": o, "key": 0, "value": v} for p, o, v in records],
                    **({"error": "ABORTED"} if outcome != "ok" else {}), **extra)
    return inv, comp


def _final(hist, ends: dict[int, list[int | None]], process=20) -> None:
    """Final reads: each partition's values at offsets 0, 1, ... (None: a marker or aborted record, not returned)."""
    hist.final_reads(process, sorted(ends))
    hist.poll(process, *[(p, o, v) for p, values in ends.items() for o, v in enumerate(values) if v is not None])
    hist.final_reads_ok(process, {p: len(values) for p, values in ends.items()})


def test_committed_aborted_and_consume_transform_produce_transactions_with_nothing_wrong(hist, check):
    # Two producers' transactions across partitions 0 and 1 (markers take offsets), one aborted; a
    # read_committed consumer skips the aborted records, a read_uncommitted one sees them; a
    # consume-transform-produce transaction reads, writes and commits its offsets.
    txn(hist, 0, [(1, 0, 0), (2, 1, 0)])
    txn(hist, 1, [(3, 0, 2), (4, 1, 2)], outcome="fail")
    txn(hist, 0, [(5, 0, 4), (6, 1, 4)])
    hist.assign(5, [0, 1])
    hist.poll(5, (0, 0, 1), (1, 0, 2))
    hist.poll(5, (0, 4, 5), (1, 4, 6))
    hist.add(6, "invoke", "poll", isolation="read_uncommitted")
    hist.add(6, "ok", "poll", isolation="read_uncommitted",
             records=[{"partition": 0, "offset": o, "key": 0, "value": v} for o, v in ((0, 1), (2, 3), (4, 5))])
    txn(hist, 7, [(7, 2, 0)], records=[(0, 0, 1), (0, 4, 5)], group="g", offsets={0: 5})
    hist.committed(8, "g", {0: 5})
    _final(hist, {0: [1, None, None, None, 5], 1: [2, None, None, None, 6], 2: [7]})
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO
    assert r["valid"] is True
    assert r["counts"]["sends"] == {"ok": 5, "fail": 2, "info": 0}
    assert r["counts"]["other_ops"]["txn"] == {"ok": 3, "fail": 1, "info": 0}


def test_an_aborted_transaction_read_at_read_committed_is_an_aborted_read(hist, check):
    # Jepsen's G1a: the poll's and the transaction's read each count the value once; a
    # read_uncommitted read of it is none.
    _, aborted = txn(hist, 0, [(1, 0, 0), (2, 1, 0)], outcome="fail")
    read = hist.poll(5, (0, 0, 1))
    txn(hist, 6, [(3, 2, 0)], records=[(1, 0, 2)])
    hist.add(7, "invoke", "poll", isolation="read_uncommitted")
    hist.add(7, "ok", "poll", isolation="read_uncommitted", records=[{"partition": 0, "offset": 0, "key": 0, "value": 1}])
    r = check(hist)
    assert r["counts_by_anomaly"] == only(aborted_read=2, unseen=1)
    (first, _) = r["anomalies"]["aborted-read"]["examples"]
    assert first["value"] == 1 and first["fail_index"] == aborted and first["read_index"] == read


def test_a_committed_transaction_s_lost_and_duplicated_records(hist, check):
    txn(hist, 0, [(1, 0, 0), (2, 0, 1), (3, 1, 0)])
    hist.poll(5, (0, 0, 1), (0, 2, 9))  # read past 2: lost, and torn (1 returned, 2 stepped over)
    hist.send(1, 9, 0, 2)
    hist.poll(5, (1, 0, 3), (1, 1, 3))  # 3 twice
    _final(hist, {0: [1, None, 9], 1: [3, 3]})  # the final reader steps over 2 too
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_write=1, duplicate=1, poll_skip=2, torn_transaction=2)
    assert [e["value"] for e in r["anomalies"]["lost-write"]["examples"]] == [2]


def test_a_transaction_that_reads_its_own_records(hist, check):
    inv, comp = txn(hist, 0, [(1, 0, 0), (2, 0, 1)], records=[(0, 0, 1), (0, 1, 2)])
    txn(hist, 1, [(3, 0, 2)], records=[(0, 0, 1)])  # another's record: no precommitted read
    r = check(hist)
    assert r["counts_by_anomaly"] == only(precommitted_read=2, unseen=1)
    assert r["anomalies"]["precommitted-read"]["examples"][0] == {
        "value": 1, "invoke_index": inv, "txn_index": comp, "read_index": comp}
    assert r["valid"] is False


def test_many_transactions_that_read_their_own_records_are_each_a_precommitted_read(hist, check):
    # 200 transactions, each of its own process, write two records and read them back before they commit
    # (a marker after each pair): every value a precommitted read at its transaction's completion, found by
    # one sort of the own reads, however many.
    done = []
    for k in range(200):
        _, comp = txn(hist, k, [(2 * k, 0, 3 * k), (2 * k + 1, 0, 3 * k + 1)],
                      records=[(0, 3 * k, 2 * k), (0, 3 * k + 1, 2 * k + 1)])
        done.append(comp)
    r = check(hist)
    assert r["counts_by_anomaly"] == only(precommitted_read=400)
    assert [(e["value"], e["read_index"]) for e in r["anomalies"]["precommitted-read"]["examples"]] == [
        (v, done[v // 2]) for v in range(len(r["anomalies"]["precommitted-read"]["examples"]))]


def test_a_consumer_that_sees_part_of_a_committed_transaction(hist, check):
    _, t = txn(hist, 0, [(1, 0, 0), (2, 0, 1), (3, 0, 2), (4, 1, 0)])
    hist.poll(5, (0, 0, 1))
    at = hist.poll(5, (0, 2, 3))  # stepped over 2: torn (and a lost write, a skip)
    hist.poll(6, (0, 0, 1))
    hist.seek(6, 0, 2)
    hist.poll(6, (0, 2, 3))  # moved on by a seek: nothing torn
    hist.poll(7, (1, 0, 4))  # the transaction's other partition only: whole there
    r = check(hist)
    assert r["counts_by_anomaly"] == only(torn_transaction=1, lost_write=1, poll_skip=1)
    assert r["anomalies"]["torn-transaction"]["examples"] == [
        {"txn_index": t, "process": 5, "partition": 0, "skipped_value": 2, "skipped_offset": 1, "read_value": 1,
         "read_offset": 0, "prev_index": at - 2, "index": at}]


def test_writes_that_cross_in_two_partitions_are_a_ww_cycle_information_only(hist, check):
    # Two concurrent transactions, each first in one partition: G0 (Kafka's normal).
    a = hist.add(0, "invoke", "txn", sends=[{"key": 0, "value": 1}, {"key": 1, "value": 2}])
    b = hist.add(1, "invoke", "txn", sends=[{"key": 0, "value": 3}, {"key": 1, "value": 4}])
    a_ok = hist.add(0, "ok", "txn", sends=[{"key": 0, "value": 1, "partition": 0, "offset": 0},
                                           {"key": 1, "value": 2, "partition": 1, "offset": 1}])
    b_ok = hist.add(1, "ok", "txn", sends=[{"key": 0, "value": 3, "partition": 0, "offset": 1},
                                           {"key": 1, "value": 4, "partition": 1, "offset": 0}])
    _final(hist, {0: [1, 3], 1: [4, 2]})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(G0=1)
    assert r["valid"] is True and r["anomalies"]["G0"]["error"] is False
    (e,) = r["anomalies"]["G0"]["examples"]
    ta, tb = {"invoke_index": a, "complete_index": a_ok}, {"invoke_index": b, "complete_index": b_ok}
    assert e["size"] == 2 and sorted(s["kind"] for s in e["steps"]) == ["ww", "ww"]
    assert {(s["from"]["invoke_index"], s["to"]["invoke_index"]) for s in e["steps"]} == {(a, b), (b, a)}
    assert ta in [s["from"] for s in e["steps"]] and tb in [s["to"] for s in e["steps"]]


def test_one_after_the_other_but_behind_it_in_a_log_is_a_realtime_ww_cycle(hist, check):
    # T1 completes before T2 begins, yet T2's record is below T1's in partition 1.
    txn(hist, 0, [(1, 0, 0), (2, 1, 1)])
    txn(hist, 1, [(3, 0, 1), (4, 1, 0)])
    r = check(hist)
    assert r["counts_by_anomaly"] == only(G0=1, G0_realtime=1, unseen=4)
    steps = r["anomalies"]["G0-realtime"]["examples"][0]["steps"]
    assert sorted(s["kind"] for s in steps) == ["rt", "ww"]


def test_transactions_that_read_each_other_s_records_are_a_wr_cycle(hist, check):
    hist.add(0, "invoke", "txn", sends=[{"key": 0, "value": 1}])
    hist.add(1, "invoke", "txn", sends=[{"key": 0, "value": 2}])
    hist.add(0, "ok", "txn", sends=[{"key": 0, "value": 1, "partition": 0, "offset": 0}],
             records=[{"partition": 0, "offset": 1, "key": 0, "value": 2}])
    hist.add(1, "ok", "txn", sends=[{"key": 0, "value": 2, "partition": 0, "offset": 1}],
             records=[{"partition": 0, "offset": 0, "key": 0, "value": 1}])
    r = check(hist)
    assert r["counts_by_anomaly"] == only(G1c=1, wr_cycle=1)
    assert r["valid"] is False and r["anomalies"]["wr-cycle"]["error"] is True
    assert sorted(s["kind"] for s in r["anomalies"]["wr-cycle"]["examples"][0]["steps"]) == ["wr", "wr"]


def test_a_read_of_a_transaction_begun_after_it_completed_is_a_realtime_wr_cycle(hist, check):
    txn(hist, 0, [], records=[(0, 0, 1)])
    txn(hist, 1, [(1, 0, 0)])
    r = check(hist)
    assert r["counts_by_anomaly"] == only(G1c_realtime=1, wr_cycle=1)
    steps = r["anomalies"]["G1c-realtime"]["examples"][0]["steps"]
    assert sorted(s["kind"] for s in steps) == ["rt", "wr"]


def test_serial_transactions_and_an_aborted_writer_make_no_cycle(hist, check):
    # Each reads the one before; a read of an aborted transaction (G1a) draws no edge out of it.
    txn(hist, 0, [(1, 0, 0)])
    txn(hist, 1, [(2, 0, 1)], records=[(0, 0, 1)])
    txn(hist, 2, [(3, 0, 2)], records=[(0, 1, 2)])
    hist.add(3, "invoke", "txn", sends=[{"key": 0, "value": 4}])
    txn(hist, 4, [(5, 0, 4)], records=[(0, 3, 4)])
    hist.add(3, "fail", "txn", sends=[{"key": 0, "value": 4}], records=[{"partition": 0, "offset": 4, "key": 0,
                                                                         "value": 5}], error="ABORTED")
    _final(hist, {0: [1, 2, 3, None, 5]})
    r = check(hist)
    # The final reads step over the aborted record, which a read made known: a skip.
    assert r["counts_by_anomaly"] == only(aborted_read=1, poll_skip=1)


def test_offsets_committed_in_a_transaction_are_a_commit(hist, check):
    txn(hist, 0, [(1, 1, 0)], records=[], group="g", offsets={0: 7})
    hist.committed(1, "g", {0: 3})
    r = check(hist)
    assert r["counts_by_anomaly"] == only(lost_commit=1, unseen=1)


# --------------------------------------------------------------------------
# Exactly-once processing: consume-transform-produce transactions as a group's handling


def _input(hist, n: int) -> None:
    """Plain records 100, 101, ... at offsets 0, 1, ... of partition 0: what the transformers consume."""
    for o in range(n):
        hist.send(0, 100 + o, 0, o)


def _transform(hist, process, out: tuple[int, int], records, next_offset, outcome="ok", group="g") -> tuple:
    """A consume-transform-produce transaction: reads `records` of partition 0
    ((offset, value) each), sends value `out[0]` to partition 1 at offset
    `out[1]`, commits `group`'s offset `next_offset` of partition 0."""
    return txn(hist, process, [(out[0], 1, out[1])], records=[(0, o, v) for o, v in records], outcome=outcome,
               group=group, offsets={0: next_offset})


def test_transformers_that_commit_what_they_read_handle_each_record_once(hist, check):
    # Two transformers of group g, the second after the first's partition moved to it: each
    # record read by exactly one committed transaction; an aborted one's read is read again.
    _input(hist, 4)
    _transform(hist, 7, (1, 0), [(0, 100), (1, 101)], 2)
    _transform(hist, 7, (2, 2), [(2, 102)], 3, outcome="fail")  # aborted: 102 is not handled by it
    _transform(hist, 8, (3, 4), [(2, 102), (3, 103)], 4)
    _final(hist, {0: [100, 101, 102, 103], 1: [1, None, None, None, 3]})
    hist.committed(21, "g", {0: 4}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO
    assert not [w for w in r["warnings"] if "were not checked" in w and "group 'g'" in w]


def test_an_aborted_transaction_s_offsets_kept_is_a_consumer_loss(hist, check):
    # The broker applied the offsets of an aborted transaction: the group stands past 102 and
    # 103, which no committed transaction read.
    _input(hist, 4)
    _transform(hist, 7, (1, 0), [(0, 100), (1, 101)], 2)
    _, aborted = _transform(hist, 7, (2, 2), [(2, 102), (3, 103)], 4, outcome="fail")
    _final(hist, {0: [100, 101, 102, 103], 1: [1, None, None, None]})
    hist.committed(21, "g", {0: 4}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == only(consumer_loss=2)
    assert r["valid"] is False
    assert [(e["value"], e["offset"], e["read_index"], e["read_process"])
            for e in r["anomalies"]["consumer-loss"]["examples"]] == [(102, 2, aborted, 7), (103, 3, aborted, 7)]


def test_an_unknown_transaction_may_have_handled_what_it_read(hist, check):
    # An info transaction (its commit's answer lost) may have committed: its records are handled
    # (102, read by it alone, is no loss), but it is no committed reader (103, read by it and by
    # one committed transaction, is no redelivery).
    _input(hist, 4)
    _transform(hist, 7, (1, 0), [(0, 100), (1, 101)], 2)
    _transform(hist, 7, (2, 2), [(2, 102), (3, 103)], 4, outcome="info")
    _transform(hist, 8, (3, 4), [(3, 103)], 4)
    _final(hist, {0: [100, 101, 102, 103], 1: [1, None, 2, None, 3]})
    hist.committed(21, "g", {0: 4}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == ZERO
    assert not [w for w in r["warnings"] if "group 'g'" in w]


def test_a_record_read_by_two_committed_transactions_is_a_redelivery(hist, check):
    # 101 read by two committed transactions of g (exactly-once broken), 100 by a committed one
    # and by a `process` of another member of g (both handlings count); 102 read by a committed
    # one and an aborted one only: once. A transaction of another group reading 101 is not g's.
    _input(hist, 3)
    _, first = _transform(hist, 7, (1, 0), [(0, 100), (1, 101)], 2)
    _, second = _transform(hist, 8, (2, 2), [(1, 101), (2, 102)], 3)
    hist.seek(8, 0, 2)  # it moves back to the group's offset to read again
    _transform(hist, 8, (3, 4), [(2, 102)], 3, outcome="fail")
    hist.assign(9, [0], group="g")
    hist.poll(9, (0, 0, 100))
    hist.process(9, (0, 0, 100))
    _transform(hist, 10, (4, 6), [(1, 101)], 2, group="h")
    _final(hist, {0: [100, 101, 102], 1: [1, None, 2, None, None, None, 4]})
    hist.committed(21, "g", {0: 3}, final=True)
    r = check(hist)
    assert r["counts_by_anomaly"] == only(redelivery=2)
    assert r["valid"] is True
    assert [(e["group"], e["value"], e["times"]) for e in r["anomalies"]["redelivery"]["examples"]] == [
        ("g", 100, 2), ("g", 101, 2)]
    assert r["anomalies"]["redelivery"]["examples"][1]["first_index"] == first
    assert r["anomalies"]["redelivery"]["examples"][1]["second_index"] == second


@pytest.mark.parametrize("values", [(1, 2), (2, 1)])
def test_a_transaction_s_sends_to_a_partition_are_in_the_order_it_lists_them(hist, check, values):
    # Its second send to partition 0 acknowledged below its first: a nonmonotonic send, whatever
    # the values (an engine that took them by value, or as its shuffle left them, would differ).
    # Its send to partition 1 and the plain send after it are in order.
    first, second = values
    hist.add(0, "invoke", "txn", sends=[{"key": 0, "value": first}, {"key": 1, "value": 3},
                                        {"key": 0, "value": second}])
    hist.add(0, "ok", "txn", sends=[{"key": 0, "value": first, "partition": 0, "offset": 1},
                                    {"key": 1, "value": 3, "partition": 1, "offset": 0},
                                    {"key": 0, "value": second, "partition": 0, "offset": 0}], records=[])
    hist.send(0, 4, 0, 2)
    _final(hist, {0: [second, first, 4], 1: [3]})
    r = check(hist, idempotent=True)
    assert r["counts_by_anomaly"] == only(nonmonotonic_send=1)
    (e,) = r["anomalies"]["nonmonotonic-send"]["examples"]
    assert (e["prev_value"], e["prev_offset"], e["value"], e["offset"]) == (first, 1, second, 0)


# --------------------------------------------------------------------------
# The cycles searched segment by segment, against the whole graph searched at once

CYCLES = tuple(name for name, a in registry.ANOMALIES.items() if a.frame == "cycles")


def whole_graph(hist) -> dict[str, dict]:
    """Each cycle anomaly's count and examples as one search of the whole
    dependency graph gives them, every edge of the history at once (as the
    checker searched before it cut the graph into segments)."""
    with tempfile.TemporaryDirectory() as tmp:
        hist.write(Path(tmp), parquet=True)
        return whole_graph_of(Path(tmp))


def graph_of(history: Path):
    """The ww and wr edges ((k, 2) arrays) and the spans of the history at
    `history` (a file or folder `harness check` takes), made by the kernel's
    stages in one shard."""
    from checkers.folds import Transactions
    from checkers.history_read import HistoryRead
    from checkers.kernel import rows as r
    from checkers.kernel.stages import first_frames, second_frames
    from checkers.kernel.transactions import Spans
    from core.history.batches import tables
    from core.history.files import resolve

    read = HistoryRead(keep_rows=True)
    for table in tables(resolve(history)):
        read.add(table)
    facts = read.facts({}, [])
    frames, handed = first_frames(r.Shard.joined([b[0] for b in read.rows]), facts)
    return second_frames(handed, facts)["torn"].ww, frames["txn-values"].wr, Spans.of(read.fold(Transactions).spans)


def whole_graph_of(history: Path) -> dict[str, dict]:
    """whole_graph of the history at `history`."""
    from checkers.kernel.stages import Partial, merge
    from checkers.kernel.transactions import cycles

    partial = Partial()
    partial.decide("cycles", cycles(*graph_of(history)), None)
    found = merge([partial.as_dict()])
    return {name: {"count": found.anomalies[name][0], "examples": found.anomalies[name][1]} for name in CYCLES}


def _cycles_of(results: dict) -> dict[str, dict]:
    return {name: {k: results["anomalies"][name][k] for k in ("count", "examples")} for name in CYCLES}


def test_a_transaction_whose_edges_leave_the_segment_is_on_its_cycle_by_realtime_edges(hist, check):
    # B read A's record before A was invoked (A -wr-> B, backward: the segment from B's completion to
    # A's). X ran between them: B -rt-> X -rt-> A, a cycle of three, though X's only edge, to Y, which
    # read X's record, leaves the segment. N, invoked in it, never completed (its node is its
    # invocation); Y read its record too: an edge out of the segment, and no cycle through N.
    b_inv = hist.add(0, "invoke", "txn", sends=[])
    b = hist.add(0, "ok", "txn", sends=[], records=[{"partition": 0, "offset": 0, "key": 0, "value": 10}])
    hist.add(4, "invoke", "txn", sends=[{"key": 0, "value": 30}])
    x_inv, x = txn(hist, 1, [(20, 1, 0)])
    a_inv, a = txn(hist, 2, [(10, 0, 0)])
    txn(hist, 3, [], records=[(1, 0, 20), (2, 0, 30)])
    r = check(hist)
    assert r["counts_by_anomaly"] == only(G1c_realtime=1, wr_cycle=1)
    (e,) = r["anomalies"]["wr-cycle"]["examples"]
    assert e["first"] == b and e["size"] == 3  # B, X and A
    assert r["checker"]["cycles"] == {"segments": 1, "largest_segment": {"transactions": 4, "edges": 1}}
    assert _cycles_of(r) == whole_graph(hist)
    assert (b_inv, x_inv, a_inv, x, a) == (0, 3, 5, 4, 6)


def test_the_example_cycle_walks_realtime_past_a_transaction_outside_the_segment(hist, check):
    # A -wr-> B (B read A's record before A was invoked), Z -ww-> A (partition 1), B -rt-> Z: a
    # G1c-realtime of three, and a wr-cycle of A and B. W was invoked between Z and A and completed
    # after the segment [B, A]: its invocation lies in realtime's chain from B to A, which makes the
    # example's way back from B to A go by Z (without it, straight to A is as short, and comes first).
    hist.add(0, "invoke", "txn", sends=[])
    b = hist.add(0, "ok", "txn", sends=[], records=[{"partition": 1, "offset": 1, "key": 0, "value": 3}])
    z_inv = hist.add(1, "invoke", "txn", sends=[{"key": 0, "value": 2}])
    hist.add(2, "invoke", "txn", sends=[{"key": 0, "value": 4}])
    a_inv = hist.add(3, "invoke", "txn", sends=[{"key": 0, "value": 3}])
    z = hist.add(1, "ok", "txn", sends=[{"key": 0, "value": 2, "partition": 1, "offset": 0}], records=[])
    a = hist.add(3, "ok", "txn", sends=[{"key": 0, "value": 3, "partition": 1, "offset": 1}], records=[])
    hist.add(2, "ok", "txn", sends=[{"key": 0, "value": 4, "partition": 2, "offset": 0}], records=[])
    txn(hist, 4, [], records=[(2, 0, 4)])
    r = check(hist)
    assert r["counts_by_anomaly"] == only(G1c_realtime=1, wr_cycle=1, lost_write=1)  # Z's record: B read past it
    (e,) = r["anomalies"]["G1c-realtime"]["examples"]
    ta, tb, tz = ({"invoke_index": i, "complete_index": c} for i, c in ((a_inv, a), (b - 1, b), (z_inv, z)))
    assert e["steps"] == [{"from": ta, "to": tb, "kind": "wr"}, {"from": tb, "to": tz, "kind": "rt"},
                          {"from": tz, "to": ta, "kind": "ww"}]
    assert _cycles_of(r) == whole_graph(hist)


def _overlapping(hist, seed: int, bursts: int = 30) -> None:
    """Bursts of transactions that overlap at random on three partitions,
    each burst drained before the next (so that the graph falls into
    segments): a transaction's record takes its offset when the
    transaction is invoked or when it completes, so that two of them may
    cross in two logs; when it completes, it reads records others sent,
    mostly its own burst's, committed yet or not (a later transaction's:
    a realtime edge's wrong way), sometimes an earlier burst's (a long edge
    forward); one in ten aborts, and a few are never completed (their
    process is not used again)."""
    rng = random.Random(seed)
    logs: list[list[int]] = [[], [], []]
    appended: list[tuple[int, int, int]] = []  # every record, in the order it took its offset
    value, process = 0, 0

    def append(v: int, q: int) -> tuple[int, int, int]:
        logs[q].append(v)
        appended.append((q, len(logs[q]) - 1, v))
        return v, q, len(logs[q]) - 1

    for _ in range(bursts):
        open_: dict[int, tuple[list, list]] = {}
        for _ in range(rng.randint(6, 16)):
            if open_ and rng.random() < 0.5:
                p = rng.choice(sorted(open_))
                placed, later = open_.pop(p)
                if rng.random() < 0.08:
                    continue  # never completed
                sends = placed + [append(v, q) for v, q in later]
                mine = {v for v, _, _ in sends}
                readable = [rec for rec in appended[-12:] if rec[2] not in mine]
                records = rng.sample(readable, min(len(readable), rng.randint(0, 2)))
                if rng.random() < 0.2:
                    records.append(rng.choice(appended))
                records = [rec for rec in dict.fromkeys(records) if rec[2] not in mine]
                _completed(hist, p, sends, records, "fail" if rng.random() < 0.1 else "ok")
            else:
                placed, later = [], []
                for q in rng.sample(range(3), rng.randint(1, 2)):
                    value += 1
                    if rng.random() < 0.5:
                        placed.append(append(value, q))
                    else:
                        later.append((value, q))
                hist.add(process, "invoke", "txn",
                         sends=[{"key": 0, "value": v} for v, *_ in placed + later])
                open_[process] = (placed, later)
                process += 1
        for p, (placed, later) in sorted(open_.items()):
            _completed(hist, p, placed + [append(v, q) for v, q in later], [], "ok")


def _completed(hist, process, sends, records, outcome) -> None:
    """The completion of a transaction `txn` would make, its invocation made already."""
    hist.add(process, outcome, "txn",
             sends=[{"key": 0, "value": v, **({"partition": p, "offset": o} if outcome == "ok" else {})}
                    for v, p, o in sends],
             records=[{"partition": p, "offset": o, "key": 0, "value": v} for p, o, v in records],
             **({"error": "ABORTED"} if outcome != "ok" else {}))


@pytest.mark.parametrize("seed", [1, 8])
def test_overlapping_transactions_cycles_found_segment_by_segment_are_the_whole_graph_s(hist, check, seed):
    # Many segments, cycles of every kind in several of them, long forward edges from a burst to later
    # ones cut away, transactions aborted and never completed.
    _overlapping(hist, seed)
    r = check(hist)
    assert r["checker"]["cycles"]["segments"] >= 10
    assert all(r["counts_by_anomaly"][name] for name in CYCLES)
    assert len({e["first"] for name in CYCLES for e in r["anomalies"][name]["examples"]}) >= 5
    assert _cycles_of(r) == whole_graph(hist)
