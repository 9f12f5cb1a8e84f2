"""The history module: the writer under many threads, flushing, readers,
JSONL <-> Parquet, finding a history in a run directory."""

from __future__ import annotations

import json
import threading
import time

import pytest

from core.history.files import iter_source_jsonl, load_run_json, resolve
from core.history.jsonl import ReadReport, read_jsonl
from core.history.parquet import jsonl_to_parquet, read_parquet_events, validate_parquet, write_parquet
from core.history.writer import HistoryWriter
from core.errors import HistoryError


def test_many_threads_write_one_ordered_history(tmp_path):
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    threads, per_thread = 8, 2000

    def client(process):
        for i in range(per_thread):
            writer.record(process, "invoke", "send", key=i, value=process * per_thread + i)
            writer.record(process, "ok", "send", value=process * per_thread + i, partition=0, offset=i)

    workers = [threading.Thread(target=client, args=(p,)) for p in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    writer.close()
    events = read_jsonl(path)  # validates index order, time order and pairing
    assert len(events) == 2 * threads * per_thread
    assert [e["index"] for e in events] == list(range(len(events)))


def test_events_reach_the_file_without_close(tmp_path):
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    try:
        writer.record(0, "invoke", "poll")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not path.read_bytes():
            time.sleep(0.02)
        assert json.loads(path.read_bytes())["f"] == "poll"
    finally:
        writer.close()


def test_a_closed_writer_refuses_events_and_keeps_what_it_had(tmp_path):
    writer = HistoryWriter(tmp_path / "history.jsonl")
    writer.record("nemesis", "invoke", "kill", value={"nodes": ["n1"]})
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(RuntimeError):
        writer.record(0, "invoke", "poll")
    assert read_jsonl(tmp_path / "history.jsonl")[0]["value"] == {"nodes": ["n1"]}


def test_listeners_see_every_event(tmp_path):
    seen = []
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        writer.subscribe(seen.append)
        writer.record(0, "invoke", "poll")
        writer.record(0, "ok", "poll", records=[])
    assert [e["type"] for e in seen] == ["invoke", "ok"]


def _sample() -> list[dict]:
    return [
        {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "send", "key": 3, "value": 7},
        {"index": 1, "time": 1, "process": "nemesis", "type": "invoke", "f": "start-partition",
         "value": {"grudge": {"n1": ["n2", "n3"]}}},
        {"index": 2, "time": 2, "process": "nemesis", "type": "ok", "f": "start-partition",
         "value": {"grudge": {"n1": ["n2", "n3"]}}, "verified": {"n1": "cut"}},
        {"index": 3, "time": 3, "process": 0, "type": "info", "f": "send", "value": 7, "error": "_MSG_TIMED_OUT"},
        {"index": 4, "time": 4, "process": 1, "type": "invoke", "f": "assign", "partitions": [0, 1]},
        {"index": 5, "time": 5, "process": 1, "type": "ok", "f": "assign", "partitions": [0, 1]},
        {"index": 6, "time": 6, "process": 1, "type": "invoke", "f": "poll"},
        {"index": 7, "time": 7, "process": 1, "type": "ok", "f": "poll",
         "records": [{"partition": 0, "offset": 0, "key": None, "value": 7}]},
        {"index": 8, "time": 8, "process": 1, "type": "invoke", "f": "commit",
         "offsets": [{"partition": 0, "offset": 1}], "note": "an extra field survives"},
    ]


def test_jsonl_to_parquet_and_back_keeps_every_field(tmp_path):
    src = tmp_path / "history.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in _sample()))
    assert jsonl_to_parquet(src, tmp_path / "history.parquet") == len(_sample())
    assert validate_parquet([tmp_path / "history.parquet"]) == len(_sample())
    assert read_parquet_events(tmp_path / "history.parquet") == _sample()


def test_a_cut_last_line_is_dropped_with_a_warning(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in _sample()) + '{"index": 9, "ti')
    report = ReadReport()
    assert len(read_jsonl(path, report)) == len(_sample())
    assert report.warnings == ["history.jsonl line 10: last line is cut short; ignored"]


def test_only_the_last_part_may_be_cut(tmp_path):
    events = _sample()
    (tmp_path / "part-0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:4]) + '{"ind')
    (tmp_path / "part-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[4:]))
    source = resolve(tmp_path)
    with pytest.raises(HistoryError, match="part-0.jsonl: a part other than the last"):
        list(iter_source_jsonl(source, ReadReport()))


def test_parts_continue_each_others_indexes(tmp_path):
    events = _sample()
    (tmp_path / "part-0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:4]))
    (tmp_path / "part-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[4:]))
    assert list(iter_source_jsonl(resolve(tmp_path), ReadReport())) == events
    write_parquet(events[:4], tmp_path / "a.parquet")
    write_parquet(events[4:], tmp_path / "b.parquet")
    parquet_dir = tmp_path / "pq"
    parquet_dir.mkdir()
    for name in ("a.parquet", "b.parquet"):
        (tmp_path / name).rename(parquet_dir / name)
    assert validate_parquet(resolve(parquet_dir).files) == len(events)


def test_a_parquet_part_that_does_not_continue_is_an_error(tmp_path):
    events = _sample()
    write_parquet(events[:4], tmp_path / "a.parquet")
    write_parquet(events[:4], tmp_path / "b.parquet")  # starts again at 0
    with pytest.raises(HistoryError, match="b.parquet row 4: 'index' is 0, expected 4"):
        validate_parquet(resolve(tmp_path).files)


def test_resolve_a_run_directory(tmp_path):
    (tmp_path / "history.jsonl").write_text(json.dumps(_sample()[0]) + "\n")
    (tmp_path / "run.json").write_text('{"producer": {"enable.idempotence": true}}')
    source = resolve(tmp_path)
    assert (source.format, source.files, source.run_json) == ("jsonl", [tmp_path / "history.jsonl"],
                                                               tmp_path / "run.json")
    write_parquet(_sample(), tmp_path / "history.parquet")
    assert resolve(tmp_path).format == "parquet"  # Parquet preferred when both are there
    assert load_run_json(source.run_json) == {"producer": {"enable.idempotence": True}}
