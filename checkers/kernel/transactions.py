"""Transactions (docs/history.md, "Transactions"): three frames, and the
dependency graph between transactions.

A transaction is named by one history index, its *node*: its completion's,
or its invocation's where it never completed (it then read nothing). Its
sends are sends (TXN_SEND rows, checkers/kernel/extract.py), so every
anomaly of a send holds of them; its reads are READ rows naming it.

- `TxnValues` (first stage, a shard of values): a row per value a
  transaction sent, with the first read of it by its own transaction; the
  shard's write-read edges (writer -> reader, both transactions: the writer
  not aborted); it hands on each committed transaction's send (TXN_ACK),
  with its place in its invocation's list (send order takes a
  transaction's sends to a partition in that order);
- `Torn` (second stage, a shard of partitions): a row per (transaction,
  reader, partition) where the reader's consecutive reads of the partition
  stepped over a record of a committed transaction of which it returned
  another record there; the shard's write-write edges (each committed
  transactional record -> the next one of another transaction in its
  partition's log);
- `Cycles` (the cycles' stage, once every shard's edges are in, over the
  segments the graph is cut into: checkers/kernel/txn_segments.py): a row
  per strongly connected component of two or more transactions of each
  graph: ww, ww+wr, and those with realtime edges (T1 -> T2 where T1
  completed before T2 was invoked), and wr with realtime edges. Within a
  component every edge lies on a cycle, so a component holding an edge of
  a kind holds a cycle through it: the example is one, found by a search
  within the component.

Realtime edges are not drawn pairwise: each transaction points to a node
for its completion's index, the index nodes are chained upward, and each
invocation's index node points to its transaction; T1 reaches T2 through
them exactly when T1 completed before T2 was invoked.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from checkers.compiled import compiled
from checkers.kernel import rows as r
from checkers.kernel.by_value import ByValue
from checkers.kernel.read_order import ReadOrder
from core.history.format import MAX_OFFSET

NONE = r.NONE
_SLOT_MASK = (1 << 32) - 1


def distinct(a: np.ndarray) -> np.ndarray:
    """`np.unique(a)` of a 1-d array of integers, by a sort. NumPy's own
    takes a hash table for these, tens of times slower than its sort on
    arrays of mostly distinct numbers (the transactions' nodes), and slower
    per number as the table outgrows the caches."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


def packed(*columns: np.ndarray) -> tuple[np.ndarray, list[int], list[int]] | None:
    """Rows of integer `columns` (the first the most significant), each as
    one int64 that sorts as the rows do, with what undoes it (`unpacked`):
    a sort of numbers instead of one of rows; None where there are no rows
    or their ranges together do not fit in an int64."""
    if not len(columns[0]):
        return None
    lows = [int(c.min()) for c in columns]
    widths = [int(c.max()) - low + 1 for c, low in zip(columns, lows)]
    if math.prod(widths) > 1 << 63:
        return None
    key = np.zeros(len(columns[0]), np.int64)
    for c, low, width in zip(columns, lows, widths):
        key *= width
        key += c.astype(np.int64) - low
    return key, lows, widths


def unpacked(key: np.ndarray, lows: list[int], widths: list[int]) -> list[np.ndarray]:
    """The columns `packed` made `key` of."""
    columns = []
    for low, width in zip(reversed(lows), reversed(widths)):
        rest = key // width  # a division by one number, made quick (np.divmod is not)
        column = np.multiply(rest, width)
        np.subtract(key, column, out=column)  # in place: a new array costs its pages' first touch
        column += low
        columns.append(column)
        key = rest
    return columns[::-1]


def _pairs(edges: np.ndarray) -> np.ndarray:
    """Distinct (from, to) rows of a (k, 2) array, sorted: `np.unique(edges,
    axis=0)`, whose sort of the pairs as records compares them field by
    field, a generic call each, tens of times slower than a sort of numbers."""
    edges = edges.reshape(-1, 2)
    keys = packed(edges[:, 0], edges[:, 1])
    if keys is not None:
        key, lows, widths = keys
        return np.stack(unpacked(distinct(key), lows, widths), axis=1)
    if not len(edges):
        return np.empty((0, 2), np.int64)
    edges = edges[np.lexsort((edges[:, 1], edges[:, 0]))]
    return edges[np.concatenate(([True], np.any(edges[1:] != edges[:-1], axis=1)))].astype(np.int64)


def _pair_numbers(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each pair (a, b)'s number among the distinct pairs in order: the
    inverse of `np.unique(np.stack((a, b)), axis=1)`, by a sort of numbers
    where the pairs pack in them (`_pairs`)."""
    keys = packed(a, b)
    order = np.argsort(keys[0]) if keys is not None else np.lexsort((b, a))
    a, b = a[order], b[order]
    new = np.concatenate(([True], (a[1:] != a[:-1]) | (b[1:] != b[:-1]))) if len(a) else np.empty(0, bool)
    number = np.empty(len(order), np.int64)
    number[order] = np.cumsum(new) - 1
    return number


# --------------------------------------------------------------------------
# First stage: by value


@dataclass
class TxnValues:
    """A row per value a transaction sent (module docstring)."""

    value: np.ndarray
    txn: np.ndarray  # its transaction's node
    invoke_index: np.ndarray
    ack_pos: np.ndarray  # where a committed transaction put it (-1: not committed)
    own_read: np.ndarray  # the first read of it by its own transaction (-1: none)
    wr: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64), repr=False)

    def __len__(self) -> int:
        return len(self.value)


def txn_values(v: ByValue, sends: list[r.Rows]) -> tuple[TxnValues, r.Rows]:
    """The frame of a shard's transactional values (`v`'s values a
    TXN_SEND row of `sends` holds), and its TXN_ACK rows."""
    # A plain history's send rows hold x as one number (no memory, no pass over it).
    sends = [p for p in sends if len(p) and not (p.x.strides == (0,) and p.x[0] == NONE)]
    marked = [p.value[p.x == r.TXN_SEND] for p in sends]
    if not marked or not sum(len(m) for m in marked):
        empty = np.empty(0, np.int64)
        return TxnValues(empty, empty, empty, empty, empty), r.Rows.empty()
    rows = distinct(np.searchsorted(v.value, np.concatenate(marked)))
    slot = np.full(len(v), NONE, np.int64)  # each value's place in its transaction's invocation
    for p in sends:
        at = (p.x == r.TXN_SEND) & (p.kind == r.SEND_INVOKE)
        slot[np.searchsorted(v.value, p.value[at])] = p.y[at]
    node = np.where(v.comp_index >= 0, v.comp_index, v.inv_index)
    own = np.full(len(v), NONE, np.int64)
    reads, read_row = v.reads_joined()
    by_txn = reads.x >= 0
    is_txn_value = np.zeros(len(v), bool)
    is_txn_value[rows] = True
    at = np.flatnonzero(by_txn & is_txn_value[read_row])
    reader, row = reads.x[at], read_row[at]
    mine = reader == v.comp_index[row]
    # Each value's least index of a read by its own transaction: one sort of those reads, not a
    # pass over them all for each.
    own_row, own_index = row[mine], reads.index[at][mine]
    first = np.lexsort((own_index, own_row))
    first = first[np.concatenate(([True], own_row[first[1:]] != own_row[first[:-1]]))] if len(first) else first
    own[own_row[first]] = own_index[first]
    writer_ok = v.outcome[row] != r.SEND_FAIL  # an aborted transaction's writes are not in the graph
    wr = np.stack((node[row], reader), axis=1)[~mine & writer_ok]
    frame = TxnValues(v.value[rows], node[rows], v.inv_index[rows], np.where(v.ok[rows], v.ack_pos[rows], NONE),
                      own[rows], _pairs(wr))
    acked = rows[v.ok[rows] & (v.ack_pos[rows] >= 0)]
    handed = r.Rows.of(r.TXN_ACK, len(acked), value=v.value[acked], pos=v.ack_pos[acked],
                       index=v.comp_index[acked], process=v.process[acked], x=slot[acked])
    return frame, handed


# --------------------------------------------------------------------------
# Second stage: by partition


@dataclass
class Torn:
    """A row per (transaction, reader, partition, skipped record) (module
    docstring); an anomaly of it counts distinct `key`s."""

    txn: np.ndarray
    process: np.ndarray
    partition: np.ndarray
    skipped_value: np.ndarray
    skipped_offset: np.ndarray
    read_value: np.ndarray  # a record of the transaction the reader returned there
    read_offset: np.ndarray
    prev_index: np.ndarray  # the reads the step went from and to
    index: np.ndarray
    ww: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64), repr=False)
    key = ("txn", "process", "partition")

    def __len__(self) -> int:
        return len(self.txn)


def torn(acks: r.Rows, runs: r.Rows, steps: ReadOrder) -> Torn:
    """The frame of a shard's TXN_ACK and RUN rows and its read order's odd steps."""
    order = np.lexsort((acks.index, acks.pos))
    pos, txn, value = acks.pos[order], acks.index[order], acks.value[order]
    same = (pos[1:] >> r.POS_BITS) == (pos[:-1] >> r.POS_BITS)
    ww = _pairs(np.stack((txn[:-1], txn[1:]), axis=1)[same & (txn[1:] != txn[:-1])]) if len(pos) else None
    gaps = np.flatnonzero(steps.offset > steps.prev_offset + 1) if len(steps) and len(pos) else np.empty(0, np.int64)
    frame = Torn(*_torn_rows(pos, txn, value, runs, steps, gaps))
    if ww is not None:
        frame.ww = ww
    return frame


def _torn_rows(pos: np.ndarray, txn: np.ndarray, value: np.ndarray, runs: r.Rows, steps: ReadOrder,
               gaps: np.ndarray) -> list[np.ndarray]:
    """Torn's columns: for each step forwards (`gaps`, in order) and each
    committed record inside it (by position: `pos`, sorted, with their
    transactions and values), the first other record of its transaction in
    its partition (by position) that the step's reader read (a run of its
    covers it), where there is one. Every lookup is a search in a sorted
    table: the records each reader's runs cover (as many as the records
    read), reduced to the first two of each (reader, transaction,
    partition) with distinct positions."""
    empty = [np.empty(0, np.int64) for _ in range(9)]
    if not len(gaps):
        return empty
    partition = pos >> r.POS_BITS
    gap_partition = steps.partition[gaps]
    lo = np.searchsorted(pos, (gap_partition << r.POS_BITS) | (steps.prev_offset[gaps] + 1))
    hi = np.searchsorted(pos, (gap_partition << r.POS_BITS) | steps.offset[gaps])
    g, k = np.repeat(gaps, hi - lo), _ranges(lo, hi - lo)  # each (step, record inside it), in order
    if not len(k):
        return empty
    # Each record's (transaction, partition), numbered.
    group = _pair_numbers(txn, partition)
    # The records each run covers (its partition's, from its first offset to its last).
    first = runs.pos & MAX_OFFSET
    a = np.searchsorted(pos, runs.pos)
    b = np.searchsorted(pos, ((runs.pos >> r.POS_BITS) << r.POS_BITS) | (first + (runs.y & _SLOT_MASK)))
    covered, reader = _ranges(a, b - a), np.repeat(runs.process, b - a)
    if not len(covered):
        return empty
    # Per (reader, group): its first covered record, and its first at another position.
    readers = np.unique(reader)
    key = np.searchsorted(readers, reader) * (int(group.max()) + 1) + group[covered]
    by_key = np.lexsort((covered, key))
    key, covered = key[by_key], covered[by_key]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    first_of = covered[starts]
    at = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(key))))
    elsewhere = np.where(pos[covered] != pos[first_of[at]], np.arange(len(covered)), len(covered))
    second = np.minimum.reduceat(elsewhere, starts)
    second_of = np.where(second < len(covered), covered[np.minimum(second, len(covered) - 1)], NONE)
    # Each (step, record)'s: its reader's entry for the record's group.
    process = steps.process[g]
    rank = np.minimum(np.searchsorted(readers, process), len(readers) - 1)
    wanted = rank * (int(group.max()) + 1) + group[k]
    entry = np.minimum(np.searchsorted(key[starts], wanted), len(starts) - 1)
    found = (readers[rank] == process) & (key[starts][entry] == wanted)
    other = np.where(pos[first_of[entry]] != pos[k], first_of[entry], second_of[entry])
    keep = found & (other >= 0)
    g, k, other = g[keep], k[keep], other[keep]
    return [txn[k], steps.process[g], partition[k], value[k], pos[k] & MAX_OFFSET, value[other],
            pos[other] & MAX_OFFSET, steps.prev_index[g], steps.index[g]]


def _ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """start[0], start[0] + 1, ... (count[0] of them), then start[1], ...: the ranges one after another."""
    total = int(count.sum()) if len(count) else 0
    return np.repeat(start - (np.cumsum(count) - count), count) + np.arange(total)


# --------------------------------------------------------------------------
# The second pass: cycles

WW, DEP, WW_RT, DEP_RT, WR_RT = range(5)  # the graphs: which edges each holds
GRAPH_NAMES = ("ww", "ww+wr", "ww+realtime", "ww+wr+realtime", "wr+realtime")
_HAS_WW = (True, True, True, True, False)
_HAS_WR = (False, True, False, True, True)
_HAS_RT = (False, False, True, True, True)


@dataclass
class Spans:
    """The completed transactions' spans: each one's completion index
    (`done`, sorted) and the invocation index it answers (`invoked`)."""

    done: np.ndarray
    invoked: np.ndarray

    def __len__(self) -> int:
        return len(self.done)

    @staticmethod
    def of(spans: dict[int, int]) -> "Spans":
        """The spans of a completion -> invocation dict (checkers/folds/transactions.py)."""
        done = np.fromiter(spans.keys(), np.int64, len(spans))
        invoked = np.fromiter(spans.values(), np.int64, len(spans))
        order = np.argsort(done, kind="stable")
        return Spans(done[order], invoked[order])

    def at(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each node's invocation index and completion index (-1: a node
        with no span never completed: it is its invocation)."""
        nodes = np.asarray(nodes, np.int64)
        if not len(self.done):
            return nodes.copy(), np.full(len(nodes), NONE, np.int64)
        k = np.minimum(np.searchsorted(self.done, nodes), len(self.done) - 1)
        hit = self.done[k] == nodes
        return np.where(hit, self.invoked[k], nodes), np.where(hit, nodes, NONE)

    def take(self, at: np.ndarray) -> "Spans":
        return Spans(self.done[at], self.invoked[at])


