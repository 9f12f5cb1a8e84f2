"""Fixtures for the own broker's tests: a real ZooKeeper and real broker processes.

One ZooKeeper serves the whole session (its start is a JVM's, paid once);
each test gets a chroot of its own in it, so that what one test's brokers
write no other test sees. Every process started here is stopped in the
fixture's finally, also when the test fails; the brokers' logs stay under
the test's tmp_path for post-mortems, ZooKeeper's under the session's.
"""

from __future__ import annotations

import itertools
import os
import shutil
from dataclasses import dataclass

import pytest

from lab.loopback_broker import LocalCluster, ZooKeeperServer

HERE = os.path.dirname(__file__)


def pytest_collection_modifyitems(config, items):
    """Every broker test is `loopback`: its ZooKeeper and brokers are local
    processes on 127.0.0.1 and free ports, which share nothing with the
    namespace clusters, so `make test` runs them beside those."""
    for item in items:
        if str(item.fspath).startswith(HERE):
            item.add_marker(pytest.mark.loopback)


def _have_zookeeper() -> bool:
    return shutil.which("java") is not None and os.path.exists("/usr/share/java/zookeeper.jar")


@pytest.fixture(scope="session")
def _zookeeper_server(tmp_path_factory):
    if not _have_zookeeper():
        pytest.fail("ZooKeeper (Debian package `zookeeper`) and java are needed: run `make setup`")
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zk"))
    try:
        zk.start()
        yield zk
    finally:
        zk.stop()


@dataclass
class ZooKeeperChroot:
    """A test's part of the session's ZooKeeper: `connect` names its chroot."""

    connect: str


_chroots = itertools.count()


@pytest.fixture
def zookeeper(_zookeeper_server):
    from kazoo.client import KazooClient

    zk = _zookeeper_server
    if zk.proc is None or zk.proc.poll() is not None:
        pytest.fail(f"the session's ZooKeeper is gone; see {zk.dir / 'zookeeper.log'}")
    chroot = f"/test-{next(_chroots)}"
    maker = KazooClient(hosts=zk.connect, timeout=10)
    maker.start(timeout=30)
    try:
        maker.ensure_path(chroot)
    finally:
        maker.stop()
        maker.close()
    return ZooKeeperChroot(f"{zk.connect}{chroot}")


@pytest.fixture
def make_cluster(tmp_path, zookeeper):
    """make_cluster(n=3, settings={...}, bugs=[...]) -> a started LocalCluster."""
    clusters = []

    def make(n: int = 3, settings: dict | None = None, bugs: list[str] | None = None, start: bool = True):
        # Each cluster gets its own ZooKeeper chroot, so one test can run several.
        c = LocalCluster(n, tmp_path / f"cluster{len(clusters)}", f"{zookeeper.connect}/cluster{len(clusters)}",
                         settings=settings, bugs=bugs)
        clusters.append(c)
        if start:
            c.start()
        return c

    try:
        yield make
    finally:
        for c in clusters:
            c.stop()


def make_batch(values, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
               transactional: bool = False) -> bytes:
    """A RecordBatch v2 holding `values` (bytes), built by kafka-python."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                  producer_id=producer_id,
                                  producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 24)
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=None, value=v, headers=[])
    return bytes(b.build())


def batch_values(data: bytes) -> list[bytes]:
    """The record values of every batch in `data` (a fetch result or a segment file)."""
    from kafka.record.memory_records import MemoryRecords
    out = []
    mr = MemoryRecords(data)
    while mr.has_next():
        batch = mr.next_batch()
        if batch is None:
            break
        for rec in batch:
            out.append(rec.value)
    return out
