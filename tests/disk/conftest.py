"""Fixtures for the disk-fault tests: a real faultfs mounted on this machine,
a one-node local cluster, and the harness CLI in a subprocess.

FUSE mounts need root (and /dev/fuse); without them these tests skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.waiting import wait_for
from infra import hostops
from infra.faultfs import fs as faultfs_fs
from tests.support import need_fuse

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "infra" / "faultfs" / "fs.py"


def faultfs_mounts(root: Path) -> list[str]:
    return [m.mount_point for m in hostops.mounts_under(root) if m.fstype == "fuse.faultfs"]


class Mounted:
    """A faultfs daemon serving `source` at `mount`, run as a child process."""

    def __init__(self, base: Path, slow_ms: float = 100.0, args: tuple[str, ...] = ()):
        self.base = base
        self.source = base / "source"
        self.mount = base / "mnt"
        self.control = str(base / "control.sock")
        self.log = base / "faultfs.log"
        self.source.mkdir()
        self.mount.mkdir()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), str(self.source), str(self.mount), "--control", self.control,
                 "--slow-ms", str(slow_ms), *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: self.is_mounted() and os.path.exists(self.control), what="the faultfs mount")
        except AssertionError:
            self.close()
            raise AssertionError(f"faultfs did not mount: {self.log.read_text()[-500:]}") from None

    def ctl(self, **req) -> dict:
        return faultfs_fs.request(self.control, req)

    def mode(self, mode: str, **params) -> dict:
        answer = self.ctl(op="mode", mode=mode, **params)
        assert answer["ok"], answer
        return answer

    def drop(self) -> dict:
        answer = self.ctl(op="lose-unfsynced")
        assert answer["ok"], answer
        return answer["dropped"]

    def is_mounted(self) -> bool:
        return str(self.mount) in faultfs_mounts(self.base)

    def close(self) -> None:
        """Release any stall (blocked processes cannot even be killed), unmount, stop."""
        if self.proc.poll() is None:
            try:
                self.ctl(op="mode", mode="passthrough")
            except OSError:
                pass
        if self.is_mounted():
            subprocess.run(["fusermount3", "-u", "-z", str(self.mount)], capture_output=True)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        assert not self.is_mounted(), f"{self.mount} is still mounted"


@pytest.fixture
def mounted(tmp_path):
    need_fuse()
    m = Mounted(tmp_path)
    try:
        yield m
    finally:
        m.close()


@pytest.fixture(scope="module")
def node1():
    """A one-node local cluster (namespace + sshd, no ZooKeeper): the path
    every node command takes, SSH included."""
    need_fuse()
    from infra.cluster import ProvisionOptions, provision

    cluster = provision("local", ProvisionOptions(nodes=1))
    try:
        yield cluster.node("n1")
    finally:
        cluster.teardown()
