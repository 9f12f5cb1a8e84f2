"""The docker provider. Integration: five containers come up on their own
network, reach each other and the control machine, get partitioned and
healed, have their daemons killed and paused, mount the faultfs; teardown and
`harness clean` leave no container, network or state behind, and clean
touches nothing without the harness's label.

Skips (saying why) only when no Docker daemon can run here; a missing node
image is built (minutes, once). The rest (image tag, saved state, setup
without Docker) needs no daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest

from core.errors import UserError
from harness.cli import main
from infra import docker as dk
from infra import faultfs, net
from infra import state as st
from infra.cluster import load_cluster, provision, validate_options
from infra.nodes import Node, ProvisionOptions
from infra.remote import RemoteError

from tests.support import clusters_owned_by, need

from .conftest import REPO, harness_cli, need_root

integration = pytest.mark.integration


def test_image_tag_covers_the_recipe_and_the_pinned_packages():
    pins = dk.node_requirements()
    assert [p.split("==")[0].lower() for p in pins] == list(dk.NODE_PYTHON_PACKAGES)
    lock = (dk.REPO / "requirements.lock").read_text().splitlines()
    assert all(p in lock for p in pins)
    tag = dk.image_tag()
    assert len(tag) == 12 and tag == dk.image_tag()
    assert dk.image_name() == f"harness-node:{tag}"


def test_docker_nodes_round_trip_through_saved_state():
    remote = dk.DockerRemote("n2", "harness-c7-n2", run_dir="/var/lib/harness/node/run", tag_scope="c7/n2")
    node = Node("n2", "10.214.7.12", "/var/lib/harness/node/data", "/var/lib/harness/node/logs",
                "/var/lib/harness/node/run", remote)
    again = dk.PROVIDER.load_node(dk.PROVIDER.save_node(node), 10.0)
    assert isinstance(again.remote, dk.DockerRemote)
    assert (again.remote.container, again.remote.tag_scope, again.remote.run_dir) == \
        ("harness-c7-n2", "c7/n2", "/var/lib/harness/node/run")
    assert (again.name, again.address, again.data_dir) == (node.name, node.address, node.data_dir)
    assert dk.PROVIDER.login(again) == "docker exec -it harness-c7-n2 bash"


def test_docker_options_are_checked_like_local_ones():
    validate_options(ProvisionOptions(provider="docker", nodes=3))
    with pytest.raises(UserError, match="--nodes must be between 1 and 200"):
        validate_options(ProvisionOptions(provider="docker", nodes=0))
    with pytest.raises(UserError, match="must be a private range"):
        validate_options(ProvisionOptions(provider="docker", subnet="8.8.8.0/24"))


def test_setup_warns_and_goes_on_without_docker(monkeypatch, capsys):
    def no_docker():
        raise UserError("dockerd did not answer within 60 s; see /var/log/harness-dockerd.log")

    monkeypatch.setattr(dk, "build_image", no_docker)
    assert dk.main(["image"]) == 0
    assert "warning: the docker provider will not work: dockerd did not answer" in capsys.readouterr().err
    assert dk.main(["image", "--strict"]) == 2


def need_docker() -> None:
    need_root()
    try:
        dk.start_dockerd()
    except UserError as e:
        need(False, f"a Docker daemon that can run ({e})")
    dk.build_image()  # the first use builds the node image, as a user's first docker cluster does


def leftovers(cluster_id: str) -> dict[str, list[str]]:
    api = dk.api_client(timeout=60)
    try:
        label = f"{dk.LABEL}={cluster_id}"
        return {"containers": [c["Names"][0] for c in api.containers(all=True, filters={"label": label})],
                "networks": [n["Name"] for n in api.networks(filters={"label": label})],
                "state": [cluster_id] if st.cluster_dir(cluster_id).exists() else []}
    finally:
        api.close()


def nothing(cluster_id: str) -> bool:
    return not any(leftovers(cluster_id).values())


@pytest.fixture
def cluster():
    """A 5-container cluster per test (a few seconds each): no docker cluster of
    this module outlives its test, so the sweep of every docker cluster in
    test_teardown_and_clean_leave_nothing_and_spare_the_rest takes nobody's."""
    need_docker()
    c = provision("docker", ProvisionOptions(nodes=5))
    try:
        yield c
    finally:
        c.teardown()
        assert nothing(c.cluster_id), leftovers(c.cluster_id)


