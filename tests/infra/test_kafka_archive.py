"""The class-data archive of Kafka's JVMs (infra/kafka_archive.py): `make
setup` made one for the default version and this JDK, a broker started with
a run's command line maps it, an archive that is garbage or made for other
jars leaves the broker starting as it does without one (and the JVM's
warning upsets no log scan), a run maps it only where its nodes run the
cache's jars on this machine, and making it again when it is there does
nothing. Lone KRaft nodes on 127.0.0.1, no cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from checkers import node_logs
from infra.kafka import DEFAULT_VERSION, Distribution, KafkaOptions, class_archive, resolve
from infra.kafka_archive import LoneNode
from infra.kafka_dist import KafkaDist
from tests.support import REPO, need

OTHER_VERSION = "4.4.0"  # its archive is one of other jars for DEFAULT_VERSION's JVMs


def _archive(version: str):
    archive = class_archive(resolve(KafkaOptions(version=version, mode="kraft")), local=True, java="java")
    need(archive is not None, f"Kafka {version}'s class-data archive for this JDK (`make setup` makes it: "
                              f"python -m infra.kafka_archive --version {version})")
    return archive


def _serve(node: LoneNode, archive, *vm_options: str) -> str:
    """Formats the node, starts its broker with `archive` until it serves, stops it; its JVM's output."""
    assert node.format() == 0
    proc = node.start(archive, vm_options)
    try:
        assert node.wait_started(proc), (node.work / "kafka.out").read_text(errors="replace")
    finally:
        LoneNode.stop(proc)
    return (node.work / "kafka.out").read_text(errors="replace")


def test_setup_made_the_archive_and_a_broker_maps_it(tmp_path):
    loaded = tmp_path / "classes.txt"
    _serve(LoneNode(tmp_path / "node", DEFAULT_VERSION), _archive(DEFAULT_VERSION),
           f"-Xlog:class+load=info:file={loaded}")
    kafka = [line for line in loaded.read_text().splitlines() if "] kafka." in line or "] org.apache.kafka." in line]
    assert "] kafka.Kafka source: shared objects file (top)" in "\n".join(kafka)
    shared = [line for line in kafka if "source: shared objects file" in line]
    assert len(shared) > len(kafka) / 2, f"{len(shared)} of {len(kafka)} of Kafka's classes from the archive"


@pytest.mark.parametrize("corrupt", ["garbage", "of other jars"])
def test_a_corrupt_archive_leaves_the_broker_starting(tmp_path, corrupt):
    if corrupt == "garbage":
        archive = tmp_path / "classes.jsa"
        archive.write_bytes(os.urandom(1 << 20))
    else:
        archive = _archive(OTHER_VERSION)
    out = _serve(LoneNode(tmp_path / "node", DEFAULT_VERSION), archive)
    if corrupt == "of other jars":
        assert "Unable to use shared archive" in out, out
    # What a run's collected logs go through: the JVM's warning in kafka.out is no error and no exit.
    collected = tmp_path / "run" / "nodes" / "n1"
    collected.mkdir(parents=True)
    shutil.copy(tmp_path / "node" / "kafka.out", collected / "kafka.out")
    scan = node_logs.scan(tmp_path / "run")
    assert (scan["groups"], scan["exits"]) == ([], []), out


def test_a_run_maps_it_only_where_its_nodes_run_the_cache_s_jars_here(tmp_path):
    dist = resolve(KafkaOptions(version=DEFAULT_VERSION, mode="kraft"))
    assert class_archive(dist, local=True, java="java") == _archive(DEFAULT_VERSION)
    assert class_archive(dist, local=False, java="java") is None  # shipped to other machines
    user_dist = Distribution(dist.version, dist.home, KafkaDist(dist.home, "folder", dist.version))
    assert class_archive(user_dist, local=True, java="java") is None  # --kafka-dist: maybe other jars
    assert class_archive(dist, local=True, java=str(tmp_path / "java")) is None  # another JDK: none made
    assert class_archive(Distribution(dist.version, tmp_path, None), local=True, java="java") is None  # none made


def test_making_it_again_when_it_is_there_does_nothing():
    archive = _archive(DEFAULT_VERSION)
    made = archive.stat().st_mtime_ns
    proc = subprocess.run([sys.executable, "-m", "infra.kafka_archive", "--version", DEFAULT_VERSION], cwd=REPO,
                          timeout=60, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert archive.stat().st_mtime_ns == made
