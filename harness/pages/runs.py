"""The pages over many runs: the index of runs (results/index.html, and
`harness serve`'s with filters and a compare form), a folder's listing, and
runs side by side. Plain functions of core/runs.py's records; the
server's own paths and HTTP are harness/serve.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from checkers.registry import NAMES as ANOMALIES
from core.runs import Row, RunEntry, side_by_side
from harness.pages.html import Cell, esc, link, page, table

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


def compare(entries: list[RunEntry]) -> str:
    """Runs side by side (core/runs.py's `side_by_side`): what each is, then
    section by section the rows that differ, marked, and those the same in
    every run folded below them."""
    def row(r: Row) -> str:
        return (f"<tr{' class=differ' if r.differs else ''}><th>{esc(r.label)}</th>"
                + "".join(f"<td>{_value(v)}</td>" for v in r.values) + "</tr>")

    letters = "abcdefghijklmnopqrstuvwxyz"
    head = "<tr><th></th>" + "".join(f"<th>{letters[i % 26]}: <a href='/{esc(quote(e.rel))}/'>{esc(e.rel)}</a></th>"
                                     for i, e in enumerate(entries)) + "</tr>"
    reports = "<tr><th>report</th>" + "".join(f"<td>{_report_link(e)}</td>" for e in entries) + "</tr>"

    def side_by_side_table(rows: list[str]) -> str:
        return f"<table>{head}{''.join(rows)}</table>"

    body = []
    for i, section in enumerate(side_by_side(entries, ANOMALIES)):
        differ, same = section.split()
        if i == 0:  # what each run is: every row, the report links after them
            body.append(f"<h2>{esc(section.title)}</h2>"
                        + side_by_side_table([row(r) for r in section.rows] + [reports]))
            continue
        body.append(f"<h2>{esc(section.title)}: {len(differ)} of {len(section.rows)} differ</h2>"
                    + (side_by_side_table([row(r) for r in differ]) if differ else "<p>none differ</p>")
                    + (f"<details><summary>the same in every run ({len(same)})</summary>"
                       f"{side_by_side_table([row(r) for r in same])}</details>" if same else ""))
    title = "compare " + ", ".join(e.rel for e in entries)
    return page(title, f"<h1>{esc(title)}</h1><p><a href='/'>all runs</a></p>" + "".join(body))


def _report_link(r: RunEntry) -> str:
    return f"<a href='/{esc(quote(r.rel))}/report.html'>report.html</a>" if r.has_report else "none"
