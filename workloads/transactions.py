"""Transactional clients: producers whose sends commit or abort together,
consume-transform-produce clients, and readers at read_uncommitted.

Every transaction is one recorded `txn` operation (docs/history.md,
"Transactions"): the invoke lists the values it will send (and, for a
transformer, the group's offsets it commits), written before anything is
sent; the completion repeats the sends with the positions their delivery
reports gave, and a transformer's adds the records its poll returned.

What the client tells is less than the history needs, so the outcome is
decided conservatively, as for a plain send (workloads.client_errors):

- `ok`: `commit_transaction()` returned.
- `fail`: the transaction certainly did not commit: it was never asked to
  (the workload aborted it, or an error came before the commit), or the
  commit raised an abortable error and the abort that followed succeeded
  (a coordinator aborts only a transaction it has not begun to commit), or
  the producer had been fenced by the workload's own new instance before
  the commit was sent (that instance's InitProducerId aborted it first).
- `info`: anything else once the commit was asked for: a time-out, a fatal
  error, a fence the workload did not cause.

A client whose instance is unusable (fatal, fenced, or a commit whose
outcome is unknown) is replaced by a new instance with a new process id and
the same `transactional.id`, whose `init_transactions()` settles what the
old one left open; the old one's `crash` is recorded.

Fencing (`fence_interval_s`): about that often a producer opens a
transaction, and before committing it a new instance takes its
`transactional.id`; the old commit must then be refused. A zombie that
commits anyway shows in the history as an `ok` transaction whose records
the final reads do not find.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Iterator

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from core.history.format import TXN
from workloads.client_errors import FAIL, INFO
from workloads.clients import ClientContext, ClientThread
from workloads.config import share_of
from workloads.consumer import (CLOSE_BOUND_S, REPLACE_BACKOFF_S, ConsumerSlot, Reader, close_quietly,
                                exception_name, record_of)

log = logging.getLogger(__name__)

OK = "ok"
READ_UNCOMMITTED = "read_uncommitted"
# The longest one call into the client's transaction API may block: between
# calls a transaction sees its deadline (and the workload's stop) again.
TXN_CALL_S = 5.0
# The pause before asking again after a retriable error (some come back at once).
RETRY_S = 0.1


class TxnClient:
    """One transactional producer instance: a process id, a `transactional.id`,
    the positions its delivery reports gave since the last transaction began."""

    def __init__(self, clients: ClientContext, pid: int, transactional_id: str):
        self.clients = clients
        self.pid = pid
        self.transactional_id = transactional_id
        self.positions: dict[int, tuple[int, int]] = {}  # value -> (partition, offset)
        self.tainted: str | None = None  # why this instance must be replaced
        # What final reads must reach (Stats.acked_offsets): the highest offset of
        # each partition a committed transaction wrote. Its sends are counted as
        # the `txn` operation's, not as sends: `invoked` and `acked` stay 0.
        self.invoked = self.acked = 0
        self.acked_max: dict[int, int] = {}
        self.producer = clients.make_txn_producer(pid, transactional_id, self._on_delivery, self._on_error)
        clients.stats.add_producer(self)

    def _on_delivery(self, err, msg) -> None:
        # A failed delivery needs no note: the commit then raises an abortable error.
        if err is None and msg.offset() is not None and msg.offset() >= 0:
            self.positions[int(msg.value())] = (msg.partition(), msg.offset())

    def _on_error(self, err) -> None:
        self.clients.stats.error(err.name())
        if err.fatal():
            log.warning("transactional process %d: fatal error %s: %s", self.pid, err.name(), err.str())
            self.tainted = err.name()

    def init(self, deadline: float) -> bool:
        """`init_transactions()` until `deadline` (monotonic); False (and
        tainted) if the instance could not start."""
        return self._until(self.producer.init_transactions, deadline)

    def begin(self) -> str | None:
        """Begin a transaction; the error's name if the instance refused."""
        self.positions = {}
        try:
            self.producer.begin_transaction()
            return None
        except KafkaException as e:
            self.tainted = exception_name(e)
            return self.tainted

    def send(self, topic: str, values: list[int], keys: list[int], partitions: int) -> str | None:
        """Queue the transaction's sends; the first error's name if one was refused."""
        for value, key in zip(values, keys):
            try:
                if partitions:
                    self.producer.produce(topic, str(value).encode(), str(key).encode(), partition=key % partitions)
                else:
                    self.producer.produce(topic, str(value).encode(), str(key).encode())
            except (BufferError, KafkaException) as e:
                return "_QUEUE_FULL" if isinstance(e, BufferError) else exception_name(e)
        return None

    def abort(self, deadline: float) -> bool:
        """`abort_transaction()` until `deadline`; True if it aborted (else tainted)."""
        return self._until(self.producer.abort_transaction, deadline)

    def _until(self, call, deadline: float) -> bool:
        """`call(timeout)` again while it fails retriably, until `deadline`:
        True once it succeeded; else False, the instance tainted with the
        error's name (`_TIMED_OUT` where time ran out)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.tainted = self.tainted or "_TIMED_OUT"
                return False
            try:
                call(min(left, TXN_CALL_S))
                return True
            except KafkaException as e:
                err = _error(e)
                if err is not None and err.retriable() and not err.fatal():
                    time.sleep(RETRY_S)
                    continue
                self.tainted = self.tainted or exception_name(e)
                return False

    def commit(self, deadline: float, fenced_by_us: bool = False) -> tuple[str, str | None]:
        """Commit the open transaction: (outcome, error name), the outcome
        decided as the module docstring says."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.tainted = self.tainted or "_TIMED_OUT"
                return INFO, "_TIMED_OUT"
            try:
                self.producer.commit_transaction(min(left, TXN_CALL_S))
                return OK, None
            except KafkaException as e:
                err = _error(e)
                name = exception_name(e)
                if err is None:
                    self.tainted = name
                    return INFO, name
                if err.retriable() and not err.fatal():
                    time.sleep(RETRY_S)
                    continue  # the commit may be under way: asking again is how its outcome is learned
                if err.txn_requires_abort():
                    return (FAIL, name) if self.abort(deadline) else (INFO, name)
                self.tainted = name
                if fenced_by_us and _fenced(err):
                    return FAIL, name
                return INFO, name

    def completion_sends(self, values: list[int], keys: list[int], outcome: str) -> tuple[str, list[dict]]:
        """The completion's sends, each with its position where a delivery
        report gave one; an `ok` whose positions are not all known is
        recorded `info` (committed at no known position)."""
        if outcome == OK and any(v not in self.positions for v in values):
            self.producer.poll(0)
        sends = []
        for value, key in zip(values, keys):
            send = {"key": key, "value": value}
            if value in self.positions:
                send["partition"], send["offset"] = self.positions[value]
            sends.append(send)
        if outcome == OK and any("offset" not in s for s in sends):
            return INFO, sends
        if outcome == OK:
            for send in sends:
                if send["offset"] > self.acked_max.get(send["partition"], -1):
                    self.acked_max[send["partition"]] = send["offset"]
        return outcome, sends

    def close(self) -> None:
        try:
            self.producer.flush(0)
        except (KafkaException, RuntimeError):
            pass
        self.producer = None


