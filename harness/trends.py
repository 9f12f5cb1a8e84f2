"""The nightly pages: one night's matrix (`nightly.html`, beside its
summary.json) and the trends across nights (`results/trends.html`), with
regressions flagged. Plain functions of summary.json files; every datum is
HTML-escaped (`harness.report.esc`); pages fetch nothing from elsewhere.

Rates count each cell's first run only (re-runs under --deflake happen only
after a failure, so counting them would bias the rates), and only runs that
came to a verdict (PASS, FAIL, FLAKY, HANG: not ERROR or INTERRUPTED).

A regression (exact; docs/nightly.md):
  - newly failing: tonight a cell of the scenario is FAIL or HANG, and in each
    of the last nights that ran it (up to `LOOKBACK`, at least one) every cell
    was PASS;
  - detection fell: a known-unsafe scenario's detection rate tonight is below
    its rate over the last nights that ran it (up to `LOOKBACK`, pooled).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from core.files import write_whole
from harness.matrix import CLASSES, ERROR, FAIL, HANG, INTERRUPTED, PASS
from harness.report import esc

LOOKBACK = 3  # nights compared with tonight
SHOWN = 14  # nights shown on the trend page
NIGHTLY = "nightly"  # results/nightly/<night>/


@dataclass
class Night:
    """One night's summary.json and where it is."""

    dir: Path
    summary: dict

    @property
    def name(self) -> str:
        return str(self.summary.get("night") or self.dir.name)

    @property
    def started(self) -> str:
        return str(self.summary.get("started", ""))


def nights(results: Path) -> list[Night]:
    """Every night under results/nightly with a readable summary.json, oldest first."""
    found = []
    for path in (results / NIGHTLY).glob("*/summary.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("runs"), list):
            found.append(Night(path.parent, data))
    return sorted(found, key=lambda n: (n.started, n.name))


def key(run: dict) -> tuple[str, str]:
    return str(run.get("label", "")), str(run.get("system", ""))


@dataclass
class Stats:
    """One scenario (label, system) in one night."""

    runs: int = 0  # cells that came to a verdict
    met: int = 0  # of those, first runs that met the expectation
    valid: int = 0  # of those, first runs that were VALID
    classes: dict | None = None
    seconds: float | None = None  # mean wall time of the first runs
    acks_per_s: float | None = None  # mean
    recovery_s: float | None = None  # mean, where measured
    kind: str = "other"

    @property
    def rate(self) -> float | None:
        """How often the expectation held: the detection rate of a known-unsafe
        scenario, the valid rate of a safe one."""
        return self.met / self.runs if self.runs else None


def stats(night: Night) -> dict[tuple[str, str], Stats]:
    out: dict[tuple[str, str], Stats] = {}
    for run in night.summary["runs"]:
        s = out.setdefault(key(run), Stats(classes={c: 0 for c in CLASSES}, kind=str(run.get("kind", "other"))))
        outcome = run.get("outcome")
        if outcome in s.classes:
            s.classes[outcome] += 1
        if outcome in (ERROR, INTERRUPTED) or outcome not in CLASSES:
            continue
        s.runs += 1
        s.met += bool(run.get("met"))
        s.valid += run.get("verdict") == "valid"
    for k, s in out.items():
        runs = [r for r in night.summary["runs"] if key(r) == k and r.get("outcome") not in (ERROR, INTERRUPTED)]
        s.seconds = _mean(r.get("seconds") for r in runs)
        s.acks_per_s = _mean(r.get("acks_per_s") for r in runs)
        s.recovery_s = _mean(r.get("recovery_s") for r in runs)
    return out


def _mean(values) -> float | None:
    xs = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(xs) / len(xs) if xs else None


@dataclass
class Regression:
    label: str
    system: str
    night: str
    why: str


def regressions(all_nights: list[Night]) -> list[Regression]:
    """The regressions of the newest night against the nights before it (module docstring)."""
    if len(all_nights) < 2:
        return []
    tonight, before = all_nights[-1], all_nights[:-1]
    now = stats(tonight)
    earlier = [stats(n) for n in before]
    found = []
    for k, s in now.items():
        past = [e[k] for e in earlier if k in e and e[k].runs][-LOOKBACK:]
        if not past:
            continue
        failing = s.classes[FAIL] + s.classes[HANG]
        if failing and all(p.classes[PASS] == p.runs for p in past):  # `past` holds nights with runs only
            found.append(Regression(k[0], k[1], tonight.name,
                                    f"met its expectation in the last {len(past)} night(s); tonight {failing} of "
                                    f"{s.runs} run(s) {'FAIL' if s.classes[FAIL] else 'HANG'}"))
        if s.kind == "unsafe" and s.rate is not None:
            pooled = sum(p.met for p in past) / sum(p.runs for p in past)
            if s.rate < pooled:
                found.append(Regression(k[0], k[1], tonight.name,
                                        f"detection rate fell: {_pct(s.rate)} tonight ({s.met}/{s.runs}), "
                                        f"{_pct(pooled)} over the last {len(past)} night(s)"))
    return found


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:.0f}%"


