"""The own broker driven by Apache Kafka's own Java clients (kafka-tools
3.9.2, infra/kafka_dist.py `ensure_tools`), not by the client the harness
drives: an idempotent acks=all VerifiableProducer with a broker killed and
restarted mid-run, a VerifiableConsumer group committing by hand, and the
first commands an operator types (`kafka-topics --describe`,
`kafka-consumer-groups --describe`). Every acknowledged record is read
back, and the group's offsets are described as committed.

And the Java client's transactions: TransactionalMessageCopier, a
consume-transform-produce loop that aborts a third of its transactions,
copies a topic with its transaction coordinator killed and restarted
mid-copy; the output's log, read raw, must hold every input record in
exactly one committed transaction, a read_committed VerifiableConsumer
must return exactly those records, and the copier's group must have
committed the input's end."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from infra.kafka_dist import DEFAULT_VERSION, tools_classpath
from tests.broker.helpers import wait_for
from tests.support import stored_records

TOPIC = "apache"
MESSAGES = 20_000
COPIED = 3000


@pytest.fixture(scope="module")
def classpath():
    return tools_classpath(DEFAULT_VERSION)


def _tool(classpath: str, main: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["java", "-Xmx256m", "-cp", classpath, main, *args], capture_output=True, text=True,
                          timeout=timeout)


def _lines(proc: subprocess.Popen) -> tuple[list[str], threading.Thread]:
    """A process's stdout lines, gathered by a thread as they come."""
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    return out, reader


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
    out, reader = _lines(producer)
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


def _copied(lines: list[str]) -> int:
    """The records TransactionalMessageCopier has committed so far, by its last status line."""
    statuses = [e for e in _events("".join(lines)) if "totalProcessed" in e]
    return statuses[-1]["totalProcessed"] if statuses else 0


def _coordinator(classpath: str, boot: str, transactional_id: str) -> int:
    """The broker coordinating `transactional_id`, as `kafka-transactions describe` finds it
    (FindCoordinator, then DescribeTransactions there)."""
    described = _tool(classpath, "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", boot,
                      "describe", "--transactional-id", transactional_id)
    assert described.returncode == 0, described.stderr[-2000:]
    header, row = [line.split() for line in described.stdout.splitlines()[:2]]
    return int(row[header.index("CoordinatorId")])


def _log_by_markers(cluster, topic: str, partition: int) -> tuple[dict, dict, dict]:
    """(committed, aborted, open) records of a partition as its leader's log holds them,
    offset -> value, each transactional record sorted by its producer's next marker.

    Read uncommitted and judged here from the batches and markers alone, so the
    verdict does not lean on the broker's last stable offset or aborted index."""
    committed: dict[int, str] = {}
    aborted: dict[int, str] = {}
    pending: dict[int, dict[int, str]] = {}  # producer id -> its open transaction's records
    for r in stored_records(cluster.brokers[cluster.leader(topic, partition)].port, topic, partition):
        if r.marker is not None:
            (committed if r.marker == "COMMIT" else aborted).update(pending.pop(r.producer_id, {}))
        elif r.transactional:
            pending.setdefault(r.producer_id, {})[r.offset] = r.value
        else:
            committed[r.offset] = r.value
    return committed, aborted, {pid: sorted(held) for pid, held in pending.items() if held}


