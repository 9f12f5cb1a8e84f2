"""A batch of a history as the kernel's rows (checkers/kernel/rows.py).

Every client event the anomalies read becomes rows, whatever the batch's
place in the history: a send event one row, an ok poll a row per record
(READ) and per run of them (RUN), a `process` completion a row per record,
a commit a row per offset. A transaction's event is a send row per send
(marked TXN_SEND), a READ row per record it read (naming it), and, where
it commits consumer offsets, a commit row per offset (docs/history.md,
"Transactions") and, for an ok or info completion carrying its group, a
processed row per record it read (docs/history.md, "Consumer groups"); a read at read_uncommitted is no READ row. Nothing here needs the rest of the history, so
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

from checkers.compiled import compiled, inlined, modulo
from checkers.kernel import rows as r
from core.history.batches import Events, flatten
from core.history.format import FOLD_ABOVE, TXN, TYPES

NONE, SEND_OK, POS_BITS, VALUE_BLOCK_BITS = r.NONE, r.SEND_OK, r.POS_BITS, r.VALUE_BLOCK_BITS


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

    # Every event's type is one of TYPES: validation refuses others. A send's
    # position is its ok completion's (any other's is -1: packed of nulls).
    bounds, kind, value, pos, index, process = _send_rows(
        ev.f, ev.process, ev.typ, ev.names.op("send"), _SEND_KIND, ev.value, ev.partition, _folded(ev.offset, fold),
        ev.index, shards)
    add(r.SENDS, [r.Rows(kind[a:b], value[a:b], pos[a:b], index[a:b], process[a:b], r.constant(r.NONE, b - a),
                         r.constant(r.NONE, b - a)) for a, b in zip(bounds[:-1], bounds[1:])])
    txn = ev.is_op(TXN) if TXN in ev.names.ops else None
    if txn is not None and txn.any():
        # A transaction's sends are sends (x: TXN_SEND), completed by its completion.
        items = flatten(ev.table, "sends", txn)
        kind = _SEND_KIND[ev.typ[items.parent]]
        pos = np.where(kind == r.SEND_OK, r.packed(np.maximum(items.partition, 0), _folded(items.offset, fold)),
                       r.NONE)
        rows = r.Rows.of(r.SEND_INVOKE, len(items), value=items.value, pos=pos, index=ev.index[items.parent],
                         process=ev.process[items.parent], x=r.constant(r.TXN_SEND, len(items)), y=items.slot)
        rows.kind = kind
        for shard, taken in zip(out, rows.split_rows(r.SENDS, shards)):
            if len(taken):
                shard.blocks.setdefault(r.SENDS, []).append(taken)
    recs = ev.polled()
    if len(recs):
        offset = _folded(recs.offset, fold)
        # A transaction's read names its transaction (x: its completion's index), a poll's none.
        bounds, value, pos, index, process, reader = _read_rows(
            recs.parent, recs.value, recs.partition, offset, ev.index, ev.process,
            txn if txn is not None else np.zeros(0, np.bool_), shards)
        add(r.READS, [r.Rows.of(r.READ, b - a, value=value[a:b], pos=pos[a:b], index=index[a:b],
                                process=process[a:b], **({"x": reader[a:b]} if txn is not None else {}))
                      for a, b in zip(bounds[:-1], bounds[1:])])
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
    if txn is not None:
        # A consume-transform-produce transaction (its completion carrying its group) handled the records
        # it read where it committed (ok) or may have (info), as a `process` completion (docs/history.md,
        # "Consumer groups").
        done = txn & (ev.group >= 0) & (ev.is_type("ok") | ev.is_type("info"))
        items = flatten(ev.table, "records", done) if done.any() else None
        if items is not None and len(items):
            processed.append(r.Rows.of(r.PROCESSED_OK, len(items), value=items.value,
                                       pos=r.packed(items.partition, _folded(items.offset, fold)),
                                       index=ev.index[items.parent], process=ev.process[items.parent]))
            processed[-1].kind = np.where(ev.is_type("ok")[items.parent], r.PROCESSED_OK,
                                          r.PROCESSED_INFO).astype(np.int8)
    add(r.PROCESSED, r.Rows.joined(processed).split_rows(r.PROCESSED, shards))
    commits = []
    commit = ev.is_op("commit") | (txn if txn is not None else False)  # a transaction commits offsets too
    # Every commit's offsets flattened at once (each flatten passes over the
    # whole batch), then taken by type.
    every = flatten(ev.table, "offsets", commit) if commit.any() else None
    for kind, type_ in ((r.COMMIT_INVOKE, "invoke"), (r.COMMIT_OK, "ok"), (r.COMMIT_FAIL, "fail"),
                        (r.COMMIT_INFO, "info")):
        at = np.flatnonzero(ev.typ[every.parent] == TYPES.index(type_)) if every is not None else ()
        if len(at):
            items = every.take(at)
            commits.append(r.Rows.of(kind, len(items), pos=r.packed(items.partition, _folded(items.offset, fold)),
                                     index=ev.index[items.parent], process=ev.process[items.parent],
                                     x=ev.group[items.parent]))
    add(r.COMMITS, r.Rows.joined(commits).split_rows(r.COMMITS, shards))
    return out


# A send event's kind of row by its type (TYPES' index).
_SEND_KIND = np.array([r.SEND_INVOKE, r.SEND_OK, r.SEND_FAIL, r.SEND_INFO], np.int8)
assert TYPES == ("invoke", "ok", "fail", "info")


@compiled
def _send_rows(f, process, typ, send, kinds, value, partition, offset, index, shards):
    """A batch's client sends (`f` the op `send`) as the columns of their
    rows, each shard's (`_shard_of`) together in the batch's order, and
    where each shard's begin and end (`bounds`): one pass to count, one to
    fill, no temporaries (`kinds`: the row's kind by type; the position
    kept for an ok completion only)."""
    count = np.zeros(shards + 1, np.int64)
    for i in range(len(f)):
        if f[i] == send and process[i] >= 0:
            count[_shard_of(value[i], shards) + 1] += 1
    bounds = np.cumsum(count)
    n = bounds[-1]
    at = bounds[:-1].copy()
    kind, out_value, out_pos = np.empty(n, np.int8), np.empty(n, np.int64), np.empty(n, np.int64)
    out_index, out_process = np.empty(n, np.int64), np.empty(n, np.int64)
    for i in range(len(f)):
        if f[i] == send and process[i] >= 0:
            shard = _shard_of(value[i], shards)
            j = at[shard]
            at[shard] += 1
            kind[j] = kinds[typ[i]]
            out_value[j], out_index[j], out_process[j] = value[i], index[i], process[i]
            out_pos[j] = (partition[i] << POS_BITS) | offset[i] if kind[j] == SEND_OK else NONE
    return bounds, kind, out_value, out_pos, out_index, out_process


@compiled
def _read_rows(parent, value, partition, offset, index, process, in_txn, shards):
    """A batch's records read as the columns of their rows (`parent`: each
    one's poll or transaction, whose index and process it takes; a
    transaction's, `in_txn`, also names it: its index, else NONE; with no
    `in_txn`, a batch without transactions, no column of readers), each
    shard's together as `_send_rows` puts them."""
    count = np.zeros(shards + 1, np.int64)
    for i in range(len(parent)):
        count[_shard_of(value[i], shards) + 1] += 1
    bounds = np.cumsum(count)
    n = bounds[-1]
    at = bounds[:-1].copy()
    out_value, out_pos = np.empty(n, np.int64), np.empty(n, np.int64)
    out_index, out_process = np.empty(n, np.int64), np.empty(n, np.int64)
    readers = len(in_txn) > 0
    out_reader = np.empty(n if readers else 0, np.int64)
    for i in range(len(parent)):
        shard = _shard_of(value[i], shards)
        j = at[shard]
        at[shard] += 1
        out_value[j], out_pos[j] = value[i], (partition[i] << POS_BITS) | offset[i]
        out_index[j], out_process[j] = index[parent[i]], process[parent[i]]
        if readers:
            out_reader[j] = index[parent[i]] if in_txn[parent[i]] else NONE
    return bounds, out_value, out_pos, out_index, out_process, out_reader


@inlined
def _shard_of(value, shards):
    """A value's shard: `rows.shard_of_values` of one value."""
    return modulo(value >> VALUE_BLOCK_BITS, shards)


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
