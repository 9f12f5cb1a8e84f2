"""The own broker driven by Apache Kafka's own Java clients (kafka-tools
3.9.2, infra/kafka_dist.py `ensure_tools`), not by the client the harness
drives: an idempotent acks=all VerifiableProducer with a broker killed and
restarted mid-run, a VerifiableConsumer group committing by hand, and the
first commands an operator types (`kafka-topics --describe`,
`kafka-consumer-groups --describe`). Every acknowledged record is read
back, and the group's offsets are described as committed."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from infra.kafka_dist import DEFAULT_VERSION, tools_classpath

TOPIC = "apache"
MESSAGES = 20_000


@pytest.fixture(scope="module")
def classpath():
    return tools_classpath(DEFAULT_VERSION)


def _tool(classpath: str, main: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["java", "-Xmx256m", "-cp", classpath, main, *args], capture_output=True, text=True,
                          timeout=timeout)


def _events(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    return found


def test_apache_s_producer_consumer_and_commands_against_the_own_broker(make_cluster, tmp_path, classpath):
    cluster = make_cluster(3, settings={"min.insync.replicas": "2", "group.initial.rebalance.delay.ms": "0"})
    boot = cluster.bootstrap
    created = _tool(classpath, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", boot, "--create",
                    "--topic", TOPIC, "--partitions", "3", "--replication-factor", "3")
    assert created.returncode == 0, created.stderr[-2000:]
    described = _tool(classpath, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", boot, "--describe",
                      "--topic", TOPIC)
    assert described.returncode == 0, described.stderr[-2000:]
    assert "PartitionCount: 3" in described.stdout and described.stdout.count("Isr: ") == 3, described.stdout

    config = tmp_path / "producer.properties"
    config.write_text("enable.idempotence=true\nacks=all\nretries=2147483647\ndelivery.timeout.ms=60000\n")
    producer = subprocess.Popen(
        ["java", "-Xmx256m", "-cp", classpath, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server",
         boot, "--topic", TOPIC, "--max-messages", str(MESSAGES), "--throughput", "4000", "--acks", "-1",
         "--producer.config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(producer.stdout), daemon=True)
    reader.start()
    try:
        time.sleep(2.0)
        cluster.kill(2)  # kill -9 of a broker while the producer sends
        time.sleep(2.0)
        cluster.restart(2)
        producer.wait(timeout=120)
    finally:
        producer.kill()
    reader.join(10)
    sent = _events("".join(out))
    acked = {e["value"] for e in sent if e.get("name") == "producer_send_success"}
    failed = [e for e in sent if e.get("name") == "producer_send_error"]
    assert len(acked) >= MESSAGES * 0.9, (len(acked), failed[:3])

    consumed = _tool(classpath, "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", boot,
                     "--topic", TOPIC, "--group-id", "apache-group", "--max-messages", str(len(acked)),
                     "--verbose", "--reset-policy", "earliest", timeout=180)
    events = _events(consumed.stdout)
    read = {e["value"] for e in events if e.get("name") == "record_data"}
    commits = [e for e in events if e.get("name") == "offsets_committed"]
    # Every acknowledged record read back; the group's commits all succeeded.
    assert not acked - read, sorted(acked - read)[:10]
    assert commits and all(c["success"] for c in commits), [c for c in commits if not c["success"]][:3]
    committed = {}
    for c in commits:
        for o in c["offsets"]:
            committed[o["partition"]] = max(committed.get(o["partition"], 0), o["offset"])

    groups = _tool(classpath, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                   boot, "--describe", "--group", "apache-group")
    assert groups.returncode == 0, groups.stderr[-2000:]
    rows = [line.split() for line in groups.stdout.splitlines() if line.startswith("apache-group")]
    described_offsets = {int(r[2]): int(r[3]) for r in rows}
    assert described_offsets == committed, groups.stdout


def test_describe_configs_answers_topics_and_this_broker_and_refuses_the_rest(make_cluster):
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

    cluster = make_cluster(1, settings={"min.insync.replicas": "1", "log.segment.bytes": "2097152"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("described", 1, 1)])["described"].result(timeout=30)
    topic = admin.describe_configs([ConfigResource("topic", "described")])
    configs = next(iter(topic.values())).result(timeout=30)
    assert configs["segment.bytes"].value == "2097152" and configs["unclean.leader.election.enable"].value == "false"
    # Set on the broker, or its default: the source says which.
    assert configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    broker = next(iter(admin.describe_configs([ConfigResource("broker", "1")]).values())).result(timeout=30)
    assert broker["log.segment.bytes"].value == "2097152" and broker["min.insync.replicas"].value == "1"
    missing = next(iter(admin.describe_configs([ConfigResource("topic", "no-such-topic")]).values()))
    with pytest.raises(Exception, match="UNKNOWN_TOPIC|no topic"):
        missing.result(timeout=30)
