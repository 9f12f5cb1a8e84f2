"""WorkloadConfig: defaults, validation as one-line UserErrors, derived properties."""

from __future__ import annotations

import pytest

from core.errors import UserError
from workloads.clients import check_bootstrap
from workloads.config import WorkloadConfig
from workloads.workload import Workload


def test_defaults_are_valid_and_json_able():
    import json

    cfg = WorkloadConfig()
    assert cfg.consumer_mode == "assign" and cfg.acks == "all" and not cfg.idempotent
    assert json.loads(json.dumps(cfg.to_dict()))["partitions"] == cfg.partitions


@pytest.mark.parametrize("kwargs, words", [
    ({"partitions": 0}, "partitions"),
    ({"replication_factor": "3"}, "replication_factor"),
    ({"rate": -1}, "rate"),
    ({"rate": float("nan")}, "rate"),
    ({"producers": True}, "producers"),
    ({"consumer_mode": "group"}, "consumer_mode"),
    ({"acks": "2"}, "acks"),
    ({"idempotent": True, "acks": "1"}, "idempotent"),
    ({"idempotent": "yes"}, "idempotent"),
    ({"key_count": 0}, "key_count"),
    ({"poll_batch": 0}, "poll_batch"),
    ({"poll_timeout_s": 0}, "poll_timeout_s"),
    ({"topic": "has space"}, "topic"),
    ({"topic": ""}, "topic"),
    ({"group_id": ""}, "group_id"),
    ({"producer_settings": {"acks": "1"}}, "use acks"),
    ({"producer_settings": {"enable.idempotence": True}}, "use idempotent"),
    ({"consumer_settings": {"group.id": "x"}}, "use group_id"),
    ({"consumer_settings": {"enable.auto.commit": True}}, "commit_interval_s"),
    ({"producer_settings": {"linger.ms": [1]}}, "linger.ms"),
    ({"producer_settings": ["x"]}, "producer_settings"),
    ({"groups": [{"name": "g", "protocol": "eager"}]}, "protocol 'eager'"),
])
def test_bad_values_are_one_line_user_errors(kwargs, words):
    with pytest.raises(UserError) as e:
        WorkloadConfig(**kwargs)
    message = str(e.value)
    assert words in message and "\n" not in message


def test_acks_normalised():
    assert WorkloadConfig(acks=1).acks == "1"
    assert WorkloadConfig(acks="-1").acks == "all"


def test_from_mapping_rejects_unknown_keys():
    cfg = WorkloadConfig.from_mapping({"rate": 50, "consumer_mode": "subscribe"})
    assert cfg.rate == 50 and cfg.consumer_mode == "subscribe"
    with pytest.raises(UserError, match="unknown workload setting 'rat'"):
        WorkloadConfig.from_mapping({"rat": 50})
    with pytest.raises(UserError):
        WorkloadConfig.from_mapping(["rate"])


def test_single_attempt_follows_retries_and_idempotence():
    assert not WorkloadConfig().single_attempt
    assert WorkloadConfig(producer_settings={"retries": 0}).single_attempt
    assert WorkloadConfig(producer_settings={"message.send.max.retries": "0"}).single_attempt
    assert not WorkloadConfig(producer_settings={"retries": 3}).single_attempt
    # An idempotent producer always retries.
    assert not WorkloadConfig(idempotent=True, producer_settings={"retries": 0}).single_attempt


def test_settings_copied_and_run_info_without_bootstrap(tmp_path):
    from core.history.writer import HistoryWriter

    settings = {"linger.ms": 1}
    cfg = WorkloadConfig(producer_settings=settings)
    settings["linger.ms"] = 99
    assert cfg.producer_settings["linger.ms"] == 1
    with HistoryWriter(tmp_path / "h.jsonl") as history:
        info = Workload(cfg, "127.0.0.1:9", history).run_info()
    assert info["topic"] == cfg.topic
    assert info["producer"]["linger.ms"] == 1 and "bootstrap.servers" not in info["producer"]
    assert info["producer"]["acks"] == "all" and info["producer"]["enable.idempotence"] is False
    assert info["consumer"]["enable.auto.commit"] is False


def test_consumer_partitions_spread():
    def spread(partitions, consumers):
        wl = Workload(WorkloadConfig(partitions=partitions, consumers=consumers), "127.0.0.1:9", history=None)
        return [wl.consumer_partitions(i) for i in range(consumers)]

    assert spread(4, 2) == [[0, 2], [1, 3]]
    assert spread(2, 3) == [[0], [1], [0]]
    assert sorted(p for ps in spread(5, 3) for p in ps) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("bad", ["", "host", "host:port", "a:1,,b:2", "a:1;b:2"])
def test_bad_bootstrap(bad):
    with pytest.raises(UserError):
        check_bootstrap(bad)


def test_good_bootstrap():
    assert check_bootstrap(" 127.0.0.1:9092, kafka-1:19092 ") == "127.0.0.1:9092,kafka-1:19092"


def test_a_group_on_the_consumer_protocol_leaves_the_classic_settings_out():
    """KIP-848 members get group.protocol=consumer without the session and
    heartbeat times that librdkafka refuses with it (the brokers set them):
    real clients, made offline, which librdkafka would refuse otherwise."""
    from workloads.clients import ClientContext
    from workloads.recording import Recorder

    cfg = WorkloadConfig(groups=[{"name": "new", "protocol": "consumer"}])
    clients = ClientContext(cfg, "127.0.0.1:1", None, Recorder(None))
    with pytest.raises(Exception, match="session.timeout.ms"):  # what the workload's defaults meet unhelped
        from confluent_kafka import Consumer
        Consumer({**clients.consumer_settings("new"), "group.protocol": "consumer"})
    for extra in ({"group.protocol": "consumer"}, {"group.protocol": "classic"}, None):
        clients.make_consumer(1, "new", False, lambda err: None, extra).close()
