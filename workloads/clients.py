"""How the workload's clients are made, and what every client thread shares.

- `ClientContext`: what a producer or consumer thread needs from its
  workload (the knobs, the history, counters, process ids, the stop event
  and deadline) and the factories of confluent-kafka instances with the
  workload's settings. The threads get this, not the `Workload`, so that
  `producer.py` and `consumer.py` import nothing that imports them back.
- `check_bootstrap`: the `host:port[,host:port...]` check every client uses.
- `client_log`: where librdkafka's own log lines go.
"""

from __future__ import annotations

import re
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import Consumer, KafkaException, Producer

from core.errors import UserError, first_line
from workloads.recording import ProcessIds, Recorder, Stats
from workloads.config import WorkloadConfig

log = logging.getLogger(__name__)
# librdkafka's own log lines go here (not to stderr), served on poll().
client_log = logging.getLogger("workloads.librdkafka")

# Producer defaults the workload picks over librdkafka's; `producer_settings` override them.
PRODUCER_DEFAULTS: dict[str, Any] = {
    # A send during a fault resolves within seconds, not librdkafka's 5 minutes.
    "message.timeout.ms": 10_000,
    "request.timeout.ms": 5_000,
    "queue.buffering.max.ms": 5,
    # Kafka's Java client default (and the most an idempotent producer uses):
    # fewer, fuller requests, and a lower p99 send latency at a steady rate
    # than librdkafka's default of a million (docs/decisions.md,
    # "`max.in.flight.requests.per.connection=5`").
    "max.in.flight.requests.per.connection": 5,
}
# An abandoned transaction (a replaced instance's) is aborted by its
# coordinator within this, not Kafka's default of a minute; `producer_settings` override it.
TRANSACTION_TIMEOUT_MS = 20_000
CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    # A killed consumer's partitions move on within seconds.
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 1_000,
}

# Consumer settings of the classic group protocol only (group.protocol=consumer refuses them).
CLASSIC_GROUP_ONLY = ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy")

_BOOTSTRAP_RE = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


