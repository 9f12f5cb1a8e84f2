"""`Workload`: the clients of a run, as the run lifecycle drives them.

    wl = Workload(config, bootstrap, history)
    create_topic(bootstrap, config)          # workloads.topic
    wl.start()                               # producer and consumer threads
    ... faults ...
    wl.stop(timeout=10)                      # every send completed, or left as an invoke
    ... heal, settle ...
    report = wl.final_reads(deadline_s=60)   # read everything back
    wl.stats()                               # live counters, any time

Nothing here knows which system it drives: it speaks the Kafka protocol
through confluent-kafka to whatever `bootstrap` names.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from core.errors import UserError
from workloads.common import ProcessIds, Recorder, Stats
from workloads.config import WorkloadConfig
from workloads.consumer import FinalReadReport, Reader, ConsumerSlot, final_reads
from workloads.producer import ProducerClient, ProducerSlot

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
    # fewer, fuller requests; halved p99 send latency at a steady 2000/s
    # against librdkafka's default of a million (docs/benchmarks.md).
    "max.in.flight.requests.per.connection": 5,
}
CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    # A killed consumer's partitions move on within seconds.
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 1_000,
}

_BOOTSTRAP_RE = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


@dataclass
class StopReport:
    """What stop() left behind."""

    seconds: float
    sends_without_completion: int = 0
    threads_left: list[str] = field(default_factory=list)


class Workload:
    """Producers and consumers recording into one history (see module docstring)."""

    def __init__(self, config: WorkloadConfig, bootstrap: str, history, process_ids: ProcessIds | None = None):
        if not isinstance(config, WorkloadConfig):
            raise TypeError("config must be a WorkloadConfig")
        self.config = config
        self.bootstrap = check_bootstrap(bootstrap)
        self.history = history
        self.record = Recorder(history)
        self.process_ids = process_ids or ProcessIds()
        self.stats_counters = Stats()
        self.stopping = threading.Event()
        self.stop_deadline = float("inf")
        # Hot-path copies of config fields.
        self.topic = config.topic
        self.partitions = config.partitions
        self.key_count = config.key_count
        self.explicit_partitions = config.explicit_partitions
        self._values = itertools.count(config.first_value)
        self._producers: list[ProducerSlot] = []
        self._consumers: list[ConsumerSlot] = []
        self._started = False
        self._stopped = False

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
        settings = {"bootstrap.servers": self.bootstrap, "group.id": group_id or self.config.group_id,
                    "enable.auto.commit": False, "enable.auto.offset.store": False,
                    "enable.partition.eof": eof, **CONSUMER_DEFAULTS}
        settings.update(self.config.consumer_settings)
        return settings

    def run_info(self) -> dict[str, Any]:
        """For run.json: the topic, the workload's knobs and the clients' settings."""
        def public(settings: dict) -> dict:
            return {k: v for k, v in settings.items() if k != "bootstrap.servers"}
        return {"topic": self.topic, "workload": self.config.to_dict(),
                "producer": public(self.producer_settings()), "consumer": public(self.consumer_settings())}

    def make_producer(self, pid: int, on_delivery: Callable, on_error: Callable):
        from confluent_kafka import KafkaException, Producer

        conf = {**self.producer_settings(), "client.id": f"harness-p{pid}", "on_delivery": on_delivery,
                "error_cb": on_error, "logger": client_log}
        try:
            return Producer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise UserError(f"workload producer settings rejected by the client: {_first_line(e)}") from None

    def make_consumer(self, pid: int, group_id: str, eof: bool, on_error: Callable):
        from confluent_kafka import Consumer, KafkaException

        conf = {**self.consumer_settings(group_id, eof), "client.id": f"harness-c{pid}", "error_cb": on_error,
                "logger": client_log}
        try:
            return Consumer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise UserError(f"workload consumer settings rejected by the client: {_first_line(e)}") from None

    # -- clients

    def new_producer_client(self) -> ProducerClient:
        client = ProducerClient(self, self.process_ids.next())
        self.stats_counters.process_started()
        return client

    def new_reader(self, partitions: list[int] | None, start: dict[int, int] | None = None) -> Reader:
        pid = self.process_ids.next()
        self.stats_counters.process_started()
        return Reader(self, pid, subscribe=partitions is None, partitions=partitions, start=start,
                      commit_interval_s=self.config.commit_interval_s)

    def record_crash(self, pid: int) -> None:
        """The instance of `pid` was torn down; later ops use a new process id."""
        self.record(pid, "invoke", "crash")
        self.record(pid, "ok", "crash")
        self.stats_counters.crashed()

    def consumer_partitions(self, slot: int) -> list[int] | None:
        """Assign mode: partitions of consumer `slot`, spread round-robin (each
        partition read by at least one consumer); subscribe mode: None."""
        cfg = self.config
        if cfg.consumer_mode == "subscribe":
            return None
        groups = min(cfg.consumers, cfg.partitions)
        return [p for p in range(cfg.partitions) if p % groups == slot % groups]

    # -- lifecycle

    def start(self) -> None:
        """Create the clients (bad client settings raise UserError here, on the
        caller's thread) and start one thread per producer and consumer."""
        if self._started:
            raise RuntimeError("workload already started")
        self._started = True
        cfg = self.config
        producers = [ProducerSlot(self, i, self._values, self.new_producer_client()) for i in range(cfg.producers)]
        consumers = []
        for i in range(cfg.consumers):
            partitions = self.consumer_partitions(i)
            consumers.append(ConsumerSlot(self, i, self.new_reader(partitions), partitions))
        self._producers, self._consumers = producers, consumers
        for t in consumers + producers:
            t.start()

    def stop(self, timeout: float = 10.0) -> StopReport:
        """End the fault phase: producers stop sending and get their
        outstanding sends completed within `timeout` seconds (past it, what is
        still outstanding is purged and completed as the error table says; a
        send whose client is wedged stays an invoke without completion, which
        counts as info); consumers close. Idempotent."""
        started = time.monotonic()
        if self._stopped:
            return StopReport(0.0)
        self._stopped = True
        self.stop_deadline = started + max(0.0, timeout)
        self.stopping.set()
        threads = self._producers + self._consumers
        # Leave room past the deadline for purged sends' reports and a consumer close.
        for t in threads:
            t.join(max(0.0, self.stop_deadline + 2.0 - time.monotonic()))
        left = [t.name for t in threads if t.is_alive()]
        outstanding = sum(s.client.outstanding for s in self._producers)
        outstanding += sum(c.outstanding for s in self._producers for c, _ in s.retiring)
        if left or outstanding:
            log.warning("workload stop: %d sends without completion, threads still running: %s", outstanding, left)
        return StopReport(time.monotonic() - started, outstanding, left)

    def abandon(self) -> None:
        """The run is over: events from clients left behind are dropped, not raised."""
        self.record.abandon()

    def final_reads(self, deadline_s: float) -> FinalReadReport:
        """Read every partition from offset 0 with new process ids until each
        reaches both the highest acknowledged offset and its high watermark,
        or `deadline_s` seconds from now have passed."""
        if self._started and not self._stopped:
            raise RuntimeError("stop() the workload before final reads")
        if deadline_s <= 0:
            raise UserError(f"final reads need a positive time limit, not {deadline_s}")
        return final_reads(self, deadline_s)

    def stats(self) -> dict[str, Any]:
        """Live counters: ops per f and completion type, errors by name,
        records read, processes and crashes, sends in flight."""
        snap = self.stats_counters.snapshot()
        snap["in_flight"] = sum(s.client.outstanding for s in self._producers)
        snap["rate_skipped"] = sum(s.skipped for s in self._producers)
        return snap


def check_bootstrap(bootstrap: str) -> str:
    """A `host:port[,host:port...]` list, else UserError."""
    if not isinstance(bootstrap, str) or not bootstrap.strip():
        raise UserError("workload bootstrap must be host:port[,host:port...], got nothing")
    for item in bootstrap.split(","):
        if not _BOOTSTRAP_RE.match(item.strip()):
            raise UserError(f"workload bootstrap entry {item.strip()!r} is not host:port")
    return ",".join(item.strip() for item in bootstrap.split(","))


def _first_line(e: BaseException) -> str:
    if e.args and hasattr(e.args[0], "str"):
        return e.args[0].str()
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
