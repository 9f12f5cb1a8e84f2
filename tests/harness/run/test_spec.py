"""The run spec: flags, TOML files, flags over files, and one-line errors."""

from __future__ import annotations

import argparse

import pytest

from checkers.registry import NAMES as ANOMALIES
from core.errors import UserError
from harness.cli import main
from harness.run.spec import add_arguments, build, expect_words, expectation, from_args, load_file, spec_file


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
    ({"replace_on_info": "no"}, ["--replace-on-info", "true or false"]),
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
    # The provider flags `harness cluster up` has, checked the same way.
    (["--provider", "nosuch"], ["unknown provider 'nosuch'"]),
    (["--provider", "ssh"], ["needs --nodes-file FILE or --hosts"]),
    (["--provider", "ssh", "--hosts", "h1,h2", "--ssh-port", "0"], ["--ssh-port must be a TCP port"]),
    (["--provider", "ssh", "--hosts", "h1", "--known-hosts", "/no/such/kh"], ["--known-hosts /no/such/kh"]),
    (["--provider", "ssh", "--hosts", "h1", "--ssh-key", "/no/such/key"], ["--ssh-key /no/such/key: no such file"]),
    (["--subnet", "8.8.8.0/24"], ["must be a private range"]),
    (["--cluster", "x1"], ["bad cluster id 'x1'"]),
    (["--nodes-file", "nodes.txt"], ["--nodes-file is for --provider ssh"]),
])
def test_bad_flags_are_one_line_and_exit_2(capsys, tmp_path, argv, words):
    status = main(["run", "--results", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("harness: error:")
    for w in words:
        assert w in err
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


def test_clients_are_replaced_after_an_indeterminate_operation_unless_a_spec_keeps_them(tmp_path):
    assert build({}).replace_on_info is True
    spec = tmp_path / "spec.toml"
    spec.write_text("replace-on-info = false\n")
    assert build(load_file(str(spec))).replace_on_info is False
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_args(parser.parse_args(["--no-replace-on-info"])).replace_on_info is False
    assert from_args(parser.parse_args([])).replace_on_info is True


def test_spec_round_trips_to_json():
    s = build({"nemesis": "kill", "seed": 3})
    d = s.to_dict()
    assert d["nemesis"] == ["kill"] and d["seed"] == 3 and d["name"] == "own-kill"
    assert d["debug_bug"] == [] and "kafka_mode" not in d  # the chosen system's own settings, flat
    assert build(d).to_dict() == d


def test_a_systems_own_settings_come_from_its_record():
    own = build({"debug_bug": "no-dedup", "seed": 1})
    assert own.system_options == {"debug_bug": ("no-dedup",)}
    assert own.to_dict()["debug_bug"] == ["no-dedup"]
    # Another system's setting at its default is no error (a file may name it); any other value is.
    assert build({"kafka_mode": "zk", "seed": 1}).system_options == {"debug_bug": ()}
    with pytest.raises(UserError, match="--kafka-dist is a setting of --system kafka"):
        build({"kafka_dist": "/opt/kafka"})
    with pytest.raises(UserError, match="--kafka-mode 'raft': expected one of zk, kraft"):
        build({"system": "kafka", "kafka_mode": "raft"})
    with pytest.raises(UserError, match="--kafka-version: expected a string"):
        build({"system": "kafka", "kafka_version": 3})


def test_report_rejects_a_folder_without_results(tmp_path, capsys):
    status = main(["report", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "results.json" in err


def test_run_and_cluster_up_share_the_provider_flags():
    from harness.cli import build_parser

    def flags(*path):
        parser = build_parser()
        for name in path:
            parser = next(a for a in parser._actions if a.dest in ("command", "cluster_command")).choices[name]
        group = next(g for g in parser._action_groups if g.title == "cluster")
        return [(a.option_strings, a.dest, a.type, a.help) for a in group._group_actions]

    assert flags("run") == flags("cluster", "up")
    assert ["--hosts"] in [f[0] for f in flags("run")] and ["--subnet"] in [f[0] for f in flags("run")]


def test_a_run_passes_every_provider_setting_on():
    s = build({"provider": "ssh", "hosts": ["a1", "root@a2:2222"], "ssh_port": 2200, "nodes": 2, "zk_nodes": 1, "replication_factor": 2,
               "remote_dir": "/srv/h", "ssh_insecure": True})
    o = s.provision_options()
    assert (o.provider, o.hosts, o.ssh_port, o.nodes, o.remote_dir, o.ssh_insecure) == (
        "ssh", ["a1", "root@a2:2222"], 2200, 2, "/srv/h", True)
    assert build({}).provision_options().subnet is None


def _results(counts: dict, groups: list[dict]) -> dict:
    """results.json's parts an [expect] table reads: anomaly counts and the node-log scan."""
    return {"valid": not any(counts.values()),
            "anomalies": {a: {"count": counts.get(a, 0)} for a in ANOMALIES},
            "node_logs": {"groups": groups}}


def test_expect_one_of_and_logged():
    crc = {"signature": "ERROR [ReplicaFetcher replicaId=<n>] Found invalid messages during fetch — "
                        "org.apache.kafka.common.errors.CorruptRecordException: Record is corrupt",
           "first": {"text": "[2026-11-23 10:00:00,000] ERROR ... (stored crc = 123)"}}
    lost = _results({"lost-acked": 3}, [crc])
    expect = {"valid": False, "one-of": ["lost-acked", "lost-write"], "logged": ["CorruptRecord", r"stored crc = \d+"]}
    assert expectation(expect, lost) == (True, [])
    assert expectation(expect, _results({"inconsistent-offset": 2}, [])) == (False, [
        "expected one of lost-acked, lost-write present, found none",
        "expected a node log record matching /CorruptRecord/, found none",
        r"expected a node log record matching /stored crc = \d+/, found none"])
    assert expect_words(expect) == r"invalid, one of lost-acked lost-write present, logged /CorruptRecord/, " \
                                   r"logged /stored crc = \d+/"
    for bad in ({"one-of": []}, {"one-of": ["lost-write", "banana"]}, {"one-of": "lost-write"},
                {"logged": "(unclosed"}, {"logged": [""]}, {"logged": 3}):
        with pytest.raises(UserError, match="expect"):
            build({"expect": bad})


def test_a_scenarios_control_drops_its_bugs_and_expects_valid():
    import argparse

    from harness.run.spec import add_arguments, from_args
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    planted = from_args(parser.parse_args(["--scenario", "own-bug-ignore-min-isr", "--seed", "3"]))
    control = from_args(parser.parse_args(["--scenario", "own-bug-ignore-min-isr", "--seed", "3", "--control"]))
    assert planted.system_options["debug_bug"] == ("ignore-min-isr",) and planted.expect != {"valid": True}
    # An unclean election may lose records never acknowledged: this control must lose nothing acknowledged.
    assert not control.system_options.get("debug_bug")
    assert control.expect == {"lost-acked": "absent", "lost-write": "absent"}
    assert control.test_name == "own-bug-ignore-min-isr-control"
    # Everything else the same: the faults, the settings, the seed.
    same = ("nemesis", "schedule", "nodes", "acks", "min_insync", "unclean_election", "broker", "seed", "time_limit")
    assert [getattr(control, f) for f in same] == [getattr(planted, f) for f in same]
    assert from_args(parser.parse_args(["--scenario", "own-bug-no-dedup", "--control"])).expect == {"valid": True}
    with pytest.raises(UserError, match="plants no bug"):
        from_args(parser.parse_args(["--scenario", "own-safe-one-fault", "--control"]))
    with pytest.raises(UserError, match="control-expect.lost-acked"):
        build({"debug_bug": ["no-dedup"], "control_expect": {"lost-acked": "gone"}})


def test_consumer_groups_come_from_groups_tables_and_go_back_to_a_spec_file(tmp_path):

    spec = tmp_path / "spec.toml"
    spec.write_text('nemesis = ["kill"]\nseed = 2\n\n[[groups]]\nname = "g1"\ncommit = "auto"\nprocess-s = 0.2\n\n'
                    '[[groups]]\nname = "g2"\nconsumers = 3\n')
    s = build(load_file(str(spec)))
    assert [(g["name"], g["commit"], g["consumers"], g["process_s"]) for g in s.groups] == [
        ("g1", "auto", 2, 0.2), ("g2", "after-processing", 3, 0.002)]
    again = tmp_path / "again.toml"
    again.write_text(spec_file(s.to_dict()))
    assert build(load_file(str(again))).groups == s.groups
    for bad, words in ([{"name": "g", "commit": "never"}], "commit 'never'"), ("g1", "must be a list of tables"), \
            ([{"name": "g"}, {"name": "g"}], "group 'g' named twice"):
        with pytest.raises(UserError, match=words.replace("[", r"\[")):
            build({"groups": bad})


def test_the_group_coordinator_target_needs_a_consumer_group():
    with pytest.raises(UserError, match="group-coordinator: the target needs a consumer group"):
        build({"nemesis": "kill", "nemesis_targets": "group-coordinator"})
    assert build({"nemesis": "kill,partition", "nemesis_targets": "group-coordinator",
                  "consumer_mode": "subscribe"}).nemesis_targets == "group-coordinator"


def test_a_transactions_table_is_checked_and_written_back(tmp_path):
    spec = tmp_path / "txn.toml"
    spec.write_text('nemesis = ["kill"]\nnemesis-targets = "txn-coordinator"\n\n'
                    '[transactions]\nproducers = 3\nabort-probability = 0.25\n')
    s = build(load_file(str(spec)))
    assert s.transactions["producers"] == 3 and s.transactions["abort_probability"] == 0.25
    again = tmp_path / "again.toml"
    again.write_text(spec_file(s.to_dict()))
    assert build(load_file(str(again))).transactions == s.transactions
    with pytest.raises(UserError, match="transactions: unknown setting 'abort'"):
        build({"transactions": {"abort": 1}})
    with pytest.raises(UserError, match="txn-coordinator: the target needs transactions"):
        build({"nemesis": "pause", "nemesis_targets": "txn-coordinator"})


def test_the_consumers_target_needs_group_members_running_as_processes():
    group = [{"name": "g", "commit": "auto"}]
    with pytest.raises(UserError, match="consumers: the target needs group members running as processes"):
        build({"nemesis": "kill", "nemesis_targets": "consumers", "groups": group})
    with pytest.raises(UserError, match="a fault that hits a client needs clients running as processes"):
        build({"nemesis": "kill", "nemesis_targets": "producers"})
    with pytest.raises(UserError, match="a fault that hits a client needs clients running as processes"):
        build({"nemesis": "pause", "nemesis_targets": "clients"})
    assert build({"nemesis": "partition", "nemesis_targets": "clients"}).nemesis_targets == "clients"
    assert build({"nemesis": "kill", "nemesis_targets": "producers", "client_processes": True}).client_processes
    # A partition of a member or a producer: one client cut off the network (nemesis/clients.py).
    with pytest.raises(UserError, match="consumers: the target needs group members running as processes"):
        build({"nemesis": "partition", "nemesis_targets": "consumers", "groups": group})
    with pytest.raises(UserError, match="a fault that hits a client needs clients running as processes"):
        build({"nemesis": "partition", "nemesis_targets": "producers"})
    assert build({"nemesis": "partition", "nemesis_targets": "consumers", "groups": group,
                  "client_processes": True}).nemesis_targets == "consumers"
    s = build({"nemesis": "kill,pause", "nemesis_targets": "consumers", "groups": group, "client_processes": True})
    assert s.client_processes and s.nemesis_targets == "consumers"


def test_a_scenario_extends_another_and_says_only_what_differs(tmp_path, monkeypatch):
    from harness.run import spec as specs
    monkeypatch.setattr(specs, "SCENARIOS", tmp_path)
    (tmp_path / "base.toml").write_text('description = "the base"\nsystem = "kafka"\nnodes = 3\nrate = 300.0\n'
                                        '[broker]\n"a.b" = 1\n"c.d" = 2\n[expect]\nvalid = true\n')
    (tmp_path / "twin.toml").write_text('description = "the twin"\nextends = "base"\nidempotent = true\n'
                                        '[broker]\n"a.b" = 5\n')
    (tmp_path / "twin-of-twin.toml").write_text('extends = "twin"\nrate = 100.0\n')
    twin = specs.load_file(str(tmp_path / "twin.toml"))
    assert twin == {"description": "the twin", "system": "kafka", "nodes": 3, "rate": 300.0, "idempotent": True,
                    "broker": {"a.b": 5}, "expect": {"valid": True}}  # a table replaces the whole table
    assert specs.load_file(str(tmp_path / "twin-of-twin.toml"))["rate"] == 100.0
    (tmp_path / "loop-a.toml").write_text('extends = "loop-b"\n')
    (tmp_path / "loop-b.toml").write_text('extends = "loop-a"\n')
    for text, words in (('extends = "loop-a"\n', "more than 4 deep"), ('extends = "nope"\n', "no such scenario"),
                        ("extends = 3\n", "expected a scenario name")):
        (tmp_path / "bad.toml").write_text(text)
        with pytest.raises(UserError) as e:
            specs.load_file(str(tmp_path / "bad.toml"))
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_hung_transaction_fails_the_run_and_is_an_expectation():
    """The final reads' partitions an open transaction held back (run.json
    final_reads) become liveness `hung_transactions`, a failure in words,
    and what `hung-transaction` in [expect] is measured against."""
    from harness.run.spec import hung_transactions, liveness_failed

    final_reads = {"partitions": [
        {"partition": 0, "stable_offset": None, "high_watermark": 90, "done": True},
        {"partition": 2, "stable_offset": 41, "high_watermark": 97, "done": False}]}
    hung = hung_transactions(final_reads)
    assert hung == [{"partition": 2, "stable_offset": 41, "high_watermark": 97}]
    results = {"valid": True, "anomalies": {}, "liveness": {"verdict": "ok", "hung_transactions": hung}}
    why = liveness_failed({}, results)
    assert len(why) == 1 and why[0].startswith("HUNG TRANSACTION: partition 2's last stable offset stayed at 41")
    assert expectation({"hung-transaction": "present"}, results) == (True, [])
    assert expectation({"hung-transaction": "absent"}, results)[0] is False
    calm = {"valid": True, "anomalies": {}, "liveness": {"verdict": "ok"}}
    assert liveness_failed({}, calm) == [] and expectation({"hung-transaction": "absent"}, calm) == (True, [])
    assert hung_transactions(None) == []
    # A scenario may say so: the key and its two words pass the spec's checks, another word does not.
    for table in ("expect", "control_expect"):
        assert build({table: {"hung-transaction": "present"}})
        with pytest.raises(UserError, match="hung-transaction: expected"):
            build({table: {"hung-transaction": "yes"}})
    assert build({"expect": {"max-starved-member-s": 10}})


def test_a_scenario_pinning_a_stall_expects_a_starved_member_at_least_that_long():
    from harness.run.spec import liveness_failed

    def results(starved):
        return {"valid": True, "anomalies": {}, "liveness": {"verdict": "ok", "starved_member_s": starved}}

    pin = {"min-starved-member-s": 10}
    assert expectation(pin, results(66.4)) == (True, []) and liveness_failed(pin, results(66.4)) == []
    assert expectation(pin, results(10)) == (True, [])
    assert expectation(pin, results(8.5)) == (False, ["expected a group member starved at least 10 s, measured 8.5 s"])
    assert expectation(pin, results(None))[1] == ["expected a group member starved at least 10 s, measured none"]
    assert liveness_failed(pin, results(8.5)) == ["expected a group member starved at least 10 s, measured 8.5 s"]
    # The bound from above is unchanged.
    assert expectation({"max-starved-member-s": 10}, results(66.4))[0] is False
    assert build({"expect": pin})
    with pytest.raises(UserError, match="min-starved-member-s: expected a number of seconds"):
        build({"expect": {"min-starved-member-s": "long"}})