def test_apache_s_transactional_copier_commits_each_record_once_across_a_coordinator_kill(make_cluster, tmp_path,
                                                                                          classpath):
    cluster = make_cluster(3, settings={"min.insync.replicas": "2", "group.initial.rebalance.delay.ms": "0"})
    boot = cluster.bootstrap
    for topic in ("copy-in", "copy-out"):
        created = _tool(classpath, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", boot, "--create",
                        "--topic", topic, "--partitions", "3", "--replication-factor", "3")
        assert created.returncode == 0, created.stderr[-2000:]
    # Thirty keys, so every partition gets records (unkeyed, the sticky partitioner may skip one).
    produced = _tool(classpath, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", boot, "--topic",
                     "copy-in", "--max-messages", str(COPIED), "--acks", "-1", "--repeating-keys", "30")
    sent = [e for e in _events(produced.stdout) if e.get("name") == "producer_send_success"]
    assert len({e["value"] for e in sent}) == COPIED, produced.stderr[-2000:]
    partition_of = {e["value"]: e["partition"] for e in sent}
    ends = {p: 1 + max((e["offset"] for e in sent if e["partition"] == p), default=-1) for p in range(3)}

    # The copier aborts about one transaction in three (and resets its consumer to the
    # group's offsets); its group's offsets go into each transaction (TxnOffsetCommit v3).
    with open(tmp_path / "copier.err", "w") as err:
        copier = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", classpath, "org.apache.kafka.tools.TransactionalMessageCopier",
             "--broker-list", boot, "--input-topic", "copy-in", "--input-partition", "0", "--output-topic",
             "copy-out", "--transactional-id", "copier", "--consumer-group", "copier-group", "--transaction-size",
             "100", "--enable-random-aborts", "--group-mode", "--use-group-metadata"],
            stdout=subprocess.PIPE, stderr=err, text=True)
    lines, reader = _lines(copier)
    try:
        wait_for(lambda: _copied(lines) > 0, 60, 0.1, "the copier's first commit")
        victim = _coordinator(classpath, boot, "copier")
        cluster.kill(victim)  # kill -9 of the transaction coordinator while the copier runs
        at_kill = _copied(lines)
        time.sleep(2.0)
        cluster.restart(victim)
        copier.wait(timeout=120)
    finally:
        copier.kill()
    reader.join(10)
    assert copier.returncode == 0, (tmp_path / "copier.err").read_text()[-3000:]
    assert at_kill < COPIED == _copied(lines), f"the kill came after the copy: {at_kill} of {COPIED} copied"

    logs = {p: _log_by_markers(cluster, "copy-out", p) for p in range(3)}
    committed = {(p, o): v for p, (c, _, _) in logs.items() for o, v in c.items()}
    aborted = {(p, o): v for p, (_, a, _) in logs.items() for o, v in a.items()}
    assert not any(still for _, _, still in logs.values()), {p: still for p, (_, _, still) in logs.items()}
    # Every input record committed exactly once, to the partition it was read from.
    assert sorted(committed.values(), key=int) == sorted(partition_of, key=int)
    assert all(partition_of[v] == p for (p, _), v in committed.items())
    assert aborted, "no transaction aborted: the copier's random aborts did not happen"

    config = tmp_path / "read-committed.properties"
    config.write_text("isolation.level=read_committed\n")
    try:
        out = _tool(classpath, "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", boot, "--topic",
                    "copy-out", "--group-id", "committed-reader", "--max-messages", str(len(committed)),
                    "--verbose", "--reset-policy", "earliest", "--consumer.config", str(config), timeout=60).stdout
    except subprocess.TimeoutExpired as e:  # fewer records than committed: what it read says which
        out = (e.stdout or b"").decode(errors="replace")
    read = {(e["partition"], e["offset"]): e["value"] for e in _events(out) if e.get("name") == "record_data"}
    shown = sorted(read.keys() & aborted.keys())
    assert not shown, f"read_committed returned {len(shown)} aborted records: {shown[:10]}"
    missing, extra = sorted(committed.keys() - read.keys()), sorted(read.keys() - committed.keys())
    assert read == committed, f"read_committed: {len(missing)} missing {missing[:10]}, {len(extra)} extra {extra[:10]}"

    groups = _tool(classpath, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                   boot, "--describe", "--group", "copier-group")
    assert groups.returncode == 0, groups.stderr[-2000:]
    rows = [line.split() for line in groups.stdout.splitlines() if line.startswith("copier-group")]
    assert {int(r[2]): r[3] for r in rows} == {p: str(end) for p, end in ends.items()}, groups.stdout
