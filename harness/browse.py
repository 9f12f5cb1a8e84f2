"""What `harness serve` shows of a results folder, as plain functions of the
folder (no HTTP here): the mapping of a request's path to a file inside the
folder, which refuses anything that could lead outside it; the index of runs
with filters; a folder's listing; and the side-by-side compare of two runs.

Every piece of data put into a page is HTML-escaped (`harness.report.esc`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote, unquote

from checkers.registry import NAMES as ANOMALIES
from harness.report import esc
from harness.store import RunEntry, index_page

# Percent-escapes that could smuggle a separator or a dot past the check of
# path segments: / \ . and NUL. No link the harness writes needs them.
_SMUGGLED = re.compile(r"%(2f|5c|2e|00)", re.IGNORECASE)
FILTERS = ("system", "scenario", "verdict", "date")
VERDICTS = ("VALID", "INVALID", "no results")


class Refused(Exception):
    """A request path that names nothing servable: `status` is 404 (no such
    file, or a form of path the server never serves) or 403 (it leads outside
    the results folder)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def resolve(root: Path, raw_path: str) -> Path:
    """The file or folder inside `root` that `raw_path` (a request's path,
    still percent-encoded, without the query) names, with symlinks resolved.

    Refused: NUL bytes, backslashes, percent-encoded slashes, dots,
    backslashes or NULs, empty, `.`, `..` or hidden (dot) segments, anything
    not starting with `/`, and every path whose real location (symlinks
    followed) is not inside `root`."""
    if not raw_path.startswith("/") or "\x00" in raw_path or "\\" in raw_path or _SMUGGLED.search(raw_path):
        raise Refused(404, "not a path this server serves")
    try:
        decoded = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise Refused(404, "not a path this server serves") from None
    if "\x00" in decoded or "\\" in decoded:
        raise Refused(404, "not a path this server serves")
    parts = decoded[1:].split("/")
    if parts and parts[-1] == "":  # a folder's trailing slash
        parts.pop()
    for part in parts:
        if part == "" or part.startswith("."):  # '', '.', '..' and hidden files
            raise Refused(404, "not a path this server serves")
    real_root = root.resolve()
    try:
        real = real_root.joinpath(*parts).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, a symlink loop, a name too long
        raise Refused(404, "no such file") from None
    if real != real_root and not real.is_relative_to(real_root):
        raise Refused(403, "outside the results folder")
    return real


# -- the index


def filter_options(entries: list[RunEntry]) -> dict[str, list[str]]:
    """The values each filter can take among `entries`, sorted."""
    return {"system": sorted({r.system for r in entries if r.system}),
            "scenario": sorted({r.scenario for r in entries if r.scenario}),
            "verdict": list(VERDICTS)}


def select(entries: list[RunEntry], filters: dict[str, str]) -> list[RunEntry]:
    """The runs that match every filter given (an empty value matches all):
    system, scenario and verdict exactly, date as a prefix of the start
    time (2026-11-23, or 2026-11 for the month)."""
    chosen = []
    for r in entries:
        if filters.get("system") and r.system != filters["system"]:
            continue
        if filters.get("scenario") and r.scenario != filters["scenario"]:
            continue
        if filters.get("verdict") and r.verdict != filters["verdict"]:
            continue
        if filters.get("date") and not r.started.startswith(filters["date"]):
            continue
        chosen.append(r)
    return chosen


def index(entries: list[RunEntry], filters: dict[str, str], root: Path | None = None) -> str:
    """The index page of the server: links to the nightly pages (if `root`
    holds trends.html), the filters' form, then the matching runs with a
    compare form."""
    chosen = select(entries, filters)
    fields = []
    for name, values in filter_options(entries).items():
        current = filters.get(name, "")
        options = "".join(f"<option value='{esc(v)}'{' selected' if v == current else ''}>{esc(v)}</option>"
                          for v in values)
        fields.append(f"<label>{name} <select name='{name}'><option value=''>any</option>{options}</select></label>")
    fields.append(f"<label>date <input type='text' name='date' value='{esc(filters.get('date', ''))}' "
                  "placeholder='YYYY-MM-DD' size='10'></label>")
    form = (f"<form class='filters' method='get' action='/'>{''.join(fields)}<button type='submit'>filter</button>"
            f" <a href='/'>all runs</a></form><p>{len(chosen)} of {len(entries)} runs</p>")
    nightly = ""
    if root is not None and (root / "trends.html").is_file():  # `harness nightly` wrote its pages
        nights = sorted(p.parent.name for p in root.glob("nightly/*/nightly.html"))
        nightly = ("<p>nightly: <a href='/trends.html'>trends across nights</a>"
                   + "".join(f" · <a href='/nightly/{esc(quote(n))}/nightly.html'>{esc(n)}</a>" for n in nights[-7:])
                   + "</p>")
    return index_page(chosen, before=nightly + form, compare=True)


# -- a folder


def listing(root: Path, folder: Path) -> str:
    """A folder inside the results folder as a page of links (hidden names left out)."""
    rel = folder.relative_to(root.resolve()).as_posix()
    rel = "" if rel == "." else rel
    rows = [] if not rel else ["<li><a href='../'>../</a></li>"]
    if (folder / "report.html").is_file():
        rows.append("<li><a href='report.html'><b>report.html</b></a></li>")
    for child in sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name)):
        if child.name.startswith("."):
            continue
        name = child.name + ("/" if child.is_dir() else "")
        size = ""
        if child.is_file():
            size = f" <small>{child.stat().st_size:,} bytes</small>"
        rows.append(f"<li><a href='{esc(quote(name))}'>{esc(name)}</a>{size}</li>")
    return _page(f"results/{rel}", f"<p><a href='/'>all runs</a></p><ul>{''.join(rows)}</ul>")


