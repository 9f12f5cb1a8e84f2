"""Shared test configuration: one Spark session for every test that needs one."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from checkers.spark import get_session

    session = get_session("local[2]")
    yield session
    session.stop()
