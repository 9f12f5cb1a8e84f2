"""`Workload`: the clients of a run, as the run lifecycle drives them.

    wl = Workload(config, bootstrap, history)
    create_topic(bootstrap, config)          # workloads.topic
    wl.start()                               # producer, consumer and group member threads
    ... faults ...
    wl.stop(timeout=10)                      # every send completed, or left as an invoke
    ... heal, settle ...
    report = wl.final_reads(deadline_s=60)   # read everything back
    wl.stats()                               # live counters, any time

Nothing here knows which system it drives: it speaks the Kafka protocol
through confluent-kafka to whatever `bootstrap` names. The client threads
get a `ClientContext` (workloads.clients), not the `Workload`.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from core.errors import UserError
from workloads.clients import ClientContext, check_bootstrap
from workloads.recording import ProcessIds, Recorder, Stats
from workloads.config import WorkloadConfig, share_of
from workloads.consumer import ConsumerSlot, FinalReadReport, Reader, final_reads, new_reader
from workloads.group import GroupSlot, final_committed
from workloads.process_slot import VALUE_BLOCK, ProcessSlot
from workloads.producer import ProducerClient, ProducerSlot, new_producer_client
from workloads.transactions import Transformer, TxnPacer, TxnSlot, TxnTally, UncommittedSlot

log = logging.getLogger(__name__)


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
        self.clients = ClientContext(config, self.bootstrap, history, Recorder(history),
                                     Stats(), process_ids or ProcessIds())
        self._values = itertools.count(config.first_value)
        self._producers: list[ProducerSlot] = []
        self._consumers: list = []  # ConsumerSlot threads, or ProcessSlot supervisors
        self._members: list = []  # the groups' members: GroupSlot threads, or ProcessSlot supervisors
        self._transactional: list = []  # TxnSlot and Transformer threads, UncommittedSlot readers
        self.transactions = TxnTally()
        self._started = False
        self._stopped = False

    # -- client settings

    def producer_settings(self) -> dict[str, Any]:
        """The librdkafka settings every producer gets (without callbacks)."""
        return self.clients.producer_settings()

    def consumer_settings(self, group_id: str | None = None, eof: bool = False) -> dict[str, Any]:
        """The librdkafka settings every consumer gets (without callbacks)."""
        return self.clients.consumer_settings(group_id, eof)

    def run_info(self) -> dict[str, Any]:
        """For run.json: the topic, the workload's knobs and the clients' settings."""
        def public(settings: dict) -> dict:
            return {k: v for k, v in settings.items() if k != "bootstrap.servers"}
        return {"topic": self.config.topic, "workload": self.config.to_dict(),
                "producer": public(self.producer_settings()), "consumer": public(self.consumer_settings())}

    # -- clients

    def new_producer_client(self) -> ProducerClient:
        """A producer instance with a new process id."""
        return new_producer_client(self.clients)

    def new_reader(self, partitions: list[int] | None, start: dict[int, int] | None = None) -> Reader:
        """A consumer instance with a new process id: assigned `partitions`, or subscribed if None."""
        return new_reader(self.clients, partitions, start)

    def consumer_partitions(self, slot: int) -> list[int] | None:
        """Assign mode: partitions of consumer `slot`, spread round-robin (each
        partition read by at least one consumer); subscribe mode: None."""
        cfg = self.config
        if cfg.consumer_mode == "subscribe":
            return None
        return share_of(cfg.partitions, cfg.consumers, slot)

    # -- lifecycle

    def start(self) -> None:
        """Create the clients (bad client settings raise UserError here, on the
        caller's thread) and start one thread per producer and consumer."""
        if self._started:
            raise RuntimeError("workload already started")
        self._started = True
        cfg = self.config
        if cfg.client_processes:  # each producer an OS process, sending values of blocks of its own
            blocks = itertools.count(cfg.first_value, VALUE_BLOCK)
            producers = [ProcessSlot(self.clients, i, blocks=blocks) for i in range(cfg.producers)]
        else:
            producers = [ProducerSlot(self.clients, i, self._values, self.new_producer_client())
                         for i in range(cfg.producers)]
        consumers: list = []  # ConsumerSlot threads, or ProcessSlot supervisors
        for i in range(cfg.consumers):
            partitions = self.consumer_partitions(i)
            consumers.append(ProcessSlot(self.clients, i, consumer=True, partitions=partitions)
                             if cfg.client_processes else
                             ConsumerSlot(self.clients, i, self.new_reader(partitions), partitions))
        members = ProcessSlot if cfg.client_processes else GroupSlot
        self._members = [members(self.clients, i, group=group) for group in cfg.groups for i in range(group.consumers)]
        self._producers, self._consumers = producers, consumers
        self._transactional = self._transactional_clients()
        for t in consumers + self._members + self._transactional + producers:
            t.start()

    def _transactional_clients(self) -> list:
        """The transactions' threads (workloads.transactions): readers at
        read_uncommitted, then the producers and transformers."""
        txn = self.config.transactions
        if txn is None:
            return []
        tally, clients = self.transactions, txn.producers + txn.transformers
        readers = [UncommittedSlot(self.clients, i, tally) for i in range(txn.read_uncommitted)]
        # Each writer owes its share of the rate; each draws its sizes and aborts from a seed of its own.
        writers = [TxnSlot(self.clients, i, self._values, tally, TxnPacer(txn.rate, clients), i)
                   for i in range(txn.producers)]
        writers += [Transformer(self.clients, i, self._values, tally, TxnPacer(txn.rate, clients), 1000 + i)
                    for i in range(txn.transformers)]
        return readers + writers

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
        clients = self.clients
        clients.stop_deadline = started + max(0.0, timeout)
        clients.stopping.set()
        threads = self._producers + self._transactional + self._consumers + self._members
        # Leave room past the deadline for purged sends' reports and a consumer close.
        for t in threads:
            t.join(max(0.0, clients.stop_deadline + 2.0 - time.monotonic()))
        left = [t.name for t in threads if t.is_alive()]
        outstanding = sum(_in_flight(s) for s in self._producers)
        outstanding += sum(c.outstanding for s in self._producers for c, _ in getattr(s, "retiring", ()))
        if left or outstanding:
            log.warning("workload stop: %d sends without completion, threads still running: %s", outstanding, left)
        return StopReport(time.monotonic() - started, outstanding, left)

    def client_processes(self) -> list[ProcessSlot]:
        """The clients that run as OS processes (`client_processes`): the
        producers, the groups' members, then the plain consumers, for faults
        that hit clients."""
        return [s for s in self._producers + self._members + self._consumers if isinstance(s, ProcessSlot)]

    def abandon(self) -> None:
        """The run is over: events from clients left behind are dropped, not raised."""
        self.clients.record.abandon()

    def final_reads(self, deadline_s: float) -> FinalReadReport:
        """Each consumer group's committed offsets (every member has stopped),
        then every partition read from offset 0 with new process ids until each
        reaches both the highest acknowledged offset and its high watermark,
        or `deadline_s` seconds from now have passed."""
        if self._started and not self._stopped:
            raise RuntimeError("stop() the workload before final reads")
        if deadline_s <= 0:
            raise UserError(f"final reads need a positive time limit, not {deadline_s}")
        final_committed(self.clients)
        return final_reads(self.clients, deadline_s)

    def transaction_summary(self) -> dict[str, Any] | None:
        """For run.json: the transactions' outcomes, fences, and how many
        values of aborted transactions the read_uncommitted readers saw; None
        without transactions."""
        return self.transactions.summary() if self.config.transactions is not None else None

    def stats(self) -> dict[str, Any]:
        """Live counters: ops per f and completion type, errors by name,
        records read, processes and crashes, sends in flight."""
        snap = self.clients.stats.snapshot()
        snap["in_flight"] = sum(_in_flight(s) for s in self._producers)
        snap["rate_skipped"] = sum(getattr(s, "skipped", 0) for s in self._producers)
        return snap


def _in_flight(slot) -> int:
    """A producer slot's sends without completion: its client's (a thread), or its process's."""
    return slot.outstanding if isinstance(slot, ProcessSlot) else slot.client.outstanding
