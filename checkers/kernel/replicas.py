"""Replicas at the end: what each node's replica of a partition held, against
the final log (docs/history.md, "Replica logs at the end").

A run folder's `disk/NODE.jsonl.gz` lists every record each node's replicas
held at the end of the run (REPLICA rows: the node's number among
`Facts.replica_nodes`, the position, the leader epoch that wrote it, the
value, or a flag where it is no integer); the first stage hands on the
final logs' records (FINAL rows).
Where the final log of partition p is known, with end e, each position
below e that some replica holds and that the final reads returned a value
at is a row of the frame: a replica may be shorter than the log (it lags)
or hold more above e, and where the final reads returned nothing at an
offset nothing is concluded of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.compiled import compiled, first_not_below
from checkers.kernel import rows as r
from checkers.kernel.facts import lookup
from core.history.format import MAX_OFFSET

NONE = r.NONE


@dataclass
class Replicas:
    """A row per position below its partition's final end that a replica
    holds and the final log has a value at: `divergent`, how many of the
    replicas' records there hold another value than the final log's."""

    pos: np.ndarray
    divergent: np.ndarray
    final_value: np.ndarray  # the least value the final reads returned there
    # The replicas' records at those positions (by position), for examples.
    record_pos: np.ndarray
    record_node: np.ndarray
    record_value: np.ndarray
    record_epoch: np.ndarray
    record_divergent: np.ndarray
    record_not_a_value: np.ndarray  # the record's value is no integer (none the run wrote)

    def __post_init__(self) -> None:
        self.partition = self.pos >> r.POS_BITS
        self.offset = self.pos & MAX_OFFSET

    def __len__(self) -> int:
        return len(self.pos)

    def records_at(self, at: np.ndarray, nodes: list[str]) -> list[list[dict]]:
        """Each node's record at rows `at`, the divergent ones flagged."""
        out = []
        for pos in self.pos[at].tolist():
            lo, hi = (np.searchsorted(self.record_pos, pos, side) for side in ("left", "right"))
            out.append([{"node": nodes[k] if 0 <= k < len(nodes) else str(k), "value": None if odd else v,
                         "epoch": e, "diverges": bool(d)}
                        for k, v, e, d, odd in zip(self.record_node[lo:hi].tolist(), self.record_value[lo:hi].tolist(),
                                                   self.record_epoch[lo:hi].tolist(),
                                                   self.record_divergent[lo:hi].tolist(),
                                                   self.record_not_a_value[lo:hi].tolist())])
        return out


def replicas(records: r.Rows, final: r.Rows, ends: dict[int, int]) -> Replicas:
    """The frame of a shard's REPLICA and FINAL rows."""
    end = lookup(ends, records.pos >> r.POS_BITS)
    below = np.flatnonzero((end >= 0) & ((records.pos & MAX_OFFSET) < end))
    order = np.lexsort((final.value, final.pos))
    final_pos, final_value = final.pos[order], final.value[order]
    held = below[_held(final_pos, records.pos[below])]
    held = held[np.lexsort((records.process[held], records.pos[held]))]
    pos, value = records.pos[held], records.value[held]
    divergent = ~_pair_in(final_pos, final_value, pos, value, np.zeros(len(pos), bool)) | (records.y[held] == 1)
    starts = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1]))) if len(pos) else np.empty(0, np.int64)
    counts = np.add.reduceat(divergent.astype(np.int64), starts) if len(starts) else np.empty(0, np.int64)
    first = np.searchsorted(final_pos, pos[starts])
    return Replicas(pos[starts], counts, final_value[first], pos, records.process[held], value,
                    records.x[held], divergent, records.y[held] == 1)


def _held(final_pos: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Which of `pos` the final log (`final_pos`, sorted) has a value at."""
    if not len(final_pos):
        return np.zeros(len(pos), bool)
    at = np.minimum(np.searchsorted(final_pos, pos), len(final_pos) - 1)
    return final_pos[at] == pos


@compiled
def _pair_in(keys, values, key, value, out):
    """Whether each (key, value) is among the pairs (`keys`, `values`),
    sorted by key then value, into `out`."""
    for i in range(len(key)):
        k = first_not_below(keys, key[i], 0, len(keys))
        while k < len(keys) and keys[k] == key[i]:
            if values[k] == value[i]:
                out[i] = True
                break
            k += 1
    return out
