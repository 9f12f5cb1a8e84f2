"""The report page (report.html): one self-contained page (styles inline,
plots as inline PNG) of a run: the verdict, anomaly counts with examples
linked to the history events that prove them (an excerpt of the history
around each example is on the page), the stories, liveness, the run's
settings, latency and throughput over time with fault intervals shaded, the
nemesis's timeline, the nodes' logs, and links to the run's files.

Drawn from results.json and the run's evidence (harness/run/evidence.py);
the figures are harness/pages/figures.py's. Every piece of data from the
history, results or spec is HTML-escaped.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import orjson

from checkers.anomaly import run_seconds
from checkers.explain import leaves
from checkers.registry import MEANING
from checkers.summary import describe
from core.history.format import NEMESIS
from core.runs import dotted
from harness.pages import stories
from harness.pages.controller import controller_html
from harness.pages.figures import figures_html, liveness_html
from harness.pages.html import Cell, esc, key_values, page, table
from nemesis import conditions
from nemesis.registry import BY_START_ACTION, BY_STOP_ACTION

EXAMPLES = 5  # examples of each anomaly on the page (all of them are in results.json)
HIDDEN = ("index", "time", "type", "f", "process")


def example_indexes(results: dict) -> set[int]:
    """The history indexes the shown examples cite."""
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
        walk(a.get("examples", [])[:EXAMPLES])
    return found


def _link(i) -> str:
    return f'<a href="#e{int(i)}">{int(i)}</a>'


def _example_html(name: str, e: dict, clock) -> str:
    refs = sorted({v for k, v in leaves(e) if k.endswith("index") and isinstance(v, int)})
    return f"<li>{esc(describe(name, e, clock))} — events {', '.join(_link(i) for i in refs)}</li>"


def wall_clock(run: dict):
    """History time (ns) -> the UTC time of day, from run.json's `history_origin`;
    seconds into the run where the run did not record it."""

    try:
        origin = datetime.strptime(run["history_origin"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    except (KeyError, TypeError, ValueError):
        return run_seconds
    return lambda ns: (origin + timedelta(microseconds=ns // 1000)).strftime("%H:%M:%S UTC")


def report_page(results: dict, ev, images: dict[str, str]) -> str:
    """report.html's text, from results.json, the run's evidence
    (harness/run/evidence.py's Evidence) and the figures drawn from both."""
    run, faults = ev.run, results.get("stats", {}).get("faults", [])
    valid = results.get("valid")
    clock = wall_clock(run)
    title = run.get("name") or ev.folder.name
    parts = [f"<h1>{esc(title)}</h1><p class='muted'>{esc(run.get('started') or '')} {esc(str(ev.folder))}</p>",
             f"<div class='verdict {'valid' if valid else 'invalid'}'>{'VALID' if valid else 'INVALID'}</div>"]
    errors = [n for n, a in results["anomalies"].items() if a.get("error")]
    if errors:
        parts.append(f"<p>Errors: {esc(', '.join(errors))}</p>")
    if run.get("outcome"):
        parts.append(f"<p>Run: {esc(run['outcome'])}</p>")
    parts.append(_counts_html(results))
    parts.append(_transactions_html(run.get("transactions")))
    parts.append(liveness_html(results.get("liveness"), images))
    rows = [_anomaly_row(name, a, clock) for name, a in results["anomalies"].items()]
    parts.append("<h2>Anomalies</h2>" + table(("anomaly", "count", "", "meaning", "examples"), rows, cls="wide stack"))
    for w in results.get("warnings", []):
        parts.append(f"<p class='muted'>warning: {esc(w)}</p>")
    parts.append(stories.stories_html(results))
    parts.append("<h2>Latency and throughput</h2><p class='muted'>Shaded: fault intervals.</p>")
    for key in ("latency", "throughput"):
        parts.append(f"<img alt='{key}' src='data:image/png;base64,{images[key]}'>")
    parts.append(_latency_table(results))
    parts.append(figures_html(images))
    parts.append(_faults_html(faults))
    parts.append(controller_html(ev.controller, ev.features))
    parts.append(_node_logs_html(results.get("node_logs")))
    parts.append(_settings_html(run))
    parts.append(_excerpt_html(ev.excerpt))
    parts.append(_files_html(ev.files))
    checker = results.get("checker", {})
    parts.append(f"<p class='muted'>Checked by {esc(checker.get('engine'))} on {esc(checker.get('master'))} "
                 f"in {esc(checker.get('seconds'))} s.</p>")
    return page(f"{title} — harness report", "\n".join(parts), narrow=True)


def _anomaly_row(name: str, a: dict, clock) -> list:
    mark = "error" if a.get("error") else ("allowed" if a.get("allowed") and a["count"] else
                                            ("info" if a["count"] else ""))
    examples = "".join(_example_html(name, e, clock) for e in a.get("examples", [])[:EXAMPLES])
    more = (f"<p class='muted'>{len(a['examples'])} examples in results.json</p>"
            if len(a.get("examples", [])) > EXAMPLES else "")
    return [f"<code>{esc(name)}</code>", Cell(str(int(a["count"])), "num"),
            Cell(esc(mark), "error" if a.get("error") else ""), esc(MEANING.get(name, "")),
            f"<ul>{examples}</ul>{more}" if examples else ""]


def _counts_html(results: dict) -> str:
    c = results.get("counts", {})
    s = c.get("sends", {})
    info = results.get("stats", {}).get("info_sends", {})
    rows = [("sends ok / fail / info", f"{s.get('ok', 0)} / {s.get('fail', 0)} / {s.get('info', 0)}"),
            ("info sends later read / never read", f"{info.get('read', 0)} / {info.get('unread', 0)}"),
            ("polls ok", c.get("polls", {}).get("ok", 0)), ("records read", c.get("records_read", 0)),
            ("events", c.get("events", 0))]
    return key_values(((k, esc(v)) for k, v in rows), cls="", value_cls="num")


def _transactions_html(txn: dict | None) -> str:
    """What the transactional clients did (run.json `transactions`, workloads/transactions.py)."""
    if not txn:
        return ""
    outcomes = txn.get("transactions", {})
    aborted, seen = txn.get("aborted_values", 0), txn.get("aborted_values_read_uncommitted", 0)
    rows = [("transactions committed / aborted / unknown",
             f"{outcomes.get('ok', 0)} / {outcomes.get('fail', 0)} / {outcomes.get('info', 0)}"),
            ("producers fenced by a new instance", txn.get("fenced", 0)),
            ("records of aborted transactions / of them read at read_uncommitted", f"{aborted} / {seen}")]
    note = ("<p class='muted'>No read_uncommitted reader saw a record of an aborted transaction: the aborts did "
            "not show in the log, so no read_committed reader was tested against them.</p>"
            if aborted and not seen else "")
    return "<h2>Transactions</h2>" + key_values(((k, esc(v)) for k, v in rows), cls="", value_cls="num") + note


def _latency_table(results: dict) -> str:
    rows = results.get("stats", {}).get("latency", [])
    if not rows:
        return ""
    cols = (("operation", "f", ""), ("outcome", "type", ""), ("count", "count", "num"), ("p50 ms", "p50_ms", "num"),
            ("p95 ms", "p95_ms", "num"), ("p99 ms", "p99_ms", "num"), ("max ms", "max_ms", "num"))
    head = "<tr>" + "".join(f"<th>{name}</th>" for name, _, _ in cols) + "</tr>"
    # Each cell names its column: on a narrow screen the rows stack and the header row is hidden.
    body = "".join("<tr>" + "".join(f"<td class='{cls}' data-label='{name}'>{esc(r.get(key))}</td>"
                                    for name, key, cls in cols) + "</tr>" for r in rows)
    return f"<table class='stack labelled'>{head}{body}</table>"


def describe_fault(e: dict) -> tuple[str, str]:
    """A nemesis event in words, (what it did, its verification), by its fault's own `describe`."""
    value = e.get("value") if isinstance(e.get("value"), dict) else {}
    fault = BY_START_ACTION.get(e["f"]) or BY_STOP_ACTION.get(e["f"])
    if fault is not None:
        what, verified = fault.describe(value, e["f"] in BY_STOP_ACTION)
    elif e["f"] == conditions.AWAIT:  # a wait on the cluster's state, no fault
        what, verified = conditions.describe(value), ""
    else:  # heal: what the sweeps did, key by key
        what, verified = "; ".join(f"{k.replace('_', ' ')}: {_words(v)}" for k, v in value.items()) or "", ""
    if e.get("error"):
        verified = f"{verified}; error: {e['error']}" if verified else f"error: {e['error']}"
    return what, verified


def _words(v) -> str:
    """A small value as words: lists and maps without JSON's punctuation."""
    if isinstance(v, dict):
        return ", ".join(f"{k} {_words(x)}" for k, x in v.items()) if v else "none"
    if isinstance(v, list):
        return " ".join(_words(x) for x in v) if v else "none"
    return "—" if v is None else str(v)


def _faults_html(faults: list[dict]) -> str:
    if not faults:
        return "<h2>Nemesis</h2><p>No faults were injected.</p>"
    rows = []
    for e in faults:
        what, verified = describe_fault(e)
        detail = {k: v for k, v in e.items() if k not in HIDDEN}
        fault = BY_START_ACTION.get(e["f"]) or BY_STOP_ACTION.get(e["f"])
        label = fault.label if fault else e["f"]
        mark = "" if e["type"] == "ok" else f" <span class='{'error' if e['type'] == 'info' else 'muted'}'>" \
                                             f"{esc(e['type'])}</span>"
        folded = (f"<details><summary>{esc(verified) or 'details'}</summary>{_kv_table(detail)}</details>"
                  if detail else esc(verified))
        rows.append(f"<tr id='e{int(e['index'])}'><td class='num'>{e['time'] / 1e9:.3f} s "
                    f"<span class='muted'>#{int(e['index'])}</span></td>"
                    f"<td><code>{esc(e['f'])}</code> <span class='muted'>{esc(label)}</span>{mark}</td>"
                    f"<td>{esc(what)}</td><td>{folded}</td></tr>")
    return ("<h2>Nemesis</h2><p class='muted'>Each fault's start and end; invocations show what was asked, "
            "completions what was done and how the harness verified it (open for the probes).</p>"
            "<table class='wide stack' id='faults'><tr><th>time</th><th>action</th><th>what</th>"
            "<th>verification</th></tr>" + "".join(rows) + "</table>")


def _kv_table(d: dict) -> str:
    """A dict as key/value rows (nested keys dotted), every value in words."""
    return key_values((k, _value_html(v)) for k, v in dotted(d))


def _value_html(v) -> str:
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        items = "".join(f"<li>{esc(_words(x))}</li>" for x in v)
        return f"<details><summary>{len(v)} entries</summary><ol>{items}</ol></details>"
    if isinstance(v, (list, dict)) or v is None:
        return f"<span class='muted'>{esc(_words(v))}</span>" if not v else esc(_words(v))
    if isinstance(v, str) and "\n" in v:
        return f"<pre>{esc(v)}</pre>"
    return esc(v)


def _settings_html(run: dict) -> str:
    if not run:
        return ""
    return f"<h2>Settings</h2><p class='muted'>From run.json.</p>{_kv_table(run)}"


def _node_logs_html(scan: dict | None) -> str:
    """The broker-log scan (checkers.node_logs): unexpected exits, then each signature with its first occurrence."""
    if not scan:
        return ""
    parts = ["<h2>Node logs</h2>"]
    for x in scan.get("exits", []):
        parts.append(f"<p class='flag'>The broker on {esc(x['node'])} exited unexpectedly: {esc(x['file'])} "
                     f"line {int(x['line'])}{' at ' + esc(x['time']) if x.get('time') else ''}: "
                     f"<code>{esc(x['evidence'])}</code></p>")
    scanned = scan.get("scanned", {})
    files = "; ".join(f"{node}: {', '.join(names)}" for node, names in scanned.items())
    groups = scan.get("groups", [])
    total = sum(g["count"] for g in groups)
    more = f", {int(scan['more_groups'])} more not kept" if scan.get("more_groups") else ""
    parts.append(f"<p class='muted'>ERROR and FATAL records and stack traces of every node, grouped by signature "
                 f"(numbers and ids normalized): {total} records, {len(groups)} signatures{more}. "
                 f"Scanned {esc(files) or 'no files'}.</p>")
    if not groups:
        return "".join(parts) + "<p>No errors or stack traces in the nodes' logs.</p>"
    rows = []
    for g in groups:
        first = g.get("first") or {}
        nodes = ", ".join(f"{n} ×{c}" for n, c in g.get("nodes", {}).items())
        where = f"{first.get('node', '')} {first.get('file', '')}:{first.get('line', '')}"
        rows.append(f"<tr><td class='num'>{int(g['count'])}</td>"
                    f"<td><span class='level {esc(g['level'])}'>{esc(g['level'])}</span> "
                    f"<code>{esc(g['signature'].removeprefix(str(g['level'])).strip())}</code>"
                    f"<br><span class='muted'>{esc(nodes)}</span></td>"
                    f"<td><details><summary>{esc(where)}{' at ' + esc(first['time']) if first.get('time') else ''}"
                    f"</summary><pre>{esc(first.get('text', ''))}</pre></details></td></tr>")
    return ("".join(parts) + "<table class='wide stack'><tr><th>count</th><th>signature (nodes)</th>"
            "<th>first occurrence</th></tr>" + "".join(rows) + "</table>")


def _excerpt_html(events: list[dict]) -> str:
    events = [e for e in events if e["process"] != NEMESIS]  # those are in the nemesis table
    if not events:
        return ""
    rows = "".join(f"<tr id='e{int(e['index'])}'><td class='num'>{int(e['index'])}</td>"
                   f"<td class='num'>{e['time'] / 1e9:.6f}</td><td><pre>{esc(orjson.dumps(e).decode())}</pre></td></tr>"
                   for e in sorted(events, key=lambda e: e["index"]))
    return ("<h2>History excerpt</h2><p class='muted'>The events behind the examples above, with context.</p>"
            f"<table class='wide'><tr><th>index</th><th>time (s)</th><th>event</th></tr>{rows}</table>")


def _files_html(files: list[str]) -> str:
    links = [f"<li><a href='{esc(f)}'>{esc(f)}</a></li>" for f in files]
    return f"<h2>Files</h2><ul>{''.join(links)}</ul>" if links else ""

