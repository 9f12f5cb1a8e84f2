"""The transaction coordinator's marker channel (Kafka's
TransactionMarkerChannelManager): writes a transaction's COMMIT or ABORT
markers to each of its partitions through that partition's leader, with a
WriteTxnMarkers request, and retries until every leader has written its
marker and replicated it (the leader answers once its HW passes the
marker: markers are records like any other, replicated and counted for
the HW).

Leaders come from the metadata cache (ZooKeeper's partition states); a
partition without a live leader, a refusal or a lost connection is retried
after a pause, for as long as the caller still coordinates the transaction.
"""

from __future__ import annotations

import asyncio
import logging

from kafka.protocol.producer import WriteTxnMarkersRequest

from broker import protocol as P
from broker.client import AsyncConnection
from broker.metadata import Metadata

log = logging.getLogger("broker.txn")

WRITE_TXN_MARKERS_VERSION = 1
RETRY_PAUSE_S = 0.2


class MarkerWriter:
    def __init__(self, broker_id: int, metadata: Metadata):
        self.id = broker_id
        self.metadata = metadata
        self.conns: dict[int, AsyncConnection] = {}
        self.locks: dict[int, asyncio.Lock] = {}

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns = {}

    async def write(self, producer_id: int, producer_epoch: int, results: dict, still_mine, what: str) -> bool:
        """Writes markers until every partition has its own: `results` maps (topic, p) to
        True (COMMIT) or False (ABORT). False if the caller stopped coordinating first."""
        pending = dict(results)
        refusals: dict[tuple[str, int], int] = {}
        while pending:
            if not still_mine():
                log.info("TXN %s: no longer coordinated here; %d marker(s) left to the next coordinator",
                         what, len(pending))
                return False
            by_leader: dict[int, list] = {}
            for tp in pending:
                st = self.metadata.states.get(tp)
                if st is not None and st.leader in self.metadata.live:
                    by_leader.setdefault(st.leader, []).append(tp)
            sent = [self._send(leader, producer_id, producer_epoch, {tp: pending[tp] for tp in tps})
                    for leader, tps in by_leader.items()]
            for done in await asyncio.gather(*sent):
                for tp, code in done.items():
                    if code == P.NONE:
                        pending.pop(tp, None)
                    elif refusals.get(tp) != code:
                        refusals[tp] = code
                        log.info("TXN %s: marker for %s-%d refused (error %d); retrying", what, tp[0], tp[1], code)
            if pending:
                await asyncio.sleep(RETRY_PAUSE_S)
        return True

    async def _send(self, leader: int, producer_id: int, producer_epoch: int, results: dict) -> dict:
        """One WriteTxnMarkers request to one leader: {(topic, p): error code}."""
        R = WriteTxnMarkersRequest
        markers = []
        for commit in (True, False):
            topics: dict[str, list[int]] = {}
            for (topic, p), c in results.items():
                if c == commit:
                    topics.setdefault(topic, []).append(p)
            if topics:
                markers.append(R.WritableTxnMarker(
                    producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
                    topics=[R.WritableTxnMarker.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                            for t, ps in topics.items()], coordinator_epoch=0))
        lock = self.locks.setdefault(leader, asyncio.Lock())
        async with lock:
            try:
                conn = self.conns.get(leader)
                if conn is None:
                    info = self.metadata.live.get(leader)
                    if info is None:
                        return {}
                    conn = AsyncConnection(info.host, info.port, client_id=f"txn-coordinator-{self.id}",
                                           timeout=15.0)
                    await conn.connect()
                    self.conns[leader] = conn
                resp = await conn.request(R(markers=markers), WRITE_TXN_MARKERS_VERSION)
            except (OSError, ConnectionError, asyncio.TimeoutError, EOFError, asyncio.IncompleteReadError) as e:
                log.debug("WriteTxnMarkers to broker %d failed: %s", leader, e)
                conn = self.conns.pop(leader, None)
                if conn is not None:
                    conn.close()
                return {}
        out = {}
        for m in resp.markers:
            for t in m.topics:
                for pr in t.partitions:
                    out[(t.name, pr.partition_index)] = pr.error_code
        return out
