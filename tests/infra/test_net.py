"""Integration: partitions with iptables inside the nodes, probes, healing."""

from __future__ import annotations

import time

import pytest

from core.errors import UserError
from core.waiting import wait_for
from infra import net
from infra.nodes import parallel
from tests.support import need


pytestmark = pytest.mark.integration


@pytest.fixture
def healed(cluster5):
    """Whatever a test does to the network, the next one starts healed."""
    try:
        yield cluster5
    finally:
        net.heal(cluster5)


def reach_matrix(cluster, port=22):
    pairs = [(a, b) for a in cluster.nodes for b in cluster.nodes if a is not b]
    results = parallel(lambda p: net.can_reach(p[0], p[1], port, timeout=1.0), pairs)
    return {(a.name, b.name): ok for (a, b), ok in zip(pairs, results)}


def test_isolating_a_node_cuts_it_off_but_not_from_the_control_node(healed):
    c = healed
    assert all(reach_matrix(c).values())
    net.partition(c, net.isolate(c, ["n3"]))

    matrix = reach_matrix(c)
    for (a, b), ok in matrix.items():
        assert ok == ("n3" not in (a, b)), (a, b, ok)
    n3 = c.node("n3")
    # The control node still reaches it, over TCP and over SSH (the nemesis heals through it).
    assert net.control_can_reach(n3)
    assert n3.remote.run("echo from-control").stdout == "from-control\n"

    rules = net.rules_in_force(c)
    assert len(rules["n3"]) == 8  # 4 peers x (INPUT, OUTPUT)
    for name in ("n1", "n2", "n4", "n5"):
        assert rules[name] == [f"-A INPUT -s {n3.address}/32 -m comment --comment harness-partition -j DROP",
                               f"-A OUTPUT -d {n3.address}/32 -m comment --comment harness-partition -j DROP"]

    removed = net.heal(c)
    assert removed == {"n1": 2, "n2": 2, "n3": 8, "n4": 2, "n5": 2}
    assert all(reach_matrix(c).values())
    assert net.rules_in_force(c) == {n: [] for n in c.names}


def test_partition_is_idempotent_and_validated(healed):
    c = healed
    grudge = net.grudge_from_components([["n1", "n2"], ["n3", "n4", "n5"]])
    net.partition(c, grudge)
    net.partition(c, grudge)
    assert len(net.rules_in_force(c)["n1"]) == 6  # not doubled
    assert net.can_reach(c.node("n1"), c.node("n2"), timeout=1.0)
    assert not net.can_reach(c.node("n1"), c.node("n4"), timeout=1.0)
    with pytest.raises(UserError, match="unknown node 'n9'"):
        net.partition(c, {"n1": ["n9"]})
    with pytest.raises(UserError, match="drop itself"):
        net.partition(c, {"n1": ["n1"]})


def test_a_partition_cuts_established_connections(healed):
    """Dropping packets must also stop a TCP connection opened before the partition."""
    c = healed
    n1, n2 = c.node("n1"), c.node("n2")
    got = f"{n2.data_dir}/received.txt"
    flag = f"{n1.data_dir}/send-more"
    n1.remote.run(f"rm -f {flag} {got}")
    # n2 accepts one connection and appends whatever arrives to a file.
    listener = ("import socket,sys\n"
                "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                f"s.bind(('{n2.address}', 7311)); s.listen(1); conn,_=s.accept()\n"
                f"f=open('{got}','ab', buffering=0)\n"
                "while True:\n"
                "    d=conn.recv(100)\n"
                "    if not d: break\n"
                "    f.write(d)\n")
    n2.remote.write_file(f"{n2.data_dir}/listener.py", listener.encode())
    n2.remote.start_daemon("listener", ["python3", f"{n2.data_dir}/listener.py"], f"{n2.log_dir}/listener.log")
    # n1 connects, says "before", and says "after" once told to.
    sender = (f"exec 3<>/dev/tcp/{n2.address}/7311; echo before >&3; "
              f"while [ ! -e {flag} ]; do sleep 0.05; done; echo after >&3; sleep 300")
    try:
        wait_for(lambda: n2.remote.run("ss -Htln").stdout.count(":7311") > 0, what="listener")
        n1.remote.start_daemon("sender", ["bash", "-c", sender], f"{n1.log_dir}/sender.log")
        wait_for(lambda: n2.remote.run(f"cat {got} 2>/dev/null", check=False).stdout == "before\n",
                 what="data before the partition")
        assert n1.remote.run(f"ss -Htn state established dst {n2.address}:7311").stdout.strip()

        net.partition(c, {"n1": ["n2"], "n2": ["n1"]})
        n1.remote.run(f"touch {flag}")
        time.sleep(2.0)  # TCP retransmits several times in 2 s; none may get through
        assert n2.remote.run(f"cat {got}").stdout == "before\n"

        net.heal(c)
        # Once healed, the retransmission of the same connection arrives.
        wait_for(lambda: n2.remote.run(f"cat {got}").stdout == "before\nafter\n", timeout=15,
                 what="the stalled segment after healing")
    finally:
        n1.remote.signal("sender", "KILL")
        n2.remote.signal("listener", "KILL")