def _error(e: BaseException) -> KafkaError | None:
    return e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None


def _fenced(err: KafkaError) -> bool:
    """The broker refused the producer's epoch: a newer instance holds its transactional.id."""
    return err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


class TxnTally:
    """What the transactional clients did, for run.json: outcomes, the values
    of transactions that certainly did not commit, and which of those the
    read_uncommitted readers saw (proof that aborts reach the log)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes = {OK: 0, FAIL: 0, INFO: 0}
        self.aborted_values: set[int] = set()
        self.read_uncommitted: set[int] = set()
        self.fenced = 0

    def finished(self, outcome: str, values: list[int]) -> None:
        with self._lock:
            self.outcomes[outcome] += 1
            if outcome == FAIL:
                self.aborted_values.update(values)

    def read(self, values: list[int]) -> None:
        with self._lock:
            self.read_uncommitted.update(values)

    def fence(self) -> None:
        with self._lock:
            self.fenced += 1

    def summary(self) -> dict:
        with self._lock:
            return {"transactions": dict(self.outcomes), "fenced": self.fenced,
                    "aborted_values": len(self.aborted_values),
                    "aborted_values_read_uncommitted": len(self.aborted_values & self.read_uncommitted)}


class TxnPacer:
    """Transactions due per client: `rate` over `clients` clients, since start."""

    def __init__(self, rate: float, clients: int):
        self.per_client = rate / clients if rate > 0 and clients else 0.0
        self.started = time.monotonic()
        self.done = 0

    def wait(self, stopping: threading.Event) -> None:
        """Until the next transaction is due (or the workload stops); a backlog is forgiven."""
        if not self.per_client:
            return
        due_at = self.started + self.done / self.per_client
        now = time.monotonic()
        if now - due_at > 1.0:  # behind by more than a second: start again from now
            self.started, self.done, due_at = now, 0, now
        if due_at > now:
            stopping.wait(due_at - now)
        self.done += 1


class TxnSlot(ClientThread):
    """One transactional producer of the workload: a thread, successive
    instances of one `transactional.id`."""

    def __init__(self, clients: ClientContext, slot: int, values: Iterator[int], tally: TxnTally, pacer: TxnPacer,
                 seed: int):
        super().__init__(name=f"wl-txn-{slot}", daemon=True)
        self.clients = clients
        self.slot = slot
        self.values = values
        self.tally = tally
        self.pacer = pacer
        self.random = random.Random(seed)
        self.transactional_id = clients.config.transactional_id(slot)
        self.client: TxnClient | None = None
        self.successor: TxnClient | None = None  # the instance that fenced the current one
        txn = clients.config.transactions
        self.next_fence = time.monotonic() + self._fence_gap() if txn.fence_interval_s > 0 else float("inf")

    def _fence_gap(self) -> float:
        return self.random.expovariate(1.0 / self.clients.config.transactions.fence_interval_s)

    def _run(self) -> None:
        stopping = self.clients.stopping
        while not stopping.is_set():
            if self.client is None or self.client.tainted is not None:
                self.client = self._replace(self.client)
                if self.client is None:
                    continue
            self.pacer.wait(stopping)
            if stopping.is_set():
                break
            self.transaction(self.client)
        if self.client is not None:
            self._retire(self.client)

    def _start(self) -> TxnClient | None:
        """A new instance of this slot's transactional.id, its transactions initialised; None if it could not."""
        clients = self.clients
        client = TxnClient(clients, clients.new_pid(), self.transactional_id)
        deadline = min(time.monotonic() + clients.config.transactions.commit_timeout_s, clients.stop_deadline)
        if client.init(deadline):
            return client
        log.info("transactional process %d could not initialise: %s", client.pid, client.tainted)
        self._retire(client)
        return None

    def _replace(self, old: TxnClient | None) -> TxnClient | None:
        if old is not None:
            log.info("transactional process %d replaced after %s", old.pid, old.tainted)
            self._retire(old)
            self.clients.stopping.wait(REPLACE_BACKOFF_S)
        return self._start()

    def _retire(self, client: TxnClient) -> None:
        client.close()
        self.clients.record_crash(client.pid)

    def transaction(self, client: TxnClient) -> None:
        """One transaction: its sends, then an abort or a commit (a fenced commit when one is due)."""
        self._transact(client)

    def _transact(self, client: TxnClient, records: list[dict] | None = None) -> str:
        """One recorded transaction; with `records` (a transformer's poll), the
        transformers' group's offsets past them are committed in it. Its outcome."""
        clients = self.clients
        cfg, txn = clients.config, clients.config.transactions
        values = [next(self.values) for _ in range(self.random.randint(txn.min_sends, txn.max_sends))]
        keys = [v % cfg.key_count for v in values]
        offsets: dict[int, int] = {}
        for r in records or ():
            offsets[r["partition"]] = r["offset"] + 1
        group = {"group": cfg.transformer_group,
                 "offsets": [{"partition": p, "offset": o} for p, o in sorted(offsets.items())]} if offsets else {}
        clients.record(client.pid, "invoke", TXN, sends=[{"key": k, "value": v} for v, k in zip(values, keys)],
                       **group)
        clients.stats.op(TXN, "invoke")
        outcome, error = self._run_transaction(client, values, keys, offsets)
        read = {"records": records} if records is not None else {}
        self.finish(client, values, keys, outcome, error, **read, **group)
        return outcome

    def _run_transaction(self, client: TxnClient, values: list[int], keys: list[int],
                         offsets: dict[int, int] | None = None) -> tuple[str, str | None]:
        """Begin, send (and add the group's `offsets`), then abort or commit: (outcome, error)."""
        clients = self.clients
        cfg, txn = clients.config, clients.config.transactions
        deadline = min(time.monotonic() + txn.commit_timeout_s, clients.stop_deadline)
        error = client.begin()
        if error is not None:
            return FAIL, error
        error = client.send(cfg.topic, values, keys, cfg.partitions if cfg.explicit_partitions else 0)
        if error is None and offsets:
            error = self.send_offsets(client, offsets, deadline)
        if error is not None or self.random.random() < txn.abort_probability:
            # Never asked to commit: whatever happens to the abort, nothing commits.
            client.producer.flush(max(0.0, min(TXN_CALL_S, deadline - time.monotonic())))
            client.abort(deadline)
            return FAIL, error or "ABORTED"
        if time.monotonic() >= self.next_fence and not clients.stopping.is_set():
            return self._fenced_commit(client, deadline)
        return client.commit(deadline)

    def send_offsets(self, client: TxnClient, offsets: dict[int, int], deadline: float) -> str | None:
        """Add a consumer group's offsets to the open transaction (a transformer's)."""
        raise NotImplementedError

    def _fenced_commit(self, old: TxnClient, deadline: float) -> tuple[str, str | None]:
        """A new instance takes the transactional.id while `old` holds an open
        transaction; then `old` tries to commit, which must be refused."""
        self.next_fence = time.monotonic() + self._fence_gap()
        old.producer.flush(max(0.0, min(TXN_CALL_S, deadline - time.monotonic())))
        new = self._start()
        if new is None:  # nothing fenced: an ordinary commit
            return old.commit(deadline)
        self.tally.fence()
        log.info("transactional process %d fenced by process %d (%s)", old.pid, new.pid, self.transactional_id)
        outcome = old.commit(deadline, fenced_by_us=True)
        old.tainted = old.tainted or "FENCED_BY_WORKLOAD"
        self.successor = new
        return outcome

    def finish(self, client: TxnClient, values: list[int], keys: list[int], outcome: str, error: str | None,
               **fields) -> None:
        """Record the transaction's completion; hand over to a fencing instance if one took over."""
        outcome, sends = client.completion_sends(values, keys, outcome)
        extra = {"error": error} if error is not None and outcome != OK else {}
        self.clients.record(client.pid, outcome, TXN, sends=sends, **fields, **extra)
        self.clients.stats.completion(TXN, outcome, error if outcome != OK else None)
        self.tally.finished(outcome, values)
        if outcome == INFO and client.tainted is None:
            client.tainted = error or INFO
        if self.successor is not None:
            self.client, self.successor = self.successor, None
            self._retire(client)


