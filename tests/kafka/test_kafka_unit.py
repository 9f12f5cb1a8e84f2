"""The Kafka system's pure parts: versions, generated server.properties, log
excerpts, and the spec's Kafka flags. No processes start here."""

from __future__ import annotations

import pytest

from core.errors import UserError
from harness.run.spec import build
from infra import kafka
from infra.kafka import KafkaOptions, KafkaSystem, check_version


class FakeNode:
    def __init__(self, name: str, address: str):
        self.name, self.address = name, address
        self.data_dir, self.log_dir, self.run_dir = f"/n/{name}/data", f"/n/{name}/logs", f"/n/{name}/run"


def system_on(n: int, mode: str, settings: dict | None = None, controllers: str = "combined") -> KafkaSystem:
    s = KafkaSystem("10.0.0.11:2181,10.0.0.12:2181", settings or {},
                    KafkaOptions(mode=mode, controllers=controllers))
    s._nodes = [FakeNode(f"n{i}", f"10.0.0.{10 + i}") for i in range(1, n + 1)]
    s._ids = {node.name: i for i, node in enumerate(s._nodes, start=1)}
    return s


@pytest.mark.parametrize("version,mode,words", [
    ("banana", "zk", ["unknown Kafka version", "banana"]),
    ("3.9", "zk", ["unknown Kafka version"]),
    ("9.9.9", "kraft", ["unknown Kafka version", "9.9.9"]),
    ("2.8.2", "zk", ["unknown Kafka version"]),
    ("4.1.0", "zk", ["no ZooKeeper mode", "--kafka-mode kraft"]),
])
def test_versions_the_system_cannot_run(version, mode, words):
    with pytest.raises(UserError) as e:
        check_version(version, mode)
    assert all(w in str(e.value) for w in words)


def test_versions_it_runs():
    assert check_version("3.9.2", "zk") == "3.9.2"
    assert check_version("4.0.0", "kraft") == "4.0.0"
    assert check_version("3.3.2", "kraft") == "3.3.2"


def test_zookeeper_mode_properties():
    s = system_on(3, "zk", {"min.insync.replicas": 2, "unclean.leader.election.enable": "true",
                            "log.flush.interval.messages": 1})
    props = s.properties(s._nodes[1])
    assert props["broker.id"] == "2"
    assert props["listeners"] == props["advertised.listeners"] == "PLAINTEXT://10.0.0.12:9092"
    assert props["zookeeper.connect"] == "10.0.0.11:2181,10.0.0.12:2181/kafka"
    assert props["log.dirs"] == "/n/n2/data/kafka"
    assert (props["min.insync.replicas"], props["unclean.leader.election.enable"],
            props["log.flush.interval.messages"]) == ("2", "true", "1")
    assert props["offsets.topic.replication.factor"] == "3"
    assert "process.roles" not in props and "broker.session.timeout.ms" not in props


def test_kraft_properties_make_the_first_three_nodes_voters():
    s = system_on(5, "kraft")
    voter, broker = s.properties(s._nodes[0]), s.properties(s._nodes[4])
    voters = "1@10.0.0.11:9093,2@10.0.0.12:9093,3@10.0.0.13:9093"
    assert voter["process.roles"] == "broker,controller" and voter["controller.quorum.voters"] == voters
    assert voter["listeners"] == "PLAINTEXT://10.0.0.11:9092,CONTROLLER://10.0.0.11:9093"
    assert broker["process.roles"] == "broker" and broker["listeners"] == "PLAINTEXT://10.0.0.15:9092"
    assert broker["node.id"] == "5" and broker["controller.quorum.voters"] == voters
    assert "zookeeper.connect" not in voter and "zookeeper.session.timeout.ms" not in voter
    assert [n.name for n in system_on(2, "kraft").voters()] == ["n1"]


def test_separate_controllers_are_voters_of_their_own_beside_brokers_only():
    s = system_on(3, "kraft", {"min.insync.replicas": 2}, controllers="separate")
    voters = "101@10.0.0.11:9093,102@10.0.0.12:9093,103@10.0.0.13:9093"
    broker, controller = s.properties(s._nodes[1]), s.controller_properties(s._nodes[1])
    assert broker["process.roles"] == "broker" and broker["node.id"] == "2"
    assert broker["listeners"] == "PLAINTEXT://10.0.0.12:9092" and broker["controller.quorum.voters"] == voters
    assert controller["process.roles"] == "controller" and controller["node.id"] == "102"
    assert controller["listeners"] == "CONTROLLER://10.0.0.12:9093"
    assert controller["controller.quorum.voters"] == voters
    # Its metadata log is off the broker's data dir, where the disk-fault filesystem is mounted.
    assert controller["log.dirs"] == "/n/n2/data/kraft-controller" != broker["log.dirs"]
    assert controller["min.insync.replicas"] == "2"  # the controller elects by it (ELR)
    assert "advertised.listeners" not in controller
    # The quorum's leader, named by its controller's id, is the node it runs on.
    assert kafka.kraft_controllers.broker_of(103) == 3 and kafka.kraft_controllers.broker_of(2) == 2


