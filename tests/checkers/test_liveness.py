"""Liveness (checkers/liveness.py) on hand-made histories, through the whole
checker: producer and consumer waits, per partition and per fault, recovery
after a fault's end and after the final heal, and the HANG verdict."""

from __future__ import annotations

import pytest

from checkers.liveness import verdict_words
from core.errors import UserError
from harness.run.spec import build, expectation, liveness_failed
from tests.checkers.conftest import Hist

ENDS = {"start-partition": "stop-partition", "kill": "start", "pause": "resume"}
S = 1_000_000_000


class Timed(Hist):
    """A history on a clock the test moves: `at(seconds)`; events between
    two moves are 1 µs apart, in call order."""

    def __init__(self) -> None:
        super().__init__()
        self.t = 0

    def at(self, seconds: float) -> "Timed":
        assert seconds * S >= self.t
        self.t = int(seconds * S)
        return self

    def add(self, process, type_, f, **fields) -> int:
        index = super().add(process, type_, f, **fields)
        self.events[index]["time"] = self.t
        self.t += 1000
        return index

    def nemesis(self, f: str, **value) -> None:
        self.add("nemesis", "invoke", f, value=value)
        self.add("nemesis", "ok", f, value=value)


@pytest.fixture
def timed():
    return Timed()


def live(check, h, **options) -> dict:
    return check(h, fault_ends=ENDS, **options)["liveness"]


def _steady(h: Timed, start: float, stop: float, value: int, offset: int, key=0, partition=0, every=0.1) -> tuple[int, int]:
    """Acknowledged sends every `every` s from start to stop; returns the next value and offset."""
    t = start
    while t < stop - 1e-9:
        h.at(t)
        h.send(0, value, partition, offset, key=key)
        value, offset, t = value + 1, offset + 1, t + every
    return value, offset


def test_a_partition_that_fails_sends_for_five_seconds_then_recovers(check, timed):
    h = timed
    v, o = _steady(h, 0, 2, 0, 0)
    h.at(2.0).nemesis("start-partition", mode="isolate-leader")
    for i in range(50):  # 5 s of failing sends, none acknowledged
        h.at(2.05 + i * 0.1)
        h.send(0, v, outcome="fail", error="NOT_ENOUGH_REPLICAS")
        v += 1
    h.at(7.0).nemesis("stop-partition")
    h.at(7.3)
    h.add(0, "invoke", "send", key=0, value=v)
    h.at(7.5)
    h.add(0, "ok", "send", value=v, partition=0, offset=o)
    v, o = _steady(h, 7.6, 9, v + 1, o + 1)
    h.at(9.0).nemesis("heal")
    v, o = _steady(h, 9.2, 10, v, o)
    out = live(check, h)
    assert out["verdict"] == "ok"
    # Nothing was outstanding at the last acknowledgement before the fault (1.9 s): the
    # wait runs from the first send after it (2.05 s) to the first acknowledgement (7.5 s).
    assert out["producers"]["unavailable_s"] == pytest.approx(5.45, abs=0.01)
    assert out["producers"]["waits"] == [[pytest.approx(2.05, abs=0.01), 7.5, False]]
    [fault] = out["faults"]
    assert fault["fault"] == "start-partition" and fault["mode"] == "isolate-leader"
    assert fault["start"] == pytest.approx(2.0) and fault["end"] == pytest.approx(7.0, abs=0.01)
    assert fault["producer_unavailable_s"] == pytest.approx(5.45, abs=0.01)
    assert fault["recovery_s"] == pytest.approx(0.5, abs=0.01)
    # After the heal's completion (9.0 s) the first acknowledgement is at 9.2 s.
    assert out["recovery_s"] == pytest.approx(0.2, abs=0.01)
    assert out["by_partition"]["0"]["producer_unavailable_s"] == pytest.approx(5.45, abs=0.01)


