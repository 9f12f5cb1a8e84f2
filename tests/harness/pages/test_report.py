"""The HTML report: verdict, anomalies with examples linked to the history
events on the page, plots, settings, and every piece of data escaped."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import pytest

from checkers.check import Options, check_history
from harness.run.report import render
from lab.synthetic import Plan, generate
from tests.harness.pages.hostile_run import EVIL, EVIL_NODE, build

pytestmark = pytest.mark.spark

def test_report_of_a_history_with_anomalies(spark, tmp_path):
    syn = generate(Plan(events=5000, seed=4, lost=2, duplicates=1, nonmonotonic_polls=1))
    events = syn.events
    # An error text and a nemesis value with markup in them must come out escaped.
    for e in events:
        if e["f"] == "send" and e["type"] == "fail":
            e["error"] = EVIL
        if e["process"] == "nemesis":
            e["value"] = {"grudge": {"n1": [EVIL]}, "mode": EVIL}
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    transactions = {"transactions": {"ok": 5, "fail": 2, "info": 1}, "fenced": 1, "aborted_values": 4,
                    "aborted_values_read_uncommitted": 0}
    (tmp_path / "run.json").write_text(json.dumps({"name": "anomalies", "spec": {"system": "own"},
                                                   "transactions": transactions}))
    results = check_history(tmp_path, Options(), spark=spark)
    page = render(tmp_path, results).read_text()
    assert "INVALID" in page and "lost-write" in page and "nonmonotonic-poll" in page
    # The transactional clients' outcomes, and the warning that no aborted record was seen.
    txn = page.split("<h2>Transactions</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<td class='num'>5 / 2 / 1</td>" in txn and "<td class='num'>4 / 0</td>" in txn
    assert "the aborts did not show in the log" in txn
    assert EVIL not in page and "&lt;script&gt;" in page and "<script" not in page
    # Every example link points at an event shown in the excerpt.
    links = set(re.findall(r"href=\"#e(\d+)\"", page))
    anchors = set(re.findall(r"id='e(\d+)'", page))
    assert links and links <= anchors
    assert page.count("data:image/png;base64,") == 4  # latency, throughput, lag, unread (no states.jsonl: no lanes)
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


# Tags and attributes the report may hold; anything else on the page came from data that escaped escaping.
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "div", "span", "table", "tr",
                "th", "td", "ul", "ol", "li", "a", "code", "pre", "img", "details", "summary", "br"}
ALLOWED_ATTRS = {"charset", "name", "content", "lang", "class", "id", "href", "alt", "src", "data-label"}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.srcs, self.hrefs = set(), set(), [], []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        for k, v in attrs:
            self.attrs.add(k)
            (self.srcs if k == "src" else self.hrefs if k == "href" else []).append(v)


@pytest.fixture(scope="module")
def hostile(spark, tmp_path_factory):
    """The hostile run folder, checked once for the tests below."""
    return build(tmp_path_factory.mktemp("hostile"), spark)


def test_every_field_of_the_report_is_escaped(hostile):
    """Hostile strings in the run's name, settings, schedule, nemesis values and
    errors, node names, node log lines (signatures, first occurrences, exit
    evidence) and send errors: none becomes markup."""
    run_dir, results = hostile
    page = render(run_dir, results).read_text()
    assert "<script" not in page.lower() and "<img src=x" not in page and "<b onmouseover" not in page
    tags = _Tags()
    tags.feed(page)
    assert tags.tags <= ALLOWED_TAGS and tags.attrs <= ALLOWED_ATTRS
    assert all(src.startswith("data:image/png;base64,") for src in tags.srcs)
    assert all(h.startswith("#e") or not re.match(r"^[a-z]+:|^/|\.\.", h) for h in tags.hrefs)
    # The hostile strings are on the page, as text, in every section that shows them.
    sections = dict(re.findall(r"<h2>([^<]+)</h2>(.*?)(?=<h2>|$)", page, re.S))
    shown = html.escape(EVIL)
    for section in ("Nemesis", "Node logs", "Settings", "Files"):
        assert shown in sections[section] or html.escape(EVIL_NODE) in sections[section], section
    assert page.count(shown) >= 20
    head = page.split("<h2>", 1)[0]
    assert shown in head  # the run's name and its outcome


def test_report_reads_faults_settings_and_node_logs_as_words(hostile):
    run_dir, results = hostile
    page = render(run_dir, results).read_text()
    nemesis = page.split("<h2>Nemesis</h2>", 1)[1].split("<h2>", 1)[0]
    # Partitions as components, kills and pauses as node lists, verification in words with details folded.
    assert "n1 n5 | n2 n3 n4 (halves)" in nemesis and "verified: 6 links cut" in nemesis
    assert "n1 cut from n3 n4; n2 cut from n4 n5" in nemesis  # a ring is no set of components
    assert "NOT verified: 1 of 2 links cut" in nemesis and "error: fault not verified" in nemesis
    assert "healed: 20 rules removed on n1 n2 n3 n4 n5" in nemesis
    assert "n4 (the leader of partition 2)" in nemesis and "verified: process gone on n4" in nemesis
    assert "verified: stopped (state T) on n2" in nemesis and "verified: resumed on n2" in nemesis
    assert "n3, stalled (write, fsync)" in nemesis and "probe blocked (1 operation(s) waiting) on n3" in nemesis
    assert "n1 (the controller), slowed by 200 ms per operation" in nemesis
    assert "n1 n2 n3 n4 n5; unsynced writes dropped in 110 files" in nemesis
    assert "<details><summary>verified: 6 links cut</summary><table class='settings'>" in nemesis
    assert '{"' not in nemesis  # no raw JSON
    # Settings: one key per row.
    settings = page.split("<h2>Settings</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<tr><th>spec.system</th><td>own</td></tr>" in settings and "<tr><th>spec.nodes</th><td>5</td></tr>" in settings
    assert "<summary>2 entries</summary>" in settings and '{"' not in settings
    # The log scan, in results.json and on the page.
    scan = results["node_logs"]
    by_sig = {g["signature"]: g for g in scan["groups"]}
    leader = by_sig["ERROR [Broker id=N] Received LeaderAndIsrRequest with correlation id N from controller N epoch N for "
                    "partition harness-N (last update controller epoch N) but cannot become follower since the new "
                    "leader N is unavailable. (state.change.logger)"]
    assert leader["count"] == 2 and leader["first"]["line"] == 9 and leader["first"]["node"] == "n1"
    warn = next(g for s, g in by_sig.items() if s.startswith("WARN [RequestSendThread"))
    assert warn["count"] == 2 and warn["signature"].endswith("— java.io.IOException: Connection to <addr> (id: N rack: null) failed.")
    traceback = next(g for s, g in by_sig.items() if "kazoo.recipe.watchers" in s)
    assert traceback["nodes"] == {"n2": 1, "n3": 1} and "kazoo.exceptions.ConnectionLoss" in traceback["signature"]
    assert "Traceback (most recent call last)" in traceback["first"]["text"]
    assert {e["node"] for e in scan["exits"]} == {"n1", "n2", "n3"}
    assert any("exited unexpectedly" in w for w in results["warnings"])
    logs = page.split("<h2>Node logs</h2>", 1)[1].split("<h2>", 1)[0]
    assert "The broker on n1 exited unexpectedly: server.log line 14" in logs
    assert "Received LeaderAndIsrRequest" in logs and "n1 ×2" in logs
