"""Where the transactions' cycles are searched: the dependency graph
(checkers/kernel/transactions.py) cut into segments, each searched where
its engine runs it, none of them needing the whole graph in one place.

A transaction's node is a history index (its completion's, or its
invocation's where it never completed). An edge a -> b of ww or wr is
*backward* where a > b. A realtime edge T1 -> T2 is never backward: T1's
node is its completion, before T2's invocation, which is at or before T2's
node. A *segment* is a maximal union of overlapping closed intervals
[b, a] of backward edges (two that share an end overlap: they share that
node).

Every cycle lies inside one segment. Take a cycle's least node m and its
greatest M: walking it from M to m, every real point x of [m, M] is
stepped over, from a node at or above x to one at or below it, by a step
that goes down, a backward edge whose interval holds x; so the intervals
of the cycle's backward edges cover [m, M], and (their ends being
integers) they overlap one another in one chain: one segment holds them
all, and with them every node of the cycle. Hence a strongly connected
component of two or more transactions (every two of its transactions on
one closed walk) lies inside one segment, and an edge leaving a segment,
or outside every segment, is on no cycle. The components of the whole
graph are those of its segments, searched with the edges inside each,
every transaction of the whole graph whose node falls inside (one whose
edges were all cut away may still be on a cycle by realtime edges alone),
and the invocation indexes inside of transactions outside (the chain of
index nodes that draws the realtime edges runs through them, and the
search for an example walks it): then each component's transactions,
edges and index nodes are the whole graph's, and so are its row and its
example (`cycles` orders every edge by its nodes). Segments may be
searched together, any number in one graph: no ww or wr edge joins two,
and realtime edges between two go one way, from the lower to the higher.

The steps, each a plain function of arrays (the engines run them:
checkers/engines/):

1. `backward`: a shard's backward intervals, merged into its own segments
   (merging is associative: the shards' merged, merged again, are the
   whole graph's);
2. `merged`: those of every shard into the segments; the driver holds
   them and the backward intervals (two int64 arrays each, far fewer than
   the edges), never the edges themselves;
3. `cut`: a shard's edges, each with both ends in one segment keyed by it
   (the rest dropped), with the nodes and index nodes each segment needs
   (`NODE`, `MARK` rows), as a `Cut`;
4. `search`: the cycles of a `Cut` holding every row of its segments
   (checkers/kernel/stages.py's `cycle_stage` makes it a partial result).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.kernel import rows as r
from checkers.kernel.transactions import Cycles, Spans, cycles, distinct, packed, unpacked

NONE = r.NONE
# The graphs an EDGE row's value names, and the kinds of a cut's rows.
WW, WR, NODE, MARK = range(4)


def edge_rows(kind: int, pairs: np.ndarray) -> r.Rows:
    """A (k, 2) array of edges of graph `kind` (WW, WR) as EDGE rows, as the stages hand them on."""
    pairs = pairs.reshape(-1, 2)
    return r.Rows.of(r.EDGE, len(pairs), value=r.constant(kind, len(pairs)), x=pairs[:, 0], y=pairs[:, 1])


def edge_pairs(edges: r.Rows) -> tuple[np.ndarray, np.ndarray]:
    """EDGE rows as the (k, 2) arrays of their ww and wr edges."""
    return by_graph(edges.value, edges.x, edges.y)


def by_graph(kind: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges a -> b of graph `kind` (WW, WR; other kinds left out) as the
    (k, 2) int64 arrays of the ww and the wr edges."""
    return tuple(np.stack((a[kind == want], b[kind == want]), axis=1).astype(np.int64) for want in (WW, WR))


