"""Getting Kafka's jars to nodes: a tarball unpacked once for local nodes, and
the upload over SSH that ssh/Vagrant nodes get (exercised on a real local
node, whose Remote is the same SSH code)."""

from __future__ import annotations

import tarfile

import pytest

from infra import kafka
from infra.kafka import KafkaOptions, KafkaSystem, resolve


def fake_dist(root, version="3.9.2"):
    home = root / f"kafka_2.13-{version}"
    (home / "libs").mkdir(parents=True)
    (home / "libs" / f"kafka_2.13-{version}.jar").write_bytes(b"not really a jar")
    (home / "config").mkdir()
    (home / "config" / "log4j.properties").write_text("log4j.rootLogger=INFO\n")
    return home


def test_a_tarball_is_unpacked_once_for_local_nodes(tmp_path, monkeypatch):
    monkeypatch.setenv(kafka.CACHE_ENV, str(tmp_path / "cache"))
    home = fake_dist(tmp_path / "src")
    tgz = tmp_path / "kafka.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(home, arcname=home.name)
    first = resolve(KafkaOptions(dist=str(tgz)), in_place=True)
    assert first.version == "3.9.2" and (first.home / "libs" / "kafka_2.13-3.9.2.jar").is_file()
    marker = first.home.parent / ".complete"
    stamp = marker.stat().st_mtime_ns
    again = resolve(KafkaOptions(dist=str(tgz)), in_place=True)
    assert again.home == first.home and marker.stat().st_mtime_ns == stamp
    # A check before a run writes nothing; remote nodes get the tarball as it is.
    assert resolve(KafkaOptions(dist=str(tgz)), in_place=False).home is None


@pytest.mark.integration
def test_remote_nodes_get_the_jars_uploaded_once(tmp_path, monkeypatch):
    from infra.cluster import ProvisionOptions, provision

    monkeypatch.setenv(kafka.CACHE_ENV, str(tmp_path / "cache"))
    home = fake_dist(tmp_path / "src")
    system = KafkaSystem("unused:2181", {}, KafkaOptions(dist=str(home)))
    system.dist = resolve(system.options, in_place=False)
    cluster = provision("local", ProvisionOptions(nodes=1))
    try:
        node = cluster.nodes[0]
        remote_home = system._ship(node)
        assert remote_home == f"{node.run_dir}/kafka-3.9.2"
        listing = node.remote.run(f"ls {remote_home}/libs {remote_home}/config").stdout.split()
        assert "kafka_2.13-3.9.2.jar" in listing and "log4j.properties" in listing
        shipped = node.remote.run(f"stat -c %Y.%y {remote_home}/.shipped").stdout
        node.remote.run(f"touch {remote_home}/libs/kept-by-the-second-call")
        assert system._ship(node) == remote_home  # the same tarball: nothing uploaded again
        assert node.remote.run(f"stat -c %Y.%y {remote_home}/.shipped").stdout == shipped
        assert "kept-by-the-second-call" in node.remote.run(f"ls {remote_home}/libs").stdout
    finally:
        cluster.teardown()
