"""The fault schedule: one seed, one sequence; grudges of every partition mode."""

from __future__ import annotations

import pytest

from nemesis.partition import PARTITION_MODES, grudge_for
from nemesis.schedule import plan

NAMES = ["n1", "n2", "n3", "n4", "n5"]


def test_the_same_seed_plans_the_same_faults_and_another_seed_does_not():
    a = plan(("partition", "kill", "pause"), "random", 5, 5.0, 120.0, seed=42)
    b = plan(("partition", "kill", "pause"), "random", 5, 5.0, 120.0, seed=42)
    c = plan(("partition", "kill", "pause"), "random", 5, 5.0, 120.0, seed=43)
    assert a == b and a != c
    assert [s.action for s in a] == ["start", "stop"] * (len(a) // 2)
    assert sum(s.delay for s in a[:-1]) < 120.0
    assert {s.fault for s in a} == {"partition", "kill", "pause"}


def test_no_faults_no_steps():
    assert plan((), "random", 5, 5.0, 60.0, seed=1) == []


@pytest.mark.parametrize("targets,count", [("one", 1), ("minority", 2), ("majority", 3), ("all", 5)])
def test_kill_targets(targets, count):
    steps = [s for s in plan(("kill",), targets, 5, 2.0, 60.0, seed=9) if s.action == "start"]
    assert steps and all(len(s.picks) == count for s in steps)


def _symmetric(g):
    return all(a in g.get(b, []) for a, bs in g.items() for b in bs)


def test_partition_modes():
    shuffle = (2, 0, 4, 1, 3)  # n3 n1 n5 n2 n4
    assert grudge_for("isolate-one", NAMES, shuffle) == {
        "n3": ["n1", "n2", "n4", "n5"], "n1": ["n3"], "n5": ["n3"], "n2": ["n3"], "n4": ["n3"]}
    halves = grudge_for("halves", NAMES, shuffle)
    assert halves["n3"] == ["n2", "n4", "n5"] and halves["n2"] == ["n1", "n3"] and _symmetric(halves)
    ring = grudge_for("majorities-ring", NAMES, shuffle)
    # Each node hears a majority (itself and two neighbours), none the same majority.
    assert all(len(cut) == 2 for cut in ring.values()) and len(ring) == 5 and _symmetric(ring)
    seen = {frozenset(set(NAMES) - set(cut)) for cut in ring.values()}
    assert len(seen) == 5
    bridge = grudge_for("bridge", NAMES, shuffle)
    assert "n3" not in bridge and _symmetric(bridge)  # the bridge hears everyone
    assert bridge["n1"] == ["n2", "n4"] and bridge["n5"] == ["n2", "n4"]
    assert all(len(v) == 4 for v in grudge_for("split-all", NAMES, shuffle).values())
    for mode in PARTITION_MODES:
        assert _symmetric(grudge_for(mode, NAMES, shuffle))


def test_leader_and_replica_targets_name_a_topic_partition():
    for targets in ("leaders", "replicas"):
        starts = [s for s in plan(("kill", "partition"), targets, 5, 2.0, 60.0, seed=3, partitions=4)
                  if s.action == "start"]
        assert starts and all(0 <= s.extra["partition"] < 4 for s in starts)
        modes = {s.mode for s in starts if s.fault == "partition"}
        assert modes <= {"isolate-leader", "isolate-replicas"}
