"""The nightly pages: one night's matrix (`nightly.html`, beside its
summary.json) and the trends across nights (`results/trends.html`), with
regressions flagged. Drawn from what harness/campaign/trends.py reads and
computes; every datum is HTML-escaped; pages fetch nothing from elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.pages.html import esc, page


def percent(x: float | None) -> str:
    """A rate as a whole percentage; nothing for none."""
    return "" if x is None else f"{x * 100:.0f}%"



def _num(x: float | None, digits: int = 0) -> str:
    return "" if x is None else f"{x:.{digits}f}"



def _link(night_dir: Path, run_dir: str | None) -> str:
    """A link from the night's folder to a run's report, relative (the pages work
    from disk and from `harness serve` alike); '' when the run has no report."""
    if not run_dir:
        return ""
    report = Path(run_dir) / "report.html"
    if not report.is_file():
        return ""
    try:
        rel = os.path.relpath(report.resolve(), night_dir.resolve())
    except ValueError:
        return ""
    return f"<a href='{esc(rel)}'>report</a>"



def nightly_page(night) -> str:
    """nightly.html: the night's matrix as a table, one row per run, linking
    each report (`night`: harness/campaign/trends.py's Night)."""
    s = night.summary
    counts = s.get("counts", {})
    state = ("complete" if s.get("complete") else "interrupted" if s.get("interrupted")
             else "in progress (or killed)")
    head = (f"<h1>nightly {esc(s.get('suite'))}: {esc(night.name)}</h1>"
            f"<p>matrix {esc(s.get('matrix'))}, started {esc(s.get('started'))}, last written "
            f"{esc(s.get('written'))}; {esc(len(s['runs']))} of {esc(s.get('planned') or '?')} runs, {esc(state)}. "
            + ", ".join(f"<span class='{esc(c)}'>{esc(c)} {esc(n)}</span>" for c, n in counts.items() if n)
            + "</p><p><a href='summary.json'>summary.json</a> · <a href='junit.xml'>junit.xml</a> · "
              "<a href='../../trends.html'>trends across nights</a></p>")
    rows = []
    for r in s["runs"]:
        expect = ", ".join(("valid" if v else "invalid") if k == "valid" else f"{k} {v}"
                           for k, v in (r.get("expect") or {}).items())
        attempts = r.get("attempts") or []
        reruns = "; ".join(f"{a.get('status')}" for a in attempts[1:])
        first = attempts[0] if attempts else {}
        why = first.get("problem") or "; ".join(first.get("misses") or [])
        rows.append(
            f"<tr><td>{esc(r.get('label'))}</td><td>{esc(r.get('system'))}</td><td class='num'>{esc(r.get('seed'))}</td>"
            f"<td>{esc(expect)}</td><td class='{esc(r.get('outcome'))}'>{esc(r.get('outcome'))}</td>"
            f"<td>{esc(r.get('verdict'))}</td><td>{esc(r.get('top_anomaly') or '')}"
            + (f" <span class='small'>({esc(r.get('top_count'))})</span>" if r.get("top_count") else "")
            + f"</td><td class='small'>{esc(why)}</td><td>{esc(reruns)}</td>"
            f"<td class='num'>{esc(_num(r.get('seconds')))}</td><td class='num'>{esc(_num(r.get('acks_per_s')))}</td>"
            f"<td class='num'>{esc(_num(r.get('recovery_s'), 1))}</td>"
            f"<td>{_link(night.dir, r.get('run_dir'))}</td></tr>")
    table = ("<table><tr><th>test</th><th>system</th><th>seed</th><th>expected</th><th>class</th><th>verdict</th>"
             "<th>top anomaly</th><th>why</th><th>re-runs</th><th>seconds</th><th>acks/s</th>"
             "<th>recovery s</th><th></th></tr>" + "".join(rows) + "</table>")
    return page(f"nightly {s.get('suite')} {night.name}", head + table)



def trends_page(shown: list, per_night: list[dict], found: list, nights: int) -> str:
    """trends.html: per scenario, per night, how often its expectation held,
    durations and throughput; the regressions of the newest night on top.
    `shown`: the nights drawn, oldest first; `per_night`: each one's stats
    by scenario; `found`: the newest night's regressions; `nights`: how many
    there are in all (harness/campaign/trends.py computes them)."""
    keys = sorted({k for st in per_night for k in st})
    flagged = {(g.label, g.system) for g in found}
    body = [f"<h1>nightly trends</h1><p>{nights} night(s); the last {len(shown)} shown, oldest first. "
            "Rates count each run's first attempt that came to a verdict; a known-unsafe scenario's rate is how "
            "often it was detected, a safe one's how often it was valid.</p>"]
    if found:
        body.append("<h2 class='regression'>regressions tonight</h2><ul>" + "".join(
            f"<li class='regression'>{esc(g.label)} ({esc(g.system)}): {esc(g.why)}</li>" for g in found) + "</ul>")
    else:
        body.append("<h2>regressions tonight</h2><p>none" + (" (one night only: nothing to compare)"
                                                              if nights < 2 else "") + "</p>")
    nights_head = "".join(f"<th><a href='nightly/{esc(n.dir.name)}/nightly.html'>{esc(n.name)}</a></th>"
                          for n in shown)
    for title, cell in (("expectation held (runs met / runs)", _rate_cell),
                        ("mean duration of a run, s", lambda s: esc(_num(s.seconds))),
                        ("acknowledged sends per second (mean)", lambda s: esc(_num(s.acks_per_s))),
                        ("recovery after the final heal, s (mean, where measured)",
                         lambda s: esc(_num(s.recovery_s, 1)))):
        rows = []
        for k in keys:
            kind = next((st[k].kind for st in per_night if k in st), "other")
            cells = "".join(f"<td class='num'>{cell(st[k]) if k in st else ''}</td>" for st in per_night)
            mark = " <span class='regression'>REGRESSION</span>" if k in flagged and title.startswith("expect") else ""
            rows.append(f"<tr><td>{esc(k[0])}{mark}</td><td>{esc(k[1])}</td><td>{esc(kind)}</td>{cells}</tr>")
        body.append(f"<h2>{esc(title)}</h2><table><tr><th>test</th><th>system</th><th>kind</th>{nights_head}</tr>"
                    + "".join(rows) + "</table>")
    return page("nightly trends", "".join(body))



def _rate_cell(s) -> str:
    if not s.runs:
        first = s.unfinished[0] if s.unfinished else ""
        return f"<span class='{esc(first)}'>{esc(', '.join(s.unfinished) or '-')}</span>"
    extra = ", ".join(f"{c} {n}" for c, n in s.others.items())
    return (f"<span class='{esc(s.mark)}'>{esc(percent(s.rate))} ({s.met}/{s.runs})</span>"
            + (f" <span class='small'>{esc(extra)}</span>" if extra else ""))

