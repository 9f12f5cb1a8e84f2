"""The cut of the transactions' dependency graph into segments
(checkers/kernel/txn_segments.py): how backward intervals merge, which
edges, transactions and index nodes each segment keeps, and that the
search of the segments, alone or together, gives the rows and example
cycles of the search of the whole graph at once, on hand-made graphs
(the cases the module's claim turns on) and on random ones, and that a
graph of many cycles gives each its own row and example."""

from __future__ import annotations

import numpy as np
import pytest

from checkers.kernel.transactions import Cycles, Spans, cycles
from checkers.kernel.txn_segments import MARK, NODE, Cut, backward, cut, merged, search

NO_EDGES = np.empty((0, 2), np.int64)


def rows_of(found: Cycles) -> list[tuple]:
    """A search's rows, each with its example's steps, in order."""
    return sorted((int(g), int(f), int(s), bool(w), bool(t),
                   [(x["from"]["invoke_index"], x["from"]["complete_index"], x["kind"], x["to"]["invoke_index"],
                     x["to"]["complete_index"]) for x in found.cycle[k].steps()])
                  for k, (g, f, s, w, t) in enumerate(zip(found.graph, found.first, found.size, found.has_wr,
                                                          found.has_rt)))


def by_segments(ww, wr, spans: Spans, group_rows: int, shards: int = 1) -> tuple[list[tuple], int]:
    """The rows of the segments' search as an engine makes it: the edges cut
    in `shards` parts against the segments of every part's merged backward
    intervals, with only the spans a segment holds (as Spark broadcasts
    them), searched in groups of about `group_rows` rows; and how many
    segments there were."""
    parts = [(w, r) for w, r in zip(np.array_split(ww, shards), np.array_split(wr, shards))]
    pieces = [backward(w, r) for w, r in parts]
    segments = merged(np.concatenate([p.lo for p in pieces]), np.concatenate([p.hi for p in pieces]))
    inside = (segments.of(spans.done) >= 0) | (segments.of(spans.invoked) >= 0)
    held = spans.take(np.flatnonzero(inside))
    rows = Cut.joined([cut(w, r, segments, held) for w, r in parts])
    found = []
    for group in rows.groups(group_rows):
        found += rows_of(search(group, held)[0])
    return sorted(found), len(segments)


def test_intervals_that_overlap_or_share_an_end_merge_and_disjoint_ones_do_not():
    s = merged(np.array([30, 1, 3, 8, 20, 9, 40]), np.array([35, 3, 5, 12, 25, 10, 41]))
    # [1, 3] and [3, 5] share 3; [9, 10] lies inside [8, 12]; [5, ...] and [8, ...] are apart by 6 and 7,
    # [35, 40] is no interval: 35 and 40 in two.
    assert s.lo.tolist() == [1, 8, 20, 30, 40] and s.hi.tolist() == [5, 12, 25, 35, 41]
    assert s.of(np.array([0, 1, 5, 6, 7, 8, 12, 13, 36, 40, 41, 42])).tolist() == [-1, 0, 0, -1, -1, 1, 1, -1, -1, 4,
                                                                                   4, -1]
    # Only backward edges make intervals: a forward edge, however long, none.
    got = backward(np.array([[1, 100], [7, 4]]), np.array([[4, 2], [50, 60]]))
    assert got.lo.tolist() == [2] and got.hi.tolist() == [7]


def test_a_cycle_of_far_apart_transactions_lies_in_one_segment_of_short_backward_edges():
    # 10 -> 100 (forward, long), 100 -> 70, 90 -> 40, 60 -> 10 (backward, each short of the whole), and
    # 70 -> 90, 40 -> 60 forward: one cycle of six, its backward intervals overlapping in a chain over
    # [10, 100]. Apart from it, a G0 of two at [200, 205], and forward edges from both segments and
    # into neither (edges cut away): 50 -> 203 and 95 -> 300, 300 -> 400.
    ww = np.array([[10, 100], [100, 70], [70, 90], [90, 40], [40, 60], [60, 10], [200, 205], [205, 200],
                   [50, 203], [95, 300], [300, 400]])
    spans = Spans.of({t: t - 1 for t in (10, 100, 70, 90, 40, 60, 200, 205, 50, 95, 300, 400)})
    s = backward(ww, NO_EDGES)
    assert s.lo.tolist() == [10, 200] and s.hi.tolist() == [100, 205]
    rows = cut(ww, NO_EDGES, s, spans)
    kept = {(int(a), int(b)) for a, b, k in zip(rows.a, rows.b, rows.kind) if k <= 1}
    assert kept == {(10, 100), (100, 70), (70, 90), (90, 40), (40, 60), (60, 10), (200, 205), (205, 200)}
    # 50, 95 and 203 stay, their edges cut: realtime edges may still put them on a cycle.
    assert sorted(rows.a[rows.kind == NODE].tolist()) == [50, 95, 203]
    whole = rows_of(cycles(ww, NO_EDGES, spans))
    assert [(g, f, size) for g, f, size, *_ in whole if g == 0] == [(0, 10, 6), (0, 200, 2)]
    for group_rows in (1, 1 << 20):
        assert by_segments(ww, NO_EDGES, spans, group_rows) == (whole, 2)


