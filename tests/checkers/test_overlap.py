"""Overlapping faults in a history: every reader of nemesis events pairs a stop
with the start of the same fault, not with the last start.

One hand-made nemesis sequence in which faults cross (a partition, then a
pause, then the partition's stop while the pause is in force), an await event
between them (no fault), and a heal that stops what is left, the last started
first. Pairing each stop with the last start, as a one-fault-at-a-time reader
may, would end the pause at the partition's stop and leave the partition open:
each test below says the right intervals, so each fails on that pairing.
"""

from __future__ import annotations

from checkers.explain import explain_run
from checkers.registry import STORIES
from core.history.faults import fault_intervals
from core.history.files import resolve
from harness.campaign import shrink
from harness.run import evidence
from nemesis.registry import FAULT_ENDS
from nemesis.registry import BY_START_ACTION

ENDS = {a: f.stop_action for a, f in BY_START_ACTION.items()}
S = 1_000_000_000


def _ev(index, t, type_, f, **value):
    return {"index": index, "time": round(t * S), "process": "nemesis", "type": type_, "f": f, "value": value}


def nemesis_events(first_index: int = 0) -> list[dict]:
    """partition 1.0-3.1 s; pause 2.0-4.1 s (crossing it); an await at 3.5 s; kill 5.0 s and a
    partition 5.5 s, both ended by the heal: stop-partition 6.0, start (the kill's end) 6.5, heal 7.0."""
    rows = [(1.0, "invoke", "start-partition"), (1.1, "ok", "start-partition"),
            (2.0, "invoke", "pause"), (2.1, "ok", "pause"),
            (3.0, "invoke", "stop-partition"), (3.1, "ok", "stop-partition"),
            (3.5, "invoke", "await"), (3.6, "ok", "await"),
            (4.0, "invoke", "resume"), (4.1, "ok", "resume"),
            (5.0, "invoke", "kill"), (5.1, "ok", "kill"),
            (5.5, "invoke", "start-partition"), (5.6, "ok", "start-partition"),
            (6.0, "invoke", "stop-partition"), (6.1, "ok", "stop-partition"),
            (6.5, "invoke", "start"), (6.6, "ok", "start"),
            (7.0, "invoke", "heal"), (7.1, "ok", "heal")]
    return [_ev(first_index + i, t, type_, f) for i, (t, type_, f) in enumerate(rows)]


def test_the_registry_pairs_every_stop_with_its_own_start():
    assert FAULT_ENDS == ENDS and ENDS["start-partition"] == "stop-partition" and ENDS["pause"] == "resume"


def test_the_one_rule_pairs_each_stop_with_its_own_fault():
    found = fault_intervals(nemesis_events(), ENDS)
    got = [(i["f"], i["start"] / S, i["end"] / S) for i in found.intervals]
    # From the start's invocation to the completion of what ended it.
    assert got == [("start-partition", 1.0, 3.1), ("pause", 2.0, 4.1), ("kill", 5.0, 6.6),
                   ("start-partition", 5.5, 6.1)]
    assert found.final_heal == int(7.1 * S)
    # A fault never ended lasts to the end given, else to the nemesis's last event.
    open_ = nemesis_events()[:2]
    assert [i["end"] for i in fault_intervals(open_, ENDS, 10 * S).intervals] == [10 * S]
    assert [i["end"] for i in fault_intervals(open_, ENDS).intervals] == [int(1.1 * S)]


def test_report_fault_intervals_pair_each_stop_with_its_own_fault():
    got = [(i["f"], i["start"] / S, i["end"] / S) for i in evidence.fault_intervals(nemesis_events(), 10 * S)]
    # The report's shading is the one rule's.
    assert got == [("start-partition", 1.0, 3.1), ("pause", 2.0, 4.1), ("kill", 5.0, 6.6),
                   ("start-partition", 5.5, 6.1)]


def test_shrink_drops_a_fault_with_its_own_stop():
    schedule = [{"delay": 1.0, "action": "start", "fault": "partition", "mode": "isolate-one", "picks": [0, 1, 2]},
                {"delay": 1.0, "action": "start", "fault": "pause", "mode": "one", "picks": [1]},
                {"delay": 1.0, "action": "stop", "fault": "partition"},
                {"delay": 0.5, "action": "await", "until": "isr-full", "partition": 0, "timeout": 5.0},
                {"delay": 0.5, "action": "stop", "fault": "pause"}]
    assert shrink.pairs(schedule) == [[0, 2], [1, 4]]
    kept = shrink.without(schedule, {0, 2})  # the partition dropped: the pause, the await and their times stay
    assert [(s["action"], s.get("fault"), s["delay"]) for s in kept] == [
        ("start", "pause", 2.0), ("await", None, 1.5), ("stop", "pause", 0.5)]
    # Halving: each fault keeps its start and lasts half as long (at least 1 s); steps re-ordered by time.
    halved = shrink.halved(schedule, shrink.pairs(schedule))
    t, at = 0.0, []
    for s in halved:
        t += s["delay"]
        at.append((round(t, 3), s["action"], s.get("fault")))
    assert at == [(1.0, "start", "partition"), (2.0, "start", "pause"), (2.0, "stop", "partition"),
                  (3.0, "stop", "pause"), (3.5, "await", None)]


def test_the_whole_checker_measures_overlapping_faults_and_the_stories_name_both(hist, check, tmp_path):
    """Through Spark: liveness per fault (with the faults in force beside it) and a story's
    faults in force while a record was lost."""
    hist.send(1, 10, 0, 0)                        # 0, 1: acknowledged at 0:0
    hist.poll(2, (0, 0, 10))                      # 2, 3: read
    for e in nemesis_events(first_index=4):
        hist.events.append(e)                     # 4..23
    hist.send(1, 20, 0, 0)                        # 24, 25: another value at 0:0 (10 was lost)
    hist.final_reads(3, [0])
    hist.poll(3, (0, 0, 20))
    hist.final_reads_ok(3, {0: 1})
    for e in hist.events:                         # times: client events before and after the faults
        if e["process"] != "nemesis":
            e["time"] = round((0.1 * (e["index"] + 1) if e["index"] < 4 else 8.0 + 0.1 * e["index"]) * S)
    results = check(hist, fault_ends=ENDS)
    assert results["counts_by_anomaly"]["lost-acked"] == 1
    rows = [(f["fault"], f["start"], f["end"], f["overlapping"]) for f in results["liveness"]["faults"]]
    assert rows == [("start-partition", 1.0, 3.1, ["pause"]), ("pause", 2.0, 4.1, ["start-partition"]),
                    ("kill", 5.0, 6.6, ["start-partition"]), ("start-partition", 5.5, 6.1, ["kill"])]
    assert results["liveness"]["heal"] == 7.1
    [story] = [s for s in explain_run(resolve(tmp_path), results, STORIES, ENDS) if s["anomaly"] == "lost-acked"]
    faults = [s["text"] for s in story["steps"] if s["text"].startswith("fault ")]
    assert "fault start-partition from 1.0 s to 3.1 s" in faults and "fault pause from 2.0 s to 4.1 s" in faults
