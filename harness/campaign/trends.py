"""The nights as data: each night's summary.json read back, each scenario's
rates per night, and the regressions of the newest night; the pages that
show them (nightly.html, results/trends.html) are harness/pages/nightly.py's.

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
from dataclasses import dataclass
from pathlib import Path

from core.files import write_whole
from harness.campaign.matrix import CLASSES, ERROR, FAIL, FLAKY, HANG, INTERRUPTED, PASS
from harness.pages.nightly import nightly_page, percent, trends_page

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
    def mark(self) -> str:
        """The class its rate is shown in: PASS where every run met the
        expectation, FAIL where one failed or hung, FLAKY otherwise."""
        return PASS if self.met == self.runs else FAIL if self.classes[FAIL] + self.classes[HANG] else FLAKY

    @property
    def others(self) -> dict[str, int]:
        """The classes other than PASS its runs fell in, with their counts."""
        return {c: n for c, n in self.classes.items() if c != PASS and n}

    @property
    def unfinished(self) -> list[str]:
        """ERROR and INTERRUPTED, where its runs came to no verdict."""
        return [c for c in (ERROR, INTERRUPTED) if self.classes[c]]

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
                                        f"detection rate fell: {percent(s.rate)} tonight ({s.met}/{s.runs}), "
                                        f"{percent(pooled)} over the last {len(past)} night(s)"))
    return found


def trends_html(all_nights: list[Night]) -> str:
    """trends.html of these nights (oldest first): the last SHOWN of them, and the newest's regressions."""
    shown = all_nights[-SHOWN:]
    return trends_page(shown, [stats(n) for n in shown], regressions(all_nights), len(all_nights))


def write_pages(results: Path, night_dir: Path) -> tuple[Path, Path]:
    """nightly.html of this night and results/trends.html, each replaced whole."""
    all_nights = nights(results)
    night = next((n for n in all_nights if n.dir.resolve() == night_dir.resolve()), None)
    if night is None:
        night = Night(night_dir, json.loads((night_dir / "summary.json").read_text()))
    write_whole(night_dir / "nightly.html", nightly_page(night))
    write_whole(results / "trends.html", trends_html(all_nights))
    return night_dir / "nightly.html", results / "trends.html"
