"""Fixtures for the infra tests: real local clusters, the CLI in a subprocess,
and an inventory of what the harness has on this machine (to prove clean-up).

Integration tests need root (namespaces, iptables); without it they skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra import hostops
from infra import state as st
from tests import support

REPO = Path(__file__).resolve().parents[2]


def need_root():
    support.need_root("network namespaces, bridges, iptables")


def harness_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `harness ARGS` as a user would, in a fresh interpreter."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(res: subprocess.CompletedProcess, *fragments: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("harness: error: "), lines[0]
    assert "Traceback" not in res.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def inventory(cluster_id: str | None = None) -> dict[str, set]:
    """Everything harness-made on this machine (or of one cluster), by kind."""
    def mine(name_cid: str | None) -> bool:
        return name_cid is not None and (cluster_id is None or name_cid == cluster_id)

    def cid_of(regex, text):
        m = regex.match(text)
        return m.group(1) if m else None

    inv = {
        "namespaces": {ns for ns in hostops.list_netns() if mine(cid_of(st.NETNS_RE, ns))},
        "links": {l for l in hostops.list_links() if mine(cid_of(st.BRIDGE_RE, l) or cid_of(st.VETH_RE, l.split("@")[0]))},
        "host_rules": set(),
        "processes": set(),
        "mounts": set(),
        "state_dirs": {c for c in st.list_cluster_ids() if mine(c)},
    }
    for rule in hostops.iptables_rules("harness:"):
        m = st.HOST_RULE_RE.search(rule)
        if m and mine(m.group(1)):
            inv["host_rules"].add(rule)
    inodes = {hostops.netns_inode(ns) for ns in inv["namespaces"]} - {None}
    for p in hostops.scan_processes():
        tag_cid = (p.daemon_tag or "").split("/")[0] or None
        if p.netns_inode in inodes or mine(tag_cid):
            inv["processes"].add((p.pid, p.comm))
    root = st.cluster_dir(cluster_id) if cluster_id else st.state_root()
    inv["mounts"] = {m.mount_point for m in hostops.mounts_under(root)}
    return inv


def assert_nothing_left(cluster_id: str) -> None:
    inv = inventory(cluster_id)
    assert inv == {k: set() for k in inv}, inv


def new_things(before: dict[str, set], after: dict[str, set]) -> dict[str, set]:
    """What `after` has that `before` had not. sshd session processes of nodes that
    already existed come and go with connections, so they are not counted; a new
    node's sshd shows up with its new namespace anyway."""
    diff = {k: after[k] - before[k] for k in after}
    diff["processes"] = {(pid, comm) for pid, comm in diff["processes"] if comm != "sshd"}
    return {k: v for k, v in diff.items() if v}


def local_cluster(nodes: int):
    """A real local cluster of `nodes` nodes for a fixture to yield from: torn
    down afterwards, and checked to have left nothing."""
    need_root()
    from infra.cluster import ProvisionOptions, provision

    cluster = provision("local", ProvisionOptions(nodes=nodes))
    try:
        yield cluster
    finally:
        cluster.teardown()
        assert_nothing_left(cluster.cluster_id)


@pytest.fixture(scope="session")
def cluster5():
    """A 5-node local cluster shared by the tests that leave it as they found it."""
    yield from local_cluster(5)


@pytest.fixture
def fresh_cluster():
    """Factory for short-lived local clusters, each removed after the test."""
    need_root()
    from infra.cluster import ProvisionOptions, provision

    made = []

    def make(**kw):
        c = provision("local", ProvisionOptions(**kw))
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.teardown()


CID_RE = re.compile(r"cluster (c\d+)")
