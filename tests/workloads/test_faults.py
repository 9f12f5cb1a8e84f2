"""The workload against a real Kafka cluster whose broker is killed with SIGKILL.

Own cluster (this module kills and restarts its node 2), so the other tests'
cluster stays healthy. Topics use replication factor 2 with
min.insync.replicas=2: while node 2 is down no write can be acknowledged,
which makes the classification of the errors observable for sure.
"""

from __future__ import annotations

import time

import pytest

from core.history.writer import HistoryWriter
from lab.loopback_kafka import LoopbackKafka
from workloads.client_errors import INDETERMINATE_NOTES, REJECTED_BEFORE_APPEND, error_name
from workloads.config import WorkloadConfig
from workloads.topic import create_topic, wait_settled
from workloads.workload import Workload

from tests.workloads.history_checks import check_history

pytestmark = pytest.mark.integration

INDETERMINATE = {error_name(c) for c in INDETERMINATE_NOTES} | {"_PURGE_QUEUE"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    kafka = LoopbackKafka(tmp_path_factory.mktemp("kafka-faults"))
    try:
        kafka.start()
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture
def node2_back(cluster):
    """Whatever a test did to node 2, it runs again afterwards."""
    try:
        yield
    finally:
        cluster.start_node(2)


def _isr(bootstrap: str, topic: str) -> dict[int, list[int]]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic=topic, timeout=5)
    return {p: sorted(pm.isrs) for p, pm in meta.topics[topic].partitions.items()}


def _wait_isr(bootstrap: str, topic: str, want: list[int], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if all(isr == want for isr in _isr(bootstrap, topic).values()):
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"ISR of {topic} never became {want}: {_isr(bootstrap, topic)}")


def _strict_topic(name: str, partitions: int, **kw) -> WorkloadConfig:
    return WorkloadConfig(topic=name, partitions=partitions, replication_factor=2,
                          topic_settings={"min.insync.replicas": 2}, **kw)


def test_rejections_are_fail_only_for_single_attempt_producers(cluster, node2_back, tmp_path, workloads):
    single = _strict_topic("strict-single", 2, rate=100, producers=1, consumers=0,
                           producer_settings={"retries": 0})
    retrying = _strict_topic("strict-retrying", 2, rate=100, producers=1, consumers=0, retire_flush_s=0.5,
                             producer_settings={"message.timeout.ms": 1500, "request.timeout.ms": 1000})
    for cfg in (single, retrying):
        create_topic(cluster.bootstrap, cfg, timeout_s=30)
        _wait_isr(cluster.bootstrap, cfg.topic, [1, 2])
    cluster.kill(2)
    for cfg in (single, retrying):
        _wait_isr(cluster.bootstrap, cfg.topic, [1])

    facts = {}
    for cfg, seconds in ((single, 1.5), (retrying, 4.0)):
        history = HistoryWriter(tmp_path / f"{cfg.topic}.jsonl")
        wl = Workload(cfg, cluster.bootstrap, history)
        workloads.append(wl)
        wl.start()
        time.sleep(seconds)
        wl.stop(timeout=3)
        history.close()
        facts[cfg.topic] = check_history(history.path)

    # retries=0: the leader rejected each batch before appending it -> fail, with the broker's error name.
    f = facts["strict-single"]
    assert f.incomplete == [] and f.completions
    fails = [e for e in f.completions.values() if e["type"] == "fail"]
    assert fails and {e["error"] for e in fails} <= {error_name(c) for c in REJECTED_BEFORE_APPEND}
    assert "NOT_ENOUGH_REPLICAS" in {e["error"] for e in fails}
    assert not f.of_type("send", "ok")

    # Retrying producer: the same rejection, retried until message.timeout.ms -> info, and the
    # producer is replaced: a crash of the old process id, later sends from a new one.
    f = facts["strict-retrying"]
    assert f.incomplete == [] and f.completions
    assert {e["type"] for e in f.completions.values()} == {"info"}
    assert "_MSG_TIMED_OUT" in {e["error"] for e in f.completions.values()}
    crashes = f.of_type("crash", "ok")
    assert crashes
    first = f.events[0]["process"]
    assert first in f.crashed
    later = {e["process"] for e in f.of_type("send", "invoke")} - {first}
    assert later and all(p > first for p in later)


def test_kill_minus_9_mid_run(cluster, node2_back, history, workloads):
    cfg = _strict_topic("kill9", 4, rate=400, producers=2, consumers=2, consumer_mode="subscribe",
                        commit_interval_s=0.5, retire_flush_s=1.0,
                        producer_settings={"message.timeout.ms": 2000, "request.timeout.ms": 1000})
    create_topic(cluster.bootstrap, cfg, timeout_s=30)
    _wait_isr(cluster.bootstrap, cfg.topic, [1, 2])
    wl = Workload(cfg, cluster.bootstrap, history)
    workloads.append(wl)
    wl.start()
    time.sleep(2.0)
    killed_at = history.now()
    cluster.kill(2)
    time.sleep(5.0)
    cluster.start_node(2)
    assert wait_settled(cluster.bootstrap, cfg.topic, timeout_s=60) == {p: [1, 2] for p in range(4)}
    healed_at = history.now()
    time.sleep(3.0)
    stop = wl.stop(timeout=10)
    report = wl.final_reads(60)
    history.close()
    facts = check_history(history.path)

    assert stop.sends_without_completion == 0 and facts.incomplete == []
    # While node 2 was down, sends could not be acknowledged: they completed as info
    # (indeterminate errors), never ok, never fail (these producers retry).
    infos = [e for e in facts.completions.values() if e["type"] == "info"]
    assert infos and {e["error"] for e in infos} <= INDETERMINATE
    assert not [e for e in facts.completions.values() if e["type"] == "fail"]
    assert any(killed_at <= e["time"] for e in infos)

    # Each producer that hit an info crashed and continued as a new process id.
    producer_pids = sorted({e["process"] for e in facts.of_type("send", "invoke")})
    crashed_producers = [p for p in producer_pids if p in facts.crashed]
    assert crashed_producers
    first_pids = set(producer_pids[:2])  # the two producers' first instances
    for p in crashed_producers:
        # the process's first info precedes its crash, and nothing of it follows the crash
        first_info = min(e["index"] for e in infos if e["process"] == p)
        assert first_info < facts.crashed[p]
    # After the heal, new processes acknowledged sends.
    late_oks = [e for e in facts.of_type("send", "ok") if e["time"] > healed_at]
    assert late_oks and {e["process"] for e in late_oks}.isdisjoint(first_pids)

    # Final reads reach the acknowledged offsets, and (acks=all, min ISR 2, a process kill that
    # loses no page cache) every acknowledged value is read back at its ack position.
    assert report.complete, report
    for e in facts.of_type("send", "ok"):
        assert (e["partition"], e["offset"]) in facts.reads[e["value"]]
    # Consumers kept reading through the fault, possibly as new processes.
    assert facts.of_type("assign", "ok") and facts.of_type("poll", "ok")
