"""The checker benchmark's large histories are parts stitched together
(bench/checker_cost.py): each part's events move onto partitions, processes,
values, indexes and times of their own, every field that names a partition
included, so that the parts' final-reads brackets never speak of each
other's partitions (they did once, before the brackets' `ends` were moved:
the checker then found 644 lost-acked values in a 10M history where none
was planted)."""

from __future__ import annotations

from bench.checker_cost import _shifted


def test_every_field_that_names_a_partition_moves_with_its_part():
    bases = dict(index=100, time_base=5_000, process_base=1000, partition_base=6, value_base=10_000_000)
    events = [
        {"index": 0, "time": 1, "process": 0, "type": "ok", "f": "send", "value": 3, "partition": 2, "offset": 7},
        {"index": 1, "time": 2, "process": 1, "type": "ok", "f": "assign", "partitions": [0, 5]},
        {"index": 2, "time": 3, "process": 1, "type": "ok", "f": "seek", "partition": 4, "offset": 0},
        {"index": 3, "time": 4, "process": 1, "type": "ok", "f": "commit", "offsets": [{"partition": 1, "offset": 9}]},
        {"index": 4, "time": 5, "process": 1, "type": "ok", "f": "poll",
         "records": [{"partition": 2, "offset": 7, "key": 0, "value": 3}]},
        {"index": 5, "time": 6, "process": 2, "type": "invoke", "f": "final-reads", "partitions": [0, 1]},
        {"index": 6, "time": 7, "process": 2, "type": "ok", "f": "final-reads", "ends": [{"partition": 1, "offset": 8}]},
        {"index": 7, "time": 8, "process": "nemesis", "type": "ok", "f": "start-partition", "value": {"n1": ["n2"]}},
    ]
    moved = [_shifted(e, **bases) for e in events]
    assert [e["index"] for e in moved] == list(range(100, 108))
    assert [e["time"] for e in moved] == list(range(5_001, 5_009))
    send, assign, seek, commit, poll, bracket, ends, nemesis = moved
    assert (send["process"], send["partition"], send["value"], send["offset"]) == (1000, 8, 10_000_003, 7)
    assert assign["partitions"] == [6, 11] and seek["partition"] == 10
    assert commit["offsets"] == [{"partition": 7, "offset": 9}]
    assert poll["records"] == [{"partition": 8, "offset": 7, "key": 0, "value": 10_000_003}]
    assert bracket["partitions"] == [6, 7] and ends["ends"] == [{"partition": 7, "offset": 8}]
    assert nemesis["process"] == "nemesis" and nemesis["value"] == {"n1": ["n2"]}
    assert events[0]["partition"] == 2  # the part's own events are left as they were
