"""The run spec: flags, TOML files, flags over files, and one-line errors."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.spec import TestSpec, build, load_file
from core.errors import UserError


def test_defaults_are_a_meaningful_run():
    s = build({"nemesis": "partition"})
    assert (s.system, s.provider, s.nodes, s.time_limit, s.acks, s.min_insync) == ("own", "local", 5, 60.0, "all", 2)
    assert s.nemesis == ("partition",) and s.test_name == "own-partition"
    assert isinstance(s.seed, int)  # drawn, then recorded


def test_a_file_with_flags_over_it(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text('nemesis = ["kill", "pause"]\nnodes = 3\nzk-nodes = 1\nseed = 7\n'
                    'replication_factor = 3\n[broker]\n"log.flush.interval.messages" = 1\n')
    values = load_file(str(spec))
    assert values["nemesis"] == ["kill", "pause"] and values["zk_nodes"] == 1
    s = build({**values, "nodes": 4})
    assert (s.nodes, s.seed, s.nemesis, s.broker) == (4, 7, ("kill", "pause"), {"log.flush.interval.messages": 1})


@pytest.mark.parametrize("values,words", [
    ({"nemesis": "partition,earthquake"}, ["earthquake"]),
    ({"nemesis": "disk-quake"}, ["disk-quake"]),
    ({"nodes": 0}, ["--nodes"]),
    ({"replication_factor": 6}, ["--replication-factor 6"]),
    ({"min_insync": 4}, ["--min-insync 4"]),
    ({"zk_nodes": 2}, ["--zk-nodes 2"]),
    ({"acks": "2"}, ["--acks"]),
    ({"idempotent": True, "acks": "1"}, ["--idempotent"]),
    ({"time_limit": -1}, ["--time-limit"]),
    ({"nodes": "five"}, ["--nodes", "integer"]),
    ({"unclean_election": "yes"}, ["true or false"]),
    ({"debug_bug": ["ack-before-replication"], "system": "kafka"}, ["--debug-bug"]),
    ({"provider": "ssh"}, ["--nodes-file"]),
    ({"name": "../evil"}, ["--name"]),
    ({"broker": 3}, ["[broker]"]),
])
def test_bad_specs(values, words):
    with pytest.raises(UserError) as e:
        build(values)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("text,words", [
    ("nodes = 3\ncolour = 'blue'\n", ["unknown setting 'colour'"]),
    ("nodes = [3\n", ["not valid TOML"]),
])
def test_bad_spec_files(tmp_path, text, words):
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    with pytest.raises(UserError) as e:
        load_file(str(spec))
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("argv,words", [
    (["--nemesis", "flood"], ["flood"]),
    (["--nodes", "x"], ["invalid int value"]),
    (["--system", "cassandra"], ["invalid choice"]),
    (["-c", "/no/such/spec.toml"], ["cannot read"]),
    (["--consumer-mode", "fan"], ["invalid choice"]),
])
def test_bad_flags_are_one_line_and_exit_2(capsys, tmp_path, argv, words):
    status = main(["run", "--results", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("harness: error:")
    for w in words:
        assert w in err
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


def test_spec_round_trips_to_json():
    s = build({"nemesis": "kill", "seed": 3})
    d = s.to_dict()
    assert d["nemesis"] == ["kill"] and d["seed"] == 3 and d["name"] == "own-kill"
    assert TestSpec(**{**d, "nemesis": tuple(d["nemesis"]), "debug_bug": ()}).seed == 3


def test_report_rejects_a_folder_without_results(tmp_path, capsys):
    status = main(["report", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "results.json" in err
