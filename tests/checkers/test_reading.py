"""`checkers.reading`: the driver's one read of a history, in halves."""

from __future__ import annotations

import numpy as np

from checkers.driver_by_value import ValueRows
from checkers.read_runs import RunsWriter
from checkers.liveness import nondecreasing
from checkers.reading import HistoryReader, _answers
from core.history.parquet import events_to_table
from tests.checkers.conftest import Hist


def _read(events: list[dict], tmp_path, name: str) -> HistoryReader:
    read = HistoryReader(runs=RunsWriter(tmp_path / f"{name}.parquet", keep_order=True), values=ValueRows())
    read.add(events_to_table(events))
    read.runs.close()
    return read


def test_records_of_events_other_than_a_client_s_ok_poll_are_not_reads(tmp_path):
    # Records on a poll's invocation, a failed poll or the nemesis's event are
    # none of the reads: the liveness columns, by-value rows and read runs are
    # those of the same history without them.
    h = Hist()
    h.send(0, 1, 0, 0)
    h.send(0, 2, 1, 0)
    h.poll(1, (0, 0, 1), (1, 0, 2), (0, 0, 1))
    h.poll(1, (1, 0, 2))
    plain = [dict(e) for e in h.events]
    stray = [{"partition": 0, "offset": 7, "key": 0, "value": 9}]
    h.add(1, "invoke", "poll", records=stray)
    h.add(1, "fail", "poll", records=stray, error="SOME_ERROR")
    h.add("nemesis", "invoke", "start-partition", records=stray)
    h.add("nemesis", "info", "start-partition", records=stray)
    h.poll(2, (0, 0, 1))
    plain += [{k: v for k, v in e.items() if k != "records"} for e in h.events[len(plain):len(plain) + 4]]
    plain += h.events[len(plain):]
    with_stray, without = _read(h.events, tmp_path, "stray"), _read(plain, tmp_path, "plain")
    a, b = with_stray.columns(), without.columns()
    for name in ("read_time", "read_partition", "read_offset"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    assert sorted(zip(a.read_partition.tolist(), a.read_offset.tolist())) == [(0, 0), (0, 0), (1, 0), (1, 0)]
    rows = [[c.tolist() for c in batch] for batch in with_stray.values._reads]
    assert rows == [[c.tolist() for c in batch] for batch in without.values._reads]
    assert 9 not in np.concatenate([batch[0] for batch in with_stray.values._reads]).tolist()
    order = with_stray.runs.order_columns()
    assert {k: v.tolist() for k, v in order.items()} == {k: v.tolist() for k, v in without.runs.order_columns().items()}
    assert with_stray.runs.totals == without.runs.totals


def test_a_send_completion_finds_its_invocation_as_a_binary_search_does():
    # The gallop from the last place found, against np.searchsorted's first
    # equal value: completions in and out of the values' order, values
    # missing, repeated, and beyond either end.
    rng = np.random.default_rng(3)
    for size, spread in ((1, 3), (50, 40), (5_000, 20_000)):
        values = np.sort(rng.integers(0, spread, size))
        for wanted in (np.sort(rng.integers(-5, spread + 5, 3 * size)), rng.integers(-5, spread + 5, 3 * size),
                       np.sort(rng.integers(-5, spread + 5, 3 * size))[::-1].copy()):
            answered = np.zeros(size, bool)
            at = _answers(values, wanted, answered, np.empty(len(wanted), np.int64))
            first = np.minimum(np.searchsorted(values, wanted), size - 1)
            found = values[first] == wanted
            assert (at == np.where(found, first, -1)).all()
            assert (answered == np.isin(np.arange(size), first[found])).all()
            assert nondecreasing(values) and nondecreasing(values[:1]) and nondecreasing(values[:0])
            assert nondecreasing(wanted) == bool((np.diff(wanted) >= 0).all())
