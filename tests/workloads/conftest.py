"""Fixtures for the workload tests: a real local Kafka cluster, histories, running workloads."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest

from core.history.writer import HistoryWriter
from lab.loopback_kafka import LoopbackKafka

_names = itertools.count()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """A 2-node KRaft cluster (node 1 also the controller), stopped at the end."""
    cluster = LoopbackKafka(tmp_path_factory.mktemp("kafka"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def topic_name(request) -> str:
    """A topic name unique in the session (tests share the cluster)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{next(_names)}"


@pytest.fixture
def history(tmp_path: Path):
    writer = HistoryWriter(tmp_path / "history.jsonl")
    try:
        yield writer
    finally:
        writer.close()


@pytest.fixture
def workloads():
    """Collects Workload objects; each is stopped at the end, also when the test failed."""
    started = []
    try:
        yield started
    finally:
        for wl in started:
            try:
                wl.stop(timeout=2.0)
            except Exception:
                logging.getLogger(__name__).exception("stopping a workload failed")
            wl.abandon()


@pytest.fixture
def started(kafka, history, workloads):
    """started(config) -> a Workload on the session's Kafka, its topic created, its clients running."""
    from workloads.topic import create_topic
    from workloads.workload import Workload

    def start(config):
        create_topic(kafka.bootstrap, config, timeout_s=30)
        wl = Workload(config, kafka.bootstrap, history)
        workloads.append(wl)
        wl.start()
        return wl

    return start
