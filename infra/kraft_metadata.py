"""The KRaft controller's metadata log, read for the cluster-state timeline.

Kafka's `DumpLogSegments --cluster-metadata-decoder` prints each record of
`__cluster_metadata-0` as a line `| offset: N CreateTime: MS ... payload:
{json}`. `records(lines, topic)` keeps what explains a partition's
elections: the topic's partition state as the controller decided it
(leader, ISR, eligible leader replicas and last known ELR, KIP-966), after
each record, each broker's registrations and fencing, and the feature
levels the controller finalized (FeatureLevelRecord: `metadata.version`,
`transaction.version` of KIP-890, `group.version` of KIP-848,
`eligible.leader.replicas.version` of KIP-966), read rather than inferred
from the version or from what the brokers did.
A change record names only what changed; the state carried from record to
record fills in the rest; it never names the leader epoch, so neither does
this. Broker ids stay ids here: the system names their nodes.
"""

from __future__ import annotations

import json
import re
from typing import Iterable

RECORD_RE = re.compile(r"^\| offset: \d+ CreateTime: (?P<ms>-?\d+) .*?payload: (?P<json>\{.*\})\s*$")
# The record types worth keeping, for a grep on the node before the lines travel.
KEPT = ("TOPIC_RECORD", "PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "REGISTER_BROKER_RECORD",
        "BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD", "FEATURE_LEVEL_RECORD")
GREP = "payload: \\{\"type\":\"(" + "|".join(KEPT) + ")\""
STATE_FIELDS = {"leader": "leader", "isr": "isr", "eligibleLeaderReplicas": "elr", "lastKnownElr": "last_known_elr"}


def records(lines: Iterable[str], topic: str) -> list[dict]:
    """The controller's decisions about `topic` and the brokers, in log order:
    `{"wall_ms", "kind": "partition", "partition", "leader" (-1: none),
    "isr", "elr", "last_known_elr"}` (the whole state after the
    record) and `{"wall_ms", "kind": "broker", "broker", "epoch", "event":
    "registered" | "fenced" | "unfenced"}` and `{"wall_ms", "kind": "feature",
    "name", "level"}` (a level of 0 turns the feature off)."""
    topic_ids: set[str] = set()
    state: dict[int, dict] = {}
    out: list[dict] = []
    for line in lines:
        m = RECORD_RE.match(line)
        if not m:
            continue
        try:
            payload = json.loads(m["json"])
        except ValueError:
            continue
        kind, data, ms = payload.get("type"), payload.get("data") or {}, int(m["ms"])
        if kind == "TOPIC_RECORD" and data.get("name") == topic:
            topic_ids.add(data.get("topicId"))
        elif kind in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD") and data.get("topicId") in topic_ids:
            p = int(data["partitionId"])
            now = state.setdefault(p, {"leader": -1, "isr": [], "elr": [], "last_known_elr": []})
            for field, name in STATE_FIELDS.items():
                if field in data:
                    now[name] = list(data[field]) if isinstance(data[field], list) else data[field]
            out.append({"wall_ms": ms, "kind": "partition", "partition": p, **now})
        elif kind == "FEATURE_LEVEL_RECORD" and isinstance(data.get("name"), str):
            out.append({"wall_ms": ms, "kind": "feature", "name": data["name"],
                        "level": int(data.get("featureLevel", 0))})
        elif kind == "REGISTER_BROKER_RECORD":
            out.append({"wall_ms": ms, "kind": "broker", "broker": data.get("brokerId"),
                        "epoch": data.get("brokerEpoch"), "event": "registered"})
        elif kind in ("FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD"):
            out.append({"wall_ms": ms, "kind": "broker", "broker": data.get("id"), "epoch": data.get("epoch"),
                        "event": "fenced" if kind == "FENCE_BROKER_RECORD" else "unfenced"})
        elif kind == "BROKER_REGISTRATION_CHANGE_RECORD" and data.get("fenced") in (1, -1):
            out.append({"wall_ms": ms, "kind": "broker", "broker": data.get("brokerId"),
                        "epoch": data.get("brokerEpoch"), "event": "fenced" if data["fenced"] == 1 else "unfenced"})
    return out
