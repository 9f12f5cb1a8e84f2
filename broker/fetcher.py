"""Follower replication: one fetcher task per leader broker pulls, in order,
every partition this broker follows from that leader with Fetch requests
(replica_id = this broker), appends the batches and adopts the leader's HW.

A fetch position beyond the leader's log end (OFFSET_OUT_OF_RANGE) makes
the follower ask the leader for its log end (ListOffsets as a replica) and
truncate to it.
"""

from __future__ import annotations

import asyncio
import logging

from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

from broker import protocol as P
from broker.client import AsyncConnection
from broker.records import split_batches

log = logging.getLogger("broker.fetcher")

FETCH_VERSION = 11
LIST_OFFSETS_VERSION = 5


class Fetcher:
    def __init__(self, replicas, leader_id: int):
        self.replicas = replicas  # the ReplicaManager: cfg, live brokers, partitions
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], int] = {}  # (topic, p) -> leader epoch
        self.task: asyncio.Task | None = None
        self.wakeup = asyncio.Event()
        self.conn: AsyncConnection | None = None

    def add(self, tp, epoch: int) -> None:
        self.partitions[tp] = epoch
        self.wakeup.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run(), name=f"fetcher-{self.leader_id}")

    def remove(self, tp) -> None:
        self.partitions.pop(tp, None)

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

    async def _fetch_once(self) -> None:
        cfg = self.replicas.cfg
        snapshot = dict(self.partitions)
        by_topic: dict[str, list] = {}
        for (topic, p), epoch in snapshot.items():
            part = self.replicas.partitions.get((topic, p))
            if part is None:
                continue
            by_topic.setdefault(topic, []).append(FetchRequest.FetchTopic.FetchPartition(
                partition=p, current_leader_epoch=epoch, fetch_offset=part.leo, log_start_offset=0,
                partition_max_bytes=cfg.replica_fetch_max_bytes))
        if not by_topic:
            await asyncio.sleep(0.05)
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
                part = self.replicas.partitions.get(tp)
                if part is None or self.partitions.get(tp) != snapshot.get(tp) or part.role != "follower" \
                        or part.leader_epoch != snapshot.get(tp):
                    continue  # the partition moved on while the fetch was in flight
                if pd.error_code == P.NONE:
                    if pd.records:
                        part.append_as_follower(split_batches(pd.records), pd.high_watermark)
                    else:
                        part.hw = max(part.hw, min(pd.high_watermark, part.leo))
                elif pd.error_code == P.OFFSET_OUT_OF_RANGE:
                    await self._handle_out_of_range(tp, part)
                    errors += 1
                else:
                    errors += 1
                    log.debug("fetch %s-%d from %d: error %d", tp[0], tp[1], self.leader_id, pd.error_code)
        if errors:
            await asyncio.sleep(0.1)

    async def _handle_out_of_range(self, tp, part) -> None:
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
            log.info("TRUNCATE %s-%d: fetch offset %d is past leader %d's log end %d",
                     tp[0], tp[1], part.leo, self.leader_id, leader_end)
            part.truncate_to(leader_end)
