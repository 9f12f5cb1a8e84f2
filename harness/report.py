"""harness report DIR: render a run's report.html from its history and results.

One self-contained page (styles inline, plots as inline PNG): the verdict,
anomaly counts with examples linked to the history events that prove them
(an excerpt of the history around each example is on the page), the run's
settings, latency and throughput over time with fault intervals shaded, the
nemesis's timeline, and links to the run's files. Every piece of data from
the history, results or spec is HTML-escaped.
"""

from __future__ import annotations

import html
import logging
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson

from checkers.anomalies import MEANING
from checkers.summary import describe, run_seconds
from core.errors import HistoryError, UserError
from core.history.files import HistorySource, iter_source_jsonl, load_run_json, resolve
from core.history.format import NEMESIS
from core.history.jsonl import ReadReport
from core.history.parquet import table_to_events
from harness.plots import figures_html, plots
from nemesis.registry import BY_START_ACTION

log = logging.getLogger(__name__)

# Nemesis actions that begin a fault, and the action that ends it.
FAULT_ENDS = {action: fault.stop_action for action, fault in BY_START_ACTION.items()}
CONTEXT = 2  # events shown before and after each example's events


def esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def configure(parser) -> None:
    parser.add_argument("run_dir", metavar="DIR", help="a run directory holding results.json and the history")