class Transformer(TxnSlot):
    """A consume-transform-produce client: a consumer of the transformers'
    group and a transactional producer under one process id. Each
    transaction polls, sends new values, and commits the group's offsets of
    what it read in the transaction (`send_offsets_to_transaction`). After
    a transaction that did not commit, the consumer goes back to the first
    offset it read, so what it read is read again; a new instance starts
    where the group's committed offsets stand.

    The consumer assigns its share of the partitions itself (spread over the
    transformers as the plain consumers' are) rather than joining the group:
    closing a subscribed librdkafka consumer whose rebalance is pending can
    wedge in `rd_kafka_assign` inside the rebalance callback (librdkafka
    issue 4884), and confluent-kafka holds the GIL there, which froze a
    whole run. Its commits carry no member generation, so a zombie
    transformer is fenced by its producer's epoch, not by the group (KIP-447)."""

    def __init__(self, clients: ClientContext, slot: int, values: Iterator[int], tally: TxnTally, pacer: TxnPacer,
                 seed: int):
        super().__init__(clients, slot, values, tally, pacer, seed)
        self.name = f"wl-transformer-{slot}"
        self.transactional_id = clients.config.transactional_id(slot, transformer=True)
        self.consumer = None
        self.next_fence = float("inf")  # fencing is the producers' (its consumer is not handed over)

    def _start(self) -> TxnClient | None:
        client = super()._start()
        if client is None:
            return None
        try:
            cfg, txn = self.clients.config, self.clients.config.transactions
            self.consumer = self.clients.make_consumer(client.pid, cfg.transformer_group, False, client._on_error,
                                                       {"isolation.level": "read_committed"})
            # Unset offsets: each partition starts where the group's committed offset stands.
            self.consumer.assign([TopicPartition(cfg.topic, p)
                                  for p in share_of(cfg.partitions, txn.transformers, self.slot)])
        except Exception:
            self._retire(client)
            raise
        return client

    def _retire(self, client: TxnClient) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            closer = threading.Thread(target=close_quietly, args=(consumer,), daemon=True)
            closer.start()
            closer.join(CLOSE_BOUND_S)
        super()._retire(client)

    def transaction(self, client: TxnClient) -> None:
        records, error = self._poll()
        if error is not None:
            client.tainted = error
            return
        if self._transact(client, records) != OK and client.tainted is None:
            self._rewind(client.pid, records)

    def _poll(self) -> tuple[list[dict], str | None]:
        cfg = self.clients.config
        try:
            messages = self.consumer.consume(cfg.poll_batch, cfg.poll_timeout_s)
        except (KafkaException, RuntimeError) as e:
            return [], exception_name(e)
        records = []
        for m in messages:
            err = m.error()
            if err is not None:
                if err.fatal():
                    return [], err.name()
                continue
            record = record_of(m)
            if record is None:
                self.clients.stats.skipped_record()
                continue
            records.append(record)
        return records, None

    def send_offsets(self, client: TxnClient, offsets: dict[int, int], deadline: float) -> str | None:
        try:
            client.producer.send_offsets_to_transaction(
                [TopicPartition(self.clients.config.topic, p, o) for p, o in sorted(offsets.items())],
                self.consumer.consumer_group_metadata(), max(0.1, min(TXN_CALL_S, deadline - time.monotonic())))
            return None
        except KafkaException as e:
            return exception_name(e)

    def _rewind(self, pid: int, records: list[dict]) -> None:
        """Back to the first offset this transaction read of each partition, so
        it is read again: a recorded `seek` each (the reads step back)."""
        first: dict[int, int] = {}
        for r in records:
            first.setdefault(r["partition"], r["offset"])
        for p, o in sorted(first.items()):
            self.clients.record(pid, "invoke", "seek", partition=p, offset=o)
            try:
                self.consumer.seek(TopicPartition(self.clients.config.topic, p, o))
            except KafkaException as e:  # no longer assigned: its next owner starts from the group's offset
                self.clients.record(pid, INFO, "seek", partition=p, offset=o, error=exception_name(e))
                continue
            self.clients.record(pid, OK, "seek", partition=p, offset=o)


