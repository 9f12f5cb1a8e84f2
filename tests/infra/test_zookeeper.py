"""Integration: a real 3-node ZooKeeper ensemble on local nodes, used with kazoo."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.waiting import wait_for
from core.errors import UserError
from infra.system import System, collect_logs
from infra.zookeeper import ZooKeeper, ZooKeeperOptions


pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def zk(cluster5):
    ensemble = ZooKeeper()
    ensemble.setup(cluster5)
    try:
        yield ensemble
    finally:
        ensemble.teardown(cluster5)
        for node in cluster5.nodes:
            assert node.remote.pid_of("zookeeper") is None


def test_ensemble_elects_a_leader_and_serves_kazoo_from_the_host(cluster5, zk):
    from kazoo.client import KazooClient

    assert isinstance(zk, System)
    assert [n.name for n in zk.nodes()] == ["n1", "n2", "n3"]
    modes = zk.modes()
    assert sorted(modes.values()) == ["follower", "follower", "leader"]
    assert zk.connect_string() == ",".join(f"{n.address}:2181" for n in cluster5.nodes[:3])
    client = zk.client()
    try:
        client.create("/harness-test/item", b"value-1", makepath=True)
    finally:
        client.stop()
        client.close()
    # Every server, asked alone, has the write: it was replicated.
    for node in zk.nodes():
        single = KazooClient(hosts=f"{node.address}:2181", timeout=5)
        single.start(timeout=10)
        try:
            single.sync("/harness-test/item")
            assert single.get("/harness-test/item")[0] == b"value-1"
        finally:
            single.stop()
            single.close()
    assert cluster5.meta["systems"]["zookeeper"]["nodes"] == ["n1", "n2", "n3"]


def test_killing_the_leader_elects_another_and_it_rejoins(cluster5, zk):
    (leader_name,) = zk.quorum_leaders()
    leader = cluster5.node(leader_name)
    zk.kill(leader)
    assert leader.remote.pid_of("zookeeper") is None
    new_leaders = wait_for(lambda: [l for l in zk.quorum_leaders() if l != leader_name], timeout=30, what="a new leader")
    assert len(new_leaders) == 1
    client = zk.client()
    try:
        client.ensure_path("/harness-test/after-kill")
    finally:
        client.stop()
        client.close()
    zk.start(leader)
    wait_for(lambda: zk.modes()[leader_name] == "follower", timeout=30, what="the old leader to rejoin")


def test_pause_and_resume_a_server(cluster5, zk):
    follower = next(cluster5.node(n) for n, m in zk.modes().items() if m == "follower")
    zk.pause(follower)
    try:
        assert zk.modes()[follower.name] is None  # a stopped JVM answers nothing
        assert zk.has_quorum()  # two of three still serve
    finally:
        zk.resume(follower)
    wait_for(lambda: zk.modes()[follower.name] == "follower", timeout=30, what="the resumed follower")


def test_log_files_are_declared_and_collected(cluster5, zk, tmp_path):
    assert zk.log_files(cluster5.node("n1")) == [f"{cluster5.node('n1').log_dir}/zookeeper.log"]
    assert zk.log_files(cluster5.node("n5")) == []
    got = collect_logs(cluster5, tmp_path, systems=[zk])
    assert got["n4"] == [] and len(got["n1"]) == 1
    text = (tmp_path / "n1" / "zookeeper.log").read_text()
    assert "QuorumPeerConfig" in text or "QuorumPeer" in text
    # Without systems: everything in each node's log dir (the local sshd logs there too).
    every = collect_logs(cluster5, tmp_path / "all")
    assert {Path(p).name for p in every["n1"]} >= {"zookeeper.log", "sshd.log"}
    assert "zookeeper.log" not in {Path(p).name for p in every["n5"]}


def test_rebuilt_from_saved_state(cluster5, zk):
    from infra.cluster import load_cluster

    again = load_cluster(cluster5.cluster_id)
    try:
        restored = ZooKeeper.from_cluster(again)
        assert restored.connect_string() == zk.connect_string()
        assert restored.has_quorum()
    finally:
        again.close()


def test_too_few_nodes_for_the_ensemble(fresh_cluster):
    c = fresh_cluster(nodes=2)
    with pytest.raises(UserError, match="--zk-nodes 3 needs at least 3 nodes; the cluster has 2"):
        ZooKeeper(ZooKeeperOptions(nodes=3)).setup(c)
    assert all(n.remote.pid_of("zookeeper") is None for n in c.nodes)


def test_a_taken_port_is_refused_before_anything_starts(fresh_cluster):
    c = fresh_cluster(nodes=3)
    n2 = c.node("n2")
    n2.remote.start_daemon("squatter", ["python3", "-m", "http.server", "--bind", n2.address, "2181"],
                           f"{n2.log_dir}/squatter.log")
    wait_for(lambda: f"{n2.address}:2181" in n2.remote.run("ss -Htln").stdout, what="the squatter")
    with pytest.raises(UserError) as e:
        ZooKeeper().setup(c)
    msg = str(e.value)
    assert msg.startswith(f"n2: port 2181 on {n2.address} is already in use") and "python" in msg
    assert all(n.remote.pid_of("zookeeper") is None for n in c.nodes)
