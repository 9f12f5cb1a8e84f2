"""Integration: the 5 local nodes answer over SSH at their own addresses, and
the Remote runs commands, moves files and runs daemons on them."""

from __future__ import annotations

import os
import threading

import pytest

from core.waiting import wait_for
from infra.nodes import parallel
from infra.remote import Remote, RemoteError


pytestmark = pytest.mark.integration


def test_every_node_answers_over_ssh_at_its_own_address(cluster5):
    assert [n.name for n in cluster5.nodes] == ["n1", "n2", "n3", "n4", "n5"]
    assert len({n.address for n in cluster5.nodes}) == 5

    def look(node):
        r = node.remote
        addrs = r.run("ip -4 -o addr show").stdout
        listening = r.run("ss -Htln").stdout
        peer = r.connect().get_transport().getpeername()[0]
        return addrs, listening, peer, r.local_address()

    for node, (addrs, listening, peer, local) in zip(cluster5.nodes, parallel(look, cluster5.nodes)):
        assert peer == node.address
        assert local == cluster5.control_address
        assert f"inet {node.address}/24" in addrs
        # A namespace of its own: no other node's address, not the host's eth0.
        others = [o.address for o in cluster5.nodes if o is not node]
        assert not any(f"inet {o}/" in addrs for o in others)
        assert f"{node.address}:22" in listening
        assert "127.0.0.1" in addrs  # loopback is up in the namespace
    # Nodes reach each other's sshd directly.
    n1, n2 = cluster5.nodes[:2]
    out = n1.remote.run(f"timeout 3 bash -c 'exec 3<>/dev/tcp/{n2.address}/22; head -c 7 <&3'").stdout
    assert out == "SSH-2.0"


def test_run_reports_status_output_and_errors(cluster5):
    r = cluster5.node("n2").remote
    res = r.run("echo out; echo err >&2; exit 3", check=False)
    assert (res.exit_status, res.stdout, res.stderr) == (3, "out\n", "err\n")
    with pytest.raises(RemoteError) as e:
        r.run("cat /no/such/file")
    msg = str(e.value)
    assert msg.startswith("n2: `cat /no/such/file`: exit status 1: ") and "No such file" in msg
    assert "\n" not in msg


def test_run_timeout_names_node_and_command(cluster5):
    r = cluster5.node("n3").remote
    with pytest.raises(RemoteError) as e:
        r.run("sleep 10.25", timeout=0.5)
    assert str(e.value) == "n3: `sleep 10.25`: timed out after 0.5s"
    # Given up on means gone: the node itself killed the command.
    assert r.run("ps -eo args | grep -x 'sleep 10.25' || true").stdout == ""
    with pytest.raises(RemoteError):  # even without check
        r.run("sleep 10.5", timeout=0.3, check=False)
    assert r.run("echo still usable").stdout == "still usable\n"


def test_env_stdin_and_large_output(cluster5):
    r = cluster5.node("n1").remote
    assert r.run('printf %s "$A|$B"', env={"A": "it's a $test", "B": "x y"}).stdout == "it's a $test|x y"
    blob = os.urandom(300_000)
    assert r.exec_bytes("cat", stdin=blob)[1] == blob
    big = r.run("head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2")
    assert len(big.stdout) == 3_000_000 and big.stderr == "done\n"
    with pytest.raises(RemoteError):
        r.run("true", env={"BAD NAME": "x"})


def test_one_connection_serves_many_threads(cluster5):
    """Many short commands at once on one connection, many times over. paramiko
    can send a channel's EOF after its CLOSE, and OpenSSH then drops the whole
    connection; before the fix one round in 5 to 40 lost it."""
    r = cluster5.node("n4").remote
    first = r.connect().get_transport()
    for _ in range(100):
        results = parallel(lambda i: r.run(f"echo {i}").stdout.strip(), range(30), max_workers=30)
        assert results == [str(i) for i in range(30)]
    # Commands given input that end without reading it race the same way.
    for _ in range(30):
        statuses = parallel(lambda i: r.exec_bytes(f"exit {i % 3}", stdin=b"unread")[0], range(30), max_workers=30)
        assert statuses == [i % 3 for i in range(30)]
    assert r.connect().get_transport() is first, "the connection was dropped and reopened"


def test_files_round_trip(cluster5, tmp_path):
    node = cluster5.node("n5")
    r = node.remote
    path = f"{node.data_dir}/files/deeper/blob.bin"
    data = os.urandom(70_000)
    r.write_file(path, data, mode=0o600)
    assert r.read_file(path) == data
    assert r.run(f"stat -c %a {path}").stdout.strip() == "600"
    local = tmp_path / "up.txt"
    local.write_text("hello node\n")
    os.chmod(local, 0o640)
    r.put(str(local), f"{node.data_dir}/files/new/up.txt")
    assert r.run(f"cat {node.data_dir}/files/new/up.txt; stat -c %a {node.data_dir}/files/new/up.txt").stdout \
        == "hello node\n640\n"
    r.get(f"{node.data_dir}/files/new/up.txt", str(tmp_path / "down" / "up.txt"))
    assert (tmp_path / "down" / "up.txt").read_text() == "hello node\n"
    with pytest.raises(RemoteError) as e:
        r.read_file(f"{node.data_dir}/no-such")
    assert str(e.value).startswith("n5: read ")
    with pytest.raises(RemoteError) as e:
        r.get("/no/such/file", str(tmp_path / "x"))
    assert "n5" in str(e.value) and "/no/such/file" in str(e.value)


