"""The transaction coordinator (Kafka's TransactionCoordinator, KIP-98): a
transactional id's producer id and epoch, its transaction's partitions and
consumer groups, and the two-phase end of each transaction.

A transactional id is coordinated by one broker, chosen from the sorted
live brokers by the same stable hash as consumer groups; the others answer
NOT_COORDINATOR.  Its state is kept in ZooKeeper, one znode per id
(`/transactions/ID`), written only with versioned writes, so a coordinator
that lost the id (a stale cache, a deposed broker) cannot overwrite what
the new one wrote.  States, as Kafka's:

    Empty -> Ongoing -> PrepareCommit | PrepareAbort -> CompleteCommit | CompleteAbort -> Ongoing ...

EndTxn is answered once Prepare* is durable; the markers are written
afterwards (broker/txn_markers.py), pending transactional offsets are made
visible or dropped (broker/groups.py), and then Complete* is written.
Until then the producer's next AddPartitionsToTxn, EndTxn or
InitProducerId gets CONCURRENT_TRANSACTIONS and retries.  A coordinator
that finds a transaction in Prepare* (it took the id over) finishes it;
each coordinator aborts its Ongoing transactions older than their timeout,
bumping the epoch, which fences the producer that let it expire.

InitProducerId on an id with a transaction Ongoing fences it the same way:
the epoch is bumped, the transaction aborted with markers of the new epoch
(which the partitions then hold against the old one), and the new
producer gets the epoch after that once the abort is complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field, replace

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker import protocol as P
from broker import zk as Z
from broker.config import BrokerConfig
from broker.groups import coordinator_for, finish_txn_offsets
from broker.metadata import Metadata, allocate_producer_id
from broker.txn_markers import MarkerWriter

log = logging.getLogger("broker.txn")

MAX_EPOCH = 32767
ONGOING, PREPARE_COMMIT, PREPARE_ABORT = "Ongoing", "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT, EMPTY = "CompleteCommit", "CompleteAbort", "Empty"
PREPARE = (PREPARE_COMMIT, PREPARE_ABORT)
COMPLETE = (COMPLETE_COMMIT, COMPLETE_ABORT)


@dataclass
class TxnState:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    last_epoch: int = -1  # the epoch before the last bump (KIP-360: its producer may ask for a new one)
    partitions: list = field(default_factory=list)  # [(topic, p)] in the order they were added
    groups: list = field(default_factory=list)  # consumer groups whose offsets are in the transaction
    started_ms: int = 0  # wall clock when the transaction became Ongoing (coordinators share it)
    writer: tuple = (-1, -1)  # (broker id, incarnation) that wrote this state
    version: int = -1  # the znode version it was read or written at

    def to_json(self) -> bytes:
        return json.dumps({"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                           "producer_epoch": self.producer_epoch, "last_epoch": self.last_epoch,
                           "timeout_ms": self.timeout_ms, "state": self.state,
                           "partitions": [list(tp) for tp in self.partitions], "groups": self.groups,
                           "started_ms": self.started_ms, "writer": list(self.writer)}).encode()

    @classmethod
    def from_json(cls, data: bytes, version: int) -> "TxnState":
        d = json.loads(data)
        return cls(d["transactional_id"], int(d["producer_id"]), int(d["producer_epoch"]), int(d["timeout_ms"]),
                   d["state"], int(d.get("last_epoch", -1)), [(t, int(p)) for t, p in d["partitions"]],
                   list(d["groups"]), int(d["started_ms"]), tuple(d.get("writer", (-1, -1))), version)


def read_txn_state(client, transactional_id: str) -> TxnState | None:
    """A transactional id's state as ZooKeeper holds it (kazoo, in a ZooKeeper thread).

    Synced first: a ZooKeeper follower may lag, and a leader checking a
    transactional batch must see the partition its coordinator just added."""
    path = Z.txn_path(transactional_id)
    try:
        client.sync(path)
        data, stat = client.get(path)
    except NoNodeError:
        return None
    return TxnState.from_json(data, stat.version)


def fenced_error(version: int, first_fenced_version: int) -> int:
    """PRODUCER_FENCED from the version that introduced it (KIP-588); INVALID_PRODUCER_EPOCH before."""
    return P.PRODUCER_FENCED if version >= first_fenced_version else P.INVALID_PRODUCER_EPOCH


class StateLost(Exception):
    """A versioned write lost: another coordinator wrote the id's state meanwhile."""


