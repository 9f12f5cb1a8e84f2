"""The few events that say how to read the rest: the nemesis's, the final reads',
the consumer groups' committed reads and rebalances (`assign` carrying a
group) and the clients' crashes, kept whole (as dicts).

From them: the faults (`faults`: results.json's `stats.faults`), the final
logs (`final_logs`: which polls are final reads, where each partition's
final log ends), each group's committed reads (`committed_reads`), and the
groups' starved members (checkers/group_balance.py).
"""

from __future__ import annotations

import numpy as np
import orjson

from checkers.kernel.facts import CommittedRead, FinalLogs
from core.history.batches import Events, Names
from core.history.format import COMMITTED, FINAL_READS, NEMESIS, NEMESIS_PROCESS_ID

COLUMNS = ("process", "index", "time", "type", "f", "partitions", "ends", "offsets", "group", "final", "extra")
LAST_INDEX = 1 << 62  # the end of a bracket whose invocation never completed


class Few:
    """The fold (checkers/folds/__init__.py)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, ev: Events) -> None:
        wanted = (ev.process == NEMESIS_PROCESS_ID) | ev.is_op(FINAL_READS) | ev.is_op(COMMITTED) | ev.is_op("crash") \
            | (ev.is_op("assign") & (ev.group >= 0))
        if not wanted.any():
            return
        import pyarrow as pa

        few = ev.table.take(pa.array(np.flatnonzero(wanted)))
        present = [c for c in COLUMNS if c in few.column_names]
        self.rows += [{c: row.get(c) for c in COLUMNS} for row in few.select(present).to_pylist()]


def faults(few: list[dict]) -> list[dict]:
    """The nemesis's events, in order, each with its fields."""
    rows = sorted((r for r in few if r["process"] == NEMESIS_PROCESS_ID), key=lambda r: r["index"])
    events = []
    for r in rows:
        extra = orjson.loads(r["extra"]) if r["extra"] else {}
        events.append({"index": r["index"], "time": r["time"], "type": r["type"], "f": r["f"],
                       "process": NEMESIS, **extra})
    return events


def final_logs(few: list[dict], fold: dict[int, int] | None = None) -> FinalLogs:
    """The final-reads operations, each completion paired with its process's
    oldest open invocation; ends' offsets folded by `fold` (checkers/offsets.py)."""
    fold = fold or {}
    rows = sorted((r for r in few if r["process"] >= 0 and r["f"] == FINAL_READS), key=lambda r: r["index"])
    logs = FinalLogs(present=bool(rows))
    open_: dict[int, list[int]] = {}
    end_at: dict[int, int] = {}  # partition -> index of the completion that set its end
    for r in rows:
        if r["type"] == "invoke":
            open_.setdefault(r["process"], []).append(r["index"])
            logs.asked.update(r["partitions"] or [])
            continue
        pending = open_.get(r["process"])
        if not pending:
            continue  # a completion with no invocation: the pairing refuses the history
        logs.brackets.setdefault(r["process"], []).append((pending.pop(0), r["index"]))
        if r["type"] == "ok":
            for e in r["ends"] or []:
                if e["partition"] not in end_at or end_at[e["partition"]] < r["index"]:
                    logs.ends[e["partition"]] = fold.get(e["offset"], e["offset"])
                    end_at[e["partition"]] = r["index"]
    for process, pending in open_.items():
        logs.brackets.setdefault(process, []).extend((i, LAST_INDEX) for i in pending)
    return logs


def committed_reads(few: list[dict], names: Names, fold: dict[int, int] | None = None) -> list[CommittedRead]:
    """Each partition a group's `committed` read returned an offset of (its
    ok completion, paired with its process's oldest open invocation)."""
    fold = fold or {}
    rows = sorted((r for r in few if r["process"] >= 0 and r["f"] == COMMITTED), key=lambda r: r["index"])
    open_: dict[int, list[dict]] = {}
    out = []
    for r in rows:
        if r["type"] == "invoke":
            open_.setdefault(r["process"], []).append(r)
            continue
        pending = open_.get(r["process"])
        if not pending:
            continue
        invoke = pending.pop(0)
        if r["type"] != "ok" or invoke["group"] not in names.groups:
            continue
        for item in r["offsets"] or []:
            out.append(CommittedRead(names.groups[invoke["group"]], item["partition"],
                                     fold.get(item["offset"], item["offset"]), invoke["index"], r["index"],
                                     bool(invoke["final"])))
    return out


def final_committed(reads: list[CommittedRead]) -> dict[tuple[int, int], int]:
    """Each (group, partition)'s final committed offset: what the last
    committed read with `final` returned of it, where that is not -1."""
    last: dict[tuple[int, int], CommittedRead] = {}
    for c in reads:
        if c.final and ((c.group, c.partition) not in last
                        or last[(c.group, c.partition)].completion_index < c.completion_index):
            last[(c.group, c.partition)] = c
    return {key: c.returned for key, c in last.items() if c.returned >= 0}
