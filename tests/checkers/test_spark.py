"""The Spark session's settings by master (checkers/spark.py): a cluster
master on this machine's loopback address gets a driver that listens there
too; one elsewhere gets Spark's own choice of address."""

from __future__ import annotations

import pytest

from checkers.spark import on_loopback


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