def run(args) -> int:
    run_dir = Path(args.run_dir)
    results_path = run_dir / "results.json"
    if not results_path.is_file():
        raise UserError(f"{run_dir}: no results.json (run `harness check {run_dir}` first)")
    try:
        results = orjson.loads(results_path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise UserError(f"{results_path}: not readable JSON ({e})") from None
    if not isinstance(results, dict) or "anomalies" not in results:
        raise UserError(f"{results_path}: not a results file (no 'anomalies')")
    path = render(run_dir, results)
    print(f"report: {path}")
    return 0


# --------------------------------------------------------------------------
# Faults


def fault_intervals(faults: list[dict], end_time: int) -> list[dict]:
    """Pair each fault's start with its end: [{f, start, end, value}] in ns."""
    open_: dict[str, list[dict]] = {}
    intervals = []
    for e in faults:
        if e.get("type") != "invoke" and e["f"] in FAULT_ENDS:
            continue  # a fault begins at its invocation
        if e.get("type") == "invoke" and e["f"] in FAULT_ENDS:
            open_.setdefault(e["f"], []).append(e)
        elif e.get("type") != "invoke":
            for begin, end in FAULT_ENDS.items():
                if end == e["f"] and open_.get(begin):
                    start = open_[begin].pop(0)
                    intervals.append({"f": begin, "start": start["time"], "end": e["time"],
                                      "value": start.get("value")})
                    break
    for begin, starts in open_.items():
        for start in starts:
            intervals.append({"f": begin, "start": start["time"], "end": end_time, "value": start.get("value")})
    return sorted(intervals, key=lambda i: i["start"])



# --------------------------------------------------------------------------
# The page


def example_indexes(results: dict) -> set[int]:
    found = set()

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k.endswith("index") and isinstance(v, int):
                    found.add(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for a in results.get("anomalies", {}).values():
        walk(a.get("examples", [])[:5])
    return found


def history_excerpt(source: HistorySource | None, indexes: set[int]) -> list[dict]:
    """The events at `indexes`, with a little context on each side."""
    if source is None or not indexes:
        return []
    wanted = set()
    for i in indexes:
        wanted.update(range(max(0, i - CONTEXT), i + CONTEXT + 1))
    if source.format == "parquet":
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        keep = pa.array(sorted(wanted), pa.int64())
        return [e for f in source.files
                for e in table_to_events(pq.read_table(f, filters=pc.is_in(pc.field("index"), keep)))]
    return [e for e in iter_source_jsonl(source, ReadReport()) if e["index"] in wanted]


def _link(i) -> str:
    return f'<a href="#e{int(i)}">{int(i)}</a>'


def _example_html(name: str, e: dict, clock) -> str:
    refs = sorted({v for k, v in _flat(e) if k.endswith("index") and isinstance(v, int)})
    return f"<li>{esc(describe(name, e, clock))} — events {', '.join(_link(i) for i in refs)}</li>"


def wall_clock(run: dict):
    """History time (ns) -> the UTC time of day, from run.json's `history_origin`;
    seconds into the run where the run did not record it."""

    try:
        origin = datetime.strptime(run["history_origin"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    except (KeyError, TypeError, ValueError):
        return run_seconds
    return lambda ns: (origin + timedelta(microseconds=ns // 1000)).strftime("%H:%M:%S UTC")


def _flat(x, prefix=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _flat(v, k)
    elif isinstance(x, list):
        for v in x:
            yield from _flat(v, prefix)
    else:
        yield prefix, x


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#212529}
h1{margin-bottom:.2em} .verdict{font-size:1.4em;font-weight:bold;padding:.4em .8em;border-radius:6px;display:inline-block}
.valid{background:#d3f9d8;color:#2b8a3e} .invalid{background:#ffe3e3;color:#c92a2a}
table{border-collapse:collapse;margin:.5em 0 1.5em} td,th{border:1px solid #dee2e6;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f1f3f5} .error{color:#c92a2a;font-weight:bold} .num{text-align:right}
code,pre{font-family:ui-monospace,monospace;font-size:.85em} pre{white-space:pre-wrap;margin:0}
tr:target{background:#fff3bf} img{max-width:100%} .muted{color:#868e96}
"""


def render(run_dir: Path, results: dict) -> Path:
    """Write run_dir/report.html; returns its path."""
    run = {}
    if (run_dir / "run.json").is_file():
        try:
            run = load_run_json(run_dir / "run.json")
        except HistoryError as e:
            log.warning("%s", e)
    try:
        source = resolve(run_dir)
    except HistoryError:
        source = None
    faults = results.get("stats", {}).get("faults", [])
    end_time = max([x["second"] + 1 for x in results.get("stats", {}).get("throughput", [])] or [0]) * 10**9
    intervals = fault_intervals(faults, end_time)
    images = plots(results, source, intervals, run_dir)
    excerpt = history_excerpt(source, example_indexes(results))
    valid = results.get("valid")
    clock = wall_clock(run)
    title = run.get("name") or run_dir.name
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)} — harness report</title>",
             f"<style>{STYLE}</style></head><body>",
             f"<h1>{esc(title)}</h1><p class='muted'>{esc(run.get('started') or '')} {esc(str(run_dir))}</p>",
             f"<div class='verdict {'valid' if valid else 'invalid'}'>{'VALID' if valid else 'INVALID'}</div>"]
    errors = [n for n, a in results["anomalies"].items() if a.get("error")]
    if errors:
        parts.append(f"<p>Errors: {esc(', '.join(errors))}</p>")
    if run.get("outcome"):
        parts.append(f"<p>Run: {esc(run['outcome'])}</p>")
    parts.append(_counts_html(results))
    parts.append("<h2>Anomalies</h2><table><tr><th>anomaly</th><th>count</th><th></th><th>meaning</th><th>examples</th></tr>")
    for name, a in results["anomalies"].items():
        mark = "error" if a.get("error") else ("allowed" if a.get("allowed") and a["count"] else
                                                ("info" if a["count"] else ""))
        examples = "".join(_example_html(name, e, clock) for e in a.get("examples", [])[:5])
        more = f"<p class='muted'>{len(a['examples'])} examples in results.json</p>" if len(a.get("examples", [])) > 5 else ""
        parts.append(f"<tr><td><code>{esc(name)}</code></td><td class='num'>{int(a['count'])}</td>"
                     f"<td class='{'error' if a.get('error') else ''}'>{esc(mark)}</td><td>{esc(MEANING.get(name, ''))}</td>"
                     f"<td>{'<ul>' + examples + '</ul>' + more if examples else ''}</td></tr>")
    parts.append("</table>")
    for w in results.get("warnings", []):
        parts.append(f"<p class='muted'>warning: {esc(w)}</p>")
    parts.append("<h2>Latency and throughput</h2><p class='muted'>Shaded: fault intervals.</p>")
    for key in ("latency", "throughput"):
        parts.append(f"<img alt='{key}' src='data:image/png;base64,{images[key]}'>")
    parts.append(_latency_table(results))
    parts.append(figures_html(images))
    parts.append(_faults_html(faults))
    parts.append(_settings_html(run))
    parts.append(_excerpt_html(excerpt))
    parts.append(_files_html(run_dir))
    checker = results.get("checker", {})
    parts.append(f"<p class='muted'>Checked by {esc(checker.get('engine'))} on {esc(checker.get('master'))} "
                 f"in {esc(checker.get('seconds'))} s.</p></body></html>")
    path = run_dir / "report.html"
    tmp = path.with_name(".report.html.tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _counts_html(results: dict) -> str:
    c = results.get("counts", {})
    s = c.get("sends", {})
    info = results.get("stats", {}).get("info_sends", {})
    rows = [("sends ok / fail / info", f"{s.get('ok', 0)} / {s.get('fail', 0)} / {s.get('info', 0)}"),
            ("info sends later read / never read", f"{info.get('read', 0)} / {info.get('unread', 0)}"),
            ("polls ok", c.get("polls", {}).get("ok", 0)), ("records read", c.get("records_read", 0)),
            ("events", c.get("events", 0))]
    return "<table>" + "".join(f"<tr><th>{esc(k)}</th><td class='num'>{esc(v)}</td></tr>" for k, v in rows) + "</table>"


def _latency_table(results: dict) -> str:
    rows = results.get("stats", {}).get("latency", [])
    if not rows:
        return ""
    head = "<tr><th>operation</th><th>outcome</th><th>count</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th><th>max ms</th></tr>"
    body = "".join(f"<tr><td>{esc(r['f'])}</td><td>{esc(r['type'])}</td><td class='num'>{r['count']}</td>"
                   f"<td class='num'>{r['p50_ms']}</td><td class='num'>{r['p95_ms']}</td>"
                   f"<td class='num'>{r['p99_ms']}</td><td class='num'>{r['max_ms']}</td></tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def _faults_html(faults: list[dict]) -> str:
    if not faults:
        return "<h2>Nemesis</h2><p>No faults were injected.</p>"
    rows = []
    for e in faults:
        detail = {k: v for k, v in e.items() if k not in ("index", "time", "type", "f", "process")}
        rows.append(f"<tr id='e{int(e['index'])}'><td class='num'>{e['time'] / 1e9:.3f}</td><td>{int(e['index'])}</td>"
                    f"<td>{esc(e['type'])}</td><td><code>{esc(e['f'])}</code></td>"
                    f"<td><pre>{esc(orjson.dumps(detail).decode())}</pre></td></tr>")
    return ("<h2>Nemesis</h2><table><tr><th>time (s)</th><th>event</th><th>type</th><th>action</th>"
            "<th>targets and verification</th></tr>" + "".join(rows) + "</table>")


def _settings_html(run: dict) -> str:
    if not run:
        return ""
    rows = "".join(f"<tr><th>{esc(k)}</th><td><pre>{esc(v if isinstance(v, str) else orjson.dumps(v).decode())}</pre></td></tr>"
                   for k, v in run.items())
    return f"<h2>Settings</h2><table>{rows}</table>"


def _excerpt_html(events: list[dict]) -> str:
    events = [e for e in events if e["process"] != NEMESIS]  # those are in the nemesis table
    if not events:
        return ""
    rows = "".join(f"<tr id='e{int(e['index'])}'><td class='num'>{int(e['index'])}</td>"
                   f"<td class='num'>{e['time'] / 1e9:.6f}</td><td><pre>{esc(orjson.dumps(e).decode())}</pre></td></tr>"
                   for e in sorted(events, key=lambda e: e["index"]))
    return ("<h2>History excerpt</h2><p class='muted'>The events behind the examples above, with context.</p>"
            f"<table><tr><th>index</th><th>time (s)</th><th>event</th></tr>{rows}</table>")


def _files_html(run_dir: Path) -> str:
    names = ["run.json", "history.jsonl", "history.parquet", "results.json", "harness.log"]
    links = [f"<li><a href='{esc(n)}'>{esc(n)}</a></li>" for n in names if (run_dir / n).exists()]
    nodes = sorted(p for p in (run_dir / "nodes").glob("*") if p.is_dir()) if (run_dir / "nodes").is_dir() else []
    for node in nodes:
        for f in sorted(node.iterdir()):
            rel = f.relative_to(run_dir)
            links.append(f"<li><a href='{esc(rel.as_posix())}'>{esc(rel.as_posix())}</a></li>")
    return f"<h2>Files</h2><ul>{''.join(links)}</ul>" if links else ""