def test_a_transaction_whose_edges_are_all_cut_away_is_still_on_a_cycle_by_realtime_edges():
    # B (5-10) read A's (13-16) record: A -wr-> B, the segment [10, 16]. X (11-12) completed after B and
    # before A was invoked: B -rt-> X -rt-> A; X's only edge leaves the segment (X -wr-> Y, 40).
    spans = Spans.of({10: 5, 12: 11, 16: 13, 40: 30})
    wr = np.array([[16, 10], [12, 40]])
    rows = cut(NO_EDGES, wr, backward(NO_EDGES, wr), spans)
    assert rows.a[rows.kind == NODE].tolist() == [12]
    whole = rows_of(cycles(NO_EDGES, wr, spans))
    assert [(g, size) for g, _, size, *_ in whole] == [(3, 3), (4, 3)]  # A, B and X
    assert by_segments(NO_EDGES, wr, spans, 1 << 20) == (whole, 1)


def test_the_invocation_of_a_transaction_outside_a_segment_is_kept_in_it_for_the_example():
    # A (13-15) -wr-> B (5-10), Z (11-14) -ww-> A, B -rt-> Z: a G1c-realtime of three. W is invoked at
    # 12, inside [10, 15], and completes at 100, outside: its invocation is an index node of realtime's
    # chain between B's completion and A's invocation. With it the example's shortest way back from B
    # to A goes by Z; without it the chain to A is as short, and taken first.
    spans = Spans.of({10: 5, 14: 11, 15: 13, 100: 12, 200: 150})
    ww, wr = np.array([[14, 15]]), np.array([[15, 10], [100, 200]])
    rows = cut(ww, wr, backward(ww, wr), spans)
    assert rows.a[rows.kind == MARK].tolist() == [12]
    whole = rows_of(cycles(ww, wr, spans))
    g1c_rt = [steps for g, *_, steps in whole if g == 3]
    assert g1c_rt == [[(13, 15, "wr", 5, 10), (5, 10, "rt", 11, 14), (11, 14, "ww", 13, 15)]]
    assert by_segments(ww, wr, spans, 1 << 20) == (whole, 1)
    # W's invocation left out: another example (the reason MARK rows exist).
    assert rows_of(cycles(ww, wr[:1], spans)) != whole


def test_a_never_completed_transaction_on_a_cycle_is_its_invocation():
    # T never completed: its node is its invocation, 20; no realtime edge leaves it. 30 -ww-> 20 -ww-> 25
    # -ww-> 30 is a G0 through it.
    spans = Spans.of({25: 22, 30: 21})
    ww = np.array([[30, 20], [20, 25], [25, 30]])
    whole = rows_of(cycles(ww, NO_EDGES, spans))
    assert [(g, f, size) for g, f, size, *_ in whole if g == 0] == [(0, 20, 3)]
    assert {step[1] for *_, steps in whole for step in steps if step[0] == 20} == {None}  # no completion
    assert by_segments(ww, NO_EDGES, spans, 1 << 20) == (whole, 1)


def _random_graph(rng: np.random.Generator, n: int, edges: int, reach: int, back: float):
    """Transactions invoked and completed at random (5 % never), and ww and wr
    edges between them: forward ones of any length, backward ones (`back` of
    them) of at most `reach` transactions."""
    spans: dict[int, int] = {}
    nodes, open_, index = [], [], 0
    while len(nodes) < n:
        if open_ and rng.random() < 0.5:
            invoked = open_.pop(int(rng.integers(len(open_))))
            if rng.random() < 0.05:
                nodes.append(invoked)
            else:
                spans[index] = invoked
                nodes.append(index)
                index += 1
        else:
            open_.append(index)
            index += 1
    nodes = np.sort(np.array(nodes, np.int64))
    a = rng.integers(n, size=edges)
    down = rng.random(edges) < back
    b = np.where(down, np.maximum(a - rng.integers(1, reach + 1, size=edges), 0),
                 np.minimum(a + rng.integers(1, n, size=edges), n - 1))
    pairs = np.stack((nodes[a], nodes[b]), axis=1)[a != b]
    is_ww = rng.random(len(pairs)) < 0.5
    return pairs[is_ww], pairs[~is_ww], Spans.of(spans)


