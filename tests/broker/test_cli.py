"""The broker's command line: settings by Kafka name, one-line errors with exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker.cli import config_from_args
from broker.config import ConfigError

BASE = ["--id", "2", "--listen", "127.0.0.1:29001", "--zookeeper", "127.0.0.1:21811/own", "--data-dir", "/tmp/x"]


def test_settings_from_file_and_flags(tmp_path):
    cfg_file = tmp_path / "broker.properties"
    cfg_file.write_text("# comment\nmin.insync.replicas=2\nunclean.leader.election.enable = true\n"
                        "log.flush.interval.messages=1000\nnum.partitions=6\n")
    cfg, _ = config_from_args(BASE + ["--config", str(cfg_file), "--set", "num.partitions=4",
                                      "--debug-bug", "no-dedup"])
    assert cfg.broker_id == 2 and (cfg.host, cfg.port) == ("127.0.0.1", 29001)
    assert cfg.min_insync_replicas == 2 and cfg.unclean_leader_election is True
    assert cfg.log_flush_interval_messages == 1000 and cfg.num_partitions == 4  # --set wins
    assert cfg.debug_bugs == frozenset({"no-dedup"})
    assert cfg.zookeeper == "127.0.0.1:21811/own"
    assert cfg.log_file.endswith("broker.log")


def test_defaults_are_kafkas():
    cfg, _ = config_from_args(BASE)
    assert cfg.log_flush_interval_messages is None and cfg.log_flush_interval_ms is None  # no fsync per write
    assert cfg.unclean_leader_election is False and cfg.auto_create_topics is True
    assert cfg.replica_lag_time_max_ms == 30000 and cfg.log_segment_bytes == 1 << 30
    assert not cfg.debug_bugs


@pytest.mark.parametrize("extra, message", [
    (["--set", "min.insync.replicas=0"], "bad value '0' for min.insync.replicas"),
    (["--set", "unclean.leader.election.enable=maybe"], "expected true or false"),
    (["--set", "no.such.setting=1"], "unknown setting 'no.such.setting'"),
    (["--set", "novalue"], "expects KEY=VALUE"),
    (["--debug-bug", "everything"], "unknown --debug-bug"),
    (["--listen", "nope"], "expected HOST:PORT"),
    (["--id", "-1"], "non-negative"),
])
def test_bad_input_is_a_user_error(extra, message):
    args = list(BASE)
    if extra[0] in ("--listen", "--id"):
        i = args.index(extra[0])
        args[i + 1] = extra[1]
    else:
        args += extra
    with pytest.raises(ConfigError, match=message):
        config_from_args(args)


def test_process_prints_one_line_and_exits_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "broker", *BASE[:-1], str(tmp_path), "--set", "log.segment.bytes=x"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "log.segment.bytes" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "broker", "--config", str(tmp_path / "missing"), *BASE],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "cannot read --config" in r.stderr
