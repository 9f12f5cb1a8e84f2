"""Helpers the test areas share: the installed `harness` command in a
subprocess (as a user runs it), a run's history, polling for a condition,
and the clusters a process owns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from infra import state as st

REPO = Path(__file__).resolve().parents[1]
HARNESS = str(Path(sys.executable).with_name("harness"))


def harness(*argv: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`harness ARGV` from the repository's folder, output captured."""
    return subprocess.run([HARNESS, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **(env or {})})


def harness_run(results: Path, *argv: str, env: dict | None = None,
                timeout: float = 600) -> tuple[subprocess.CompletedProcess, Path]:
    """`harness run --results RESULTS ARGV`, and the run directory it made
    (RESULTS itself if it made none)."""
    proc = harness("run", "--results", str(results), *argv, env=env, timeout=timeout)
    runs = sorted(results.glob("*/*/run.json"))
    return proc, (runs[-1].parent if runs else results)


def history_events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """The first true value of `predicate()`, polled until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def clusters_owned_by(pid: int) -> list[str]:
    return [c for c in st.list_cluster_ids() if (st.read_state(c) or {}).get("owner_pid") == pid]
