"""A client's network cut on the control host (infra/client_net.py), with real
iptables: a process of the cut group id reaches nothing, any other process
still does, and the cut is lifted by its restore or by restoring every cut."""

from __future__ import annotations

import socket

import pytest

from infra import client_net
from tests.support import need_root

# Host-wide iptables rules: beside the integration tests, restore_all() would count,
# and lift, the cuts of a run's clients (test_client_processes, the nemesis's runs).
pytestmark = pytest.mark.serial


@pytest.fixture
def listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def test_a_cut_group_id_reaches_nothing_until_restored_and_no_one_else_is_cut(listener):
    need_root("cutting a group id off the network")
    gid, other = client_net.client_gid(250), client_net.client_gid(251)
    assert gid != other and gid > client_net.GID_BASE
    assert client_net.can_connect(gid, "127.0.0.1", listener)
    client_net.cut(gid)
    try:
        assert client_net.cut_gids().count(gid) == 1
        assert not client_net.can_connect(gid, "127.0.0.1", listener, timeout=1.0)
        assert client_net.can_connect(other, "127.0.0.1", listener)
        with socket.create_connection(("127.0.0.1", listener), timeout=2):  # this process: not cut
            pass
        assert client_net.restore(gid) == 1
        assert client_net.can_connect(gid, "127.0.0.1", listener)
        client_net.cut(gid)
        client_net.cut(other)
        assert client_net.restore_all() == 2 and not client_net.cut_gids()
        assert client_net.can_connect(gid, "127.0.0.1", listener)
    finally:
        client_net.restore(gid)
        client_net.restore(other)