def test_the_harness_keeps_the_per_node_settings():
    with pytest.raises(UserError) as e:
        KafkaSystem("zk:2181", {"broker.id": 7})
    assert "broker.id" in str(e.value)


def test_a_startup_failure_is_told_by_its_error_line():
    log = ("[2026-01-01 10:00:00,000] INFO starting (kafka.server.KafkaServer)\n"
           "[2026-01-01 10:00:01,000] ERROR Exiting Kafka due to fatal exception (kafka.Kafka$)\n"
           "org.apache.kafka.common.config.ConfigException: Invalid value lots for configuration num.io.threads\n"
           "\tat org.apache.kafka.common.config.ConfigDef.parseType(ConfigDef.java:1)\n"
           "[2026-01-01 10:00:01,100] INFO shutting down (kafka.server.KafkaServer)\n")
    line = kafka._tail_line(log)
    assert line.startswith("[2026-01-01 10:00:01,000] ERROR Exiting Kafka")
    assert "num.io.threads" in line and "ConfigDef" not in line
    assert kafka._tail_line("") == "no output"
    assert kafka._tail_line("a\nb\nc\n") == "b | c"


@pytest.mark.parametrize("values,words", [
    ({"system": "kafka", "kafka_version": "9.9.9"}, ["unknown Kafka version"]),
    ({"system": "kafka", "kafka_mode": "raft"}, ["--kafka-mode"]),
    ({"system": "own", "kafka_mode": "kraft"}, ["--kafka-mode", "needs --system kafka"]),
    ({"system": "kafka", "kafka_dist": "/no/such/kafka.tgz"}, ["no such file"]),
    ({"system": "kafka", "broker": {"listeners": "PLAINTEXT://0.0.0.0:1"}}, ["[broker] listeners"]),
    ({"system": "kafka", "kafka_controllers": "separate"}, ["--kafka-controllers", "KRaft mode only"]),
    ({"system": "kafka", "kafka_controllers": "apart", "kafka_mode": "kraft"}, ["--kafka-controllers"]),
    ({"system": "kafka", "kafka_features": "eligible.leader.replicas.version=0"},
     ["--kafka-features", "KRaft mode only"]),
    ({"system": "kafka", "kafka_mode": "kraft", "kafka_features": "elr off"}, ["--kafka-features", "NAME=LEVEL"]),
])
def test_bad_kafka_specs(values, words):
    with pytest.raises(UserError) as e:
        build(values)
    assert all(w in str(e.value) for w in words)


def test_a_missing_jar_cache_names_the_command_that_fills_it(tmp_path, monkeypatch):
    monkeypatch.setenv(kafka.CACHE_ENV, str(tmp_path / "empty"))
    with pytest.raises(UserError) as e:
        build({"system": "kafka"})
    assert "not in the cache" in str(e.value) and "make setup" in str(e.value)


def test_a_dist_folder_gives_the_version(tmp_path):
    libs = tmp_path / "kafka_2.13-3.8.1" / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka_2.13-3.8.1.jar").write_bytes(b"")
    spec = build({"system": "kafka", "kafka_dist": str(libs.parent)})
    assert spec.system_options["kafka_dist"] == str(libs.parent)
    with pytest.raises(UserError) as e:
        build({"system": "kafka", "kafka_dist": str(libs.parent), "kafka_version": "3.9.2"})
    assert "holds Kafka 3.8.1" in str(e.value)


def test_a_group_s_offsets_partition_is_placed_as_kafka_places_it():
    from infra.kafka import java_string_hash, offsets_partition_of

    # String.hashCode() as Java computes it (jshell): ASCII, overflow, a surrogate pair, the empty string.
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("billing") == -109829509
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE: Utils.abs makes it 0
    assert java_string_hash("ab\U0001F600") == 4756804
    assert java_string_hash("") == 0
    assert offsets_partition_of("billing", 50) == 109829509 % 50
    assert offsets_partition_of("polygenelubricants", 50) == 0
