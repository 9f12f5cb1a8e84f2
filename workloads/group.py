"""Consumer groups: members that handle what they are delivered, commit as
their group says, and the groups' committed offsets read at the end.

A group (workloads.config.GroupConfig) has members in subscribe mode. Each
record a member's poll delivered is then handled in a recorded `process`
step of its own, taking the group's `process_s` (the application's
handling, so that a crash can land between delivery and handling), and the
member commits per the group's mode:

- `after-processing`: the handled positions, after the step, at most every
  `commit_interval_s` (0: after each step): at-least-once, a record handled
  again after a crash is a `redelivery`;
- `before-processing`: the delivered positions, before the step, at most
  every `commit_interval_s`: at-most-once, a crash during the step skips
  the records it held (`consumer-loss`);
- `auto`: librdkafka's `enable.auto.commit`, which commits what it has
  delivered every `commit_interval_s`, whatever was handled: the seed
  notes' loss when a member dies mid-step. Its commits are recorded from
  the commit callback, as an invoke and its completion once the result is
  known (docs/history.md); the library serves that callback at the
  member's next poll, so a member killed while handling a poll made
  commits no event shows (the next member's `committed` read shows them).

Every `assign` and `commit` of a member carries its group (and the
generation where the client says it); each partition a rebalance gives a
member is followed by a `committed` read of where the group stands on it.
`final_committed` reads every group's committed offsets after every member
has stopped (`committed` with `final`), for `lost-commit` and
`consumer-loss`.
"""

from __future__ import annotations

import logging
import struct
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from core.history.format import COMMITTED
from workloads.client_errors import INFO
from workloads.clients import ClientContext
from workloads.config import GroupConfig
from workloads.consumer import CLOSE_BOUND_S, ConsumerSlot, Reader, exception_name

log = logging.getLogger(__name__)

COMMITTED_TIMEOUT_S = 5.0  # a committed-offsets read that takes longer is recorded as info
NO_OFFSET = -1  # the contract's "the group has no committed offset here"
_METADATA_MAGIC = b"CGMDv2:"  # librdkafka's serialised group metadata: the generation follows


class GroupReader(Reader):
    """One member instance of a consumer group (see module docstring)."""

    def __init__(self, clients: ClientContext, pid: int, group: GroupConfig):
        self.group = group
        manual = group.commit != "auto"
        super().__init__(clients, pid, subscribe=True, group_id=group.name,
                         commit_interval_s=group.commit_interval_s if manual else 0.0)

    def consumer_extra(self) -> dict:
        extra = {"group.protocol": self.group.protocol}
        if self.group.commit != "auto":
            return extra
        # The library stores each record's position as it delivers it and
        # commits what is stored on its own timer: nothing waits for handling.
        return {**extra, "enable.auto.commit": True, "enable.auto.offset.store": True,
                "auto.commit.interval.ms": max(1, round(self.group.commit_interval_s * 1000)),
                "on_commit": self._on_commit}

    def group_fields(self) -> dict:
        fields: dict = {"group": self.group.name}
        generation = self._generation()
        if generation is not None:
            fields["generation"] = generation
        return fields

    def _generation(self) -> int | None:
        """The member's generation, from the group metadata librdkafka serialises
        (its only way out to Python); None where the client does not say."""
        try:
            data = self.consumer.consumer_group_metadata()
        except (KafkaException, RuntimeError, AttributeError):
            return None
        if not isinstance(data, bytes) or not data.startswith(_METADATA_MAGIC) or len(data) < len(_METADATA_MAGIC) + 4:
            return None
        (generation,) = struct.unpack_from("=i", data, len(_METADATA_MAGIC))
        return generation if generation >= 0 else None

    # -- where a new partition starts

    def assigned(self, partitions: list[int]) -> None:
        """A `committed` read of the group's offsets of the partitions a rebalance gave this member."""
        read_committed(self.clients, self.pid, self.consumer, self.group.name, partitions, final=False)

    # -- handling

    def handle(self) -> None:
        """The last poll's records: committed before, handled one by one, and
        committed after, as the group's mode says."""
        records = self.last_records
        if not records or self.crash_reason is not None:
            return
        mode = self.group.commit
        if mode == "before-processing":
            self._commit_due()
        # One step per record, in delivery order: a crash meanwhile leaves the
        # step it cut open (info) and the records after it delivered, never handled.
        for r in records:
            handled = [{"partition": r["partition"], "offset": r["offset"], "value": r["value"]}]
            self._record(self.pid, "invoke", "process", records=handled)
            self._stats.op("process", "invoke")
            if self.group.process_s > 0:
                time.sleep(self.group.process_s)
            self._record(self.pid, "ok", "process", records=handled)
            self._stats.op("process", "ok")
        if mode == "after-processing":
            self._commit_due()

    def _commit_due(self) -> None:
        if self.group.commit_interval_s > 0:
            self.maybe_commit(time.monotonic())
        else:
            self.commit_positions()

    def serve(self, stopping) -> None:
        """Poll and handle until `stopping` is set or the instance became unusable."""
        cfg = self.clients.config
        while not stopping.is_set() and self.crash_reason is None:
            self.poll(cfg.poll_batch, cfg.poll_timeout_s)
            self.handle()

    def commit_before_leaving(self) -> None:
        """On a clean stop: commit the positions not yet committed, as a member
        leaving its group does (auto: the library commits on close)."""
        if self.group.commit != "auto" and self.crash_reason is None:
            self.commit_positions()

    def _on_commit(self, err, partitions) -> None:
        """librdkafka's commit callback (auto mode): the commit as an invoke and its completion."""
        offsets = [{"partition": tp.partition, "offset": tp.offset} for tp in partitions or []
                   if tp.topic == self.topic and tp.offset >= 0]
        if not offsets and err is None:
            return  # nothing was stored to commit
        fields = self.group_fields()
        self._record(self.pid, "invoke", "commit", offsets=offsets, **fields)
        failed = [tp.error for tp in partitions or [] if tp.error is not None]
        if err is None and not failed:
            self._record(self.pid, "ok", "commit", offsets=offsets, **fields)
            self._stats.op("commit", "ok")
            return
        name = (err or failed[0]).name()
        # The library retries its own commits: a rejection does not prove no attempt landed.
        self._record(self.pid, INFO, "commit", offsets=offsets, error=name, **fields)
        self._stats.completion("commit", INFO, name)


