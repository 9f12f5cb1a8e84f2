"""The cold-check benchmark (bench/cold_check.py): both arms really run, each
in a fresh process, their medians are recorded, and a history it cannot
take is one line, exit 2."""

from __future__ import annotations

import orjson
import pytest

from core.history.parquet import write_parquet
from lab.synthetic import Plan, generate
from tests.support import harness


@pytest.mark.spark
def test_a_cold_check_and_a_bare_scan_are_timed_side_by_side(tmp_path):
    history = tmp_path / "history.parquet"
    events = generate(Plan(events=2_000, seed=3, lost=1)).events
    write_parquet(events, history)
    proc = harness("bench", "cold", str(history), "--tries", "1", "--out", str(tmp_path / "cold.json"),
                   "--record-dir", str(tmp_path / "recorded"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("try 1: stock bare cold scan ")
    measured = orjson.loads((tmp_path / "cold.json").read_bytes())
    # Each a whole process with a JVM of its own: seconds, not milliseconds.
    assert measured["stock_bare_s"][0] > 1 and measured["bare_s"][0] > 1 and measured["check_s"][0] > 1
    assert measured["ratio_of_medians"] == pytest.approx(measured["check_s"][0] / measured["bare_s"][0], rel=1e-2)
    assert measured["ratio_to_stock"] == pytest.approx(measured["check_s"][0] / measured["stock_bare_s"][0],
                                                       rel=1e-2)
    # The same medians recorded, with the history's size and issue 16's target.
    [recorded] = (tmp_path / "recorded").glob("cold-*.json")
    result = orjson.loads(recorded.read_bytes())
    assert result["figures"]["events"] == len(events) and result["details"] == measured
    assert result["figures"]["ratio"] == pytest.approx(measured["ratio_of_medians"], abs=0.01)
    assert [(t["figure"], t["value"]) for t in result["targets"]] == [("ratio", result["figures"]["ratio"])]


def test_a_history_it_cannot_take_is_one_line(tmp_path):
    (tmp_path / "history.jsonl").write_text("{}\n")
    proc = harness("bench", "cold", str(tmp_path / "history.jsonl"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"harness: error: {tmp_path / 'history.jsonl'}: a Parquet history, "
                                               "please (the bare scan reads Parquet)"]
