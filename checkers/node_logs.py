"""The broker-log scan: every node's ERROR/FATAL lines and stack traces,
grouped by signature, and the brokers that exited when nothing asked them to.

`scan(run_dir)` reads the log files a run collected under
`<run_dir>/nodes/<node>/` (own broker: broker.log, broker.out; Kafka:
server.log, kafka.out; ZooKeeper and faultfs logs too) and returns the dict
that results.json holds under `node_logs` (docs/checker.md):

- a log *record* is a line that starts with a timestamp (Kafka's
  `[2026-11-23 09:20:57,933] ERROR ...`, ZooKeeper's `2026-11-23T09:20:20.999
  [main] INFO ...`, the own broker's `2026-11-23 09:47:46.364 INFO [broker]
  ...`) with the lines under it that do not (a stack trace); in a file with no
  timestamps at all (a process's stdout/stderr, `*.out`), each line that is
  not part of a trace is a record;
- a record is kept when its level is ERROR, FATAL, CRITICAL or SEVERE, or it
  carries a stack trace (Java `at ...` frames or a Python traceback), whatever
  its level: a WARN with a trace is how Kafka reports most failures;
- its *signature* is its level and message with every number, address and id
  normalized (`[Broker id=1] ... harness-3` and `[Broker id=2] ... harness-0`
  are one signature), and the trace folded into its first telling line (the
  Java exception, or the Python traceback's exception line);
- groups count their records per node and keep the first occurrence (node,
  file, line, time, text).

A broker that exited on its own is flagged: the harness only ever stops a
broker with SIGKILL (a kill, a power loss), which leaves no line in its log,
and collects the logs before it tears the system down; so a broker's log that
says it is shutting down or exiting (Kafka's `Exiting Kafka`, `shutting
down` of its server, `Shutdown broker because all log dirs ... have failed`,
a FATAL record, a JVM crash or `OutOfMemoryError`; the own broker's `fatal:`
record or `broker: error:` on its stderr) is an exit nobody asked for.

A pure function over files: no Spark, nothing of the infra layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SEVERE = ("FATAL", "CRITICAL", "SEVERE", "ERROR")
LEVELS = SEVERE + ("WARN", "WARNING", "INFO", "DEBUG", "TRACE")
# The files a broker writes (own broker, then Kafka): only these can show a broker's exit.
BROKER_FILES = ("broker.log", "broker.out", "server.log", "kafka.out")
LOG_SUFFIXES = (".log", ".out")  # config files collected beside the logs are not scanned
MAX_GROUPS = 200  # signatures kept in results.json (the rest are counted)
MAX_TEXT_LINES = 40  # lines of a first occurrence's text kept
MAX_TEXT_CHARS = 4000
MAX_SIGNATURE = 300

_TS = re.compile(r"^\[?(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?\]?\s*")
_LEVEL = re.compile(r"^(?:\[\S*\]\s+)?(" + "|".join(LEVELS) + r")\b:?\s*")
_FREE_LEVEL = re.compile(r"\b(FATAL|CRITICAL|SEVERE|ERROR)\b|^\S+: (?:[Ee]rror|[Ff]atal):|^Exception in thread ")
# Normalizing a message into its signature: ids and addresses first, then every number.
_NORMALIZE = (
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<addr>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"(?<![\w-])-(?=\d)"), ""),  # a negative number is a number (leader -1)
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I), "<id>"),
    (re.compile(r"\d+"), "N"),
    (re.compile(r"\s+"), " "),
)
# A broker exiting (see the module's docstring), on a record's first line or its exception line.
_EXIT = re.compile(
    r"Exiting Kafka|Shutdown broker because|\[(?:KafkaServer|BrokerServer|KafkaRaftServer|ControllerServer)"
    r"[^\]]*\] (?:shutting down|Transition from \w+ to SHUTTING_DOWN)|Halting Kafka|"
    r"Exception in thread \"main\"|A fatal error has been detected by the Java Runtime|OutOfMemoryError|"
    r"^broker: error:|\bfatal: ")
_CONTINUES = ("Caused by:", "Traceback (most recent call last)", "During handling of the above exception",
              "The above exception was the direct cause", "... ")


@dataclass
class _Record:
    line: int
    time: str | None
    level: str | None
    message: str
    lines: list[str] = field(default_factory=list)  # the whole record, its first line included
    in_traceback: bool = False  # a Python traceback whose exception line is still to come

    def exception(self) -> str | None:
        """The first telling line of the record's trace: Java's exception, Python's exception line."""
        rest = self.lines[1:]
        if any(x.startswith("Traceback (most recent call last)") for x in self.lines):
            ends = [x for x in rest if x.strip() and not x[0].isspace() and not x.startswith(_CONTINUES)]
            return ends[-1].strip() if ends else None
        return next((x.strip() for x in rest if x.strip() and not x[0].isspace()), None)

    def has_trace(self) -> bool:
        return (self.lines[0].startswith("Traceback (most recent call last)")
                or any(x.lstrip().startswith("at ") or x.startswith("Traceback (most recent call last)")
                       for x in self.lines[1:]))


