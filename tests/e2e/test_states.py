"""The cluster-state timeline (states.jsonl, docs/history.md) of a real own-broker
run that kills partition leaders: leader changes with their epochs, nodes down
and back, and the truncations the brokers logged."""

from __future__ import annotations

import re

import pytest

from tests.support import check_kill_timeline, harness_run, states_lines

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRUNCATING = re.compile(r"TRUNCATING harness-(\d+) to (\d+) ")


def test_killing_leaders_shows_in_the_timeline(tmp_path):
    proc, run_dir = harness_run(tmp_path, "--nemesis", "kill", "--nemesis-targets", "leaders", "--time-limit", "30",
                                "--nemesis-interval", "6", "--seed", "3")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    logged = [(node.name, int(m[1]), int(m[2])) for node in sorted((run_dir / "nodes").iterdir())
              if (node / "broker.log").is_file() for m in TRUNCATING.finditer((node / "broker.log").read_text())]
    counts = check_kill_timeline(run_dir, logged)
    assert counts["truncations"] == len(set(logged))
    states = states_lines(run_dir)
    first = [x for x in states if x["kind"] == "partition"][:5]
    assert sorted(x["partition"] for x in first) == [0, 1, 2, 3, 4]  # every partition at the first sample
    assert all(x["leader"] in x["isr"] and isinstance(x["epoch"], int) for x in first)
    assert any(x["kind"] == "partition" and isinstance(x["hw"], int) and x["hw"] > 0 for x in states)
    assert any(x["kind"] == "controller" and x["node"] for x in states)
