"""No silent skips: a test that needs something of the machine says so
through tests/support.py's `need`, which fails where `make test` should have
set it up, and skips only when a developer asks for it (HARNESS_ALLOW_SKIPS=1)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import support


def test_a_missing_prerequisite_fails_and_names_it(monkeypatch):
    monkeypatch.delenv(support.ALLOW_SKIPS, raising=False)
    with pytest.raises(pytest.fail.Exception, match="this machine lacks chromium .*HARNESS_ALLOW_SKIPS=1"):
        support.need(False, "chromium")
    support.need(True, "chromium")  # present: nothing happens


def test_a_developer_may_ask_to_skip_instead(monkeypatch):
    monkeypatch.setenv(support.ALLOW_SKIPS, "1")
    with pytest.raises(pytest.skip.Exception, match="this machine lacks /dev/fuse"):
        support.need(False, "/dev/fuse")


def test_no_test_skips_on_its_own():
    """Every skip goes through `need`: a bare pytest.skip, skipif or
    importorskip would let a half-set-up CI pass green."""
    here = Path(__file__).resolve().parent
    bare = re.compile(r"pytest\.(skip\(|importorskip\()|mark\.skipif|mark\.skip\b")
    found = [f"{path.relative_to(here)}:{n}" for path in here.rglob("*.py") if path.name != "support.py"
             and path != Path(__file__).resolve()
             for n, line in enumerate(path.read_text().splitlines(), 1) if bare.search(line)]
    assert found == []
