"""harness scenarios: list the named scenarios (scenarios/*.toml) or show one.

What a scenario is: harness/run/scenarios.py. Listing only reads the
files: it starts nothing and needs no Kafka jars.
"""

from __future__ import annotations

import json
import textwrap

from harness.run import spec as specs
from harness.run.scenarios import all_scenarios, load
from infra.systems import SYSTEMS


def configure(parser) -> None:
    parser.add_argument("name", nargs="?", help="show this scenario in full (its description and settings)")
    parser.add_argument("--system", choices=list(SYSTEMS), help="only the scenarios of this system")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


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
