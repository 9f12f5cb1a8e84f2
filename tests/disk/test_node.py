"""The faultfs driven through a node (a local namespace reached over SSH, the
path VMs take too): mount, modes, probes, drops, bit flips, torn writes,
heal, unmount, bad input."""

from __future__ import annotations

import pytest

from core.errors import UserError
from infra import faultfs
from nemesis import disk, power
from nemesis.fault import Context, Step

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


class NoProcess(DataDirOnly):
    """A system with a data dir and no process: power-loss kills nothing, and
    what it verifies is the faultfs's drop and its probe."""

    name = "no-process"

    @staticmethod
    def kill(node) -> None:
        pass

    @staticmethod
    def process_state(node):
        return None


def one_node(node):
    return type("OneNode", (), {"nodes": [node], "names": ["n1"], "node": lambda self, n: node})()


@pytest.mark.parametrize("direction", ["reads", "writes"])
def test_disk_corrupt_verifies_its_flips_and_its_stop_through_the_node(node1, direction):
    system, cluster = DataDirOnly(), one_node(node1)
    mounts = faultfs.mount_system(cluster, system, {"corrupt": direction, "corrupt-fraction": 0.5})
    try:
        target = system.data_dir(node1)
        ctx = Context(cluster, system, "topic", names=["n1"])
        step = Step(2.5, "start", "disk-corrupt", "one", (0,))
        value, state = disk.CORRUPT.start(ctx, step)
        assert value["verified"]["ok"], value
        assert (value["direction"], value["files"], value["fraction"]) == (direction, ["segments"], 0.5)
        assert value["seeds"] == {"n1": disk.step_seed(step, "n1")}
        what, verified = disk.CORRUPT.describe(value, False)
        assert what == f"n1, bit flips in 50% of {direction} of segments" and verified.startswith("verified: ")
        # The probe's flips are in the faultfs's own log, with file, offset and bit.
        log_text = node1.remote.run(f"cat {node1.log_dir}/{faultfs.label_of(target)}.log").stdout
        assert f"flip {direction[:-1]} /.faultfs-probe-corrupt-" in log_text and " bit=" in log_text
        stopped = disk.CORRUPT.stop(ctx, state)
        assert stopped["verified"]["ok"] and stopped["flips"] == {"n1": {"matched": 0, "flipped": 0}}, stopped
        assert node1.remote.run(f"ls -A {target}").stdout.strip() == ""  # no probe left behind
        # heal turns flips off wherever they are armed.
        faultfs.corrupt(node1, target, seed=1)
        assert disk.heal_disks(ctx) == {"disks_released": {"n1": f"corrupt-{direction}"}}
        assert faultfs.status(node1, target)["corrupt"]["armed"] is None
    finally:
        faultfs.unmount_system(cluster, mounts)


def test_a_torn_power_loss_is_verified_by_its_probe(node1):
    system, cluster = NoProcess(), one_node(node1)
    mounts = faultfs.mount_system(cluster, system, {"power-loss": "torn"})
    try:
        ctx = Context(cluster, system, "topic", names=["n1"])
        value, _ = power.POWER_LOSS.start(ctx, Step(1.0, "start", "power-loss", "one", (0,)))
        assert value["verified"]["ok"], value
        assert "(torn)" in value["verified"]["probe"]["n1"] and value["lost"]["n1"]["torn"] >= 1
        assert "the last one torn in" in power.POWER_LOSS.describe(value, False)[0]
    finally:
        faultfs.unmount_system(cluster, mounts)
