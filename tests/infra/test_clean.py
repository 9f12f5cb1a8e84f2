"""Integration: a harness killed with -9 mid-way, then `harness clean`, leaves
no namespace, link, rule, process, mount or key behind (listed to prove it)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.waiting import wait_for
from infra import hostops
from infra import state as st

from tests.support import clusters_owned_by

from .conftest import REPO, assert_nothing_left, harness_cli, inventory, need_root

pytestmark = pytest.mark.integration


class StalledUp:
    """`harness cluster up` parked at a phase of bring-up, to be killed there."""

    def __init__(self, phase: str, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "cluster", "up", *args], cwd=REPO,
            env={**os.environ, "HARNESS_INFRA_STALL_AT": phase}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.cluster_id = None
        line = self.proc.stdout.readline()  # blocks until the stall (or exit)
        assert line.strip() == f"stalled at {phase}", (line, self.proc.stderr.read() if self.proc.poll() else "")
        (self.cluster_id,) = clusters_owned_by(self.proc.pid)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stdout.close()
        self.proc.stderr.close()
        if self.cluster_id:
            harness_cli("clean", "--cluster", self.cluster_id)


@pytest.fixture
def stalled():
    need_root()
    made = []

    def start(phase, *args):
        s = StalledUp(phase, *args)
        made.append(s)
        return s

    try:
        yield start
    finally:
        for s in made:
            s.close()


def clean_and_check(cid: str) -> str:
    res = harness_cli("clean", "--cluster", cid)
    assert res.returncode == 0, res.stderr
    assert_nothing_left(cid)
    again = harness_cli("clean", "--cluster", cid)
    assert again.returncode == 0 and again.stdout.strip() == f"clean: nothing left by cluster {cid}"
    return res.stdout


def test_kill_9_while_the_network_is_half_up(stalled):
    up = stalled("network", "--nodes", "3", "--zk-nodes", "0")
    cid = up.cluster_id
    inv = inventory(cid)
    assert len(inv["namespaces"]) == 3 and len(inv["host_rules"]) == 3
    assert {l.split("@")[0] for l in inv["links"]} >= {f"hbr-{cid}", f"hv-{cid}-1"}
    up.kill9()
    assert inventory(cid) == inv  # kill -9 cleaned nothing up
    out = clean_and_check(cid)
    for ns in inv["namespaces"]:
        assert f"removed namespace {ns}" in out
    assert f"removed link hbr-{cid}" in out
    assert out.count("removed iptables rule") == 3
    assert f"removed state directory {st.cluster_dir(cid)}" in out


def test_kill_9_during_zookeeper_start_with_a_fuse_mount(stalled):
    from infra.cluster import load_cluster

    up = stalled("zookeeper", "--nodes", "3", "--zk-nodes", "3")
    cid = up.cluster_id
    cluster = load_cluster(cid)
    n1 = cluster.node("n1")
    mount_point = f"{n1.data_dir}/fuse"
    n1.remote.run(f"mkdir -p {mount_point}")
    fuse_pid = n1.remote.start_daemon("fuse", [sys.executable, str(Path(__file__).with_name("fuse_hello.py")),
                                               mount_point], f"{n1.log_dir}/fuse.log")
    wait_for(lambda: any(m.mount_point == mount_point for m in hostops.mounts_under(st.cluster_dir(cid))),
             what="the FUSE mount")
    assert Path(mount_point, "hello").read_text().startswith("hello from")
    cluster.close()
    procs = inventory(cid)["processes"]
    comms = sorted(comm for _, comm in procs)
    assert comms.count("java") == 3 and comms.count("sshd") >= 3 and fuse_pid in {p for p, _ in procs}

    up.kill9()
    out = clean_and_check(cid)
    assert f"removed mount {mount_point}" in out
    for pid, comm in procs:
        assert not hostops.is_alive(pid), (pid, comm)
    assert not Path(mount_point).exists()


def test_clean_finds_a_cluster_from_its_names_alone(stalled):
    """Killed before its state was written: the kernel objects still say whose they are."""
    up = stalled("network", "--nodes", "2", "--zk-nodes", "0")
    cid = up.cluster_id
    up.kill9()
    shutil.rmtree(st.cluster_dir(cid))
    inv = inventory(cid)
    assert inv["namespaces"] and inv["host_rules"] and not inv["state_dirs"]
    clean_and_check(cid)


def test_sigterm_during_bring_up_cleans_up_by_itself(stalled):
    up = stalled("sshd", "--nodes", "2", "--zk-nodes", "0")
    cid = up.cluster_id
    assert inventory(cid)["namespaces"]
    up.proc.send_signal(signal.SIGTERM)
    # The stall is a sleep; SIGTERM interrupts it and the failed bring-up removes itself.
    assert up.proc.wait(20) == 130
    assert "interrupted" in up.proc.stderr.read()
    assert_nothing_left(cid)