def test_daemon_lifecycle(cluster5):
    node = cluster5.node("n1")
    r = node.remote
    log_file = f"{node.log_dir}/ticker.log"
    pid = r.start_daemon("ticker", ["bash", "-c", 'echo "started $GREETING"; exec sleep 300'], log_file,
                         env={"GREETING": "hi there"}, cwd=node.data_dir)
    try:
        assert r.pid_of("ticker") == pid
        assert r.run(f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout.strip() == "sleep 300"
        assert r.run(f"readlink /proc/{pid}/cwd").stdout.strip() == node.data_dir
        wait_for(lambda: "started hi there" in r.run(f"cat {log_file}").stdout, what="daemon output in its log")
        # Detached: it outlives the SSH connection that started it.
        r.close()
        assert r.is_running("ticker") and r.is_running(pid)
        with pytest.raises(RemoteError) as e:
            r.start_daemon("ticker", ["sleep", "1"], log_file)
        assert "already running" in str(e.value)
        assert r.signal("ticker", "STOP")
        assert r.run(f"grep State /proc/{pid}/status").stdout.split()[1] == "T"
        assert r.is_running("ticker")  # paused is still running
        assert r.signal("ticker", "SIGCONT")
        assert r.run(f"grep State /proc/{pid}/status").stdout.split()[1] in ("S", "R")
        assert r.signal("ticker", "KILL")
        assert r.wait_stopped("ticker", 5)
        assert r.pid_of("ticker") is None
        assert not r.signal("ticker", "KILL")  # nothing left to signal
        with pytest.raises(RemoteError):
            r.signal("ticker", "NOPE")
    finally:
        r.signal("ticker", "KILL")


def test_a_reused_pid_is_never_signalled(cluster5):
    """A pid file pointing at someone else's process: not ours, not touched."""
    node = cluster5.node("n2")
    r = node.remote
    stranger = r.run("setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!").stdout.strip()
    try:
        r.write_file(r.pid_file("impostor"), f"{stranger}\n".encode())
        assert r.pid_of("impostor") is None
        assert not r.signal("impostor", "KILL")
        assert r.is_running(int(stranger))
        assert r.daemons()["impostor"] is None
    finally:
        r.run(f"kill -9 {stranger}; rm -f {r.pid_file('impostor')}", check=False)


def test_dead_connection_is_reopened(cluster5):
    r = cluster5.node("n3").remote
    first = r.connect().get_transport()
    # Kill the sshd process serving this very connection (sh's parent is `timeout`,
    # whose parent is the session's sshd).
    with pytest.raises(RemoteError) as e:
        r.run("kill -9 $(ps -o ppid= -p $PPID)")
    assert "connection lost" in str(e.value) or "connection failed" in str(e.value)
    assert r.run("echo back").stdout == "back\n"
    assert r.connect().get_transport() is not first
    # Also when the transport just dropped under us between calls.
    r.connect().get_transport().close()
    assert r.run("echo again").stdout == "again\n"


def test_sudo_mode_runs_the_same_operations(cluster5):
    """Non-root users go through `sudo -n`; as root here, sudo lets us through."""
    node = cluster5.node("n4")
    base = node.remote
    r = Remote("n4", node.address, user="root", key_file=base.key_file, known_hosts=base.known_hosts,
               run_dir=f"{node.run_dir}/sudo", tag_scope=base.tag_scope + "-sudo", sudo=True)
    try:
        assert r.run("echo $SUDO_USER").stdout.strip() == "root"
        r.write_file(f"{node.data_dir}/sudo/f", b"via sudo", 0o640)
        assert r.read_file(f"{node.data_dir}/sudo/f") == b"via sudo"
        pid = r.start_daemon("s", ["sleep", "300"], f"{node.log_dir}/s.log")
        assert r.pid_of("s") == pid
        assert r.signal("s", "KILL") and r.wait_stopped("s", 5)
    finally:
        r.signal("s", "KILL")
        r.close()


def test_parallel_connects_are_safe(cluster5):
    """Many threads asking a fresh Remote to connect open exactly one connection."""
    node = cluster5.node("n5")
    base = node.remote
    r = Remote("n5", node.address, key_file=base.key_file, known_hosts=base.known_hosts, run_dir=node.run_dir)
    seen = set()
    lock = threading.Lock()

    def go(_):
        t = r.connect().get_transport()
        with lock:
            seen.add(id(t))

    try:
        parallel(go, range(10), max_workers=10)
        assert len(seen) == 1
    finally:
        r.close()
