"""The named scenarios: every one of this area's files is a valid spec with a
description and an expectation, each Kafka scenario has its own-broker twin,
and `harness scenarios` lists and shows them."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.run import scenarios as sc
from harness.run.spec import SCENARIOS, build, load_file

DOCS_SCENARIOS = SCENARIOS.parent / "docs" / "scenarios.md"

# Issue 6's failure modes (other scenarios in the folder belong to other work).
KAFKA_SCENARIOS = ["kafka-acks1-leader-kill", "kafka-acks1-leader-isolate", "kafka-unclean-isr-shrink",
                   "kafka-safe-one-fault"]


def test_the_issue_s_scenarios_exist():
    assert {p.stem for p in SCENARIOS.glob("*.toml")} >= set(KAFKA_SCENARIOS)


@pytest.mark.parametrize("name", KAFKA_SCENARIOS)
def test_each_kafka_scenario_and_its_own_twin_are_valid_specs(name):
    twin = "own-" + name.removeprefix("kafka-")
    for scenario, system in ((name, "kafka"), (twin, "own")):
        values = load_file(str(SCENARIOS / f"{scenario}.toml"))
        spec = build(values)
        assert spec.system == system
        assert len(spec.description.split()) >= 20  # says configuration, fault and expected anomaly
        assert spec.expect
    # The twins differ in the system, and otherwise only where docs/scenarios.md says why: a twin
    # whose faults are an explicit schedule (the other's being seeded) says so in its table row.
    kafka_values, own_values = (load_file(str(SCENARIOS / f"{n}.toml")) for n in (name, twin))
    keys = ["nodes", "partitions", "replication_factor", "acks", "min_insync", "unclean_election", "time_limit",
            "rate"]
    if ("schedule" in kafka_values) == ("schedule" in own_values):
        keys += ["nemesis", "nemesis_targets", "nemesis_interval"]
    else:
        row = next(line for line in DOCS_SCENARIOS.read_text().splitlines()
                   if line.startswith(f"| `{name}`, `{twin}` |"))
        assert "explicit schedule" in row, row
    for key in keys:
        assert kafka_values.get(key) == own_values.get(key), key
    assert kafka_values["expect"] == own_values["expect"]


def test_harness_scenarios_lists_and_shows(capsys):
    assert main(["scenarios", "--system", "kafka"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in KAFKA_SCENARIOS)
    assert not any(line.startswith("own-") for line in out.splitlines())
    assert main(["scenarios", "kafka-unclean-isr-shrink"]) == 0
    out = capsys.readouterr().out
    assert "unclean_election = true" in out and "harness run --scenario kafka-unclean-isr-shrink" in out


def test_an_unknown_scenario_is_one_line_and_exit_2(capsys):
    assert main(["scenarios", "no-such-scenario"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such scenario" in err


def test_a_scenario_without_an_expectation_is_reported(tmp_path):
    (tmp_path / "bare.toml").write_text('description = "something"\nnodes = 3\n')
    listed = sc.all_scenarios(tmp_path)
    assert listed[0]["name"] == "bare" and "needs an [expect] table" in listed[0]["description"]
