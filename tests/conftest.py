"""Shared test configuration: one Spark session for every test that needs one,
and two real runs of `harness run` that several tests read (the terminal's
output, `harness serve`'s compare view, a run following its seed's plan),
made once per session: a short run of the own broker under partitions,
kills and pauses, and the planted duplicate bug (`own-bug-no-dedup`:
idempotent producers, leaders paused past the 2 s request time-out) cut
short. Both on 3 local nodes, with stdout and stderr captured (not a
terminal)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import harness


@pytest.fixture(scope="session")
def spark():
    from checkers.spark import get_session

    session = get_session("local[2]")
    yield session
    session.stop()


@dataclass
class RealRun:
    proc: subprocess.CompletedProcess
    dir: Path


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory) -> tuple[Path, RealRun, RealRun]:
    """(the results folder, the run under partitions, kills and pauses, the no-dedup run)."""
    results = tmp_path_factory.mktemp("results")

    def run(*argv: str) -> RealRun:
        before = set(results.glob("*/*/run.json"))
        proc = harness("run", "--results", str(results), *argv)
        made = set(results.glob("*/*/run.json")) - before
        assert len(made) == 1, proc.stdout + proc.stderr
        return RealRun(proc, made.pop().parent)

    # Seed 7 plans a partition, a pause, a kill and a pause in 12 s (tests/e2e/test_run.py checks
    # they ran as planned). Kills: a killed broker's clients are refused on reconnecting, and
    # librdkafka says so every time.
    plain = run("--nemesis", "partition,kill,pause", "--nemesis-interval", "2", "--time-limit", "12", "--nodes", "3",
                "--seed", "7")
    buggy = run("--scenario", "own-bug-no-dedup", "--time-limit", "16", "--seed", "7")
    for r in (plain, buggy):
        assert r.proc.returncode in (0, 1), r.proc.stdout + r.proc.stderr
    assert plain.dir != buggy.dir
    return results, plain, buggy
