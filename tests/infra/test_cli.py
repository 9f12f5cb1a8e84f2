"""Integration: `harness cluster up|status|down` on the local provider, and its
bad inputs: one line, exit 2, nothing half-built."""

from __future__ import annotations

import json

import pytest

from infra.zookeeper import four_letter, parse_mode

from .conftest import assert_nothing_left, assert_one_line_error, harness_cli, inventory, need_root, new_things

pytestmark = pytest.mark.integration


def test_up_status_down_with_a_one_node_zookeeper():
    need_root()
    up = harness_cli("cluster", "up", "--nodes", "2", "--zk-nodes", "1", "--json")
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    cid = info["cluster_id"]
    try:
        assert [n["name"] for n in info["nodes"]] == ["n1", "n2"]
        n1 = info["nodes"][0]
        assert info["zookeeper"]["connect"] == f"{n1['address']}:2181"
        assert parse_mode(four_letter(n1["address"], 2181)) == "standalone"
        assert n1["ssh"].startswith("ssh -i ") and n1["ssh"].endswith(f"root@{n1['address']}")

        status = harness_cli("cluster", "status", "--cluster", cid)
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        assert lines[0].startswith(f"cluster {cid}: local, 2 node(s)")
        assert "zookeeper pid" in lines[1] and "zookeeper standalone" in lines[1] and "ssh ok" in lines[1]
        assert "daemons: none" in lines[2]
    finally:
        down = harness_cli("cluster", "down", "--cluster", cid)
    assert down.returncode == 0, down.stderr
    assert f"removed namespace harness-{cid}-n1" in down.stdout
    assert_nothing_left(cid)
    assert harness_cli("cluster", "status", "--cluster", cid).returncode == 2


def test_human_output_names_every_node_and_how_to_reach_it():
    need_root()
    up = harness_cli("cluster", "up", "--nodes", "3", "--zk-nodes", "0")
    assert up.returncode == 0, up.stderr
    cid = up.stdout.split()[1].rstrip(":")
    try:
        lines = up.stdout.splitlines()
        assert lines[0].startswith(f"cluster {cid}: local, 3 node(s), subnet 10.213.")
        for i, line in enumerate(lines[1:4], start=1):
            name, address, *ssh = line.split()
            assert name == f"n{i}" and ssh[0] == "ssh" and ssh[-1] == f"root@{address}"
        assert lines[-1].startswith("up in ") and f"--cluster {cid}" in lines[-1]
    finally:
        assert harness_cli("cluster", "down", "--cluster", cid).returncode == 0
    assert_nothing_left(cid)


def test_bad_local_inputs(cluster5):
    taken_subnet = cluster5.meta["subnet"]
    cases = [
        (["cluster", "up", "--provider", "nosuch"], ["unknown provider 'nosuch'"]),
        (["cluster", "up", "--nodes", "2", "--zk-nodes", "3"], ["--zk-nodes 3 needs at least 3 nodes"]),
        (["cluster", "up", "--nodes", "0"], ["--nodes must be between 1 and 200"]),
        (["cluster", "up", "--nodes", "three"], ["invalid int value"]),
        (["cluster", "up", "--subnet", "8.8.8.0/24"], ["must be a private range"]),
        (["cluster", "up", "--subnet", "10.0.0.0/33"], ["is not an IPv4 subnet"]),
        (["cluster", "up", "--subnet", taken_subnet], [f"--subnet {taken_subnet} overlaps"]),
        (["cluster", "up", "--cluster", cluster5.cluster_id], [f"cluster {cluster5.cluster_id} already exists"]),
        (["cluster", "up", "--zk-port", "70000"], ["--zk-port must be a TCP port"]),
        (["cluster", "down", "--cluster", "c249"], ["no cluster c249"]),
        (["cluster", "down", "--cluster", "nonsense"], ["bad cluster id 'nonsense'"]),
        (["cluster", "status", "--cluster", "c248"], ["no cluster c248"]),
        (["cluster"], ["say up, status or down"]),
        (["clean", "--cluster", "x"], ["bad cluster id 'x'"]),
    ]
    for args, fragments in cases:
        before = inventory()
        res = harness_cli(*args)
        assert_one_line_error(res, *fragments)
        assert new_things(before, inventory()) == {}, args
