"""Starved members: a consumer group's member left without partitions while
another member held two or more, so that a rebalance had not finished
giving it one (docs/checker.md, "Liveness").

The definition, on the history's clock, per group G:

- a process is a *member* of G from its first `assign` completed `ok`
  carrying G (a member that subscribed records one with no partitions)
  until its `crash`, else its last event (a member polls, records or none,
  while it runs: the workload's members leave as it stops, revoking what
  they held, which says nothing of a rebalance);
- a member *holds* the partitions of its last `assign ok` carrying G;
- a member is *starved* while it holds none and another member holds two
  or more: moving one of them would leave both with some, so only an
  unfinished rebalance explains it. A stretch ends when the member is given
  a partition, when it ends, or when no other member holds two;
- a member the nemesis paused (SIGSTOP: the nemesis's `pause` naming it
  among its `clients`, until the `resume` or the heal that names it) is
  not starved meanwhile: it could not have taken a partition, and it
  records nothing, so its history's holdings say nothing of the group's;
- the measure is each stretch's length (*open*: the member was still
  starved when it stopped); results.json `liveness` gets the
  longest (`starved_member_s`, None with no member of any group) and the
  stretches of at least `LIST_MIN_S` (`starved_members`), longest first.

A newcomer is starved from its subscription until a holder gives a
partition up: under the classic protocol's eager rebalance, until the
holders rejoin and revoke everything (then nobody holds two), a heartbeat
or a few; under a cooperative or KIP-848 one, until the holder revokes the
partition that moves. A newcomer starved for the rest of the run is a
rebalance that never ended (docs/scenarios.md: librdkafka's KIP-848
member that dropped the answer naming its new assignment).

Group events are few (rebalances, crashes): the few-events fold keeps
them (checkers/folds/few.py) and this runs on the driver for every engine.
"""

from __future__ import annotations

import orjson

from core.history.format import NEMESIS_PROCESS_ID

LIST_MIN_S = 1.0  # stretches at least this long are listed in results.json
LIST_MAX = 100
NS = 1e9
CRASH, ASSIGN = "crash", "assign"
LEAVE = "leave"  # not an operation: a member's last event, where it ends without a crash
# The nemesis's events that pause a client process or resume it (nemesis/clients.py).
PAUSE, RESUME, HEAL = "pause", "resume", "heal"
PAUSES = (PAUSE, RESUME, HEAL)


def measure(few: list[dict], end: int | None, last: dict[int, tuple[int, int]] | None = None) -> dict:
    """results.json `liveness`'s `starved_member_s` and `starved_members`
    from the few-events fold's rows (`assign` carrying a group, `crash`, the
    nemesis's pauses of clients); `end`: the workload's end (ns), None for a
    history without client events; `last`: each client process's last
    event, (index, time) (checkers/folds/groups.py)."""
    rows = [r for r in few if (r["process"] >= 0 and (r["f"] == CRASH or (r["f"] == ASSIGN and r["group"] is not None)))
            or (r["process"] == NEMESIS_PROCESS_ID and r["type"] == "ok" and r["f"] in PAUSES)]
    members = {int(r["process"]) for r in rows if r["f"] == ASSIGN}
    rows += [{"process": p, "f": LEAVE, "type": "ok", "index": i + 0.5, "time": t}
             for p, (i, t) in (last or {}).items() if p in members]
    rows.sort(key=lambda r: r["index"])
    group_of: dict[int, str] = {}
    paused: set[int] = set()
    holds: dict[str, dict[int, frozenset]] = {}  # group -> member -> partitions, members not ended
    starved: dict[tuple[str, int], tuple[int, int, list[int]]] = {}  # (group, member) -> (start, holder, its partitions)
    stretches: list[dict] = []

    def close(group: str, member: int, at: int, is_open: bool) -> None:
        start, holder, held = starved.pop((group, member))
        stretches.append({"group": group, "member": member, "start": _s(start), "end": _s(at),
                          "seconds": _s(at - start), "open": is_open, "holder": holder, "holder_partitions": held})

    def settle(group: str, at: int) -> None:
        """Starts and ends the group's stretches as its holdings stand from `at` on."""
        members = holds[group]
        for member, parts in members.items():
            crowded = [m for m, p in members.items() if m != member and len(p) >= 2]
            key = (group, member)
            if not parts and crowded and member not in paused:
                if key not in starved:
                    holder = max(crowded, key=lambda m: (len(members[m]), -m))
                    starved[key] = (at, holder, sorted(members[holder]))
            elif key in starved:
                close(group, member, at, False)

    for r in rows:
        t, process = int(r["time"]), int(r["process"])
        if process == NEMESIS_PROCESS_ID:
            value = (orjson.loads(r["extra"]) if r["extra"] else {}).get("value")
            value = value if isinstance(value, dict) else {}
            if r["f"] == PAUSE:
                paused.update(_clients(value.get("clients")))
            else:
                paused.difference_update(_clients(value.get("clients_resumed" if r["f"] == HEAL else "clients")))
            for group in holds:
                settle(group, t)
            continue
        if r["f"] in (CRASH, LEAVE):
            group = group_of.get(process)
            if group is not None and process in holds[group]:
                if (group, process) in starved:
                    close(group, process, t, r["f"] == LEAVE)
                del holds[group][process]
                settle(group, t)
            continue
        if r["type"] != "ok":
            continue
        group = str(r["group"])
        group_of.setdefault(process, group)
        holds.setdefault(group, {})[process] = frozenset(r["partitions"] or ())
        settle(group, t)
    for group, member in list(starved):
        close(group, member, max(end if end is not None else 0, starved[(group, member)][0]), True)
    stretches.sort(key=lambda s: (-s["seconds"], s["start"], s["member"]))
    return {"starved_member_s": (stretches[0]["seconds"] if stretches else 0.0) if group_of else None,
            "starved_members": [s for s in stretches if s["seconds"] >= LIST_MIN_S][:LIST_MAX]}


def _clients(named) -> list[int]:
    """The client process ids a nemesis event names (none for a broker fault)."""
    return [int(c) for c in named if isinstance(c, int) and not isinstance(c, bool)] if isinstance(named, list) else []


def _s(ns: int) -> float:
    return round(int(ns) / NS, 3)


def words(stretch: dict) -> str:
    """One listed stretch in a sentence (the report, `harness run`'s summary)."""
    until = f"{stretch['end']:g} s, when it stopped" if stretch["open"] else f"{stretch['end']:g} s"
    held = ", ".join(str(p) for p in stretch["holder_partitions"])
    return (f"Group {stretch['group']}: member {stretch['member']} held no partition for {stretch['seconds']:g} s "
            f"({stretch['start']:g} s to {until}) while member {stretch['holder']} held partitions {held}: "
            + ("a rebalance that never finished." if stretch["open"] else "a rebalance unfinished that long."))


def summary_line(live: dict) -> str | None:
    """The longest listed stretch in words, for a check's printed summary; None if none is listed."""
    listed = live.get("starved_members") or []
    return words(listed[0]) + (f" ({len(listed) - 1} more listed)" if len(listed) > 1 else "") if listed else None
