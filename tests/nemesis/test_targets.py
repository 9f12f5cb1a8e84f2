"""Role-aware targets (nemesis/targets.py): followers, out-of-sync, zookeeper,
kraft-controllers and clients. Their draw by the seed, the spec's checks
(one line, before anything runs), the look-up of a partition's followers
and out-of-sync replicas from the system's answers, and the report's words.

The real faults on real clusters are in tests/nemesis/test_target_runs.py.
"""

from __future__ import annotations

import pytest

from core.errors import UserError
from harness.run.spec import build
from nemesis import partition
from nemesis.fault import Context, FaultError, Step, describe_nodes, how_words
from nemesis.registry import FAULTS
from nemesis.schedule import from_records, plan
from nemesis.targets import PER_TOPIC_PARTITION, ROLE_TARGETS, TARGETS, resolve

NEW = ("followers", "out-of-sync", "kraft-controllers", "zookeeper", "clients")


def test_every_new_target_is_in_the_one_vocabulary_and_looked_up_when_the_fault_starts():
    assert set(NEW) <= set(TARGETS) and set(NEW) <= set(ROLE_TARGETS)
    assert {"followers", "out-of-sync", "clients"} <= set(PER_TOPIC_PARTITION)


@pytest.mark.parametrize("target", ["followers", "out-of-sync", "kraft-controllers", "zookeeper"])
def test_a_seed_draws_the_same_schedule_whatever_the_role_target(target):
    """Waits, faults, picks and drawn partitions stay the seed's: only the mode
    differs from the leaders' schedule (the controller's, for targets naming no
    topic partition: those draw none)."""
    like = "leaders" if target in PER_TOPIC_PARTITION else "controller"
    base = plan(("kill", "pause"), like, 5, 2.0, 60.0, seed=7, partitions=4)
    other = plan(("kill", "pause"), target, 5, 2.0, 60.0, seed=7, partitions=4)
    assert [(s.delay, s.fault, s.picks) for s in base] == [(s.delay, s.fault, s.picks) for s in other]
    starts = [s for s in other if s.action == "start"]
    assert starts and all(s.mode == target for s in starts)
    if target in PER_TOPIC_PARTITION:
        assert [s.extra for s in base] == [s.extra for s in other]
        assert all(0 <= s.extra["partition"] < 4 for s in starts)
    else:
        assert all(s.extra == {} for s in starts)


@pytest.mark.parametrize("target,shape", [("followers", "isolate-followers"), ("out-of-sync", "isolate-out-of-sync"),
                                          ("zookeeper", "isolate-zookeeper"),
                                          ("kraft-controllers", "split-kraft-controllers"),
                                          ("clients", "cut-clients")])
def test_a_partition_takes_each_role_target_as_its_shape(target, shape):
    starts = [s for s in plan(("partition",), target, 3, 2.0, 40.0, seed=1, partitions=3) if s.action == "start"]
    assert starts and {s.mode for s in starts} == {shape}
    # The same partitions drawn as for the leader's isolation, when the target names one.
    leaders = [s for s in plan(("partition",), "leaders", 3, 2.0, 40.0, seed=1, partitions=3) if s.action == "start"]
    assert [s.extra for s in starts] == ([s.extra for s in leaders] if target in PER_TOPIC_PARTITION
                                         else [{}] * len(starts))


def test_which_faults_take_which_new_targets():
    for name, f in FAULTS.items():
        # Cutting clients off is a partition; killing or pausing a client's own process, kill and pause;
        # cutting one client process off the network, a partition too.
        assert ("clients" in f.targets) == (name in ("partition", "kill", "pause")), name
        assert ("consumers" in f.targets) == ("producers" in f.targets) == (name in ("partition", "kill", "pause")), name
        # Not on the faultfs; a ZooKeeper node's links are its broker's too.
        assert ("zookeeper" in f.targets) == (name in ("partition", "kill", "pause", "lossy-link", "slow-link")), name
        assert {"followers", "out-of-sync", "kraft-controllers"} <= set(f.targets), name


