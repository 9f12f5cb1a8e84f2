"""The nightly matrix as data: the matrix file, its cells, the record of each
run, the deflake classification, summary.json and the JUnit XML.

No process is started here (`harness.campaign.nightly` runs the cells through
`harness.campaign.subrun`), so everything in this module is tested on hand-made
records.

A matrix file (TOML; docs/nightly.md):

    name = "smoke"            # the suite's name (default: the file's stem)
    seeds = [1]               # defaults of every entry
    repeats = 1
    limit-s = 900             # each run's own time limit (default: time-limit + final-time-limit + 600)
    [set]                     # settings every run gets, over its scenario's
    time-limit = 30

    [[run]]                   # scenarios (their system is theirs, unless `systems` names others)
    scenarios = ["own-safe-one-fault", "own-bug-no-dedup"]
    [[run]]                   # an inline spec: a name and any spec settings
    name = "own-pause-idempotent"
    systems = ["own", "kafka"]
    versions = ["3.9.2", "4.4.0"]   # Kafka's runs crossed with these releases
    seeds = [1, 2]
    [run.spec]
    nemesis = ["pause"]
    [run.spec.expect]
    valid = true

A cell is one (entry, system, Kafka version, seed, repeat): one run, re-run under
`--deflake`. Its class (exact words in docs/nightly.md):

    PASS     the first run met its expectation
    FAIL     the first run did not, nor did any re-run (--deflake N: up to N re-runs)
    FLAKY    the first run did not, a re-run did (the failure did not come back)
    HANG     as FAIL, the first run's liveness verdict being HANG
    ERROR    the first run could not be carried out (exit 2, no results, outlived its limit)
    INTERRUPTED  Ctrl-C or SIGTERM stopped the first run
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from checkers.summary import top_anomaly
from core.errors import UserError
from core.runs import throughput
from harness.campaign.subrun import NOT_RUN, Outcome
from harness.run import spec as specs
from infra import kafka

PASS, FAIL, FLAKY, HANG, ERROR, INTERRUPTED = "PASS", "FAIL", "FLAKY", "HANG", "ERROR", "INTERRUPTED"
CLASSES = (PASS, FAIL, FLAKY, HANG, ERROR, INTERRUPTED)
EXTRA_S = 600.0  # default limit: the spec's time limits plus this (cluster start, settle, check)
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
TOP_KEYS = {"name", "seeds", "repeats", "limit-s", "set", "run", "deflake"}
ENTRY_KEYS = {"scenario", "scenarios", "name", "spec", "systems", "versions", "seeds", "repeats", "limit-s", "set"}


@dataclass(frozen=True)
class Cell:
    """One run of the matrix (re-run under --deflake): a spec with its seed."""

    label: str  # the test name: the scenario's, or the inline spec's (with -SYSTEM when crossed)
    system: str
    seed: int
    repeat: int  # 1.. within its (label, seed)
    values: dict  # the spec's settings, as a spec file gives them (without the seed)
    expect: dict
    limit_s: float
    scenario: str = ""  # the scenario file's name, if it came from one
    round: int = 1  # --until-fail: which pass over the matrix

    @property
    def key(self) -> str:
        """Unique within a night: label, seed, repeat, round."""
        return (f"{self.label} seed {self.seed}" + (f" repeat {self.repeat}" if self.repeat > 1 else "")
                + (f" round {self.round}" if self.round > 1 else ""))

    @property
    def kind(self) -> str:
        """safe (expected valid), unsafe (expected invalid or an anomaly present), or other."""
        return kind_of(self.expect)


def kind_of(expect: dict) -> str:
    if expect.get("valid") is True:
        return "safe"
    if expect.get("valid") is False or "present" in expect.values() or "one-of" in expect:
        return "unsafe"
    return "other"


@dataclass
class Matrix:
    name: str
    path: str
    cells: list[Cell]


def load(path: str | os.PathLike, repeat: int | None = None) -> Matrix:
    """The matrix file as cells, each spec checked as `harness run` checks it;
    a UserError naming what is wrong. `repeat` overrides every entry's repeats."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise UserError(f"{path}: not valid TOML ({e})") from None
    where = str(path)
    _known(data, TOP_KEYS, where)
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not _LABEL_RE.match(name):
        raise UserError(f"{where}: name {name!r}: use letters, digits, '.', '_', '-'")
    if repeat is not None and repeat < 1:
        raise UserError(f"--repeat {repeat}: expected 1 or more")
    defaults = {"seeds": data.get("seeds", [1]), "repeats": data.get("repeats", 1),
                "limit-s": data.get("limit-s"), "set": _table(data.get("set", {}), f"{where}: [set]")}
    entries = data.get("run")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{where}: a matrix needs at least one [[run]] table")
    cells: list[Cell] = []
    for i, entry in enumerate(entries, 1):
        cells.extend(_cells(entry, defaults, f"{where}: [[run]] {i}", repeat))
    seen: dict[str, int] = {}
    for c in cells:
        if c.key in seen:
            raise UserError(f"{where}: {c.label} seed {c.seed} is listed twice (the same seed twice is the same run)")
        seen[c.key] = 1
    return Matrix(name=name, path=str(path), cells=cells)


