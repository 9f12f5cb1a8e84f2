"""The pages over many runs: the index of runs (results/index.html, and
`harness serve`'s with filters and a compare form), a folder's listing, and
two runs side by side. Plain functions of core/runs.py's records; the
server's own paths and HTTP are harness/serve.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from checkers.registry import NAMES as ANOMALIES
from core.runs import RunEntry, throughput
from harness.pages.html import Cell, esc, flatten, link, page, table

INDEX_HEAD = ("started", "test", "system", "scenario", "nemesis", "run", "verdict", "errors", "sends ok", "",
              "folder")


def index_page(entries: list[RunEntry], before: str = "", compare: bool = False) -> str:
    """The index: one row per run, links relative to the results folder.
    `before` is HTML put above the table (the server's filters); `compare`
    adds the two radio columns of a compare form."""
    rows = []
    for r in entries:
        sends = r.results.get("counts", {}).get("sends", {})
        nemesis = r.spec.get("nemesis", [])
        picks = [f"<input type='radio' name='{side}' value='{esc(r.rel)}' aria-label='compare: {word}'>"
                 for side, word in (("a", "first"), ("b", "second"))] if compare else []
        rows.append([*picks, esc(r.started), esc(r.run.get("name", "")), esc(r.system), esc(r.scenario),
                     esc(",".join(map(str, nemesis)) if isinstance(nemesis, list) else nemesis),
                     esc(r.run.get("outcome", "")), Cell(r.verdict, r.verdict.lower().replace(" ", "-")),
                     esc(", ".join(r.errors)), esc(sends.get("ok", "")),
                     link(f"{r.rel}/report.html", "report") if r.has_report else "", link(f"{r.rel}/", r.rel)])
    body = table((("a", "b") if compare else ()) + INDEX_HEAD, rows)
    if compare:
        body = (f"<form method='get' action='/compare'>{body}"
                "<p><button type='submit'>compare the runs picked as a and b</button></p></form>")
    return page("harness runs", f"<h1>harness runs</h1>{before}{body}")


def filters_form(options: dict[str, list[str]], filters: dict[str, str], shown: int, total: int) -> str:
    """The server's filters above the index: a choice per filter, the date as text."""
    fields = []
    for name, values in options.items():
        current = filters.get(name, "")
        choices = "".join(f"<option value='{esc(v)}'{' selected' if v == current else ''}>{esc(v)}</option>"
                          for v in values)
        fields.append(f"<label>{esc(name)} <select name='{esc(name)}'><option value=''>any</option>{choices}"
                      "</select></label>")
    fields.append(f"<label>date <input type='text' name='date' value='{esc(filters.get('date', ''))}' "
                  "placeholder='YYYY-MM-DD' size='10'></label>")
    return (f"<form class='filters' method='get' action='/'>{''.join(fields)}<button type='submit'>filter</button>"
            f" <a href='/'>all runs</a></form><p>{shown} of {total} runs</p>")


def nightly_links(nights: list[str]) -> str:
    """Links to the trend page and the last nights' pages (`harness nightly`'s)."""
    return ("<p>nightly: <a href='/trends.html'>trends across nights</a>"
            + "".join(f" · <a href='/nightly/{esc(quote(n))}/nightly.html'>{esc(n)}</a>" for n in nights[-7:])
            + "</p>")


def listing(rel: str, folder: Path) -> str:
    """A folder of the results folder (`rel` inside it) as a page of links, hidden names left out."""
    items = [] if not rel else ["<li><a href='../'>../</a></li>"]
    if (folder / "report.html").is_file():
        items.append("<li><a href='report.html'><b>report.html</b></a></li>")
    for child in sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name)):
        if child.name.startswith("."):
            continue
        name = child.name + ("/" if child.is_dir() else "")
        size = f" <small>{child.stat().st_size:,} bytes</small>" if child.is_file() else ""
        items.append(f"<li><a href='{esc(quote(name))}'>{esc(name)}</a>{size}</li>")
    return page(f"results/{rel}", f"<h1>{esc(f'results/{rel}')}</h1><p><a href='/'>all runs</a></p>"
                                  f"<ul>{''.join(items)}</ul>")


