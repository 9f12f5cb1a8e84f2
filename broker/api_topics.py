"""The cluster-level APIs: ApiVersions, Metadata (with topic auto-creation)
and CreateTopics.

Answers come from the metadata cache (live brokers, topics, partition
states as ZooKeeper last told this broker); creating a topic writes its
replica assignment to ZooKeeper, and the controller then writes each
partition's first state.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kazoo.exceptions import NodeExistsError

from broker import protocol as P
from broker import zk as Z
from broker.config import BrokerConfig
from broker.metadata import Metadata

log = logging.getLogger("broker")


class TopicApis:
    def __init__(self, cfg: BrokerConfig, metadata: Metadata):
        self.cfg = cfg
        self.metadata = metadata

    def handlers(self) -> dict:
        return {P.API_VERSIONS: self.handle_api_versions, P.METADATA: self.handle_metadata,
                P.CREATE_TOPICS: self.handle_create_topics}

    async def handle_api_versions(self, req, version, client_id):
        return P.api_versions_response(version)

    def _advertised_brokers(self, resp_cls):
        return [resp_cls.MetadataResponseBroker(node_id=b, host=i.host, port=i.port, rack=None)
                for b, i in sorted(self.metadata.live.items())]

    async def handle_metadata(self, req, version, client_id):
        R = P.MetadataResponse
        if req.topics is None or (version == 0 and not req.topics):
            names = sorted(self.metadata.topics)
        else:
            names = [t.name for t in req.topics]
        allow_create = self.cfg.auto_create_topics and (version < 4 or req.allow_auto_topic_creation)
        topics = []
        for name in names:
            if name not in self.metadata.topics:
                if not Z.valid_topic_name(name or ""):
                    err = P.INVALID_TOPIC_EXCEPTION
                elif allow_create:
                    err = await self._create_topic(name, self.cfg.num_partitions,
                                                   self.cfg.default_replication_factor)
                    err = P.LEADER_NOT_AVAILABLE if err in (P.NONE, P.TOPIC_ALREADY_EXISTS) else err
                else:
                    err = P.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(R.MetadataResponseTopic(error_code=err, name=name, is_internal=False, partitions=[]))
                continue
            parts = []
            for p, replicas in sorted(self.metadata.topics[name].items()):
                st = self.metadata.states.get((name, p))
                leader = st.leader if st is not None and st.leader in self.metadata.live else -1
                parts.append(R.MetadataResponseTopic.MetadataResponsePartition(
                    error_code=P.NONE if leader >= 0 else P.LEADER_NOT_AVAILABLE, partition_index=p,
                    leader_id=leader, leader_epoch=st.leader_epoch if st else -1, replica_nodes=replicas,
                    isr_nodes=st.isr if st else [], offline_replicas=[r for r in replicas if r not in self.metadata.live]))
            topics.append(R.MetadataResponseTopic(error_code=P.NONE, name=name, is_internal=False, partitions=parts))
        return R(throttle_time_ms=0, brokers=self._advertised_brokers(R), cluster_id=self.metadata.cluster_id,
                 controller_id=self._controller_for_clients(), topics=topics)

    def _controller_for_clients(self) -> int:
        """The broker a client should send CreateTopics to: the controller when it is live, else
        this broker. Any broker takes CreateTopics (it writes the assignment to ZooKeeper; Kafka's
        brokers forward them, KIP-590), and a client told -1 or a broker it does not know waits
        for a metadata refresh that librdkafka's AdminClient does not make: a topic created just
        after the cluster's start was answered 30 s late, when that wait timed out."""
        md = self.metadata
        if md.controller_id in md.live:
            return md.controller_id
        return self.cfg.broker_id if md.session_ok else -1

    async def _create_topic(self, name: str, partitions: int, rf: int, assignment=None,
                            validate_only: bool = False) -> int:
        if name in self.metadata.topics:
            return P.TOPIC_ALREADY_EXISTS
        if not Z.valid_topic_name(name):
            return P.INVALID_TOPIC_EXCEPTION
        if assignment is None:
            if partitions < 1:
                return P.INVALID_PARTITIONS
            if rf < 1 or rf > len(self.metadata.live):
                return P.INVALID_REPLICATION_FACTOR
            assignment = Z.place_replicas(list(self.metadata.live), partitions, rf)
        if validate_only:
            return P.NONE
        try:
            await self.metadata.zk_call(lambda c: c.create(Z.topic_path(name), Z.encode_assignment(assignment),
                                                  makepath=True))
        except NodeExistsError:
            return P.TOPIC_ALREADY_EXISTS
        log.info("created topic %s: %d partitions, replicas %s", name, len(assignment), assignment)
        return P.NONE

    async def handle_create_topics(self, req, version, client_id):
        R = P.CreateTopicsResponse
        results = []
        created = []
        for t in req.topics:
            assignment = None
            if t.assignments:
                assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
                if any(not r or any(b not in self.metadata.live for b in r) for r in assignment.values()):
                    results.append(R.CreatableTopicResult(name=t.name, error_code=P.INVALID_REPLICATION_FACTOR,
                                                          error_message="assignment names brokers that are not live"))
                    continue
            n = t.num_partitions if t.num_partitions > 0 else self.cfg.num_partitions
            rf = t.replication_factor if t.replication_factor > 0 else self.cfg.default_replication_factor
            err = await self._create_topic(t.name, n, rf, assignment, req.validate_only)
            msg = None if err == P.NONE else {
                P.TOPIC_ALREADY_EXISTS: f"topic {t.name} already exists",
                P.INVALID_REPLICATION_FACTOR: f"replication factor {rf} with {len(self.metadata.live)} live brokers",
                P.INVALID_PARTITIONS: f"{n} partitions", P.INVALID_TOPIC_EXCEPTION: "invalid topic name"}.get(err)
            results.append(R.CreatableTopicResult(name=t.name, error_code=err, error_message=msg))
            if err == P.NONE and not req.validate_only:
                created.append(t.name)
        deadline = time.monotonic() + max(0, req.timeout_ms) / 1000.0
        while created and time.monotonic() < deadline:
            if all(t in self.metadata.topics and all((t, p) in self.metadata.states for p in self.metadata.topics[t]) for t in created):
                break
            await asyncio.sleep(0.05)
        return R(throttle_time_ms=0, topics=results)