@pytest.mark.parametrize("values,words", [
    ({"nemesis": "kill", "nemesis_targets": "kraft-controllers"},
     "kraft-controllers: the own system has no KRaft controller quorum (use --system kafka --kafka-mode kraft)"),
    ({"system": "kafka", "nemesis": "pause", "nemesis_targets": "kraft-controllers"},
     "kraft-controllers: Kafka in ZooKeeper mode has no KRaft controller quorum"),
    ({"system": "kafka", "kafka_mode": "kraft", "nemesis": "partition", "nemesis_targets": "zookeeper"},
     "zookeeper: Kafka in KRaft mode does not use ZooKeeper"),
    ({"nemesis": "kill", "nemesis_targets": "clients"}, "a fault that hits a client needs clients running as"),
    ({"nemesis": "disk-stall", "nemesis_targets": "clients"}, "--nemesis-targets clients: disk-stall takes"),
    ({"nemesis": "disk-stall", "nemesis_targets": "zookeeper"}, "--nemesis-targets zookeeper: disk-stall takes"),
    # An explicit schedule names the target (or a partition's shape) in each start.
    ({"nodes": 3, "schedule": [{"delay": 1, "action": "start", "fault": "partition", "mode": "split-kraft-controllers",
                                "picks": []}]},
     "kraft-controllers: the own system has no KRaft controller quorum"),
    ({"nodes": 3, "schedule": [{"delay": 1, "action": "start", "fault": "kill", "mode": "clients", "picks": []}]},
     "a fault that hits a client needs clients running as processes"),
    ({"nodes": 3, "schedule": [{"delay": 1, "action": "start", "fault": "disk-stall", "mode": "clients",
                                "picks": []}]},
     "schedule step 1: mode 'clients': disk-stall takes"),
    ({"nodes": 3, "partitions": 2, "schedule": [{"delay": 1, "action": "start", "fault": "partition",
                                                 "mode": "cut-clients", "picks": [], "partition": 2}]},
     "schedule step 1: partition 2: expected a topic partition 0 to 1"),
])
def test_the_spec_refuses_a_target_the_system_or_fault_cannot_take_in_one_line(values, words):
    with pytest.raises(UserError) as e:
        build(values)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_spec_takes_each_new_target_where_it_applies():
    assert build({"nemesis": "pause,kill,partition", "nemesis_targets": "followers"}).nemesis_targets == "followers"
    assert build({"nemesis": "partition", "nemesis_targets": "clients"}).nemesis_targets == "clients"
    assert build({"nemesis": "kill,partition", "nemesis_targets": "zookeeper"}).nemesis_targets == "zookeeper"
    assert build({"nemesis": "disk-slow", "nemesis_targets": "out-of-sync"}).nemesis_targets == "out-of-sync"
    kraft = build({"system": "kafka", "kafka_mode": "kraft", "nemesis": "kill,partition",
                   "nemesis_targets": "kraft-controllers"})
    assert kraft.nemesis_targets == "kraft-controllers"
    steps = [{"delay": 1, "action": "start", "fault": "partition", "mode": m, "picks": [], "partition": 1}
             for m in ("isolate-followers", "isolate-out-of-sync", "cut-clients", "isolate-zookeeper")]
    schedule = [x for s in steps for x in (s, {"delay": 1, "action": "stop", "fault": "partition"})]
    assert [s.mode for s in from_records(schedule, 3, 2) if s.action == "start"] == [s["mode"] for s in steps]


class Answers:
    """A system's answers about one topic, as the Primaries and PartitionStates
    seams give them: the input of the look-ups tested here (no cluster)."""

    name = "answers"

    def __init__(self, replicas, leader, isr):
        self._replicas, self._leader, self._isr = replicas, leader, isr

    def leaders(self, topic):
        return {0: self._leader} if self._leader else {}

    def replicas(self, topic):
        return {0: list(self._replicas)}

    def controller(self):
        return "n1"

    def partition_states(self, topic):
        return {0: (self._leader, 4, list(self._isr))}

    def truncations(self, node, logs):
        return []


