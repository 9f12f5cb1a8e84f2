"""The history module: the writer under many threads, flushing, readers,
JSONL <-> Parquet, finding a history in a run directory."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from core.history.files import iter_source_jsonl, load_run_json, resolve
from core.history.jsonl import ReadReport, read_jsonl
from core.history.parquet import jsonl_to_parquet, read_parquet_events, validate_parquet, write_parquet
from core.history.writer import (SEND_INVOKE, SEND_OK, HistoryWriter, _Formatter, _SEND_INVOKE, _SEND_OK,
                                 _json_frame)
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


def test_a_send_s_two_cheap_events_are_the_general_ones(tmp_path):
    with HistoryWriter(tmp_path / "cheap.jsonl") as cheap, HistoryWriter(tmp_path / "general.jsonl") as general:
        for value in (0, 7, (1 << 63) - 1, 1 << 63):  # the last does not fit a frame's int64
            cheap.send_invoked(3, value % 16, value)
            cheap.send_acked(3, value, 2, 1 << 42)
            general.record(3, "invoke", "send", key=value % 16, value=value)
            general.record(3, "ok", "send", value=value, partition=2, offset=1 << 42)
    strip = [{k: v for k, v in e.items() if k != "time"} for e in read_jsonl(tmp_path / "cheap.jsonl")]
    assert strip == [{k: v for k, v in e.items() if k != "time"} for e in read_jsonl(tmp_path / "general.jsonl")]
    assert strip[-2]["value"] == 1 << 63


def test_times_handed_over_out_of_order_are_raised_to_their_predecessor_s():
    # A thread switch between reading the clock and appending: the later append has the earlier time.
    formatter = _Formatter(origin_ns=1000)
    frames = (_SEND_INVOKE.pack(SEND_INVOKE, 1500, 1, 0, 10) + _SEND_INVOKE.pack(SEND_INVOKE, 1400, 2, 0, 11)
              + _SEND_OK.pack(SEND_OK, 1600, 1, 10, 0, 0))
    # Handed over in pieces that cut frames anywhere.
    lines = b"".join(formatter.lines(frames[i:i + 7]) for i in range(0, len(frames), 7))
    events = [json.loads(line) for line in lines.splitlines()]
    assert [(e["index"], e["time"], e["value"]) for e in events] == [(0, 500, 10), (1, 500, 11), (2, 600, 10)]
    assert formatter.pending == b""


def _frames_and_lines(events: list[tuple], origin: int) -> tuple[bytes, bytes]:
    """A frame stream of (time, kind, fields) events and the lines `record` would have made of it
    (orjson of the event with its index and time first), times raised to their predecessor's."""
    frames, lines, last = [], [], 0
    for index, (t, kind, fields) in enumerate(events):
        last = max(t - origin, last)
        if kind == "invoke":
            frames.append(_SEND_INVOKE.pack(SEND_INVOKE, t, fields["process"], fields["key"], fields["value"]))
            fields = {"process": fields["process"], "type": "invoke", "f": "send", "key": fields["key"],
                      "value": fields["value"]}
        elif kind == "ok":
            frames.append(_SEND_OK.pack(SEND_OK, t, fields["process"], fields["value"], fields["partition"],
                                        fields["offset"]))
            fields = {"process": fields["process"], "type": "ok", "f": "send", **{k: fields[k] for k in
                                                                                 ("value", "partition", "offset")}}
        else:
            frames.append(_json_frame(t, orjson.dumps(fields)))
        lines.append(orjson.dumps({"index": index, "time": last, **fields}) + b"\n")
    return b"".join(frames), b"".join(lines)


def _mixed_events(n: int, seed: int) -> list[tuple]:
    """Sends' two frames in runs and alone, numbers of every width (0 to int64's largest, negative
    ones), JSON events among them (short, and long with non-ASCII text), times that go back."""
    rng = random.Random(seed)
    events, t = [], 10**9
    widths = [0, 1, 9, 10, 99, 12345, 10**9, 10**12 + 7, (1 << 63) - 1]
    for i in range(n):
        t += rng.choice([0, 1, 700, 10**6, -300])  # a thread switch can hand over an earlier time
        number = lambda: rng.choice(widths + [rng.randrange(10**rng.randrange(1, 19))])  # noqa: E731
        kind = rng.choices(["invoke", "ok", "json", "negative"], [45, 45, 8, 2])[0]
        if kind == "invoke":
            events.append((t, "invoke", {"process": number(), "key": number(), "value": number()}))
        elif kind == "ok":
            events.append((t, "ok", {"process": number(), "value": number(), "partition": number(),
                                     "offset": number()}))
        elif kind == "negative":
            events.append((t, "ok", {"process": 1, "value": number(), "partition": -1, "offset": -(1 << 63)}))
        else:
            body = {"process": rng.choice([1, "nemesis"]), "type": "ok", "f": "poll",
                    "records": [{"partition": 0, "offset": o, "value": number()} for o in range(rng.randrange(8))]}
            if rng.random() < 0.3:
                body["note"] = "ünïcode " * rng.randrange(1, 20)
            events.append((t, "json", body))
    return events


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_formatter_writes_what_record_would_have_on_any_cut_of_the_stream(seed):
    origin = 10**9 + 500
    frames, expected = _frames_and_lines(_mixed_events(3000, seed), origin)
    rng = random.Random(seed)
    formatter, out, pos = _Formatter(origin), [], 0
    while pos < len(frames):  # pieces as a pipe hands them over: cutting cells and JSON bodies anywhere
        size = rng.choice([1, 7, 47, 48, 49, 500, 4096, 65536])
        out.append(bytes(formatter.lines(frames[pos:pos + size])))
        pos += size
    assert b"".join(out) == expected
    assert formatter.pending == b"" and formatter.index == 3000


