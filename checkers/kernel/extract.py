"""A batch of a history as the kernel's rows (checkers/kernel/rows.py).

Every client event the anomalies read becomes rows, whatever the batch's
place in the history: a send event one row, an ok poll a row per record
(READ) and per run of them (RUN), a `process` completion a row per record,
a commit a row per offset. A transaction's event is a send row per send
(marked TXN_SEND), a READ row per record it read (naming it), and, where
it commits consumer offsets, a commit row per offset (docs/history.md,
"Transactions"); a read at read_uncommitted is no READ row. Nothing here needs the rest of the history, so
the in-process engine makes a batch's rows as it reads the batch, and
Spark's executors make them from the row groups they read. The only fact
taken from the whole history is which offsets to fold (`fold`,
checkers/offsets.py), known once it is validated.

A read run is records of one poll from one partition next to each other in
the poll, their offsets rising by one (`offset - slot` the same): read
order (checkers/kernel/read_order.py) looks only at the step into each run.
"""

from __future__ import annotations

import numpy as np

from checkers.kernel import rows as r
from core.history.batches import Events, flatten
from core.history.format import FOLD_ABOVE, TXN, TYPES


def extract(ev: Events, fold: dict[int, int] | None = None, shards: int = 1) -> list[r.Shard]:
    """The kernel's rows of one decoded batch, offsets folded by `fold` (true
    -> folded), cut in `shards` shards as `Shard.split` cuts them (each cut
    made as the rows are: a batch's sends and reads are most of its rows)."""
    if not len(ev):
        return [r.Shard() for _ in range(shards)]
    fold = fold or {}
    out = [r.Shard() for _ in range(shards)]

    def add(family: int, parts: list[r.Rows]) -> None:
        for shard, rows in zip(out, parts):
            if len(rows):
                shard.blocks[family] = [rows]

    send = np.flatnonzero(ev.is_op("send"))
    if len(send):
        kind = _SEND_KIND[ev.typ[send]]  # every event's type is one of TYPES: validation refuses others
        pos = np.where(kind == r.SEND_OK, r.packed(ev.partition[send], _folded(ev.offset[send], fold)), r.NONE)
        value = ev.value[send]
        add(r.SENDS, [r.Rows(kind[at], value[at], pos[at], ev.index[send[at]], ev.process[send[at]],
                             r.constant(r.NONE, len(kind[at])), r.constant(r.NONE, len(kind[at])))
                      for at in _cut(value, shards)])
    txn = ev.is_op(TXN) if TXN in ev.names.ops else None
    if txn is not None and txn.any():
        # A transaction's sends are sends (x: TXN_SEND), completed by its completion.
        items = flatten(ev.table, "sends", txn)
        kind = _SEND_KIND[ev.typ[items.parent]]
        pos = np.where(kind == r.SEND_OK, r.packed(np.maximum(items.partition, 0), _folded(items.offset, fold)),
                       r.NONE)
        rows = r.Rows.of(r.SEND_INVOKE, len(items), value=items.value, pos=pos, index=ev.index[items.parent],
                         process=ev.process[items.parent], x=r.constant(r.TXN_SEND, len(items)))
        rows.kind = kind
        for shard, taken in zip(out, rows.split_rows(r.SENDS, shards)):
            if len(taken):
                shard.blocks.setdefault(r.SENDS, []).append(taken)
    recs = ev.polled()
    if len(recs):
        offset = _folded(recs.offset, fold)
        pos = r.packed(recs.partition, offset)
        # A transaction's read names its transaction (x: its completion's index), a poll's none.
        reader = (np.where(txn[recs.parent], ev.index[recs.parent], r.NONE) if txn is not None
                  else r.constant(r.NONE, len(recs)))
        add(r.READS, [r.Rows.of(r.READ, len(recs.value[at]), value=recs.value[at], pos=pos[at],
                                index=ev.index[recs.parent[at]], process=ev.process[recs.parent[at]],
                                **({"x": reader[at]} if txn is not None else {}))
                      for at in _cut(recs.value, shards)])
        add(r.RUNS, _runs(ev, recs.parent, recs.slot, recs.partition, offset, recs.value).split_rows(
            r.RUNS, shards))
    processed = []
    # A step that ended fail or info handled its invocation's records, which the
    # completion need not repeat: the driver adds those (checkers/check.py).
    for kind, type_ in ((r.PROCESSED_OK, "ok"),):
        done = ev.is_op("process") & ev.is_type(type_)
        if done.any():
            items = flatten(ev.table, "records", done)
            processed.append(r.Rows.of(kind, len(items), value=items.value,
                                       pos=r.packed(items.partition, _folded(items.offset, fold)),
                                       index=ev.index[items.parent], process=ev.process[items.parent]))
    add(r.PROCESSED, r.Rows.joined(processed).split_rows(r.PROCESSED, shards))
    commits = []
    committing = ev.is_op("commit") | (txn if txn is not None else False)  # a transaction commits offsets too
    for kind, type_ in ((r.COMMIT_INVOKE, "invoke"), (r.COMMIT_OK, "ok"), (r.COMMIT_FAIL, "fail"),
                        (r.COMMIT_INFO, "info")):
        commit = committing & ev.is_type(type_)
        if commit.any():
            items = flatten(ev.table, "offsets", commit)
            commits.append(r.Rows.of(kind, len(items), pos=r.packed(items.partition, _folded(items.offset, fold)),
                                     index=ev.index[items.parent], process=ev.process[items.parent],
                                     x=ev.group[items.parent]))
    add(r.COMMITS, r.Rows.joined(commits).split_rows(r.COMMITS, shards))
    return out


