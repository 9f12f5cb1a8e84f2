"""Creating the workload's topic and waiting until every partition has a leader.

A topic that already exists is accepted when its partition count matches;
settings the cluster rejects (a replication factor above the broker count,
a bad topic config) are a `UserError` naming the topic; a cluster that does
not answer or elect leaders in time is a `ClusterUnavailable`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from core.errors import UserError
from workloads.client_errors import error_name
from workloads.clients import check_bootstrap, client_log
from workloads.config import WorkloadConfig

log = logging.getLogger(__name__)


class ClusterUnavailable(UserError):
    """The cluster did not answer, or did not elect leaders, in time."""


# Errors that mean the request itself is wrong: retrying will not help.
_BAD_REQUEST = ("INVALID_REPLICATION_FACTOR", "INVALID_PARTITIONS", "INVALID_CONFIG", "POLICY_VIOLATION",
                "TOPIC_EXCEPTION", "INVALID_REPLICA_ASSIGNMENT", "TOPIC_AUTHORIZATION_FAILED",
                "CLUSTER_AUTHORIZATION_FAILED", "UNSUPPORTED_VERSION", "INVALID_REQUEST")


def create_topic(bootstrap: str, config: WorkloadConfig, timeout_s: float = 60.0,
                 admin_settings: dict[str, Any] | None = None) -> None:
    """Create `config.topic` (partitions, replication factor, topic_settings)
    and return once every partition has a leader."""
    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": check_bootstrap(bootstrap), "logger": client_log,
                         **(admin_settings or {})})
    topic = config.topic
    settings = {k: _topic_value(v) for k, v in config.topic_settings.items()}
    last = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClusterUnavailable(f"cannot create topic {topic} at {bootstrap} within {timeout_s:g} s: {last}")
        new = NewTopic(topic, num_partitions=config.partitions, replication_factor=config.replication_factor,
                       config=settings)
        try:
            future = admin.create_topics([new], request_timeout=min(left, 15.0))[topic]
            future.result(timeout=min(left, 20.0))
            break
        except KafkaException as e:
            err = e.args[0]
            name = err.name()
            if name == "TOPIC_ALREADY_EXISTS":
                break
            if name in _BAD_REQUEST:
                raise UserError(f"cannot create topic {topic}: {name}: {err.str()}") from None
            last = f"{name}: {err.str()}"
        except Exception as e:  # the future's own timeout
            last = f"{type(e).__name__}: {e}"
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    wait_for_leaders(admin, topic, config.partitions, deadline, bootstrap)


def wait_for_leaders(admin, topic: str, partitions: int, deadline: float, bootstrap: str = "") -> None:
    """Poll metadata until `topic` has `partitions` partitions, each with a leader."""
    last = "no metadata yet"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClusterUnavailable(f"topic {topic} at {bootstrap}: no leader for every partition in time ({last})")
        try:
            meta = admin.list_topics(topic=topic, timeout=min(left, 5.0))
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                last = error_name(info.error.code()) if info is not None and info.error is not None else "unknown topic"
            else:
                found = len(info.partitions)
                if found != partitions:
                    raise UserError(f"topic {topic} already exists with {found} partitions, not {partitions}")
                leaderless = sorted(p for p, pm in info.partitions.items() if pm.leader < 0 or pm.error is not None)
                if not leaderless:
                    return
                last = f"partitions without a leader: {leaderless}"
        except KafkaException as e:
            last = e.args[0].name() if e.args else str(e)
        time.sleep(0.2)


def wait_settled(bootstrap: str, topic: str, timeout_s: float = 60.0, full_isr: bool = True) -> dict[int, list[int]]:
    """After a heal: wait until every partition of `topic` has a leader and,
    with `full_isr`, every replica back in its ISR. Returns partition -> ISR.
    Raises ClusterUnavailable when the cluster does not settle in time."""
    admin = AdminClient({"bootstrap.servers": check_bootstrap(bootstrap), "logger": client_log})
    deadline = time.monotonic() + timeout_s
    last = "no metadata yet"
    while time.monotonic() < deadline:
        try:
            info = admin.list_topics(topic=topic, timeout=min(5.0, max(0.1, deadline - time.monotonic())))
            parts = info.topics[topic].partitions if topic in info.topics else {}
            if info.topics.get(topic) is not None and info.topics[topic].error is None and parts:
                unsettled = sorted(p for p, pm in parts.items()
                                   if pm.leader < 0 or (full_isr and sorted(pm.isrs) != sorted(pm.replicas)))
                if not unsettled:
                    return {p: sorted(pm.isrs) for p, pm in sorted(parts.items())}
                last = f"partitions not settled: {unsettled}"
            else:
                last = "topic not in metadata"
        except KafkaException as e:
            last = e.args[0].name() if e.args else str(e)
        time.sleep(0.2)
    raise ClusterUnavailable(f"topic {topic} at {bootstrap} did not settle in {timeout_s:g} s ({last})")


def _topic_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