# -- the compare view


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    """Nested settings as dotted keys (`broker.min.insync.replicas`)."""
    flat: dict[str, object] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def throughput(results: dict) -> dict[str, object]:
    """What a run achieved, from its results.json: sends by outcome, polls,
    records read, acknowledged sends per second of sending, send latency."""
    counts = results.get("counts", {})
    sends = counts.get("sends", {})
    stats = results.get("stats", {})
    seconds = {row.get("second") for row in stats.get("throughput", [])
               if row.get("f") == "send" and row.get("type") == "ok"}
    latency = next((row for row in stats.get("latency", [])
                    if row.get("f") == "send" and row.get("type") == "ok"), {})
    ok = sends.get("ok")
    return {
        "sends ok": ok, "sends fail": sends.get("fail"), "sends info": sends.get("info"),
        "polls ok": counts.get("polls", {}).get("ok"), "records read": counts.get("records_read"),
        "acknowledged sends per second": (round(ok / len(seconds), 1) if isinstance(ok, int) and seconds else None),
        "send latency p50 (ms)": latency.get("p50_ms"), "send latency p99 (ms)": latency.get("p99_ms"),
        "history events": results.get("checker", {}).get("events"),
    }


def _cell(v) -> str:
    if v is None:
        return ""
    return esc(json.dumps(v) if isinstance(v, (list, dict)) else v)


def compare(a: RunEntry, b: RunEntry) -> str:
    """Two runs side by side: what they are, the settings that differ (the
    same ones folded), anomaly counts, throughput."""
    def row(label, x, y, differ=None) -> str:
        differ = (x != y) if differ is None else differ
        return (f"<tr{' class=differ' if differ else ''}><th>{esc(label)}</th>"
                f"<td>{_cell(x)}</td><td>{_cell(y)}</td></tr>")

    head = (f"<tr><th></th><th>a: <a href='/{esc(quote(a.rel))}/'>{esc(a.rel)}</a></th>"
            f"<th>b: <a href='/{esc(quote(b.rel))}/'>{esc(b.rel)}</a></th></tr>")
    about = [row("started", a.started, b.started, False), row("test", a.run.get("name"), b.run.get("name")),
             row("system", a.system, b.system), row("scenario", a.scenario, b.scenario),
             row("outcome", a.run.get("outcome"), b.run.get("outcome")), row("verdict", a.verdict, b.verdict),
             row("errors", ", ".join(a.errors), ", ".join(b.errors))]
    reports = (f"<tr><th>report</th><td>{_report_link(a)}</td><td>{_report_link(b)}</td></tr>")

    sa, sb = _settings(a), _settings(b)
    keys = sorted(set(sa) | set(sb))
    differ = [row(k, sa.get(k), sb.get(k)) for k in keys if sa.get(k) != sb.get(k)]
    same = [row(k, sa.get(k), sb.get(k)) for k in keys if sa.get(k) == sb.get(k)]

    aa, ab = a.results.get("anomalies", {}), b.results.get("anomalies", {})
    names = [n for n in ANOMALIES if n in aa or n in ab] + sorted((set(aa) | set(ab)) - set(ANOMALIES))
    anomalies = [row(n, _count(aa.get(n)), _count(ab.get(n))) for n in names]

    ta, tb = throughput(a.results), throughput(b.results)
    speed = [row(k, ta[k], tb[k]) for k in ta]

    table = lambda rows: f"<table class=cmp>{head}{''.join(rows)}</table>"  # noqa: E731
    body = (f"<p><a href='/'>all runs</a></p><h2>the runs</h2>{table(about + [reports])}"
            f"<h2>settings that differ ({len(differ)})</h2>"
            + (table(differ) if differ else "<p>none: the same settings</p>")
            + (f"<details><summary>the same in both ({len(same)})</summary>{table(same)}</details>" if same else "")
            + f"<h2>anomalies</h2>{table(anomalies) if anomalies else '<p>no results</p>'}"
            f"<h2>throughput</h2>{table(speed)}")
    return _page(f"compare {a.rel} and {b.rel}", body)


def _settings(r: RunEntry) -> dict[str, object]:
    """A run's settings as dotted keys: its spec and the versions it ran."""
    flat = flatten(r.spec)
    flat.pop("results", None)  # where a run was written says nothing about it
    versions = r.run.get("versions")
    if isinstance(versions, dict):
        flat.update(flatten(versions, "versions."))
    return flat


def _count(a) -> str | None:
    if not isinstance(a, dict):
        return None
    mark = " (error)" if a.get("error") else " (allowed)" if a.get("allowed") and a.get("count") else ""
    return f"{a.get('count', '')}{mark}"


def _report_link(r: RunEntry) -> str:
    return f"<a href='/{esc(quote(r.rel))}/report.html'>report.html</a>" if r.has_report else "none"


def _page(title: str, body: str) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)}</title><style>"
            "body{font-family:system-ui,sans-serif;margin:2em;max-width:100%} table{border-collapse:collapse}"
            "td,th{border:1px solid #dee2e6;padding:.25em .6em;text-align:left;overflow-wrap:anywhere}"
            "tr.differ td{background:#fff3bf} details{margin:.5em 0}"
            f"</style></head><body><h1>{esc(title)}</h1>{body}</body></html>")
