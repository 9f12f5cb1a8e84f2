"""Every file the project ships for `harness run` and `harness nightly` is
read here as those commands read it: each scenario (scenarios/*.toml) is a
spec with a description and an expectation whose anomalies the registry
knows, and each nightly matrix (nightly/*.toml) loads with every cell's spec
checked. A broken file fails CI, not a user's night."""

from __future__ import annotations

import pytest

from harness.campaign import matrix
from harness.run import scenarios
from harness.run.spec import SCENARIOS, build

SCENARIO_FILES = sorted(SCENARIOS.glob("*.toml"))
MATRIX_FILES = sorted((SCENARIOS.parent / "nightly").glob("*.toml"))


def test_the_files_are_found():
    assert len(SCENARIO_FILES) >= 30 and {p.name for p in MATRIX_FILES} >= {"smoke.toml", "default.toml"}


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.stem)
def test_each_scenario_is_a_spec_with_an_expectation(path):
    scenario = scenarios.load(path)
    spec = build({**scenario["settings"], "description": scenario["description"], "expect": scenario["expect"]})
    # build checks the expectation as `harness run --scenario` does: every anomaly it names is the registry's
    assert spec.expect == scenario["expect"] and spec.system == scenario["system"]


@pytest.mark.parametrize("path", MATRIX_FILES, ids=lambda p: p.stem)
def test_each_nightly_matrix_loads_with_every_cell_checked(path):
    m = matrix.load(path)
    assert m.cells
    for cell in m.cells:
        assert cell.label and cell.seed is not None
