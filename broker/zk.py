"""What the brokers keep in ZooKeeper, and how they read and write it.

Layout (the same shape as ZooKeeper-era Kafka):
  /brokers/ids/<id>                         ephemeral {"host", "port"}; its czxid is the
                                            broker's incarnation (a restart gets a new one)
  /controller                               ephemeral {"brokerid"}
  /controller_epoch                         integer, bumped by each new controller
  /brokers/topics/<topic>                   {"partitions": {"0": [replicas...], ...}}
  /brokers/topics/<topic>/partitions/<p>/state
        {"leader", "leader_epoch", "isr", "controller_epoch",
         "incarnations": {"<id>": czxid}}   the incarnation each ISR member (and the
                                            leader) had when it was put there; updated
                                            only with conditional (versioned) writes
  /consumers/<group>/offsets/<topic>/<p>    committed offsets {"offset", "metadata", "leader_epoch"}
  /consumers/<group>/txn_offsets/<pid>      offsets a transaction committed, pending until it ends
                                            {"producer_epoch", "offsets": [[topic, p, offset, epoch, metadata]]}
  /latest_producer_id_block                 {"next": n}: producer ids handed out in blocks
  /transactions/<transactional id, quoted>  a transaction's state (broker/transactions.py), versioned writes
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field

BROKERS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONSUMERS = "/consumers"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000
TRANSACTIONS = "/transactions"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}/{partition}"


def txn_offsets_path(group: str, producer_id: int) -> str:
    return f"{txn_offsets_dir(group)}/{producer_id}"


def txn_offsets_dir(group: str) -> str:
    """Where a group's transactions keep their offsets until they end, one node a producer id."""
    return f"{CONSUMERS}/{group}/txn_offsets"


def txn_path(transactional_id: str) -> str:
    """A transactional id may hold any character, "/" included: it is quoted into one znode name."""
    return f"{TRANSACTIONS}/{urllib.parse.quote(transactional_id, safe='')}"


def txn_id_of(znode: str) -> str:
    return urllib.parse.unquote(znode)


@dataclass
class PartitionState:
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int = 0
    incarnations: dict[int, int] = field(default_factory=dict)
    version: int = -1  # the znode version this was read at
    mzxid: int = 0

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                           "isr": self.isr, "controller_epoch": self.controller_epoch,
                           "incarnations": {str(k): v for k, v in self.incarnations.items()}}).encode()

    @classmethod
    def from_json(cls, data: bytes, version: int = -1, mzxid: int = 0) -> "PartitionState":
        d = json.loads(data)
        return cls(leader=int(d["leader"]), leader_epoch=int(d["leader_epoch"]), isr=[int(x) for x in d["isr"]],
                   controller_epoch=int(d.get("controller_epoch", 0)),
                   incarnations={int(k): int(v) for k, v in d.get("incarnations", {}).items()},
                   version=version, mzxid=mzxid)


def encode_assignment(assignment: dict[int, list[int]]) -> bytes:
    return json.dumps({"version": 1, "partitions": {str(p): r for p, r in sorted(assignment.items())}}).encode()


def decode_assignment(data: bytes) -> dict[int, list[int]]:
    d = json.loads(data)
    return {int(p): [int(x) for x in r] for p, r in d["partitions"].items()}


def place_replicas(brokers: list[int], partitions: int, replication_factor: int) -> dict[int, list[int]]:
    """Replica j of partition i goes to broker (i + j) mod n, brokers sorted by id."""
    ids = sorted(brokers)
    n = len(ids)
    return {i: [ids[(i + j) % n] for j in range(replication_factor)] for i in range(partitions)}


def valid_topic_name(name: str) -> bool:
    if not name or len(name) > 249 or name in (".", ".."):
        return False
    return all(c.isalnum() and c.isascii() or c in "._-" for c in name)
