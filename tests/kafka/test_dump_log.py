"""kafka-dump-log's output, parsed into disk-dump rows (infra.kafka.parse_dump_log):
the real `kafka.tools.DumpLogSegments` from the jar cache, over segment files
in Kafka's format (written here by the own broker's storage code, which keeps
the producer's RecordBatch bytes as Kafka does)."""

from __future__ import annotations

import subprocess

import pytest

from infra import kafka, kafka_dist
from tests.broker.test_dump import _append
from broker.storage import Log


def test_parse_dump_log_reads_kafkas_own_tool(tmp_path):
    version = kafka.DEFAULT_VERSION
    if not kafka_dist.is_cached(version, kafka.cache_dir()):
        pytest.skip(f"Kafka {version} is not in the jar cache (make setup)")
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