def test_heal_removes_only_the_harness_rules(healed):
    c = healed
    n1 = c.node("n1")
    foreign = "-A INPUT -s 10.213.254.254/32 -m comment --comment someone-else -j DROP"
    n1.remote.run("iptables -w " + foreign)
    try:
        net.partition(c, {"n1": ["n2"]})
        assert net.heal(c)["n1"] == 1
        assert foreign in n1.remote.run("iptables -w -S").stdout
        assert net.rules_in_force(c)["n1"] == []
    finally:
        n1.remote.run("iptables -w " + foreign.replace("-A ", "-D ", 1), check=False)


def test_one_way_grudge(healed):
    c = healed
    n1, n2 = c.node("n1"), c.node("n2")
    net.partition(c, {"n1": ["n2"]})  # n1 must not hear from n2
    rules = net.rules_in_force(c)
    assert rules["n1"] == [f"-A INPUT -s {n2.address}/32 -m comment --comment harness-partition -j DROP"]
    assert rules["n2"] == [f"-A OUTPUT -d {n1.address}/32 -m comment --comment harness-partition -j DROP"]
    assert rules["n3"] == []
    assert not net.can_reach(n2, n1, timeout=1.0)
    assert net.can_reach(c.node("n3"), n1, timeout=1.0)


def test_bridge_traffic_survives_a_hostile_forward_chain(healed):
    """With br_netfilter on, bridged frames cross the host's FORWARD chain: the
    provider's tagged ACCEPT rule is what keeps nodes talking past a DROP there."""
    from pathlib import Path

    from infra import hostops
    from infra import state as st

    hook = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    need(hook.exists(), "the br_netfilter module (`modprobe br_netfilter`): bridged frames never reach iptables")
    need(hook.read_text().strip() == "1",
         "bridged frames sent through iptables (sysctl net.bridge.bridge-nf-call-iptables=1)")
    c = healed
    bridge, tag = st.bridge_name(c.cluster_id), st.host_rule_tag(c.cluster_id)
    n1, n2 = c.node("n1"), c.node("n2")
    accept = ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", tag, "-j", "ACCEPT"]
    # Tagged like the harness's own rules, so even a crash here leaves nothing `clean` misses.
    hostile = ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", f"{tag}-hostile", "-j", "DROP"]
    hostops.sh(["iptables", "-w", "-A", *hostile])
    try:
        assert net.can_reach(n1, n2, timeout=1.0)  # our ACCEPT comes first
        hostops.sh(["iptables", "-w", "-D", *accept])
        assert not net.can_reach(n1, n2, timeout=1.0)  # so FORWARD does see bridged traffic
    finally:
        if hostops.sh(["iptables", "-w", "-C", *accept], check=False).returncode != 0:
            hostops.sh(["iptables", "-w", "-I", accept[0], "1", *accept[1:]])
        hostops.sh(["iptables", "-w", "-D", *hostile], check=False)
    assert net.can_reach(n1, n2, timeout=1.0)
