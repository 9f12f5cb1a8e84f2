"""Send order on the driver (checkers/send_order.py) on hand-made histories:
what counts as a step back, what the examples say, and that settling the
order batch by batch finds what one batch finds, sends in flight across
batches and sends never answered included. The whole checker's
nonmonotonic-send, against the reference and planted histories, is in
test_anomalies.py and test_passes.py."""

from __future__ import annotations

import numpy as np

from checkers.anomalies import MAX_EXAMPLES
from checkers.reading import read_files
from checkers.key_rows import seen_rows
from checkers.send_order import (_MOVES_PER_ROW, _by_group_then_invocation, _grouped_in_invocation_order,
                                  group_of)
from core.history.parquet import write_parquet
from harness.synthetic import Plan, generate
from tests.checkers.conftest import Hist
from tests.checkers.reference import reference_counts


def _steps(h: Hist, tmp_path, batch_rows: int = 500_000, folded: dict[int, int] | None = None):
    return read_files([h.write(tmp_path, parquet=True)], batch_rows=batch_rows).send_order.result(folded or {})


def test_sends_acknowledged_out_of_invocation_order_are_steps_back(tmp_path):
    h = Hist()
    h.add(0, "invoke", "send", key=0, value=1)
    h.add(0, "invoke", "send", key=0, value=2)
    h.add(0, "ok", "send", value=2, partition=0, offset=5)  # acknowledged first, invoked second
    ack = h.add(0, "ok", "send", value=1, partition=0, offset=6)
    h.send(1, 3, partition=0, offset=3)  # another producer: its own order
    h.send(0, 4, partition=1, offset=0)  # another partition: its own order
    h.send(0, 5, outcome="fail")  # not acknowledged: no place in the order
    h.send(0, 6, outcome="info")
    h.send(0, 7, partition=0, offset=7)
    count, examples = _steps(h, tmp_path)
    assert count == 1
    assert examples == [{"process": 0, "partition": 0, "prev_value": 1, "prev_offset": 6, "prev_invoke_index": 0,
                         "value": 2, "offset": 5, "invoke_index": 1, "ack_index": 2}]
    assert ack == 3


def test_equal_offsets_are_not_a_step_back_and_a_history_in_order_has_none(tmp_path):
    h = Hist()
    for v, o in enumerate((0, 1, 1, 2)):  # an equal offset is a duplicate's matter, not order's
        h.send(0, v, partition=0, offset=o)
    assert _steps(h, tmp_path) == (0, [])
    assert _steps(Hist(), tmp_path) == (0, [])


def test_examples_are_the_first_by_invocation_and_name_folded_offsets(tmp_path):
    h = Hist()
    big = 1 << 45  # folded by the checker (checkers/offsets.py): examples name the folded offset
    h.send(2, 5000, partition=3, offset=big)
    h.send(2, 5001, partition=3, offset=7)
    n = MAX_EXAMPLES + 5
    for p in (1, 0):  # partition 1's steps come first in the file, partition 0's sort first
        for i in range(n):
            h.send(0, p * 1000 + i, partition=p, offset=(n - i) * 10)
    count, examples = _steps(h, tmp_path, folded={big: 99})
    assert count == 1 + 2 * (n - 1)
    assert len(examples) == MAX_EXAMPLES
    assert [e["invoke_index"] for e in examples] == sorted(e["invoke_index"] for e in examples)
    assert (examples[0]["process"], examples[0]["prev_offset"], examples[0]["offset"]) == (2, 99, 7)
    assert {e["partition"] for e in examples[1:]} == {1}, "the earliest invocations, not the lowest partition"


def test_a_send_never_answered_holds_back_only_its_own_process(tmp_path):
    h = Hist()
    h.add(0, "invoke", "send", key=0, value=100)  # never answered: process 0's later sends wait for the end
    h.send(0, 1, partition=0, offset=10)
    h.send(1, 2, partition=0, offset=11)
    h.add(0, "invoke", "send", key=0, value=3)
    h.add(0, "invoke", "send", key=0, value=4)
    h.send(1, 5, partition=0, offset=3)  # process 1 steps back
    h.add(0, "ok", "send", value=4, partition=0, offset=12)
    h.add(0, "ok", "send", value=3, partition=0, offset=13)  # invoked before 4: process 0 steps back
    assert reference_counts(h.events)["nonmonotonic-send"] == 2
    for rows in (1, 2, 3, 1000):
        count, examples = _steps(h, tmp_path, batch_rows=rows)
        assert count == 2
        assert [(e["process"], e["prev_offset"], e["offset"], e["invoke_index"]) for e in examples] \
            == [(0, 13, 12, 6), (1, 11, 3, 7)], rows


def test_send_order_settled_in_small_batches_is_that_of_one_batch(tmp_path):
    # A send's invocation and its acknowledgement often fall in different batches.
    path = tmp_path / "history.parquet"
    events = generate(Plan(events=5_000, seed=7, nonmonotonic_sends=3)).events
    write_parquet(events, path)
    whole = read_files([path], batch_rows=1_000_000).send_order.result({})
    assert whole[0] == reference_counts(events)["nonmonotonic-send"] == 3
    for rows in (97, 10):
        assert read_files([path], batch_rows=rows).send_order.result({}) == whole


def test_the_order_by_group_and_invocation_is_the_two_key_sort_by_insertion_or_not():
    """The counting sort by group and insertion by invocation index orders
    as a sort by the two keys does, for rows near that order (the insertion
    kept) and far from it (the insertion given up for the sort)."""
    rng = np.random.default_rng(7)
    n = 5_000
    for processes, partitions, invoke_index, inserted in (
            (40, 9, rng.permuted(np.sort(rng.permutation(10 * n)[:n]).reshape(-1, 4), axis=1).ravel(), True),
            (2, 1, rng.permutation(10 * n)[:n], False)):
        group = group_of(rng.integers(0, processes, n), rng.integers(0, partitions, n))
        rows, distinct = seen_rows(group)
        assert (distinct[rows] == group).all() and len(set(distinct.tolist())) == len(distinct)
        order = np.empty(n, np.int64)
        assert _grouped_in_invocation_order(rows, len(distinct), invoke_index, order, _MOVES_PER_ROW * n) == inserted
        order = _by_group_then_invocation(rows, len(distinct), invoke_index)
        assert (order == np.lexsort((invoke_index, rows))).all()
        assert len(set(order.tolist())) == n
