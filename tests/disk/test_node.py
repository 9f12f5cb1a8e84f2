"""The faultfs driven through a node (a local namespace reached over SSH, the
path VMs take too): mount, modes, probes, drops, heal, unmount, bad input."""

from __future__ import annotations

import pytest

from core.errors import UserError
from infra import faultfs
from nemesis import disk
from nemesis.fault import Context

pytestmark = pytest.mark.integration


class DataDirOnly:
    """The one thing the faultfs needs of a system: where its data lives."""

    name = "data-dir-only"

    @staticmethod
    def data_dir(node) -> str:
        return f"{node.data_dir}/store"


@pytest.fixture
def node_mount(node1):
    target = f"{node1.data_dir}/t"
    m = faultfs.mount(node1, target + ".raw", target, slow_ms=250)
    try:
        yield node1, m
    finally:
        faultfs.unmount(node1, target)
        assert not faultfs.is_mounted(node1, target)


def test_modes_and_probes_through_the_node(node_mount):
    node, m = node_mount
    assert faultfs.is_mounted(node, m.target)
    assert faultfs.status(node, m.target)["mode"] == "passthrough"

    faultfs.set_mode(node, m.target, "stall")
    probe = disk.probe_write(node, m.target, "test", 1.0)
    assert probe["blocked"] and faultfs.status(node, m.target)["blocked"] >= 1
    faultfs.set_mode(node, m.target, "passthrough")
    disk._wait_and_remove_probes(node, m.target, [probe["marker"]])

    faultfs.set_mode(node, m.target, "slow")  # the mount's default: 250 ms
    probe = disk.probe_write(node, m.target, "test", 30)
    assert probe["status"] == 0 and probe["ms"] >= 250

    faultfs.set_mode(node, m.target, "fail", ops="fsync")
    probe = disk.probe_write(node, m.target, "test", 30)
    assert probe["status"] != 0 and "Input/output error" in probe["output"]
    faultfs.set_mode(node, m.target, "passthrough")
    disk._wait_and_remove_probes(node, m.target, [])
    assert node.remote.run(f"ls -A {m.target}").stdout.strip() == ""


def test_lose_unfsynced_through_the_node(node_mount):
    node, m = node_mount
    node.remote.run(f"printf kept > {m.target}/f && sync {m.target}/f && printf +lost >> {m.target}/f")
    answer = faultfs.set_mode(node, m.target, "lose-unfsynced")
    assert answer["dropped"]["files"] == 1 and answer["dropped"]["bytes_cut"] == 5
    assert node.remote.run(f"cat {m.target}/f").stdout == "kept"
    assert node.remote.run(f"cat {m.source}/f").stdout == "kept"


def test_heal_releases_a_stalled_disk_and_a_blocked_writer_finishes(node1):
    system = DataDirOnly()
    cluster = type("OneNode", (), {"nodes": [node1], "names": ["n1"], "node": lambda self, n: node1})()
    mounts = faultfs.mount_system(cluster, system, {"slow-ms": 50})
    try:
        target = system.data_dir(node1)
        assert mounts.to_dict() == {"n1": {"source": target + ".raw", "target": target}}
        assert mounts.log_files(node1) == [f"{node1.log_dir}/{faultfs.label_of(target)}.log"]
        faultfs.set_mode(node1, target, "stall", ops="write")
        probe = disk.probe_write(node1, target, "heal", 1.0)
        assert probe["blocked"]
        ctx = Context(cluster, system, "topic", names=["n1"])
        assert disk.heal_disks(ctx) == {"disks_released": {"n1": "stall"}}
        assert disk.heal_disks(ctx) == {}  # nothing left to release
        node1.remote.run(f"i=0; while [ ! -e {probe['marker']}.rc ] && [ $i -lt 100 ]; do sleep 0.05; "
                         f"i=$((i+1)); done; cat {probe['marker']}.rc")
        disk._wait_and_remove_probes(node1, target, [probe["marker"]])
    finally:
        faultfs.unmount_system(cluster, mounts)
    assert not faultfs.is_mounted(node1, system.data_dir(node1))


def test_unmount_releases_a_stall_first(node1):
    target = f"{node1.data_dir}/stalled"
    faultfs.mount(node1, target + ".raw", target)
    try:
        faultfs.set_mode(node1, target, "stall")
        assert disk.probe_write(node1, target, "unmount", 0.5)["blocked"]
    finally:
        done = faultfs.unmount(node1, target)
    assert done["unmounted"] and not faultfs.is_mounted(node1, target)
    assert node1.remote.pid_of(faultfs.label_of(target)) is None


def test_bad_input_is_one_line(node_mount):
    node, m = node_mount
    cases = [
        (lambda: faultfs.set_mode(node, f"{node.data_dir}/nothing-here", "stall"), "no faultfs mounted"),
        (lambda: faultfs.mount(node, m.source, m.target), "already a faultfs mount"),
        (lambda: faultfs.set_mode(node, m.target, "melt"), "faultfs mode 'melt'"),
        (lambda: faultfs.set_mode(node, m.target, "slow", speed=3), "unknown parameter"),
        (lambda: faultfs.set_mode(node, m.target, "slow", delay_ms=-1), "delay_ms -1"),
        (lambda: faultfs.mount(node, "relative/src", m.target), "absolute"),
        (lambda: faultfs.validate_settings({"slow-ms": 0}), "disk.slow-ms"),
        (lambda: faultfs.validate_settings({"colour": 1}), "disk.colour"),
    ]
    for call, words in cases:
        with pytest.raises(UserError) as e:
            call()
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert faultfs.status(node, m.target)["mode"] == "passthrough"