class UncommittedReader(Reader):
    """A plain reader of every partition at read_uncommitted: it sees the
    records of aborted and open transactions, and its polls say so."""

    def __init__(self, clients: ClientContext, pid: int, partitions: list[int], tally: TxnTally,
                 start: dict[int, int] | None = None):
        self.tally = tally
        super().__init__(clients, pid, subscribe=False, partitions=partitions, start=start)

    def consumer_extra(self) -> dict:
        return {"isolation.level": READ_UNCOMMITTED}

    def poll_fields(self) -> dict:
        return {"isolation": READ_UNCOMMITTED}

    def poll(self, batch: int, timeout_s: float):
        eofs = super().poll(batch, timeout_s)
        if self.last_records:
            self.tally.read([r["value"] for r in self.last_records])
        return eofs


class UncommittedSlot(ConsumerSlot):
    """A read_uncommitted reader of the workload: a thread, successive readers
    (each from where the one before it got to)."""

    def __init__(self, clients: ClientContext, slot: int, tally: TxnTally):
        self.tally = tally
        partitions = list(range(clients.config.partitions))
        super().__init__(clients, slot, UncommittedReader(clients, clients.new_pid(), partitions, tally), partitions)
        self.name = f"wl-uncommitted-{slot}"

    def _successor(self, old: Reader) -> Reader:
        return UncommittedReader(self.clients, self.clients.new_pid(), self.partitions, self.tally,
                                 dict(old.next_offset))
