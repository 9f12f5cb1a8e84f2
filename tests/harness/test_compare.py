"""The differential view (core/runs.py `side_by_side`, `harness compare`,
harness serve's /compare): runs side by side on hand-made run folders, the
rows that differ apart from those the same in every run, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core.runs import run_at, side_by_side
from harness.pages.runs import compare

REPO = Path(__file__).resolve().parents[2]
STORY = "812 at 4:2135 was acknowledged by n1 and is in no replica's log at the end"


def _run(root: Path, name: str, system: str, version: str, lost: int, recovery: float, evil: str = "") -> Path:
    path = root / name
    path.mkdir(parents=True)
    spec = {"system": system, "scenario": "kafka-last-replica-standing", "seed": 1, "nodes": 3,
            "kafka_version": version, "note": evil}
    (path / "run.json").write_text(json.dumps({"spec": spec, "outcome": "completed",
                                               "versions": {"system": f"kafka {version} (kraft)"}}))
    anomalies = {"lost-acked": {"count": lost, "error": lost > 0}, "duplicate": {"count": 2, "error": False}}
    results = {"valid": lost == 0, "anomalies": anomalies, "counts": {"sends": {"ok": 100}},
               "liveness": {"verdict": "ok", "recovery_s": recovery, "unavailable_s": 3.0},
               "explanations": [{"anomaly": "lost-acked", "summary": STORY}] if lost else []}
    (path / "results.json").write_text(json.dumps(results))
    return path


def _rows(sections) -> dict[str, dict[str, tuple]]:
    return {s.title: {r.label: (r.values, r.differs) for r in s.rows} for s in sections}


def test_the_same_scenario_on_three_versions_side_by_side(tmp_path):
    runs = [run_at(_run(tmp_path, name, "kafka", version, lost, recovery))
            for name, version, lost, recovery in (("a", "3.9.2", 2468, 1.5), ("b", "4.1.2", 0, 1.5),
                                                  ("c", "4.4.0", 0, 2.0))]
    rows = _rows(side_by_side(runs, ("lost-acked", "duplicate")))
    the_runs = rows["the runs"]
    assert the_runs["system"] == (("kafka 3.9.2 (kraft)", "kafka 4.1.2 (kraft)", "kafka 4.4.0 (kraft)"), True)
    assert the_runs["verdict"] == (("INVALID", "VALID", "VALID"), True)
    assert the_runs["seed"] == ((1, 1, 1), False) and the_runs["errors"][0] == ("lost-acked", "none", "none")
    assert rows["anomalies"]["lost-acked"] == (("2468 (error)", "0", "0"), True)
    assert rows["anomalies"]["duplicate"] == (("2", "2", "2"), False)
    assert rows["liveness"]["recovery after the heal (s)"] == ((1.5, 1.5, 2.0), True)
    assert rows["stories (the first of each anomaly)"]["lost-acked"] == ((STORY, None, None), True)
    assert rows["settings"]["kafka_version"][1] and not rows["settings"]["nodes"][1]
    differ, same = next(s for s in side_by_side(runs) if s.title == "settings").split()
    assert {r.label for r in differ} == {"kafka_version", "versions.system"} and "nodes" in {r.label for r in same}


def test_the_controller_s_elections_say_which_set_each_leader_came_from(tmp_path):
    from tests.core.test_elections import WITH_ELR, WITHOUT_ELR
    folders = [_run(tmp_path, "on", "kafka", "4.4.0", 0, 1.0), _run(tmp_path, "off", "kafka", "4.4.0", 1977, 1.0),
               _run(tmp_path, "zk", "kafka", "3.9.2", 2468, 1.0)]
    for folder, lines in zip(folders, (WITH_ELR, WITHOUT_ELR)):
        (folder / "states.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = _rows(side_by_side([run_at(f) for f in folders]))["elections (the KRaft controller's records)"]
    (values, differs), = rows.values()
    assert differs and values[2] is None  # ZooKeeper mode: no controller records
    assert "from the eligible leader replicas [n1, n2] (KIP-966)" in values[0]
    assert "from the ISR [n3], its only member" in values[1] and "registered again at 27.0 s" in values[1]


def test_the_features_the_controller_finalized_are_settings_that_differ(tmp_path):
    folders = [_run(tmp_path, "on", "kafka", "4.4.0", 0, 1.0), _run(tmp_path, "off", "kafka", "4.4.0", 1977, 1.0),
               _run(tmp_path, "zk", "kafka", "3.9.2", 2468, 1.0)]
    for folder, elr in zip(folders, (1, 0)):
        lines = [{"time": -5, "kind": "kraft-feature", "name": "eligible.leader.replicas.version", "level": elr},
                 {"time": -5, "kind": "kraft-feature", "name": "transaction.version", "level": 2}]
        (folder / "states.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = _rows(side_by_side([run_at(f) for f in folders]))["settings"]
    assert rows["features.eligible.leader.replicas.version"] == ((1, 0, None), True)
    assert rows["features.transaction.version"] == ((2, 2, None), True)  # ZooKeeper mode: none read
    assert "features" not in rows


def test_the_page_marks_the_differences_and_escapes_what_runs_say(tmp_path):
    evil = "<script>alert(1)</script>"
    runs = [run_at(_run(tmp_path, name, "kafka", version, lost, 1.0, evil))
            for name, version, lost in (("a", "3.9.2", 5), ("b", "4.4.0", 0), ("c", "4.4.0", 0))]
    page = compare(runs)
    assert evil not in page and "&lt;script&gt;" in page
    assert "<tr class=differ><th>verdict</th><td>INVALID</td><td>VALID</td><td>VALID</td></tr>" in page
    assert "<tr><th>nodes</th><td>3</td><td>3</td><td>3</td></tr>" in page  # folded, but there
    assert "anomalies: 1 of 2 differ" in page


def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", "compare", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_the_command_prints_the_differences_first_and_json_on_request(tmp_path):
    a = _run(tmp_path, "a", "kafka", "3.9.2", 2468, 1.5)
    b = _run(tmp_path, "b", "kafka", "4.1.2", 0, 1.5)
    done = _harness(str(a), str(b))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "the runs: 3 of 7 differ" in out and "* verdict" in out and "* errors" in out and "INVALID" in out
    assert "lost-acked" in out and "2468 (error)" in out and STORY[:40] in out
    assert "(the same in every run: " in out and "seed" in out.split("the runs:")[1].split("anomalies")[0]
    data = json.loads(_harness(str(a), str(b), "--json").stdout)
    verdict = next(r for s in data if s["section"] == "the runs" for r in s["rows"] if r["label"] == "verdict")
    assert verdict == {"label": "verdict", "values": ["INVALID", "VALID"], "differs": True}


def test_bad_runs_are_one_line_and_exit_2(tmp_path):
    a = _run(tmp_path, "a", "kafka", "3.9.2", 0, 1.0)
    for args, words in (([str(a)], "name two runs or more"), ([str(a), str(tmp_path / "nothing")], "not a run's folder"),
                        ([str(a), str(tmp_path)], "not a run's folder")):
        done = _harness(*args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr
