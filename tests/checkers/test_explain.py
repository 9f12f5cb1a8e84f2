"""Stories per anomaly (checkers.explain): hand-made histories checked by the real
checker, with hand-made states.jsonl lines and disk dumps, told in exact sentences."""

from __future__ import annotations

import gzip
import json

from checkers.explain import evidence_run, explain, explain_run, load_disk, load_states, scan, wanted
from checkers.registry import STORIES
from core.history.files import resolve
from core.history.parquet import write_parquet
from harness.pages.stories import on_disk_html, stories_html, story_indexes
from harness.run.explanations import add_explanations
from nemesis.registry import BY_START_ACTION

ENDS = {a: f.stop_action for a, f in BY_START_ACTION.items()}
S = 1_000_000_000


def _tenths(hist) -> None:
    """Event i happens at i/10 s: stories read in whole tenths."""
    for e in hist.events:
        e["time"] = e["index"] * S // 10


def _states(path, lines) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _disk(folder, rows: dict) -> None:
    folder.mkdir()
    for node, rs in rows.items():
        with gzip.open(folder / f"{node}.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(r) + "\n" for r in rs)


def _lost_history(hist):
    hist.send(1, 10, 0, 0)                                  # 0, 1
    hist.poll(2, (0, 0, 10))                                # 2, 3
    hist.add("nemesis", "invoke", "start-partition", value={"mode": "isolate-one"})  # 4
    hist.add("nemesis", "ok", "start-partition", value={"grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}})
    hist.send(1, 20, 0, 0)                                  # 6, 7
    hist.add("nemesis", "invoke", "stop-partition", value={"grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}})
    hist.add("nemesis", "ok", "stop-partition", value={})   # 9
    hist.final_reads(3, [0])                                # 10
    hist.poll(3, (0, 0, 20))                                # 11, 12
    hist.final_reads_ok(3, {0: 1})                          # 13
    _tenths(hist)


STATES = [
    {"time": 0, "kind": "partition", "partition": 0, "leader": "n1", "epoch": 0, "isr": ["n1", "n2", "n3"], "hw": 0},
    {"time": 0, "kind": "controller", "node": "n1"},
    {"time": 2 * S // 10, "kind": "partition", "partition": 0, "leader": "n1", "epoch": 0,
     "isr": ["n1", "n2", "n3"], "hw": 1},
    {"time": 5 * S // 10, "kind": "partition", "partition": 0, "leader": "n2", "epoch": 1, "isr": ["n2", "n3"],
     "hw": 0},
    {"time": 5 * S // 10, "kind": "node", "node": "n1", "alive": True, "reachable": False},
    {"time": 9 * S // 10, "kind": "truncation", "node": "n1", "partition": 0, "offset": 0, "log_end": 1,
     "epoch": 1, "leader": "n2", "reason": "leader epoch"},
]
DISK = {"n1": [[0, 0, 1, 0, 20]], "n2": [[0, 0, 1, 0, 20]], "n3": []}


def _by(stories, name):
    return [s for s in stories if s["anomaly"] == name]


def test_lost_acked_story_names_the_truncation_the_replacement_and_the_disks(hist, check, tmp_path):
    _lost_history(hist)
    results = check(hist)
    assert results["counts_by_anomaly"]["lost-acked"] == 1
    _states(tmp_path / "states.jsonl", STATES)
    _disk(tmp_path / "disk", DISK)
    stories = explain_run(resolve(tmp_path), results, STORIES, ENDS)
    [story] = _by(stories, "lost-acked")
    assert story["summary"] == ("10, acknowledged at 0:0 by n1 (epoch 0) at 0.1 s and read at 0.3 s, is not in "
                                "the topic at the end: n1 truncated partition 0 to 0 at 0.9 s following n2 "
                                "(epoch 1); 20 took offset 0.")
    assert [(s["time"], s["text"], s.get("event"), s.get("state"), s.get("disk")) for s in story["steps"]] == [
        (0.0, "10 sent by process 1 at 0.0 s (leader n1, epoch 0)", 0, None, None),
        (0.1, "acknowledged at 0:0 by n1 (epoch 0, ISR n1,n2,n3) at 0.1 s", 1, None, None),
        (0.2, "committed: the HW of partition 0 was 1 at 0.2 s (leader n1)", None, 3, None),
        (0.3, "read at 0:0 by process 2 at 0.3 s, from n1 (epoch 0)", 3, None, None),
        (0.4, "fault start-partition n1 | n2 n3 from 0.4 s to 0.9 s", 4, None, None),
        (0.5, "n2 (epoch 1, ISR n2,n3) leads partition 0 from 0.5 s", None, 4, None),
        (0.7, "20 written at 0:0 by n2 (epoch 1) at 0.7 s", 7, None, None),
        (0.9, "n1 truncated 0:0.. at 0.9 s (log end 1), following n2 (epoch 1): leader epoch", None, 6, None),
        (1.0, "the final reads of partition 0 (to offset 1) do not hold it", None, None, None),
        (None, "at the end n1 and n2 hold 20 at 0 (epoch 1); n3 has nothing at 0 (log end 0)", None, None, "n1"),
        (None, "no replica holds 10 on disk", None, None, "all"),
    ]
    [other] = _by(stories, "inconsistent-offset")
    assert other["summary"] == ("partition 0 offset 0 held 10 and 20: n1 truncated it at 0.9 s following n2 "
                                "(epoch 1).")
    assert [s["text"] for s in other["steps"]][:2] == ["10 written at 0:0 by n1 (epoch 0) at 0.1 s",
                                                      "fault start-partition n1 | n2 n3 from 0.4 s to 0.9 s"]


def test_a_bare_history_still_gets_its_stories(hist, check, tmp_path):
    _lost_history(hist)
    results = check(hist)
    stories = explain(resolve(tmp_path), results, STORIES, fault_ends=ENDS)
    [story] = _by(stories, "lost-acked")
    assert story["summary"] == "10, acknowledged at 0:0 at 0.1 s and read at 0.3 s, is not in the topic at the end: 20 took offset 0."
    assert [s["text"] for s in story["steps"]] == [
        "10 sent by process 1 at 0.0 s", "acknowledged at 0:0 at 0.1 s", "read at 0:0 by process 2 at 0.3 s",
        "fault start-partition n1 | n2 n3 from 0.4 s to 0.9 s", "20 written at 0:0 at 0.7 s",
        "the final reads of partition 0 (to offset 1) do not hold it"]
    # The report's section links every step to its event and escapes what it shows.
    results["explanations"] = stories
    html = stories_html(results)
    assert "<a href='#e7'>event 7</a>" in html and story_indexes(results) >= {0, 1, 3, 4, 7}


def test_dirty_read_story(hist, check, tmp_path):
    hist.send(1, 10, outcome="info", error="_MSG_TIMED_OUT")   # 0, 1
    hist.poll(2, (0, 0, 10))                                    # 2, 3
    hist.send(1, 20, 0, 0)                                      # 4, 5
    hist.final_reads(3, [0])
    hist.poll(3, (0, 0, 20))
    hist.final_reads_ok(3, {0: 1})
    _tenths(hist)
    results = check(hist)
    _states(tmp_path / "states.jsonl", [
        {"time": 0, "kind": "partition", "partition": 0, "leader": "n3", "epoch": 2, "isr": ["n3"], "hw": 0},
        {"time": 4 * S // 10, "kind": "partition", "partition": 0, "leader": "n1", "epoch": 3, "isr": ["n1"],
         "hw": 0},
        {"time": 4 * S // 10, "kind": "truncation", "node": "n3", "partition": 0, "offset": 0, "log_end": 1,
         "epoch": 3, "leader": "n1", "reason": "leader epoch"}])
    _disk(tmp_path / "disk", {"n1": [[0, 0, 3, 0, 20]], "n3": [[0, 0, 3, 0, 20]]})
    [story] = _by(explain_run(resolve(tmp_path), results, STORIES, ENDS), "dirty-read")
    assert story["summary"] == ("10 was read at 0:0 from n3 (epoch 2) at 0.3 s, its send's outcome unknown (info), "
                                "and the topic did not keep it: n3 truncated partition 0 to 0 at 0.4 s; "
                                "20 took offset 0.")
    assert [s["text"] for s in story["steps"]] == [
        "10 sent by process 1 at 0.0 s (leader n3, epoch 2)",
        "its send ended info (_MSG_TIMED_OUT) at 0.1 s",
        "read at 0:0 by process 2 at 0.3 s, from n3 (epoch 2)",
        "n1 (epoch 3, ISR n1) leads partition 0 from 0.4 s",
        "n3 truncated 0:0.. at 0.4 s (log end 1), following n1 (epoch 3): leader epoch",
        "20 written at 0:0 by n1 (epoch 3) at 0.5 s",
        "at the end n1 and n3 hold 20 at 0 (epoch 3)",
        "no replica holds 10 on disk"]


def test_duplicate_and_poll_skip_stories(hist, check, tmp_path):
    hist.send(1, 10, 0, 1)                      # 0, 1: acknowledged at 0:1
    hist.poll(2, (0, 0, 10))                    # 2, 3: but read at 0:0 too
    hist.poll(2, (0, 1, 10), (0, 3, 30))        # 4, 5: 0:2 skipped
    hist.send(1, 25, 0, 2)                      # 6, 7: known at 0:2
    _tenths(hist)
    results = check(hist)
    _disk(tmp_path / "disk", {"n1": [[0, 0, 0, None, 10], [0, 1, 0, None, 10], [0, 2, 0, None, 25]]})
    stories = explain_run(resolve(tmp_path), results, STORIES, ENDS)
    [dup] = _by(stories, "duplicate")
    assert dup["summary"] == "10 is at 2 positions, 0:0, 0:1 (sent once, acknowledged at 0:1 at 0.1 s)."
    assert [s["text"] for s in dup["steps"]] == [
        "10 sent by process 1 at 0.0 s", "acknowledged at 0:1 at 0.1 s", "read at 0:0 by process 2 at 0.3 s",
        "read at 0:1 by process 2 at 0.5 s", "at the end n1 holds 10 at 0 (epoch 0)",
        "at the end n1 holds 10 at 1 (epoch 0)"]
    [skip] = _by(stories, "poll-skip")
    assert skip["summary"] == "process 2 read 0:3 right after 0:1 at 0.5 s, skipping offset 2, which holds 25."
    assert [s["text"] for s in skip["steps"]] == [
        "process 2 read 10 at 0:1 at 0.5 s", "process 2 read 30 at 0:3 at 0.5 s",
        "25 written at 0:2 (epoch 0) at 0.7 s", "at the end n1 holds 25 at 2 (epoch 0)"]


def test_add_explanations_never_fails_the_check(tmp_path):
    results = {"anomalies": {"lost-acked": {"count": 1, "examples": [{"value": 1, "partition": 0, "offset": 0}]}}}
    add_explanations(results, tmp_path / "missing")
    assert results["explanations"] == []


def test_loading_states_and_disk_keeps_only_what_the_stories_need(tmp_path):
    (tmp_path / "states.jsonl").write_text('{"time": 5, "kind": "phase", "phase": "end"}\nnot json\n[1]\n'
                                           '{"time": 1, "kind": "controller", "node": null}\n')
    assert load_states(tmp_path / "states.jsonl") == [{"time": 5, "kind": "phase", "phase": "end", "line": 1},
                                                      {"time": 1, "kind": "controller", "node": None, "line": 4}]
    assert load_states(tmp_path / "nope.jsonl") is None
    _disk(tmp_path / "disk", {"n1": [[0, 0, 0, 1, 10], [0, 1, 0, 1, 11], [1, 0, 2, None, "text"]]})
    _, values, positions, _ = wanted({"anomalies": {"lost-acked": {"examples": [
        {"value": 11, "partition": 1, "offset": 0, "invoke_index": 0, "ack_index": 1}]}}}, STORIES)
    disk = load_disk(tmp_path, values, positions)
    assert disk.at == {"n1": {1 << 40: (2, "text")}} and disk.where == {"n1": {11: [(0, 1, 0)]}}
    assert disk.ends == {"n1": {0: 2, 1: 1}}
    assert load_disk(tmp_path / "none", values, positions) is None


def test_story_html_escapes_every_field():
    evil = "<script>x</script>"
    results = {"explanations": [{"anomaly": evil, "summary": evil, "steps": [
        {"time": 1.0, "text": evil, "event": 3}, {"time": None, "text": evil, "disk": "<n1>"},
        {"time": 2.0, "text": evil, "state": 7}]}]}
    html = stories_html(results)
    assert "<script>" not in html and html.count("&lt;script&gt;") == 5
    assert "disk/&lt;n1&gt;.jsonl.gz" in html and "states.jsonl line 7" in html


def test_a_fact_two_values_share_is_told_once(hist, check, tmp_path):
    # A pipelined producer's sends acknowledged out of order; one HW line commits both.
    hist.add(1, "invoke", "send", key=0, value=10)               # 0
    hist.add(1, "invoke", "send", key=0, value=11)               # 1
    hist.add(1, "ok", "send", key=0, value=11, partition=0, offset=0)  # 2
    hist.add(1, "ok", "send", key=0, value=10, partition=0, offset=1)  # 3
    hist.poll(2, (0, 0, 11), (0, 1, 10))                         # 4, 5
    _tenths(hist)
    results = check(hist)
    assert results["counts_by_anomaly"]["nonmonotonic-send"] == 1
    _states(tmp_path / "states.jsonl", [
        {"time": 0, "kind": "partition", "partition": 0, "leader": "n1", "epoch": 0, "isr": ["n1", "n2"], "hw": 0},
        {"time": 4 * S // 10, "kind": "partition", "partition": 0, "leader": "n1", "epoch": 0,
         "isr": ["n1", "n2"], "hw": 2}])
    [story] = _by(explain_run(resolve(tmp_path), results, STORIES, ENDS), "nonmonotonic-send")
    texts = [s["text"] for s in story["steps"]]
    assert texts.count("committed: the HW of partition 0 was 2 at 0.4 s (leader n1)") == 1, texts


def test_missing_records_are_looked_up_on_every_replicas_disk(hist, check, tmp_path):
    _lost_history(hist)
    results = check(hist)
    assert results["missing"] == {"lost-acked": [[10, 0, 0]]}  # [value, partition, offset acknowledged]
    for name in ("gone", "kept", "bare"):
        (tmp_path / name).mkdir()
        hist.write(tmp_path / name)
    _disk(tmp_path / "gone" / "disk", DISK)  # no replica holds 10
    gone = evidence_run(resolve(tmp_path / "gone"), results, STORIES, ENDS)
    assert gone["on_disk"] == {"lost-acked": {"checked": 1, "on_no_disk": 1, "on_disk": 0,
                                              "nodes": ["n1", "n2", "n3"], "examples": []}}
    _disk(tmp_path / "kept" / "disk", {**DISK, "n3": [[0, 1, 0, 0, 10]]})  # n3 still has it, elsewhere
    kept = evidence_run(resolve(tmp_path / "kept"), results, STORIES, ENDS)
    assert kept["on_disk"]["lost-acked"] == {
        "checked": 1, "on_no_disk": 0, "on_disk": 1, "nodes": ["n1", "n2", "n3"],
        "examples": [{"value": 10, "partition": 0, "offset": 0,
                      "on": [{"node": "n3", "partition": 0, "offset": 1, "epoch": 0}]}]}
    assert on_disk_html({**results, **kept}, "lost-acked") == (
        "<p>On disk at the end: of 1 lost-acked records, 0 are on no replica&#x27;s disk (lost from the log) "
        "and 1 are still on a replica (the log has them; reads missed them), e.g. 10 on n3 at 0:1.</p>")
    # Without dumps there is nothing to say, and the stories stand alone.
    assert "on_disk" not in evidence_run(resolve(tmp_path / "bare"), results, STORIES, ENDS)


def test_a_history_in_parts_is_scanned_part_by_part_with_the_same_facts(hist, tmp_path):
    # `scan` reads a Parquet history's files each in a thread of its own: a
    # read whose poll was invoked in an earlier file gets that invocation's
    # time all the same, and the facts are those of one file read in order.
    hist.send(1, 10, 0, 0)                      # 0, 1
    hist.send(1, 11, 0, 1)                      # 2, 3
    hist.add(2, "invoke", "poll")               # 4: invoked here ...
    hist.add(1, "invoke", "send", key=0, value=12)  # 5
    hist.add(2, "ok", "poll", records=[{"partition": 0, "offset": 0, "key": 0, "value": 10},
                                       {"partition": 0, "offset": 1, "key": 0, "value": 11}])  # 6: ... read here
    hist.add(1, "ok", "send", value=12, partition=0, offset=2)  # 7
    hist.poll(2, (0, 2, 12))                    # 8, 9
    hist.final_reads(3, [0])                    # 10
    hist.poll(3, (0, 0, 10), (0, 1, 11), (0, 2, 12))  # 11, 12
    hist.final_reads_ok(3, {0: 3})              # 13
    _tenths(hist)
    wanted = ({1, 6, 9}, {10, 11, 12}, {1})  # indexes, values, positions (0:1)
    whole = tmp_path / "whole.parquet"
    write_parquet(iter(hist.events), whole)
    expected = scan(resolve(whole), *wanted)
    assert [r.invoked for r in expected.reads[10]] == [4 * S // 10, 11 * S // 10]
    for cuts in ([5], [6], [3, 6, 12], list(range(1, len(hist.events)))):
        folder = tmp_path / f"parts-{'-'.join(map(str, cuts))}"
        folder.mkdir()
        for n, (a, b) in enumerate(zip([0] + cuts, cuts + [len(hist.events)])):
            write_parquet(iter(hist.events[a:b]), folder / f"part-{n:05d}.parquet")
        assert len(resolve(folder).files) == len(cuts) + 1
        assert scan(resolve(folder), *wanted) == expected, cuts


def test_consumer_loss_story_names_the_kill_the_commit_and_the_successor(hist, check, tmp_path):
    for o, v in enumerate(range(10, 14)):
        hist.send(0, v, 0, o)                                             # 0..7
    hist.assign(4, [0], group="g1", generation=1)                         # 8, 9
    hist.committed(4, "g1", {0: -1})                                      # 10, 11
    hist.poll(4, (0, 0, 10), (0, 1, 11), (0, 2, 12), (0, 3, 13))          # 12, 13
    hist.process(4, (0, 0, 10))                                           # 14, 15
    hist.commit(4, "g1", {0: 4})                                          # 16, 17: the library's
    hist.add("nemesis", "invoke", "kill", value={"mode": "consumers"})    # 18
    hist.add("nemesis", "ok", "kill", value={"clients": [4], "group": "g1", "os_pid": 99,
                                             "verified": {"ok": True, "process_gone": {"4": True}}})
    hist.process(4, (0, 1, 11), outcome=None)                             # 20
    hist.add(4, "info", "process", error="SIGKILL")                       # 21
    hist.crash(4)                                                         # 22, 23
    hist.add("nemesis", "invoke", "start", value={})                      # 24
    hist.add("nemesis", "ok", "start", value={"clients": [5], "group": "g1", "verified": {"ok": True}})
    hist.assign(5, [0], group="g1", generation=2)                         # 26, 27
    hist.committed(5, "g1", {0: 4})                                       # 28, 29
    hist.final_reads(20, [0])                                             # 30
    hist.poll(20, (0, 0, 10), (0, 1, 11), (0, 2, 12), (0, 3, 13))         # 31, 32
    hist.final_reads_ok(20, {0: 4})                                       # 33
    hist.committed(21, "g1", {0: 4}, final=True)                          # 34, 35
    _tenths(hist)
    results = check(hist)
    stories = _by(explain_run(resolve(tmp_path), results, STORIES, ENDS), "consumer-loss")
    # 11's step was cut (info: maybe handled); 12 and 13 were never begun.
    assert [s["value"] for s in stories] == [12, 13]
    assert stories[0]["summary"] == (
        "12 at 0:2 was delivered to process 4 at 1.3 s, committed past by it at 1.7 s, and process 4 was killed "
        "at 1.8 s before handling it, process 5 took partition 0 at 2.7 s from offset 4; never handled by group "
        "g1, which committed past it (to offset 4).")
    texts = [s["text"] for s in stories[0]["steps"]]
    assert texts[texts.index("delivered at 0:2 by process 4 at 1.3 s"):] == [
        "delivered at 0:2 by process 4 at 1.3 s",
        "process 4 committed partition 0 to offset 4, past 2, at 1.7 s",
        "fault kill (consumers) from 1.8 s to 2.5 s",
        "the nemesis's kill hit process 4 at 1.8 s",
        "process 4 ended (SIGKILL) at 2.2 s, before handling 2",
        "process 5 took partition 0 at 2.7 s from offset 4",
        "group g1's final committed offset of partition 0 is 4: past 2, which no member of it handled",
        "the final reads found it at 0:2 at 3.2 s"]


def test_lost_commit_story_names_the_commit_the_moves_between_and_the_read(hist, check, tmp_path):
    for o, v in enumerate(range(10, 13)):
        hist.send(0, v, 0, o)                                             # 0..5
    hist.assign(4, [0], group="g1", generation=3)                         # 6, 7
    hist.commit(4, "g1", {0: 3})                                          # 8, 9
    hist.add("nemesis", "invoke", "kill", value={"mode": "group-coordinator"})  # 10
    hist.add("nemesis", "ok", "kill", value={"nodes": ["n2"], "coordinator_of": "g1"})
    hist.crash(4)                                                         # 12, 13
    hist.assign(5, [0], group="g1", generation=1)                         # 14, 15
    hist.committed(5, "g1", {0: -1})                                      # 16, 17: the new coordinator knows none
    hist.add("nemesis", "invoke", "start", value={})                      # 18
    hist.add("nemesis", "ok", "start", value={"nodes": ["n2"]})
    hist.final_reads(20, [0])                                             # 20
    hist.poll(20, (0, 0, 10), (0, 1, 11), (0, 2, 12))                     # 21, 22
    hist.final_reads_ok(20, {0: 3})                                       # 23
    _tenths(hist)
    results = check(hist)
    assert results["anomalies"]["lost-commit"]["count"] == 1
    [story] = _by(explain_run(resolve(tmp_path), results, STORIES, ENDS), "lost-commit")
    assert story["summary"] == (
        "group g1's commit of partition 0 to 3, acknowledged at 0.9 s (process 4), was read back as none at 1.7 s "
        "(process 5), with no lower commit between; meanwhile 1 fault and 1 rebalance of that partition.")
    assert [s["text"] for s in story["steps"]] == [
        "process 4 committed partition 0 of group g1 to offset 3: acknowledged at 0.9 s",
        "fault kill on n2, the coordinator of group g1 from 1.0 s to 1.9 s",
        "process 4 ended at 1.3 s",
        "process 5 was given partition 0 at 1.5 s (generation 1)",
        "process 5 read group g1's committed offset of partition 0 at 1.7 s: none"]


def test_lost_commit_story_names_a_commit_of_the_offset_read_whose_outcome_was_unknown(hist, check, tmp_path):
    # Issue 50's run: a commit timed out in the client, a later one was acknowledged,
    # and the group's offset read back was the timed-out one's.
    for o, v in enumerate(range(10, 16)):
        hist.send(0, v, 0, o)                                             # 0..11
    hist.assign(4, [0], group="g1", generation=3)                         # 12, 13
    hist.commit(4, "g1", {0: 1}, outcome="info")                          # 14, 15: unknown, not the offset read
    unknown = [{"partition": 0, "offset": 2}]
    hist.add(4, "invoke", "commit", group="g1", offsets=unknown)          # 16
    hist.add(4, "info", "commit", group="g1", offsets=unknown, error="_TIMED_OUT")  # 17
    hist.commit(4, "g1", {0: 4})                                          # 18, 19
    hist.assign(5, [0], group="g1", generation=4)                         # 20, 21
    hist.committed(5, "g1", {0: 2})                                       # 22, 23
    _tenths(hist)
    results = check(hist)
    assert results["anomalies"]["lost-commit"]["count"] == 1
    [story] = _by(explain_run(resolve(tmp_path), results, STORIES, ENDS), "lost-commit")
    assert story["summary"] == (
        "group g1's commit of partition 0 to 4, acknowledged at 1.9 s (process 4), was read back as 2 at 2.3 s "
        "(process 5), with no lower commit between; meanwhile 0 faults and 1 rebalance of that partition; the "
        "offset read is that of process 4's commit invoked at 1.6 s, whose outcome was unknown: a broker may still "
        "apply such a commit, after a later one.")
    assert [s["text"] for s in story["steps"]] == [
        "process 4's commit of partition 0 to offset 2, invoked at 1.6 s, ended unknown at 1.7 s (_TIMED_OUT)",
        "process 4 committed partition 0 of group g1 to offset 4: acknowledged at 1.9 s",
        "process 5 was given partition 0 at 2.1 s (generation 4)",
        "process 5 read group g1's committed offset of partition 0 at 2.3 s: 2"]


def _txn(hist, process, sends, outcome="ok", error=None) -> None:
    """A transaction: `sends` (value, partition, offset) each, its completion with
    each send's position (a failed one's too, as the client knew them)."""
    hist.add(process, "invoke", "txn", sends=[{"key": 0, "value": v} for v, _, _ in sends])
    hist.add(process, outcome, "txn", sends=[{"key": 0, "value": v, "partition": p, "offset": o} for v, p, o in sends],
             records=[], **({"error": error} if error else {}))


def _uncommitted_poll(hist, process, *records) -> None:
    hist.add(process, "invoke", "poll", isolation="read_uncommitted")
    hist.add(process, "ok", "poll", isolation="read_uncommitted",
             records=[{"partition": p, "offset": o, "key": 0, "value": v} for p, o, v in records])


def test_a_transaction_answered_as_a_duplicate_of_its_producer_s_aborted_one(hist, check, tmp_path):
    # A transactional producer's transaction fails after its record was written; the
    # client reuses that batch's sequence number in its next transaction, which the
    # broker answers as a duplicate: acknowledged at the aborted record's offset,
    # never written. Only a read_uncommitted reader returns what is there.
    _txn(hist, 6, [(30, 0, 0)], outcome="fail", error="NOT_COORDINATOR")   # 0, 1
    _uncommitted_poll(hist, 3, (0, 0, 30))                                   # 2, 3
    _txn(hist, 6, [(40, 0, 0)])                                              # 4, 5
    _txn(hist, 6, [(50, 0, 2)])                                              # 6, 7
    hist.poll(2, (0, 2, 50))                                                 # 8, 9
    _tenths(hist)
    results = check(hist)
    assert results["counts_by_anomaly"]["lost-write"] == 1
    _disk(tmp_path / "disk", {n: [[0, 0, 2, 0, 30], [0, 2, 2, 0, 50]] for n in ("n1", "n2", "n3")})
    [story] = _by(explain_run(resolve(tmp_path), results, STORIES, ENDS), "lost-write")
    assert story["summary"] == (
        "40, acknowledged at 0:0 at 0.5 s in transaction 4 of process 6, was never read though later offsets "
        "were: 30, sent by the same process 6 in transaction 0 that failed (NOT_COORDINATOR) at 0.1 s, holds 0:0, "
        "read only by read_uncommitted readers (aborted); the broker answered 40's batch as a retry of 30's: "
        "the client reused a producer sequence number of an aborted transaction.")
    assert [(s["time"], s["text"], s.get("event"), s.get("disk")) for s in story["steps"]] == [
        (0.0, "30 sent by process 6 in transaction 0 at 0.0 s, which failed (NOT_COORDINATOR) at 0.1 s", 0, None),
        (0.3, "30 read at 0:0 by process 3 (read_uncommitted) at 0.3 s (written in epoch 2)", 3, None),
        (0.4, "40 sent by process 6 in transaction 4 at 0.4 s", 4, None),
        (0.5, "transaction 4 committed at 0.5 s: acknowledged at 0:0", 5, None),
        (0.5, "the broker answered 40's batch as a retry of 30's: the client reused a producer sequence "
              "number of an aborted transaction", 5, None),
        (None, "no read returned it, though reads of partition 0 reached 2", None, None),
        (None, "at the end n1, n2 and n3 hold 30 at 0 (epoch 2)", None, "n1"),
        (None, "no replica holds 40 on disk", None, "all"),
    ]


def test_a_transaction_s_record_where_other_producers_wrote(hist, check, tmp_path):
    # Another producer's aborted record and a plain send's at the committed
    # transaction's offset: each one's writer is named, no sequence was reused.
    _txn(hist, 6, [(40, 0, 0)])                                              # 0, 1
    _txn(hist, 7, [(30, 0, 0)], outcome="fail", error="ABORTED")             # 2, 3
    _uncommitted_poll(hist, 3, (0, 0, 30))                                   # 4, 5
    hist.send(1, 20, 0, 0)                                                   # 6, 7
    hist.send(1, 21, 0, 1)                                                   # 8, 9
    hist.poll(2, (0, 0, 20), (0, 1, 21))                                     # 10, 11
    _tenths(hist)
    results = check(hist)
    stories = explain(resolve(tmp_path), results, STORIES, fault_ends=ENDS)
    [lost] = _by(stories, "lost-write")
    assert lost["summary"] == (
        "40, acknowledged at 0:0 at 0.1 s in transaction 0 of process 6, was never read though later offsets "
        "were: 20, sent by process 1 in a plain send, holds 0:0; 30, sent by process 7 in transaction 2 that "
        "failed (ABORTED) at 0.3 s, holds 0:0, read only by read_uncommitted readers (aborted).")
    assert [s["text"] for s in lost["steps"]] == [
        "40 sent by process 6 in transaction 0 at 0.0 s",
        "transaction 0 committed at 0.1 s: acknowledged at 0:0",
        "30 sent by process 7 in transaction 2 at 0.2 s, which failed (ABORTED) at 0.3 s",
        "30 read at 0:0 by process 3 (read_uncommitted) at 0.5 s",
        "20 written at 0:0 at 0.7 s",
        "no read returned it, though reads of partition 0 reached 1"]
    [both] = _by(stories, "inconsistent-offset")
    assert [s["text"] for s in both["steps"]] == [
        "40 sent by process 6 in transaction 0 at 0.0 s, which committed at 0.1 s",
        "40 written at 0:0 at 0.1 s",
        "30 sent by process 7 in transaction 2 at 0.2 s, which failed (ABORTED) at 0.3 s",
        "30 read at 0:0 by process 3 (read_uncommitted) at 0.5 s",
        "20 written at 0:0 at 0.7 s"]


def test_plain_sends_of_one_producer_at_one_offset_tell_no_transaction(hist, check, tmp_path):
    # The plain twin of the duplicate above: no transaction, no sequence reused, the story as it was.
    hist.send(6, 30, outcome="info", error="_MSG_TIMED_OUT")                 # 0, 1
    hist.poll(3, (0, 0, 30))                                                 # 2, 3
    hist.send(6, 40, 0, 0)                                                   # 4, 5
    hist.send(6, 50, 0, 2)                                                   # 6, 7
    hist.poll(2, (0, 2, 50))                                                 # 8, 9
    _tenths(hist)
    results = check(hist)
    stories = explain(resolve(tmp_path), results, STORIES, fault_ends=ENDS)
    [lost] = _by(stories, "lost-write")
    assert lost["summary"] == "40, acknowledged at 0:0 at 0.5 s, was never read though later offsets were."
    assert [s["text"] for s in lost["steps"]] == [
        "30 read at 0:0 by process 3 at 0.3 s", "40 sent by process 6 at 0.4 s", "acknowledged at 0:0 at 0.5 s",
        "no read returned it, though reads of partition 0 reached 2"]
    [both] = _by(stories, "inconsistent-offset")
    assert both["summary"] == "partition 0 offset 0 held 30 and 40."
    assert [s["text"] for s in both["steps"]] == ["30 read at 0:0 by process 3 at 0.3 s",
                                                  "40 written at 0:0 at 0.5 s"]


def test_a_transaction_in_parts_is_matched_to_its_invocation(hist, tmp_path):
    # A transaction's completion in a later file than its invocation still names
    # it; a transaction's reads are reads, a read_uncommitted poll's are marked.
    hist.add(6, "invoke", "txn", sends=[{"key": 0, "value": 30}])                         # 0
    hist.add(7, "invoke", "txn", sends=[])                                                 # 1
    hist.add(6, "fail", "txn", sends=[{"key": 0, "value": 30, "partition": 0, "offset": 0}],
             error="NOT_COORDINATOR")                                                      # 2
    _uncommitted_poll(hist, 3, (0, 0, 30))                                                 # 3, 4
    hist.add(7, "ok", "txn", sends=[], records=[{"partition": 0, "offset": 0, "key": 0, "value": 30}])  # 5
    _tenths(hist)
    wanted = (set(), set(), {0})  # only the position 0:0
    whole = tmp_path / "whole.parquet"
    write_parquet(iter(hist.events), whole)
    expected = scan(resolve(whole), *wanted)
    [view] = expected.sends[30]
    assert (view["index"], view["type"], view["txn"], view["txn_time"], view["error"]) == \
        (2, "fail", 0, 0, "NOT_COORDINATOR")
    assert [(r.process, r.index, r.invoked, r.uncommitted) for r in expected.reads_at[0]] == [
        (3, 4, 3 * S // 10, True), (7, 5, 1 * S // 10, False)]
    folder = tmp_path / "parts"
    folder.mkdir()
    for n, (a, b) in enumerate(((0, 2), (2, 4), (4, 6))):
        write_parquet(iter(hist.events[a:b]), folder / f"part-{n:05d}.parquet")
    assert scan(resolve(folder), *wanted) == expected