@integration
def test_five_containers_on_their_own_subnet(cluster):
    assert cluster.provider == "docker"
    assert cluster.names == ["n1", "n2", "n3", "n4", "n5"]
    slot = st.slot_of(cluster.cluster_id)
    assert [n.address for n in cluster.nodes] == [f"10.214.{slot}.{10 + i}" for i in range(1, 6)]
    assert cluster.control_address == f"10.214.{slot}.1"
    for n in cluster.nodes:
        assert n.remote.run("hostname").stdout.strip() == n.name
        assert n.address in n.remote.run("ip -4 -o addr show").stdout
        # No default route: nothing a node sends leaves its network.
        assert "default" not in n.remote.run("ip route").stdout


@integration
def test_cluster_status_names_the_docker_transport(cluster, capsys):
    assert main(["cluster", "status", "--cluster", cluster.cluster_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"cluster {cluster.cluster_id}: docker, 5 node(s)")
    assert all("docker ok; daemons: none; partition rules: 0" in line for line in lines[1:6]), lines


@integration
def test_nodes_reach_each_other_and_the_control_machine(cluster):
    n1 = cluster.node("n1")
    for other in cluster.nodes[1:]:
        assert net.can_reach(n1, other)
        assert net.can_reach(other, n1)
        assert net.control_can_reach(other)


@integration
def test_commands_files_and_state(cluster, tmp_path):
    r = cluster.node("n2").remote
    res = r.run("echo out; echo err >&2; exit 3", check=False)
    assert (res.exit_status, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert r.run("echo $A$B", env={"A": "x y", "B": "'z'"}).stdout == "x y'z'\n"
    assert r.run("wc -c", stdin=b"12345").stdout.strip() == "5"
    with pytest.raises(RemoteError, match="timed out after 0.5s"):
        r.run("sleep 5", timeout=0.5)
    with pytest.raises(RemoteError, match="exit status 1"):
        r.run("false")

    data = bytes(range(256)) * 1000
    r.write_file("/tmp/deep/dir/file.bin", data, mode=0o600)
    assert r.read_file("/tmp/deep/dir/file.bin") == data
    assert r.run("stat -c %a /tmp/deep/dir/file.bin").stdout.strip() == "600"
    src = tmp_path / "up.bin"
    src.write_bytes(data[::-1])
    r.put(str(src), "/tmp/up/up.bin")
    r.get("/tmp/up/up.bin", str(tmp_path / "down.bin"))
    assert (tmp_path / "down.bin").read_bytes() == data[::-1]
    with pytest.raises(RemoteError, match="no such file"):
        r.read_file("/tmp/none")

    # Another process rebuilds the nodes from the saved state.
    again = load_cluster(cluster.cluster_id)
    assert [n.address for n in again.nodes] == [n.address for n in cluster.nodes]
    assert again.node("n2").remote.run("hostname").stdout.strip() == "n2"
    again.close()


@integration
def test_partition_cuts_and_heals(cluster):
    n1, n2, n3 = cluster.node("n1"), cluster.node("n2"), cluster.node("n3")
    try:
        net.partition(cluster, net.isolate(cluster, ["n1"]))
        assert not net.can_reach(n1, n2, timeout=1)
        assert not net.can_reach(n3, n1, timeout=1)
        assert net.can_reach(n2, n3)
        assert net.control_can_reach(n1)  # the control machine is never cut off
        rules = net.rules_in_force(cluster)
        assert len(rules["n1"]) == 8 and all(len(rules[n]) == 2 for n in ("n2", "n3", "n4", "n5"))
    finally:
        healed = net.heal(cluster)
    assert sum(healed.values()) == 16
    assert net.can_reach(n1, n2) and net.can_reach(n3, n1)
    assert not any(net.rules_in_force(cluster).values())


@integration
def test_kill_9_and_sigstop(cluster):
    r = cluster.node("n3").remote
    pid = r.start_daemon("sleeper", ["sleep", "1000"], "/var/lib/harness/node/logs/sleeper.out")
    assert r.pid_of("sleeper") == pid
    assert r.signal("sleeper", "STOP")
    assert r.process_state("sleeper") == "T"
    assert r.signal("sleeper", "CONT")
    assert r.process_state("sleeper") == "S"
    assert r.signal("sleeper", "KILL")
    assert r.wait_stopped("sleeper", timeout=5)
    # The container's init reaped it: no zombie is left.
    assert r.run(f"test -e /proc/{pid}", check=False).exit_status != 0
    assert r.daemons() == {"sleeper": None}


@integration
def test_faultfs_mounts(cluster):
    node = cluster.node("n4")
    source, target = "/var/lib/harness/node/data/x.raw", "/var/lib/harness/node/data/x"
    m = faultfs.mount(node, source, target)
    try:
        node.remote.run(f"echo hello > {target}/f && sync")
        assert node.remote.run(f"cat {source}/f").stdout == "hello\n"
        assert faultfs.status(node, target)["mode"] == "passthrough"
        faultfs.set_mode(node, target, "fail")
        assert node.remote.run(f"cat {target}/f", check=False).exit_status != 0
        faultfs.set_mode(node, target, "passthrough")
    finally:
        faultfs.unmount(node, target)
    assert not faultfs.is_mounted(node, target)
    assert m.node == "n4"


@integration
def test_teardown_and_clean_leave_nothing_and_spare_the_rest():
    need_docker()
    api = dk.api_client()
    foreign = f"not-harness-{uuid.uuid4().hex[:8]}"
    api.create_container(dk.image_name(), name=foreign, host_config=api.create_host_config(network_mode="none"))
    try:
        c = provision("docker", ProvisionOptions(nodes=2))
        c.teardown()
        assert nothing(c.cluster_id), leftovers(c.cluster_id)

        c = provision("docker", ProvisionOptions(nodes=2))
        cid = c.cluster_id
        c.node("n1").remote.start_daemon("sleeper", ["sleep", "1000"], "/tmp/sleeper.out")
        c.close()
        assert not nothing(cid)
        res = harness_cli("clean", "--cluster", cid)
        assert res.returncode == 0, res.stderr
        assert f"container {dk.container_name(cid, 'n1')}" in res.stdout
        assert f"docker network {dk.network_name(cid)}" in res.stdout
        assert nothing(cid), leftovers(cid)
        assert harness_cli("clean", "--cluster", cid).stdout.strip() == f"clean: nothing left by cluster {cid}"
        # Docker's sweep for every cluster (what `harness clean` without an id runs
        # for this provider) spares what carries no harness label. Not `harness
        # clean` itself: it would also remove the other tests' local clusters.
        dk.remove_docker_cluster(None)
        assert api.inspect_container(foreign)["Name"] == f"/{foreign}"
    finally:
        api.remove_container(foreign, force=True)
        api.close()



@integration
@pytest.mark.parametrize("phase", ["network", "containers"])
def test_clean_after_kill_9_during_bring_up(phase):
    need_docker()
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "cluster", "up", "--provider", "docker",
                             "--nodes", "3", "--zk-nodes", "0"], cwd=REPO,
                            env={**os.environ, "HARNESS_INFRA_STALL_AT": phase},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until the stall (or exit)
        assert line.strip() == f"stalled at {phase}", (line, proc.stderr.read() if proc.poll() else "")
        (cid,) = clusters_owned_by(proc.pid)
        assert not nothing(cid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        res = harness_cli("clean", "--cluster", cid)
        assert res.returncode == 0, res.stderr
        assert f"docker network {dk.network_name(cid)}" in res.stdout
        assert nothing(cid), leftovers(cid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
