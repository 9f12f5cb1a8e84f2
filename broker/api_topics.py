"""The cluster-level APIs: ApiVersions, Metadata (with topic auto-creation),
CreateTopics and DescribeConfigs.

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
from broker.config import SETTINGS, BrokerConfig
from broker.metadata import Metadata

log = logging.getLogger("broker")


class TopicApis:
    def __init__(self, cfg: BrokerConfig, metadata: Metadata):
        self.cfg = cfg
        self.metadata = metadata

    def handlers(self) -> dict:
        return {P.API_VERSIONS: self.handle_api_versions, P.METADATA: self.handle_metadata,
                P.CREATE_TOPICS: self.handle_create_topics, P.DESCRIBE_CONFIGS: self.handle_describe_configs}

    async def handle_describe_configs(self, req, version, client_id):
        """A topic's settings (those the broker honours, at the broker's
        values) and this broker's; each resource answered alone."""
        R = P.DescribeConfigsResponse
        results = []
        for res in req.resources:
            wanted = None if res.configuration_keys is None else set(res.configuration_keys)
            error, message, entries = P.NONE, None, []
            if res.resource_type == TOPIC_RESOURCE:
                if res.resource_name not in self.metadata.topics:
                    error, message = P.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {res.resource_name}"
                else:
                    entries = config_entries(self.cfg, TOPIC_SETTINGS, wanted)
            elif res.resource_type == BROKER_RESOURCE:
                if res.resource_name not in ("", str(self.cfg.broker_id)):
                    error, message = P.INVALID_REQUEST, f"this is broker {self.cfg.broker_id}"
                else:
                    entries = config_entries(self.cfg, {k: k for k in SETTINGS}, wanted)
            else:
                error, message = P.INVALID_REQUEST, f"resource type {res.resource_type} is not described here"
            results.append(R.DescribeConfigsResult(
                error_code=error, error_message=message, resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=[R.DescribeConfigsResult.DescribeConfigsResourceResult(
                    name=name, value=value, read_only=True, config_source=source, is_sensitive=False,
                    synonyms=[], config_type=kind, documentation=None) for name, value, source, kind in entries]))
        return R(throttle_time_ms=0, results=results)

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


# DescribeConfigs: resource types, and where a value comes from (Kafka's numbering).
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
STRING, BOOLEAN, INT, LONG = 2, 1, 3, 5
# A topic's settings this broker honours -> the broker setting it takes its value from
# (topics have no settings of their own here: CreateTopics' configs are not kept).
TOPIC_SETTINGS = {"min.insync.replicas": "min.insync.replicas",
                  "unclean.leader.election.enable": "unclean.leader.election.enable",
                  "segment.bytes": "log.segment.bytes", "max.message.bytes": "message.max.bytes",
                  "flush.messages": "log.flush.interval.messages", "flush.ms": "log.flush.interval.ms",
                  "index.interval.bytes": "log.index.interval.bytes"}


def config_entries(cfg: BrokerConfig, names: dict[str, str], wanted) -> list[tuple[str, str | None, int, int]]:
    """(name, value, source, type) of each setting `names` maps to a broker
    setting (or names itself), those in `wanted` (None: all)."""
    entries = []
    for name, setting in names.items():
        if wanted is not None and name not in wanted:
            continue
        value = getattr(cfg, SETTINGS[setting][0])
        text = None if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        kind = BOOLEAN if isinstance(value, bool) else INT if isinstance(value, int) else STRING
        entries.append((name, text, STATIC_BROKER_CONFIG if setting in cfg.overrides else DEFAULT_CONFIG, kind))
    return entries