def test_a_json_event_longer_than_many_pipe_reads_waits_until_it_is_whole():
    poll = {"process": 2, "type": "ok", "f": "poll", "records": list(range(5000))}
    frames, expected = _frames_and_lines([(5, "invoke", {"process": 1, "key": 3, "value": 4}), (6, "json", poll),
                                          (7, "ok", {"process": 1, "value": 4, "partition": 0, "offset": 9})], 0)
    json_end = 48 + len(_json_frame(6, orjson.dumps(poll)))
    formatter = _Formatter(0)
    assert bytes(formatter.lines(frames[:148])) == expected.splitlines(keepends=True)[0]
    for i in range(148, json_end - 1, 1000):  # nothing but the JSON event's pieces, the last byte missing
        assert bytes(formatter.lines(frames[i:min(i + 1000, json_end - 1)])) == b""
    assert bytes(formatter.lines(frames[json_end - 1:])) == b"".join(expected.splitlines(keepends=True)[1:])


def test_a_stream_that_is_not_frames_is_an_error():
    with pytest.raises(ValueError, match="inside a frame"):
        _Formatter(0).lines(b"x" * 96)
    with pytest.raises(ValueError, match="no frame starts at byte 48"):
        _Formatter(0).lines(_SEND_OK.pack(SEND_OK, 1, 2, 3, 4, 5) + bytes([9]) * 48)


def test_a_closed_writer_refuses_a_send_s_events(tmp_path):
    writer = HistoryWriter(tmp_path / "history.jsonl")
    writer.send_invoked(0, 1, 2)
    writer.close()
    with pytest.raises(RuntimeError, match="is closed"):
        writer.send_invoked(0, 1, 3)
    with pytest.raises(RuntimeError, match="is closed"):
        writer.send_acked(0, 2, 0, 0)
    with pytest.raises(RuntimeError, match="is closed"):
        writer.send_acked(0, 1 << 64, 0, 0)  # the general form's refusal
    assert len(read_jsonl(tmp_path / "history.jsonl")) == 1


def test_a_writer_process_that_died_is_an_error_at_close(tmp_path):
    writer = HistoryWriter(tmp_path / "history.jsonl")
    writer.record(0, "invoke", "poll")
    writer.flush()
    writer._process.kill()
    writer._process.wait()
    writer.record(0, "ok", "poll", records=[])
    with pytest.raises(RuntimeError, match="writer process failed"):
        writer.close()


# A harness process: it records sends at up to 100,000 a second (200,000 events, about the highest
# rate the full workload sustains on this machine, docs/benchmarks.md) and says on stdout, every
# 1,000 sends, the last value whose events it has recorded, with the time it recorded them.
_WRITING_HARNESS = """
import sys, time
from core.history.writer import HistoryWriter
writer = HistoryWriter(sys.argv[1])
value, start = 0, time.monotonic()
while True:
    for _ in range(1000):
        writer.send_invoked(0, value % 16, value)
        writer.send_acked(0, value, 0, value)
        value += 1
    now = time.monotonic()
    print(value - 1, now, flush=True)
    time.sleep(max(0.0, start + value / 100_000 - now))
"""


@pytest.mark.parametrize("what", ["the harness", "the harness and its writer process"])
def test_kill_9_of_a_writing_harness_loses_at_most_the_last_second(tmp_path, what):
    """Killed alone, the harness loses at most its last second; killed with its writer process (its
    process group), the file is still readable, and what it lacks is the writer's backlog, only at
    the end (how long that is depends on how far the writer had fallen behind: not asserted)."""
    path = tmp_path / "history.jsonl"
    harness = subprocess.Popen([sys.executable, "-c", _WRITING_HARNESS, str(path)], stdout=subprocess.PIPE,
                               cwd=str(Path(__file__).resolve().parents[2]), start_new_session=True, text=True)
    said = []
    for line in harness.stdout:
        value, at = line.split()
        said.append((int(value), float(at)))
        if said[-1][1] - said[0][1] > 2.0:  # 2 s of writing
            break
    writer_pid = int(Path(f"/proc/{harness.pid}/task/{harness.pid}/children").read_text().split()[0])
    killed_at = time.monotonic()
    os.killpg(harness.pid, signal.SIGKILL) if what != "the harness" else harness.kill()
    harness.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{writer_pid}").exists() and time.monotonic() < deadline:  # it writes what it got, then exits
        time.sleep(0.02)
        if Path(f"/proc/{writer_pid}/stat").exists() and Path(f"/proc/{writer_pid}/stat").read_text().split()[2] == "Z":
            break  # a zombie: finished, its parent gone
    report = ReadReport()
    events = read_jsonl(path, report)  # readable: validated line by line, a cut last line dropped
    assert [e["index"] for e in events] == list(range(len(events)))
    acked = {e["value"] for e in events if e["type"] == "ok"}
    assert acked == set(range(len(acked)))  # nothing missing before the end
    if what == "the harness":
        # The writer process had everything shipped to it; only the harness's last 50 ms are gone.
        must_have = max(v for v, at in said if at < killed_at - 1.0)
        assert len(acked) > must_have


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
