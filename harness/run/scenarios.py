"""The named scenarios (scenarios/*.toml) as read: a spec file with a
`description` (the configuration, the fault and the anomaly it should show)
and an `[expect]` table that `harness run --scenario NAME` checks the
verdict against. `harness scenarios` lists them; calibrate runs them.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import UserError
from harness.run import spec as specs


def load(path: Path) -> dict:
    """One scenario file as {name, system, description, expect, settings}; a
    file that cannot be read is a UserError naming it."""
    values = specs.load_file(str(path))
    description = values.pop("description", "")
    expect = values.pop("expect", {})
    if not isinstance(description, str) or not description.strip():
        raise UserError(f"{path}: a scenario needs a description")
    if not isinstance(expect, dict) or not expect:
        raise UserError(f"{path}: a scenario needs an [expect] table")
    return {"name": path.stem, "system": values.get("system", specs.FIELDS["system"].default),
            "description": description.strip(), "expect": expect, "settings": values}



def all_scenarios(folder: Path = specs.SCENARIOS) -> list[dict]:
    """Every scenario of `folder`, by name; one that cannot be read says why in its description."""
    out = []
    for path in sorted(folder.glob("*.toml")):
        try:
            out.append(load(path))
        except UserError as e:  # one broken file does not hide the others
            out.append({"name": path.stem, "system": "?", "description": f"(unusable: {e})",
                        "expect": {}, "settings": {}})
    return out

