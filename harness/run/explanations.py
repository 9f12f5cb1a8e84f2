"""A run's stories: each anomaly example told from the history, the
cluster-state timeline and the disk dumps (checkers/explain.py), added to
its results. `harness run` and `harness check` both call it.
"""

from __future__ import annotations

import logging

from checkers.explain import evidence_run
from checkers.registry import STORIES
from core.history.files import resolve
from nemesis.registry import FAULT_ENDS

log = logging.getLogger(__name__)


def add_explanations(results: dict, history) -> dict:
    """results["explanations"]: a story per anomaly example, from the history
    and, where the run folder has them, states.jsonl and the disk dumps; with
    the dumps, results["on_disk"] too: which missing records the replicas
    still hold. A failure is logged, never fails the check."""
    try:
        results.update(evidence_run(resolve(history), results, STORIES, FAULT_ENDS))
    except Exception as e:  # noqa: BLE001 - stories are an aid; the verdict stands without them
        log.warning("no explanations: %s: %s", type(e).__name__, e)
        results["explanations"] = []
    return results
