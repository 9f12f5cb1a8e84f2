"""Bad input for --system kafka: one line on stderr, exit status 2, nothing left."""

from __future__ import annotations

import json

import pytest

from tests.kafka.conftest import left_behind
from tests.support import harness, harness_run


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("harness: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("argv,env,words", [
    (["--kafka-version", "9.9.9"], {}, ["unknown Kafka version", "9.9.9"]),
    (["--kafka-version", "three"], {}, ["unknown Kafka version"]),
    (["--kafka-version", "4.0.0"], {}, ["no ZooKeeper mode"]),
    ([], {"HARNESS_KAFKA_CACHE": "/nonexistent/kafka-cache"}, ["not in the cache", "make setup"]),
    (["--kafka-dist", "/nonexistent/kafka_2.13-3.9.2.tgz"], {}, ["--kafka-dist", "no such file"]),
])
def test_bad_kafka_input_is_one_line_and_exit_2(results, argv, env, words):
    proc = harness("run", "--results", str(results), "--system", "kafka", *argv, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    line = one_error_line(proc.stderr)
    assert all(w in line for w in words), line
    assert not results.exists()  # refused before anything started


def test_kafka_flags_without_the_kafka_system_are_refused(results):
    proc = harness("run", "--results", str(results), "--kafka-mode", "kraft")
    assert proc.returncode == 2 and "--kafka-mode is a setting of --system kafka; it needs --system kafka" in one_error_line(proc.stderr)


@pytest.mark.integration
def test_a_kafka_that_fails_to_start_shows_its_log_and_leaves_nothing(tmp_path, results):
    spec = tmp_path / "spec.toml"
    spec.write_text('system = "kafka"\nnodes = 1\nzk-nodes = 1\nreplication-factor = 1\nmin-insync = 1\n'
                    '[broker]\n"num.io.threads" = "lots"\n')
    proc, run_dir = harness_run(results, "-c", str(spec), "--time-limit", "5")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_error_line(proc.stderr)
    assert "Kafka on n1 exited while starting" in line
    assert "num.io.threads" in line and "lots" in line  # Kafka's own words, from its log
    run = json.loads((run_dir / "run.json").read_text())
    assert run["outcome"].startswith("not carried out: Kafka on n1 exited while starting")
    assert (run_dir / "nodes" / "n1" / "server.log").is_file()  # collected before teardown
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}
