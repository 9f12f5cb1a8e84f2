"""A story per anomaly: what happened to one value, in short sentences a Kafka user reads in a minute.

For each example the checker reported (results.json `anomalies.*.examples`),
`explain` tells the story from three sources, each optional but the first:

- the history: the send's invocation and completion (for a value sent in a
  transaction, the transaction's: which one, how it ended), who sent what
  else is at its position, the reads that returned the value or read at its
  position (polls' and transactions', read_uncommitted ones marked), the
  faults active meanwhile, the final reads (docs/history.md);
- the cluster-state timeline, `states.jsonl` (docs/history.md): who led the
  partition at which epoch with which ISR at each of those moments, when its
  high watermark passed the offset, and the truncations that cut it;
- the disk dumps, `disk/<node>.jsonl.gz` (infra.system): what each replica
  holds at the end, at the position and anywhere else the value is.

An explanation is a dict (results.json `explanations`):

    {"anomaly": "lost-acked", "partition": 4, "offset": 2135, "value": 812,
     "summary": "the first sentence",
     "steps": [{"time": 16.2, "text": "...", "event": 35218},     # a history index
               {"time": 33.0, "text": "...", "state": 412},       # a states.jsonl line (1-based)
               {"time": null, "text": "...", "disk": "n2"}]}      # a node's disk dump

Steps are in time order, disk evidence last. Pure: a function of its
inputs; the callers (harness) find the files and the fault vocabulary.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from checkers.anomaly import MAX_EXAMPLES
from checkers.kernel.rows import POS_BITS
from core.history.batches import file_tables, flatten, int64s, tables, uncommitted
from core.history.dumps import dumps, read_dump
from core.history.faults import fault_intervals
from core.history.files import HistorySource
from core.history.format import FINAL_READS, TXN
from core.history.parquet import table_to_events
from core.history.states import read_states

log = logging.getLogger(__name__)

LIMIT = 1000  # stories per anomaly (results.json lists at most checkers.anomalies.MAX_EXAMPLES)
SHOW_READS = 3  # reads of one value told one by one; the rest counted
SHOW_CHANGES = 8  # leader/ISR changes told in one story; the rest counted
SHOW_FAULTS = 5
# A dirty read's send as the example names it ("{send}": its send, or its transaction).
SEND_STATE = {"info": "{send}'s outcome unknown (info)", "never completed": "{send} never completed",
              "no send": "no send wrote it"}
POS = POS_BITS  # a position as one int: partition << 40 | offset (as the kernel's)


def _pos(p: int, o: int) -> int:
    return (p << POS) | o


def _s(ns: int | None) -> str:
    return "?" if ns is None else f"{ns / 1e9:.1f} s"


def _sec(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e9, 3)


def _nodes(xs) -> str:
    return ",".join(str(x) for x in xs) if xs else "none"


def _and(xs: list[str]) -> str:
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


# --------------------------------------------------------------------------
# Inputs: states.jsonl and the disk dumps


def load_states(path: str | Path) -> list[dict] | None:
    """states.jsonl's lines, each with `line` (core/history/states.py); None if absent."""
    return read_states(Path(path))


@dataclass
class Disk:
    """What the disk dumps say about the positions and values of the stories, per node."""

    at: dict[str, dict[int, tuple]] = field(default_factory=dict)  # node -> pos -> (epoch, value)
    where: dict[str, dict[int, list[tuple]]] = field(default_factory=dict)  # node -> value -> [(p, o, epoch)]
    ends: dict[str, dict[int, int]] = field(default_factory=dict)  # node -> partition -> log end (last + 1)


def load_disk(root: str | Path, values: set[int], positions: set[int]) -> Disk | None:
    """The disk dumps beside a history (core/history/dumps.py), keeping only
    the rows at `positions` or of `values`; None if there are none."""
    found = dumps(Path(root))
    if not found:
        return None
    disk = Disk()
    for node, path in found.items():
        disk_rows(disk, node, [], values, positions)  # a node whose dump is empty holds nothing
        for rows in read_dump(path):
            disk_rows(disk, node, rows, values, positions)
    return disk


def disk_rows(disk: Disk, node: str, rows, values: set[int], positions: set[int]) -> None:
    """Add one node's dump rows to `disk`, keeping what the stories need."""
    at = disk.at.setdefault(node, {})
    where = disk.where.setdefault(node, {})
    ends = disk.ends.setdefault(node, {})
    for p, o, epoch, _key, value in rows:
        if o + 1 > ends.get(p, 0):
            ends[p] = o + 1
        pos = _pos(p, o)
        if pos in positions:
            at[pos] = (epoch, value)
        if value in values:
            where.setdefault(value, []).append((p, o, epoch))


# --------------------------------------------------------------------------
# The history: the events the stories need, in one pass


@dataclass
class Read:
    value: int
    partition: int
    offset: int
    index: int
    time: int
    invoked: int | None  # the poll's (or transaction's) invocation time
    process: int
    final: bool = False
    uncommitted: bool = False  # read at read_uncommitted: it sees aborted and open transactions' records


@dataclass
class Facts:
    events: dict[int, dict] = field(default_factory=dict)  # index -> event, for the examples' indexes
    # value -> its send events: a plain send's, or its transaction's as `_txn_view`s (the
    # invocation and the completion). Of the values asked for, and of the values a
    # transaction's completion places at the positions asked for (whoever wrote what is there).
    sends: dict[int, list[dict]] = field(default_factory=dict)
    acks_at: dict[int, list[dict]] = field(default_factory=dict)  # pos -> ok sends acknowledged there
    reads: dict[int, list[Read]] = field(default_factory=dict)  # value -> reads of it
    reads_at: dict[int, list[Read]] = field(default_factory=dict)  # pos -> reads there
    final_start: int | None = None  # time the first final reads began
    final_events: list[dict] = field(default_factory=list)
    # The consumer groups' own events, in the history's order: assigns, commits,
    # committed reads, crashes, and the handling steps that ended unknown.
    group_events: list[dict] = field(default_factory=list)


SCAN_COLUMNS = ("index", "time", "process", "type", "f", "key", "value", "partition", "offset", "error",
                "records", "partitions", "ends", "offsets", "group", "generation", "final", "sends", "isolation",
                "extra")
GROUP_FS = ("assign", "commit", "committed", "crash")  # few in any history: a group's story reads them all
READ_FS = ("poll", TXN)  # the operations whose completions carry reads


def _txn_view(e: dict, send: dict) -> dict:
    """One send of a transaction as the stories read a send: the transaction's event
    (`e`, its invocation or completion) with that send's value and position, and
    `txn`, `txn_time`: the transaction's invocation index and time (an invocation's
    own; a completion's are filled in by `scan`, which matches it to its invocation)."""
    view = {k: e[k] for k in ("index", "time", "process", "type", "f")}
    view.update({k: send[k] for k in ("key", "value", "partition", "offset") if send.get(k) is not None})
    if e.get("error") is not None:
        view["error"] = e["error"]
    view["txn"], view["txn_time"] = (e["index"], e["time"]) if e["type"] == "invoke" else (None, None)
    return view


@dataclass
class _Part:
    """What `_scan_part` found in one part of the history, read on its own."""

    facts: Facts
    # The reads and transaction completions whose invocation lies before this part:
    # (operation, process, the Read or the `_txn_view` to fill in), resolved by `scan`
    # from the parts before it.
    pending: list[tuple[str, int, object]]
    last_invoke: dict[str, dict[int, tuple[int, int]]]  # op -> process -> (index, time) of its last invocation


