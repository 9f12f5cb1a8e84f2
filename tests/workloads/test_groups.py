"""Consumer groups (workloads/group.py): their knobs, and members against a real local Apache Kafka."""

from __future__ import annotations

import time

import pytest

from checkers.check import Options, check_history as check
from core.errors import UserError
from workloads.config import GroupConfig, WorkloadConfig

from tests.workloads.history_checks import check_history


@pytest.mark.parametrize("groups, says", [
    ([{"name": "g", "commit": "sometimes"}], "commit 'sometimes': expected one of"),
    ([{"name": "g", "consumers": 0}], "group g consumers must be an integer >= 1"),
    ([{"name": "g", "process-s": -1}], "group g process-s must be a number >= 0"),
    ([{"name": "g", "commit": "auto", "commit-interval-s": 0}], "auto commits need a commit interval"),
    ([{"name": "g", "members": 2}], "groups[0]: unknown setting 'members'"),
    ([{"name": "g"}, {"name": "g"}], "group 'g' named twice"),
    ([{"name": "harness-workload"}], "group 'harness-workload' named twice (or the workload's own group)"),
    ([{"name": "a b"}], "group name 'a b'"),
    ("g", "workload groups must be a list of tables"),
])
def test_bad_group_settings_are_one_line_errors(groups, says):
    with pytest.raises(UserError) as e:
        WorkloadConfig(groups=groups)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_groups_from_tables_take_dashed_keys_and_defaults():
    cfg = WorkloadConfig(groups=[{"commit": "auto", "process-s": 0.2, "commit-interval-s": 0.5}, {"name": "b"}])
    assert cfg.groups == (GroupConfig("harness-group-0", commit="auto", process_s=0.2, commit_interval_s=0.5),
                          GroupConfig("b"))
    assert cfg.to_dict()["groups"][1] == {"name": "b", "consumers": 2, "commit": "after-processing",
                                          "process_s": 0.002, "commit_interval_s": 1.0, "protocol": "classic"}


@pytest.mark.integration
def test_group_members_record_processing_commits_and_the_final_committed_offsets(history, started, topic_name):
    groups = (GroupConfig("after", consumers=2, commit="after-processing", process_s=0.001, commit_interval_s=0.3),
              GroupConfig("before", consumers=1, commit="before-processing", process_s=0.001, commit_interval_s=0),
              GroupConfig("auto", consumers=1, commit="auto", process_s=0.001, commit_interval_s=0.3))
    cfg = WorkloadConfig(topic=topic_name, partitions=3, replication_factor=2, rate=400, producers=1, consumers=0,
                         groups=groups)
    wl = started(cfg)
    time.sleep(8.0)
    stop = wl.stop(timeout=10)
    report = wl.final_reads(30.0)
    history.close()
    assert not stop.threads_left and report.complete, (stop, report)
    facts = check_history(history.path)
    events = facts.events

    member_of = {e["process"]: e["group"] for e in events if e["f"] == "assign" and "group" in e}
    assert set(member_of.values()) == {"after", "before", "auto"}
    # A member joins holding nothing (no generation yet); rebalances carry the
    # group and a generation the coordinator gave.
    assigns = [e for e in events if e["f"] == "assign" and e["type"] == "ok" and e["process"] in member_of]
    joins = {}
    for e in assigns:
        joins.setdefault(e["process"], e)
    assert all(e["partitions"] == [] and "generation" not in e for e in joins.values()), joins
    rebalances = [e for e in assigns if e is not joins[e["process"]]]
    assert rebalances and all(1 <= e["generation"] < 100 for e in rebalances), rebalances
    # Each group's members handled what they were delivered, one record a step.
    assert all(len(e["records"]) == 1 for e in events if e["f"] == "process")
    for name in ("after", "before", "auto"):
        handled = [r for e in events if e["f"] == "process" and e["type"] == "ok" and member_of.get(e["process"]) == name
                   for r in e["records"]]
        assert handled, f"group {name} handled nothing"
        commits = [e for e in events if e["f"] == "commit" and e["type"] == "ok" and e["group"] == name]
        assert commits, f"group {name}: no commit recorded"
        assert all(member_of[e["process"]] == name for e in commits)
    # The commit modes, by where each member's commits fall against its steps.
    before_pid = next(p for p, g in member_of.items() if g == "before")
    mine = [e for e in events if e["process"] == before_pid and e["f"] in ("poll", "process", "commit")
            and e["type"] == "invoke"]
    first_step = next(i for i, e in enumerate(mine) if e["f"] == "process")
    assert mine[first_step - 1]["f"] == "commit"  # committed what was delivered, then handled it
    # Every new partition of a member was followed by a read of where the group stood on it.
    assert any(e["f"] == "committed" and e["type"] == "invoke" and not e.get("final") for e in events)
    # At the end, each group's committed offsets of every partition, once every member had stopped.
    finals = [e for e in events if e["f"] == "committed" and e.get("final")]
    assert sorted(e["group"] for e in finals) == ["after", "auto", "before"]
    last_member_event = max(e["index"] for e in events if e["process"] in member_of)
    assert all(e["index"] > last_member_event and e["partitions"] == [0, 1, 2] for e in finals)
    answers = [e for e in events if e["f"] == "committed" and e["type"] == "ok"
               and any(f["process"] == e["process"] for f in finals)]
    assert len(answers) == 3 and all(len(a["offsets"]) == 3 for a in answers)
    ends = {r.partition: r.reached for r in report.partitions}
    assert all(0 <= o["offset"] <= ends[o["partition"]] for a in answers for o in a["offsets"])

    # The checker reads it all: no member crashed, so nothing was skipped and no commit lost.
    results = check(history.path, Options(engine="local"))
    assert results["anomalies"]["consumer-loss"]["count"] == 0
    assert results["anomalies"]["lost-commit"]["count"] == 0
    assert results["valid"], results["anomalies"]
