"""The anomaly registry (checkers/registry.py) is the one place an anomaly is
defined: no other product code names one, every frame of the kernel has its
records, docs/history.md defines each, and a new record is all a new
anomaly over an existing frame takes (docs/checker.md, "Adding an
anomaly")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from checkers import registry
from checkers.anomaly import ALWAYS, FRAMES, Anomaly, pick
from checkers.check import Options, check_history
from checkers.summary import render

ROOT = Path(__file__).resolve().parents[2]
# Every package of the harness but the broker, a system under test with words of its own.
PACKAGES = ("core", "infra", "workloads", "nemesis", "checkers", "harness", "bench")


def _strings(path: Path):
    """Each string constant of a module, but its docstrings: (line, text)."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def test_no_product_code_but_the_registry_names_an_anomaly():
    name = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, registry.NAMES)) + r")(?![\w-])")
    found = [f"{path.relative_to(ROOT)}:{line}: {text[:60]!r}"
             for package in PACKAGES for path in (ROOT / package).rglob("*.py")
             if path != ROOT / "checkers" / "registry.py"
             for line, text in _strings(path) if name.search(text)]
    assert found == []


def test_every_frame_has_its_anomalies_and_every_anomaly_a_definition():
    assert len(set(registry.NAMES)) == len(registry.NAMES) == 21
    assert {a.frame for a in registry.ANOMALIES.values()} == set(FRAMES)
    table = (ROOT / "docs" / "history.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z0-9-]+)` \| (?:yes\*?|no) \|", table, re.MULTILINE))
    assert documented == set(registry.NAMES)
    assert all(a.meaning and a.counted and a.line for a in registry.ANOMALIES.values())


def test_an_anomaly_over_an_existing_frame_is_one_record(monkeypatch, hist, tmp_path):
    # The recipe, tried: a record of the by-value frame, nothing else, and the
    # checker counts it, shows its examples and says it in the summary.
    early = Anomaly(
        name="read-before-ack", when=ALWAYS, meaning="a value read before its send was acknowledged",
        counted="distinct values", frame="by-value",
        condition=lambda v: v.ok & v.read & (v.read_index < v.comp_index), order=("read_index", "value"),
        example=lambda v, at, facts: pick(v, at, value="value", read_index="read_index", ack_index="comp_index"),
        line=lambda e, clock: f"value {e['value']} read (event {e['read_index']}) before its ack "
                              f"(event {e['ack_index']})")
    monkeypatch.setattr(registry, "ANOMALIES", {**registry.ANOMALIES, early.name: early})
    monkeypatch.setattr(registry, "NAMES", tuple(registry.ANOMALIES))
    hist.send(0, 1, 0, 0)
    hist.add(0, "invoke", "send", key=0, value=2)
    hist.poll(1, (0, 0, 1), (0, 1, 2))  # 2 read at index 4, its ack at 5
    hist.add(0, "ok", "send", value=2, partition=0, offset=1)
    results = check_history(hist.write(tmp_path), Options(engine="local"))
    assert results["anomalies"]["read-before-ack"] == {
        "count": 1, "error": True, "examples": [{"value": 2, "read_index": 4, "ack_index": 5}]}
    assert results["valid"] is False
    assert "value 2 read (event 4) before its ack (event 5)" in render(results)


def test_a_condition_is_a_mask_over_its_frame_s_rows(planted_frames):
    for a in registry.ANOMALIES.values():
        frame = planted_frames[a.frame]
        mask = a.condition(frame)
        assert isinstance(mask, np.ndarray) and mask.dtype == bool and mask.shape == (len(frame),), a.name


@pytest.fixture(scope="module")
def planted_frames(tmp_path_factory) -> dict:
    """Every frame of the kernel made from the priming history, which holds every anomaly."""
    from checkers.check import _prime_dumps, _prime_events
    from checkers.history_read import HistoryRead
    from checkers.kernel import rows as r
    from checkers.kernel.stages import first_frames, second_frames
    from core.history.batches import tables
    from core.history.dumps import columns, dumps, read_dump
    from core.history.files import resolve
    from core.history.parquet import write_parquet
    from checkers.kernel.extract import replica_rows
    from checkers.folds import Transactions
    from checkers.kernel.transactions import Spans, cycles

    folder = tmp_path_factory.mktemp("prime")
    write_parquet(_prime_events(), folder / "history.parquet")
    _prime_dumps(folder)
    read = HistoryRead(keep_rows=True)
    for table in tables(resolve(folder)):
        read.add(table)
    nodes = dumps(folder)
    facts = read.facts({}, sorted(nodes))
    frames, handed = first_frames(r.Shard.joined([b[0] for b in read.rows]), facts)
    on_disk = [replica_rows(k, *columns(chunk)) for k, node in enumerate(sorted(nodes))
               for chunk in read_dump(nodes[node])]
    frames.update(second_frames(r.Shard.joined([handed, r.Shard({r.REPLICAS: on_disk})]), facts))
    frames["cycles"] = cycles(frames["torn"].ww, frames["txn-values"].wr, Spans.of(read.fold(Transactions).spans))
    assert all(len(frame) for frame in frames.values())
    return frames