def scan(source: HistorySource, indexes: set[int], values: set[int], positions: set[int]) -> Facts:
    """One pass over the history, vectorised per chunk: events at `indexes`, sends of `values`
    (plain or in a transaction), ok sends at `positions`, transactions' sends placed at
    `positions` whatever their outcome, reads of `values` or at `positions` (polls' and
    transactions'), the final-reads operations.
    A Parquet history in several files is read a file per thread (Arrow reads and filters
    outside Python's lock; turning matches into events holds it, so the gain is less than
    the cores: docs/decisions.md, "Stories read a file per thread")."""
    wanted = (indexes, values, positions)
    if source.format == "parquet" and len(source.files) > 1:
        with ThreadPoolExecutor(max_workers=min(len(source.files), os.cpu_count() or 1),
                                thread_name_prefix="explain-scan") as pool:
            parts = list(pool.map(lambda file: _scan_part(file_tables(file, SCAN_COLUMNS), *wanted),
                                  source.files))
    else:
        parts = [_scan_part(tables(source, SCAN_COLUMNS), *wanted)]
    facts = Facts()
    last_invoke: dict[str, dict[int, tuple[int, int]]] = {op: {} for op in READ_FS}
    for part in parts:  # in the history's order
        for op, process, found in part.pending:
            _invoked(found, last_invoke[op].get(process))
        for op in READ_FS:
            last_invoke[op].update(part.last_invoke[op])
        facts.events.update(part.facts.events)
        for mine, theirs in ((facts.sends, part.facts.sends), (facts.acks_at, part.facts.acks_at),
                             (facts.reads, part.facts.reads), (facts.reads_at, part.facts.reads_at)):
            for key, rows in theirs.items():
                mine.setdefault(key, []).extend(rows)
        if facts.final_start is None:
            facts.final_start = part.facts.final_start
        facts.final_events += part.facts.final_events
        facts.group_events += part.facts.group_events
    _mark_final(facts)
    return facts


def _invoked(found, invocation: tuple[int, int] | None) -> None:
    """Give a read, or a transaction's completion view, its invocation (index, time)."""
    if invocation is None:
        return
    if isinstance(found, Read):
        found.invoked = invocation[1]
    else:
        found["txn"], found["txn_time"] = invocation