class TransactionCoordinator:
    def __init__(self, cfg: BrokerConfig, metadata: Metadata):
        self.cfg = cfg
        self.id = cfg.broker_id
        self.metadata = metadata
        self.markers = MarkerWriter(self.id, metadata)
        self.txns: dict[str, TxnState] = {}  # cache of the ids this broker coordinates
        self.taken_over: set[str] = set()  # ids whose current transaction another coordinator began
        self.locks: dict[str, asyncio.Lock] = {}
        self.completing: dict[str, asyncio.Task] = {}
        self.partial_commit = cfg.bug("txn-partial-commit")
        if self.partial_commit:
            log.warning("planted bug txn-partial-commit: a transaction taken over from another coordinator is "
                        "committed on its first partition only")
        self.forget_ongoing = cfg.bug("txn-init-forgets-ongoing")
        if self.forget_ongoing:
            log.warning("planted bug txn-init-forgets-ongoing: InitProducerId leaves an ongoing transaction open")

    # -- ownership ----------------------------------------------------------------------

    def is_coordinator(self, transactional_id: str) -> bool:
        return coordinator_for(transactional_id, list(self.metadata.live)) == self.id

    def forget(self, keep) -> None:
        """Drops the cached state of the ids this broker no longer coordinates (`keep(id)` is False)."""
        for tid in [t for t in self.txns if not keep(t)]:
            self.txns.pop(tid, None)
            self.taken_over.discard(tid)
            log.info("TXN %s: no longer coordinated by broker %d", tid, self.id)

    def _lock(self, tid: str) -> asyncio.Lock:
        return self.locks.setdefault(tid, asyncio.Lock())

    async def _load(self, tid: str) -> TxnState | None:
        st = self.txns.get(tid)
        if st is not None:
            return st
        st = await self.metadata.zk_call(read_txn_state, tid)
        if st is None:
            return None
        self.txns[tid] = st
        if st.writer != self._me() and st.state in (ONGOING,) + PREPARE:
            self.taken_over.add(tid)
            log.info("TXN %s: taken over in state %s (producer %d, epoch %d, partitions %s; written by broker %d)",
                     tid, st.state, st.producer_id, st.producer_epoch, st.partitions, st.writer[0])
        if st.state in PREPARE:
            self._start_completion(tid)
        return st

    async def describe(self, tid: str) -> TxnState | None:
        """A transactional id's state, as DescribeTransactions tells it (None: no such id)."""
        async with self._lock(tid):
            return await self._load(tid)

    def _me(self) -> tuple:
        return (self.id, self.metadata.czxid)

    async def _write(self, new: TxnState) -> TxnState:
        """Writes `new` conditionally on the version it derives from; raises StateLost if that lost."""
        new.writer = self._me()
        path = Z.txn_path(new.transactional_id)
        data = new.to_json()

        def write(client):
            if new.version < 0:
                client.create(path, data, makepath=True)
                return 0
            return client.set(path, data, version=new.version).version
        try:
            new.version = await self.metadata.zk_call(write)
        except (BadVersionError, NodeExistsError, NoNodeError) as e:
            self.txns.pop(new.transactional_id, None)
            raise StateLost(str(e)) from None
        self.txns[new.transactional_id] = new
        log.info("TXN %s: %s (producer %d, epoch %d, partitions %s, groups %s)", new.transactional_id, new.state,
                 new.producer_id, new.producer_epoch, new.partitions, new.groups)
        return new

    # -- InitProducerId -----------------------------------------------------------------

    async def init_producer_id(self, tid: str, timeout_ms: int, producer_id: int, producer_epoch: int,
                               version: int) -> tuple[int, int, int]:
        """(error, producer id, epoch) for a transactional producer's InitProducerId."""
        if not tid:
            return P.INVALID_REQUEST, -1, -1
        if not self.is_coordinator(tid):
            return P.NOT_COORDINATOR, -1, -1
        if not 0 < timeout_ms <= self.cfg.transaction_max_timeout_ms:
            return P.INVALID_TRANSACTION_TIMEOUT, -1, -1
        return await self._serve(tid, "InitProducerId",
                                 lambda: self._init_locked(tid, timeout_ms, producer_id, producer_epoch, version),
                                 (P.CONCURRENT_TRANSACTIONS, -1, -1), (P.COORDINATOR_NOT_AVAILABLE, -1, -1))

    async def _serve(self, tid: str, what: str, fn, lost, unavailable):
        """Runs fn() under the id's lock; a versioned write that lost answers `lost` (the
        producer retries, and the id's state is read afresh), ZooKeeper trouble `unavailable`."""
        async with self._lock(tid):
            try:
                return await fn()
            except StateLost:
                return lost
            except Exception as e:  # ZooKeeper unreachable: the producer retries
                log.warning("TXN %s: %s failed: %s", tid, what, e)
                return unavailable

    async def _init_locked(self, tid, timeout_ms, producer_id, producer_epoch, version):
        st = await self._load(tid)
        if st is None:
            pid = await self.metadata.zk_call(allocate_producer_id)
            st = await self._write(TxnState(tid, pid, 0, timeout_ms))
            return P.NONE, st.producer_id, st.producer_epoch
        if producer_id >= 0:
            # KIP-360: a producer recovering its own id, at its current or its previous epoch.
            if producer_id != st.producer_id:
                return P.INVALID_PRODUCER_ID_MAPPING, -1, -1
            if producer_epoch not in (st.producer_epoch, st.last_epoch):
                return fenced_error(version, 4), -1, -1
        if st.state in PREPARE:
            self._start_completion(tid)
            return P.CONCURRENT_TRANSACTIONS, -1, -1
        if st.state == ONGOING and self.forget_ongoing:
            # The planted bug: the old producer id is dropped with its transaction, which no
            # marker will ever end (and the timeout scan no longer sees it).
            pid = await self.metadata.zk_call(allocate_producer_id)
            log.warning("planted bug txn-init-forgets-ongoing: %s: producer %d's ongoing transaction (epoch %d) "
                        "left open, the new producer gets producer %d", tid, st.producer_id, st.producer_epoch, pid)
            st = await self._write(replace(st, producer_id=pid, producer_epoch=0, last_epoch=-1,
                                           timeout_ms=timeout_ms, state=EMPTY, partitions=[], groups=[]))
            return P.NONE, st.producer_id, st.producer_epoch
        if st.state == ONGOING:
            self._fence_and_abort(tid, st, "a new InitProducerId")
            return P.CONCURRENT_TRANSACTIONS, -1, -1
        pid, epoch = st.producer_id, st.producer_epoch + 1
        if epoch >= MAX_EPOCH:
            pid, epoch = await self.metadata.zk_call(allocate_producer_id), 0
        st = await self._write(replace(st, producer_id=pid, producer_epoch=epoch, last_epoch=st.producer_epoch,
                                       timeout_ms=timeout_ms, state=EMPTY, partitions=[], groups=[]))
        return P.NONE, st.producer_id, st.producer_epoch

    def _fence_and_abort(self, tid: str, st: TxnState, why: str) -> None:
        """Aborts an Ongoing transaction under a bumped epoch (the task writes PrepareAbort first)."""
        async def run():
            async with self._lock(tid):
                cur = self.txns.get(tid)
                if cur is None or cur.state != ONGOING or cur.producer_epoch != st.producer_epoch:
                    return
                log.info("TXN %s: aborting the ongoing transaction of epoch %d (%s)", tid, cur.producer_epoch, why)
                try:
                    await self._write(replace(cur, state=PREPARE_ABORT, producer_epoch=cur.producer_epoch + 1,
                                              last_epoch=cur.producer_epoch))
                except StateLost:
                    return
                except Exception as e:
                    log.warning("TXN %s: could not write PrepareAbort: %s", tid, e)
                    return
            self._start_completion(tid)
        asyncio.get_running_loop().create_task(run())

    # -- AddPartitionsToTxn, AddOffsetsToTxn ------------------------------------------------

    async def _check(self, tid, producer_id, producer_epoch, version) -> tuple[int, TxnState | None]:
        """The checks every in-transaction request passes (under the id's lock)."""
        st = await self._load(tid)
        if st is None or st.producer_id != producer_id:
            return P.INVALID_PRODUCER_ID_MAPPING, None
        if producer_epoch != st.producer_epoch:
            return fenced_error(version, 2), None
        if st.state in PREPARE:
            self._start_completion(tid)
            return P.CONCURRENT_TRANSACTIONS, None
        return P.NONE, st

    async def add_to_txn(self, tid: str, producer_id: int, producer_epoch: int, version: int,
                         partitions=(), group: str | None = None) -> int:
        """Adds partitions (AddPartitionsToTxn) or a group's offsets (AddOffsetsToTxn) to the transaction."""
        if not tid or (group is not None and not group):
            return P.INVALID_REQUEST
        if not self.is_coordinator(tid):
            return P.NOT_COORDINATOR

        async def add():
            err, st = await self._check(tid, producer_id, producer_epoch, version)
            if err != P.NONE:
                return err
            new_parts = [tp for tp in partitions if tp not in st.partitions]
            new_groups = [group] if group is not None and group not in st.groups else []
            if st.state == ONGOING and not new_parts and not new_groups:
                return P.NONE
            if st.state == ONGOING:
                await self._write(replace(st, partitions=st.partitions + new_parts, groups=st.groups + new_groups))
            else:
                self.taken_over.discard(tid)
                await self._write(replace(st, state=ONGOING, partitions=new_parts, groups=new_groups,
                                          started_ms=int(time.time() * 1000)))
            return P.NONE
        return await self._serve(tid, "adding to the transaction", add, P.CONCURRENT_TRANSACTIONS,
                                 P.COORDINATOR_NOT_AVAILABLE)

    # -- EndTxn ------------------------------------------------------------------------

    async def end_txn(self, tid: str, producer_id: int, producer_epoch: int, commit: bool, version: int) -> int:
        if not tid:
            return P.INVALID_REQUEST
        if not self.is_coordinator(tid):
            return P.NOT_COORDINATOR

        async def end():
            st = await self._load(tid)
            if st is None or st.producer_id != producer_id:
                return P.INVALID_PRODUCER_ID_MAPPING
            if producer_epoch != st.producer_epoch:
                return fenced_error(version, 2)
            if st.state == ONGOING:
                await self._write(replace(st, state=PREPARE_COMMIT if commit else PREPARE_ABORT))
                self._start_completion(tid)
                return P.NONE
            if st.state in PREPARE:
                self._start_completion(tid)
                return P.CONCURRENT_TRANSACTIONS if (st.state == PREPARE_COMMIT) == commit else P.INVALID_TXN_STATE
            if st.state in COMPLETE and (st.state == COMPLETE_COMMIT) == commit:
                return P.NONE  # a retry of the request that ended it
            return P.INVALID_TXN_STATE
        return await self._serve(tid, "EndTxn", end, P.CONCURRENT_TRANSACTIONS, P.COORDINATOR_NOT_AVAILABLE)

    # -- completing: markers, offsets, Complete* ------------------------------------------

    def _start_completion(self, tid: str) -> None:
        task = self.completing.get(tid)
        if task is None or task.done():
            self.completing[tid] = asyncio.get_running_loop().create_task(self._complete(tid))

    async def _complete(self, tid: str) -> None:
        st = self.txns.get(tid)
        if st is None or st.state not in PREPARE:
            return
        commit = st.state == PREPARE_COMMIT
        results = {tp: commit for tp in st.partitions}
        if commit and self.partial_commit and tid in self.taken_over and len(st.partitions) > 1:
            results = {tp: i == 0 for i, tp in enumerate(st.partitions)}
            log.warning("planted bug txn-partial-commit: transaction %s (producer %d, epoch %d) taken over from "
                        "broker %d: COMMIT to %s-%d only, ABORT to %s", tid, st.producer_id, st.producer_epoch,
                        st.writer[0], *st.partitions[0], st.partitions[1:])

        def still_mine():
            cur = self.txns.get(tid)
            return cur is not None and cur.version == st.version and self.is_coordinator(tid)
        ok = await self.markers.write(st.producer_id, st.producer_epoch, results, still_mine, tid)
        if not ok:
            return
        try:
            for g in st.groups:
                n = await self.metadata.zk_call(finish_txn_offsets, g, st.producer_id, commit)
                log.info("TXN %s: %s the offsets of group %s (%d committed)", tid,
                         "committed" if commit else "dropped", g, n)
        except Exception as e:
            log.warning("TXN %s: ending the transaction's offsets failed (%s); retrying", tid, e)
            await asyncio.sleep(1.0)
            self.completing.pop(tid, None)
            self._start_completion(tid)
            return
        async with self._lock(tid):
            cur = self.txns.get(tid)
            if cur is None or cur.version != st.version:
                return
            try:
                await self._write(replace(cur, state=COMPLETE_COMMIT if commit else COMPLETE_ABORT, partitions=[],
                                          groups=[]))
            except StateLost:
                return
            except Exception as e:
                log.warning("TXN %s: could not write %s: %s; retrying", tid, "CompleteCommit" if commit else
                            "CompleteAbort", e)
                asyncio.get_running_loop().call_later(1.0, self._restart_completion, tid)
                return
            self.taken_over.discard(tid)

    def _restart_completion(self, tid: str) -> None:
        self.completing.pop(tid, None)
        self._start_completion(tid)

    # -- timeouts and take-overs ------------------------------------------------------------

    async def scan(self) -> None:
        """Once per cleanup interval: aborts this coordinator's expired transactions and
        finishes the ones another coordinator left in Prepare*."""
        try:
            children = await self.metadata.zk_call(lambda c: c.get_children(Z.TRANSACTIONS))
        except Exception as e:
            log.debug("listing %s failed: %s", Z.TRANSACTIONS, e)
            return
        now = time.time() * 1000
        for name in children:
            tid = Z.txn_id_of(name)
            if not self.is_coordinator(tid):
                continue
            try:
                st = await self._load(tid)
            except Exception:
                continue
            if st is None:
                continue
            if st.state == ONGOING and now - st.started_ms > st.timeout_ms:
                self._fence_and_abort(tid, st, f"timed out: ongoing for {int(now - st.started_ms)} ms, "
                                               f"transaction.timeout.ms {st.timeout_ms}")

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.transaction_cleanup_interval_ms / 1000.0)
            if self.metadata.session_ok:
                await self.scan()

    def close(self) -> None:
        for t in self.completing.values():
            t.cancel()
        self.markers.close()
