"""The in-process engine: the kernel's two stages on one shard each, in this
process, with no JVM (`harness check --engine local`): a quick look, a
machine without Java, and fast tests. The rows come from the driver's read
of the history (checkers/history_read.py keeps them), so the history is
read once; the replicas' dumps are read here.
"""

from __future__ import annotations

from pathlib import Path

from checkers.kernel import rows as r
from checkers.kernel.extract import replica_rows
from checkers.kernel.facts import Facts
from checkers.kernel.stages import first_stage, second_stage
from core.history.dumps import columns, read_dump


def run(rows: r.Rows, facts: Facts, dumps: dict[str, Path], fold: dict[int, int]) -> list[dict]:
    """The partial results of the two stages over `rows` (every row of the
    history) and the nodes' `dumps` (those of `facts.replica_nodes`)."""
    handed, first = first_stage(rows, facts)
    on_disk = [replica_rows(node, *columns(chunk), fold)
               for node, name in enumerate(facts.replica_nodes) for chunk in read_dump(dumps[name])]
    return [first, second_stage(r.Rows.joined([handed, *on_disk]), facts)]