def _ctx(system) -> Context:
    return Context(cluster=None, system=system, topic="t", names=["n1", "n2", "n3"])


def test_followers_are_the_replicas_but_the_leader_of_that_moment():
    ctx = _ctx(Answers(["n1", "n2", "n3"], "n2", ["n2", "n3"]))
    nodes, how = resolve(ctx, Step(0, "start", "kill", "followers", (0,), {"partition": 0}))
    assert nodes == ["n1", "n3"] and how == {"followers_of": 0, "leader": "n2"}
    assert how_words(how) == "the followers of partition 0, led by n2"
    with pytest.raises(FaultError, match="has no leader now"):
        resolve(_ctx(Answers(["n1", "n2"], None, [])), Step(0, "start", "kill", "followers", (0,), {"partition": 0}))


def test_out_of_sync_replicas_are_those_outside_the_isr_and_none_is_a_clear_error():
    ctx = _ctx(Answers(["n1", "n2", "n3"], "n2", ["n2"]))
    nodes, how = resolve(ctx, Step(0, "start", "pause", "out-of-sync", (0,), {"partition": 0}))
    assert nodes == ["n1", "n3"] and how == {"out_of_sync_of": 0, "isr": ["n2"]}
    assert describe_nodes({"nodes": nodes, **how}, False)[0] == \
        "n1 n3 (the replicas of partition 0 out of its ISR, ISR n2)"
    in_sync = _ctx(Answers(["n1", "n2", "n3"], "n2", ["n3", "n1", "n2"]))
    with pytest.raises(FaultError) as e:
        resolve(in_sync, Step(0, "start", "pause", "out-of-sync", (0,), {"partition": 0}))
    assert str(e.value) == ("out-of-sync: every replica of partition 0 is in its ISR (n1 n2 n3): "
                            "nothing to hit, fault not applied")


def test_a_system_without_a_kraft_quorum_or_a_cluster_without_zookeeper_is_a_fault_error():
    ctx = _ctx(Answers(["n1"], "n1", ["n1"]))
    with pytest.raises(FaultError, match="runs no KRaft controller quorum"):
        resolve(ctx, Step(0, "start", "kill", "kraft-controllers", (0,)))
    with pytest.raises(FaultError, match=r"only a partition \(clients\) and kill and pause hit the clients"):
        resolve(ctx, Step(0, "start", "disk-stall", "clients", (0,)))


def test_port_cuts_in_words():
    zk = {"mode": "isolate-zookeeper", "zookeeper": True, "isolated": ["n1", "n2", "n3"],
          "cut_from": ["n1", "n2", "n3"], "port": 2181,
          "verified": {"ok": True, "probes": {"n1->n1:2181": "cut", "n2->n1:2181": "cut"},
                       "still": {"control->n1:2181": "reached"}}}
    assert partition.describe(zk, False) == (
        "brokers n1 n2 n3 cut off from ZooKeeper (port 2181) on n1 n2 n3 (isolate-zookeeper, the ZooKeeper nodes)",
        "verified: 2 links cut; 1 of 1 links that stay open answer")
    clients = {"mode": "cut-clients", "clients_of": 1, "isolated": "n2", "port": 9092,
               "verified": {"ok": False, "probes": {"control->n2:9092": "reached"},
                            "still": {"n1->n2:9092": "reached", "n3->n2:9092": "cut"}}}
    assert partition.describe(clients, False) == (
        "the clients cut off from n2 (port 9092) (cut-clients, the leader of partition 1)",
        "NOT verified: 0 of 1 links cut; 1 of 2 links that stay open answer")
    healed = {"healed": {"n2": 2}, "verified": {"ok": True, "probes": {"control->n2:9092": "reached"},
                                                 "still": {"n1->n2:9092": "reached"}}}
    assert partition.describe(healed, True) == ("healed: 2 rules removed on n2", "verified: 2 links answer again")
    followers = {"mode": "isolate-followers", "followers_of": 0, "leader": "n1", "isolated": ["n2", "n3"],
                 "grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]},
                 "verified": {"ok": True, "probes": {"n1->n2": "cut"}}}
    assert partition.describe(followers, False)[0] == \
        "n1 | n2 n3 (isolate-followers, isolated n2 n3, the followers of partition 0, led by n1)"


