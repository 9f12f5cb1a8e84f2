"""The results folder as read: one record per run, what its run.json and
results.json say (docs/running.md, "What a run leaves"), and queries over them.

The index of runs, `harness serve`, the compare view and the nightly read
runs through here; none of them parses a run's files itself. `side_by_side`
is the differential view of several runs (the same scenario on several
systems or versions, or seeds), which `harness compare` prints and
`harness serve` shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from core.history.elections import controller_lines, election_sentence, elections
from core.history.features import finalized
from core.history.states import read_states

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

    def elections(self) -> list[str]:
        """Each KRaft election the controller recorded (core/history/elections.py),
        in words; [] for a run without controller records."""
        lines = controller_lines(read_states(self.path / "states.jsonl") or [])
        return [election_sentence(e) for e in elections(lines)]

    @property
    def has_report(self) -> bool:
        return (self.path / "report.html").is_file()

    def settings(self) -> dict[str, object]:
        """The run's settings as dotted keys: its spec, the versions it ran and
        the feature levels its KRaft controller finalized (`features.NAME`)."""
        flat = dict(dotted(self.spec)) if self.spec else {}
        flat.pop("results", None)  # where a run was written says nothing about it
        versions = self.run.get("versions")
        if isinstance(versions, dict) and versions:
            flat.update(dotted(versions, "versions"))
        # The KRaft controller's finalized feature levels (transactions v2, ELR, ...): what the run ran with.
        features = finalized(read_states(self.path / "states.jsonl"))
        if features:
            flat.update(dotted(features, "features"))
        return flat


def dotted(x, prefix: str = "") -> list[tuple[str, object]]:
    """Nested settings as (dotted key, leaf) rows (`broker.min.insync.replicas`);
    a list, even of records, stays one leaf."""
    if isinstance(x, dict) and x:
        return [row for k, v in x.items() for row in dotted(v, f"{prefix}.{k}" if prefix else str(k))]
    return [(prefix, x)]


def run_at(path: Path) -> RunEntry:
    """The run in folder `path` (its run.json and results.json; {} for a missing one)."""
    path = Path(path)
    return RunEntry(path, path.as_posix(), _json_or_empty(path / "run.json"), _json_or_empty(path / "results.json"))


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


@dataclass(frozen=True)
class Row:
    """One thing compared: its label and each run's value (None: the run has none)."""

    label: str
    values: tuple

    @property
    def differs(self) -> bool:
        return len({orjson.dumps(v, option=orjson.OPT_SORT_KEYS) for v in self.values}) > 1


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple

    def split(self) -> tuple[list[Row], list[Row]]:
        """(the rows that differ, those the same in every run)."""
        return [r for r in self.rows if r.differs], [r for r in self.rows if not r.differs]


def side_by_side(entries: list[RunEntry], anomalies: tuple = ()) -> list[Section]:
    """Runs compared section by section: what each run is (system and version,
    scenario, seed, outcome, verdicts), its anomaly counts (`anomalies`: the
    order to list them in, the registry's), its liveness (unavailability,
    recovery, hung partitions), its throughput, the first story of each
    anomaly any run counted, the KRaft controller's elections where a run
    recorded them (which set each leader came from: what tells Kafka 4 with
    eligible leader replicas from the same faults without), and its settings. Each row holds one value per
    run; the views put the rows that differ first and fold the others."""
    def row(label: str, get) -> Row:
        return Row(label, tuple(get(r) for r in entries))

    def liveness(r: RunEntry) -> dict:
        live = r.results.get("liveness")
        return live if isinstance(live, dict) else {}

    def counted(r: RunEntry) -> dict:
        found = r.results.get("anomalies")
        return found if isinstance(found, dict) else {}

    def count(r: RunEntry, name: str):
        a = counted(r).get(name)
        if not isinstance(a, dict):
            return None
        return str(a.get("count", 0)) + (" (error)" if a.get("error") and a.get("count") else "")

    def first_story(r: RunEntry, name: str):
        stories = r.results.get("explanations")
        found = [s for s in stories if isinstance(s, dict) and s.get("anomaly") == name] \
            if isinstance(stories, list) else []
        return found[0].get("summary") if found else None

    names = [n for n in anomalies if any(n in counted(r) for r in entries)]
    names += sorted({n for r in entries for n in counted(r)} - set(names))
    seen = [n for n in names if any((counted(r).get(n) or {}).get("count") for r in entries)]
    # Each run's throughput and settings, made once, not once per row.
    speeds = [throughput(r.results) for r in entries]
    settings = [r.settings() for r in entries]
    keys = sorted({k for s in settings for k in s})
    said = [r.elections() for r in entries]
    return [
        Section("the runs", (
            row("system", lambda r: (r.run.get("versions") or {}).get("system") or r.system or None),
            row("scenario", lambda r: r.scenario or None),
            row("seed", lambda r: r.spec.get("seed", r.run.get("seed"))),
            row("outcome", lambda r: r.run.get("outcome")), row("verdict", lambda r: r.verdict),
            row("liveness", lambda r: liveness(r).get("verdict")),
            row("errors", lambda r: ", ".join(r.errors) or "none"))),
        Section("anomalies", tuple(row(n, lambda r, n=n: count(r, n)) for n in names)),
        Section("liveness", tuple(row(label, lambda r, key=key: liveness(r).get(key)) for label, key in (
            ("longest unavailability (s)", "unavailable_s"), ("recovery after the heal (s)", "recovery_s"),
            ("consumers' recovery (s)", "consumer_recovery_s"), ("hung partitions", "hung_partitions")))),
        Section("throughput", tuple(Row(label, tuple(s.get(label) for s in speeds)) for label in throughput({}))),
        Section("stories (the first of each anomaly)", tuple(row(n, lambda r, n=n: first_story(r, n)) for n in seen)),
        Section("elections (the KRaft controller's records)", tuple(
            Row(f"election {i + 1}", tuple(s[i] if i < len(s) else None for s in said))
            for i in range(max(map(len, said), default=0)))),
        Section("settings", tuple(Row(k, tuple(s.get(k) for s in settings)) for k in keys)),
    ]
