"""The pages' one HTML helper: escaping, the page shell with the one
stylesheet, and tables.

Every page the harness writes or serves is built here: the report, the
timeline, the index of runs, a folder's listing, the compare view, the
nightly and trend pages. A page is self-contained (its style inline, its
images inline), so it reads the same from disk, from `harness serve` and
attached to a mail. Every datum goes through `esc`; the helpers escape what
they are given as text (a title, a column's name, a key) and take cells as
HTML already made.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Iterable, Sequence

STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:2em;color:#212529}
body.narrow{margin:2em auto;max-width:1100px;padding:0 1em}
h1{margin-bottom:.2em;overflow-wrap:anywhere} p,li{overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.5em 0 1.5em;max-width:100%}
td,th{border:1px solid #dee2e6;padding:.25em .6em;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f1f3f5;overflow-wrap:normal} td.num{text-align:right;overflow-wrap:normal} .wide{width:100%}
code,pre{font-family:ui-monospace,monospace;font-size:.85em} pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0}
img{max-width:100%;height:auto} details{margin:.3em 0} details summary{cursor:pointer}
tr:target{background:#fff3bf} tr.differ td{background:#fff3bf}
.muted{color:#868e96} .small{font-size:85%;color:#495057} .error{color:#c92a2a;font-weight:bold}
.verdict{font-size:1.4em;font-weight:bold;padding:.4em .8em;border-radius:6px;display:inline-block}
.valid{background:#d3f9d8;color:#2b8a3e;font-weight:bold} .invalid{background:#ffe3e3;color:#c92a2a;font-weight:bold}
.flag{background:#ffe3e3;color:#c92a2a;padding:.4em .8em;border-radius:6px}
.level{font-weight:bold;font-size:.8em} .FATAL,.CRITICAL,.SEVERE,.ERROR{color:#c92a2a}
.settings th{width:14em;font-weight:normal;overflow-wrap:anywhere}
.story ol{margin:.3em 0 .8em;padding-left:1.4em}
.PASS{background:#d3f9d8} .FAIL,.HANG{background:#ffc9c9} .FLAKY{background:#fff3bf}
.INTERRUPTED,.no-results{background:#e9ecef} td.ERROR,span.ERROR{background:#e9ecef;color:inherit}
.regression{color:#c92a2a;font-weight:bold}
form.filters{margin:0 0 1em} form.filters label{margin-right:1em}
.wrap{overflow-x:auto;border:1px solid #dee2e6} svg{display:block}
svg .ok{fill:#2b8a3e} svg .fail{fill:#c92a2a} svg .info{fill:#e67700} svg .fault{opacity:.45}
svg text{font-size:11px;font-family:ui-monospace,monospace} svg .grid{stroke:#e9ecef}
@media (max-width:640px){body,body.narrow{margin:1em auto;padding:0 .5em} td,th{padding:.2em .3em}
 .stack tr,.stack td{display:block;border:0} .stack tr{border-top:1px solid #dee2e6;padding:.3em 0}
 .stack tr:first-child{display:none} .stack td.num{text-align:left} .settings th{width:auto}
 .labelled td{display:inline-block;padding-right:1em} .labelled td::before{content:attr(data-label) " ";color:#868e96}}
"""


def esc(x) -> str:
    """Text as HTML, quotes included (it may land in an attribute); None as nothing."""
    return html.escape("" if x is None else str(x), quote=True)


def page(title: str, body: str, narrow: bool = False) -> str:
    """A whole page: `title` (text) and `body` (HTML), the one stylesheet inline;
    `narrow` keeps a long read to a column (the report)."""
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
            f"<body{' class=narrow' if narrow else ''}>{body}</body></html>")


@dataclass
class Cell:
    """A table cell: its HTML, and a class or a column label (shown before the
    value where a narrow screen stacks the rows)."""

    html: str
    cls: str = ""
    label: str = ""


@dataclass
class Row:
    """A table row: its cells (HTML, or Cell), and an anchor id or a class."""

    cells: Sequence[str | Cell]
    id: str = ""
    cls: str = ""


def attrs(**values: str) -> str:
    """HTML attributes, each escaped; those empty left out (`cls` is `class`)."""
    return "".join(f" {'class' if k == 'cls' else k.replace('_', '-')}='{esc(v)}'" for k, v in values.items() if v)


def _cell(c: str | Cell) -> str:
    if isinstance(c, Cell):
        return f"<td{attrs(cls=c.cls, data_label=c.label)}>{c.html}</td>"
    return f"<td>{c}</td>"


def table(head: Sequence[str] | None, rows: Iterable[Row | Sequence[str | Cell]], cls: str = "",
          id: str = "") -> str:  # noqa: A002 - the attribute's name
    """A table: the columns' names (text), then one row per item of `rows`."""
    out = [f"<table{attrs(cls=cls, id=id)}>"]
    if head is not None:
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
    for r in rows:
        r = r if isinstance(r, Row) else Row(r)
        out.append(f"<tr{attrs(id=r.id, cls=r.cls)}>" + "".join(_cell(c) for c in r.cells) + "</tr>")
    return "".join(out) + "</table>"


def key_values(rows: Iterable[tuple[str, str]], cls: str = "settings", value_cls: str = "") -> str:
    """A table of (key as text, value as HTML) rows, the key a header cell."""
    return (f"<table{attrs(cls=cls)}>"
            + "".join(f"<tr><th>{esc(k)}</th><td{attrs(cls=value_cls)}>{v}</td></tr>" for k, v in rows) + "</table>")


def link(href: str, text: str) -> str:
    """An anchor; both escaped (an href with a quote cannot break out)."""
    return f"<a{attrs(href=href)}>{esc(text)}</a>"


