"""Disk dumps of Kafka's logs. kafka-dump-log's output, parsed into
disk-dump rows (infra.kafka.parse_dump_log): the real
`kafka.tools.DumpLogSegments` from the jar cache, over segment files in
Kafka's format (written here by the own broker's storage code, which keeps
the producer's RecordBatch bytes as Kafka does). And the other way round: a
real Kafka's data dir read by the own broker's `broker.dump`, which
`KafkaSystem.dump_log` uses on local nodes, row for row as kafka-dump-log
reads it."""

from __future__ import annotations

import gzip
import json
import subprocess

import pytest
from confluent_kafka import Producer

from broker.storage import Log
from infra import kafka, kafka_dist
from tests.broker.test_dump import _append
from tests.support import need
from workloads.config import WorkloadConfig
from workloads.topic import create_topic


def test_parse_dump_log_reads_kafkas_own_tool(tmp_path):
    version = kafka.DEFAULT_VERSION
    need(kafka_dist.is_cached(version, kafka.cache_dir()), f"Kafka {version}'s jars in .cache/kafka (make setup)")
    home = kafka_dist.kafka_home(version, kafka.cache_dir())
    files = []
    for p, batches in ((2, [([(b"1", b"100"), (b"1", b"101")], 0), ([(None, b"7 8")], 3)]),
                       (11, [([(b"k", b"55")], 5)])):
        log = Log(str(tmp_path / f"harness-{p}"))
        log.open()
        for pairs, epoch in batches:
            _append(log, pairs, epoch=epoch)
        files.append(log.segments[0].log_path)
        log.close()
    out = subprocess.run(["java", "-cp", f"{home}/libs/*", "kafka.tools.DumpLogSegments", "--print-data-log",
                          "--files", ",".join(files)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert list(kafka.parse_dump_log(out.stdout.splitlines(True))) == [
        [2, 0, 0, 1, 100], [2, 1, 0, 1, 101], [2, 2, 3, None, "7 8"], [11, 0, 5, "k", 55]]


def _produce(bootstrap: str, compression: str, values) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 20,
                         "batch.num.messages": 37})  # many batches, of different sizes
    for i, value in enumerate(values):
        producer.produce("harness", key=None if i % 5 == 0 else str(i), value=value, partition=i % 3)
    assert producer.flush(30) == 0


def _rows(path) -> list:
    with gzip.open(path, "rb") as f:
        return sorted(json.loads(line) for line in f)


@pytest.mark.integration
def test_the_own_dump_reads_a_real_kafkas_log_as_kafka_dump_log_does(node, kraft, tmp_path):
    system = kraft()

    class OneNode:  # what KafkaSystem.setup reads of a cluster
        nodes = [node]
        shares_filesystem = True

    system.setup(OneNode)
    create_topic(system.bootstrap(), WorkloadConfig(topic="harness", partitions=3, replication_factor=1))
    _produce(system.bootstrap(), "none", [str(v) for v in range(1000)] + ["not a number", "", "\u00e9t\u00e9"])
    _produce(system.bootstrap(), "gzip", [str(v) for v in range(5000, 5300)])
    own, tool = tmp_path / "own.jsonl.gz", tmp_path / "tool.jsonl.gz"

    def dumps_on_the_node() -> set[str]:
        listed = node.remote.run(f"ls {node.run_dir}").stdout.split()
        return {name for name in listed if name in ("disk-dump.jsonl.gz", "kafka-dump-log.txt.gz")}

    assert system.dump_log(node, "harness", str(own)) == 1303
    assert dumps_on_the_node() == {"disk-dump.jsonl.gz"}  # the own dump read it, not Kafka's tool
    assert system._dump_with_kafka_tool(node, "harness", str(tool)) == 1303
    # Row for row the same, but for text outside ASCII: Kafka's tool prints it in the node's POSIX locale.
    differ = [(a, b) for a, b in zip(_rows(own), _rows(tool)) if a != b]
    assert [(a[4], b[4]) for a, b in differ] == [("\u00e9t\u00e9", "?t?")], differ[:3]
    assert [a[:4] for a, _ in differ] == [b[:4] for _, b in differ]
    # A batch in a codec only Kafka's tool decodes (lz4): dump_log asks that tool, and every value is there.
    _produce(system.bootstrap(), "lz4", [str(v) for v in range(9000, 9050)])
    node.remote.run(f"rm -f {node.run_dir}/disk-dump.jsonl.gz {node.run_dir}/kafka-dump-log.txt.gz")
    again = tmp_path / "again.jsonl.gz"
    assert system.dump_log(node, "harness", str(again)) == 1353
    assert dumps_on_the_node() == {"kafka-dump-log.txt.gz"}
    assert set(map(tuple, _rows(tool))) < set(map(tuple, _rows(again)))
    assert {row[4] for row in _rows(again)} >= set(range(9000, 9050))