def _value(v) -> str:
    if v is None:
        return ""
    return esc(json.dumps(v) if isinstance(v, (list, dict)) else v)


def compare(a: RunEntry, b: RunEntry) -> str:
    """Two runs side by side: what they are, the settings that differ (the
    same ones folded), anomaly counts, throughput."""
    def row(label, x, y, differ=None) -> str:
        differ = (x != y) if differ is None else differ
        return (f"<tr{' class=differ' if differ else ''}><th>{esc(label)}</th>"
                f"<td>{_value(x)}</td><td>{_value(y)}</td></tr>")

    head = (f"<tr><th></th><th>a: <a href='/{esc(quote(a.rel))}/'>{esc(a.rel)}</a></th>"
            f"<th>b: <a href='/{esc(quote(b.rel))}/'>{esc(b.rel)}</a></th></tr>")
    about = [row("started", a.started, b.started, False), row("test", a.run.get("name"), b.run.get("name")),
             row("system", a.system, b.system), row("scenario", a.scenario, b.scenario),
             row("outcome", a.run.get("outcome"), b.run.get("outcome")), row("verdict", a.verdict, b.verdict),
             row("errors", ", ".join(a.errors), ", ".join(b.errors))]
    reports = f"<tr><th>report</th><td>{_report_link(a)}</td><td>{_report_link(b)}</td></tr>"

    sa, sb = _settings(a), _settings(b)
    keys = sorted(set(sa) | set(sb))
    differ = [row(k, sa.get(k), sb.get(k)) for k in keys if sa.get(k) != sb.get(k)]
    same = [row(k, sa.get(k), sb.get(k)) for k in keys if sa.get(k) == sb.get(k)]

    aa, ab = a.results.get("anomalies", {}), b.results.get("anomalies", {})
    names = [n for n in ANOMALIES if n in aa or n in ab] + sorted((set(aa) | set(ab)) - set(ANOMALIES))
    anomalies = [row(n, _count(aa.get(n)), _count(ab.get(n))) for n in names]

    ta, tb = throughput(a.results), throughput(b.results)
    speed = [row(k, ta[k], tb[k]) for k in ta]

    def side_by_side(rows: list[str]) -> str:
        return f"<table>{head}{''.join(rows)}</table>"

    title = f"compare {a.rel} and {b.rel}"
    body = (f"<h1>{esc(title)}</h1><p><a href='/'>all runs</a></p><h2>the runs</h2>{side_by_side(about + [reports])}"
            f"<h2>settings that differ ({len(differ)})</h2>"
            + (side_by_side(differ) if differ else "<p>none: the same settings</p>")
            + (f"<details><summary>the same in both ({len(same)})</summary>{side_by_side(same)}</details>"
               if same else "")
            + f"<h2>anomalies</h2>{side_by_side(anomalies) if anomalies else '<p>no results</p>'}"
            f"<h2>throughput</h2>{side_by_side(speed)}")
    return page(title, body)


def _settings(r: RunEntry) -> dict[str, object]:
    """A run's settings as dotted keys: its spec and the versions it ran."""
    flat = dict(flatten(r.spec)) if r.spec else {}
    flat.pop("results", None)  # where a run was written says nothing about it
    versions = r.run.get("versions")
    if isinstance(versions, dict) and versions:
        flat.update(flatten(versions, "versions"))
    return flat


def _count(a) -> str | None:
    if not isinstance(a, dict):
        return None
    mark = " (error)" if a.get("error") else " (allowed)" if a.get("allowed") and a.get("count") else ""
    return f"{a.get('count', '')}{mark}"


def _report_link(r: RunEntry) -> str:
    return f"<a href='/{esc(quote(r.rel))}/report.html'>report.html</a>" if r.has_report else "none"
