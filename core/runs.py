"""The results folder as read: one record per run, what its run.json and
results.json say (docs/running.md, "What a run leaves"), and queries over them.

The index of runs, `harness serve`, the compare view and the nightly read
runs through here; none of them parses a run's files itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

VERDICTS = ("VALID", "INVALID", "no results")
FILTERS = ("system", "scenario", "verdict", "date")


@dataclass(frozen=True)
class RunEntry:
    """One run of the results folder: its folder, what its run.json and
    results.json say ({} where a file is missing or torn)."""

    path: Path  # root/<name>/<timestamp>
    rel: str  # <name>/<timestamp>, with forward slashes
    run: dict
    results: dict

    @property
    def started(self) -> str:
        return str(self.run.get("started", ""))

    @property
    def spec(self) -> dict:
        spec = self.run.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def system(self) -> str:
        return str(self.spec.get("system", ""))

    @property
    def scenario(self) -> str:
        return str(self.spec.get("scenario", "") or "")

    @property
    def verdict(self) -> str:
        """VALID, INVALID, or "no results"."""
        if "valid" in self.results:
            return "VALID" if self.results["valid"] else "INVALID"
        return "no results"

    @property
    def errors(self) -> list[str]:
        """The anomalies the checker counted as errors."""
        anomalies = self.results.get("anomalies", {})
        return [n for n, a in anomalies.items() if isinstance(a, dict) and a.get("error")]

    @property
    def has_report(self) -> bool:
        return (self.path / "report.html").is_file()


def _json_or_empty(path: Path) -> dict:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def runs(root: Path) -> list[RunEntry]:
    """Every run under `root` (a folder <name>/<timestamp>/ holding run.json,
    and the nightly's nightly/<night>/runs/<name>/<timestamp>/), newest first."""
    root = Path(root)
    found = []
    for run_json in [*root.glob("*/*/run.json"), *root.glob("nightly/*/runs/*/*/run.json")]:
        run = _json_or_empty(run_json)
        if not run:
            continue
        run_dir = run_json.parent
        found.append(RunEntry(run_dir, run_dir.relative_to(root).as_posix(), run,
                              _json_or_empty(run_dir / "results.json")))
    found.sort(key=lambda r: r.started, reverse=True)
    return found


def filter_options(entries: list[RunEntry]) -> dict[str, list[str]]:
    """The values each filter but the date can take among `entries`, sorted."""
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
