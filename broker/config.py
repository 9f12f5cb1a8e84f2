"""Broker settings (Kafka's names where Kafka has one) and the planted-bug switches.

Settings come from a properties file (`--config FILE`, `key=value` lines,
`#` comments) and `--set key=value` flags (which win).  Unknown keys and
bad values are a ConfigError, which the broker's CLI prints on one line
and exits 2.

Planted bugs are only ever enabled by `--debug-bug NAME` on the command
line; a config file cannot turn them on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field




class ConfigError(Exception):
    """A bad flag, setting or config file: one line, exit status 2. The broker's
    own error (not the harness's), since the broker imports nothing outside broker/."""

    exit_status = 2


# Bugs planted on purpose so the harness can prove it catches them.
PLANTED_BUGS = {
    "ack-before-replication": "acks=all answers after the leader's own append, without waiting for the ISR",
    "elect-any-replica": "the controller elects the first live replica, in or out of the ISR",
    "skip-truncation": "a restarted or demoted follower keeps the records above its HW",
    "no-dedup": "idempotent producers' sequence numbers are not checked (retries duplicate)",
    "serve-above-hw": "consumers' fetches are served up to the log end, past the high watermark: records "
                      "the whole ISR does not hold yet, which a new leader may not have",
    "ignore-min-isr": "acks=all is acknowledged whatever the ISR's size: min.insync.replicas is not enforced",
    "early-isr-join": "a follower rejoins the ISR as soon as it fetches again, before it has caught up",
    "stall-after-restart": "a broker restarted on its old logs never acknowledges a produce again "
                           "(each times out, nothing appended): a cluster that does not recover",
    "commit-in-memory": "a group coordinator keeps committed offsets in its memory, not in ZooKeeper: a new "
                        "coordinator (the old one died, or the group moved) knows none of them",
    "stale-offset-cache": "a group coordinator answers offset fetches from the offsets it committed itself, "
                          "kept since: a group that moved away and back is told where it stood before the move",
    "txn-serve-aborted": "read_committed fetches ignore the last stable offset and the aborted-transactions "
                         "index: they are served up to the high watermark, aborted and open transactions' "
                         "records included",
    "txn-partial-commit": "a transaction coordinator that takes a transaction over from another coordinator "
                          "(it died or the transaction moved) commits it on its first partition only and aborts "
                          "it on the others",
    "txn-init-forgets-ongoing": "InitProducerId on a transactional id whose transaction is Ongoing gives the "
                                "new producer a fresh producer id instead of fencing the old one and aborting "
                                "its transaction: the old transaction is never ended, and its records hold "
                                "each partition's last stable offset for good (a hanging transaction)",
    "forget-acked-sometimes": "in about half of all clusters (a coin flipped from the cluster id, which is "
                              "random per cluster), each broker acknowledges the first plain (non-idempotent) "
                              "batch it leads without appending it: a failure that shows in some runs of one "
                              "seed and not in others",
}


def coin_heads(cluster_id: str) -> bool:
    """The forget-acked-sometimes coin: one fair flip per cluster, the same on
    every broker of it (they share the cluster id ZooKeeper holds), and
    independent of the harness's seed (the id is a random UUID)."""
    return hashlib.sha256(cluster_id.encode()).digest()[0] & 1 == 1


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


def _int_at_least(lo: int):
    def conv(v: str) -> int:
        n = int(v.strip())
        if n < lo:
            raise ValueError(f"must be at least {lo}")
        return n
    return conv


def _optional_ms(v: str):
    """Kafka leaves these at Long.MAX_VALUE ("never"); we accept that, or empty."""
    s = v.strip()
    if s == "" or s == str(2**63 - 1):
        return None
    n = int(s)
    if n < 1:
        raise ValueError("must be at least 1")
    return n


TRUNCATION_SCHEMES = ("leader-epoch", "high-watermark")


def _truncation(v: str) -> str:
    s = v.strip()
    if s not in TRUNCATION_SCHEMES:
        raise ValueError(f"expected one of {', '.join(TRUNCATION_SCHEMES)}")
    return s


# key -> (attribute, converter, help)
SETTINGS = {
    "default.replication.factor": ("default_replication_factor", _int_at_least(1),
                                   "replicas of an auto-created topic"),
    "num.partitions": ("num_partitions", _int_at_least(1), "partitions of an auto-created topic"),
    "min.insync.replicas": ("min_insync_replicas", _int_at_least(1),
                            "smallest ISR an acks=all write is accepted with"),
    "unclean.leader.election.enable": ("unclean_leader_election", _bool,
                                       "elect an out-of-sync replica when no ISR member is alive"),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int_at_least(1),
                                "a follower not caught up for this long leaves the ISR"),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int_at_least(0),
                                  "how long a follower's fetch waits at the leader for data"),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _int_at_least(1024),
                                "bytes a follower asks for per partition and fetch"),
    "replica.high.watermark.checkpoint.interval.ms": ("hw_checkpoint_interval_ms", _int_at_least(1),
                                                      "how often every HW is written to the checkpoint file"),
    "log.flush.interval.messages": ("log_flush_interval_messages", _optional_ms,
                                    "fsync a log after this many messages (default: never, the OS decides)"),
    "log.flush.interval.ms": ("log_flush_interval_ms", _optional_ms,
                              "fsync a dirty log at least this often (default: never)"),
    "log.segment.bytes": ("log_segment_bytes", _int_at_least(1024), "size at which a new segment file starts"),
    "log.index.interval.bytes": ("log_index_interval_bytes", _int_at_least(1), "bytes between index entries"),
    "auto.create.topics.enable": ("auto_create_topics", _bool, "create unknown topics on Metadata/Produce"),
    "zookeeper.session.timeout.ms": ("zk_session_timeout_ms", _int_at_least(1000),
                                     "ZooKeeper session timeout: how fast a dead broker is noticed"),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int_at_least(0),
                                         "wait for more members before the first rebalance of an empty group"),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int_at_least(1), "smallest session timeout"),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int_at_least(1), "largest session timeout"),
    "message.max.bytes": ("message_max_bytes", _int_at_least(61), "largest record batch accepted"),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int_at_least(64),
                                 "largest request frame; a bigger length prefix closes the connection"),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int_at_least(1000), "close idle client connections"),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", _int_at_least(1),
                                   "largest transaction.timeout.ms a transactional producer may ask for"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_cleanup_interval_ms", _int_at_least(10),
        "how often a transaction coordinator aborts its timed-out transactions and takes over the transactions "
        "another coordinator left half-completed"),
    # Not Kafka's: Kafka has only leader-epoch truncation since 0.11 (KIP-101).
    "replica.truncation": ("replica_truncation", _truncation,
                           "how a new follower finds what to cut: leader-epoch (KIP-101, safe) or high-watermark "
                           "(the seeds' scheme, known to lose committed records)"),
}


