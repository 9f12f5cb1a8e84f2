"""When each fault was in force: the one rule that pairs a fault's start with its end.

The nemesis records every fault as a start action and a stop action
(docs/history.md, "Nemesis operations"). Faults may overlap, never two of
one name at once, so a stop ends the open start of its own fault (the
oldest, where the schedule started it twice), whatever started in between;
`heal` ends every fault still in force. A fault is in force from its start
action's invocation to the completion of what ended it (its stop, or the
heal); one never ended lasts to `end` (default: the nemesis's last event).
The *final heal* is the completion of the last `heal` (else of the last
stop): liveness measures recovery from it.

Which stop ends which start is the fault registry's (`nemesis/registry.py`),
which the ground floor does not import: callers hand the pairs in as
`ends` (start action -> stop action).
"""

from __future__ import annotations

from dataclasses import dataclass, field

HEAL = "heal"


@dataclass
class FaultIntervals:
    """`intervals`: one per fault, in order of start, each
    {f (its start action), start, end (ns), index (its start's), value (its
    start's target), hit (what its start's completion said it hit, or None),
    end_value (what ended it said, or None)}; `final_heal`:
    the final heal's completion time, or None."""

    intervals: list[dict] = field(default_factory=list)
    final_heal: int | None = None


def fault_intervals(events: list[dict], ends: dict[str, str], end: int | None = None) -> FaultIntervals:
    """The faults of the nemesis's `events` (each with index, time, type, f
    and, where it has one, value), paired by `ends`."""
    events = sorted(events, key=lambda e: e["index"])
    stops = set(ends.values())

    def completion(i: int) -> tuple[int, object]:
        """The time and value of the completion of invocation `i` (its own time if none)."""
        e = events[i]
        for later in events[i + 1:]:
            if later["f"] == e["f"] and later["type"] != "invoke":
                return later["time"], later.get("value")
        return e["time"], e.get("value")

    found = FaultIntervals()
    open_: list[dict] = []
    last_stop = None
    for i, e in enumerate(events):
        if e["type"] != "invoke":
            continue
        if e["f"] in ends:
            _, hit = completion(i)  # its own value back: no completion said what it hit
            fault = {"f": e["f"], "start": e["time"], "end": None, "index": e["index"], "value": e.get("value"),
                     "hit": hit if hit is not e.get("value") else None, "end_value": None}
            found.intervals.append(fault)
            open_.append(fault)
        elif e["f"] in stops:
            done, said = completion(i)
            last_stop = done
            for fault in open_:
                if ends[fault["f"]] == e["f"]:
                    fault["end"], fault["end_value"] = done, e.get("value") if e.get("value") is not None else said
                    open_.remove(fault)
                    break
        elif e["f"] == HEAL:
            found.final_heal, _ = completion(i)
            for fault in open_:
                fault["end"] = found.final_heal
            open_ = []
    if found.final_heal is None:
        found.final_heal = last_stop
    last = end if end is not None else (events[-1]["time"] if events else None)
    for fault in open_:
        fault["end"] = last
    return found
