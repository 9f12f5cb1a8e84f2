"""Follower replication: one fetcher task per leader broker pulls, in order,
every partition this broker follows from that leader with Fetch requests
(replica_id = this broker, carrying the follower's current leader epoch),
appends the batches and adopts the leader's HW.

With `replica.truncation = leader-epoch` (the default) a partition added
for a new leader or epoch first finds where its log diverges from the
leader's: it asks with OffsetForLeaderEpoch where its latest epoch ends on
the leader, truncates exactly there (KIP-101; more rounds when the leader
never had that epoch, KIP-279), and only then fetches.  A fetch position
beyond the leader's log end (OFFSET_OUT_OF_RANGE) sends it through the
same steps again.

With `replica.truncation = high-watermark` (the seeds' scheme, known to be
unsafe) the replica manager truncated to the HW before adding the
partition, and an out-of-range fetch truncates to the leader's log end
(ListOffsets as a replica).

A leader that refuses the epoch (FENCED_LEADER_EPOCH: the follower is
behind; UNKNOWN_LEADER_EPOCH: the leader is) is retried after a pause:
ZooKeeper's next state settles who is right.
"""

from __future__ import annotations

import asyncio
import logging

from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest

from broker import protocol as P
from broker.client import AsyncConnection
from broker.records import split_batches

log = logging.getLogger("broker.fetcher")

FETCH_VERSION = 11
LIST_OFFSETS_VERSION = 5
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
MAX_TRUNCATION_ROUNDS = 64  # one per epoch the follower has that the leader lacks; far more than ever seen
ERROR_NAMES = {P.FENCED_LEADER_EPOCH: "FENCED_LEADER_EPOCH", P.UNKNOWN_LEADER_EPOCH: "UNKNOWN_LEADER_EPOCH",
               P.NOT_LEADER_OR_FOLLOWER: "NOT_LEADER_OR_FOLLOWER", P.OFFSET_OUT_OF_RANGE: "OFFSET_OUT_OF_RANGE"}