def test_nothing_acknowledged_after_the_heal_is_a_hang_with_the_measured_unavailability(check, timed):
    h = timed
    v, o = _steady(h, 0, 2, 0, 0)
    h.at(2.0).nemesis("pause", mode="all")
    h.at(4.0).nemesis("resume")
    h.at(5.0).nemesis("heal")
    for i in range(45):  # sends keep timing out for 45 s after the heal
        h.at(5.5 + i)
        h.add(0, "invoke", "send", key=0, value=v + i)
        h.at(5.5 + i + 0.9)
        h.add(0, "info", "send", value=v + i, error="_MSG_TIMED_OUT")
    results = check(h, fault_ends=ENDS)
    out = results["liveness"]
    assert out["verdict"] == "hang" and results["valid"] is True  # valid stays about safety
    # The run fails on it, expected or not; the expectation is met.
    assert liveness_failed({"hang": "present"}, results)[0].startswith("HANG: nothing acknowledged for more than 30 s")
    assert expectation({"hang": "present"}, results) == (True, [])
    assert out["recovery_s"] is None
    assert out["unrecovered_s"] == pytest.approx(50.4 - 5.0, abs=0.01)
    # The wait never ended: open, from the first send after the last acknowledgement
    # (5.5 s; nothing was outstanding in between) to the workload's end.
    assert out["producers"]["waits"][-1] == [5.5, pytest.approx(50.4, abs=0.01), True]
    assert out["unavailable_s"] == pytest.approx(44.9, abs=0.01)
    assert out["consumers"]["unavailable_s"] == 0  # no consumer polled: none waited
    assert out["faults"][0]["recovery_s"] is None


def _healed_then_one_send_acked_at(h, t: float):
    """A steady second, the heal at 1 s, then one send at 1.1 s acknowledged at `t`."""
    v, o = _steady(h, 0, 1, 0, 0)
    h.at(1.0).nemesis("heal")
    h.at(1.1)
    h.add(0, "invoke", "send", key=0, value=v)
    h.at(t)
    h.add(0, "ok", "send", value=v, partition=0, offset=o)
    return h


def test_a_first_acknowledgement_later_than_the_limit_is_a_hang_too(check, timed):
    h = _healed_then_one_send_acked_at(timed, 36.0)
    out = live(check, h)
    assert out["verdict"] == "hang" and out["recovery_s"] == pytest.approx(35.0, abs=0.01)
    assert live(check, h, hang_s=40)["verdict"] == "ok"


def test_no_send_attempted_after_the_heal_is_no_hang_and_idle_time_is_not_unavailability(check, timed):
    h = timed
    _steady(h, 0, 1, 0, 0)
    h.at(20.0).nemesis("heal")  # 19 s with no send outstanding
    out = live(check, h)
    assert out["verdict"] == "ok" and out["recovery_s"] is None
    assert out["producers"]["unavailable_s"] < 0.2


@pytest.mark.parametrize("watched_s,hung", [(40, True), (12, False)])
def test_one_partition_that_never_recovers_is_a_hang_once_watched_long_enough(check, timed, watched_s, hung):
    """Partition 0 recovers at once after the heal; partition 1's sends (key 1) time
    out for as long as the history runs: a hang of partition 1 when that is longer
    than the limit, nothing concluded when the run stopped watching sooner."""
    h, v = timed, 0
    for i in range(20):  # both partitions acknowledged until the heal
        h.at(i * 0.1)
        h.send(0, v, 0, i, key=0)
        h.at(i * 0.1 + 0.05)
        h.send(0, v + 1, 1, i, key=1)
        v += 2
    h.at(2.0).nemesis("heal")
    for i in range(watched_s):  # then partition 0 each second, partition 1 never
        h.at(2.2 + i)
        h.send(0, v, 0, 20 + i, key=0)
        h.at(2.5 + i)
        h.add(0, "invoke", "send", key=1, value=v + 1)
        h.at(2.9 + i)
        h.add(0, "info", "send", value=v + 1, error="_MSG_TIMED_OUT")
        v += 2
    out = live(check, h)
    assert out["recovery_s"] == pytest.approx(0.2, abs=0.01)
    assert out["by_partition"]["1"]["recovery_s"] is None
    assert out["hung_partitions"] == ([1] if hung else [])
    assert out["verdict"] == ("hang" if hung else "ok")
    if hung:
        assert verdict_words(out).startswith("HANG: partition 1 acknowledged nothing for more than 30 s after the "
                                             "final heal, though the others recovered 0.2 s after it")