def _num(x: float | None, digits: int = 0) -> str:
    return "" if x is None else f"{x:.{digits}f}"


STYLE = ("body{font-family:system-ui,sans-serif;margin:2em} table{border-collapse:collapse;margin:.5em 0}"
         "td,th{border:1px solid #dee2e6;padding:.25em .6em;vertical-align:top} th{background:#f1f3f5}"
         ".PASS{background:#d3f9d8} .FAIL,.HANG{background:#ffc9c9} .FLAKY{background:#fff3bf}"
         ".ERROR,.INTERRUPTED{background:#e9ecef} .regression{color:#c92a2a;font-weight:bold}"
         "td.num{text-align:right} .small{font-size:85%;color:#495057}")


def _page(title: str, body: str) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>")


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


def nightly_page(night: Night) -> str:
    """nightly.html: the night's matrix as a table, one row per run, linking each report."""
    s = night.summary
    counts = s.get("counts", {})
    state = ("complete" if s.get("complete") else "interrupted" if s.get("interrupted")
             else "in progress (or killed)")
    head = (f"<h1>nightly {esc(s.get('suite'))}: {esc(night.name)}</h1>"
            f"<p>matrix {esc(s.get('matrix'))}, started {esc(s.get('started'))}, last written "
            f"{esc(s.get('written'))}; {esc(len(s['runs']))} of {esc(s.get('planned') or '?')} runs, {esc(state)}. "
            + ", ".join(f"<span class='{c}'>{esc(c)} {esc(counts.get(c, 0))}</span>" for c in CLASSES if counts.get(c))
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
    return _page(f"nightly {s.get('suite')} {night.name}", head + table)


def trends_page(all_nights: list[Night]) -> str:
    """trends.html: per scenario, per night, how often its expectation held,
    durations and throughput; the regressions of the newest night on top."""
    shown = all_nights[-SHOWN:]
    per_night = [stats(n) for n in shown]
    keys = sorted({k for st in per_night for k in st})
    found = regressions(all_nights)
    flagged = {(g.label, g.system) for g in found}
    body = [f"<h1>nightly trends</h1><p>{len(all_nights)} night(s); the last {len(shown)} shown, oldest first. "
            "Rates count each run's first attempt that came to a verdict; a known-unsafe scenario's rate is how "
            "often it was detected, a safe one's how often it was valid.</p>"]
    if found:
        body.append("<h2 class='regression'>regressions tonight</h2><ul>" + "".join(
            f"<li class='regression'>{esc(g.label)} ({esc(g.system)}): {esc(g.why)}</li>" for g in found) + "</ul>")
    else:
        body.append("<h2>regressions tonight</h2><p>none" + (" (one night only: nothing to compare)"
                                                              if len(all_nights) < 2 else "") + "</p>")
    nights_head = "".join(f"<th><a href='{esc(NIGHTLY)}/{esc(n.dir.name)}/nightly.html'>{esc(n.name)}</a></th>"
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
    return _page("nightly trends", "".join(body))


def _rate_cell(s: Stats) -> str:
    if not s.runs:
        bad = [c for c in (ERROR, INTERRUPTED) if s.classes[c]]
        return f"<span class='{bad[0] if bad else ''}'>{esc(', '.join(bad) or '-')}</span>"
    cls = PASS if s.met == s.runs else FAIL if s.classes[FAIL] + s.classes[HANG] else "FLAKY"
    extra = ", ".join(f"{c} {s.classes[c]}" for c in CLASSES if c != PASS and s.classes[c])
    return (f"<span class='{cls}'>{esc(_pct(s.rate))} ({s.met}/{s.runs})</span>"
            + (f" <span class='small'>{esc(extra)}</span>" if extra else ""))


def write_pages(results: Path, night_dir: Path) -> tuple[Path, Path]:
    """nightly.html of this night and results/trends.html, each replaced whole."""
    all_nights = nights(results)
    night = next((n for n in all_nights if n.dir.resolve() == night_dir.resolve()), None)
    if night is None:
        night = Night(night_dir, json.loads((night_dir / "summary.json").read_text()))
    write_whole(night_dir / "nightly.html", nightly_page(night))
    write_whole(results / "trends.html", trends_page(all_nights))
    return night_dir / "nightly.html", results / "trends.html"
