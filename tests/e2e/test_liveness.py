"""Liveness on a real run: the own broker with the planted bug
stall-after-restart (every broker killed and restarted; restarted brokers
never acknowledge again) is reported HANG, with the measured unavailability,
and `harness run` exits 1 although the history is valid."""

from __future__ import annotations

import json

import pytest

from tests.support import harness_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_cluster_that_never_recovers_is_a_hang(tmp_path):
    proc, run_dir = harness_run(tmp_path, "--scenario", "own-bug-stall-after-restart", "--seed", "3", timeout=900)
    out = proc.stdout + proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    live = results["liveness"]
    assert results["valid"] is True, out  # safety holds: nothing acknowledged was lost
    assert live["verdict"] == "hang", out
    assert proc.returncode == 1, out
    assert "HANG" in proc.stdout and "expectation met" in proc.stdout
    assert live["recovery_s"] is None and live["unrecovered_s"] > live["hang_after_s"]
    # The producers' last wait never ended, and it is the run's longest unavailability.
    assert live["producers"]["waits"][-1][2] is True
    assert live["unavailable_s"] >= live["unrecovered_s"]
    kills = [f for f in live["faults"] if f["fault"] == "kill"]
    assert kills and all(f["recovery_s"] is None for f in kills)
    report = (run_dir / "report.html").read_text()
    assert "HANG" in report
