"""Shared test configuration: one Spark session for every test that needs one,
and two real runs of `harness run` that several tests read (the terminal's
output, `harness serve`'s compare view, a run following its seed's plan),
made once per session: a short run of the own broker under partitions,
kills and pauses, and the planted duplicate bug (`own-bug-no-dedup`:
idempotent producers, leaders paused past the 2 s request time-out) cut
short. Both on 3 local nodes, with stdout and stderr captured (not a
terminal).

The runs the integration tests start share one check service, as a nightly's
runs do (`checkers.service.ENV`): each run's own service would start a JVM
and compile the checker's plans again, paid again by every run.
The run under partitions, kills and pauses keeps a service of its own, so
that path is tested too (tests/e2e/test_run.py)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from checkers import service
from tests.support import harness


@pytest.fixture(scope="session")
def spark():
    from checkers.spark import get_session

    session = get_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def shared_check_service(tmp_path_factory):
    """The check service the session's runs share, named in the environment every
    `harness` the tests start inherits; its log in its own folder."""
    logs = tmp_path_factory.mktemp("shared-check-service")
    shared = service.start(logs / "check-service.log", jvm_log_path=logs / "spark.log")
    os.environ[service.ENV] = shared.address
    yield shared
    os.environ.pop(service.ENV, None)
    shared.close()


@pytest.fixture(autouse=True)
def _runs_share_a_check_service(request):
    """Integration tests (the ones that start runs) get the shared check service;
    a quick loop of unit tests never starts its JVM, nor do the loopback tests,
    which start no run (they run beside the others, in a pytest of their own)."""
    marked = request.node.get_closest_marker
    if marked("integration") is not None and marked("loopback") is None:
        request.getfixturevalue("shared_check_service")


@dataclass
class RealRun:
    proc: subprocess.CompletedProcess
    dir: Path


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory, shared_check_service) -> tuple[Path, RealRun, RealRun]:
    """(the results folder, the run under partitions, kills and pauses, the no-dedup run)."""
    results = tmp_path_factory.mktemp("results")

    def run(*argv: str, env: dict | None = None) -> RealRun:
        before = set(results.glob("*/*/run.json"))
        proc = harness("run", "--results", str(results), *argv, env=env)
        made = set(results.glob("*/*/run.json")) - before
        assert len(made) == 1, proc.stdout + proc.stderr
        return RealRun(proc, made.pop().parent)

    # Seed 7 plans a partition, a pause, a kill and a pause in 12 s (tests/e2e/test_run.py checks
    # they ran as planned). Kills: a killed broker's clients are refused on reconnecting, and
    # librdkafka says so every time.
    plain = run("--nemesis", "partition,kill,pause", "--nemesis-interval", "2", "--time-limit", "12", "--nodes", "3",
                "--seed", "7", env={service.ENV: ""})  # a check service of its own
    buggy = run("--scenario", "own-bug-no-dedup", "--time-limit", "16", "--seed", "7")
    for r in (plain, buggy):
        assert r.proc.returncode in (0, 1), r.proc.stdout + r.proc.stderr
    assert plain.dir != buggy.dir
    return results, plain, buggy
