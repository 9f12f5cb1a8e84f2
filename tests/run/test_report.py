"""The HTML report: verdict, anomalies with examples linked to the history
events on the page, plots, settings, and every piece of data escaped."""

from __future__ import annotations

import json
import re

import pytest

from checkers.check import Options, check_history
from harness.report import render
from harness.synthetic import Plan, generate

pytestmark = pytest.mark.spark

EVIL = "<script>alert('x')</script>"


def test_report_of_a_history_with_anomalies(spark, tmp_path):
    syn = generate(Plan(events=5000, seed=4, lost=2, duplicates=1, nonmonotonic_polls=1))
    events = syn.events
    # An error text and a nemesis value with markup in them must come out escaped.
    for e in events:
        if e["f"] == "send" and e["type"] == "fail":
            e["error"] = EVIL
        if e["process"] == "nemesis":
            e["value"] = {"grudge": {"n1": [EVIL]}}
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "run.json").write_text(json.dumps({"name": EVIL, "spec": {"system": "own"}}))
    results = check_history(tmp_path, Options(), spark=spark)
    page = render(tmp_path, results).read_text()
    assert "INVALID" in page and "lost-write" in page and "nonmonotonic-poll" in page
    assert EVIL not in page and "&lt;script&gt;" in page
    # Every example link points at an event shown in the excerpt.
    links = set(re.findall(r"href=\"#e(\d+)\"", page))
    anchors = set(re.findall(r"id='e(\d+)'", page))
    assert links and links <= anchors
    assert page.count("data:image/png;base64,") == 4  # latency, throughput, lag, unseen (no states.jsonl: no lanes)
    assert "start-partition" in page  # the nemesis timeline


def test_report_tells_the_story_of_lost_acked_and_dirty_reads(spark, tmp_path):
    syn = generate(Plan(events=4000, seed=2, lost_acked=2, dirty_reads=1))
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in syn.events))
    (tmp_path / "run.json").write_text(json.dumps({"name": "durability", "history_origin": "2026-11-23T10:02:00.000Z"}))
    results = check_history(tmp_path, Options(), spark=spark)
    assert results["anomalies"]["lost-acked"]["count"] == 2 and results["anomalies"]["dirty-read"]["count"] == 1
    page = render(tmp_path, results).read_text()
    example = results["anomalies"]["lost-acked"]["examples"][0]
    when = 120 + example["read_time"] // 10**9  # seconds after 10:00:00
    said = (f"value {example['value']} acknowledged at partition {example['partition']} offset {example['offset']} "
            f"(event {example['ack_index']}), read at 10:{when // 60:02d}:{when % 60:02d} UTC "
            f"(event {example['read_index']}), not in the topic at the end")
    assert said in page
    assert "its send&#x27;s outcome unknown" in page and "not in the topic at the end (its final log ends" in page
    # Without a recorded origin, times are seconds into the run.
    (tmp_path / "run.json").write_text(json.dumps({"name": "durability"}))
    assert f"read at {example['read_time'] / 1e9:.1f} s into the run" in render(tmp_path, results).read_text()