@dataclass
class Cycles:
    """A row per strongly connected component of two or more transactions of each graph."""

    graph: np.ndarray
    first: np.ndarray  # its least transaction (node)
    size: np.ndarray  # its transactions
    has_wr: np.ndarray  # bool: a wr edge between two of them
    has_rt: np.ndarray  # bool: a realtime edge on a cycle within it
    cycle: list = field(default_factory=list, repr=False)  # per row: its example cycle's steps

    def __len__(self) -> int:
        return len(self.graph)


def cycles(ww: np.ndarray, wr: np.ndarray, spans: Spans, nodes: np.ndarray | None = None,
           marks: np.ndarray | None = None) -> Cycles:
    """The components of every graph of the transactions joined by `ww` and
    `wr` edges ((k, 2) arrays of nodes, taken as distinct pairs in order,
    so that neither their order nor repeats change an example); `spans`:
    the completed transactions' (a node not in it never completed: its node
    is its invocation). A graph cut out of a larger one
    (checkers/kernel/txn_segments.py) names what the cut left out but the
    search must see: `nodes`, transactions of the graph besides the edges'
    ends (those whose ww and wr edges were all cut away: realtime edges
    still join them), and `marks`, the invocation indexes, inside the cut,
    of transactions outside it (realtime's chain of index nodes runs through
    them in the whole graph, and the examples' search walks that chain)."""
    ww, wr = _pairs(ww.astype(np.int64)), _pairs(wr.astype(np.int64))
    none = np.empty(0, np.int64)
    nodes = distinct(np.concatenate((ww.ravel(), wr.ravel(), none if nodes is None else nodes)))
    out: list[list] = [[] for _ in range(5)]
    found: list = []
    if len(nodes) < 2:
        return Cycles(*(np.array(c, np.int64) for c in out[:3]), np.array(out[3], bool), np.array(out[4], bool))
    n = len(nodes)
    ww_i, wr_i = np.searchsorted(nodes, ww), np.searchsorted(nodes, wr)
    invoked, completed = spans.at(nodes)
    # The index nodes of realtime: each invocation's and completion's index, chained upward.
    marks = distinct(np.concatenate((invoked, completed[completed >= 0], none if marks is None else marks)))
    m = len(marks)
    done = np.flatnonzero(completed >= 0)
    rt = np.concatenate((
        np.stack((done, n + np.searchsorted(marks, completed[done])), axis=1),
        np.stack((n + np.arange(m - 1), n + np.arange(1, m)), axis=1),
        np.stack((n + np.searchsorted(marks, invoked), np.arange(n)), axis=1)))
    for graph in range(5):
        parts = ([ww_i] if _HAS_WW[graph] else []) + ([wr_i] if _HAS_WR[graph] else [])
        parts += [rt] if _HAS_RT[graph] else []
        edges = np.concatenate(parts) if parts else np.empty((0, 2), np.int64)
        size = n + (m if _HAS_RT[graph] else 0)
        comp = _components(size, edges)
        txn_comp = comp[:n]
        counts = np.bincount(txn_comp, minlength=int(comp.max()) + 1)
        wr_inside = np.zeros(len(counts), bool)
        if _HAS_WR[graph] and len(wr_i):
            same = txn_comp[wr_i[:, 0]] == txn_comp[wr_i[:, 1]]
            wr_inside[txn_comp[wr_i[same, 0]]] = True
        rt_inside = (np.bincount(comp[n:], minlength=len(counts)) > 0)[:len(counts)] if _HAS_RT[graph] \
            else np.zeros(len(counts), bool)
        shown = np.flatnonzero(counts >= 2)
        if not len(shown):
            continue
        # Each component's nodes and edges, gathered once for them all: not a
        # pass over the graph for each (a graph of many cycles has as many).
        members, member_at = _by_component(comp, shown, np.arange(size))
        own = [_by_component(comp, shown, e) for e in (edges, ww_i, wr_i)]
        for k, c in enumerate(shown.tolist()):
            mine = members[member_at[k]:member_at[k + 1]]  # in order: its transactions first
            out[0].append(graph)
            out[1].append(int(nodes[mine[0]]))
            out[2].append(int(counts[c]))
            out[3].append(bool(wr_inside[c]))
            out[4].append(bool(rt_inside[c]))
            found.append((graph, mine, *(rows[at[k]:at[k + 1]] for rows, at in own), n))
    frame = Cycles(*(np.array(c, np.int64) for c in out[:3]), np.array(out[3], bool), np.array(out[4], bool))
    frame.cycle = [_Lazy(invoked, completed, *f) for f in found]
    return frame


