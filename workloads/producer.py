"""Producers: unique integers sent at a target rate, every send recorded.

One `ProducerSlot` thread per configured producer. A slot drives one
confluent-kafka `Producer` instance at a time (`ProducerClient`, one process
id). Each send is recorded as an `invoke` *before* `produce()` and completed
from its delivery report, classified by `workloads.client_errors`.

Acknowledgements are recorded per poll, not per report: the delivery
callback only keeps (value, partition, offset), and every poll of the
client (`ProducerClient.poll`) records what it served at once, with the
time it returned: the same as the reports' own times or a little later,
never earlier, and one clock read and one pack for them all (the recorder's
cost per send: docs/decisions.md, "Recorded off the client's thread"; `python
-m bench.workload_overhead` measures it, docs/benchmarks.md, "Workload
recorder overhead"). Any other completion records the kept
acknowledgements first, so a process's completions stay in the order they
came; a client being drained records each one as it comes, since a flush
may wait long.

A client that gets an indeterminate (`info`) result, or a fatal error, is
retired: the slot switches at once to a new instance with a new process id,
and a helper thread lets the old instance deliver what it still has in
flight (bounded by `retire_flush_s`), purges the rest, and then records the
old process's `crash`.

Rate control: a slot owes `rate / producers` sends per second since it
started; it sends what is due in small bursts, never more than
`max_in_flight` outstanding, and forgives a backlog older than a second (a
stalled cluster does not cause a storm of sends when it heals).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterator

from confluent_kafka import KafkaException

from workloads.client_errors import (ACKED_WITHOUT_OFFSET, ACKS_0, INFO, classify_delivery,
                                     classify_produce_exception, produce_exception_is_fatal)
from workloads.clients import ClientContext, ClientThread

log = logging.getLogger(__name__)

# Sends issued between two polls of the delivery queue.
BURST = 256
# The shortest wait between bursts: a shorter poll timeout rounds to 0 ms
# and the thread would spin, starving the brokers on a small machine.
MIN_WAIT_S = 0.002
# When a deadline has passed, time still given to purged sends' reports.
PURGE_GRACE_S = 1.0


class ProducerClient:
    """One producer instance: its process id, its outstanding sends.

    Its counters are plain ints touched by one thread at a time (the slot's,
    then the retiring thread's): the hot path takes no lock besides the
    history's own. `Stats` sums them for a snapshot.
    """

    def __init__(self, clients: ClientContext, pid: int):
        self.clients = clients
        self.pid = pid
        self.outstanding = 0
        self.invoked = 0
        self.acked = 0
        self.acked_max: dict[int, int] = {}  # partition -> highest acknowledged offset
        # Why this instance must be replaced (an error name), or None.
        self.tainted: str | None = None
        # Whether the library declared it unusable: replaced even where the run keeps clients on info.
        self.fatal = False
        self._sends_acked = clients.history.sends_acked
        # acknowledged and not yet recorded: value, partition, offset, value, ...
        self._acks: list[int] = []
        self._draining = False  # set by drain(): every acknowledgement recorded as it comes
        self._recorder = clients.record
        self._stats = clients.stats
        self._single_attempt = clients.config.single_attempt
        self._acks0 = clients.config.acks == "0"
        self.producer = clients.make_producer(pid, self._on_delivery, self._on_error)
        clients.stats.add_producer(self)

    def _on_delivery(self, err, msg) -> None:
        self.outstanding -= 1
        offset = msg.offset() if err is None else None
        if err is None and not self._acks0 and offset is not None and offset >= 0:
            self._acks.extend((int(msg.value()), msg.partition(), offset))
            if self._draining:
                self.record_acks()
            return
        self.record_acks()  # the acknowledgements served before this report come before it
        value = int(msg.value())
        if err is None:
            # acks=0: the broker never answers; expected for every send, so no replacement.
            # Otherwise acknowledged at no known position (see workloads.client_errors).
            name = ACKS_0 if self._acks0 else ACKED_WITHOUT_OFFSET
            self._recorder(self.pid, "info", "send", value=value, error=name)
            self._stats.completion("send", "info", name)
            return
        outcome = classify_delivery(err.code(), self._single_attempt)
        self._recorder(self.pid, outcome.type, "send", value=value, error=outcome.error)
        self._stats.completion("send", outcome.type, outcome.error)
        if outcome.type == INFO and self.tainted is None:
            self.tainted = outcome.error

    def record_acks(self) -> None:
        """Record the acknowledgements kept since the last call, at one time (now)."""
        acks = self._acks
        if not acks:
            return
        self._acks = []
        try:
            self._sends_acked(self.pid, acks)
        except RuntimeError:  # the history is closed: reports arriving after the run
            if not self._recorder.abandoned:
                raise
            return
        self.acked += len(acks) // 3
        acked_max = self.acked_max
        for partition, offset in zip(acks[1::3], acks[2::3]):
            if offset > acked_max.get(partition, -1):
                acked_max[partition] = offset

    def poll(self, timeout: float) -> None:
        """Serve delivery reports for up to `timeout` seconds, then record the
        acknowledgements among them (also those served before a callback
        raised: what was acknowledged is never left unsaid)."""
        try:
            self.producer.poll(timeout)
        finally:
            self.record_acks()

    def _on_error(self, err) -> None:
        self._stats.error(err.name())
        if err.fatal():
            log.warning("producer process %d: fatal error %s: %s", self.pid, err.name(), err.str())
            self.tainted = err.name()
            self.fatal = True
        else:
            log.debug("producer process %d: %s", self.pid, err.str())

    def drain(self, until: float) -> None:
        """Let outstanding sends complete until `until` (monotonic), then purge
        the rest so each gets its completion; serve their reports briefly."""
        self._draining = True
        self.record_acks()
        while self.outstanding > 0:
            # stop() may bring the deadline forward while we wait
            left = min(until, self.clients.stop_deadline - PURGE_GRACE_S) - time.monotonic()
            if left <= 0:
                break
            self.producer.flush(min(left, 0.2))
        if self.outstanding > 0:
            self.producer.purge(in_queue=True, in_flight=True, blocking=True)
            grace_until = time.monotonic() + PURGE_GRACE_S
            while self.outstanding > 0 and time.monotonic() < grace_until:
                self.producer.poll(0.05)
        if self.outstanding > 0:
            log.warning("producer process %d: %d sends left without completion", self.pid, self.outstanding)

    def close(self) -> None:
        if self.outstanding == 0:
            self.producer.close()  # flushes: nothing is left, so it returns at once
        self.producer = None


def new_producer_client(clients: ClientContext) -> ProducerClient:
    """A producer instance with a new process id, counted as a started process."""
    client = ProducerClient(clients, clients.process_ids.next())
    clients.stats.process_started()
    return client


class ProducerSlot(ClientThread):
    """One producer of the workload: a thread, successive client instances."""

    def __init__(self, clients: ClientContext, slot: int, values: Iterator[int], first: ProducerClient):
        super().__init__(name=f"wl-producer-{slot}", daemon=True)
        self.clients = clients
        self.slot = slot
        self.values = values
        self.client = first
        self.retiring: list[tuple[ProducerClient, threading.Thread]] = []
        self.skipped = 0  # sends the rate owed but the slot could not issue in time

    def _run(self) -> None:
        cfg = self.clients.config
        stopping = self.clients.stopping
        per_slot = cfg.rate / cfg.producers if cfg.rate > 0 else 0.0
        max_lag = max(BURST, int(per_slot)) if per_slot else 0
        started = time.monotonic()
        issued = 0
        client = self.client
        while not stopping.is_set():
            if client.tainted is not None and (cfg.replace_on_info or client.fatal):
                client = self.client = self._replace(client)
            room = cfg.max_in_flight - client.outstanding - self._retiring_outstanding()
            if per_slot:
                now = time.monotonic()
                due = int((now - started) * per_slot) - issued
                if due > max_lag:
                    self.skipped += due - max_lag
                    issued += due - max_lag
                    due = max_lag
            else:
                due = BURST
            n = min(due, room, BURST)
            if n <= 0:
                if room <= 0 or not per_slot:
                    wait = MIN_WAIT_S
                else:
                    wait = (issued + 1) / per_slot - (time.monotonic() - started)
                client.poll(min(max(wait, MIN_WAIT_S), 0.05))
                continue
            self._send_many(client, n)
            issued += n
            client.poll(0)
        self._finish(client)

    def _send_many(self, client: ProducerClient, n: int) -> None:
        """n sends: all recorded as invokes, at once, before the first produce()."""
        cfg = self.clients.config
        produce = client.producer.produce
        next_value = self.values.__next__
        topic, key_count, pid = cfg.topic, cfg.key_count, client.pid
        partitions = cfg.partitions if cfg.explicit_partitions else 0
        values = [next_value() for _ in range(n)]
        keys = [value % key_count for value in values]
        self.clients.history.sends_invoked(pid, keys, values)  # the producer loop never runs after the history closes
        queued = 0
        for value, key in zip(values, keys):
            try:
                if partitions:
                    produce(topic, str(value).encode(), str(key).encode(), partition=key % partitions)
                else:
                    produce(topic, str(value).encode(), str(key).encode())
            except (BufferError, KafkaException) as e:
                self._produce_failed(client, value, e)
                continue
            queued += 1
        client.invoked += n
        client.outstanding += queued

    def _produce_failed(self, client: ProducerClient, value: int, e: BaseException) -> None:
        outcome = classify_produce_exception(e)
        self.clients.record(client.pid, outcome.type, "send", value=value, error=outcome.error)
        self.clients.stats.completion("send", outcome.type, outcome.error)
        if produce_exception_is_fatal(e):
            client.tainted = outcome.error
            client.fatal = True

    def _retiring_outstanding(self) -> int:
        if not self.retiring:
            return 0
        self.retiring = [(c, t) for c, t in self.retiring if t.is_alive()]
        return sum(c.outstanding for c, _ in self.retiring)

    def _replace(self, old: ProducerClient) -> ProducerClient:
        log.info("producer process %d replaced after %s", old.pid, old.tainted)
        retire = threading.Thread(target=self._retire, args=(old,), name=f"wl-retire-{old.pid}", daemon=True)
        retire.start()
        self.retiring.append((old, retire))
        return new_producer_client(self.clients)

    def _retire(self, client: ProducerClient) -> None:
        clients = self.clients
        try:
            until = min(time.monotonic() + clients.config.retire_flush_s, clients.stop_deadline - PURGE_GRACE_S)
            client.drain(until)
            client.close()
        except Exception as e:
            log.exception("retiring producer process %d failed", client.pid)
            clients.stats.thread_failed(f"retire {client.pid}: {type(e).__name__}: {e}")
        clients.record_crash(client.pid)

    def _finish(self, client: ProducerClient) -> None:
        """The fault phase is over: deliver or purge what is outstanding."""
        deadline = self.clients.stop_deadline
        client.drain(deadline - PURGE_GRACE_S)
        client.close()
        for _, thread in self.retiring:
            thread.join(max(0.0, deadline - time.monotonic()))
