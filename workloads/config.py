"""The workload's knobs: one frozen `WorkloadConfig`, checked when built.

Every bad value is a `UserError` naming the knob, so a spec file or a flag
with a typo ends in one line, not a traceback deep inside a client thread.
Client settings the workload owns (bootstrap, acks, idempotence, group,
commits) cannot be overridden through the free-form settings dicts: they have
knobs of their own, and the error says which.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from core.errors import UserError

CONSUMER_MODES = ("assign", "subscribe")
ACKS = ("0", "1", "all")
# How a consumer group commits (docs/workloads.md, "Consumer groups"):
# what was handled (at-least-once), what was delivered before handling it
# (at-most-once), or the client library's own periodic commit of what it
# delivered (enable.auto.commit: the seed notes' loss when a member dies).
COMMIT_MODES = ("after-processing", "before-processing", "auto")
# The group protocol a group's members speak: the classic one (JoinGroup,
# SyncGroup, client-side assignment), or KIP-848's (ConsumerGroupHeartbeat,
# the broker assigns; Kafka 4.0 and later).
GROUP_PROTOCOLS = ("classic", "consumer")

# librdkafka property -> the WorkloadConfig knob that owns it.
RESERVED_PRODUCER = {
    "bootstrap.servers": "bootstrap (given to Workload)",
    "acks": "acks", "request.required.acks": "acks",
    "enable.idempotence": "idempotent",
    "on_delivery": "(the workload records deliveries)", "dr_cb": "(the workload records deliveries)",
    "dr_msg_cb": "(the workload records deliveries)",
    "transactional.id": "transactions (each transactional producer gets one of its own)",
}
RESERVED_CONSUMER = {
    "bootstrap.servers": "bootstrap (given to Workload)",
    "group.id": "group_id",
    "enable.auto.commit": "commit_interval_s (the workload commits explicitly and records it)",
    "enable.auto.offset.store": "(the workload stores offsets itself)",
    "enable.partition.eof": "(final reads turn it on themselves)",
    "on_commit": "(the workload records commits)",
    # The history records the isolation a read was made at (docs/history.md).
    "isolation.level": "transactions.read_uncommitted (readers that record their isolation)",
}

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_GROUP_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class GroupConfig:
    """One consumer group of the workload: `consumers` members in subscribe
    mode, each handling every record it is delivered in a recorded `process`
    step of `process_s` seconds, committing as `commit` says, at most every
    `commit_interval_s` seconds (auto: the library's auto.commit.interval.ms),
    speaking the group `protocol` (GROUP_PROTOCOLS)."""

    name: str
    consumers: int = 2
    commit: str = "after-processing"
    process_s: float = 0.002
    commit_interval_s: float = 1.0
    protocol: str = "classic"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _GROUP_RE.match(self.name):
            raise UserError(f"group name {self.name!r}: use 1-200 of letters, digits, '.', '_', '-'")
        where = f"group {self.name}"
        _int(self, "consumers", 1, where=where)
        _number(self, "process_s", 0, where=where)
        _number(self, "commit_interval_s", 0, where=where)
        if self.commit not in COMMIT_MODES:
            raise UserError(f"{where}: commit {self.commit!r}: expected one of {', '.join(COMMIT_MODES)}")
        if self.commit == "auto" and self.commit_interval_s <= 0:
            raise UserError(f"{where}: auto commits need a commit interval above 0 s")
        if self.protocol not in GROUP_PROTOCOLS:
            raise UserError(f"{where}: protocol {self.protocol!r}: expected one of {', '.join(GROUP_PROTOCOLS)}")

    @classmethod
    def from_mapping(cls, data: Any, index: int) -> "GroupConfig":
        """From a spec's `[[groups]]` table (keys with '-' or '_'); unknown keys are a UserError."""
        if isinstance(data, GroupConfig):
            return data
        if not isinstance(data, Mapping):
            raise UserError(f"groups[{index}] must be a table, not {type(data).__name__}")
        values = _table_fields(cls, data, f"groups[{index}]")
        values.setdefault("name", f"harness-group-{index}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TxnConfig:
    """The transactional clients of the workload (docs/workloads.md,
    "Transactions"): `producers` transactional producers, each its own
    `transactional.id`, sending `min_sends` to `max_sends` records across
    partitions per transaction and aborting a transaction with probability
    `abort_probability`; `transformers` consume-transform-produce clients
    (a group member and a transactional producer: each transaction polls,
    sends, and commits the group's offsets in the transaction);
    `read_uncommitted` plain readers of every partition at read_uncommitted
    (they must see aborted records: proof that aborts reach the log);
    `fence_interval_s` (0: never): about this often, a producer's
    `transactional.id` is taken over by a new instance while its open
    transaction waits for its commit, which must then be refused (fencing).
    `rate` is transactions per second over all producers and transformers
    (0: as fast as they go)."""

    producers: int = 2
    transformers: int = 1
    read_uncommitted: int = 1
    rate: float = 20.0
    min_sends: int = 1
    max_sends: int = 4
    abort_probability: float = 0.1
    fence_interval_s: float = 0.0
    # How long a commit or abort may keep retrying before its outcome is unknown.
    commit_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        where = "transactions"
        _int(self, "producers", 0, where=where)
        _int(self, "transformers", 0, where=where)
        _int(self, "read_uncommitted", 0, where=where)
        _int(self, "min_sends", 0, where=where)
        _int(self, "max_sends", 1, where=where)
        _number(self, "rate", 0, where=where)
        _number(self, "fence_interval_s", 0, where=where)
        _number(self, "commit_timeout_s", 0.1, where=where)
        _number(self, "abort_probability", 0, where=where)
        if self.abort_probability > 1:
            raise UserError(f"{where} abort-probability must be at most 1, not {self.abort_probability!r}")
        if self.min_sends > self.max_sends:
            raise UserError(f"{where} min-sends ({self.min_sends}) is above max-sends ({self.max_sends})")
        if self.producers + self.transformers == 0:
            raise UserError(f"{where}: no transactional client (producers and transformers are both 0)")

    @classmethod
    def from_mapping(cls, data: Any) -> "TxnConfig | None":
        """From a spec's `[transactions]` table (keys with '-' or '_'); an
        empty table or none: no transactions; unknown keys are a UserError."""
        if data is None or isinstance(data, TxnConfig):
            return data
        if not isinstance(data, Mapping):
            raise UserError(f"transactions must be a table, not {type(data).__name__}")
        if not data:
            return None
        return cls(**_table_fields(cls, data, "transactions"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class WorkloadConfig:
    """What the clients do. Rates are totals over all producers."""

    topic: str = "harness"
    partitions: int = 3
    replication_factor: int = 3
    # Target sends per second over all producers; 0 means as fast as possible.
    rate: float = 1000.0
    producers: int = 2
    consumers: int = 2
    consumer_mode: str = "assign"
    acks: str = "all"
    idempotent: bool = False
    # Keys are 0..key_count-1; the value v goes with key v % key_count.
    key_count: int = 16
    group_id: str = "harness-workload"
    poll_batch: int = 500
    poll_timeout_s: float = 0.2
    # Sends a producer may have outstanding (invoked, not yet completed);
    # past it the producer waits, which bounds memory during a fault.
    max_in_flight: int = 10_000
    # Commit read positions this often (seconds); 0 never commits.
    commit_interval_s: float = 1.0
    # True: partition = key % partitions, passed to produce(); False: the
    # client's own partitioner picks the partition from the key.
    explicit_partitions: bool = False
    # A client that hit an indeterminate error is torn down (a `crash` op)
    # and replaced by a new process id.
    replace_on_info: bool = True
    # How long a replaced producer may keep delivering its outstanding sends
    # before they are purged.
    retire_flush_s: float = 5.0
    # The first value sent; values count up from it, unique over the run.
    first_value: int = 0
    # Extra librdkafka settings, e.g. {"retries": 0, "linger.ms": 1}.
    producer_settings: Mapping[str, Any] = field(default_factory=dict)
    consumer_settings: Mapping[str, Any] = field(default_factory=dict)
    # Topic configs for create_topic, e.g. {"min.insync.replicas": "2"}.
    topic_settings: Mapping[str, Any] = field(default_factory=dict)
    # Consumer groups beside the `consumers` above (GroupConfig, or tables of its fields).
    groups: tuple = ()
    # Run each producer and group member as an OS process of its own
    # (workloads/process_slot.py), which faults can kill or pause; False: threads.
    client_processes: bool = False
    # Transactional producers, transformers and read_uncommitted readers
    # (TxnConfig, or a table of its fields); None: none.
    transactions: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not _TOPIC_RE.match(self.topic) or self.topic in (".", ".."):
            raise UserError(f"workload topic {self.topic!r}: use 1-249 of letters, digits, '.', '_', '-'")
        _int(self, "partitions", 1)
        _int(self, "replication_factor", 1)
        _int(self, "producers", 0)
        _int(self, "consumers", 0)
        _int(self, "key_count", 1)
        _int(self, "poll_batch", 1, 1_000_000)
        _int(self, "max_in_flight", 1)
        _int(self, "first_value", 0)
        _number(self, "rate", 0)
        _number(self, "commit_interval_s", 0)
        _number(self, "retire_flush_s", 0)
        _number(self, "poll_timeout_s", 0.001)
        if self.consumer_mode not in CONSUMER_MODES:
            raise UserError(f"workload consumer_mode {self.consumer_mode!r}: expected one of {', '.join(CONSUMER_MODES)}")
        acks = str(self.acks) if not isinstance(self.acks, bool) else None
        if acks == "-1":
            acks = "all"
        if acks not in ACKS:
            raise UserError(f"workload acks {self.acks!r}: expected one of {', '.join(ACKS)}")
        object.__setattr__(self, "acks", acks)
        for name in ("idempotent", "explicit_partitions", "replace_on_info", "client_processes"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"workload {name} must be true or false, not {getattr(self, name)!r}")
        if self.idempotent and self.acks != "all":
            raise UserError(f"workload idempotent producers need acks=all, not acks={self.acks}")
        if not isinstance(self.group_id, str) or not self.group_id:
            raise UserError("workload group_id must be a non-empty string")
        object.__setattr__(self, "groups", groups_of(self.groups, taken=own_groups(self.group_id)))
        object.__setattr__(self, "transactions", TxnConfig.from_mapping(self.transactions))
        if self.transactions is not None and self.client_processes:
            raise UserError("workload transactions run as threads: client_processes is not supported with them")
        for name, reserved in (("producer_settings", RESERVED_PRODUCER),
                               ("consumer_settings", RESERVED_CONSUMER),
                               ("topic_settings", {})):
            object.__setattr__(self, name, _settings(name, getattr(self, name), reserved))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "WorkloadConfig":
        """Build from a spec's `[workload]` table; unknown keys are a UserError."""
        if not isinstance(data, Mapping):
            raise UserError(f"workload settings must be a table, not {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"unknown workload setting {unknown[0]!r} (known: {', '.join(sorted(known))})")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (for run.json)."""
        out = dataclasses.asdict(self)
        for name in ("producer_settings", "consumer_settings", "topic_settings"):
            out[name] = dict(getattr(self, name))
        out["groups"] = [g.to_dict() for g in self.groups]
        out["transactions"] = self.transactions.to_dict() if self.transactions is not None else None
        return out

    @property
    def transformer_group(self) -> str:
        """The consumer group of the transactions' transformers."""
        return own_groups(self.group_id)[2]

    def transactional_id(self, slot: int, transformer: bool = False) -> str:
        """The `transactional.id` of a transactional producer's slot, or a transformer's."""
        return f"{self.group_id}-{'transform' if transformer else 'txn'}-{slot}"

    def committing_groups(self) -> list[str]:
        """Every consumer group whose offsets the workload commits: the
        groups', and the transformers' (in their transactions)."""
        names = [g.name for g in self.groups]
        if self.transactions is not None and self.transactions.transformers:
            names.append(self.transformer_group)
        return names

    @property
    def single_attempt(self) -> bool:
        """True when the producer sends each record at most once (retries=0,
        not idempotent): then a broker's rejection proves the record absent."""
        if self.idempotent:
            return False
        settings = self.producer_settings
        for name in ("retries", "message.send.max.retries"):
            if name in settings:
                return str(settings[name]).strip() == "0"
        return False


def share_of(partitions: int, clients: int, slot: int) -> list[int]:
    """The partitions client `slot` of `clients` reads, spread round-robin
    so that every partition is read by at least one of them."""
    groups = min(clients, partitions)
    return [p for p in range(partitions) if p % groups == slot % groups]


def own_groups(group_id: str) -> tuple[str, str, str]:
    """The workload's own consumer groups, which no [[groups]] table may
    name: the plain consumers', the final reads', the transformers'."""
    return group_id, f"{group_id}-final", f"{group_id}-transform"


def groups_of(value: Any, taken: tuple[str, ...] = ()) -> tuple[GroupConfig, ...]:
    """Groups from a list of GroupConfigs or tables of their fields, each
    named once and none named as one of `taken` (the workload's own groups)."""
    if not isinstance(value, (list, tuple)):
        raise UserError(f"workload groups must be a list of tables, not {type(value).__name__}")
    groups = tuple(GroupConfig.from_mapping(g, i) for i, g in enumerate(value))
    names = [g.name for g in groups]
    clash = sorted({n for n in names if names.count(n) > 1} | (set(taken) & set(names)))
    if clash:
        raise UserError(f"workload groups: group {clash[0]!r} named twice (or the workload's own group)")
    return groups


def _table_fields(cls, data: Mapping, where: str) -> dict[str, Any]:
    """A spec table's keys as `cls`'s field names ('-' or '_'); an unknown key is a UserError."""
    values = {str(k).replace("-", "_"): v for k, v in data.items()}
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"{where}: unknown setting {unknown[0].replace('_', '-')!r} "
                        f"(known: {', '.join(sorted(k.replace('_', '-') for k in known))})")
    return values


def _int(cfg, name: str, low: int, high: int | None = None, where: str = "workload") -> None:
    value = getattr(cfg, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
        raise UserError(f"{where} {name.replace('_', '-') if where != 'workload' else name} must be {bound}, "
                        f"not {value!r}")


def _number(cfg, name: str, low: float, where: str = "workload") -> None:
    value = getattr(cfg, name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value or value < low \
            or value == float("inf"):
        raise UserError(f"{where} {name.replace('_', '-') if where != 'workload' else name} must be a number "
                        f">= {low}, not {value!r}")


def _settings(name: str, value: Any, reserved: Mapping[str, str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UserError(f"workload {name} must be a table of client settings, not {type(value).__name__}")
    out: dict[str, Any] = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key:
            raise UserError(f"workload {name}: setting names must be non-empty strings, not {key!r}")
        if key in reserved:
            raise UserError(f"workload {name}: {key!r} is set by the workload; use {reserved[key]}")
        if not isinstance(v, (str, int, float, bool)):
            raise UserError(f"workload {name}[{key!r}] must be a string, number or boolean, not {type(v).__name__}")
        out[key] = v
    return out