@dataclass
class ClientContext:
    """What the client threads of one workload share (see module docstring).

    `history` is the raw writer (its `record` raises once closed: the
    producer's hot path uses it); `record` is the same behind a `Recorder`,
    which drops late events once the workload abandoned its clients.
    `stop_deadline` (monotonic) is infinite until `Workload.stop()` sets it.
    """

    config: WorkloadConfig
    bootstrap: str
    history: Any
    record: Recorder
    stats: Stats = field(default_factory=Stats)
    process_ids: ProcessIds = field(default_factory=ProcessIds)
    stopping: threading.Event = field(default_factory=threading.Event)
    stop_deadline: float = float("inf")
    # Where librdkafka's log lines go: `client_log`, served on the client's
    # poll (so a line logged during a blocking commit is served when it
    # returns), or None: librdkafka prints them to stderr itself, from the
    # thread that logs, with its own timestamp (a client process's debug log).
    logger: Any = client_log

    def _log_settings(self) -> dict[str, Any]:
        return {"logger": self.logger} if self.logger is not None else {}

    # -- client settings

    def producer_settings(self) -> dict[str, Any]:
        """The librdkafka settings every producer gets (without callbacks)."""
        cfg = self.config
        settings = {"bootstrap.servers": self.bootstrap, "acks": cfg.acks,
                    "enable.idempotence": cfg.idempotent, **PRODUCER_DEFAULTS}
        settings["queue.buffering.max.messages"] = max(100_000, 2 * cfg.max_in_flight)
        settings.update(cfg.producer_settings)
        return settings

    def consumer_settings(self, group_id: str | None = None, eof: bool = False) -> dict[str, Any]:
        """The librdkafka settings every consumer gets (without callbacks)."""
        settings = {"bootstrap.servers": self.bootstrap, "group.id": group_id or self.config.group_id,
                    "enable.auto.commit": False, "enable.auto.offset.store": False,
                    "enable.partition.eof": eof, **CONSUMER_DEFAULTS}
        settings.update(self.config.consumer_settings)
        return settings

    # -- client instances

    def make_producer(self, pid: int, on_delivery: Callable, on_error: Callable) -> Producer:
        """A confluent-kafka Producer for process `pid`; rejected settings are a UserError."""
        conf = {**self.producer_settings(), "client.id": f"harness-p{pid}", "on_delivery": on_delivery,
                "error_cb": on_error, **self._log_settings()}
        try:
            return Producer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise UserError(f"workload producer settings rejected by the client: {first_line(e)}") from None

    def make_txn_producer(self, pid: int, transactional_id: str, on_delivery: Callable,
                          on_error: Callable) -> Producer:
        """A transactional Producer for process `pid`: the workload's producer
        settings with `transactional.id`, idempotence and acks=all, which
        transactions require."""
        conf = {**self.producer_settings(), "acks": "all", "enable.idempotence": True,
                "transactional.id": transactional_id, "client.id": f"harness-t{pid}",
                "on_delivery": on_delivery, "error_cb": on_error, **self._log_settings()}
        conf.setdefault("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
        # librdkafka refuses a message time-out above the transaction's (a
        # plain producer's [producer] may set one): the transaction's bounds both.
        try:
            if int(conf.get("message.timeout.ms", 0)) > int(conf["transaction.timeout.ms"]):
                conf["message.timeout.ms"] = conf["transaction.timeout.ms"]
        except (TypeError, ValueError):
            pass  # not a number: the client's own error below says so
        try:
            return Producer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise UserError(f"workload transactional producer settings rejected by the client: {first_line(e)}") \
                from None

    def make_consumer(self, pid: int, group_id: str, eof: bool, on_error: Callable,
                      extra: dict | None = None) -> Consumer:
        """A confluent-kafka Consumer for process `pid`, with the workload's own
        `extra` settings over the user's (a group's commit mode); rejected
        settings are a UserError."""
        conf = {**self.consumer_settings(group_id, eof), **(extra or {}), "client.id": f"harness-c{pid}",
                "error_cb": on_error, **self._log_settings()}
        if conf.get("group.protocol") == "consumer":
            # KIP-848: the broker sets the session and heartbeat times and assigns;
            # librdkafka refuses these (the workload's defaults among them).
            for name in CLASSIC_GROUP_ONLY:
                conf.pop(name, None)
        try:
            return Consumer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise UserError(f"workload consumer settings rejected by the client: {first_line(e)}") from None

    def new_pid(self) -> int:
        """A new process id for a new client instance, counted as a started process."""
        pid = self.process_ids.next()
        self.stats.process_started()
        return pid

    def record_crash(self, pid: int) -> None:
        """The instance of `pid` was torn down; later ops use a new process id."""
        self.record(pid, "invoke", "crash")
        self.record(pid, "ok", "crash")
        self.stats.crashed()


class ClientThread(threading.Thread):
    """A slot's thread (a producer's, a consumer's, a transactional client's):
    it runs the slot's `_run`; a bug there is logged and counted in the stats
    (`thread_failed`), and the run goes on. A subclass sets `clients`."""

    clients: ClientContext

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # a bug: keep the run going, report it in stats
            log.exception("%s failed", self.name)
            self.clients.stats.thread_failed(f"{self.name}: {type(e).__name__}: {e}")

    def _run(self) -> None:
        raise NotImplementedError


def check_bootstrap(bootstrap: str) -> str:
    """A `host:port[,host:port...]` list, else UserError."""
    if not isinstance(bootstrap, str) or not bootstrap.strip():
        raise UserError("workload bootstrap must be host:port[,host:port...], got nothing")
    for item in bootstrap.split(","):
        if not _BOOTSTRAP_RE.match(item.strip()):
            raise UserError(f"workload bootstrap entry {item.strip()!r} is not host:port")
    return ",".join(item.strip() for item in bootstrap.split(","))