def _known(table: dict, keys: set[str], where: str) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(keys))})")


def _table(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a table of settings")
    return value


def _ints(value, what: str, where: str) -> list[int]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63 for s in value)):
        raise UserError(f"{where}: {what}: expected a list of non-negative integers")
    return value


def _cells(entry: dict, defaults: dict, where: str, repeat: int | None) -> list[Cell]:
    _known(entry, ENTRY_KEYS, where)
    seeds = _ints(entry.get("seeds", defaults["seeds"]), "seeds", where)
    repeats = repeat if repeat is not None else entry.get("repeats", defaults["repeats"])
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise UserError(f"{where}: repeats: expected 1 or more")
    limit = entry.get("limit-s", defaults["limit-s"])
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0):
        raise UserError(f"{where}: limit-s: expected a number of seconds")
    overrides = {**defaults["set"], **_table(entry.get("set", {}), f"{where}: set")}
    systems = entry.get("systems")
    if systems is not None and (not isinstance(systems, list) or not systems
                                or not all(isinstance(s, str) for s in systems)):
        raise UserError(f"{where}: systems: expected a list of system names")
    versions = entry.get("versions")
    if versions is not None and (not isinstance(versions, list) or not versions
                                 or not all(isinstance(v, str) for v in versions)):
        raise UserError(f"{where}: versions: expected a list of Kafka releases, e.g. [\"3.9.2\", \"4.4.0\"]")
    bases: list[tuple[str, str, dict]] = []  # (label, scenario, values)
    if ("scenario" in entry or "scenarios" in entry) == ("spec" in entry):
        raise UserError(f"{where}: give scenario (or scenarios) or an inline spec (name and [run.spec]), one of them")
    if "spec" in entry:
        label = entry.get("name")
        if not isinstance(label, str) or not _LABEL_RE.match(label):
            raise UserError(f"{where}: an inline spec needs a name (letters, digits, '.', '_', '-')")
        values = dict(_table(entry["spec"], f"{where}: spec"))
        values.setdefault("expect", {"valid": True})  # a spec that says nothing is expected valid
        bases.append((label, "", values))
    else:
        names = entry.get("scenarios", [entry.get("scenario")] if "scenario" in entry else [])
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise UserError(f"{where}: scenarios: expected a list of scenario names")
        for n in names:
            try:
                bases.append((n, n, specs.load_file(str(specs.scenario_file(n)))))
            except UserError as e:
                raise UserError(f"{where}: {e}") from None
    cells = []
    for label, scenario, base in bases:
        own_system = base.get("system", specs.FIELDS["system"].default)
        for system in systems or [overrides.get("system", own_system)]:
            values = {k.replace("-", "_"): v for k, v in {**base, **overrides}.items()}
            values["system"] = system
            # Crossed with systems (or moved to another), the test name says which system it ran on.
            values["name"] = label if system == own_system and len(systems or [system]) == 1 else f"{label}-{system}"
            if scenario:
                values["scenario"] = scenario
            for values in _versioned(values, versions if system == "kafka" else None):
                spec = _checked(values, f"{where}: {values['name']}")
                cell_limit = float(limit) if limit is not None else spec.time_limit + spec.final_time_limit + EXTRA_S
                for seed in seeds:
                    for r in range(1, repeats + 1):
                        cells.append(Cell(label=values["name"], system=system, seed=seed, repeat=r,
                                          values=values, expect=dict(spec.expect), limit_s=cell_limit,
                                          scenario=scenario))
    return cells


