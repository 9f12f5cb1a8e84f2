"""The report's figures and timeline.html: what the run's evidence reads
(the partition and node lanes from a hand-made states.jsonl, the operations
the timeline pairs and samples, the examples' marks), the figures drawn from
it and from results.json's series (the checker's: tests/checkers/test_series.py),
and the timeline page (sampling that bounds its size, escaping)."""

from __future__ import annotations

import json
import re

from core.history.files import resolve
from core.history.parquet import write_parquet
from harness.pages.figures import draw, figures_html
from harness.pages.timeline import timeline_page
from harness.run import evidence as E
from harness.run.report import render
from lab.synthetic import Plan, generate
from tests.harness.pages.chromium import BINARY, Browser
from tests.support import need

EVIL = "<script>alert('x')</script>"
MS = 1_000_000


def _history(tmp_path, rows):
    """Write rows (process, type, f, time ms, fields) as history.jsonl; return the table."""
    events = [{"index": i, "time": t * MS, "process": p, "type": ty, "f": f, **fields}
              for i, (p, ty, f, t, fields) in enumerate(rows)]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return E.history_table(resolve(tmp_path))


def _rec(partition, offset, value):
    return {"partition": partition, "offset": offset, "key": 0, "value": value}


ROWS = [
    (1, "invoke", "send", 5, {"key": 0, "value": 10}),
    (1, "ok", "send", 10, {"key": 0, "value": 10, "partition": 0, "offset": 0}),
    (1, "invoke", "send", 11, {"key": 0, "value": 11}),
    (1, "ok", "send", 20, {"key": 0, "value": 11, "partition": 0, "offset": 1}),
    (2, "invoke", "poll", 21, {}),
    (2, "ok", "poll", 25, {"records": [_rec(0, 0, 10)]}),  # head 1: one behind
    (1, "invoke", "send", 26, {"key": 1, "value": 12}),
    (1, "ok", "send", 30, {"key": 1, "value": 12, "partition": 1, "offset": 0}),
    (3, "invoke", "poll", 31, {}),
    (3, "ok", "poll", 35, {"records": [_rec(0, 1, 11), _rec(1, 0, 12)]}),  # caught up on both
    (1, "invoke", "send", 36, {"key": 0, "value": 13}),
    (1, "ok", "send", 40, {"key": 0, "value": 13, "partition": 0, "offset": 2}),  # never read
    (2, "invoke", "poll", 41, {}),
    (2, "ok", "poll", 45, {"records": []}),  # an empty poll says nothing
    (2, "invoke", "poll", 46, {}),
    (2, "ok", "poll", 50, {"records": [_rec(0, 1, 11)]}),  # head 2 (acked), or 5 (HW 6 at 48 ms)
    (1, "invoke", "send", 51, {"key": 1, "value": 14}),
    (3, "invoke", "poll", 52, {}),
    (3, "ok", "poll", 55, {"records": [_rec(1, 1, 14)]}),  # read before its send's ack arrived
    (1, "ok", "send", 60, {"key": 1, "value": 14, "partition": 1, "offset": 1}),
    (1, "invoke", "send", 61, {"key": 1, "value": 15}),
    (1, "fail", "send", 62, {"key": 1, "value": 15, "error": EVIL}),
    (1, "invoke", "send", 63, {"key": 1, "value": 16}),  # never completes
]


def test_timeline_pairs_each_invocation_with_its_completion(tmp_path):
    ops, said = E.timeline_ops(_history(tmp_path, ROWS))
    assert said.startswith("All ")
    assert len(ops) == sum(1 for r in ROWS if r[1] == "invoke")
    by_value = {int(o.value): o for o in ops.itertuples() if o.f == "send"}
    assert (by_value[14].start, by_value[14].end, by_value[14].type) == (51 * MS, 60 * MS, "ok")
    assert by_value[15].type == "fail" and by_value[15].error == EVIL
    assert (by_value[16].type, by_value[16].end) == ("info", 63 * MS)  # never completed: to the end
    polls = ops[ops["f"] == "poll"]
    assert [(o.process, o.start, o.end, o.n) for o in polls.itertuples()] == [
        (2, 21 * MS, 25 * MS, 1), (3, 31 * MS, 35 * MS, 2), (2, 41 * MS, 45 * MS, 0),
        (2, 46 * MS, 50 * MS, 1), (3, 52 * MS, 55 * MS, 1)]


