"""The table of systems under test: each record complete, its settings its own,
and the spec and the run reading it (nothing else names a system)."""

from __future__ import annotations

import pytest

from core.errors import UserError
from harness.cli import main
from harness.run.spec import FIELDS, build
from infra.system import BrokerSystem
from infra.systems import SYSTEM_OPTIONS, SYSTEMS, system_named
from infra.zookeeper import ZooKeeper, ZooKeeperOptions


def test_every_system_builds_a_broker_system_from_its_defaults():
    assert set(SYSTEMS) == {"own", "kafka"}
    for kind in SYSTEMS.values():
        options = {o.name: o.default for o in kind.options}
        system = kind.make("127.0.0.1:2181", {}, options)
        assert isinstance(system, BrokerSystem) and system.name == kind.name
        assert kind.summary


def test_system_settings_are_owned_once_and_clash_with_no_spec_field():
    names = [o.name for kind in SYSTEMS.values() for o in kind.options]
    assert len(names) == len(set(names)) == len(SYSTEM_OPTIONS)
    assert not set(names) & set(FIELDS)


def test_every_system_setting_is_a_flag_of_harness_run(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for owner, option in SYSTEM_OPTIONS.values():
        assert option.flag in out
    assert "--system {own,kafka}" in out


def test_an_unknown_system_is_one_line():
    with pytest.raises(UserError, match="--system 'redpanda': expected one of own, kafka"):
        system_named("redpanda")
    with pytest.raises(UserError, match="--system 'redpanda': expected one of own, kafka"):
        build({"system": "redpanda"})


def test_the_spec_passes_the_chosen_systems_settings_to_its_record():
    spec = build({"system": "kafka", "kafka_mode": "kraft", "seed": 1})
    assert spec.system_options == {"kafka_version": "", "kafka_mode": "kraft", "kafka_dist": None,
                                   "kafka_controllers": "combined", "kafka_features": ""}
    kafka = SYSTEMS["kafka"].make("127.0.0.1:2181", {}, spec.system_options)
    assert kafka.mode == "kraft"
    own = SYSTEMS["own"].make("127.0.0.1:2181", {}, build({"debug_bug": ["no-dedup"], "seed": 1}).system_options)
    assert own.debug_bugs == ("no-dedup",)


def test_only_systems_that_keep_metadata_in_zookeeper_get_an_ensemble():
    # A KRaft run starts no ZooKeeper: nothing of it would use one.
    def uses(values: dict) -> bool:
        spec = build({**values, "seed": 1})
        return SYSTEMS[spec.system].uses_zookeeper(spec.system_options)
    assert uses({"system": "kafka"}) and uses({"system": "kafka", "kafka_mode": "zk"})
    assert not uses({"system": "kafka", "kafka_mode": "kraft"})
    assert not uses({"system": "kafka", "kafka_mode": "kraft", "kafka_version": "4.4.0"})
    assert uses({"system": "own"})


@pytest.mark.integration
def test_a_second_setup_on_the_same_nodes_starts_with_empty_logs(fresh_cluster):
    # A run's node logs hold that run only (the report's log scan counts what they say).
    cluster = fresh_cluster(nodes=3)
    zk = ZooKeeper(ZooKeeperOptions(nodes=1))
    zk.setup(cluster)
    try:
        own = SYSTEMS["own"].make(zk.connect_string(), {}, {"debug_bug": ()})
        for _ in range(2):
            own.setup(cluster)
            own.teardown(cluster)
        n1 = cluster.node("n1")
        log_text = n1.remote.run(f"cat {n1.log_dir}/broker.log").stdout
        assert log_text.count("broker 1 listening on") == 1, log_text
    finally:
        zk.teardown(cluster)