class Fetcher:
    def __init__(self, replicas, leader_id: int):
        self.replicas = replicas  # the ReplicaManager: cfg, live brokers, partitions
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], int] = {}  # (topic, p) -> leader epoch
        self.truncating: set[tuple[str, int]] = set()  # must find the divergence point before fetching
        self.last_error: dict[tuple[str, int], int] = {}  # to log a refusal once, not every 100 ms
        self.task: asyncio.Task | None = None
        self.wakeup = asyncio.Event()
        self.conn: AsyncConnection | None = None

    @property
    def by_epoch(self) -> bool:
        return self.replicas.cfg.replica_truncation == "leader-epoch"

    def add(self, tp, epoch: int, truncate_by_epoch: bool = False) -> None:
        self.partitions[tp] = epoch
        self.last_error.pop(tp, None)
        if truncate_by_epoch:
            self.truncating.add(tp)
        self.wakeup.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run(), name=f"fetcher-{self.leader_id}")

    def remove(self, tp) -> None:
        self.partitions.pop(tp, None)
        self.truncating.discard(tp)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    async def _connect(self) -> AsyncConnection:
        info = self.replicas.live.get(self.leader_id)
        if info is None:
            raise ConnectionError(f"leader {self.leader_id} is not registered")
        conn = AsyncConnection(info.host, info.port, client_id=f"replica-{self.replicas.cfg.broker_id}",
                               timeout=max(10.0, self.replicas.cfg.replica_fetch_wait_max_ms / 1000 + 10))
        await conn.connect()
        return conn

    async def run(self) -> None:
        backoff = 0.1
        while True:
            if not self.partitions:
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            try:
                if self.conn is None:
                    self.conn = await self._connect()
                if self.truncating & set(self.partitions):
                    await self._truncate_by_epoch()
                await self._fetch_once()
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
                log.debug("fetcher from %d: %s: %s", self.leader_id, type(e).__name__, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    def _current(self, tp, epoch: int):
        """The partition if it still follows this leader at `epoch` (it may have moved on during an await)."""
        part = self.replicas.partitions.get(tp)
        if part is None or self.partitions.get(tp) != epoch or part.role != "follower" \
                or part.leader_epoch != epoch or part.leader_id != self.leader_id:
            return None
        return part

    def _note_error(self, tp, code: int, what: str) -> None:
        if self.last_error.get(tp) != code:
            self.last_error[tp] = code
            log.info("%s of %s-%d from leader %d refused: %s (follower at epoch %s); retrying", what, tp[0], tp[1],
                     self.leader_id, ERROR_NAMES.get(code, code), self.partitions.get(tp))

    # -- truncation by leader epoch (KIP-101, KIP-279) ------------------------------------------

    async def _truncate_by_epoch(self) -> None:
        """Finds and cuts every truncating partition's divergence point; those the leader refused stay pending."""
        R = OffsetForLeaderEpochRequest
        me = self.replicas.cfg.broker_id
        # tp -> (follower's current epoch, epoch to ask about, where earlier rounds would cut)
        asking: dict = {}
        for tp in list(self.truncating):
            epoch = self.partitions.get(tp)
            part = self.replicas.partitions.get(tp)
            if epoch is None or part is None:
                self.truncating.discard(tp)
                continue
            if not part.epochs:
                # Nothing with an epoch to compare (an empty log): nothing to cut.
                self.truncating.discard(tp)
                log.info("no truncation of %s: empty leader-epoch cache, log end %d (leader %d, epoch %d)",
                         part.name, part.leo, self.leader_id, epoch)
                continue
            asking[tp] = (epoch, part.epochs[-1][0], part.leo)
        for _round in range(MAX_TRUNCATION_ROUNDS):
            if not asking:
                return
            by_topic: dict[str, list] = {}
            for (topic, p), (cur, ask, _) in asking.items():
                by_topic.setdefault(topic, []).append(R.OffsetForLeaderTopic.OffsetForLeaderPartition(
                    partition=p, current_leader_epoch=cur, leader_epoch=ask))
            resp = await self.conn.request(R(replica_id=me, topics=[
                R.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in by_topic.items()]),
                OFFSET_FOR_LEADER_EPOCH_VERSION)
            nxt = {}
            for tr in resp.topics:
                for er in tr.partitions:
                    tp = (tr.topic, er.partition)
                    if tp not in asking:
                        continue
                    cur, ask, cut = asking[tp]
                    part = self._current(tp, cur)
                    if part is None:
                        self.truncating.discard(tp)  # moved on: the new role decides afresh
                        continue
                    if er.error_code != P.NONE:
                        self._note_error(tp, er.error_code, "OffsetForLeaderEpoch")
                        continue  # stays in self.truncating: asked again after a pause
                    offset, again = part.divergence(ask, er.leader_epoch, er.end_offset)
                    offset = min(offset, cut)
                    if again is not None:
                        nxt[tp] = (cur, again, offset)
                        continue
                    self.truncating.discard(tp)
                    self.last_error.pop(tp, None)
                    why = (f"leader epoch {er.leader_epoch} ends at {er.end_offset} on leader {self.leader_id}"
                           if er.leader_epoch >= 0 else
                           f"leader {self.leader_id} has no epoch at or below {ask}")
                    if ask != er.leader_epoch:
                        why += f"; asked for epoch {ask}"
                    if offset < part.leo:
                        part.note_truncation(offset, self.leader_id, cur, "leader epoch", f"{why}; hw {part.hw}")
                        part.truncate_to(offset)
                    else:
                        log.info("no truncation of %s at log end %d (%s; follower epoch %d)",
                                 part.name, part.leo, why, cur)
            asking = nxt
        for tp in asking:
            log.warning("truncation of %s-%d not settled after %d rounds; asking again", tp[0], tp[1],
                        MAX_TRUNCATION_ROUNDS)

    # -- fetching --------------------------------------------------------------------------

    async def _fetch_once(self) -> None:
        cfg = self.replicas.cfg
        snapshot = {tp: e for tp, e in self.partitions.items() if tp not in self.truncating}
        by_topic: dict[str, list] = {}
        for (topic, p), epoch in snapshot.items():
            part = self.replicas.partitions.get((topic, p))
            if part is None:
                continue
            by_topic.setdefault(topic, []).append(FetchRequest.FetchTopic.FetchPartition(
                partition=p, current_leader_epoch=epoch, fetch_offset=part.leo, log_start_offset=0,
                partition_max_bytes=cfg.replica_fetch_max_bytes))
        if not by_topic:
            # Everything still waits for its truncation (refused until ZooKeeper catches up).
            await asyncio.sleep(0.1)
            return
        req = FetchRequest(replica_id=cfg.broker_id, max_wait_ms=cfg.replica_fetch_wait_max_ms, min_bytes=1,
                           max_bytes=max(cfg.replica_fetch_max_bytes, 10 << 20), isolation_level=0,
                           session_id=0, session_epoch=-1,
                           topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
                           forgotten_topics_data=[], rack_id="")
        resp = await self.conn.request(req, FETCH_VERSION)
        errors = 0
        for topic_resp in resp.responses:
            for pd in topic_resp.partitions:
                tp = (topic_resp.topic, pd.partition_index)
                part = self._current(tp, snapshot.get(tp))
                if part is None or tp in self.truncating:
                    continue  # the partition moved on while the fetch was in flight
                if pd.error_code == P.NONE:
                    self.last_error.pop(tp, None)
                    if pd.records:
                        part.append_as_follower(split_batches(pd.records), pd.high_watermark)
                    else:
                        part.hw = max(part.hw, min(pd.high_watermark, part.leo))
                elif pd.error_code == P.OFFSET_OUT_OF_RANGE:
                    errors += 1
                    if self.by_epoch:
                        # Our log end is past the leader's: only the epochs can say where we diverged.
                        log.info("fetch of %s at %d from leader %d is out of range; finding the divergence "
                                 "point by leader epoch", part.name, part.leo, self.leader_id)
                        self.truncating.add(tp)
                    else:
                        await self._truncate_to_leader_end(tp, part)
                else:
                    errors += 1
                    self._note_error(tp, pd.error_code, "fetch")
        if errors:
            await asyncio.sleep(0.1)

    async def _truncate_to_leader_end(self, tp, part) -> None:
        req = ListOffsetsRequest(replica_id=self.replicas.cfg.broker_id, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=tp[0], partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=tp[1], current_leader_epoch=part.leader_epoch, timestamp=-1)])])
        resp = await self.conn.request(req, LIST_OFFSETS_VERSION)
        pr = resp.topics[0].partitions[0]
        if pr.error_code != P.NONE or part.role != "follower":
            return
        leader_end = pr.offset
        if part.leo > leader_end:
            part.note_truncation(leader_end, self.leader_id, part.leader_epoch, "fetch offset past leader's log end",
                                 "replica.truncation = high-watermark")
            part.truncate_to(leader_end)