STATES = [
    {"time": 0, "kind": "phase", "phase": "workload"},
    {"time": 0, "kind": "controller", "node": "n1"},
    {"time": 0, "kind": "node", "node": "n1", "alive": True, "reachable": True},
    {"time": 0, "kind": "node", "node": "n2", "alive": True, "reachable": True},
    {"time": 3 * 10**9, "kind": "node", "node": "n1", "alive": False, "reachable": False},
    {"time": 3500 * MS, "kind": "node", "node": "n1", "alive": True, "reachable": False},
    {"time": 4500 * MS, "kind": "node", "node": "n1", "alive": True, "reachable": True},
    {"time": 0, "kind": "partition", "partition": 1, "leader": "n1", "epoch": 0, "isr": ["n1", "n2", "n3"], "hw": 0},
    {"time": 0, "kind": "partition", "partition": 0, "leader": "n2", "epoch": 0, "isr": ["n2", "n3", "n1"], "hw": 0},
    {"time": 2 * 10**9, "kind": "partition", "partition": 1, "leader": "n1", "epoch": 0,
     "isr": ["n1", "n2", "n3"], "hw": 700},  # HW only: no new segment
    {"time": 3 * 10**9, "kind": "partition", "partition": 1, "leader": None, "epoch": 0, "isr": ["n1"], "hw": None},
    {"time": 4 * 10**9, "kind": "partition", "partition": 1, "leader": "n3", "epoch": 1, "isr": ["n3", "n2"], "hw": 800},
    {"time": 4 * 10**9 + 5, "kind": "controller", "node": "n3"},
]


def test_partition_lanes_from_states(tmp_path):
    lines = [json.dumps(s) for s in STATES]
    # Truncations are appended at the end, out of time order; a cut last line is skipped.
    lines.append(json.dumps({"time": 3500 * MS, "kind": "truncation", "node": "n1", "partition": 1, "offset": 750,
                             "log_end": 790, "epoch": 1, "leader": "n3", "reason": "leader epoch"}))
    (tmp_path / "states.jsonl").write_text("\n".join(lines) + '\n{"time": 5, "ki')
    states = E.read_states(tmp_path)
    assert [s["time"] for s in states] == sorted(s["time"] for s in states) and len(states) == len(STATES) + 1
    lanes = E.partition_lanes(states, end_time=5 * 10**9)
    assert list(lanes) == [0, 1]
    assert lanes[0] == [{"start": 0, "end": 5 * 10**9, "leader": "n2", "epoch": 0, "isr": ["n2", "n3", "n1"]}]
    assert [(s["start"], s["end"], s["leader"], s["epoch"], s["isr"]) for s in lanes[1]] == [
        (0, 3 * 10**9, "n1", 0, ["n1", "n2", "n3"]),
        (3 * 10**9, 4 * 10**9, None, 0, ["n1"]),
        (4 * 10**9, 5 * 10**9, "n3", 1, ["n3", "n2"])]
    nodes = E.node_lanes(states, end_time=5 * 10**9)
    assert [(s["start"], s["end"], s["alive"], s["reachable"], s["controller"]) for s in nodes["n1"]] == [
        (0, 3 * 10**9, True, True, True), (3 * 10**9, 3500 * MS, False, False, True),
        (3500 * MS, 4 * 10**9 + 5, True, False, True), (4 * 10**9 + 5, 4500 * MS, True, False, False),
        (4500 * MS, 5 * 10**9, True, True, False)]
    assert [(s["start"], s["end"], s["controller"]) for s in nodes["n2"]] == [(0, 5 * 10**9, False)]
    assert [(s["start"], s["alive"], s["controller"]) for s in nodes["n3"]] == [(4 * 10**9 + 5, None, True)]
    # The report draws the chart where states.jsonl is, and not where it is not;
    # the lag and unseen figures from results.json's series.
    table = _history(tmp_path, ROWS)
    series = {"bucket_s": 0.001, "unread": {"0": [[0.01, 1], [0.02, 0]], "1": [[0.03, 1]]},
              "lag": {"2": [[0.025, 1], [0.05, 1]], "3": [[0.035, 0]]}}
    results = {"anomalies": {}, "series": series}
    ev = E.gather(tmp_path, results)
    assert ev.timeline is not None and ev.nodes and ev.truncations
    images = draw(results, ev)
    assert {"lanes", "lag", "unread", "latency", "throughput"} <= set(images)
    assert "Cluster state" in figures_html(images)
    # A states.jsonl the chart cannot use costs the chart, not the report.
    (tmp_path / "states.jsonl").write_text('{"time": 1, "kind": "partition", "partition": 0, "isr": 5}\n')
    images = draw(results, E.gather(tmp_path, results))
    assert "lanes" not in images and "lag" in images
    (tmp_path / "states.jsonl").unlink()
    assert "lanes" not in draw({"anomalies": {}}, E.gather(tmp_path, {"anomalies": {}}))
    assert table.num_rows == len(ROWS)


