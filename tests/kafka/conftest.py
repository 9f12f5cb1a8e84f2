"""Helpers for the Kafka system's tests: run the harness as a user does, and
check that a run left nothing of its own behind.

Other developers run clusters on this machine at the same time, in the same
state root (a private root would escape the lock that hands out cluster
slots, and two runs could take one slot). So "nothing left" means nothing of
*this* run's cluster: its namespaces, and processes under its node
folders, found from the slot its addresses (10.213.<slot>.x) name. If
another run has taken the slot since, there is nothing to judge.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from infra import kafka, state as st
from infra.cluster import ProvisionOptions, provision
from infra.kafka import KafkaOptions, KafkaSystem
from tests.support import harness, harness_run, need

def _cluster_of(run_dir: Path) -> str | None:
    run_json = run_dir / "run.json"
    if not run_json.is_file():
        return None
    addresses = list((json.loads(run_json.read_text()).get("nodes") or {}).values())
    return f"c{addresses[0].split('.')[2]}" if addresses else None


def _taken_by_another_run(cid: str) -> bool:
    state = st.read_state(cid) or {}
    owner = state.get("owner_pid")
    return bool(owner) and Path(f"/proc/{owner}").exists()


def left_behind(run_dir: Path) -> dict:
    """Namespaces and processes of the run's cluster that are still there."""
    cid = _cluster_of(run_dir)
    if cid is None or _taken_by_another_run(cid):
        return {"processes": [], "namespaces": []}
    marker = f"{st.cluster_dir(cid)}/"
    procs = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    mine = [p.strip() for p in procs[1:] if marker in p]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return {"processes": mine, "namespaces": [ns for ns in listed if ns.startswith(f"harness-{cid}-")]}


def _clean_left_clusters(folder: Path) -> None:
    """A cluster that one of the folder's runs left (the run died) is removed by its
    id (a bare `harness clean` would take other developers' clusters)."""
    for run_json in folder.glob("*/*/run.json"):
        cid = _cluster_of(run_json.parent)
        if cid and st.cluster_dir(cid).exists() and not _taken_by_another_run(cid):
            harness("clean", "--cluster", cid, timeout=120)


@pytest.fixture
def results(tmp_path):
    """A results folder, cleaned of what its runs left afterwards."""
    folder = tmp_path / "results"
    try:
        yield folder
    finally:
        _clean_left_clusters(folder)


@pytest.fixture(scope="session")
def acks1_leader_kill(tmp_path_factory, shared_check_service):
    """One run of kafka-acks1-leader-kill-slow-followers (30 s, seed 7),
    which the run test (its verdict, its kills) and the states test (its
    timeline) both read: (the completed process, its run folder). The
    dependable form of kafka-acks1-leader-kill, whose kills lose writes only
    where the followers lag at that moment: a run of it once lost none
    (docs/decisions.md, "The tests' acks=1 run holds the followers back")."""
    folder = tmp_path_factory.mktemp("kafka-leader-kill") / "results"
    try:
        yield harness_run(folder, "--scenario", "kafka-acks1-leader-kill-slow-followers", "--time-limit", "30",
                          "--seed", "7")
    finally:
        _clean_left_clusters(folder)


@pytest.fixture(scope="module")
def node():
    """One node of a local cluster of its own, for a module's tests."""
    cluster = provision("local", ProvisionOptions(nodes=1))
    try:
        yield cluster.nodes[0]
    finally:
        cluster.teardown()


@pytest.fixture
def kraft(node, tmp_path):
    """Real Kafka 3.9 in KRaft mode on the node (a 1-node cluster needs no ZooKeeper)."""
    need(kafka.kafka_dist.is_cached(kafka.DEFAULT_VERSION, kafka.cache_dir()),
         f"Kafka {kafka.DEFAULT_VERSION}'s jars in .cache/kafka (make setup)")

    def make(**options) -> KafkaSystem:
        system = KafkaSystem("unused:2181", {"offsets.topic.replication.factor": 1},
                             KafkaOptions(mode="kraft", start_timeout=90, **options))
        made.append(system)
        return system

    made: list[KafkaSystem] = []
    try:
        yield make
    finally:
        for system in made:
            system.teardown(None)
