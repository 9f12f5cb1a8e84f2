"""One partition replica on one broker: its log, its role (leader or
follower) and the replication bookkeeping of the seeds' design.

As leader it tracks every follower's LEO, keeps the ISR (a follower leaves
it after replica.lag.time.max.ms without catching up, rejoins once it
reaches the HW), computes HW = min LEO over the ISR and wakes the acks=all
writers and long-polling fetchers that wait on it.  As follower it only
appends what its fetcher brings and adopts the leader's HW.

It also keeps the leader-epoch cache (epoch -> first offset, as Kafka's
LeaderEpochFileCache) and the idempotent-producer state (last five batches
per producer id).  The epoch cache is persisted beside the log in
`leader-epoch-checkpoint` whenever it changes, and on recovery rebuilt
from that file and the batch headers (the file keeps epochs that have no
records yet: a leader's epoch starts when it is elected, not at its first
write).  A follower finds where its log diverges from its leader's with
`divergence` (KIP-101 / KIP-279), one OffsetForLeaderEpoch answer at a
time; a leader that learns of a newer epoch is `fenced` (KIP-320): it
stops acknowledging and stops advancing its HW until ZooKeeper's state
tells it its new role.

Transactions (broker/txn_index.py) are noted from the same headers: the
open transactions, the aborted index and the last stable offset (`lso`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field

from broker import protocol as P
from broker.records import BatchHeader, crc_ok, patch_offset_and_epoch
from broker.storage import Log, read_epoch_checkpoint, write_epoch_checkpoint
from broker.txn_index import PartitionTxns
from broker.zk import PartitionState

log = logging.getLogger("broker.partition")

PRODUCER_BATCHES_KEPT = 5


@dataclass
class FollowerProgress:
    leo: int = -1  # unknown until the follower fetches
    last_caught_up: float = 0.0
    last_fetch_time: float = 0.0
    last_fetch_leader_leo: int = 0


@dataclass
class ProducerEntry:
    epoch: int
    # (first sequence, last sequence, base offset, last offset) of the newest batches
    batches: collections.deque = field(default_factory=lambda: collections.deque(maxlen=PRODUCER_BATCHES_KEPT))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class ProduceError(Exception):
    def __init__(self, code: int, message: str = ""):
        super().__init__(message or str(code))
        self.code = code


class Partition:
    def __init__(self, topic: str, index: int, log_: Log, broker_id: int):
        self.topic = topic
        self.index = index
        self.log = log_
        self.broker_id = broker_id
        self.replicas: list[int] = []
        self.hw = 0
        self.role = "none"  # "leader", "follower" or "none"
        self.leader_id = -1
        self.leader_epoch = -1
        self.state: PartitionState | None = None
        self.isr: list[int] = []
        self.isr_inflight: list[int] | None = None  # an ISR change being written to ZooKeeper
        self.followers: dict[int, FollowerProgress] = {}
        self.ack_waiters: list[tuple[int, asyncio.Future]] = []
        self.fetch_waiters: set[asyncio.Future] = set()
        self.epochs: list[tuple[int, int]] = []  # (leader epoch, start offset), ascending
        self.producers: dict[int, ProducerEntry] = {}
        self.txns = PartitionTxns()
        # The last produce queued behind a transaction's verification (broker/api_log.py), or None.
        self.append_gate: asyncio.Future | None = None
        # A newer leader epoch this leader has heard of (from a request), or -1: while set it
        # neither acknowledges nor advances its HW, since another replica may lead already.
        self.fenced_by = -1
        self.corrupt_at = -1  # the base offset of the last fetched batch refused for its CRC (logged once)
        self._epochs_dirty = False  # the cache changed since leader-epoch-checkpoint was written

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def leo(self) -> int:
        return self.log.end_offset

    @property
    def lso(self) -> int:
        """The last stable offset: read_committed readers read below it."""
        return self.txns.lso(self.hw)

    # -- derived state from batch headers ----------------------------------------

    def note_batch(self, h: BatchHeader) -> None:
        """Updates the epoch cache and the producer state for one stored batch."""
        if h.leader_epoch >= 0 and (not self.epochs or h.leader_epoch > self.epochs[-1][0]):
            self._assign_epoch(h.leader_epoch, h.base_offset)
        self._note_producer(h)

    def _note_producer(self, h: BatchHeader) -> None:
        if h.producer_id >= 0:
            entry = self.producers.get(h.producer_id)
            if entry is None or h.producer_epoch > entry.epoch or (h.producer_epoch != entry.epoch
                                                                    and not h.is_control):
                # A marker of a newer epoch (a fenced or timed-out transaction's abort)
                # fences the older epoch here too; it carries no sequence numbers.
                entry = ProducerEntry(h.producer_epoch)
                self.producers[h.producer_id] = entry
            if not h.is_control:
                entry.batches.append((h.base_sequence, h.last_sequence, h.base_offset, h.last_offset))
        self.txns.note(h)

    def _assign_epoch(self, epoch: int, start: int) -> None:
        # As Kafka's cache: a new epoch replaces any entry starting at or after its start
        # (an epoch that ended without records).
        while self.epochs and (self.epochs[-1][1] >= start or self.epochs[-1][0] >= epoch):
            self.epochs.pop()
        self.epochs.append((epoch, start))
        self._epochs_dirty = True

    def save_epochs(self) -> None:
        """Writes the epoch cache to leader-epoch-checkpoint if it changed since the last write."""
        if not self._epochs_dirty:
            return
        try:
            write_epoch_checkpoint(self.log.dir, self.epochs)
            self._epochs_dirty = False
        except OSError as e:
            log.warning("%s: could not write the leader-epoch checkpoint: %s", self.name, e)

    def recover_epochs(self) -> None:
        """After the log is opened (note_batch saw every header): merge in the checkpointed epochs.

        Headers prove the epochs that have records; the checkpoint adds epochs
        that started without records.  Entries past the log end are dropped
        (recovery may have cut a torn tail), and a later epoch starting no
        later than an earlier one replaces it, as in `_assign_epoch`.
        """
        from_headers = dict(self.epochs)
        merged = dict(read_epoch_checkpoint(self.log.dir))
        merged.update(from_headers)
        before = list(self.epochs)
        self.epochs = []
        for epoch, start in sorted(merged.items()):
            if start <= self.leo:
                self._assign_epoch(epoch, start)
        self._epochs_dirty = True
        self.save_epochs()
        if self.epochs != before:
            log.info("%s: leader-epoch cache %s (batch headers alone: %s)", self.name, self.epochs, before)

    def rebuild_derived_state(self) -> None:
        self.epochs = []
        self.producers = {}
        self.txns.clear()
        for h in self.log.headers(0):
            self.note_batch(h)

    def note_truncation(self, offset: int, leader: int, epoch: int, reason: str, detail: str = "",
                        level: int = logging.INFO) -> None:
        """Logs a truncation about to happen in the one form the harness reads
        (infra/own_broker.py parses it into states.jsonl): the partition, the
        offset cut to, the log end before, the leader and leader epoch under
        which it happens, a reason of a few fixed words, then the details."""
        log.log(level, "TRUNCATING %s to %d (log end %d; leader %d, epoch %d; reason: %s%s)", self.name, offset,
                self.leo, leader, epoch, reason, f"; {detail}" if detail else "")

    def truncate_to(self, offset: int) -> int:
        before = self.leo
        new_leo = self.log.truncate_to(offset)
        if new_leo < before:
            # The producer state comes from the batches that remain; the epoch cache keeps the
            # epochs that start below the new end (Kafka's truncateFromEnd), empty ones included.
            self.producers = {}
            self.txns.clear()
            for h in self.log.headers(0):
                self._note_producer(h)
            kept = [(e, s) for e, s in self.epochs if s < new_leo]
            if kept != self.epochs:
                self.epochs = kept
                self._epochs_dirty = True
            self.save_epochs()
            log.info("TRUNCATE %s: log end %d -> %d", self.name, before, new_leo)
        self.hw = min(self.hw, new_leo)
        return new_leo

    # -- epochs ------------------------------------------------------------------

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, the offset where it ends) as OffsetForLeaderEpoch answers."""
        if not self.epochs or epoch < self.epochs[0][0]:
            return -1, -1
        for i, (e, _start) in enumerate(self.epochs):
            if e > epoch:
                return self.epochs[i - 1][0], self.epochs[i][1]
        return self.epochs[-1][0], self.leo

    def divergence(self, asked: int, leader_epoch: int, leader_end: int) -> tuple[int, int | None]:
        """One round of the follower's truncation (KIP-101, refined by KIP-279).

        The follower asked its leader where epoch `asked` ends; the leader
        answered with the largest epoch it has at or below it (`leader_epoch`)
        and where that ends on the leader (`leader_end`; both -1 if it has
        none).  Returns (offset to truncate to, epoch to ask about next),
        the epoch None when this answer settles it.
        """
        if leader_epoch < 0 or leader_end < 0:
            # The leader has no epoch up to `asked`: none of our records from
            # such epochs (everything below where earlier rounds cut) is on it.
            return self.log.start_offset, None
        own_epoch, own_end = self.end_offset_for_epoch(leader_epoch)
        if own_epoch == leader_epoch:
            return min(leader_end, own_end, self.leo), None
        if own_epoch < 0:
            # Every epoch we have is newer than the leader's, and the leader has none of them.
            return self.log.start_offset, None
        # We never had the leader's epoch: our records from own_end on belong to
        # epochs the leader does not have; below it, ask about our own epoch.
        return min(own_end, self.leo), own_epoch

    def epoch_at(self, offset: int) -> int:
        found = -1
        for e, start in self.epochs:
            if start <= offset:
                found = e
            else:
                break
        return found

    # -- idempotence -------------------------------------------------------------

    def check_sequence(self, h: BatchHeader) -> int | None:
        """None to append; or the base offset of the same batch already stored. Raises ProduceError."""
        if h.producer_id < 0:
            return None
        entry = self.producers.get(h.producer_id)
        if entry is None:
            if h.base_sequence != 0:
                raise ProduceError(P.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                   f"unknown producer {h.producer_id} starting at sequence {h.base_sequence}")
            return None
        if h.producer_epoch < entry.epoch:
            raise ProduceError(P.INVALID_PRODUCER_EPOCH, f"producer epoch {h.producer_epoch} < {entry.epoch}")
        if h.producer_epoch > entry.epoch:
            if h.base_sequence != 0:
                raise ProduceError(P.OUT_OF_ORDER_SEQUENCE_NUMBER, "new producer epoch must start at sequence 0")
            return None
        for first, last, base, _last_off in entry.batches:
            if first == h.base_sequence and last == h.last_sequence:
                return base
        expected = (entry.last_sequence + 1) & 0x7FFFFFFF
        if h.base_sequence != expected:
            raise ProduceError(P.OUT_OF_ORDER_SEQUENCE_NUMBER,
                               f"sequence {h.base_sequence}, expected {expected}")
        return None

    # -- leader side -------------------------------------------------------------

    def maximal_isr(self) -> list[int]:
        if self.isr_inflight is None:
            return self.isr
        return sorted(set(self.isr) | set(self.isr_inflight), key=lambda r: (r not in self.isr, r))

    def replica_leo(self, r: int) -> int:
        if r == self.broker_id:
            return self.leo
        fp = self.followers.get(r)
        return fp.leo if fp else -1

    def maybe_advance_hw(self) -> bool:
        if self.role != "leader" or self.fenced_by >= 0:
            return False
        leos = [self.replica_leo(r) for r in self.maximal_isr()]
        if not leos or min(leos) < 0:
            return False
        new_hw = min(leos)
        if new_hw <= self.hw:
            return False
        self.hw = new_hw
        self._release_acks()
        self.wake_fetchers()
        return True

    def _release_acks(self) -> None:
        waiters = self.ack_waiters
        i = 0
        while i < len(waiters) and waiters[i][0] <= self.hw:
            fut = waiters[i][1]
            if not fut.done():
                fut.set_result(P.NONE)
            i += 1
        if i:
            del waiters[:i]

    def wait_for_hw(self, offset: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if self.hw >= offset:
            fut.set_result(P.NONE)
        else:
            self.ack_waiters.append((offset, fut))
        return fut

    def fence(self, newer_epoch: int, how: str) -> bool:
        """This leader heard of a newer leader epoch: another replica may lead already.

        It stops acknowledging and stops advancing its HW (KIP-320's fencing);
        waiting acks=all writes stay waiting (they are answered when ZooKeeper's
        state makes this replica leader again, a follower, or at their timeout).
        True if it was not fenced before (the caller then asks ZooKeeper).
        """
        if self.role != "leader" or newer_epoch <= self.leader_epoch or newer_epoch <= self.fenced_by:
            return False
        first = self.fenced_by < 0
        self.fenced_by = newer_epoch
        log.warning("FENCED %s: leader %d at epoch %d learned of epoch %d (%s); stops acknowledging and "
                    "advancing its hw %d until ZooKeeper says its role", self.name, self.broker_id,
                    self.leader_epoch, newer_epoch, how, self.hw)
        self.wake_fetchers()
        return first

    def unfence(self, why: str) -> None:
        if self.fenced_by < 0:
            return
        log.warning("UNFENCED %s: epoch %d was not real (%s); leader %d acknowledges again",
                    self.name, self.fenced_by, why, self.broker_id)
        self.fenced_by = -1
        self.maybe_advance_hw()

    def fail_waiters(self, code: int) -> None:
        for _, fut in self.ack_waiters:
            if not fut.done():
                fut.set_result(code)
        self.ack_waiters = []
        self.wake_fetchers()

    def wake_fetchers(self) -> None:
        if self.fetch_waiters:
            for fut in self.fetch_waiters:
                if not fut.done():
                    fut.set_result(None)
            self.fetch_waiters = set()

    def append_as_leader(self, data: bytes, h: BatchHeader, check_sequences: bool = True) -> tuple[int, int, bool]:
        """Appends a validated producer batch; (base offset, last offset, duplicate?)."""
        if check_sequences:
            dup_base = self.check_sequence(h)
            if dup_base is not None:
                return dup_base, dup_base + h.last_offset_delta, True
        base = self.leo
        batch = patch_offset_and_epoch(data, base, self.leader_epoch)
        h.base_offset = base
        h.leader_epoch = self.leader_epoch
        self.log.append(batch, h)
        self.note_batch(h)
        self.wake_fetchers()
        self.maybe_advance_hw()
        return base, h.last_offset, False

    def record_follower_fetch(self, replica: int, fetch_offset: int, now: float) -> None:
        fp = self.followers.setdefault(replica, FollowerProgress(last_caught_up=now))
        leader_leo = self.leo
        fp.leo = fetch_offset
        if fetch_offset >= leader_leo:
            fp.last_caught_up = now
        elif fetch_offset >= fp.last_fetch_leader_leo:
            fp.last_caught_up = max(fp.last_caught_up, fp.last_fetch_time)
        fp.last_fetch_leader_leo = leader_leo
        fp.last_fetch_time = now

    def isr_change_wanted(self, now: float, lag_max_s: float, live: dict[int, int],
                          join_early: bool = False) -> list[int] | None:
        """The ISR the leader should write to ZooKeeper now, or None if it is right.
        A follower joins once it has caught up: to the HW, into this leader's
        epoch, and recently (`join_early`, the planted bug early-isr-join: as
        soon as it fetches at all)."""
        if self.role != "leader" or self.isr_inflight is not None:
            return None
        new = [r for r in self.isr if r == self.broker_id
               or (now - self.followers.setdefault(r, FollowerProgress(last_caught_up=now)).last_caught_up) <= lag_max_s]
        epoch_start = self.epochs[-1][1] if self.epochs and self.epochs[-1][0] == self.leader_epoch else 0
        for r in self.replicas:
            if r in new or r == self.broker_id or r not in live:
                continue
            fp = self.followers.get(r)
            if fp and fp.leo >= 0 and (join_early and now - fp.last_fetch_time <= lag_max_s
                                       or fp.leo >= self.hw and fp.leo >= epoch_start
                                       and now - fp.last_caught_up <= lag_max_s):
                new.append(r)
        if new == self.isr:
            return None
        return new

    # -- role changes --------------------------------------------------------------

    def become_leader(self, state: PartitionState) -> None:
        now = time.monotonic()
        was = (self.role, self.leader_id, self.leader_epoch)
        self.role = "leader"
        self.leader_id = self.broker_id
        self.leader_epoch = state.leader_epoch
        self.state = state
        self.isr = list(state.isr)
        self.isr_inflight = None
        self.followers = {r: FollowerProgress(last_caught_up=now) for r in self.replicas if r != self.broker_id}
        self.fenced_by = -1
        if not self.epochs or self.epochs[-1][0] < state.leader_epoch:
            # The epoch starts now, at the log end, records or not (Kafka's makeLeader).
            self._assign_epoch(state.leader_epoch, self.leo)
            self.save_epochs()
        self.hw = min(self.hw, self.leo)
        log.info("LEADER %s: this broker %d is now leader, epoch %d, isr %s, log end %d, hw %d (was %s)",
                 self.name, self.broker_id, state.leader_epoch, state.isr, self.leo, self.hw, was)
        self.maybe_advance_hw()
        self.wake_fetchers()

    def become_follower(self, state: PartitionState, truncate: bool, note: str = "") -> None:
        was = (self.role, self.leader_id, self.leader_epoch)
        if self.role == "leader":
            self.fail_waiters(P.NOT_LEADER_OR_FOLLOWER)
        self.role = "follower"
        self.fenced_by = -1
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.state = state
        self.isr = list(state.isr)
        self.isr_inflight = None
        self.followers = {}
        if truncate:
            self.truncate_to(self.hw)
        log.info("FOLLOWER %s: broker %d follows leader %d, epoch %d, isr %s, log end %d, hw %d (was %s)%s",
                 self.name, self.broker_id, state.leader, state.leader_epoch, state.isr, self.leo, self.hw, was,
                 note)
        self.wake_fetchers()

    def become_offline(self, state: PartitionState | None, reason: str) -> None:
        if self.role == "leader":
            self.fail_waiters(P.NOT_LEADER_OR_FOLLOWER)
        if self.role != "none":
            log.info("OFFLINE %s: broker %d neither leads nor follows (%s)", self.name, self.broker_id, reason)
        self.role = "none"
        self.fenced_by = -1
        self.state = state
        self.leader_id = state.leader if state else -1
        self.leader_epoch = state.leader_epoch if state else -1
        self.isr = list(state.isr) if state else []
        self.isr_inflight = None
        self.wake_fetchers()

    # -- follower side ---------------------------------------------------------------

    def append_as_follower(self, batches, leader_hw: int) -> int:
        """Appends fetched batches that continue the log; returns bytes appended."""
        n = 0
        for h, data in batches:
            if h.next_offset <= self.leo:
                continue
            if not crc_ok(data, 0, h.length):
                # As Kafka's follower: a corrupt batch is never stored. Nothing after it is
                # appended; the next fetch asks again from the log end (a flip on the leader's
                # read path may be gone by then; one on its disk stays, and so does this error).
                if self.corrupt_at != h.base_offset:
                    log.error("%s: fetched batch at %d from leader %s fails its CRC: not appended", self.name,
                              h.base_offset, self.leader_id)
                    self.corrupt_at = h.base_offset
                break
            if h.base_offset != self.leo:
                if h.base_offset < self.leo:
                    self.note_truncation(h.base_offset, self.leader_id, self.leader_epoch,
                                         "fetched batch does not continue the log",
                                         f"batch at {h.base_offset}", level=logging.WARNING)
                    self.truncate_to(h.base_offset)
                else:
                    log.warning("%s: fetched batch at %d does not continue log end %d", self.name,
                                h.base_offset, self.leo)
                    break
            self.log.append(data, h)
            self.note_batch(h)
            n += h.length
        self.save_epochs()
        self.hw = max(self.hw, min(leader_hw, self.leo))
        return n