def test_anomaly_marks_at_the_times_of_the_events_examples_cite(tmp_path):
    table = _history(tmp_path, ROWS)
    results = {"anomalies": {"unseen": {"count": 1, "examples": [{"value": 13, "partition": 0, "offset": 2,
                                                                  "ack_index": 11}]}}}
    assert E.anomaly_marks(results, table) == [{"name": "unseen", "partition": 0, "time": 40 * MS}]


def _timeline(table, intervals, budget: int, title: str = "") -> str:
    return timeline_page(*E.timeline_ops(table, budget), intervals, title)


def _synthetic(tmp_path, events):
    syn = generate(Plan(events=events, seed=5))
    for e in syn.events:
        if e["f"] == "send" and e["type"] == "fail":
            e["error"] = EVIL
        if e["process"] == "nemesis":
            e["value"] = {"grudge": {"n1": [EVIL]}}
    write_parquet(syn.events, tmp_path / "history.parquet")
    faults = [e for e in syn.events if e["process"] == "nemesis"]
    return E.history_table(resolve(tmp_path)), E.fault_intervals(faults, syn.events[-1]["time"]), syn


def test_timeline_sampling_bounds_its_size_and_says_so(tmp_path):
    table, intervals, syn = _synthetic(tmp_path, 30_000)
    client_ops = sum(1 for e in syn.events if e["type"] == "invoke" and e["process"] != "nemesis")
    nemesis_ops = sum(1 for e in syn.events if e["type"] == "invoke" and e["process"] == "nemesis")
    assert client_ops > 10_000
    for budget in (500, 2000):
        page = _timeline(table, intervals, budget)
        bars = len(re.findall(r"<rect class='(?:ok|fail|info)'", page))
        assert bars == budget + nemesis_ops
        assert f"{budget:,} of {client_ops:,} client operations are drawn" in page
        assert len(page.encode()) < 20_000 + 300 * bars
    page = _timeline(table, intervals, client_ops)
    assert f"All {client_ops:,} client operations" in page


def test_timeline_escapes_errors_titles_and_fault_values(tmp_path):
    table, intervals, _ = _synthetic(tmp_path, 12_000)
    assert intervals
    page = _timeline(table, intervals, 10_000, EVIL)
    assert "error &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page  # a failed send's error
    assert "&quot;grudge&quot;:{&quot;n1&quot;:[&quot;&lt;script&gt;" in page  # a fault's value
    assert "<title>&lt;script&gt;" in page  # the page's title
    assert EVIL not in page and "<script" not in page
    # Nothing on the page is fetched: no external references of any kind.
    assert not re.search(r"(?:src|href)\s*=|url\(|@import", page)


def test_report_places_the_figures_and_links_the_timeline(tmp_path):
    _history(tmp_path, ROWS)
    (tmp_path / "states.jsonl").write_text("".join(json.dumps(s) + "\n" for s in STATES))
    series = {"bucket_s": 0.001, "unread": {"0": [[0.01, 1], [0.02, 0]]}, "lag": {"2": [[0.025, 1]]}}
    page = render(tmp_path, {"valid": True, "anomalies": {}, "series": series}).read_text()
    assert "<h2>Cluster state</h2>" in page and "<h2>Consumers</h2>" in page
    assert "href='timeline.html'" in page and (tmp_path / "timeline.html").is_file()
    assert page.count("data:image/png;base64,") == 5


def test_timeline_in_chromium_has_no_overflow_errors_or_requests(tmp_path):
    need(BINARY is not None, "chromium (scripts/setup-system.sh installs it)")
    table, intervals, _ = _synthetic(tmp_path, 12_000)
    page = tmp_path / "timeline.html"
    page.write_text(_timeline(table, intervals, 2_000, EVIL))
    with Browser() as browser:
        for width in (1280, 390):
            seen = browser.open_page(page, width, probe="({pwned: typeof window.pwned === 'undefined' ? null : 1})")
            (tmp_path / f"timeline-{width}.png").write_bytes(seen.screenshot)
            # The SVG scrolls inside its frame; the page itself does not overflow.
            assert seen.scroll_width <= seen.inner_width == width
            assert seen.console_errors == [] and seen.requests == [] and seen.globals == {"pwned": None}