class _Invocations:
    """The invocations of one operation (poll, txn) in a chunk, to find the one a completion
    answers: its process's last before it (a process has one of them outstanding at a time)."""

    def __init__(self, rows: np.ndarray, process: np.ndarray, index: np.ndarray, time: np.ndarray):
        self.process, self.index, self.time = process[rows], index[rows], time[rows]

    def before(self, process: int, index: int, earlier: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
        """(index, time) of `process`'s last invocation before `index`: in this chunk, else `earlier`'s."""
        mine = np.flatnonzero((self.process == process) & (self.index < index))
        if len(mine):
            return int(self.index[mine[-1]]), int(self.time[mine[-1]])
        return earlier.get(process)

    def last(self) -> dict[int, tuple[int, int]]:
        """Each process's last invocation in this chunk."""
        if not len(self.process):
            return {}
        procs, at = np.unique(self.process[::-1], return_index=True)
        at = len(self.process) - 1 - at
        return dict(zip(procs.tolist(), zip(self.index[at].tolist(), self.time[at].tolist())))


def _scan_part(tables, indexes: set[int], values: set[int], positions: set[int]) -> _Part:
    """`scan` over one part of the history (its Arrow tables, in order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    facts = Facts()
    pending: list[tuple[str, int, object]] = []
    want_i = pa.array(sorted(indexes), pa.int64())
    want_v = pa.array(sorted(values), pa.int64())
    want_p = pa.array(sorted(positions), pa.int64())
    want_v_np, want_p_np = want_v.to_numpy(), want_p.to_numpy()
    last_invoke: dict[str, dict[int, tuple[int, int]]] = {op: {} for op in READ_FS}
    for table in tables:
        f, typ = table["f"], table["type"]
        pos = pc.add(pc.shift_left(table["partition"], POS), table["offset"])
        is_send = pc.equal(f, "send")
        keep = pc.or_kleene(pc.is_in(table["index"], value_set=want_i), pc.equal(f, FINAL_READS))
        group_event = pc.or_kleene(pc.is_in(f, value_set=pa.array(GROUP_FS)),
                                   pc.and_kleene(pc.equal(f, "process"), pc.equal(typ, "info")))
        keep = pc.or_kleene(keep, group_event)
        keep = pc.or_kleene(keep, pc.and_kleene(is_send, pc.is_in(table["value"], value_set=want_v)))
        keep = pc.or_kleene(keep, pc.and_kleene(pc.and_kleene(is_send, pc.equal(typ, "ok")),
                                                pc.is_in(pos, value_set=want_p)))
        for e in table_to_events(table.filter(pc.fill_null(keep, False))):
            if e["index"] in indexes:
                facts.events[e["index"]] = e
            if e["f"] in GROUP_FS or e["f"] == "process":
                facts.group_events.append(e)
            if e["f"] == FINAL_READS:
                facts.final_events.append(e)
                if e["type"] == "invoke" and facts.final_start is None:
                    facts.final_start = e["time"]
            if e["f"] == "send":
                if e.get("value") in values:
                    facts.sends.setdefault(e["value"], []).append(e)
                if e["type"] == "ok" and e.get("partition") is not None and e.get("offset") is not None:
                    p = _pos(e["partition"], e["offset"])
                    if p in positions:
                        facts.acks_at.setdefault(p, []).append(e)
        process, index, time = int64s(table["process"]), int64s(table["index"]), int64s(table["time"])
        invoke = pc.fill_null(pc.equal(typ, "invoke"), False).to_numpy(zero_copy_only=False)
        op_rows = {op: pc.fill_null(pc.equal(f, op), False).to_numpy(zero_copy_only=False) for op in READ_FS}
        invocations = {op: _Invocations(rows & invoke, process, index, time) for op, rows in op_rows.items()}

        def invoked(op: str, row: int, found) -> None:
            """Give `found` (a read, a completion's view) the invocation its operation at `row` answers."""
            got = invocations[op].before(int(process[row]), int(index[row]), last_invoke[op])
            if got is None:
                pending.append((op, int(process[row]), found))  # invoked in an earlier part, or never
            _invoked(found, got)

        # Transactions' sends: of the values asked for, and any completion's at a position asked for.
        if op_rows[TXN].any():
            sends = flatten(table, "sends", op_rows[TXN])
            spos = np.where((sends.partition >= 0) & (sends.offset >= 0), (sends.partition << POS) + sends.offset, -1)
            by_value = np.isin(sends.value, want_v_np)
            at_pos = np.isin(spos, want_p_np) & ~invoke[sends.parent]
            hits = np.flatnonzero(by_value | at_pos)
            if len(hits):
                rows = np.unique(sends.parent[hits])
                events = dict(zip(rows.tolist(), table_to_events(table.take(pa.array(rows)))))
                for k in hits.tolist():
                    row = int(sends.parent[k])
                    e = events[row]
                    view = _txn_view(e, e["sends"][int(sends.slot[k])])
                    if e["type"] != "invoke":
                        invoked(TXN, row, view)
                    facts.sends.setdefault(view["value"], []).append(view)
                    if at_pos[k] and e["type"] == "ok":
                        facts.acks_at.setdefault(int(spos[k]), []).append(view)
        # Reads: the records of the polls' and the transactions' completions, flattened.
        reading = (op_rows["poll"] & pc.fill_null(pc.equal(typ, "ok"), False).to_numpy(zero_copy_only=False)) \
            | (op_rows[TXN] & ~invoke)
        if reading.any():
            recs = flatten(table, "records", reading)
            rpos = (recs.partition << POS) + recs.offset
            hits = np.flatnonzero(np.isin(recs.value, want_v_np) | np.isin(rpos, want_p_np))
            if len(hits):
                below = uncommitted(table) if "isolation" in table.column_names else np.zeros(table.num_rows, bool)
                for k in hits.tolist():
                    row = int(recs.parent[k])
                    op = "poll" if op_rows["poll"][row] else TXN
                    r = Read(int(recs.value[k]), int(recs.partition[k]), int(recs.offset[k]), int(index[row]),
                             int(time[row]), None, int(process[row]), uncommitted=bool(below[row]))
                    invoked(op, row, r)
                    facts.reads.setdefault(r.value, []).append(r)
                    facts.reads_at.setdefault(_pos(r.partition, r.offset), []).append(r)
        for op in READ_FS:
            last_invoke[op].update(invocations[op].last())
    return _Part(facts, pending, last_invoke)


def _mark_final(facts: Facts) -> None:
    """Reads inside a final-reads operation of their process are final reads."""
    brackets: dict[int, list[list[int]]] = {}
    for e in sorted(facts.final_events, key=lambda e: e["index"]):
        if e["type"] == "invoke":
            brackets.setdefault(e["process"], []).append([e["index"], 1 << 62])
        elif brackets.get(e["process"]):
            brackets[e["process"]][-1][1] = e["index"]
    for reads in facts.reads.values():
        for r in reads:
            r.final = any(lo < r.index < hi for lo, hi in brackets.get(r.process, []))


# --------------------------------------------------------------------------
# The cluster-state timeline


class Timeline:
    """states.jsonl, indexed: each partition's state lines and the truncations, by time."""

    def __init__(self, states: list[dict] | None):
        self.present = bool(states)
        lines = sorted(states or [], key=lambda x: (x["time"], x.get("line", 0)))
        self.parts: dict[int, list[dict]] = {}
        self.truncations: dict[int, list[dict]] = {}
        for x in lines:
            if x.get("kind") == "partition" and isinstance(x.get("partition"), int):
                self.parts.setdefault(x["partition"], []).append(x)
            elif x.get("kind") == "truncation" and isinstance(x.get("partition"), int):
                self.truncations.setdefault(x["partition"], []).append(x)
        self._times = {p: [x["time"] for x in xs] for p, xs in self.parts.items()}

    def at(self, p: int, t: int | None) -> dict | None:
        """The partition's state line in force at time t."""
        if t is None or p not in self.parts:
            return None
        i = bisect.bisect_right(self._times[p], t) - 1
        return self.parts[p][i] if i >= 0 else None

    def during(self, p: int, t0: int | None, t1: int | None) -> list[dict]:
        """The state lines in force at some moment of [t0, t1]."""
        if t0 is None or t1 is None or p not in self.parts:
            return []
        first = self.at(p, t0)
        lo = bisect.bisect_right(self._times[p], t0)
        hi = bisect.bisect_right(self._times[p], t1)
        return ([first] if first else []) + self.parts[p][lo:hi]

    def changes(self, p: int, t0: int | None, t1: int | None) -> list[dict]:
        """Lines in (t0, t1] where the leader, epoch or ISR changed."""
        out, prev = [], self.at(p, t0)
        for x in self.during(p, t0, t1)[1 if prev else 0:]:
            if prev is None or _key(x) != _key(prev):
                out.append(x)
            prev = x
        return out

    def hw_passed(self, p: int, offset: int, after: int | None) -> dict | None:
        """The first line at or after `after` whose HW is past `offset`."""
        if after is None:
            return None
        for x in self.parts.get(p, [])[bisect.bisect_left(self._times.get(p, []), after):]:
            if isinstance(x.get("hw"), int) and x["hw"] > offset:
                return x
        return None

    def cuts(self, p: int, offset: int, t0: int | None, t1: int | None = None) -> list[dict]:
        """Truncations of partition p at or below `offset` (removing it), in [t0, t1]."""
        out = []
        for x in self.truncations.get(p, []):
            if not isinstance(x.get("offset"), int) or x["offset"] > offset:
                continue
            if isinstance(x.get("log_end"), int) and x["log_end"] <= offset:
                continue  # that replica did not have the offset
            if (t0 is None or x["time"] >= t0) and (t1 is None or x["time"] <= t1):
                out.append(x)
        return out


def _key(x: dict) -> tuple:
    return x.get("leader"), x.get("epoch"), tuple(x.get("isr") or ())


def _state(x: dict | None, isr: bool = True) -> str:
    """'n5 (epoch 0, ISR n5,n1,n2)'."""
    if x is None:
        return ""
    if x.get("leader") is None:
        return "no leader" + (f" (epoch {x['epoch']})" if x.get("epoch") is not None else "")
    inner = [f"epoch {x['epoch']}"] if x.get("epoch") is not None else []
    if isr:
        inner.append(f"ISR {_nodes(x.get('isr'))}")
    return f"{x['leader']}" + (f" ({', '.join(inner)})" if inner else "")


def _leaders(lines: list[dict]) -> str:
    """The leaders of some state lines: 'n5' or 'n5 or n1'."""
    names = list(dict.fromkeys(_state(x, isr=False) for x in lines if x))
    return " or ".join(names)


# --------------------------------------------------------------------------
# Faults


def _components(grudge: dict) -> list[list[str]] | None:
    """The groups of nodes that still talk, if the grudge splits the nodes into such groups
    (each talks to all of its group and none outside); None for other shapes (a ring, a bridge)."""
    nodes = sorted(set(grudge) | {n for xs in grudge.values() if isinstance(xs, list) for n in xs})
    cut = {(a, b) for a, xs in grudge.items() if isinstance(xs, list) for b in xs}
    talk = lambda a, b: (a, b) not in cut and (b, a) not in cut  # noqa: E731
    groups: list[list[str]] = []
    for n in nodes:
        for g in groups:
            if all(talk(n, m) for m in g):
                g.append(n)
                break
        else:
            groups.append([n])
    for i, g in enumerate(groups):  # a clean split: nobody talks across groups
        if any(talk(a, b) for h in groups[i + 1:] for a in g for b in h):
            return None
    return groups if len(groups) > 1 else None


def _fault_text(i: dict) -> str:
    """'start-partition n1 n5 | n2 n3 n4', 'start-partition (majorities-ring)', 'kill on n3'."""
    start = i["value"] if isinstance(i.get("value"), dict) else {}
    hit = i["hit"] if isinstance(i.get("hit"), dict) else {}
    v = {**start, **hit, **(i["end_value"] if isinstance(i.get("end_value"), dict) else {})}
    grudge = v.get("grudge")
    what = ""
    if isinstance(grudge, dict):
        groups = _components(grudge)
        what = " " + " | ".join(" ".join(g) for g in groups) if groups else ""
        if not groups:
            what = f" ({start.get('mode') or 'one-way cuts'})"
    elif isinstance(v.get("nodes"), list):
        what = " on " + _nodes(v["nodes"])
    elif v.get("mode"):
        what = f" ({v['mode']})"
    if isinstance(v.get("coordinator_of"), str):
        what += f", the coordinator of group {v['coordinator_of']}"
    return f"{i['f']}{what}"


# --------------------------------------------------------------------------
# Stories


class _Story:
    def __init__(self, anomaly: str, **where):
        self.anomaly = anomaly
        self.where = where
        self.steps: list[dict] = []
        self.disk: list[dict] = []
        self.summary = ""

    def add(self, t: int | None, text: str, **ref) -> None:
        step = {"time": _sec(t), "text": text, **{k: v for k, v in ref.items() if v is not None}}
        if step not in self.steps:  # two values of one story can share a fact (the same HW line)
            self.steps.append(step)

    def done(self) -> dict:
        steps = sorted(self.steps, key=lambda s: (s["time"] is None, s["time"] or 0))
        return {"anomaly": self.anomaly, **self.where, "summary": self.summary, "steps": steps + self.disk}


class Explainer:
    def __init__(self, facts: Facts, timeline: Timeline, disk: Disk | None, intervals: list[dict]):
        self.facts, self.tl, self.disk, self.intervals = facts, timeline, disk, intervals

    # -- the pieces every story uses

    def _send(self, st: _Story, value: int, ack_pos: tuple[int, int] | None = None, named: bool = False) -> dict | None:
        """The send's invocation and completion (a transaction's: which one, and how it
        ended); returns the completion."""
        events = sorted(self.facts.sends.get(value, []), key=lambda e: e["index"])
        inv = next((e for e in events if e["type"] == "invoke"), None)
        comp = next((e for e in events if e["type"] != "invoke"), None)
        p = ack_pos[0] if ack_pos else (comp or {}).get("partition")
        writer = self._writer(value)
        txn = _txn_name(writer) if writer is not None and writer.in_txn else None
        if inv is not None:
            lead = self.tl.at(p, inv["time"]) if p is not None else None
            st.add(inv["time"], f"{value} sent by process {inv['process']}" + (f" in {txn}" if txn else "")
                   + f" at {_s(inv['time'])}"
                   + (f" (leader {lead['leader']}" + (f", epoch {lead['epoch']})" if lead.get("epoch") is not None
                                                       else ")") if lead and lead.get("leader") else ""),
                   event=inv["index"])
        if comp is not None:
            if comp["type"] == "ok":
                p, o = comp.get("partition"), comp.get("offset")
                lead = self.tl.at(p, comp["time"])
                by = f" by {_state(lead)}" if lead else ""
                who = f"{value} acknowledged" if named else "acknowledged"
                st.add(comp["time"], f"{txn} {_outcome(comp)}: {who} at {p}:{o}{by}" if txn
                       else f"{who} at {p}:{o}{by} at {_s(comp['time'])}", event=comp["index"])
                hw = self.tl.hw_passed(p, o, comp["time"])
                if hw is not None:
                    st.add(hw["time"], f"committed: the HW of partition {p} was {hw['hw']} at {_s(hw['time'])}"
                           + (f" (leader {hw['leader']})" if hw.get("leader") else ""), state=hw.get("line"))
            elif txn:
                st.add(comp["time"], f"{txn} {_outcome(comp)}", event=comp["index"])
            else:
                err = f" ({comp['error']})" if comp.get("error") else ""
                st.add(comp["time"], f"its send ended {comp['type']}{err} at {_s(comp['time'])}", event=comp["index"])
        elif inv is not None:
            st.add(None, f"{txn} never completed" if txn else "its send never completed")
        return comp

    def _writer(self, value: int, pos: int | None = None) -> _Writer | None:
        """How `value` was sent, as far as the facts tell: its send events, or (a value
        found at `pos`) its acknowledgement there; None where they tell nothing."""
        events = self.facts.sends.get(value, [])
        if pos is not None:
            events = events + [e for e in self.facts.acks_at.get(pos, []) if e["value"] == value]
        if not events:
            return None
        events = sorted(events, key=lambda e: e["index"])
        comp = next((e for e in events if e["type"] != "invoke"), None)
        txn = next((e for e in events if e.get("txn") is not None), None)
        return _Writer(events[0]["process"], events[0]["f"] == TXN, txn["txn"] if txn else None,
                       txn["txn_time"] if txn else None, comp)

    def _reused(self, v: int, w: int, pos: int) -> str | None:
        """Where v's transaction was acknowledged at `pos`, which holds w, written before in a
        transaction of the same process that did not commit: the broker took v's batch for a
        retry of w's (the same producer id, epoch and sequence number) and answered it with
        w's offset, writing nothing. The sentence that says so; None otherwise."""
        mine, theirs = self._writer(v), self._writer(w, pos)
        if mine is None or theirs is None or not (mine.in_txn and theirs.in_txn) or mine.process != theirs.process:
            return None
        ack = mine.completion
        if ack is None or ack["type"] != "ok" or _pos(ack["partition"], ack["offset"]) != pos:
            return None
        if (theirs.completion or {}).get("type") == "ok" or None in (mine.txn, theirs.txn) or theirs.txn > mine.txn:
            return None
        aborted = "an aborted" if (theirs.completion or {}).get("type") == "fail" else "an uncommitted"
        return (f"the broker answered {v}'s batch as a retry of {w}'s: the client reused a producer "
                f"sequence number of {aborted} transaction")

    def _held(self, v: int, p: int, o: int, others: list[int]) -> str:
        """The summary's words for `others`, the values found at (p, o) instead of v: that they
        took the offset; where a transaction sent v or one of them, who sent each and how, and
        whether v's batch was answered as a retry of its."""
        pos, mine = _pos(p, o), self._writer(v)
        plain, told = [], []
        for w in others:
            theirs = self._writer(w, pos)
            if theirs is None or not (theirs.in_txn or (mine is not None and mine.in_txn)):
                plain.append(str(w))
                continue
            said = f"{w}, {_sent_by(theirs, mine)}, holds {p}:{o}"
            reads = [r for r in self.facts.reads_at.get(pos, []) if r.value == w]
            acked = any(e["value"] == w for e in self.facts.acks_at.get(pos, []))
            if reads and not acked and all(r.uncommitted for r in reads):
                aborted = (theirs.completion or {}).get("type") == "fail"
                said += ", read only by read_uncommitted readers" + (" (aborted)" if aborted else "")
            reused = self._reused(v, w, pos)
            told.append(said + (f"; {reused}" if reused else ""))
        return "; ".join(([f"{_and(plain)} took offset {o}"] if plain else []) + told)

    def _reads(self, st: _Story, reads: list[Read], what: str = "read") -> None:
        run = [r for r in reads if not r.final]
        for r in run[:SHOW_READS]:
            lines = self.tl.during(r.partition, r.invoked if r.invoked is not None else r.time, r.time)
            src = f", from {_leaders(lines)}" if lines else ""
            st.add(r.time, f"{what} at {r.partition}:{r.offset} by {_reader(r)} at {_s(r.time)}{src}",
                   event=r.index)
        if len(run) > SHOW_READS:
            st.add(run[SHOW_READS].time, f"and {len(run) - SHOW_READS} more reads of it until {_s(run[-1].time)}",
                   event=run[SHOW_READS].index)
        final = [r for r in reads if r.final]
        if final:
            r = final[0]
            st.add(r.time, f"the final reads found it at {r.partition}:{r.offset} at {_s(r.time)}", event=r.index)

    def _window(self, st: _Story, p: int, t0: int | None, t1: int | None) -> None:
        """Faults active in [t0, t1], and the partition's leader/epoch/ISR changes there."""
        if t0 is None or t1 is None:
            return
        active = [i for i in self.intervals if i["start"] <= t1 and i["end"] >= t0]
        for i in active[:SHOW_FAULTS]:
            st.add(i["start"], f"fault {_fault_text(i)} from {_s(i['start'])} to {_s(i['end'])}", event=i["index"])
        if len(active) > SHOW_FAULTS:
            st.add(active[SHOW_FAULTS]["start"], f"and {len(active) - SHOW_FAULTS} more faults")
        changes = self.tl.changes(p, t0, t1)
        for x in changes[:SHOW_CHANGES]:
            st.add(x["time"], f"{_state(x)} leads partition {p} from {_s(x['time'])}"
                   if x.get("leader") else f"partition {p} has no leader from {_s(x['time'])}", state=x.get("line"))
        if len(changes) > SHOW_CHANGES:
            st.add(changes[SHOW_CHANGES]["time"], f"and {len(changes) - SHOW_CHANGES} more leader or ISR changes")

    def _cuts(self, st: _Story, p: int, o: int, t0: int | None, t1: int | None = None) -> list[dict]:
        cuts = self.tl.cuts(p, o, t0, t1)
        for x in cuts:
            st.add(x["time"], _cut_text(x, p), state=x.get("line"))
        return cuts

    def _others_at(self, st: _Story, p: int, o: int, not_value: set, after: int | None = None) -> list[int]:
        """Other values acknowledged or read at (p, o): each one's write, and the epoch it was written in;
        a transaction's, which one and how it ended, and whether a batch acknowledged there was taken for a
        retry of its. Returns those first seen at `after` or later (all of them without `after`)."""
        pos = _pos(p, o)
        others: dict[int, dict] = {}
        for e in self.facts.acks_at.get(pos, []):
            if e["value"] not in not_value:
                others.setdefault(e["value"], {})["ack"] = e
        for r in self.facts.reads_at.get(pos, []):
            if r.value not in not_value:
                others.setdefault(r.value, {}).setdefault("read", r)
        for w, got in sorted(others.items(), key=lambda kv: _first_time(kv[1])):
            epoch = self._disk_epoch(pos, w)
            if "ack" in got:
                e = got["ack"]
                lead = self.tl.at(p, e["time"])
                who = lead.get("leader") if lead else None
                ep = epoch if epoch is not None else (lead.get("epoch") if lead else None)
                by = f" by {who}" if who else ""
                by += f" (epoch {ep})" if ep is not None else ""
                st.add(e["time"], f"{w} written at {p}:{o}{by} at {_s(e['time'])}", event=e["index"])
            else:
                r = got["read"]
                st.add(r.time, f"{w} read at {p}:{o} by {_reader(r)} at {_s(r.time)}"
                       + (f" (written in epoch {epoch})" if epoch is not None else ""), event=r.index)
            writer = self._writer(w, pos)
            if writer is not None and writer.in_txn:
                t = writer.invoked if writer.invoked is not None else (writer.completion or {}).get("time")
                st.add(t, f"{w} sent by process {writer.process} in {_txn_name(writer)}"
                       + (f" at {_s(writer.invoked)}" if writer.invoked is not None else "")
                       + f", which {_outcome(writer.completion)}",
                       event=writer.txn if writer.txn is not None else (writer.completion or {}).get("index"))
        known, dup_of = [*not_value, *others], set()
        for a in known:
            for b in known:
                reused = self._reused(a, b, pos) if a != b else None
                if reused:
                    ack = self._writer(a).completion
                    st.add(ack["time"], reused, event=ack["index"])
                    if a in not_value:
                        dup_of.add(b)
        # What the story's batch was answered as a retry of was there before its
        # acknowledgement, and holds the position all the same.
        return [w for w, got in others.items() if after is None or _first_time(got) >= after or w in dup_of]

    def _disk_epoch(self, pos: int, value: int) -> int | None:
        if self.disk is None:
            return None
        for at in self.disk.at.values():
            got = at.get(pos)
            if got and got[1] == value:
                return got[0]
        return None

    def _on_disk(self, st: _Story, p: int, o: int, value: int | None = None) -> list[str]:
        """Where things are at the end: who holds what at (p, o), and where `value` is.
        Returns the nodes that hold `value` at (p, o)."""
        if self.disk is None:
            return []
        pos = _pos(p, o)
        groups: dict[object, list[str]] = {}
        for node in sorted(self.disk.at):
            got = self.disk.at[node].get(pos)
            key = ("v", got[1], got[0]) if got else ("none", self.disk.ends.get(node, {}).get(p, 0))
            groups.setdefault(key, []).append(node)
        parts = []
        for key, nodes in groups.items():
            if key[0] == "v":
                parts.append(f"{_and(nodes)} {'holds' if len(nodes) == 1 else 'hold'} {key[1]} at {o} (epoch {key[2]})")
            else:
                parts.append(f"{_and(nodes)} {'has' if len(nodes) == 1 else 'have'} nothing at {o} "
                             f"(log end {key[1]})")
        if parts:
            self._disk_step(st, f"at the end {'; '.join(parts)}", sorted(self.disk.at)[0])
        holders = [n for key, nodes in groups.items() if key[0] == "v" and key[1] == value for n in nodes]
        if value is not None:
            elsewhere = []
            for node in sorted(self.disk.where):
                for (q, off, ep) in self.disk.where[node].get(value, []):
                    if (q, off) != (p, o):
                        elsewhere.append(f"{node} holds {value} at {q}:{off} (epoch {ep})")
            if elsewhere:
                self._disk_step(st, "; ".join(elsewhere), None)
            elif not holders:
                self._disk_step(st, f"no replica holds {value} on disk", None)
        return holders

    @staticmethod
    def _disk_step(st: _Story, text: str, node: str | None) -> None:
        st.disk.append({"time": None, "text": text, "disk": node or "all"})

    def _replaced(self, p: int, o: int, values: set, after: int | None) -> int | None:
        """When (p, o) was first seen holding another value (acknowledged or read) after `after`:
        the story's window closes there, the loss having happened by then."""
        pos = _pos(p, o)
        times = [e["time"] for e in self.facts.acks_at.get(pos, []) if e["value"] not in values]
        times += [r.time for r in self.facts.reads_at.get(pos, []) if r.value not in values]
        times = [t for t in times if after is None or t >= after]
        return min(times) if times else None

    def _end(self) -> int | None:
        return self.facts.final_start

    # -- one story per anomaly kind

    def lost(self, name: str, ex: dict, final: bool) -> dict:
        """An acknowledged record gone: from the final log (`final`), or never read though later offsets were."""
        v, p, o = ex["value"], ex["partition"], ex["offset"]
        st = _Story(name, partition=p, offset=o, value=v)
        comp = self._send(st, v, (p, o))
        reads = self.facts.reads.get(v, [])
        self._reads(st, reads)
        t_ack = comp["time"] if comp else None
        inv = next((e for e in self.facts.sends.get(v, []) if e["type"] == "invoke"), None)
        start = inv["time"] if inv else t_ack
        self._window(st, p, start, self._replaced(p, o, {v}, start) or self._end())
        cuts = self._cuts(st, p, o, t_ack)
        others = self._others_at(st, p, o, {v}, after=t_ack or 0)
        if final:
            st.add(self._end(), f"the final reads of partition {p} (to offset {ex.get('final_end')}) do not hold it")
        else:
            st.add(None, f"no read returned it, though reads of partition {p} reached {ex.get('max_read_offset')}")
        self._on_disk(st, p, o, v)
        head = f"{v}, acknowledged at {p}:{o}" + (f" by {_state(self.tl.at(p, t_ack), isr=False)}" if
                                                   self.tl.at(p, t_ack) else "") + f" at {_s(t_ack)}"
        writer = self._writer(v)
        if writer is not None and writer.in_txn:
            head += f" in {_txn_name(writer)} of process {writer.process}"
        if final:
            read = [r for r in reads if not r.final]
            head += (f" and read at {_s(read[0].time)}," if read else ",") + " is not in the topic at the end"
        else:
            head += ", was never read though later offsets were"
        if cuts:
            c = cuts[0]
            head += f": {c.get('node')} truncated partition {p} to {c['offset']} at {_s(c['time'])}"
            if c.get("leader"):
                head += f" following {c['leader']}" + (f" (epoch {c['epoch']})" if c.get("epoch") is not None else "")
        if others:
            head += ("; " if cuts else ": ") + self._held(v, p, o, others)
        st.summary = head + "."
        return st.done()

    def dirty(self, name: str, ex: dict) -> dict:
        """A record read whose send never settled, and that the topic did not keep."""
        v, p = ex["value"], ex["partition"]
        reads = [r for r in self.facts.reads.get(v, []) if r.partition == p] or self.facts.reads.get(v, [])
        o = reads[0].offset if reads else None
        st = _Story(name, partition=p, offset=o, value=v)
        self._send(st, v, (p, o))
        self._reads(st, reads)
        t_read = reads[0].time if reads else None
        inv = next((e for e in self.facts.sends.get(v, []) if e["type"] == "invoke"), None)
        self._window(st, p, inv["time"] if inv else t_read,
                     (self._replaced(p, o, {v}, t_read) if o is not None else None) or self._end() or t_read)
        cuts = self._cuts(st, p, o, t_read) if o is not None else []
        others = self._others_at(st, p, o, {v}, after=t_read or 0) if o is not None else []
        if o is not None:
            self._on_disk(st, p, o, v)
        lines = self.tl.during(p, reads[0].invoked or reads[0].time, reads[0].time) if reads else []
        writer = self._writer(v)
        send = _txn_name(writer) if writer is not None and writer.in_txn else "its send"
        head = (f"{v} was read at {p}:{o}" + (f" from {_leaders(lines)}" if lines else "")
                + f" at {_s(t_read)}, {SEND_STATE.get(ex.get('send'), '{send} never settled').format(send=send)}, "
                "and the topic did not keep it")
        if cuts:
            c = cuts[0]
            head += f": {c.get('node')} truncated partition {p} to {c['offset']} at {_s(c['time'])}"
        if others:
            head += ("; " if cuts else ": ") + self._held(v, p, o, others)
        st.summary = head + "."
        return st.done()

    def duplicate(self, name: str, ex: dict, failed: bool) -> dict:
        """A value at several positions; or (`failed`) read though its send failed."""
        v = ex["value"]
        positions = [(x["partition"], x["offset"]) for x in ex.get("positions", [])]
        p, o = positions[0] if positions else (None, None)
        st = _Story(name, partition=p, offset=o, value=v, positions=[f"{a}:{b}" for a, b in positions])
        comp = self._send(st, v, None)
        reads = self.facts.reads.get(v, [])
        self._reads(st, reads)
        times = [e["time"] for e in self.facts.sends.get(v, [])] + [r.time for r in reads if not r.final]
        if p is not None and times:
            self._window(st, p, min(times), max(times))
        for a, b in positions:
            self._cuts(st, a, b, min(times) if times else None, max(times) if times else None)
        for a, b in positions[:3]:
            self._on_disk(st, a, b, None)
        where = ", ".join(f"{a}:{b}" for a, b in positions)
        writer = self._writer(v)
        txn = _txn_name(writer) if writer is not None and writer.in_txn else None
        if failed:
            err = f" ({comp['error']})" if comp and comp.get("error") else ""
            first = next((r for r in reads if not r.final), reads[0] if reads else None)
            st.summary = (f"{v}'s {txn or 'send'} failed{err}" + (f" at {_s(comp['time'])}" if comp else "")
                          + (f", yet it was read at {first.partition}:{first.offset} at {_s(first.time)}" if first else "")
                          + ".")
        else:
            st.summary = f"{v} is at {len(positions)} positions, {where}" + (
                f" (sent once{f', in {txn}' if txn else ''}, acknowledged at {comp['partition']}:{comp['offset']} "
                f"at {_s(comp['time'])})"
                if comp and comp["type"] == "ok" else "") + "."
        return st.done()

    def inconsistent(self, name: str, ex: dict) -> dict:
        """Two values at one position."""
        p, o = ex["partition"], ex["offset"]
        values = [x["value"] for x in ex.get("values", [])]
        st = _Story(name, partition=p, offset=o, values=values)
        self._others_at(st, p, o, set())
        times = [e["time"] for e in self.facts.acks_at.get(_pos(p, o), [])] + \
                [r.time for r in self.facts.reads_at.get(_pos(p, o), [])]
        t0, t1 = (min(times), max(times)) if times else (None, None)
        self._window(st, p, t0, t1)
        cuts = self._cuts(st, p, o, t0, t1)
        self._on_disk(st, p, o, None)
        head = f"partition {p} offset {o} held {_and([str(v) for v in values])}"
        if cuts:
            c = cuts[0]
            head += (f": {c.get('node')} truncated it at {_s(c['time'])}"
                     + (f" following {c['leader']}" if c.get("leader") else "")
                     + (f" (epoch {c['epoch']})" if c.get("epoch") is not None else ""))
        st.summary = head + "."
        return st.done()

    def read_step(self, name: str, ex: dict) -> dict:
        """A consumer's step back, or over a known record."""
        p, proc = ex["partition"], ex["process"]
        a, b = ex["prev_offset"], ex["offset"]
        skipped = ex.get("skipped_offset")
        st = _Story(name, partition=p, offset=skipped if skipped is not None else b, value=ex.get("value"),
                    process=proc)
        prev = self.facts.events.get(ex["prev_index"])
        cur = self.facts.events.get(ex["index"])
        t0, t1 = (prev or {}).get("time"), (cur or {}).get("time")
        for e, off, val in ((prev, a, ex.get("prev_value")), (cur, b, ex.get("value"))):
            if e is not None:
                lead = self.tl.at(p, e["time"])
                st.add(e["time"], f"process {proc} read {val} at {p}:{off} at {_s(e['time'])}"
                       + (f", from {_state(lead, isr=False)}" if lead else ""), event=e["index"])
        self._window(st, p, t0, t1)
        if b <= a:  # a step back: a truncation may have moved the log under the reader
            self._cuts(st, p, max(a, b), t0, t1)
        if skipped is not None:
            others = self._others_at(st, p, skipped, set())
            self._on_disk(st, p, skipped, None)
            st.summary = (f"process {proc} read {p}:{b} right after {p}:{a} at {_s(t1)}, skipping offset {skipped}"
                          + (f", which holds {_and([str(w) for w in others])}" if others else "") + ".")
        else:
            self._on_disk(st, p, min(a, b), None)
            st.summary = f"process {proc} went back from {p}:{a} to {p}:{b} at {_s(t1)} without a seek."
        return st.done()

    def send_order(self, name: str, ex: dict) -> dict:
        """A producer's acknowledgements going back within a partition."""
        p, proc = ex["partition"], ex["process"]
        st = _Story(name, partition=p, offset=ex["offset"], value=ex["value"], process=proc)
        self._send(st, ex["prev_value"], named=True)
        cur = self._send(st, ex["value"], named=True)
        times = [e["time"] for v in (ex["prev_value"], ex["value"]) for e in self.facts.sends.get(v, [])]
        if times:
            self._window(st, p, min(times), max(times))
            self._cuts(st, p, ex["prev_offset"], min(times), max(times))
        st.summary = (f"process {proc} sent {ex['value']} after {ex['prev_value']}, but it was acknowledged at "
                      f"{p}:{ex['offset']}, before {ex['prev_value']}'s {p}:{ex['prev_offset']}"
                      + (f" (at {_s(cur['time'])})" if cur else "") + ".")
        return st.done()

    def replica(self, name: str, ex: dict) -> dict:
        """A replica that held another record at an offset of the final log."""
        p, o, v = ex["partition"], ex["offset"], ex["value"]
        diverged = [x for x in ex.get("replicas", []) if x.get("diverges")]
        st = _Story(name, partition=p, offset=o, value=v, nodes=[x["node"] for x in diverged])
        self._others_at(st, p, o, set())
        times = [e["time"] for e in self.facts.acks_at.get(_pos(p, o), [])] + \
                [r.time for r in self.facts.reads_at.get(_pos(p, o), [])]
        t0 = min(times) if times else None
        self._cuts(st, p, o, t0)
        led = []
        for x in diverged:
            spans = [line for line in self.tl.parts.get(p, []) if line.get("leader") == x["node"]]
            if spans:
                last = spans[-1]
                led.append(f"{x['node']} last led partition {p} from {_s(last['time'])}"
                           + (f" (epoch {last['epoch']})" if last.get("epoch") is not None else ""))
                st.add(last["time"], led[-1], state=last.get("line"))
        self._on_disk(st, p, o, v)
        held = _and([f"{x['node']} held {x['value']} (written in epoch {x['epoch']})" for x in diverged]) or "?"
        st.summary = (f"at the end {held} at {p}:{o}, where the topic holds {v}"
                      + (f"; {'; '.join(led)}" if led else "") + ".")
        return st.done()

    def consumer_loss(self, name: str, ex: dict) -> dict:
        """A record a consumer group committed past that no member handled:
        who it was delivered to, who committed past it and when, how that
        member ended, and where the member that took the partition over began."""
        p, o, v, group = ex["partition"], ex["offset"], ex["value"], ex["group"]
        st = _Story(name, partition=p, offset=o, value=v, group=group)
        self._send(st, v, (p, o))
        reads = self.facts.reads.get(v, [])
        self._reads(st, reads, what="delivered")
        run = [r for r in reads if not r.final]
        if run:
            self._window(st, p, run[0].time, self._end() or run[-1].time)
        first = next((r for r in run if r.index == ex.get("read_index")), run[0] if run else None)
        said = [f"{v} at {p}:{o} was " + (f"delivered to process {first.process} at {_s(first.time)}" if first
                                           else "never delivered to a member")]
        if first is not None:
            said += self._member_after(st, group, first.process, p, o, first.time)
        st.add(self._end(), f"group {group}'s final committed offset of partition {p} is "
                            f"{ex.get('final_committed')}: past {o}, which no member of it handled")
        st.summary = (", ".join(said) + f"; never handled by group {group}, which committed past it "
                      f"(to offset {ex.get('final_committed')}).")
        return st.done()

    def lost_commit(self, name: str, ex: dict) -> dict:
        """An acknowledged commit a later read of the group's offsets did not
        return: the commit, what happened to the group between (faults,
        rebalances, crashes), and the read."""
        group, p, c = ex["group"], ex["partition"], ex["acked"]
        returned = "none" if ex["returned"] == -1 else ex["returned"]
        st = _Story(name, group=group, partition=p, offset=c)
        acked = self.facts.events.get(ex["acked_index"])
        read = self.facts.events.get(ex["completion_index"])
        if acked is None or read is None:
            return None
        st.add(acked["time"], f"process {acked['process']} committed partition {p} of group {group} to offset {c}: "
                              f"acknowledged at {_s(acked['time'])}", event=acked["index"])
        between = [e for e in self.facts.group_events if acked["time"] <= e["time"] <= read["time"]]
        active = [i for i in self.intervals if i["start"] <= read["time"] and i["end"] >= acked["time"]]
        for i in active[:SHOW_FAULTS]:
            st.add(i["start"], f"fault {_fault_text(i)} from {_s(i['start'])} to {_s(i['end'])}", event=i["index"])
        moves = [e for e in between if e["f"] == "assign" and e["type"] == "ok" and e.get("group") == group
                 and p in (e.get("partitions") or [])]
        for e in moves[:SHOW_CHANGES]:
            gen = f" (generation {e['generation']})" if e.get("generation") is not None else ""
            st.add(e["time"], f"process {e['process']} was given partition {p} at {_s(e['time'])}{gen}",
                   event=e["index"])
        for e in [e for e in between if e["f"] == "crash" and e["type"] == "ok"][:SHOW_CHANGES]:
            st.add(e["time"], f"process {e['process']} ended at {_s(e['time'])}", event=e["index"])
        late = self._unknown_commit_of(group, p, ex["returned"], read["time"])
        if late is not None:
            invoked, ended = late
            st.add(ended["time"], f"process {ended['process']}'s commit of partition {p} to offset {ex['returned']}, "
                                  f"invoked at {_s(invoked['time'])}, ended unknown at {_s(ended['time'])}"
                                  + (f" ({ended['error']})" if ended.get("error") else ""), event=ended["index"])
        st.add(read["time"], f"process {read['process']} read group {group}'s committed offset of partition {p} "
                             f"at {_s(read['time'])}: {returned}", event=read["index"])
        st.summary = (f"group {group}'s commit of partition {p} to {c}, acknowledged at {_s(acked['time'])} "
                      f"(process {acked['process']}), was read back as {returned} at {_s(read['time'])} "
                      f"(process {read['process']}), with no lower commit between"
                      + (f"; meanwhile {len(active)} fault{'s' if len(active) != 1 else ''} and "
                         f"{len(moves)} rebalance{'s' if len(moves) != 1 else ''} of that partition" if active or moves
                         else "")
                      + (f"; the offset read is that of process {late[1]['process']}'s commit invoked at "
                         f"{_s(late[0]['time'])}, whose outcome was unknown: a broker may still apply such a "
                         f"commit, after a later one" if late is not None else "") + ".")
        return st.done()

    def _unknown_commit_of(self, group: str, p: int, offset: int, before: int) -> tuple[dict, dict] | None:
        """The last commit of (group, p) at `offset` invoked before `before` whose
        outcome was unknown (an info completion): (its invocation, its completion).
        A broker can apply such a commit after a later, acknowledged one
        (docs/scenarios.md, "A commit the client was told timed out, applied
        after a later one"), which explains the read."""
        invoked: dict[int, dict] = {}  # process -> its commit in flight
        found = None
        for e in self.facts.group_events:
            if e["f"] != "commit" or e["time"] > before:
                continue
            if e["type"] == "invoke":
                invoked[e["process"]] = e
                continue
            start = invoked.pop(e["process"], None)
            if (e["type"] == "info" and start is not None and start.get("group") == group
                    and any(x["partition"] == p and x["offset"] == offset for x in start.get("offsets") or [])):
                found = (start, e)
        return found

    def _member_after(self, st: _Story, group: str, proc: int, p: int, o: int, since: int) -> list[str]:
        """After member `proc` was delivered p:o at `since`: its commit past o, how
        it ended, and the member that took partition p next and its start offset;
        the summary's words for each."""
        said: list[str] = []
        events = [e for e in self.facts.group_events if e["time"] >= since]
        commit = next((e for e in events if e["process"] == proc and e["f"] == "commit" and e["type"] == "ok"
                       and any(x["partition"] == p and x["offset"] > o for x in e.get("offsets") or [])), None)
        if commit is not None:
            c = next(x["offset"] for x in commit["offsets"] if x["partition"] == p)
            st.add(commit["time"], f"process {proc} committed partition {p} to offset {c}, past {o}, at "
                                   f"{_s(commit['time'])}", event=commit["index"])
            said.append(f"committed past by it at {_s(commit['time'])}")
        cut = next((e for e in events if e["process"] == proc and e["f"] == "process" and e["type"] == "info"), None)
        crash = next((e for e in events if e["process"] == proc and e["f"] == "crash"), None)
        if crash is not None:
            killed = next((i for i in self.intervals if isinstance(i.get("hit"), dict)
                           and proc in (i["hit"].get("clients") or [])), None)
            how = f" ({cut['error']})" if cut is not None and cut.get("error") else ""
            if killed is not None:
                st.add(killed["start"], f"the nemesis's {killed['f']} hit process {proc} at {_s(killed['start'])}",
                       event=killed["index"])
            st.add(crash["time"], f"process {proc} ended{how} at {_s(crash['time'])}, before handling {o}",
                   event=crash["index"])
            said.append(f"and process {proc} " + ("was killed" if killed is not None else "ended")
                        + f" at {_s(killed['start'] if killed is not None else crash['time'])} before handling it")
            after = crash["time"]
            took = next((e for e in events if e["time"] >= after and e["f"] == "assign" and e["type"] == "ok"
                         and e.get("group") == group and p in (e.get("partitions") or [])), None)
            if took is not None:
                start = next((x["offset"] for e in events if e["process"] == took["process"]
                              and e["f"] == "committed" and e["type"] == "ok" and e["index"] > took["index"]
                              for x in e.get("offsets") or [] if x["partition"] == p), None)
                frm = f" from offset {start}" if start is not None else ""
                st.add(took["time"], f"process {took['process']} took partition {p} at {_s(took['time'])}{frm}",
                       event=took["index"])
                said.append(f"process {took['process']} took partition {p} at {_s(took['time'])}{frm}")
        return said


@dataclass
class _Writer:
    """How a value was sent, as far as the history tells (`Explainer._writer`)."""

    process: int
    in_txn: bool  # sent in a transaction, not by a plain send
    txn: int | None  # the transaction's invocation index, where known
    invoked: int | None  # the transaction's invocation time, where known
    completion: dict | None  # the send's (the transaction's) completion; None: none found


def _txn_name(writer: _Writer) -> str:
    return f"transaction {writer.txn}" if writer.txn is not None else "a transaction"


def _outcome(comp: dict | None) -> str:
    """How a transaction ended: 'committed at 32.5 s', 'failed (NOT_COORDINATOR) at 29.8 s'."""
    if comp is None:
        return "never completed"
    how = {"ok": "committed", "fail": "failed"}.get(comp["type"], f"ended {comp['type']}")
    return how + (f" ({comp['error']})" if comp.get("error") else "") + f" at {_s(comp['time'])}"


def _sent_by(writer: _Writer, other: _Writer | None) -> str:
    """'sent by the same process 6 in transaction 6294 that failed (NOT_COORDINATOR) at 29.8 s':
    who wrote a value, told beside the `other` value's writer."""
    same = "the same " if other is not None and other.process == writer.process else ""
    how = f"in {_txn_name(writer)} that {_outcome(writer.completion)}" if writer.in_txn else "in a plain send"
    return f"sent by {same}process {writer.process} {how}"


def _reader(r: Read) -> str:
    """'process 3', and how it read where that is not the default: 'process 3 (read_uncommitted)'."""
    return f"process {r.process}" + (" (read_uncommitted)" if r.uncommitted else "")


def _first_time(got: dict) -> int:
    if "ack" in got:
        return got["ack"]["time"]
    return got["read"].time


def _cut_text(x: dict, p: int) -> str:
    """'n2 truncated 4:2135.. at 33.0 s (log end 2140), following n1 (epoch 1): leader epoch'."""
    text = f"{x.get('node')} truncated {p}:{x['offset']}.. at {_s(x['time'])}"
    if isinstance(x.get("log_end"), int):
        text += f" (log end {x['log_end']})"
    if x.get("leader"):
        text += f", following {x['leader']}"
        if x.get("epoch") is not None:
            text += f" (epoch {x['epoch']})"
    elif x.get("epoch") is not None:
        text += f" in epoch {x['epoch']}"
    if x.get("reason"):
        text += f": {x['reason']}"
    return text


# --------------------------------------------------------------------------
# The entry points


def wanted(results: dict, stories: dict[str, Callable], limit: int = LIMIT
           ) -> tuple[list[tuple[str, dict]], set[int], set[int], set[int]]:
    """The examples to explain (of the anomalies that have a story in
    `stories`), and the values, positions and history indexes they need."""
    chosen, values, positions, indexes = [], set(), set(), set()
    for name in stories:
        a = results.get("anomalies", {}).get(name) or {}
        for ex in (a.get("examples") or [])[:limit]:
            if not isinstance(ex, dict):
                continue
            chosen.append((name, ex))
            for k, v in leaves(ex):
                if k.endswith("index") and isinstance(v, int):
                    indexes.add(v)
                elif k in ("value", "prev_value") and isinstance(v, int):
                    values.add(v)
            for x in [ex] + list(ex.get("positions") or []):
                if isinstance(x.get("partition"), int) and isinstance(x.get("offset"), int):
                    positions.add(_pos(x["partition"], x["offset"]))
            if isinstance(ex.get("skipped_offset"), int):
                positions.add(_pos(ex["partition"], ex["skipped_offset"]))
            if isinstance(ex.get("prev_offset"), int) and isinstance(ex.get("offset"), int):  # a step
                positions.add(_pos(ex["partition"], min(ex["prev_offset"], ex["offset"])))
    return chosen, values, positions, indexes


def leaves(x, key=""):
    """Every leaf of nested dicts and lists, with the key it sits under
    (a list's items under the list's key): how examples name their indexes."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from leaves(v, k)
    elif isinstance(x, list):
        for v in x:
            yield from leaves(v, key)
    else:
        yield key, x


def explain(source: HistorySource, results: dict, stories: dict[str, Callable], states: list[dict] | None = None,
            disk: Disk | None = None, fault_ends: dict[str, str] | None = None, limit: int = LIMIT) -> list[dict]:
    """Stories for the first `limit` examples of each anomaly in `results`
    that has a story: `stories` maps its name to it (a function of the
    explainer, the name and an example: the registry's, checkers/registry.py).

    `source`: the history; `states`: states.jsonl's lines (`load_states`);
    `disk`: the disk dumps (`load_disk`, kept to the stories' values and
    positions: see `wanted`); `fault_ends`: each fault's start action ->
    its stop action (nemesis.registry), to pair the faults in results'
    stats. Without states or disk the stories say what the history says.
    """
    chosen, values, positions, indexes = wanted(results, stories, limit)
    if not chosen:
        return []
    facts = scan(source, indexes, values, positions)
    faults = results.get("stats", {}).get("faults", [])
    end = max([e["time"] for e in faults] + [facts.final_start or 0]) + 1
    # A fault never healed: to just past the end of the history.
    intervals = fault_intervals(faults, fault_ends or {}, end).intervals
    ex = Explainer(facts, Timeline(states), disk, intervals)
    out = []
    for name, example in chosen:
        try:
            story = stories[name](ex, name, example)
        except (KeyError, TypeError, ValueError) as e:  # an example of a shape we do not know
            log.warning("no story for a %s example: %s", name, e)
            continue
        if story is not None:
            out.append(story)
    return out


def explain_run(source: HistorySource, results: dict, stories: dict[str, Callable],
                fault_ends: dict[str, str] | None = None, limit: int = LIMIT) -> list[dict]:
    """`explain` with the states.jsonl and disk/ dumps found beside the history (each optional)."""
    return evidence_run(source, results, stories, fault_ends, limit)["explanations"]


def evidence_run(source: HistorySource, results: dict, stories: dict[str, Callable],
                 fault_ends: dict[str, str] | None = None, limit: int = LIMIT) -> dict:
    """The stories (`explanations`) and, where the run has disk dumps, where its
    missing records are on the replicas' disks (`on_disk`, see `on_disk`),
    reading the dumps once for both."""
    _, values, positions, _ = wanted(results, stories, limit)
    missing = results.get("missing") or {}
    states = load_states(source.root / "states.jsonl")
    disk = load_disk(source.root, values | {row[0] for rows in missing.values() for row in rows}, positions)
    out = {"explanations": explain(source, results, stories, states, disk, fault_ends, limit)}
    if disk is not None and missing:
        out["on_disk"] = on_disk(missing, disk)
    return out


def on_disk(missing: dict[str, list[list[int]]], disk: Disk) -> dict[str, dict]:
    """For each anomaly's sample of missing records ([value, partition, offset]
    acknowledged, results["missing"]): how many no replica holds at the end
    (lost from the log: data loss) and how many some replica still holds (the
    log has them: a reader missed them, or they sit past what reads reached),
    with examples of the latter and where they are."""
    out = {}
    for name, rows in missing.items():
        held = []
        for value, partition, offset in rows:
            where = [{"node": node, "partition": p, "offset": o, "epoch": epoch}
                     for node in sorted(disk.where) for p, o, epoch in disk.where[node].get(value, [])]
            if where:
                held.append({"value": value, "partition": partition, "offset": offset, "on": where})
        out[name] = {"checked": len(rows), "on_no_disk": len(rows) - len(held), "on_disk": len(held),
                     "nodes": sorted(disk.where), "examples": held[:MAX_EXAMPLES]}
    return out