class GroupAnswers:
    """A Kafka-like system's answer about where a group's commits are replicated
    (the GroupOffsets seam): the input of the group-follower look-up."""

    name = "answers"

    def __init__(self, leader, replicas, isr):
        self.state = (7, leader, list(replicas), list(isr))

    def group_offsets_state(self, group):
        assert group == "billing"
        return self.state


class GroupRun:
    """The workload's clients as the look-up reads them: the run's first group."""

    class config:
        groups = [type("G", (), {"name": "billing"})]


def _group_ctx(system) -> Context:
    return Context(cluster=None, system=system, topic="t", names=["n1", "n2", "n3"], clients=GroupRun())


def test_a_group_follower_is_an_in_sync_follower_of_the_group_s_offsets_partition_chosen_by_the_pick():
    ctx = _group_ctx(GroupAnswers("n2", ["n3", "n2", "n1", "n4"], ["n2", "n3", "n1"]))
    chosen = [resolve(ctx, Step(0, "start", "kill", "group-follower", (pick,)))[0] for pick in range(4)]
    # n4 is out of the ISR (the coordinator's commits no longer wait for it): never picked.
    assert chosen == [["n1"], ["n3"], ["n1"], ["n3"]]
    nodes, how = resolve(ctx, Step(0, "start", "kill", "group-follower", (1,)))
    assert how == {"group_follower_of": "billing", "offsets_partition": 7, "leader": "n2"}
    assert describe_nodes({"nodes": nodes, **how}, False)[0] == \
        "n3 (a follower of __consumer_offsets partition 7 (the commits of group billing, led by the coordinator n2))"
    # A partition isolates the same follower.
    step = [s for s in from_records([{"delay": 1, "action": "start", "fault": "partition",
                                      "mode": "isolate-group-follower", "picks": [1]}], 3, 1)][0]
    assert partition.ROLE_SHAPES and "isolate-group-follower" in partition.ROLE_SHAPES
    assert partition.MODE_OF_TARGET["group-follower"] == step.mode


@pytest.mark.parametrize("answers,words", [
    (GroupAnswers("n2", ["n2"], ["n2"]), "partition 7 of the commits of group billing has no follower in its ISR now "
                                         "(replicas n2, ISR n2): fault not applied"),
    (GroupAnswers("n2", ["n1", "n2"], ["n2"]), "has no follower in its ISR now (replicas n1 n2, ISR n2)"),
    (GroupAnswers(None, ["n1", "n2"], []), "has no leader now"),
])
def test_a_group_without_an_in_sync_follower_is_a_fault_error_saying_why(answers, words):
    with pytest.raises(FaultError) as e:
        resolve(_group_ctx(answers), Step(0, "start", "pause", "group-follower", (0,)))
    assert words in str(e.value)


def test_the_group_follower_target_is_kafka_s_and_needs_a_group():
    with pytest.raises(UserError, match="group-follower: the own system keeps no replicated partition"):
        build({"nemesis": "kill", "nemesis_targets": "group-follower", "consumer_mode": "subscribe"})
    with pytest.raises(UserError, match="group-follower: the target needs a consumer group"):
        build({"system": "kafka", "nemesis": "kill", "nemesis_targets": "group-follower"})
    assert build({"system": "kafka", "nemesis": "kill,pause,partition", "nemesis_targets": "group-follower",
                  "consumer_mode": "subscribe"}).nemesis_targets == "group-follower"
    with pytest.raises(FaultError, match="keeps no replicated partition"):
        resolve(_group_ctx(Answers(["n1"], "n1", ["n1"])), Step(0, "start", "kill", "group-follower", (0,)))
