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
    assert page.count("data:image/png;base64,") == 2
    assert "start-partition" in page  # the nemesis timeline