def _versioned(values: dict, versions: list[str] | None) -> list[dict]:
    """A Kafka cell's values once per release of `versions` (its name ending in
    `-kafka-X.Y.Z`); a release without ZooKeeper mode (4.0 on) runs in KRaft
    mode whatever the scenario says. Without versions, the values as they are."""
    if not versions:
        return [values]
    out = []
    for version in versions:
        v = {**values, "kafka_version": version}
        if not kafka.has_zookeeper_mode(version):
            v["kafka_mode"] = "kraft"
        base = values["name"] if values["name"].endswith("-kafka") else values["name"] + "-kafka"
        v["name"] = f"{base}-{version}"
        out.append(v)
    return out


def _checked(values: dict, where: str) -> specs.TestSpec:
    """The spec these values make, as `harness run -c FILE` would build it."""
    unknown = [k for k in values if k not in specs.FIELDS and k not in specs.SYSTEM_OPTIONS or k == "system_options"]
    if unknown:
        raise UserError(f"{where}: unknown setting {unknown[0].replace('_', '-')!r}")
    try:
        return specs.build({**values, "seed": 0})
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


# -- the record of a run


@dataclass
class Attempt:
    """One `harness run` of a cell, as summary.json keeps it."""

    status: str  # pass, fail, hang, error, interrupted
    verdict: str  # valid, invalid, could not run
    met: bool
    misses: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # anomaly -> count, those found only
    top: str | None = None  # `NAME: first line of its story`
    top_count: int | None = None
    seconds: float = 0.0  # wall time of the whole `harness run`
    sends_ok: int | None = None
    acks_per_s: float | None = None
    recovery_s: float | None = None  # liveness: after the final heal (results.json `liveness`), if measured
    recovery_per_fault_s: list | None = None
    liveness_verdict: str | None = None
    run_dir: str | None = None
    log: str | None = None
    problem: str | None = None
    started: str = ""


def attempt(o: Outcome, expect: dict, started: str = "") -> Attempt:
    """The record of one run from its Outcome."""
    a = Attempt(status="error", verdict=o.verdict, met=False, seconds=o.seconds, run_dir=o.run_dir, log=o.log,
                problem=o.problem, started=started)
    if o.interrupted:
        a.status = "interrupted"
    if o.verdict == NOT_RUN or o.results is None:
        a.misses = [f"not carried out: {o.problem}"]
        return a
    r = o.results
    anomalies = r.get("anomalies", {})
    a.counts = {n: v.get("count", 0) for n, v in sorted(anomalies.items()) if isinstance(v, dict) and v.get("count")}
    a.met, a.misses = specs.expectation(expect, r)
    try:
        a.top = top_anomaly(r)
    except (KeyError, TypeError, IndexError):
        a.top = None
    if a.top:
        a.top_count = anomalies.get(a.top.split(":", 1)[0], {}).get("count")
    t = throughput(r)
    a.sends_ok, a.acks_per_s = t["sends ok"], t["acknowledged sends per second"]
    a.recovery_s, a.recovery_per_fault_s, a.liveness_verdict = liveness(r)
    a.status = "hang" if a.liveness_verdict == "HANG" else ("pass" if a.met else "fail")
    return a


