"""core/history/follow.py: a history converted to Parquet while it is written
gives the rows `jsonl_to_parquet` gives, however the writes cut its lines; a
file appears only once the harness said the history is closed."""

from __future__ import annotations

import json
import random
import time

import pyarrow.parquet as pq
import pytest

from core.errors import HistoryError
from core.history import follow, jsonl
from core.history.follow import Follower, convert
from core.history.jsonl import ReadReport, read_jsonl
from core.history.parquet import jsonl_to_parquet
from core.history.writer import HistoryWriter


def _events(n: int) -> list[dict]:
    events = []
    for i in range(n // 2):
        events.append({"index": len(events), "time": len(events) * 1000, "process": i % 3, "type": "invoke",
                       "f": "send", "key": i, "value": i})
        events.append({"index": len(events), "time": len(events) * 1000, "process": i % 3, "type": "ok",
                       "f": "send", "value": i, "partition": i % 4, "offset": i // 4})
    return events


def _lines(events: list[dict]) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in events).encode()


def _fed(path, pieces: list[bytes]):
    """A `wait` for `convert` that appends the next piece to `path` at each
    call, and says the history is closed after the last."""
    todo = list(pieces)

    def wait() -> bool:
        if not todo:
            return True
        with open(path, "ab") as f:
            f.write(todo.pop(0))
        return False
    return wait


def _same_as_converted_at_the_end(tmp_path, dest) -> None:
    jsonl_to_parquet(tmp_path / "history.jsonl", tmp_path / "at-the-end.parquet")
    assert pq.read_table(dest).equals(pq.read_table(tmp_path / "at-the-end.parquet"))


@pytest.mark.parametrize("seed", range(6))
def test_any_cut_of_the_writes_gives_the_rows_converted_at_the_end(tmp_path, monkeypatch, seed):
    if seed % 2:  # reads shorter than a line, and than what is there: read on before waiting
        monkeypatch.setattr(jsonl, "FOLLOW_READ", 37)
    data = _lines(_events(300))
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 25))  # mid-line, mid-number, at a newline: anywhere
    pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    src, dest = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    src.write_bytes(b"")
    n, report = convert(src, dest, _fed(src, pieces))
    assert n == 300 and report.warnings == []
    _same_as_converted_at_the_end(tmp_path, dest)
    assert not list(tmp_path.glob("*.tmp"))


def test_a_cut_last_line_is_dropped_with_the_readers_warning(tmp_path):
    data = _lines(_events(10)) + b'{"index": 10, "ti'
    src, dest = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    src.write_bytes(b"")
    n, report = convert(src, dest, _fed(src, [data[:200], data[200:]]))
    expected = ReadReport()
    assert n == len(read_jsonl(src, expected)) == 10
    assert report.warnings == expected.warnings == ["history.jsonl line 11: last line is cut short; ignored"]
    _same_as_converted_at_the_end(tmp_path, dest)


def test_full_row_groups_are_written_as_the_history_grows(tmp_path, monkeypatch):
    monkeypatch.setattr(follow, "FIRST_GROUP", 3)
    monkeypatch.setattr(follow, "ROW_GROUP", 7)
    data = _lines(_events(60))
    src, dest = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    src.write_bytes(b"")
    assert convert(src, dest, _fed(src, [data[i:i + 300] for i in range(0, len(data), 300)]))[0] == 60
    meta = pq.ParquetFile(dest).metadata
    # a quarter of what is written, from 3 up to 7 rows; the rest when the history closes
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [3, 3, 3, 3, 3, 3, 4, 5, 6, 7, 7, 7, 6]
    _same_as_converted_at_the_end(tmp_path, dest)


def test_a_bad_line_or_an_empty_history_leaves_no_file(tmp_path):
    src, dest = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    src.write_bytes(b"")
    events = _events(6)
    with pytest.raises(HistoryError, match="line 3: not valid JSON"):
        convert(src, dest, _fed(src, [_lines(events[:2]), b"{oops}\n", _lines(events[2:])]))
    src.write_bytes(b"")
    with pytest.raises(HistoryError, match="the history is empty"):
        convert(src, dest, _fed(src, []))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl"]


def test_the_follower_process_converts_what_a_history_writer_writes(tmp_path):
    src, dest = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    writer = HistoryWriter(src)
    follower = Follower.start(src, dest)
    for burst in range(6):  # longer than the follower's poll: it reads while the writer writes
        for i in range(500):
            value = burst * 500 + i
            writer.send_invoked(i % 4, value, value)
            writer.send_acked(i % 4, value, i % 3, value)
        writer.record(9, "invoke", "poll")
        time.sleep(follow.POLL_S * 0.6)
    writer.close()
    assert not dest.exists()  # not before it is told the history is closed
    done = follower.finish()
    assert done["events"] == 6 * 1001 and done["warnings"] == [] and 0 <= done["last_row_group_s"] <= done["after_told_s"]
    _same_as_converted_at_the_end(tmp_path, dest)


def test_no_file_when_the_harness_goes_before_the_history_is_closed(tmp_path):
    src, dest = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    src.write_bytes(_lines(_events(100)))
    follower = Follower.start(src, dest)
    time.sleep(follow.POLL_S * 2)  # it has read the whole file by now
    follower.process.stdin.close()  # as a harness killed outright closes it
    assert follower.process.wait(timeout=30) != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl"]
    follower = Follower.start(src, dest)
    time.sleep(follow.POLL_S * 2)
    follower.abandon()  # a run that an error ended
    assert follower.process.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl"]


def test_a_follower_that_fails_says_why_and_leaves_the_conversion_to_the_caller(tmp_path):
    src, dest = tmp_path / "history.jsonl", tmp_path / "history.parquet"
    src.write_bytes(_lines(_events(4)) + b"[1, 2]\n" + _lines(_events(4))[:50])
    follower = Follower.start(src, dest)
    why = follower.finish()
    assert isinstance(why, str) and "line 5" in why, why
    assert not dest.exists()
    follower.abandon()  # after finish: nothing left to stop
    with pytest.raises(HistoryError, match="line 5"):
        jsonl_to_parquet(src, dest)