def test_unacknowledged_sends_are_attributed_to_a_partition_by_their_key(check, timed):
    h = timed
    v, o0, o1 = 0, 0, 0
    for i in range(20):  # key 1 -> partition 0, key 2 -> partition 1, both fine
        h.at(i * 0.1)
        h.send(0, v, 0, o0, key=1)
        h.send(1, v + 1, 1, o1, key=2)
        v, o0, o1 = v + 2, o0 + 1, o1 + 1
    for i in range(100):  # 10 s: partition 1's sends time out, partition 0's go on
        h.at(2 + i * 0.1)
        h.send(0, v, 0, o0, key=1)
        h.send(1, v + 1, outcome="info", key=2, error="REQUEST_TIMED_OUT")
        v, o0 = v + 2, o0 + 1
    h.at(12.05)
    h.send(1, v, 1, o1, key=2)
    out = live(check, h)
    assert out["by_partition"]["1"]["producer_unavailable_s"] == pytest.approx(10.1, abs=0.05)
    assert out["by_partition"]["0"]["producer_unavailable_s"] < 0.2
    assert out["producers"]["unavailable_s"] < 0.2  # partition 0 kept acknowledging
    assert out["unattributed_sends"] == 0


def test_consumers_wait_only_while_acknowledged_records_are_unread(check, timed):
    h = timed
    for i in range(5):
        h.at(i * 0.1)
        h.send(0, i, 0, i)
    h.at(0.5)
    h.poll(9, *[(0, i, i) for i in range(5)])  # everything read: no backlog
    for t in range(6):  # empty polls with nothing to read: not a wait
        h.at(1 + t)
        h.poll(9)
    h.at(7.0)
    h.send(0, 5, 0, 5)  # a backlog from 7.0 s
    for t in range(8):  # empty polls while it waits
        h.at(7.5 + t)
        h.poll(9)
    h.at(16.0)
    h.poll(9, (0, 5, 5))
    out = live(check, h)
    assert out["consumers"]["unavailable_s"] == pytest.approx(9.0, abs=0.01)
    assert out["consumers"]["waits"] == [[pytest.approx(7.0, abs=0.01), 16.0, False]]
    assert out["by_partition"]["0"]["consumer_unavailable_s"] == pytest.approx(9.0, abs=0.01)


def test_final_reads_do_not_end_a_consumer_wait(check, timed):
    h = timed
    h.send(0, 0, 0, 0)
    h.at(1.0).nemesis("heal")
    h.at(5.0)
    h.poll(9)  # an empty poll during the run
    h.final_reads(20, [0])
    h.poll(20, (0, 0, 0))
    h.final_reads_ok(20, {0: 1})
    out = live(check, h)
    assert out["consumer_recovery_s"] is None
    assert out["consumers"]["waits"][-1][2] is True  # open: never read during the run


def test_expect_limits_and_hang_judge_the_measured_values(check, timed):
    h = _healed_then_one_send_acked_at(timed, 13.1)
    results = check(h, fault_ends=ENDS)
    assert results["liveness"]["recovery_s"] == pytest.approx(12.1, abs=0.01)
    met, misses = expectation({"valid": True, "max-recovery-s": 10, "max-unavailable-s": 30, "hang": "absent"},
                              results)
    assert not met and misses == ["expected recovery at most 10 s, measured 12.1 s"]
    assert liveness_failed({"max-recovery-s": 10}, results) == misses
    assert expectation({"max-recovery-s": 15, "max-unavailable-s": 12.5}, results) == (True, [])
    assert expectation({"hang": "present"}, results)[1] == ["expected hang present, got absent (recovery 12.1 s)"]
    assert liveness_failed({}, results) == []  # no HANG, no limit: the run does not fail on liveness
    for bad in ({"max-recovery-s": "soon"}, {"max-unavailable-s": -1}, {"hang": True}):
        with pytest.raises(UserError, match="expect"):
            build({"expect": bad})


