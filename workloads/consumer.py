"""Consumers: polls, rebalances, commits and seeks recorded; the final reads.

A `Reader` is one confluent-kafka `Consumer` instance, one process id. It
either assigns partitions explicitly (assign mode: an `assign` op) or joins
the consumer group (subscribe mode: an `assign` of no partitions when it
subscribes, then the rebalance callbacks record each new assignment as an
`assign` invoke and ok). Every `consume()` call is a `poll`
op whose ok lists the records in delivery order. Read positions are
committed every `commit_interval_s` with a synchronous commit, recorded as a
`commit` op.

A reader whose instance became unusable (a fatal error, a truncated log
under it, an indeterminate commit) is closed within a bound, its `crash` is
recorded, and a new reader with a new process id takes over; in assign mode
it continues from the old reader's positions.

`final_reads` runs after the fault phase: fresh readers assign every
partition from the beginning and read until each partition's position has
reached both the highest acknowledged offset and its high watermark, or the
deadline passes. Each reader's polls are bracketed by a `final-reads`
operation whose completion lists the partitions read to their end so far and
that end (docs/history.md): the checker reads the final log from them. A
partition whose log ends below its highest acknowledged offset
(acknowledged records were lost) is done once everything up to its high
watermark is read and the watermark has stood still for STABLE_END_S:
waiting out the deadline for offsets that no longer exist tells nothing more.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, field

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from core.history.format import FINAL_READS
from workloads.client_errors import CRASH, EOF, FAIL, INFO, classify_commit, consumer_error_action
from workloads.clients import ClientContext, ClientThread

log = logging.getLogger(__name__)

CLOSE_BOUND_S = 5.0
# Pause before replacing a reader again, so a broken cluster does not cause a tight crash loop.
REPLACE_BACKOFF_S = 0.5


class Reader:
    """One consumer instance: its process id, assignment and read positions."""

    def __init__(self, clients: ClientContext, pid: int, *, subscribe: bool, partitions: list[int] | None = None,
                 start: dict[int, int] | None = None, group_id: str | None = None, eof: bool = False,
                 commit_interval_s: float = 0.0):
        self.clients = clients
        self.pid = pid
        self.topic = clients.config.topic
        self.next_offset: dict[int, int] = {}   # partition -> the offset after the last one read
        self.committed: dict[int, int] = {}
        self.assignment: list[int] = []
        self.crash_reason: str | None = None
        self.finished = False
        self.records_read = 0
        self.commit_interval_s = commit_interval_s
        self.next_commit = time.monotonic() + commit_interval_s
        self.last_records: list[dict] = []  # the records of the last poll, in delivery order
        self._record = clients.record
        self._stats = clients.stats
        self.consumer = clients.make_consumer(pid, group_id or clients.config.group_id, eof, self._on_error,
                                              self.consumer_extra())
        if subscribe:
            self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                    on_lost=self._on_revoke)
            # It joined holding nothing: a member never given a partition shows as one
            # (checkers/group_balance.py: a starved member).
            self._rebalanced(set())
        else:
            self.assign(partitions or [], start or {})

    # What a kind of reader adds to the workload's consumer settings (workloads.group).
    def consumer_extra(self) -> dict:
        return {}

    # What a kind of reader adds to its recorded `assign` and `commit` events (workloads.group).
    def group_fields(self) -> dict:
        return {}

    # What a kind of reader adds to its recorded `poll` events (workloads.transactions: its isolation).
    def poll_fields(self) -> dict:
        return {}

    # -- assignment

    def assign(self, partitions: list[int], start: dict[int, int]) -> None:
        """Explicitly assign `partitions`, each from `start[p]` or the beginning."""
        parts = sorted(partitions)
        self._record(self.pid, "invoke", "assign", partitions=parts)
        try:
            self.consumer.assign([TopicPartition(self.topic, p, start.get(p, OFFSET_BEGINNING)) for p in parts])
        except KafkaException as e:
            name = exception_name(e)
            self._record(self.pid, "info", "assign", partitions=parts, error=name)
            self._stats.completion("assign", "info", name)
            self.crash_reason = name
            return
        self._record(self.pid, "ok", "assign", partitions=parts)
        self._stats.op("assign", "ok")
        self.assignment = parts
        self.next_offset.update({p: o for p, o in start.items() if p in parts and o >= 0})

    def _rebalanced(self, partitions: set[int]) -> None:
        if self.finished:
            return
        new = sorted(partitions)
        # A group rebalance sets the partitions as one step: record it as an op that happened.
        fields = self.group_fields()
        self._record(self.pid, "invoke", "assign", partitions=new, **fields)
        self._record(self.pid, "ok", "assign", partitions=new, **fields)
        self._stats.op("assign", "ok")
        added = [p for p in new if p not in self.assignment]
        self.assignment = new
        for p in list(self.next_offset):
            if p not in partitions:  # a later assignment starts from the committed offset
                del self.next_offset[p]
                self.committed.pop(p, None)
        if added:
            self.assigned(added)

    def assigned(self, partitions: list[int]) -> None:
        """A rebalance gave this reader `partitions` (a kind of reader may record where they start)."""

    def _current(self, consumer) -> set[int]:
        try:
            return {tp.partition for tp in consumer.assignment()}
        except KafkaException:
            return set(self.assignment)

    def _on_assign(self, consumer, partitions) -> None:
        # Eager protocol: the assignment is empty here and `partitions` is all
        # of the new one; cooperative: `partitions` are added to the current.
        self._rebalanced(self._current(consumer) | {tp.partition for tp in partitions})

    def _on_revoke(self, consumer, partitions) -> None:
        self._rebalanced(self._current(consumer) - {tp.partition for tp in partitions})

    def _on_error(self, err) -> None:
        self._stats.error(err.name())
        if err.fatal():
            log.warning("consumer process %d: fatal error %s: %s", self.pid, err.name(), err.str())
            self.crash_reason = err.name()
        else:
            log.debug("consumer process %d: %s", self.pid, err.str())

    # -- reading

    def poll(self, batch: int, timeout_s: float) -> list[tuple[int, int]]:
        """One recorded poll; returns the (partition, offset) of end-of-partition events."""
        fields = self.poll_fields()
        self._record(self.pid, "invoke", "poll", **fields)
        self._stats.op("poll", "invoke")
        try:
            messages = self.consumer.consume(batch, timeout_s)
        except (KafkaException, RuntimeError) as e:
            name = exception_name(e)
            self._record(self.pid, "info", "poll", error=name, **fields)
            self._stats.completion("poll", "info", name)
            self.crash_reason = name
            self.last_records = []
            return []
        records = []
        eofs = []
        next_offset = self.next_offset
        for m in messages:
            err = m.error()
            if err is None:
                record = record_of(m)
                if record is None:
                    self._stats.skipped_record()
                    continue
                records.append(record)
                next_offset[record["partition"]] = record["offset"] + 1
                continue
            action = consumer_error_action(err)
            if action == EOF:
                eofs.append((m.partition(), m.offset()))
            elif action == CRASH:
                log.info("consumer process %d: %s on partition %s", self.pid, err.name(), m.partition())
                self._stats.error(err.name())
                self.crash_reason = err.name()
            else:
                self._stats.error(err.name())
        # Records that came before an error in the same batch were still read.
        self._record(self.pid, "ok", "poll", records=records, **fields)
        self.last_records = records
        self._stats.read(len(records))
        self.records_read += len(records)
        return eofs

    # -- committing

    def maybe_commit(self, now: float) -> None:
        if self.commit_interval_s <= 0 or now < self.next_commit:
            return
        self.next_commit = now + self.commit_interval_s
        self.commit_positions()

    def commit_positions(self) -> None:
        """Commit the read positions of the assigned partitions that moved since their last commit."""
        assigned = set(self.assignment)
        offsets = [(p, o) for p, o in sorted(self.next_offset.items())
                   if p in assigned and self.committed.get(p) != o]
        if offsets:
            self.commit(offsets)

    def commit(self, offsets: list[tuple[int, int]]) -> str:
        """One recorded synchronous commit; returns its completion type."""
        listed = [{"partition": p, "offset": o} for p, o in offsets]
        fields = self.group_fields()
        self._record(self.pid, "invoke", "commit", offsets=listed, **fields)
        self._stats.op("commit", "invoke")
        try:
            result = self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets],
                                          asynchronous=False)
        except (KafkaException, RuntimeError) as e:
            code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else KafkaError._STATE
            outcome = classify_commit(code)
            type_, error = outcome.type, outcome.error
        else:
            errors = [tp.error for tp in (result or []) if tp.error is not None]
            if not errors:
                self._record(self.pid, "ok", "commit", offsets=listed, **fields)
                self._stats.op("commit", "ok")
                self.committed.update(dict(offsets))
                return "ok"
            outcomes = [classify_commit(err.code()) for err in errors]
            # Some partitions committed and some not: the op as a whole is unknown.
            definite = len(errors) == len(offsets) and all(o.type == FAIL for o in outcomes)
            type_, error = (FAIL if definite else INFO), errors[0].name()
        self._record(self.pid, type_, "commit", offsets=listed, error=error, **fields)
        self._stats.completion("commit", type_, error)
        if type_ == INFO and self.clients.config.replace_on_info:
            self.crash_reason = error
        return type_

    # -- ending

    def close(self, bound_s: float = CLOSE_BOUND_S) -> bool:
        """Close the instance within `bound_s` (leaving the group may hang on an
        unreachable coordinator); True if it closed. Later callbacks are dropped."""
        closer = threading.Thread(target=self._close_now, name=f"wl-close-{self.pid}", daemon=True)
        closer.start()
        closer.join(max(0.0, bound_s))
        self.finished = True
        if closer.is_alive():
            log.warning("consumer process %d did not close within %.1f s; left behind", self.pid, bound_s)
            return False
        return True

    def _close_now(self) -> None:
        close_quietly(self.consumer)


def record_of(message) -> dict | None:
    """A consumed message as the history's record; None for one whose key or
    value is not an integer (not a record of this workload)."""
    try:
        value = int(message.value())
        key = message.key()
        key = int(key) if key is not None else None
    except (TypeError, ValueError):
        return None
    return {"partition": message.partition(), "offset": message.offset(), "key": key, "value": value}


def exception_name(e: BaseException) -> str:
    """The client error's name in a raised exception (the exception's type where it carries none)."""
    if e.args and isinstance(e.args[0], KafkaError):
        return e.args[0].name()
    if isinstance(e, RuntimeError):
        return "_CLOSED" if "closed" in str(e).lower() else type(e).__name__
    return type(e).__name__


def new_reader(clients: ClientContext, partitions: list[int] | None, start: dict[int, int] | None = None) -> Reader:
    """A reader with a new process id: assigned `partitions` (from `start`), or
    subscribed to the group if `partitions` is None."""
    pid = clients.new_pid()
    return Reader(clients, pid, subscribe=partitions is None, partitions=partitions, start=start,
                  commit_interval_s=clients.config.commit_interval_s)


def read_on(reader: Reader, clients: ClientContext) -> None:
    """A plain consumer's loop: poll, and commit when due, until the workload
    stops or the instance becomes unusable (its `crash_reason`)."""
    cfg = clients.config
    while not clients.stopping.is_set() and reader.crash_reason is None:
        reader.poll(cfg.poll_batch, cfg.poll_timeout_s)
        if reader.crash_reason is None:
            reader.maybe_commit(time.monotonic())


class ConsumerSlot(ClientThread):
    """One consumer of the workload: a thread, successive reader instances."""

    def __init__(self, clients: ClientContext, slot: int, first: Reader, partitions: list[int] | None):
        super().__init__(name=f"wl-consumer-{slot}", daemon=True)
        self.clients = clients
        self.slot = slot
        self.reader = first
        self.partitions = partitions  # None in subscribe mode

    def _run(self) -> None:
        clients = self.clients
        reader = self.reader
        while not clients.stopping.is_set():
            read_on(reader, clients)
            if reader.crash_reason is not None and not clients.stopping.is_set():
                reader = self.reader = self._replace(reader)
        reader.close(min(CLOSE_BOUND_S, max(0.0, clients.stop_deadline - time.monotonic())))

    def _replace(self, old: Reader) -> Reader:
        clients = self.clients
        log.info("consumer process %d replaced after %s", old.pid, old.crash_reason)
        old.close()
        clients.record_crash(old.pid)
        clients.stopping.wait(REPLACE_BACKOFF_S)
        return self._successor(old)

    def _successor(self, old: Reader) -> Reader:
        """The instance after `old`: from its positions (assign), or joining the group again."""
        return new_reader(self.clients, self.partitions, dict(old.next_offset))


# --------------------------------------------------------------------------
# Final reads


@dataclass
class PartitionReach:
    """How far final reads got in one partition."""

    partition: int
    acked_offset: int | None      # the highest offset an ok send reported (None: no ok send)
    high_watermark: int | None    # the latest high watermark seen (None: never learned)
    reached: int                  # the next offset to read: every offset below it was read past
    done: bool
    # Done although the log ends below the highest acknowledged offset: the
    # high watermark stood still for STABLE_END_S with everything below it read
    # (acknowledged records were lost; the checker says which).
    ends_below_acked: bool = False
    # Not done, and its last stable offset (what a read_committed reader may
    # read up to) was below the high watermark at the end: a transaction left
    # open held the reads back (None: not asked, or no such hold).
    stable_offset: int | None = None


@dataclass
class FinalReadReport:
    """What final reads achieved; `complete` when every partition is done."""

    complete: bool
    seconds: float
    records: int
    processes: list[int] = field(default_factory=list)
    partitions: list[PartitionReach] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        missing = [r.partition for r in self.partitions if not r.done]
        state = "complete" if self.complete else f"incomplete (partitions {missing} short)"
        short = [r.partition for r in self.partitions if r.ends_below_acked]
        if short:
            state += f"; partitions {short} end below their highest acknowledged offset"
        held = [f"{r.partition} at {r.stable_offset} of {r.high_watermark}" for r in self.partitions
                if r.stable_offset is not None]
        if held:
            state += f"; held back by an open transaction (last stable offset of log end): {', '.join(held)}"
        return f"final reads {state}: {self.records} records in {self.seconds:.1f} s"


WATERMARK_REFRESH_S = 1.0
STABLE_END_S = 5.0  # a log end that stays put this long, all read, is the end


def final_reads(clients: ClientContext, deadline_s: float) -> FinalReadReport:
    """Read every partition from the beginning until each reaches its targets
    (see module docstring) or `deadline_s` seconds have passed."""
    cfg = clients.config
    started = time.monotonic()
    end = started + deadline_s
    acked = clients.stats.acked_offsets()
    partitions = sorted(set(range(cfg.partitions)) | set(acked))
    high: dict[int, int] = {}
    reached = {p: 0 for p in partitions}
    done: set[int] = set()
    short: set[int] = set()  # done at a log end below the acked offset
    end_since: dict[int, tuple[int, float]] = {}  # p -> (high watermark, when it was first seen)
    processes: list[int] = []
    records = 0
    batch = max(cfg.poll_batch, 2000)

    ends: dict[int, int] = {}  # partition -> the end its final read reached

    def new_reader() -> Reader:
        pid = clients.new_pid()
        processes.append(pid)
        clients.record(pid, "invoke", FINAL_READS, partitions=partitions)
        # Start where the previous reader got to: what it read stays read.
        start = {p: reached[p] for p in partitions if reached[p] > 0}
        return Reader(clients, pid, subscribe=False, partitions=partitions, start=start,
                      group_id=f"{cfg.group_id}-final", eof=True)

    def target(p: int) -> int | None:
        if p not in high:
            return None
        return max(high[p], acked.get(p, -1) + 1)

    reader = new_reader()
    # The log's end, as a read_uncommitted client sees it: a read_committed
    # one (the readers) is told the last stable offset instead, which an open
    # transaction holds back, and would take it for the end of the log.
    log_end = clients.make_consumer(reader.pid, f"{cfg.group_id}-final", False, lambda err: None,
                                    {"isolation.level": "read_uncommitted"})
    next_refresh = 0.0
    stable: dict[int, int] = {}  # partition -> its last stable offset, asked where reads fell short
    try:
        while len(done) < len(partitions) and time.monotonic() < end:
            if time.monotonic() >= next_refresh:
                _refresh_watermarks(log_end, cfg.topic, [p for p in partitions if p not in done], high, end)
                next_refresh = time.monotonic() + WATERMARK_REFRESH_S
                for p, h in high.items():
                    if end_since.get(p, (None,))[0] != h:
                        end_since[p] = (h, time.monotonic())
            eofs = reader.poll(batch, min(cfg.poll_timeout_s, max(0.01, end - time.monotonic())))
            for p, o in list(reader.next_offset.items()) + eofs:
                if o > reached.get(p, 0):
                    reached[p] = o
            for p in partitions:
                if p in done:
                    continue
                t = target(p)
                if t is not None and reached[p] >= t:
                    done.add(p)
                elif (p in end_since and reached[p] >= high[p]
                      and time.monotonic() - end_since[p][1] >= STABLE_END_S):
                    done.add(p)
                    short.add(p)
                if p in done:
                    # Every offset below `reached` was read past: that is where this log ends.
                    ends[p] = reached[p]
            if reader.crash_reason is not None and len(done) < len(partitions):
                records += reader.records_read
                reader.close(min(CLOSE_BOUND_S, max(0.0, end - time.monotonic())))
                _complete(clients, reader.pid, ends)
                clients.record_crash(reader.pid)
                time.sleep(min(REPLACE_BACKOFF_S, max(0.0, end - time.monotonic())))
                reader = new_reader()
        # Where reads stopped short of the log's end: was an open transaction holding them back?
        unfinished = [p for p in partitions if p not in done and p in high]
        if unfinished:
            _refresh_watermarks(reader.consumer, cfg.topic, unfinished, stable, time.monotonic() + 2.0)
    finally:
        records += reader.records_read
        reader.close(min(CLOSE_BOUND_S, max(1.0, end - time.monotonic())))
        _complete(clients, reader.pid, ends)
        close_quietly(log_end)
    return FinalReadReport(
        complete=len(done) == len(partitions),
        seconds=time.monotonic() - started,
        records=records,
        processes=processes,
        partitions=[PartitionReach(p, acked.get(p), high.get(p), reached[p], p in done, p in short,
                                   stable[p] if p in stable and stable[p] < high[p] else None)
                    for p in partitions],
    )


def _complete(clients: ClientContext, pid: int, ends: dict[int, int]) -> None:
    """The ok completion of `pid`'s final-reads: what is known to be read to its end."""
    clients.record(pid, "ok", FINAL_READS, ends=[{"partition": p, "offset": o} for p, o in sorted(ends.items())])


def close_quietly(consumer) -> None:
    """Close a consumer; a client already broken or closed is only logged."""
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as e:
        log.debug("closing a consumer: %s", e)


def _refresh_watermarks(consumer, topic: str, partitions: list[int], high: dict[int, int], end: float) -> None:
    """`high[p]`: partition p's high watermark as `consumer` is told it (its
    isolation's: a read_committed client is told the last stable offset)."""
    for p in partitions:
        timeout = min(2.0, end - time.monotonic())
        if timeout <= 0:
            return
        try:
            _, hw = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
        except KafkaException as e:
            log.debug("final reads: no high watermark for partition %d yet: %s", p, e)
            continue
        if hw >= 0:
            high[p] = hw