def liveness(results: dict) -> tuple[float | None, list | None, str | None]:
    """(recovery after the final heal, recovery after each fault, verdict) from
    results.json `liveness` when the run measured it; Nones otherwise. Read
    leniently: `recovery_s` a number, or a table with the final heal's under
    `final`/`heal`; per fault a list under `faults` of tables with `recovery_s`."""
    lv = results.get("liveness")
    if not isinstance(lv, dict):
        return None, None, None
    rec = lv.get("recovery_s")
    final = None
    if isinstance(rec, (int, float)) and not isinstance(rec, bool):
        final = float(rec)
    elif isinstance(rec, dict):
        final = next((float(rec[k]) for k in ("final", "heal", "final_heal", "after_heal")
                      if isinstance(rec.get(k), (int, float))), None)
    faults = lv.get("faults")
    per_fault = ([f.get("recovery_s") for f in faults if isinstance(f, dict)] if isinstance(faults, list) else None)
    verdict = lv.get("verdict")
    if verdict is None and lv.get("hang") is True:
        verdict = "HANG"
    # checkers/liveness.py writes "ok" / "hang": compared here in capitals.
    return final, per_fault, (str(verdict).upper() if verdict is not None else None)


@dataclass
class CellRecord:
    """A cell and its runs: the first, then --deflake's re-runs."""

    label: str
    system: str
    seed: int
    repeat: int
    round: int
    scenario: str
    expect: dict
    kind: str
    limit_s: float
    attempts: list[Attempt] = field(default_factory=list)
    outcome: str = ""

    @classmethod
    def of(cls, cell: Cell) -> "CellRecord":
        return cls(label=cell.label, system=cell.system, seed=cell.seed, repeat=cell.repeat, round=cell.round,
                   scenario=cell.scenario, expect=cell.expect, kind=cell.kind, limit_s=cell.limit_s)

    @property
    def key(self) -> str:
        return (f"{self.label} seed {self.seed}" + (f" repeat {self.repeat}" if self.repeat > 1 else "")
                + (f" round {self.round}" if self.round > 1 else ""))

    @property
    def first(self) -> Attempt:
        return self.attempts[0]

    def to_dict(self) -> dict:
        d = asdict(self)
        first = self.attempts[0] if self.attempts else Attempt("error", NOT_RUN, False)
        # The first run's numbers at the top, as CI servers and the trend page read them.
        d.update({"verdict": first.verdict, "met": first.met, "top_anomaly": first.top,
                  "top_count": first.top_count, "seconds": first.seconds, "sends_ok": first.sends_ok,
                  "acks_per_s": first.acks_per_s, "recovery_s": first.recovery_s,
                  "run_dir": first.run_dir, "reruns": max(0, len(self.attempts) - 1)})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CellRecord":
        names = {f.name for f in dataclasses.fields(cls)}
        attempt_names = {f.name for f in dataclasses.fields(Attempt)}
        rec = cls(**{k: v for k, v in d.items() if k in names and k != "attempts"})
        rec.attempts = [Attempt(**{k: v for k, v in a.items() if k in attempt_names}) for a in d.get("attempts", [])]
        return rec


def needs_rerun(attempts: list[Attempt], deflake: int) -> bool:
    """Whether --deflake N runs the cell again: its first run failed (or hung),
    no re-run has met the expectation yet, fewer than N re-runs so far, and
    nothing was interrupted."""
    if not attempts or attempts[0].status not in ("fail", "hang"):
        return False
    reruns = attempts[1:]
    if any(a.status in ("pass", "interrupted") for a in reruns):
        return False
    return len(reruns) < deflake


