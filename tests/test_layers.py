"""The import structure of docs/design.md (Layout), read from the code itself:
each package imports only the layers below it, no file imports one that
imports it back, and imports inside functions are only of heavy third-party
modules (loaded when a command needs them, not to dodge a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What each package may import of ours. The broker is a system under test of its own.
ALLOWED = {
    "core": set(),
    "broker": set(),
    "infra": {"core"},
    "workloads": {"core", "infra"},
    "nemesis": {"core", "infra"},
    "checkers": {"core"},
    "harness": {"core", "infra", "workloads", "nemesis", "checkers"},
    # Floors beside the product, for tests and benchmarks only: no stage imports them.
    "lab": {"core", "infra", "broker", "workloads", "nemesis", "checkers"},
    "bench": {"core", "infra", "broker", "workloads", "nemesis", "checkers", "lab"},
}
HEAVY = {"pyspark", "confluent_kafka", "kafka", "paramiko", "docker", "pyarrow", "pandas", "numpy", "matplotlib",
         "kazoo", "cryptography", "mfusepy"}


def modules() -> dict[str, Path]:
    found = {}
    for package in ALLOWED:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = modules()


def imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement names (`from pkg import mod` names pkg.mod)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def imports_of(path: Path) -> tuple[list[str], list[tuple[int, str]]]:
    """(every module imported, (line, module) of those imported inside a function)."""
    tree = ast.parse(path.read_text())
    everything, inner = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    inner += [(sub.lineno, name) for name in imported(sub)]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            everything += imported(node)
    return everything, inner


def owning_module(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_the_layout_is_read():
    assert len(MODULES) > 80 and "core.history.format" in MODULES and "harness.run.runner" in MODULES


def test_each_package_imports_only_the_layers_below_it():
    wrong = []
    for name, path in MODULES.items():
        package = name.split(".")[0]
        for target in imports_of(path)[0]:
            top = target.split(".")[0]
            if top in ALLOWED and top != package and top not in ALLOWED[package]:
                wrong.append(f"{name} imports {target}")
    assert wrong == []


# Inside harness/: the rooms, each importing only those after it: a campaign
# runs runs, a run draws pages, pages draw what they are given. The commands
# at harness/'s root may import any room.
ROOMS = ("campaign", "run", "pages")


def room(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 2 and parts[1] in ROOMS else None


def test_the_rooms_of_harness_import_one_way():
    wrong = []
    for name, path in MODULES.items():
        here = room(name)
        for target in imports_of(path)[0]:
            there = room(target)
            if target.startswith("harness.") and target.split(".")[1] not in ROOMS and here is not None:
                wrong.append(f"{name} imports a command, {target}")
            elif here is not None and there is not None and ROOMS.index(there) < ROOMS.index(here):
                wrong.append(f"{name} imports {target}")
    assert wrong == []
    assert {room(n) for n in MODULES} >= set(ROOMS)


def test_no_file_imports_one_that_imports_it_back():
    deps = {name: {owning_module(t) for t in imports_of(path)[0]} - {None, name}
            for name, path in MODULES.items()}
    cycles, state, stack = [], {}, []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(deps[u]):
            # a package's __init__ is imported on the way to its modules; only files count
            if v not in deps:
                continue
            if state.get(v) == "open":
                cycles.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for name in sorted(deps):
        if name not in state:
            visit(name)
    assert cycles == []


def test_imports_inside_functions_are_only_of_heavy_third_party_modules():
    wrong = [f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}"
             for name, path in MODULES.items()
             for line, target in imports_of(path)[1]
             if target.split(".")[0] not in HEAVY]
    assert wrong == []