def read_committed(clients: ClientContext, pid: int, consumer: Consumer, group: str, partitions: list[int],
                   final: bool) -> None:
    """One recorded `committed` read of `group`'s offsets of `partitions` through `consumer`."""
    topic = clients.config.topic
    extra = {"final": True} if final else {}
    clients.record(pid, "invoke", COMMITTED, group=group, partitions=sorted(partitions), **extra)
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in sorted(partitions)],
                                   timeout=COMMITTED_TIMEOUT_S)
        error = next((tp.error.name() for tp in found if tp.error is not None), None)
    except (KafkaException, RuntimeError) as e:
        error = exception_name(e)
    if error is not None:
        clients.record(pid, INFO, COMMITTED, error=error)
        clients.stats.completion(COMMITTED, INFO, error)
        return
    offsets = [{"partition": tp.partition, "offset": tp.offset if tp.offset >= 0 else NO_OFFSET}
               for tp in sorted(found, key=lambda tp: tp.partition)]
    clients.record(pid, "ok", COMMITTED, offsets=offsets)
    clients.stats.op(COMMITTED, "ok")


def final_committed(clients: ClientContext) -> None:
    """Each group's committed offsets of every partition, read once every
    member has stopped, each by a client of its own that does not join the group."""
    partitions = list(range(clients.config.partitions))
    for group in clients.config.committing_groups():
        pid = clients.new_pid()
        try:
            consumer = clients.make_consumer(pid, group, False, lambda err: None)
        except Exception as e:  # the settings were accepted for the members: not expected
            clients.record(pid, "invoke", COMMITTED, group=group, partitions=partitions, final=True)
            clients.record(pid, INFO, COMMITTED, error=type(e).__name__)
            continue
        try:
            read_committed(clients, pid, consumer, group, partitions, final=True)
        finally:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as e:
                log.debug("final committed read of %s: close: %s", group, e)


class GroupSlot(ConsumerSlot):
    """One member of a group: a thread, successive member instances (a crashed
    one is replaced by a new process that joins the group again)."""

    def __init__(self, clients: ClientContext, slot: int, group: GroupConfig):
        self.group = group
        super().__init__(clients, slot, new_member(clients, group), None)
        self.name = f"wl-{group.name}-{slot}"

    def _run(self) -> None:
        clients = self.clients
        reader = self.reader
        while not clients.stopping.is_set():
            reader.serve(clients.stopping)
            if reader.crash_reason is not None and not clients.stopping.is_set():
                reader = self.reader = self._replace(reader)
        reader.commit_before_leaving()
        reader.close(min(CLOSE_BOUND_S, max(0.0, clients.stop_deadline - time.monotonic())))

    def _successor(self, old: Reader) -> GroupReader:
        """A new member of the group: the group hands it its partitions."""
        return new_member(self.clients, self.group)


def new_member(clients: ClientContext, group: GroupConfig) -> GroupReader:
    """A member instance of `group` with a new process id."""
    return GroupReader(clients, clients.new_pid(), group)

