"""Cross-event checks of a workload's history, on top of core.history's per-event validation.

`check_history` reads a JSONL history with `read_jsonl` (the contract's
per-line rules), then checks what spans events: send values are unique, each
completion follows an outstanding invocation of the same process (sends
matched by value, other ops in order), and nothing of a process follows its
`crash`. It returns what it found for the tests' own assertions.
`wait_until_assigned` reads a history while it is written, for tests that
must not fault a group before its members hold partitions.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

from core.history.jsonl import read_jsonl


@dataclass
class HistoryFacts:
    events: list[dict]
    sends: dict[int, dict] = field(default_factory=dict)          # value -> invoke
    completions: dict[int, dict] = field(default_factory=dict)    # value -> send completion
    incomplete: list[dict] = field(default_factory=list)          # invokes without completion
    crashed: dict[int, int] = field(default_factory=dict)         # process -> index of its crash ok
    reads: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))  # value -> positions

    def of_type(self, f: str, type_: str) -> list[dict]:
        return [e for e in self.events if e["f"] == f and e["type"] == type_]

    def by_process(self, process: int) -> list[dict]:
        return [e for e in self.events if e["process"] == process]


def check_history(path: str | Path) -> HistoryFacts:
    events = read_jsonl(path)
    facts = HistoryFacts(events)
    pending_sends: dict[int, dict] = {}
    pending_other: dict[tuple, deque] = defaultdict(deque)
    for e in events:
        p, f, t = e["process"], e["f"], e["type"]
        assert p == "nemesis" or p not in facts.crashed, f"event after process {p} crashed: {e}"
        if f == "send":
            v = e["value"]
            if t == "invoke":
                assert v not in facts.sends, f"value {v} sent twice: {facts.sends[v]} and {e}"
                facts.sends[v] = e
                pending_sends[v] = e
            else:
                inv = pending_sends.pop(v, None)
                assert inv is not None, f"completion without an outstanding invoke: {e}"
                assert inv["process"] == p, f"completion by another process: {inv} / {e}"
                if t in ("fail", "info"):
                    assert isinstance(e.get("error"), str) and e["error"], f"no error name: {e}"
                facts.completions[v] = e
        else:
            key = (p, f)
            if t == "invoke":
                pending_other[key].append(e)
            else:
                assert pending_other[key], f"completion without an outstanding invoke: {e}"
                inv = pending_other[key].popleft()
                if f in ("assign", "commit", "seek"):
                    for name in ("partitions", "offsets", "partition", "offset"):
                        if name in inv and t == "ok":
                            assert e.get(name) == inv[name], f"{name} differs from the invoke: {inv} / {e}"
                if f == "crash":
                    facts.crashed[p] = e["index"]
                if f == "poll" and t == "ok":
                    for r in e["records"]:
                        facts.reads[r["value"]].append((r["partition"], r["offset"]))
    facts.incomplete = sorted(list(pending_sends.values()) + [e for q in pending_other.values() for e in q],
                              key=lambda e: e["index"])
    return facts


def wait_until_assigned(history, group: str, members: int, timeout_s: float) -> set[int]:
    """Wait until `members` processes of `group` have been given partitions,
    reading the history as it is written; the processes, once they have
    (AssertionError at `timeout_s`)."""
    path = Path(history.path)
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        history.flush()
        lines = path.read_bytes().split(b"\n")[:-1] if path.exists() else []  # the last may be half written
        for line in lines:
            if b'"assign"' in line:
                e = json.loads(line)
                if e["type"] == "ok" and e.get("group") == group and e["partitions"]:
                    seen.add(e["process"])
        if len(seen) >= members:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"{len(seen)} of {members} members of {group} were given partitions in {timeout_s:g} s")
