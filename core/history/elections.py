"""Which set each KRaft leader came from, read from the controller's own
records in states.jsonl (`kraft-partition` and `kraft-broker` lines,
docs/history.md): the ISR, the eligible leader replicas of KIP-966, or
neither, and whether the elected broker had just come back from being
fenced (a restart, whose unflushed log a power loss took). That one
sentence per election is what tells a run on Kafka 4 with ELR from the same
run without it; the report and the differential view both say it.
"""

from __future__ import annotations

PARTITION, BROKER = "kraft-partition", "kraft-broker"  # the controller's lines' kinds


def controller_lines(states: list[dict]) -> list[dict]:
    """The controller's records among a states.jsonl's lines (core/history/states.py)."""
    return [s for s in states if s["kind"] in (PARTITION, BROKER)]


def names(nodes) -> str:
    return "[" + ", ".join(str(n) for n in nodes or []) + "]"


def elections(lines: list[dict]) -> list[dict]:
    """Each change of a partition's leader to a broker: `time`, `partition`,
    `leader`, `source` ("isr", "elr", "last-known-elr" or "other": which set
    of the state before held it), that state (`isr`, `elr`,
    `last_known_elr`), and `returned` (the time it registered again, where it
    was fenced and registered again since its last unfencing before this)."""
    fenced_at: dict[str, float] = {}
    registered_after_fence: dict[str, float] = {}
    before: dict[int, dict] = {}
    out = []
    for line in sorted(lines, key=lambda x: x["time"]):
        if line["kind"] == BROKER:
            node, event = line.get("node"), line.get("event")
            if event == "fenced":
                fenced_at[node] = line["time"]
                registered_after_fence.pop(node, None)
            elif event == "registered" and node in fenced_at:
                registered_after_fence[node] = line["time"]
            continue
        if line["kind"] != PARTITION:
            continue
        p, leader = line["partition"], line.get("leader")
        prev = before.get(p)
        before[p] = line
        if prev is None or leader is None or leader == prev.get("leader"):
            continue
        source = next((name for key, name in (("isr", "isr"), ("elr", "elr"), ("last_known_elr", "last-known-elr"))
                       if leader in (prev.get(key) or [])), "other")
        out.append({"time": line["time"], "partition": p, "leader": leader, "source": source,
                    "isr": prev.get("isr") or [], "elr": prev.get("elr") or [],
                    "last_known_elr": prev.get("last_known_elr") or [],
                    "returned": registered_after_fence.get(leader)})
    return out


def election_sentence(e: dict) -> str:
    """One election in words (plain text)."""
    head = f"{e['time'] / 1e9:.1f} s: {e['leader']} elected leader of partition {e['partition']}"
    if e["source"] == "elr":
        text = (f"{head} from the eligible leader replicas {names(e['elr'])} (KIP-966), "
                f"the ISR being {names(e['isr'])}")
    elif e["source"] == "isr":
        text = f"{head} from the ISR {names(e['isr'])}"
        if not e["elr"] and len(e["isr"]) == 1:
            text += ", its only member (no eligible leader replicas)"
    elif e["source"] == "last-known-elr":
        text = f"{head} as the last known eligible leader {names(e['last_known_elr'])} (the ISR and ELR empty)"
    else:
        text = f"{head}, outside the ISR {names(e['isr'])} and the ELR {names(e['elr'])} (an unclean election)"
    if e.get("returned") is not None:
        text += (f"; it had been fenced and registered again at {e['returned'] / 1e9:.1f} s, "
                 "so it leads with the log its restart left")
    return text + "."
