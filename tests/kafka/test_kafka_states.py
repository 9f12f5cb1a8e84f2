"""The cluster-state timeline (states.jsonl, docs/history.md) of a real Kafka run
(ZooKeeper mode) that kills partition leaders: leader changes with their
epochs, nodes down and back, and the truncations in Kafka's server.log."""

from __future__ import annotations

import pytest

from infra.kafka import KafkaSystem
from tests.kafka.conftest import left_behind
from tests.support import check_kill_timeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_killing_kafka_leaders_shows_in_the_timeline(acks1_leader_kill):
    proc, run_dir = acks1_leader_kill
    assert proc.returncode == 1, proc.stdout + proc.stderr
    logged = [(node.name, t["partition"], t["offset"]) for node in sorted((run_dir / "nodes").iterdir())
              if (node / "server.log").is_file()
              for t in KafkaSystem.parse_truncations((node / "server.log").read_text()) if t["topic"] == "harness"]
    # acks=1 and killed leaders: the old leaders come back with records the new ones never had.
    assert logged, "no truncation in the brokers' logs"
    counts = check_kill_timeline(run_dir, logged)
    assert counts["truncations"] == len(set(logged))
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}