def test_a_history_read_in_small_batches_or_read_again_measures_the_same(tmp_path, monkeypatch):
    # The history is read a batch at a time (the driver never holds all of it):
    # batch edges must not change what the walk knows beforehand nor what it
    # measures, nor the pairing of completions with invocations that came
    # batches before; and a history too large to keep its chunks, read again
    # for the walk, measures as one whose chunks were kept.
    from checkers import liveness
    from checkers.folds import liveness as facts
    from checkers.history_read import HistoryRead
    from core.history.batches import file_tables
    from core.history.parquet import write_parquet
    from lab.synthetic import Plan, generate

    events = generate(Plan(events=5_000, seed=5, lost=1, dirty_reads=1)).events
    nemesis = [e for e in events if e["process"] == "nemesis"]
    measured = []
    for rows in (1_000_000, 333):
        path = tmp_path / f"history-{rows}.parquet"
        write_parquet(events, path, batch_rows=rows)
        read = HistoryRead()
        for table in file_tables(path):
            read.add(table)
        known = read.liveness.known()
        assert known.polls > 0 and known.end > 0 and len(known.keys) > 0 and known.final
        measured.append(liveness.measure(read.liveness.chunks(known), known, nemesis, ENDS))
        measured.append(liveness.measure(facts.chunks_again([path], known), known, nemesis, ENDS))
    assert all(m == measured[0] for m in measured[1:])
    assert measured[0]["producers"]["unavailable_s"] > 0 and measured[0]["consumers"]["unavailable_s"] > 0
    assert measured[0]["unattributed_sends"] < 5_000


