"""The published tallies are the kept calibration records' own tables: the
mutation score in docs/scenarios.md and on the README's first screen is
exactly what `harness calibrate` makes of docs/calibration/mutants.json, and
the scenarios' latest calibration table is that of scenarios.json, so a
claim cannot drift from the runs that measured it."""

from __future__ import annotations

from pathlib import Path

from harness.campaign.calibrate import load_records, mutation_table, table

ROOT = Path(__file__).resolve().parents[3]
KEPT = ROOT / "docs" / "calibration" / "mutants.json"
SCENARIOS = ROOT / "docs" / "calibration" / "scenarios.json"


def test_the_published_mutation_score_is_the_kept_records_table():
    records = load_records(KEPT)
    assert records, f"{KEPT} holds no runs"
    published = mutation_table(records)
    for page in (ROOT / "docs" / "scenarios.md", ROOT / "README.md"):
        assert published in page.read_text(), f"{page.name} does not show the table of {KEPT.name}:\n{published}"
    # Every run names the code it measured, and each planted bug has its control.
    assert all(r.commit for r in records)
    assert {r.scenario for r in records if r.control} == {r.scenario for r in records if not r.control}


def test_the_published_scenario_tally_is_the_kept_records_table():
    records = load_records(SCENARIOS)
    assert records and all(r.commit for r in records)
    assert table(records) in (ROOT / "docs" / "scenarios.md").read_text()
    # Each scenario the README credits with that commit holds that many runs met in the records.
    readme = (ROOT / "README.md").read_text()
    for name in {r.scenario for r in records}:
        runs = [r for r in records if r.scenario == name]
        row = next(ln for ln in readme.splitlines() if f"`{name}`" in ln and runs[0].commit[:7] in ln)
        assert f"{sum(r.met for r in runs)} of {len(runs)}" in row, (name, row)
