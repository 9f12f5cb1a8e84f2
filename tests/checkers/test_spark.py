"""The Spark session's settings (checkers/spark.py): a cluster master on this
machine's loopback address gets a driver that listens there too, one
elsewhere Spark's own choice of address; a JVM started for one small check
starts quickly."""

from __future__ import annotations

import pytest

from checkers import check
from checkers.spark import QUICK_START_JAVA, on_loopback


@pytest.mark.parametrize("master, loopback", [
    ("spark://127.0.0.1:7077", True),
    ("spark://localhost:7077", True),
    ("spark://127.0.0.1:7077,127.0.0.1:7078", True),
    ("spark://10.0.0.5:7077", False),
    ("spark://spark-master.example:7077", False),
    ("yarn", False),
    ("k8s://https://127.0.0.1:6443", False),
])
def test_a_master_on_the_loopback_address_is_recognised(master, loopback):
    assert on_loopback(master) is loopback


class _Started(Exception):
    pass


@pytest.mark.parametrize("small_events, expected", [(10, QUICK_START_JAVA), (0, "")])
def test_a_session_started_for_one_small_check_gets_the_quick_start_jvm(monkeypatch, hist, tmp_path,
                                                                         small_events, expected):
    """A cold `harness check` of a small history starts its JVM with the JIT's first tier only
    (faster to start; docs/benchmarks.md); a larger history's JVM keeps the defaults."""
    asked = {}

    def started(master=None, conf=None, memory=None, java_options=""):
        asked["java_options"] = java_options
        raise _Started

    monkeypatch.setattr(check, "get_session", started)
    monkeypatch.setattr(check, "SMALL_EVENTS", small_events)
    for v in range(3):
        hist.send(0, v, 0, v)
    with pytest.raises(_Started):
        check.check_history(hist.write(tmp_path), check.Options())
    assert asked["java_options"] == expected