def _random_chunks(rng):
    """A random stretch of sends and reads on a coarse clock (many events of
    one time), as one chunk, with the `Known` it implies."""
    import numpy as np

    from checkers import liveness
    from checkers.key_rows import distinct_pairs

    n, unit, parts = int(rng.integers(1, 300)), int(rng.choice([1, S // 2, S])), int(rng.integers(1, 5))
    inv_t = np.cumsum(rng.integers(0, 3, n)) * unit
    comp_t = np.sort(inv_t + rng.integers(0, 8, n) * unit)[rng.random(n) < 0.95]
    m = len(comp_t)
    inv_key, comp_key = rng.integers(-1, 8, n), rng.integers(-1, 8, m)
    ok = rng.random(m) < rng.random()
    written = np.where((rng.random(m) < 0.9) & (comp_key >= 0), comp_key % parts, rng.integers(0, parts, m))
    ack_p = np.where(ok, written, -1)
    reads = int(rng.integers(0, 150))
    read_t = np.sort(rng.integers(0, int(comp_t.max(initial=0)) // unit + 5, reads)) * unit
    known_pairs = ok & (comp_key >= 0)
    keys, key_parts = distinct_pairs(comp_key[known_pairs], ack_p[known_pairs]) if known_pairs.any() else (
        np.empty(0, np.int64),) * 2
    distinct, counts = np.unique(keys, return_counts=True)
    single = np.isin(keys, distinct[counts == 1])
    known = liveness.Known(end=int(read_t.max(initial=0)) + int(rng.integers(0, 5)) * unit, polls=reads,
                           keys=keys[single], key_partitions=key_parts[single])
    chunk = liveness.Chunk(inv_t, known.partitions_of(inv_key), comp_t, known.partitions_of(comp_key), ok, ack_p,
                           rng.integers(0, 50, m), read_t, rng.integers(-1, parts, reads), rng.integers(0, 50, reads))
    nemesis = []
    t = 0
    for f in rng.choice(["kill", "start", "pause", "resume", "heal"], int(rng.integers(0, 8))).tolist():
        t += int(rng.integers(0, 10)) * unit
        nemesis.append({"index": len(nemesis), "time": t, "type": "invoke", "f": f})
        t += int(rng.integers(0, 3)) * unit
        nemesis.append({"index": len(nemesis), "time": t, "type": "ok", "f": f})
    return chunk, known, nemesis


def _cut(chunk, rng):
    """`chunk` cut into pieces at random times, the events of a cut's time
    split between the pieces on either side at random."""
    import numpy as np

    from checkers.liveness import Chunk

    kinds = [("inv_time", "inv_partition"),
             ("comp_time", "comp_partition", "comp_ok", "ack_partition", "ack_offset"),
             ("read_time", "read_partition", "read_offset")]
    times = np.concatenate([getattr(chunk, k[0]) for k in kinds])
    cuts = sorted(set(rng.choice(times, min(len(times), int(rng.integers(1, 8)))).tolist())) if len(times) else []
    at = [0, 0, 0]
    for t in cuts + [None]:
        upto = []
        for kind, done in zip(kinds, at):
            column = getattr(chunk, kind[0])
            if t is None:
                upto.append(len(column))
            else:
                lo, hi = np.searchsorted(column, t, "left"), np.searchsorted(column, t, "right")
                upto.append(max(done, int(rng.integers(lo, hi + 1))))
        yield Chunk(**{name: getattr(chunk, name)[a:b] for kind, a, b in zip(kinds, at, upto) for name in kind})
        at = upto


def test_a_walk_cut_into_chunks_anywhere_measures_as_one_chunk():
    # The walk carries its state from chunk to chunk: cutting the history
    # anywhere, even between events of one time, changes nothing, whatever
    # the waits, faults, ties and partitions.
    import numpy as np

    from checkers import liveness

    seen = {"faults": 0, "hang": 0, "listed": 0, "consumer waits": 0}
    for seed in range(400):
        rng = np.random.default_rng(seed)
        chunk, known, nemesis = _random_chunks(rng)
        whole = liveness.measure([chunk], known, nemesis, ENDS)
        for _ in range(3):
            assert liveness.measure(_cut(chunk, rng), known, nemesis, ENDS) == whole, seed
        seen["faults"] += bool(whole["faults"])
        seen["hang"] += whole["verdict"] == "hang"
        seen["listed"] += bool(whole["producers"]["waits"])
        seen["consumer waits"] += (whole["consumers"]["unavailable_s"] or 0) > 0
    assert min(seen.values()) >= 10, seen  # the histories made every kind of result


def _txn(h: Timed, process, sends, start: float, end: float | None, outcome="ok") -> None:
    """A transaction invoked at `start` and completed at `end` (None: never):
    `sends` (key, value, partition, offset) each."""
    h.at(start)
    h.add(process, "invoke", "txn", sends=[{"key": k, "value": v} for k, v, _, _ in sends])
    if end is None:
        return
    h.at(end)
    h.add(process, outcome, "txn", records=[], **({"error": "ABORTED"} if outcome != "ok" else {}),
          sends=[{"key": k, "value": v, **({"partition": p, "offset": o} if outcome == "ok" else {})}
                 for k, v, p, o in sends])


def _transactional_run(h: Timed) -> Timed:
    """Only transactional producers: each transaction sends key 1 to partition
    0 and key 2 to partition 1. Steady until 2 s; then partition 1 stops: its
    transactions abort (fail) or never answer (info) for 5 s while a producer
    of key 1 alone goes on; the fault stops at 7.05 s, both commit again, and the heal at 9 s."""
    v, o = 0, 0
    for i in range(20):
        _txn(h, 0, [(1, v, 0, o), (2, v + 1, 1, o)], i * 0.1, i * 0.1 + 0.05)
        v, o = v + 2, o + 1
    h.at(2.0).nemesis("start-partition", mode="isolate-leader")
    o0 = o
    for i in range(50):  # process 0's transaction spans process 1's
        t, outcome = 2.05 + i * 0.1, "fail" if i % 2 else "info"
        h.at(t).add(0, "invoke", "txn", sends=[{"key": 1, "value": v}, {"key": 2, "value": v + 1}])
        _txn(h, 1, [(1, v + 2, 0, o0)], t + 0.01, t + 0.03)
        h.at(t + 0.05).add(0, outcome, "txn", sends=[{"key": 1, "value": v}, {"key": 2, "value": v + 1}],
                           records=[], error="ABORTED")
        v, o0 = v + 3, o0 + 1
    h.at(7.05).nemesis("stop-partition")
    _txn(h, 0, [(1, v, 0, o0), (2, v + 1, 1, o)], 7.3, 7.5)
    v, o0, o = v + 2, o0 + 1, o + 1
    for i in range(10):
        _txn(h, 0, [(1, v, 0, o0), (2, v + 1, 1, o)], 7.6 + i * 0.1, 7.65 + i * 0.1)
        v, o0, o = v + 2, o0 + 1, o + 1
    h.at(9.0).nemesis("heal")
    _txn(h, 0, [(1, v, 0, o0), (2, v + 1, 1, o)], 9.1, 9.2)
    return h


def test_transactions_sends_count_as_sends_for_liveness(check, timed):
    # The producers wait only where no transaction commits: overall, partition 0's
    # acknowledgements go on during the fault (the lone producer's, the last at 6.98 s,
    # when a transaction was outstanding: the longest wait, to 7.5 s); partition 1's
    # last acknowledgement is at 1.95 s, its next at 7.5 s, and between them its
    # sends (attributed by key 2) were outstanding or attempted from 2.05 s.
    out = live(check, _transactional_run(timed))
    assert out["verdict"] == "ok"
    assert out["producers"]["unavailable_s"] == pytest.approx(7.5 - 6.98, abs=0.01)
    assert out["by_partition"]["1"]["producer_unavailable_s"] == pytest.approx(7.5 - 2.05, abs=0.01)
    assert out["by_partition"]["0"]["producer_unavailable_s"] == pytest.approx(7.5 - 6.98, abs=0.01)
    [fault] = out["faults"]
    assert fault["producer_unavailable_s"] == pytest.approx(7.5 - 6.98, abs=0.01)
    assert fault["recovery_s"] == pytest.approx(0.45, abs=0.01)  # the fault ended at 7.05 s
    assert out["recovery_s"] == pytest.approx(0.2, abs=0.01)  # the commit at 9.2 s
    assert out["unattributed_sends"] == 0


def test_transactions_that_never_commit_after_the_heal_are_a_hang(check, timed):
    # The producers' only sends are transactional; after the heal every transaction
    # aborts, times out or never answers.
    h, v = timed, 0
    for i in range(10):
        _txn(h, 0, [(1, v, 0, i), (2, v + 1, 1, i)], i * 0.1, i * 0.1 + 0.05)
        v += 2
    h.at(1.0).nemesis("heal")
    for i in range(40):
        _txn(h, 0, [(1, v, None, None), (2, v + 1, None, None)], 1.5 + i, 2.3 + i,
             outcome=("fail", "info")[i % 2])
        v += 2
    _txn(h, 0, [(1, v, None, None)], 41.5, None)
    out = live(check, h)
    assert out["verdict"] == "hang" and out["recovery_s"] is None
    assert out["producers"]["waits"][-1] == [1.5, pytest.approx(41.5, abs=0.01), True]
    assert out["hung_partitions"] == [0, 1]


def test_a_read_only_transaction_sends_nothing(check, timed):
    # A transaction with no sends invokes no send: nothing to wait for, no hang.
    h = timed
    _steady(h, 0, 1, 0, 0)
    h.at(1.0).nemesis("heal")
    for i in range(40):
        _txn(h, 3, [], 2 + i, None if i == 39 else 2.5 + i, outcome="info")
    out = live(check, h)
    assert out["verdict"] == "ok" and out["producers"]["unavailable_s"] < 0.2


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 1_000_000])
def test_transactions_cut_into_batches_anywhere_measure_the_same(tmp_path, rows):
    # A transaction's invocation and completion in different batches, plain sends and
    # transactions in one batch: the walk measures the same, from the first read's
    # chunks and from a second read of the history.
    from checkers import liveness
    from checkers.folds import liveness as facts
    from checkers.history_read import HistoryRead
    from core.history.batches import file_tables
    from core.history.parquet import write_parquet

    h = _transactional_run(Timed())
    h.at(9.3)
    h.send(2, 10_000, 0, 500, key=1)  # a plain send among them
    # A read_committed poll ends the consumers' wait, a read_uncommitted one
    # does not (its column must be read again too).
    h.at(9.5).add(6, "invoke", "poll", isolation="read_uncommitted")
    h.add(6, "ok", "poll", isolation="read_uncommitted",
          records=[{"partition": 0, "offset": 0, "key": 1, "value": 0}])
    h.at(9.9).poll(5, (0, 0, 0))
    path = tmp_path / "history.parquet"
    write_parquet(h.events, path, batch_rows=rows)
    read = HistoryRead()
    for table in file_tables(path):
        read.add(table)
    known = read.liveness.known()
    nemesis = [e for e in h.events if e["process"] == "nemesis"]
    first = liveness.measure(read.liveness.chunks(known), known, nemesis, ENDS)
    assert liveness.measure(facts.chunks_again([path], known), known, nemesis, ENDS) == first
    assert first["by_partition"]["1"]["producer_unavailable_s"] == pytest.approx(7.5 - 2.05, abs=0.01)
    assert first["recovery_s"] == pytest.approx(0.2, abs=0.01)
    assert first["consumers"]["unavailable_s"] == pytest.approx(9.9 - 0.05, abs=0.01)