def _offsets(**by_partition):
    return [{"partition": int(p[1:]), "offset": o} for p, o in by_partition.items()]


GROUP_ROWS = [
    (1, "invoke", "send", 1, {"key": 0, "value": 10}),
    (1, "ok", "send", 2, {"key": 0, "value": 10, "partition": 0, "offset": 0}),
    (1, "invoke", "send", 3, {"key": 0, "value": 11}),
    (1, "ok", "send", 4, {"key": 0, "value": 11, "partition": 0, "offset": 1}),
    (4, "invoke", "assign", 5, {"partitions": [0], "group": "g1", "generation": 1}),
    (4, "ok", "assign", 5, {"partitions": [0], "group": "g1", "generation": 1}),
    (4, "invoke", "committed", 6, {"group": "g1", "partitions": [0]}),
    (4, "ok", "committed", 7, {"offsets": _offsets(p0=-1)}),
    (4, "invoke", "poll", 8, {}),
    (4, "ok", "poll", 9, {"records": [_rec(0, 0, 10), _rec(0, 1, 11)]}),
    (4, "invoke", "commit", 10, {"group": "g1", "offsets": _offsets(p0=2)}),  # the library's, before handling
    (4, "ok", "commit", 11, {"group": "g1", "offsets": _offsets(p0=2)}),
    (4, "invoke", "process", 12, {"records": [{"partition": 0, "offset": 0, "value": 10}]}),
    (4, "ok", "process", 13, {"records": [{"partition": 0, "offset": 0, "value": 10}]}),
    (4, "invoke", "crash", 14, {}),
    (4, "ok", "crash", 14, {}),
    (9, "invoke", "committed", 20, {"group": "g1", "partitions": [0], "final": True}),
    (9, "ok", "committed", 21, {"offsets": _offsets(p0=2)}),
]


def test_a_consumer_group_s_progress_and_its_figure(tmp_path):
    table = _history(tmp_path, GROUP_ROWS)
    (tmp_path / "run.json").write_text(json.dumps({"workload": {"groups": [{"name": "g1"}]}}))
    progress = E.group_progress(resolve(tmp_path), table)
    end = 0.021  # the history's last time: the series are sampled up to it
    assert progress == {"g1": {
        "rebalances": [0.005], "crashes": [[0.014, 4]],
        "partitions": {0: {"committed": [[0.011, 2]], "read back": [[0.007, -1], [0.021, 2]],
                           "end": [[0.002, 1], [0.004, 2]], "handled": [[0.013, 1]]}}}}
    assert max(x[0] for p in progress["g1"]["partitions"].values() for s in p.values() for x in s) <= end
    ev = E.gather(tmp_path, {"anomalies": {}})
    images = draw({"anomalies": {}}, ev)
    assert "groups" in images and "Consumer groups" in figures_html(images)
    # A run without groups draws none.
    (tmp_path / "run.json").write_text(json.dumps({"workload": {"groups": []}}))
    assert "groups" not in draw({"anomalies": {}}, E.gather(tmp_path, {"anomalies": {}}))


def test_the_liveness_section_tells_starved_members_escaped():
    from harness.pages.figures import SHOW_STARVED, liveness_html

    stretch = {"group": "<b>g</b>", "member": 3, "start": 1.3, "end": 19.5, "seconds": 18.2, "open": True,
               "holder": 4, "holder_partitions": [0, 1]}
    live = {"verdict": "ok", "recovery_s": None, "unavailable_s": 0.5, "producers": {"unavailable_s": 0.5},
            "consumers": {"unavailable_s": 0.5}, "starved_member_s": 18.2,
            "starved_members": [stretch] + [{**stretch, "member": 10 + i, "open": False} for i in range(SHOW_STARVED)]}
    html = liveness_html(live, {})
    assert ("Group &lt;b&gt;g&lt;/b&gt;: member 3 held no partition for 18.2 s (1.3 s to 19.5 s, when it stopped) "
            "while member 4 held partitions 0, 1: a rebalance that never finished.") in html
    assert "<b>g</b>" not in html
    assert html.count("held no partition") == SHOW_STARVED