def classify(attempts: list[Attempt]) -> str:
    """The cell's class from its runs (module docstring; docs/nightly.md)."""
    if not attempts:
        return INTERRUPTED
    first = attempts[0].status
    if first == "interrupted":
        return INTERRUPTED
    if first == "error":
        return ERROR
    if first == "pass":
        return PASS
    if any(a.status == "pass" for a in attempts[1:]):
        return FLAKY
    return HANG if first == "hang" else FAIL


# -- summary.json


def summary(name: str, matrix_path: str, night: str, started: str, records: list[CellRecord], planned: int,
            complete: bool, interrupted: bool, options: dict) -> dict:
    counts = {c: sum(r.outcome == c for r in records) for c in CLASSES}
    return {"suite": name, "matrix": matrix_path, "night": night, "started": started,
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "complete": complete,
            "interrupted": interrupted, "planned": planned, "options": options, "counts": counts,
            "runs": [r.to_dict() for r in records]}




# -- JUnit XML


def message(rec: CellRecord) -> str:
    """The failure's message: the class, the verdict, and the top anomaly with its story's first line."""
    first = rec.first
    if rec.outcome in (ERROR, INTERRUPTED):
        return f"{rec.outcome}: could not run: {first.problem}"
    verdict = "VALID" if first.verdict == "valid" else "INVALID"
    words = f"{rec.outcome}: {verdict}"
    if first.liveness_verdict == "HANG":
        words += " (liveness: HANG)"
    if first.misses:
        words += f" ({'; '.join(first.misses)})"
    if first.top:
        name, _, line = first.top.partition(": ")
        words += f"; top anomaly {name} ({first.top_count if first.top_count is not None else '?'} found): {line}"
    return words


def junit(suite: str, records: list[CellRecord], timestamp: str) -> str:
    """One <testsuite> with one <testcase> per cell: <failure> for FAIL and
    HANG, <error> for ERROR, <skipped> for INTERRUPTED; PASS and FLAKY pass
    (FLAKY says so in its system-out). The shape of the common JUnit XSD."""
    root = ET.Element("testsuites", name=suite)
    failures = sum(r.outcome in (FAIL, HANG) for r in records)
    errors = sum(r.outcome == ERROR for r in records)
    skipped = sum(r.outcome == INTERRUPTED for r in records)
    total = sum(a.seconds for r in records for a in r.attempts)
    root.set("tests", str(len(records)))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    root.set("time", f"{total:.1f}")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(records)), failures=str(failures),
                       errors=str(errors), skipped=str(skipped), time=f"{total:.1f}",
                       timestamp=timestamp.removesuffix("Z"), hostname=os.uname().nodename)
    for r in records:
        seconds = sum(a.seconds for a in r.attempts)
        tc = ET.SubElement(ts, "testcase", name=r.key, classname=f"harness.{r.system}", time=f"{seconds:.1f}")
        text = "\n".join(_attempt_line(i, a) for i, a in enumerate(r.attempts))
        if r.outcome in (FAIL, HANG):
            ET.SubElement(tc, "failure", message=message(r), type=r.outcome).text = text
        elif r.outcome == ERROR:
            ET.SubElement(tc, "error", message=message(r), type=ERROR).text = text
        elif r.outcome == INTERRUPTED:
            ET.SubElement(tc, "skipped", message="interrupted (Ctrl-C or SIGTERM)")
        ET.SubElement(tc, "system-out").text = f"{r.outcome}\n{text}"
    ET.indent(root)
    return "<?xml version='1.0' encoding='UTF-8'?>\n" + ET.tostring(root, encoding="unicode") + "\n"


def _attempt_line(i: int, a: Attempt) -> str:
    what = "run" if i == 0 else f"re-run {i}"
    return (f"{what}: {a.status}, {a.verdict}, expectation {'met' if a.met else 'not met'}"
            + (f" ({'; '.join(a.misses)})" if a.misses else "") + f", {a.seconds:.0f} s"
            + (f", {a.run_dir}" if a.run_dir else "") + (f", log {a.log}" if a.log else ""))
