"""Integration: the ssh provider against real sshds (the local nodes' ones),
and its bad inputs through the CLI: each one line, exit 2, nothing left."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from core.waiting import free_ports, wait_for
from infra import hostops
from infra.cluster import ProvisionOptions, provision


from .conftest import assert_nothing_left, assert_one_line_error, harness_cli, inventory, new_things

pytestmark = pytest.mark.integration


def keys_of(cluster) -> tuple[str, str]:
    keys = cluster.state_dir / "keys"
    return str(keys / "id_ed25519"), str(keys / "known_hosts")


def write_nodes_file(path: Path, cluster, count: int = 3, prefix: str = "a") -> Path:
    lines = ["# hosts for the ssh provider test"]
    lines += [f"{prefix}{i} root@{n.address}:22" for i, n in enumerate(cluster.nodes[:count], start=1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ssh_provider_reaches_named_hosts(cluster5, tmp_path):
    key, known = keys_of(cluster5)
    nodes_file = write_nodes_file(tmp_path / "nodes.txt", cluster5)
    remote_dir = tmp_path / "remote"
    c = provision("ssh", ProvisionOptions(nodes_file=str(nodes_file), ssh_key=key, known_hosts=known,
                                          remote_dir=str(remote_dir)))
    try:
        assert c.provider == "ssh" and c.names == ["a1", "a2", "a3"]
        assert [n.address for n in c.nodes] == [n.address for n in cluster5.nodes[:3]]
        assert c.control_address == cluster5.control_address
        for node in c.nodes:
            assert node.data_dir == f"{remote_dir}/{node.name}/data"
            assert Path(node.data_dir).is_dir() and Path(node.log_dir).is_dir() and Path(node.run_dir).is_dir()
            assert node.remote.run("ip -4 -o addr show eth0").stdout.split()[3] == f"{node.address}/24"
        a2 = c.node("a2")
        pid = a2.remote.start_daemon("sleeper", ["sleep", "300"], f"{a2.log_dir}/sleeper.log")
        assert a2.remote.is_running(pid)
    finally:
        removed = c.teardown()
    assert f"a2: daemon sleeper (pid {pid})" in removed
    assert not hostops.is_alive(pid)
    assert_nothing_left(c.cluster_id)
    assert Path(c.nodes[0].log_dir).is_dir()  # the hosts' logs stay for the user


def test_cli_up_status_down_over_ssh(cluster5, tmp_path):
    key, known = keys_of(cluster5)
    nodes_file = write_nodes_file(tmp_path / "nodes.txt", cluster5, count=2)
    up = harness_cli("cluster", "up", "--provider", "ssh", "--nodes-file", str(nodes_file), "--ssh-key", key,
                     "--known-hosts", known, "--remote-dir", str(tmp_path / "r"), "--zk-nodes", "1",
                     "--zk-port", "2481")
    assert up.returncode == 0, up.stderr
    cid = up.stdout.split()[1].rstrip(":")
    try:
        assert "zookeeper: " + f"{cluster5.nodes[0].address}:2481" in up.stdout
        status = harness_cli("cluster", "status", "--cluster", cid)
        assert status.returncode == 0, status.stderr
        assert "zookeeper standalone" in status.stdout and "a1" in status.stdout
    finally:
        down = harness_cli("cluster", "down", "--cluster", cid)
    assert down.returncode == 0, down.stderr
    assert "a1: daemon zookeeper" in down.stdout
    assert_nothing_left(cid)


def test_insecure_mode_warns_loudly(cluster5, tmp_path):
    key, _ = keys_of(cluster5)
    nodes_file = write_nodes_file(tmp_path / "nodes.txt", cluster5, count=1)
    empty_known = tmp_path / "known_hosts"
    empty_known.write_text("")
    up = harness_cli("cluster", "up", "--provider", "ssh", "--nodes-file", str(nodes_file), "--ssh-key", key,
                     "--known-hosts", str(empty_known), "--ssh-insecure", "--remote-dir", str(tmp_path / "r"),
                     "--zk-nodes", "0")
    assert up.returncode == 0, up.stderr
    cid = up.stdout.split()[1].rstrip(":")
    assert "WARNING: --ssh-insecure: SSH host keys are NOT checked" in up.stderr
    down = harness_cli("cluster", "down", "--cluster", cid)
    assert down.returncode == 0 and "is down" in down.stdout
    assert_nothing_left(cid)


def closed_port() -> int:
    return free_ports(1)[0]


@pytest.fixture
def not_ssh_port():
    """A loopback port whose server answers, but not with SSH."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_bad_ssh_inputs_are_one_line_errors_and_leave_nothing(cluster5, tmp_path, not_ssh_port):
    key, known = keys_of(cluster5)
    nodes_file = write_nodes_file(tmp_path / "nodes.txt", cluster5, count=3)
    n1 = cluster5.node("n1")
    empty_known = tmp_path / "empty_known_hosts"
    empty_known.write_text("")
    wrong_key = tmp_path / "wrong_key"
    hostops.generate_ed25519(wrong_key)
    other_host_key = hostops.generate_ed25519(tmp_path / "other_host_key")
    lying_known = tmp_path / "lying_known_hosts"
    lying_known.write_text(f"{n1.address} {other_host_key}\n")
    broken_nodes = tmp_path / "broken.txt"
    broken_nodes.write_text(f"n1 {n1.address}\nn2 root@{n1.address}:notaport\n")
    r = str(tmp_path / "r")
    ssh = ["cluster", "up", "--provider", "ssh", "--remote-dir", r, "--zk-nodes", "0"]

    # Someone already listens on the ZooKeeper port of the second host.
    n2 = cluster5.node("n2")
    n2.remote.start_daemon("squatter", ["python3", "-m", "http.server", "--bind", n2.address, "2381"],
                           f"{n2.log_dir}/squatter.log")
    try:
        wait_for(lambda: f"{n2.address}:2381" in n2.remote.run("ss -Htln").stdout, what="the squatter")
        cases = [
            (["--provider", "nosuch"], ["unknown provider 'nosuch'"]),
            (ssh + ["--nodes-file", str(broken_nodes)], [f"{broken_nodes}:2: bad port 'notaport'"]),
            (ssh + ["--nodes-file", str(tmp_path / "missing.txt")], ["--nodes-file", "No such file"]),
            (ssh + ["--hosts", f"127.0.0.1:{closed_port()}", "--ssh-key", key],
             ["127.0.0.1", "unreachable: connection refused"]),
            (ssh + ["--hosts", f"127.0.0.1:{not_ssh_port}", "--ssh-key", key], ["no SSH server answers there"]),
            (ssh + ["--nodes-file", str(nodes_file), "--ssh-key", str(wrong_key), "--known-hosts", known],
             ["authentication failed for user root", str(wrong_key)]),
            (ssh + ["--nodes-file", str(nodes_file), "--ssh-key", key, "--known-hosts", str(empty_known)],
             ["host key not in known_hosts", "--ssh-insecure"]),
            (ssh + ["--nodes-file", str(nodes_file), "--ssh-key", key, "--known-hosts", str(lying_known)],
             ["host key differs"]),
            (ssh[:-1] + ["3", "--hosts", f"{n1.address},{n2.address}", "--ssh-key", key, "--known-hosts", known],
             ["--zk-nodes 3 needs at least 3 nodes; the cluster has 2"]),
            (ssh[:-1] + ["3", "--zk-port", "2381", "--nodes-file", str(nodes_file), "--ssh-key", key,
                         "--known-hosts", known],
             [f"a2: port 2381 on {n2.address} is already in use", "python"]),
        ]
        for args, fragments in cases:
            before = inventory()
            res = harness_cli("cluster", "up", *args) if args[0] != "cluster" else harness_cli(*args)
            assert_one_line_error(res, *fragments)
            assert new_things(before, inventory()) == {}, args
            # No ZooKeeper (or anything else) left running on the hosts either.
            comms = {comm for _, comm in inventory(cluster5.cluster_id)["processes"]}
            assert "java" not in comms, comms
    finally:
        n2.remote.signal("squatter", "KILL")


