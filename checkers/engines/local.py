"""The in-process engine: the kernel's two stages in this process, with no
JVM (`harness check --engine local`): a quick look, a machine without Java,
and fast tests. The rows come from the driver's read of the history
(checkers/history_read.py keeps them, a batch's cut into `SHARDS` shards as
it is read), so the history is read once; the replicas' dumps are read
here. Each stage runs its shards in threads, one per core (each first
stage's thread also cuts what it hands on for the second): the kernel's
loops are compiled without Python's lock and NumPy's let it go. The
transactions' cycles are searched last, in groups of whole segments
(checkers/kernel/txn_segments.py) one after another: the same search as
Spark's executors make, over the edges this process already holds.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from checkers.kernel import rows as r
from checkers.kernel.extract import replica_rows
from checkers.kernel.facts import Facts
from checkers.kernel.stages import cycle_stage, first_stage, second_stage
from checkers.kernel.transactions import Spans
from checkers.kernel.txn_segments import backward, cut, edge_pairs
from core.history.dumps import columns, read_dump


SHARDS = max(1, os.cpu_count() or 1)
# The cycles' rows searched in one graph at most (a larger segment alone): enough
# that a search's fixed cost is small beside its work.
GROUP_ROWS = 1 << 20


def run(batches: list[list[r.Shard]], facts: Facts, dumps: dict[str, Path], fold: dict[int, int],
        spans: Spans) -> list[dict]:
    """The partial results of the stages over `batches` (every batch of
    the history, each cut in the same number of shards) and the nodes'
    `dumps` (those of `facts.replica_nodes`); `spans`: the completed
    transactions' (checkers/kernel/transactions.py)."""
    k = len(batches[0]) if batches else 1
    shards = [r.Shard.joined([batch[i] for batch in batches]) for i in range(k)]
    del batches

    def first(shard: r.Shard) -> tuple[list[r.Shard], dict]:
        handed, found = first_stage(shard, facts, k)
        return handed.split(k), found  # cut for the second stage in the same thread, not one after another

    with ThreadPoolExecutor(k, thread_name_prefix="kernel") as pool:
        firsts = [pool.submit(first, shard) for shard in shards]
        del shards
        # The dumps are read meanwhile.
        on_disk = r.Shard({r.REPLICAS: r.Rows.joined([replica_rows(node, *columns(chunk), fold)
                                                      for node, name in enumerate(facts.replica_nodes)
                                                      for chunk in read_dump(dumps[name])])})
        firsts = [f.result() for f in firsts]
        handed = [split for split, _ in firsts] + [on_disk.split(k)]
        seconds = list(pool.map(lambda i: second_stage(r.Shard.joined([h[i] for h in handed]), facts), range(k)))
    # The stages' rows given back before the search.
    handed, partials = None, [found for _, found in firsts] + [found for found, _ in seconds]
    ww, wr = edge_pairs(r.Rows.joined([edges for _, edges in seconds]))
    del firsts, seconds
    rows = cut(ww, wr, backward(ww, wr), spans)
    del ww, wr
    return partials + [cycle_stage(group, spans) for group in rows.groups(GROUP_ROWS)]
