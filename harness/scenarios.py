"""harness scenarios: list the named scenarios (scenarios/*.toml) or show one.

A scenario is a spec file with a `description` (the configuration, the fault
and the anomaly it should show) and an `[expect]` table that `harness run
--scenario NAME` checks the verdict against. Listing only reads the files:
it starts nothing and needs no Kafka jars.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from core.errors import UserError
from harness import spec as specs
from infra.systems import SYSTEMS


def configure(parser) -> None:
    parser.add_argument("name", nargs="?", help="show this scenario in full (its description and settings)")
    parser.add_argument("--system", choices=list(SYSTEMS), help="only the scenarios of this system")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


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
    return {"name": path.stem, "system": values.get("system", specs.FIELDS["system"].default), "description": description.strip(),
            "expect": expect, "settings": values}


def all_scenarios(folder: Path = specs.SCENARIOS) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*.toml")):
        try:
            out.append(load(path))
        except UserError as e:  # one broken file does not hide the others
            out.append({"name": path.stem, "system": "?", "description": f"(unusable: {e})",
                        "expect": {}, "settings": {}})
    return out


def run(args) -> int:
    if args.name:
        scenario = load(specs.scenario_file(args.name))
        if args.json:
            print(json.dumps(scenario, indent=1))
            return 0
        print(f"{scenario['name']}  (system {scenario['system']})\n")
        print(textwrap.indent(scenario["description"], "  "))
        print(f"\nexpect: {specs.expect_words(scenario['expect'])}")
        print("settings:")
        for key, value in scenario["settings"].items():
            print(f"  {key} = {json.dumps(value)}")
        print(f"\nrun it: harness run --scenario {scenario['name']}")
        return 0
    scenarios = [s for s in all_scenarios() if not args.system or s["system"] == args.system]
    if args.json:
        print(json.dumps(scenarios, indent=1))
        return 0
    if not scenarios:
        print(f"no scenarios in {specs.SCENARIOS}")
        return 0
    width = max(len(s["name"]) for s in scenarios)
    for s in scenarios:
        first = s["description"].split(". ")[0].replace("\n", " ")
        print(f"{s['name']:<{width}}  {s['system']:<5}  expect {specs.expect_words(s['expect'])}")
        print(f"{'':<{width}}  {textwrap.shorten(first, 100, placeholder=' ...')}")
    print(f"\n{len(scenarios)} scenarios; `harness scenarios NAME` shows one, "
          "`harness run --scenario NAME` runs it")
    return 0
