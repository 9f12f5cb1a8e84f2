"""The broker process (Kafka's KafkaServer): wires the pieces together and
runs them on one asyncio event loop.

- broker/network.py     connections, framing, in-order responses
- broker/metadata.py    ZooKeeper session, watches, the metadata cache,
                        the controller's loop (broker/controller.py)
- broker/replica_manager.py  logs, roles, ISR, HW checkpoints, fetchers
- broker/api_log.py     Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, WriteTxnMarkers
- broker/api_topics.py  ApiVersions, Metadata, CreateTopics
- broker/api_groups.py  the consumer-group APIs (broker/groups.py keeps the groups)
- broker/api_txn.py     InitProducerId and the transaction APIs (broker/transactions.py
                        is the transaction coordinator)

The broker is the metadata side's listener: it passes ZooKeeper's news to
the replica manager and the group and transaction coordinators.  It owns start-up order
(logs before the listener socket, ZooKeeper after) and clean shut-down
(HW checkpoint written, logs flushed, session closed so the controller
reacts at once).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from broker.api_groups import GroupApis
from broker.api_log import LogApis
from broker.api_topics import TopicApis
from broker.api_txn import TxnApis
from broker.config import BrokerConfig
from broker.groups import GroupCoordinator, coordinator_for
from broker.metadata import BrokerInfo, Metadata, MetadataListener
from broker.network import SocketServer
from broker.replica_manager import ReplicaManager
from broker.transactions import TransactionCoordinator
from broker.zk import PartitionState

log = logging.getLogger("broker")


class Broker(MetadataListener):
    def __init__(self, cfg: BrokerConfig):
        self.cfg = cfg
        self.id = cfg.broker_id
        self.metadata = Metadata(cfg, self)
        self.replicas = ReplicaManager(cfg, self.metadata)
        self.groups: GroupCoordinator | None = None
        self.txns: TransactionCoordinator | None = None
        self.handlers: dict = {}
        self.tasks: list[asyncio.Task] = []

    # ------------------------------------------------------------------------------
    # start-up and shut-down
    # ------------------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        self.replicas.load_logs()
        self.groups = GroupCoordinator(self.id, self.metadata.zk_call, self.cfg.group_min_session_timeout_ms,
                                       self.cfg.group_max_session_timeout_ms,
                                       self.cfg.group_initial_rebalance_delay_ms,
                                       offsets_in_memory=self.cfg.bug("commit-in-memory"),
                                       stale_cache=self.cfg.bug("stale-offset-cache"))
        self.txns = TransactionCoordinator(self.cfg, self.metadata)
        self.handlers = {**LogApis(self.cfg, self.metadata, self.replicas).handlers(),
                         **TopicApis(self.cfg, self.metadata).handlers(),
                         **GroupApis(self.id, self.metadata, self.groups).handlers(),
                         **TxnApis(self.id, self.metadata, self.txns, self.groups).handlers()}
        server = SocketServer(self.cfg.host, self.cfg.port, self._dispatch, self.cfg.socket_request_max_bytes,
                              self.cfg.connections_max_idle_ms)
        await server.start()
        log.info("broker %d listening on %s:%d (advertised %s:%d), data dir %s, planted bugs: %s",
                 self.id, self.cfg.host, self.cfg.port, self.cfg.advertised_host, self.cfg.advertised_port,
                 self.cfg.data_dir, sorted(self.cfg.debug_bugs) or "none")
        await self.metadata.start()
        self.tasks = [loop.create_task(c) for c in (
            self.metadata.controller_loop(), self.replicas.isr_loop(), self.replicas.checkpoint_loop(),
            self.replicas.flush_loop(), self._group_loop(), self.txns.run())]
        try:
            await stopping.wait()
        finally:
            log.info("broker %d shutting down", self.id)
            self.metadata.stopping = True
            server.close()
            for t in self.tasks:
                t.cancel()
            self.txns.close()
            self.replicas.shutdown()
            await self.metadata.stop()
            log.info("broker %d stopped", self.id)

    async def _dispatch(self, api_key: int, version: int, req, client_id: str):
        return await self.handlers[api_key](req, version, client_id)

    async def _group_loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            self.groups.expire_sessions()

    # ------------------------------------------------------------------------------
    # what ZooKeeper says, passed on
    # ------------------------------------------------------------------------------

    def on_topic(self, topic: str, assignment: dict[int, list[int]]) -> None:
        self.replicas.add_topic(topic, assignment)

    def on_partition_state(self, tp: tuple[str, int], st: PartitionState) -> None:
        self.replicas.apply_state(tp, st)

    def on_live_brokers(self, live: dict[int, BrokerInfo]) -> None:
        if self.groups is not None:
            ids = list(live)
            self.groups.drop_groups(lambda g: coordinator_for(g, ids) == self.id)
        if self.txns is not None:
            ids = list(live)
            self.txns.forget(lambda t: coordinator_for(t, ids) == self.id)
        self.replicas.live_changed(live)

    def on_session_lost(self) -> None:
        self.replicas.step_down_all("ZooKeeper session lost")
        # Its groups have moved to another coordinator meanwhile, where their members
        # joined again: what this broker remembers of them (members, generations) is
        # stale, and a commit checked against it would overwrite newer offsets.
        if self.groups is not None:
            self.groups.drop_groups(lambda g: False)
        if self.txns is not None:
            self.txns.forget(lambda t: False)