@pytest.mark.parametrize("seed", range(6))
def test_the_segments_search_gives_the_whole_graph_s_rows_and_examples_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    several = 0
    for _ in range(40):
        n = int(rng.integers(5, 400))
        ww, wr, spans = _random_graph(rng, n, int(rng.integers(1, 2 * n)), int(rng.integers(1, 5)),
                                      float(rng.uniform(0.01, 0.2)))
        whole = rows_of(cycles(ww, wr, spans))
        for group_rows, shards in ((1, 3), (50, 2), (1 << 20, 1)):
            got, segments = by_segments(ww, wr, spans, group_rows, shards)
            assert got == whole
        several += segments > 1 and len({f for _, f, *_ in whole}) > 1
    assert several >= 5  # graphs of several segments with cycles in more than one, not only one segment each


@pytest.mark.parametrize("seed", range(3))
def test_the_search_s_sizes_are_its_segments_and_the_largest_s_transactions_and_edges(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(20):
        n = int(rng.integers(5, 400))
        ww, wr, spans = _random_graph(rng, n, int(rng.integers(1, 2 * n)), 4, 0.15)
        segments = backward(ww, wr)
        rows = cut(ww, wr, segments, spans)
        rows = Cut.joined([rows, rows.take(slice(0, len(rows) // 2))])  # rows twice, as shards cut them
        nodes: dict[int, set] = {}
        edges: dict[int, set] = {}
        for s, kind, a, b in zip(*(c.tolist() for c in (rows.segment, rows.kind, rows.a, rows.b))):
            if kind != MARK:
                nodes.setdefault(s, set()).add(a)
            if kind < NODE:
                nodes[s].add(b)
                edges.setdefault(s, set()).add((kind, a, b))
        sizes = search(rows, spans)[1]
        if not nodes:
            assert sizes.segments == 0
            continue
        big = max(nodes, key=lambda s: (len(nodes[s]), len(edges.get(s, ()))))
        assert (sizes.segments, sizes.transactions, sizes.edges) == (
            len(nodes), len(nodes[big]), len(edges.get(big, ())))


def test_a_generated_history_of_overlapping_transactions_cut_gives_the_whole_graph_s_rows(tmp_path):
    # lab/synthetic.py's overlapping transactions (--txn-overlap): many backward edges, whose
    # segments hold dozens of transactions, and no cycle but the planted ones (each of two or three).
    from core.history.parquet import write_parquet
    from lab.synthetic import Plan, generate
    from tests.checkers.test_transactions import graph_of

    syn = generate(Plan(events=6_000, seed=2, transactions=0.9, txn_producers=3, txn_partitions=3, txn_overlap=8,
                        ww_cycles=2, wr_cycles=1, ww_realtime_cycles=1, ww_wr_realtime_cycles=2))
    write_parquet(syn.events, tmp_path / "history.parquet")
    ww, wr, spans = graph_of(tmp_path / "history.parquet")
    # Backward: a ww edge in four or more, a wr edge in thirty (the serial generator's: none).
    assert (ww[:, 0] > ww[:, 1]).sum() >= len(ww) / 4 and (wr[:, 0] > wr[:, 1]).sum() >= len(wr) / 30
    whole = rows_of(cycles(ww, wr, spans))
    assert len(whole) >= 6 and {size for _, _, size, *_ in whole} <= {2, 3}
    for group_rows, shards in ((1, 3), (200, 2), (1 << 20, 1)):
        got, segments = by_segments(ww, wr, spans, group_rows, shards)
        assert got == whole
    assert segments >= 20
    s = backward(ww, wr)
    nodes = np.unique(np.concatenate((ww.ravel(), wr.ravel())))
    inside = s.of(nodes)
    assert np.bincount(inside[inside >= 0]).max() >= 50


def test_a_graph_of_many_cycles_gives_each_its_row_and_example_from_its_own_edges():
    # 300 pairs one after another, each a G0 of two: A (10k to 10k+2) and B (10k+1 to 10k+3), A -ww-> B
    # -ww-> A; realtime edges run from each pair to the later ones only.
    pairs = 300
    spans = Spans.of({t: t - 2 for k in range(pairs) for t in (10 * k + 2, 10 * k + 3)})
    ww = np.array([e for k in range(pairs) for e in ([10 * k + 2, 10 * k + 3], [10 * k + 3, 10 * k + 2])])
    found = cycles(ww, NO_EDGES, spans)
    step = [(0, 2, "ww", 1, 3), (1, 3, "ww", 0, 2)]
    assert rows_of(found) == sorted((g, 10 * k + 2, 2, False, False, [(a + 10 * k, b + 10 * k, kind, c + 10 * k,
                                                                       d + 10 * k) for a, b, kind, c, d in step])
                                    for g in range(4) for k in range(pairs))
    # Each example is found in its component's own two edges, not in the graph's.
    assert all(len(lazy.args[4]) == 2 for lazy in found.cycle)
    assert by_segments(ww, NO_EDGES, spans, 64, 2) == (rows_of(found), pairs)