def _cut(value: np.ndarray, shards: int) -> list:
    """Where each shard's rows are among rows of these values (`Shard.split`'s cut of the value families)."""
    if shards == 1:
        return [slice(None)]
    key = r.shard_of_values(value, shards)
    return [np.flatnonzero(key == i) for i in range(shards)]


# A send event's kind of row by its type (TYPES' index).
_SEND_KIND = np.array([r.SEND_INVOKE, r.SEND_OK, r.SEND_FAIL, r.SEND_INFO], np.int8)
assert TYPES == ("invoke", "ok", "fail", "info")


def _folded(offset: np.ndarray, fold: dict[int, int]) -> np.ndarray:
    """Offsets with those of `fold` replaced by their folded values."""
    if not fold or not len(offset) or int(offset.max()) <= FOLD_ABOVE:
        return offset
    out = offset.copy()
    for true, folded in fold.items():
        out[offset == true] = folded
    return out


def _runs(ev: Events, parent: np.ndarray, slot: np.ndarray, partition: np.ndarray, offset: np.ndarray,
          value: np.ndarray) -> r.Rows:
    """The read runs of a batch's ok polls' records (each with its poll's row, `parent`, in order)."""
    n = len(parent)
    if not n:
        return r.Rows.empty()
    shift = offset - slot
    new = np.ones(n, bool)
    new[1:] = (parent[1:] != parent[:-1]) | (partition[1:] != partition[:-1]) | (shift[1:] != shift[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n) - 1
    poll = parent[starts]
    return r.Rows.of(r.RUN, len(starts), value=value[starts], pos=r.packed(partition[starts], offset[starts]),
                     index=ev.index[poll], process=ev.process[poll], x=value[ends],
                     y=(slot[starts] << 32) | (ends - starts + 1))


def replica_rows(node: int, partition: np.ndarray, offset: np.ndarray, epoch: np.ndarray, value: np.ndarray,
                 numeric: np.ndarray, fold: dict[int, int] | None = None) -> r.Rows:
    """A chunk of node number `node`'s disk dump (core/history/dumps.py's
    columns) as REPLICA rows: y 1 where the record's value is no integer
    (none the run wrote)."""
    return r.Rows.of(r.REPLICA, len(partition), value=value, pos=r.packed(partition, _folded(offset, fold or {})),
                     process=r.constant(node, len(partition)), x=epoch, y=(~numeric).astype(np.int64))