def test_clean_reaches_the_hosts_of_a_dead_ssh_run(cluster5, tmp_path):
    """A run on ssh hosts died without teardown: clean logs in with the saved
    settings, kills the harness's daemons and removes its partition rules."""
    from infra import net

    key, known = keys_of(cluster5)
    nodes_file = write_nodes_file(tmp_path / "nodes.txt", cluster5, count=2)
    c = provision("ssh", ProvisionOptions(nodes_file=str(nodes_file), ssh_key=key, known_hosts=known,
                                          remote_dir=str(tmp_path / "r")))
    try:
        a1 = c.node("a1")
        pid = a1.remote.start_daemon("orphan", ["sleep", "300"], f"{a1.log_dir}/orphan.log")
        net.partition(c, {"a1": ["a2"]})
        assert not net.can_reach(cluster5.node("n2"), cluster5.node("n1"), timeout=1.0)
        c.close()  # the run "dies" here
        res = harness_cli("clean", "--cluster", c.cluster_id)
        assert res.returncode == 0, res.stderr
        assert f"removed a1: daemon orphan (pid {pid})" in res.stdout
        assert "removed a1: 1 partition rule(s)" in res.stdout and "removed a2: 1 partition rule(s)" in res.stdout
        assert not hostops.is_alive(pid)
        assert net.rules_in_force(cluster5) == {n: [] for n in cluster5.names}
        assert_nothing_left(c.cluster_id)
    finally:
        net.heal(cluster5)
        c.teardown()
