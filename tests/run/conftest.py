"""Two real runs of `harness run` that several tests read (the terminal's
output, `harness serve`'s compare view), made once per session: a short
run of the own broker with brokers killed, and the planted duplicate bug
(`own-bug-no-dedup`: idempotent producers, leaders paused past the 2 s
request time-out) cut short. Both on 3 local nodes, with stdout and stderr
captured (not a terminal)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import subprocess

import pytest

from tests.support import harness


@dataclass
class RealRun:
    proc: subprocess.CompletedProcess
    dir: Path


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory) -> tuple[Path, RealRun, RealRun]:
    """(the results folder, the kill run, the no-dedup run)."""
    results = tmp_path_factory.mktemp("results")

    def run(*argv: str) -> RealRun:
        before = set(results.glob("*/*/run.json"))
        proc = harness("run", "--results", str(results), *argv)
        made = set(results.glob("*/*/run.json")) - before
        assert len(made) == 1, proc.stdout + proc.stderr
        return RealRun(proc, made.pop().parent)

    # Kills: a killed broker's clients are refused on reconnecting, and librdkafka says so every time.
    plain = run("--nemesis", "kill", "--nemesis-interval", "3", "--time-limit", "10", "--nodes", "3", "--seed", "7")
    buggy = run("--scenario", "own-bug-no-dedup", "--time-limit", "16", "--seed", "7")
    for r in (plain, buggy):
        assert r.proc.returncode in (0, 1), r.proc.stdout + r.proc.stderr
    assert plain.dir != buggy.dir
    return results, plain, buggy