def normalize(text: str) -> str:
    """A message with its numbers, addresses and ids replaced: the part that names the kind of event."""
    for pattern, repl in _NORMALIZE:
        text = pattern.sub(repl, text)
    return text.strip()


def records(path: Path):
    """The log records of one file, in order (see the module's docstring)."""
    current: _Record | None = None
    timestamped = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            ts = _TS.match(line)
            if ts:
                timestamped = True
                if current:
                    yield current
                rest = line[ts.end():]
                lv = _LEVEL.match(rest)
                level = lv.group(1).upper() if lv else None
                time = f"{ts.group(1)} {ts.group(2)}" + (f".{ts.group(3)}" if ts.group(3) else "")
                current = _Record(number, time, "WARN" if level == "WARNING" else level,
                                  rest[lv.end():] if lv else rest, [line])
                continue
            if current is not None and _continues(current, line, timestamped):
                current.lines.append(line)
                if line.startswith("Traceback (most recent call last)"):
                    current.in_traceback = True
                elif current.in_traceback and line.strip() and not line[0].isspace():
                    current.in_traceback = False  # the exception line ends the traceback
                continue
            if current:
                yield current
            current = None
            if not line.strip():
                continue
            free = _FREE_LEVEL.search(line)
            level = "ERROR" if free or line.startswith("Traceback") else None
            current = _Record(number, None, level, line, [line],
                              in_traceback=line.startswith("Traceback (most recent call last)"))
    if current:
        yield current


def _continues(record: _Record, line: str, timestamped: bool) -> bool:
    if timestamped:
        return True  # in a timestamped log, every other line belongs to the record above it
    if record.in_traceback or not line.strip():
        return True
    return line[0].isspace() or line.startswith(_CONTINUES)


def scan(run_dir: str | Path) -> dict:
    """The scan of `run_dir/nodes/*/*.{log,out}`: groups by signature and the brokers' unexpected exits."""
    root = Path(run_dir) / "nodes"
    groups: dict[str, dict] = {}
    exits: list[dict] = []
    scanned: dict[str, list[str]] = {}
    if not root.is_dir():
        return {"scanned": {}, "groups": [], "more_groups": 0, "exits": []}
    for node_dir in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: _natural(p.name)):
        node = node_dir.name
        for path in sorted(p for p in node_dir.iterdir() if p.is_file() and p.name.endswith(LOG_SUFFIXES)):
            scanned.setdefault(node, []).append(path.name)
            broker = path.name in BROKER_FILES
            for r in records(path):
                exception = r.exception() if len(r.lines) > 1 else None
                if broker and (r.level == "FATAL" or _EXIT.search(r.message) or
                               (exception and _EXIT.search(exception))):
                    said = f"{r.level} {r.message}" if r.time and r.level else r.lines[0]  # its time is beside it
                    exits.append({"node": node, "file": path.name, "line": r.line, "time": r.time,
                                  "evidence": _clip(said + (f" — {exception}" if exception else ""), 500)})
                if r.level not in SEVERE and not r.has_trace():
                    continue
                message = "Python traceback" if r.message.startswith("Traceback (most recent") else r.message
                signature = f"{r.level or 'stack trace'} {normalize(message)}"
                if exception and r.has_trace():
                    signature += f" — {normalize(exception)}"
                signature = _clip(signature, MAX_SIGNATURE)
                g = groups.get(signature)
                if g is None:
                    g = groups[signature] = {"signature": signature, "level": r.level or "stack trace", "count": 0,
                                             "nodes": {}, "first": None}
                g["count"] += 1
                g["nodes"][node] = g["nodes"].get(node, 0) + 1
                if g["first"] is None or _earlier(r.time, g["first"]["time"]):
                    g["first"] = {"node": node, "file": path.name, "line": r.line, "time": r.time,
                                  "text": _clip("\n".join(r.lines[:MAX_TEXT_LINES]), MAX_TEXT_CHARS)}
    ordered = sorted(groups.values(), key=lambda g: (_severity(g["level"]), -g["count"], g["signature"]))
    # One exit per node: its first line says why (later lines are the shutdown it caused).
    first_exit: dict[str, dict] = {}
    for e in exits:
        if e["node"] not in first_exit or _earlier(e["time"], first_exit[e["node"]]["time"]):
            first_exit[e["node"]] = e
    return {"scanned": scanned, "groups": ordered[:MAX_GROUPS], "more_groups": max(0, len(ordered) - MAX_GROUPS),
            "exits": [first_exit[n] for n in sorted(first_exit, key=_natural)]}


def warnings(scanned: dict) -> list[str]:
    """One line per broker that exited unexpectedly, for results.json's warnings."""
    return [f"the broker on {e['node']} exited unexpectedly ({e['file']} line {e['line']}: {_clip(e['evidence'], 160)})"
            for e in scanned.get("exits", [])]


def _severity(level: str) -> int:
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


def _earlier(a: str | None, b: str | None) -> bool:
    """Whether time a is before b; a record without a time is never earlier than one with."""
    if a is None:
        return False
    return b is None or a.replace(",", ".") < b.replace(",", ".")


def _natural(name: str):
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name)]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