@dataclass
class Segments:
    """Disjoint closed intervals [lo, hi] of nodes, in order."""

    lo: np.ndarray
    hi: np.ndarray

    def __len__(self) -> int:
        return len(self.lo)

    def of(self, points: np.ndarray) -> np.ndarray:
        """Each point's segment (its number in order), -1 where none holds it."""
        points = np.asarray(points, np.int64)
        if not len(self.lo):
            return np.full(len(points), NONE, np.int64)
        k = np.searchsorted(self.lo, points, side="right") - 1
        inside = (k >= 0) & (points <= self.hi[np.maximum(k, 0)])
        return np.where(inside, k, NONE)


def merged(lo: np.ndarray, hi: np.ndarray) -> Segments:
    """The maximal unions of the overlapping closed intervals [lo, hi]."""
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    if not len(lo):
        return Segments(lo, hi)
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)
    starts = np.flatnonzero(np.concatenate(([True], lo[1:] > reach[:-1])))
    return Segments(lo[starts], np.maximum.reduceat(hi, starts))


def backward(ww: np.ndarray, wr: np.ndarray) -> Segments:
    """The backward intervals of a shard's edges ((k, 2) arrays), merged."""
    edges = np.concatenate((ww.reshape(-1, 2), wr.reshape(-1, 2))).astype(np.int64)
    down = edges[:, 0] > edges[:, 1]
    return merged(edges[down, 1], edges[down, 0])


@dataclass
class Cut:
    """Rows keyed by segment: a WW or WR edge a -> b inside it, a NODE a
    (a transaction inside it), a MARK a (an index node inside it: the
    invocation of a transaction outside it); b is -1 but for edges. Each
    row's a (and an edge's b) lies inside its segment, so a's segment is a
    function of a."""

    segment: np.ndarray
    kind: np.ndarray
    a: np.ndarray
    b: np.ndarray

    def __len__(self) -> int:
        return len(self.segment)

    @staticmethod
    def joined(parts: list["Cut"]) -> "Cut":
        if not parts:
            empty = np.empty(0, np.int64)
            return Cut(empty, np.empty(0, np.int8), empty, empty)
        return Cut(*(np.concatenate([getattr(p, name) for p in parts]) for name in ("segment", "kind", "a", "b")))

    def take(self, at) -> "Cut":
        return Cut(self.segment[at], self.kind[at], self.a[at], self.b[at])

    def distinct(self) -> "Cut":
        """Each row once (shards cut overlapping rows), in order of a, kind
        and b: per kind the order of segment, a and b, since a row's a lies
        inside its segment and the segments are numbered in the order of
        their nodes. Sorted as numbers, (a, kind, b) packed in one, where
        the nodes' range fits (below about 2**30 history indexes), each
        row's segment then found again from its a; else as rows (a sort of
        rows by columns, each sorted by index, costs several times more a
        row, and `cut` gives one of every edge in a segment)."""
        if not len(self):
            return self
        keys = packed(self.a, self.kind, self.b)
        if keys is None:
            s = self.take(np.lexsort((self.b, self.kind, self.a)))
            same = (s.a[1:] == s.a[:-1]) & (s.kind[1:] == s.kind[:-1]) & (s.b[1:] == s.b[:-1])
            return s.take(np.flatnonzero(np.concatenate(([True], ~same))))
        a, kind, b = unpacked(distinct(keys[0]), *keys[1:])
        return Cut(self.segment_of(a).astype(self.segment.dtype, copy=False),
                   kind.astype(self.kind.dtype, copy=False), a.astype(self.a.dtype, copy=False),
                   b.astype(self.b.dtype, copy=False))

    def segment_of(self, points: np.ndarray) -> np.ndarray:
        """The segment of each of `points`, each inside one of these rows'
        segments: the last whose least node (an a, or an edge's b) is at or
        below it."""
        low = int(self.segment.min())
        least = np.full(int(self.segment.max()) - low + 1, np.iinfo(np.int64).max)
        np.minimum.at(least, self.segment - low, self.a)
        edge = self.kind <= WR
        np.minimum.at(least, self.segment[edge] - low, self.b[edge])
        held = np.flatnonzero(least != np.iinfo(np.int64).max)
        return held[np.searchsorted(least[held], points, side="right") - 1] + low

    def groups(self, rows: int) -> list["Cut"]:
        """These rows in groups of whole segments, consecutive, of about
        `rows` rows each (a larger segment alone)."""
        if not len(self):
            return []
        s = self.take(np.argsort(self.segment, kind="stable"))
        first = np.flatnonzero(np.concatenate(([True], s.segment[1:] != s.segment[:-1])))
        group = first // max(1, rows)  # a segment's group: where its first row falls
        cuts = first[np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))]
        return [s.take(slice(a, b)) for a, b in zip(cuts, np.append(cuts[1:], len(s)))]


