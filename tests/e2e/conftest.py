"""One real run that two end-to-end tests read: the own broker's planted
ack-before-replication bug with partition leaders cut off
(`own-bug-ack-before-replication`: an explicit schedule cuts each
partition's leader in turn until another is elected, past the ZooKeeper
session). tests/e2e/test_run.py checks the loss it shows,
tests/e2e/test_stories.py its disk evidence and stories."""

from __future__ import annotations

import pytest

from tests.support import harness_run


@pytest.fixture(scope="session")
def ack_before_replication_run(tmp_path_factory, shared_check_service):
    """(the completed `harness run`, its run folder)."""
    return harness_run(tmp_path_factory.mktemp("ack-before-replication"), "--scenario",
                       "own-bug-ack-before-replication", "--seed", "10", timeout=900)
