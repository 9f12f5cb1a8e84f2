"""Kafka's jars from Maven Central: the cache, its errors, a user's --kafka-dist."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from core.errors import UserError
from infra import kafka_dist as kd

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infra.kafka_dist", *args], cwd=REPO, capture_output=True,
                          text=True, env=env, timeout=300)


def test_default_version_is_cached_and_classpath_points_at_jars():
    # `make setup` resolved it; a run only looks it up.
    cp = kd.kafka_classpath()
    assert cp.endswith("/libs/*")
    libs = Path(cp[:-2])
    assert (libs / f"kafka_2.13-{kd.DEFAULT_VERSION}.jar").is_file()
    assert list(libs.glob("slf4j-reload4j-*.jar")), "the broker needs a log binding"
    assert kd.log4j_jvm_flag(libs.parent).startswith("-Dlog4j.configuration=file:")


def test_cached_version_needs_no_maven(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn on PATH: a download would fail
    libs = kd.ensure_kafka(kd.DEFAULT_VERSION, kd.DEFAULT_CACHE)
    assert (libs / f"kafka_2.13-{kd.DEFAULT_VERSION}.jar").is_file()


def test_missing_cache_is_a_one_line_error(tmp_path):
    with pytest.raises(UserError) as e:
        kd.kafka_classpath("3.9.2", tmp_path / "empty")
    message = str(e.value)
    assert "not in the cache" in message and "make setup" in message and "\n" not in message


@pytest.mark.parametrize("bad", ["", "latest", "3.9", "3.9.2; rm -rf /", "../3.9.2"])
def test_malformed_versions(bad, tmp_path):
    with pytest.raises(UserError, match="bad Kafka version"):
        kd.ensure_kafka(bad, tmp_path)


@pytest.mark.integration
def test_unknown_version_exits_2_with_one_line(tmp_path):
    proc = _cli("--version", "3.9.99", "--cache-dir", str(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown Kafka version 3.9.99" in lines[0] and "3.9.2" in lines[0]
    assert not (tmp_path / "3.9.99").exists()


def test_cli_bad_flag_is_one_line():
    proc = _cli("--versoin", "1")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.integration
def test_resolves_with_maven_into_a_fresh_cache_once(tmp_path):
    """The real path: mvn from Maven Central (jars already in ~/.m2 make it quick)."""
    proc = _cli("--version", kd.DEFAULT_VERSION, "--cache-dir", str(tmp_path), "--print-classpath")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{tmp_path / kd.DEFAULT_VERSION / 'libs'}/*"
    home = tmp_path / kd.DEFAULT_VERSION
    assert (home / ".complete").is_file() and (home / "config" / "log4j.properties").is_file()
    jars = sorted(p.name for p in (home / "libs").glob("*.jar"))
    assert f"kafka_2.13-{kd.DEFAULT_VERSION}.jar" in jars and f"kafka-clients-{kd.DEFAULT_VERSION}.jar" in jars
    # No leftovers of the staging folders; a second call is silent and quick.
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".lock")) == [kd.DEFAULT_VERSION]
    again = _cli("--version", kd.DEFAULT_VERSION, "--cache-dir", str(tmp_path))
    assert again.returncode == 0 and again.stderr == ""
    # The resolved jars run: Kafka prints its version.
    run = subprocess.run(["java", "-cp", f"{home / 'libs'}/*", "kafka.Kafka", "--version"],
                         capture_output=True, text=True, timeout=120)
    assert kd.DEFAULT_VERSION in run.stdout + run.stderr


def test_kafka_dist_folder_and_tarball(tmp_path):
    home = kd.kafka_home()
    dist = kd.resolve_kafka_dist(home)
    assert dist.kind == "folder" and dist.version == kd.DEFAULT_VERSION
    tarball = kd.dist_tarball(dist, tmp_path)
    assert tarball.name == f"kafka-{kd.DEFAULT_VERSION}.tgz"
    assert kd.dist_tarball(dist, tmp_path) == tarball  # packed once
    packed = kd.resolve_kafka_dist(tarball)
    assert packed.kind == "tarball" and packed.version == kd.DEFAULT_VERSION
    assert packed.top == f"kafka-{kd.DEFAULT_VERSION}"
    with tarfile.open(tarball) as tar:
        assert f"kafka-{kd.DEFAULT_VERSION}/config/log4j.properties" in tar.getnames()


def test_kafka_dist_apache_layout(tmp_path):
    # The layout of Apache's kafka_2.13-X.tgz: <top>/libs/kafka_2.13-X.jar
    top = tmp_path / "kafka_2.13-3.8.1"
    (top / "libs").mkdir(parents=True)
    (top / "libs" / "kafka_2.13-3.8.1.jar").write_bytes(b"")
    (top / "libs" / "kafka_2.13-3.8.1-sources.jar").write_bytes(b"")
    assert kd.resolve_kafka_dist(top).version == "3.8.1"
    tgz = tmp_path / "kafka.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    dist = kd.resolve_kafka_dist(tgz)
    assert (dist.kind, dist.version, dist.top) == ("tarball", "3.8.1", "kafka_2.13-3.8.1")


@pytest.mark.parametrize("make, words", [
    (lambda p: p / "missing", "no such file"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "no libs/kafka_2.13"),
    (lambda p: (p / "f.txt").write_text("x") and p / "f.txt", "neither a folder nor a tar"),
])
def test_kafka_dist_bad_paths(tmp_path, make, words):
    with pytest.raises(UserError, match=words):
        kd.resolve_kafka_dist(make(tmp_path))


def test_kafka_dist_jars_not_under_libs(tmp_path):
    (tmp_path / "kafka_2.13-3.9.2.jar").write_bytes(b"")
    with pytest.raises(UserError, match="libs/"):
        kd.resolve_kafka_dist(tmp_path)


def test_tarball_without_kafka(tmp_path):
    (tmp_path / "x").write_text("x")
    tgz = tmp_path / "other.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "x", arcname="x")
    with pytest.raises(UserError, match="no libs/kafka_2.13"):
        kd.resolve_kafka_dist(tgz)


def test_no_mvn_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="mvn is not installed"):
        kd.ensure_kafka("3.9.1", tmp_path / "cache")
    assert os.environ["PATH"] == str(tmp_path)