@dataclass
class BrokerConfig:
    broker_id: int = 0
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str = ""
    advertised_port: int = 0
    zookeeper: str = "127.0.0.1:2181"
    data_dir: str = ""
    log_file: str = ""
    debug_bugs: frozenset = frozenset()
    # Kafka-named settings (defaults are Kafka's unless docs/broker.md says otherwise)
    default_replication_factor: int = 1
    num_partitions: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1048576
    hw_checkpoint_interval_ms: int = 5000
    log_flush_interval_messages: int | None = None
    log_flush_interval_ms: int | None = None
    log_segment_bytes: int = 1 << 30
    log_index_interval_bytes: int = 4096
    auto_create_topics: bool = True
    zk_session_timeout_ms: int = 6000
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    message_max_bytes: int = 1048588
    socket_request_max_bytes: int = 104857600
    connections_max_idle_ms: int = 600000
    replica_truncation: str = "leader-epoch"
    transaction_max_timeout_ms: int = 900000
    transaction_cleanup_interval_ms: int = 10000
    overrides: dict = field(default_factory=dict)

    def bug(self, name: str) -> bool:
        return name in self.debug_bugs


def parse_properties(text: str, source: str) -> dict[str, str]:
    out = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep:
            raise ConfigError(f"{source}:{n}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def apply_settings(cfg: BrokerConfig, settings: dict[str, str], source: str) -> None:
    for key, value in settings.items():
        if key in ("debug.bug", "debug.bugs"):
            raise ConfigError(f"{source}: planted bugs can only be enabled with --debug-bug on the command line")
        if key not in SETTINGS:
            raise ConfigError(f"{source}: unknown setting {key!r} (known: {', '.join(sorted(SETTINGS))})")
        attr, conv, _ = SETTINGS[key]
        try:
            setattr(cfg, attr, conv(value))
        except ValueError as e:
            raise ConfigError(f"{source}: bad value {value!r} for {key}: {e}") from None
        cfg.overrides[key] = value
    if cfg.group_min_session_timeout_ms > cfg.group_max_session_timeout_ms:
        raise ConfigError(f"{source}: group.min.session.timeout.ms is above group.max.session.timeout.ms")


def parse_host_port(value: str, what: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what}: expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)