def cut(ww: np.ndarray, wr: np.ndarray, segments: Segments, spans: Spans) -> Cut:
    """A shard's edges ((k, 2) arrays) by segment (module docstring): each
    with both ends in one; the ends inside a segment of the edges not kept,
    as NODEs; and for each end, the invocation index of its transaction
    where a segment other than the end's own holds it, as a MARK. `spans`
    need hold only the transactions whose completion or invocation a
    segment holds."""
    parts = []
    ends = []
    for kind, pairs in ((WW, ww.reshape(-1, 2)), (WR, wr.reshape(-1, 2))):
        pairs = pairs.astype(np.int64)
        sa, sb = segments.of(pairs[:, 0]), segments.of(pairs[:, 1])
        keep = (sa >= 0) & (sa == sb)
        parts.append(Cut(sa[keep], np.full(int(keep.sum()), kind, np.int8), pairs[keep, 0], pairs[keep, 1]))
        for s, end in ((sa, pairs[:, 0]), (sb, pairs[:, 1])):
            alone = ~keep & (s >= 0)
            parts.append(Cut(s[alone], np.full(int(alone.sum()), NODE, np.int8), end[alone],
                             np.full(int(alone.sum()), NONE, np.int64)))
        ends.append(pairs.ravel())
    nodes = distinct(np.concatenate(ends)) if ends else np.empty(0, np.int64)
    invoked, _ = spans.at(nodes)
    inside, own = segments.of(invoked), segments.of(nodes)
    marked = (inside >= 0) & (inside != own)
    parts.append(Cut(inside[marked], np.full(int(marked.sum()), MARK, np.int8), invoked[marked],
                     np.full(int(marked.sum()), NONE, np.int64)))
    return Cut.joined(parts).distinct()


@dataclass
class Sizes:
    """How many segments a search held, and its largest (by transactions,
    then edges): its transactions and its distinct ww and wr edges."""

    segments: int = 0
    transactions: int = 0
    edges: int = 0

    def larger(self, other: "Sizes") -> "Sizes":
        """Both searches' segments, and the larger of their largest."""
        big = max(self, other, key=lambda s: (s.transactions, s.edges))
        return Sizes(self.segments + other.segments, big.transactions, big.edges)


def search(rows: Cut, spans: Spans) -> tuple[Cycles, Sizes]:
    """The cycles of the segments `rows` holds (each with all its rows),
    searched as one graph (module docstring), and their sizes."""
    rows = rows.distinct()
    is_edge = rows.kind <= WR
    ww, wr = by_graph(rows.kind, rows.a, rows.b)
    found = cycles(ww, wr, spans, nodes=rows.a[rows.kind == NODE], marks=rows.a[rows.kind == MARK])
    if not len(rows):
        return found, Sizes()
    # Each segment's transactions: its NODE rows and its edges' ends, distinct.
    held = rows.kind != MARK
    nodes = distinct(np.concatenate((rows.a[held], rows.b[is_edge])))
    names, transactions = np.unique(rows.segment_of(nodes), return_counts=True)
    edges = np.bincount(np.searchsorted(names, rows.segment[is_edge]), minlength=len(names))
    big = np.lexsort((edges, transactions))[-1]
    return found, Sizes(len(names), int(transactions[big]), int(edges[big]))
