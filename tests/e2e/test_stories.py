"""Stories end to end: a real own-broker run with a planted bug leaves disk dumps
(`disk/<node>.jsonl.gz`, read by `python -m broker.dump`) that agree with the
final reads, and results.json explains its anomalies; `harness check` on the
run folder tells the same stories."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.support import harness, history_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_planted_bug_run_leaves_disk_evidence_and_stories(ack_before_replication_run):
    # The planted bug acknowledges writes the new leader never gets (tests/e2e/conftest.py).
    proc, run_dir = ack_before_replication_run
    assert proc.returncode == 1, proc.stderr[-2000:]
    results = json.loads((run_dir / "results.json").read_text())
    run = json.loads((run_dir / "run.json").read_text())

    # Each node's disk, dumped before the system stopped.
    disks = {}
    for node in ("n1", "n2", "n3"):
        with gzip.open(run_dir / "disk" / f"{node}.jsonl.gz", "rt") as f:
            disks[node] = {(p, o): (e, v) for p, o, e, _k, v in map(json.loads, f)}
        assert run["disk"][node] == len(disks[node]) > 0
    # They agree with the final reads: every record the final reads returned is on
    # a majority of the replicas, and no replica holds another value there.
    events = history_events(run_dir)
    brackets = {}
    for e in events:
        if e["f"] == "final-reads" and e["type"] == "invoke":
            brackets.setdefault(e["process"], []).append([e["index"], 1 << 62])
        elif e["f"] == "final-reads":
            brackets[e["process"]][-1][1] = e["index"]
    final = {(r["partition"], r["offset"]): r["value"] for e in events
             if e["f"] == "poll" and e["type"] == "ok"
             and any(lo < e["index"] < hi for lo, hi in brackets.get(e["process"], []))
             for r in e["records"]}
    assert final
    for pos, value in final.items():
        held = [disks[n].get(pos) for n in disks]
        assert sum(1 for h in held if h and h[1] == value) >= 2, (pos, value, held)
        assert all(h is None or h[1] == value for h in held), (pos, value, held)

    # A story for every error anomaly's examples, each step pointing at its evidence.
    stories = results["explanations"]
    errors = [n for n, a in results["anomalies"].items() if a["error"] and a["examples"]]
    assert errors
    for name in errors:
        told = [s for s in stories if s["anomaly"] == name]
        assert len(told) == len(results["anomalies"][name]["examples"]), name
        for s in told:
            assert s["summary"] and s["steps"]
            assert all(0 <= x["event"] < len(events) for x in s["steps"] if "event" in x)
    lost = [s for s in stories if s["anomaly"] in ("lost-write", "lost-acked")]
    assert lost
    for s in lost:
        # the disk evidence says where the value is at the end, and what holds its offset
        disk_steps = [x["text"] for x in s["steps"] if "disk" in x]
        assert disk_steps and disk_steps[0].startswith("at the end "), s
    report = (run_dir / "report.html").read_text()
    assert "<h2>Stories</h2>" in report and lost[0]["summary"].split(",")[0] in report

    # `harness check` on the folder tells the same stories.
    again = harness("check", str(run_dir), "--json", timeout=600)
    assert again.returncode == 1, again.stderr[-2000:]
    assert json.loads(again.stdout)["explanations"] == stories