def _by_component(comp: np.ndarray, shown: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`rows`, nodes (1-d) or edges ((k, 2), both ends in one component) of
    a graph whose nodes' components are `comp`, those of the components
    `shown` (in order), grouped by component, each group in the rows'
    order; and where the k-th component's begins (`at[k]`) and ends
    (`at[k + 1]`)."""
    wanted = np.zeros(int(comp.max()) + 1, bool)
    wanted[shown] = True
    c = comp[rows] if rows.ndim == 1 else comp[rows[:, 0]]
    keep = np.flatnonzero(wanted[c] if rows.ndim == 1 else wanted[c] & (c == comp[rows[:, 1]]))
    keep = keep[np.argsort(c[keep], kind="stable")]
    return rows[keep], np.searchsorted(c[keep], np.append(shown, shown[-1] + 1))


class _Lazy:
    """A component's example cycle, found only when it is shown."""

    def __init__(self, invoked, completed, graph, members, edges, ww_i, wr_i, n) -> None:
        self.args = (invoked, completed, graph, members, edges, ww_i, wr_i, n)

    def steps(self) -> list[dict]:
        return _cycle(*self.args)


def _cycle(invoked, completed, graph, members, edges, ww_i, wr_i, n) -> list[dict]:
    """A closed walk within a component (its nodes `members`, in order, and
    its edges of the graph, of ww and of wr), through a wr edge (graphs
    with wr) and an index node (graphs with realtime): each step {from, to,
    kind}, transactions as their invocation's and completion's indexes, a
    run of index nodes one realtime ("rt") step."""
    succ: dict[int, list[int]] = {}
    for a, b in edges.tolist():
        succ.setdefault(a, []).append(b)
    kinds: dict[tuple[int, int], str] = {}
    for name, pairs, held in (("wr", wr_i, _HAS_WR[graph]), ("ww", ww_i, _HAS_WW[graph])):
        if held:
            for a, b in pairs.tolist():
                kinds.setdefault((a, b), name)
    wr_in = [(a, b) for a, b in kinds if kinds[(a, b)] == "wr"]
    marks = {x for x in members.tolist() if x >= n}
    if wr_in:
        a, b = min(wr_in)
        if marks:
            to_mark = _path(succ, b, marks)
            walk = [a] + to_mark + _path(succ, to_mark[-1], {a})[1:]
        else:
            walk = [a] + _path(succ, b, {a})
    else:
        start = min(marks) if marks else int(members[0])
        walk = [start] + _path(succ, succ[start][0], {start})
    loop = walk[:-1]
    at = [k for k, x in enumerate(loop) if x < n]
    steps = []
    for i, k in enumerate(at):
        j = at[(i + 1) % len(at)]
        x, y = loop[k], loop[j]
        kind = kinds.get((x, y), "rt") if (j - k) % len(loop) == 1 else "rt"
        steps.append({"from": _txn(invoked, completed, x), "to": _txn(invoked, completed, y), "kind": kind})
    return steps


def _txn(invoked, completed, k: int) -> dict:
    return {"invoke_index": int(invoked[k]), "complete_index": int(completed[k]) if completed[k] >= 0 else None}


def _path(succ: dict[int, list[int]], start: int, goals: set[int]) -> list[int]:
    """A shortest path from `start` to one of `goals` along `succ` (breadth first), both ends included."""
    if start in goals:
        return [start]
    before = {start: start}
    queue = deque([start])
    while queue:
        a = queue.popleft()
        for b in succ.get(a, ()):
            if b not in before:
                before[b] = a
                if b in goals:
                    path = [b]
                    while path[-1] != start:
                        path.append(before[path[-1]])
                    return path[::-1]
                queue.append(b)
    return [start]  # not reached: within a component every node reaches every other


def _components(n: int, edges: np.ndarray) -> np.ndarray:
    """Each of `n` nodes' strongly connected component (Tarjan's, iterative, compiled)."""
    order = np.argsort(edges[:, 0], kind="stable") if len(edges) else np.empty(0, np.int64)
    heads = edges[order, 1].astype(np.int64) if len(edges) else np.empty(0, np.int64)
    start = np.searchsorted(edges[order, 0] if len(edges) else np.empty(0, np.int64), np.arange(n + 1))
    return _tarjan(n, start.astype(np.int64), heads)


@compiled
def _tarjan(n, start, heads):
    index = np.full(n, -1, np.int64)
    low = np.zeros(n, np.int64)
    on = np.zeros(n, np.bool_)
    comp = np.full(n, -1, np.int64)
    stack = np.empty(n, np.int64)
    call = np.empty(n, np.int64)  # the DFS's nodes
    next_edge = np.empty(n, np.int64)
    top = 0
    depth = 0
    counter = 0
    components = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        visit = root  # a node to enter (the root, then each unvisited successor), or -1
        while True:
            if visit >= 0:
                index[visit] = counter
                low[visit] = counter
                counter += 1
                stack[top] = visit
                top += 1
                on[visit] = True
                call[depth] = visit
                next_edge[depth] = start[visit]
                depth += 1
                visit = -1
            if depth == 0:
                break
            v = call[depth - 1]
            e = next_edge[depth - 1]
            if e < start[v + 1]:
                next_edge[depth - 1] = e + 1
                w = heads[e]
                if index[w] < 0:
                    visit = w
                elif on[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                if low[v] == index[v]:
                    while True:
                        top -= 1
                        w = stack[top]
                        on[w] = False
                        comp[w] = components
                        if w == v:
                            break
                    components += 1
                depth -= 1
                if depth > 0:
                    u = call[depth - 1]
                    if low[v] < low[u]:
                        low[u] = low[v]
    return comp
