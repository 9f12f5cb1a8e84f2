"""The history module: the writer under many threads, flushing, readers,
JSONL <-> Parquet, finding a history in a run directory."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from array import array
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from core.history.files import iter_source_jsonl, load_run_json, resolve
from core.history.jsonl import ReadReport, read_jsonl
from core.history.parquet import (events_at, jsonl_to_parquet, read_parquet_events, string_codes, validate_parquet,
                                  write_parquet)
from core.history.writer import (_BATCH_HEAD, _JSON_HEAD, _NEVER, HistoryWriter, _Batcher,
                                 _Output)
from core.errors import HistoryError
from core.history.format import MAX_PARTITION, MAX_STORED_OFFSET, _plain_client_event, check_fields


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
        for value in (0, 7, (1 << 63) - 1, 1 << 63):  # the last does not fit a row's int64
            cheap.send_invoked(3, value % 16, value)
            cheap.send_acked(3, value, 2, 1 << 42)
            general.record(3, "invoke", "send", key=value % 16, value=value)
            general.record(3, "ok", "send", value=value, partition=2, offset=1 << 42)
        for values in ([], [5], [8, 9, 10], [11, (1 << 63) + 1, 12]):  # a burst's invokes at once
            cheap.sends_invoked(4, [v % 16 for v in values], values)
            for value in values:
                general.record(4, "invoke", "send", key=value % 16, value=value)
            # a poll's acknowledgements at once
            cheap.sends_acked(4, [x for value in values for x in (value, value % 3, 1 << 40)])
            for value in values:
                general.record(4, "ok", "send", value=value, partition=value % 3, offset=1 << 40)
        with pytest.raises(ValueError):  # lists that do not make whole sends: refused, nothing appended
            cheap.sends_invoked(4, [1], [2, 3])
        with pytest.raises(ValueError):
            cheap.sends_acked(4, [1, 2])
    strip = [{k: v for k, v in e.items() if k != "time"} for e in read_jsonl(tmp_path / "cheap.jsonl")]
    assert strip == [{k: v for k, v in e.items() if k != "time"} for e in read_jsonl(tmp_path / "general.jsonl")]
    assert [e["value"] for e in strip if e["value"] >= 1 << 63] == [1 << 63, 1 << 63, (1 << 63) + 1, (1 << 63) + 1]


def _stream(batches: list[tuple]) -> bytes:
    """What the shipper hands the writer process for `batches` of (cut, invokes, oks, JSON events):
    invokes as (time, process, key, value), oks as (time, process, value, partition, offset), JSON
    events as (time, the event without index and time)."""
    out = []
    for cut, invokes, oks, events in batches:
        parts = [_groups(invokes, by_column=True), _groups(oks, by_column=False),
                 b"".join(_JSON_HEAD.pack(t, len(body)) + body for t, body in
                          ((t, orjson.dumps(event)) for t, event in events))]
        out.append(_BATCH_HEAD.pack(cut, *map(len, parts)) + b"".join(parts))
    return b"".join(out)


def _groups(rows: list[tuple], by_column: bool) -> bytes:
    """Rows of one integer kind (time, process, numbers...) as the client groups them: the rows
    next to each other with the same time and process in one group, its head (time, process, n),
    then its numbers column by column (invokes) or row by row (oks)."""
    out = array("q")
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][:2] == rows[i][:2]:
            j += 1
        numbers = [row[2:] for row in rows[i:j]]
        out.extend((*rows[i][:2], j - i))
        out.extend([x for column in zip(*numbers) for x in column] if by_column else [x for n in numbers for x in n])
        i = j
    return out.tobytes()


def _expected_lines(batches: list[tuple], origin: int) -> bytes:
    """The lines `record` would have written of the events of `batches`, in the order the contract
    asks of the writer process, event by event: after each batch, every event received up to its cut
    in time order (ties: invokes, oks, JSON events, then in order of arrival), the later ones held
    back for the next; a time below one already written raised to it."""
    held, arrived, lines, last = [], 0, [], 0
    for cut, invokes, oks, events in batches + [(_NEVER, [], [], [])]:
        for t, process, key, value in invokes:
            held.append((t, 0, arrived, {"process": process, "type": "invoke", "f": "send", "key": key,
                                         "value": value}))
            arrived += 1
        for t, process, value, partition, offset in oks:
            held.append((t, 1, arrived, {"process": process, "type": "ok", "f": "send", "value": value,
                                         "partition": partition, "offset": offset}))
            arrived += 1
        for t, event in events:
            held.append((t, 2, arrived, event))
            arrived += 1
        held.sort(key=lambda e: e[:3])
        for t, *_, event in (e for e in held if e[0] <= cut):
            last = max(t - origin, last)
            lines.append(orjson.dumps({"index": len(lines), "time": last, **event}) + b"\n")
        held = [e for e in held if e[0] > cut]
    return b"".join(lines)


def _batched_lines(stream: bytes, origin: int, pieces: list[int]) -> bytes:
    """What the writer process makes of `stream` handed over in pieces of the sizes `pieces` (cycled)."""
    batcher, out, at = _Batcher(origin), [], 0
    for size in itertools.cycle(pieces):
        if at >= len(stream):
            break
        out += [bytes(lines) for lines in batcher.lines(stream[at:at + size])]
        at += size
    out += [bytes(lines) for lines in batcher.finish()]
    assert batcher.pending == 0
    return b"".join(out)


def test_events_are_written_in_time_order_and_a_late_one_raised_to_the_last_time_written():
    # In a batch, the kinds' rows are merged by time; an event whose thread read the clock before a
    # cut but appended after its buffer was taken arrives a batch late: raised, and still first.
    batches = [(1550, [(1500, 1, 0, 10), (1400, 2, 0, 11)], [(1540, 2, 11, 0, 0)], [(1450, {"f": "x"})]),
               (1700, [(1520, 3, 0, 12)], [(1600, 1, 10, 0, 1), (1560, 3, 12, 1, 0)], [])]
    events = [json.loads(line) for line in _batched_lines(_stream(batches), 1000, [7]).splitlines()]
    assert [(e["index"], e["time"], e.get("type"), e.get("value")) for e in events] == [
        (0, 400, "invoke", 11), (1, 450, None, None), (2, 500, "invoke", 10), (3, 540, "ok", 11),
        (4, 540, "invoke", 12), (5, 560, "ok", 12), (6, 600, "ok", 10)]


def _mixed_batches(n: int, seed: int) -> list[tuple]:
    """Batches of sends' two events in runs and alone, numbers of every width (0 to int64's largest,
    negative ones), JSON events among them (short, and long with non-ASCII text), times that go back,
    cuts before, at and after the last event of a batch."""
    rng = random.Random(seed)
    batches, t = [], 10**9
    widths = [0, 1, 9, 10, 99, 12345, 10**9, 10**12 + 7, (1 << 63) - 1]
    number = lambda: rng.choice(widths + [rng.randrange(10**rng.randrange(1, 19))])  # noqa: E731
    while n > 0:
        invokes, oks, events = [], [], []
        for _ in range(min(n, rng.choice([0, 1, 5, 300]))):
            t += rng.choice([0, 1, 700, 10**6, -300])  # a thread switch can hand over an earlier time
            kind = rng.choices(["invoke", "ok", "json", "negative"], [45, 45, 8, 2])[0]
            if kind == "invoke":
                invokes.append((t, number(), number(), number()))
            elif kind == "ok":
                oks.append((t, number(), number(), number(), number()))
            elif kind == "negative":
                oks.append((t, 1, number(), -1, -(1 << 63)))
            else:
                event = {"process": rng.choice([1, "nemesis"]), "type": "ok", "f": "poll",
                         "records": [{"partition": 0, "offset": o, "value": number()} for o in range(rng.randrange(8))]}
                if rng.random() < 0.3:
                    event["note"] = "ünïcode " * rng.randrange(1, 20)
                events.append((t, event))
            n -= 1
        batches.append((t + rng.choice([-5000, -1, 0, 1, 10**6]), invokes, oks, events))
    return batches


def _burst_batches(n: int, seed: int) -> list[tuple]:
    """Batches as a saturated producer makes them: bursts of invokes at one time and then their oks
    in another order, a poll's worth at one time, keys of one and two digits, offsets of several
    partitions crossing a power of ten, values from 0 and from near 10^12, a few processes; with a
    poll now and then."""
    rng = random.Random(seed)
    t, value = 10**9 + rng.randrange(10**12), rng.choice([0, 995, 10**12 - 300])
    offsets = [rng.choice([0, 9990, 99_999_990]) for _ in range(12)]
    batches = []
    while n > 0:
        invokes, oks, events = [], [], []
        for _ in range(rng.randrange(6)):
            process, sent = rng.choice([1, 7, 12]), []
            t += rng.choice([300, 1700, 10**5])
            for _ in range(rng.choice([1, 50, 256])):
                invokes.append((t, process, value % 16, value))
                sent.append(value)
                value += 1
            rng.shuffle(sent)
            for v in sent[:rng.randrange(len(sent) + 1)]:
                if rng.random() < 0.1:  # the next poll's acknowledgements
                    t += rng.choice([1, 900, 10**7])
                partition = rng.randrange(12)
                offsets[partition] += 1
                oks.append((t, process, v, partition, offsets[partition]))
            if rng.random() < 0.2:
                events.append((t + 5, {"process": 3, "type": "ok", "f": "poll", "records": []}))
        n -= len(invokes) + len(oks) + len(events)
        batches.append((t + rng.choice([-10**6, 0, 10**6]), invokes, oks, events))
    return batches


@pytest.mark.parametrize("batches", [_mixed_batches(3000, 1), _mixed_batches(3000, 2), _mixed_batches(3000, 3),
                                     _burst_batches(20000, 1), _burst_batches(20000, 2)])
def test_the_writer_process_writes_what_record_would_have_on_any_cut_of_the_stream(batches):
    origin = 10**9 + 500
    stream = _stream(batches)
    expected = _expected_lines(batches, origin)
    assert _batched_lines(stream, origin, [len(stream)]) == expected
    # pieces as a pipe hands them over: cutting heads, rows and JSON bodies anywhere
    assert _batched_lines(stream, origin, [1, 7, 31, 32, 33, 500, 4096, 65536]) == expected


def test_a_json_event_longer_than_many_pipe_reads_waits_until_it_is_whole():
    poll = {"process": 2, "type": "ok", "f": "poll", "records": list(range(5000))}
    first, second = _stream([(10, [(5, 1, 3, 4)], [], [])]), _stream([(10, [], [(7, 1, 4, 0, 9)], [(6, poll)])])
    batcher = _Batcher(0)
    assert [bytes(lines) for lines in batcher.lines(first)] == [b'{"index":0,"time":5,"process":1,"type":"invoke",'
                                                                  b'"f":"send","key":3,"value":4}\n']
    for i in range(0, len(second) - 1, 1000):  # the second batch's pieces, its last byte missing
        assert batcher.lines(second[i:min(i + 1000, len(second) - 1)]) == []
    assert b"".join(map(bytes, batcher.lines(second[-1:]))) == _expected_lines(
        [(10, [(5, 1, 3, 4)], [], []), (10, [], [(7, 1, 4, 0, 9)], [(6, poll)])], 0).split(b"\n", 1)[1]


def test_a_stream_that_is_not_batches_is_an_error():
    with pytest.raises(ValueError, match="not a batch's head"):
        _Batcher(0).lines(_BATCH_HEAD.pack(1, 33, 0, 0) + bytes(33))  # not whole invokes
    with pytest.raises(ValueError, match="not a batch's head"):
        _Batcher(0).lines(_BATCH_HEAD.pack(1, 0, -40, 0))
    with pytest.raises(ValueError, match="does not fit its batch"):
        _Batcher(0).lines(_BATCH_HEAD.pack(1, 0, 0, 20) + _JSON_HEAD.pack(1, 30) + b"{}" + bytes(2))
    with pytest.raises(ValueError, match="a group of 5 sends does not fit"):  # a head for 5 invokes, 1 there
        _Batcher(0).lines(_BATCH_HEAD.pack(1, 40, 0, 0) + array("q", (1, 0, 5, 7, 8)).tobytes())
    with pytest.raises(ValueError, match="a group of -1 sends does not fit"):  # a cut head
        _Batcher(0).lines(_BATCH_HEAD.pack(1, 0, 16, 0) + array("q", (1, 0)).tobytes())


@pytest.mark.parametrize("at", [0, 1])
def test_the_file_holds_every_line_written_at_once_whole_blocks_or_not(tmp_path, at):
    """At offset 0 (blocks written with O_DIRECT where the file system takes it, the rest the
    ordinary way) and at offset 1 (every write an ordinary one): after each write the file is
    exactly what was written, and so after close."""
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"x" * at)
    fd = os.open(path, os.O_WRONLY)
    os.lseek(fd, at, os.SEEK_SET)
    output, written, rng = _Output(fd), bytearray(b"x" * at), random.Random(at)
    for size in [1, 4095, 4096, 10, 8192 + 7, 3, 100_000, 0, 4096 - 7]:
        data = bytes(rng.randrange(256) for _ in range(size))
        output.write(data)
        written += data
        assert path.read_bytes() == written
    output.close()
    assert path.read_bytes() == written


def test_a_closed_writer_refuses_a_send_s_events(tmp_path):
    writer = HistoryWriter(tmp_path / "history.jsonl")
    writer.send_invoked(0, 1, 2)
    writer.close()
    with pytest.raises(RuntimeError, match="is closed"):
        writer.send_invoked(0, 1, 3)
    with pytest.raises(RuntimeError, match="is closed"):
        writer.send_acked(0, 2, 0, 0)
    with pytest.raises(RuntimeError, match="is closed"):
        writer.sends_invoked(0, [1, 1], [4, 5])
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


# A harness process: it records sends at up to 100,000 a second (200,000 events; the highest rate
# the full workload sustains is what the sweep of `python -m bench.workload_overhead` finds,
# docs/benchmarks.md, "Workload recorder overhead") and says on stdout, every
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


@pytest.mark.serial  # "the last second" is the writer's pace, which a busy machine would slow
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


def _part(events: list[dict], i: int, index_from: int | None = None) -> list[dict]:
    """`events` as the i-th of several parts that continue each other (indexes
    from `index_from` instead, if given)."""
    first = i * len(events) if index_from is None else index_from
    later = i * (events[-1]["time"] + 1)
    return [{**e, "index": e["index"] + first, "time": e["time"] + later} for e in events]


def _ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "history-check-ahead"]


def test_parts_checked_ahead_reach_the_caller_in_order_up_to_the_first_bad_one(tmp_path):
    # With on_batch, parts are read and checked in a thread ahead of the
    # caller: it still sees only batches that passed, in order, then the
    # error of the first bad part, and no thread is left.
    events = _sample()
    for i in range(3):  # three parts that continue each other, then one that starts again at 0
        write_parquet(_part(events, i), tmp_path / f"p{i}.parquet")
    write_parquet(_part(events, 3, index_from=0), tmp_path / "p3.parquet")
    seen = []
    with pytest.raises(HistoryError, match=f"p3.parquet row {3 * len(events)}: 'index' is 0"):
        validate_parquet(resolve(tmp_path).files, on_batch=lambda b: seen.append(b.column("index")[0].as_py()))
    assert seen == [0, len(events), 2 * len(events)]
    assert not _ahead_threads()


def test_an_error_of_the_caller_stops_the_parts_checked_ahead(tmp_path):
    events = _sample()
    for i in range(4):
        write_parquet(_part(events, i), tmp_path / f"p{i}.parquet")

    def refuse(batch) -> None:
        raise HistoryError("the caller's own check")

    with pytest.raises(HistoryError, match="the caller's own check"):
        validate_parquet(resolve(tmp_path).files, on_batch=refuse)
    assert not _ahead_threads()
    assert validate_parquet(resolve(tmp_path).files, on_batch=lambda b: None) == 4 * len(events)


def _first_index(batch) -> int:
    return batch.column("index")[0].as_py()


def test_digested_parts_reach_the_caller_in_order_and_the_first_error_in_file_order_wins(tmp_path):
    # Given a digest, each batch is digested in a thread of its own: the
    # caller sees the digests in order, and the first error in file order,
    # a digest's before a later part's check (and a part's check before a
    # later digest's); no thread is left.
    events = _sample()
    for i in range(3):
        write_parquet(_part(events, i), tmp_path / f"p{i}.parquet")
    write_parquet(_part(events, 3, index_from=0), tmp_path / "p3.parquet")
    files = resolve(tmp_path).files
    seen = []

    def digest(batch) -> tuple:
        return ("digested", _first_index(batch))

    with pytest.raises(HistoryError, match=f"p3.parquet row {3 * len(events)}: 'index' is 0"):
        validate_parquet(files, on_batch=seen.append, digest=digest)
    assert seen == [("digested", i * len(events)) for i in range(3)]
    assert not _ahead_threads()

    def refuse_the_second(batch) -> int:
        if _first_index(batch) == len(events):
            raise HistoryError("the second part's digest")
        return _first_index(batch)

    seen.clear()
    with pytest.raises(HistoryError, match="the second part's digest"):
        validate_parquet(files, on_batch=seen.append, digest=refuse_the_second)
    assert seen == [0]
    assert not _ahead_threads()


def test_an_error_of_the_caller_stops_the_digests_and_the_checks_ahead(tmp_path):
    events = _sample()
    for i in range(6):
        write_parquet(_part(events, i), tmp_path / f"p{i}.parquet")
    digested = []

    def refuse(item) -> None:
        raise HistoryError("the caller's own check")

    with pytest.raises(HistoryError, match="the caller's own check"):
        validate_parquet(resolve(tmp_path).files, on_batch=refuse, digest=lambda b: digested.append(b) or b)
    assert not _ahead_threads()
    assert len(digested) < 6  # stopped, not run to the end


def test_resolve_a_run_directory(tmp_path):
    (tmp_path / "history.jsonl").write_text(json.dumps(_sample()[0]) + "\n")
    (tmp_path / "run.json").write_text('{"producer": {"enable.idempotence": true}}')
    source = resolve(tmp_path)
    assert (source.format, source.files, source.run_json) == ("jsonl", [tmp_path / "history.jsonl"],
                                                               tmp_path / "run.json")
    write_parquet(_sample(), tmp_path / "history.parquet")
    assert resolve(tmp_path).format == "parquet"  # Parquet preferred when both are there
    assert load_run_json(source.run_json) == {"producer": {"enable.idempotence": True}}


_GONE = object()


def _changed(event: dict, values: list, within=lambda e: e) -> list[dict]:
    """Copies of `event`, each with one field of `within(event)` (the event,
    or a list item in it) set to one of `values`, or removed."""
    copies = []
    for field in list(within(event)):
        for x in values + [_GONE]:
            e = json.loads(json.dumps(event))
            if x is _GONE:
                del within(e)[field]
            else:
                within(e)[field] = x
            copies.append(e)
    return copies


def _passes(event) -> bool:
    try:
        check_fields(event, "line 1")
        return True
    except HistoryError:
        return False


def test_the_quick_acceptance_of_sends_and_polls_never_passes_what_the_field_checks_refuse():
    """check_event accepts most events in one go (`_plain_client_event`) and
    hands the rest to the field-by-field checks (`check_fields`): every variant of the common
    events, each field changed to each odd value or removed, is passed by the
    quick path only if the full checks pass it too."""
    record = {"partition": 1, "offset": 5, "key": 3, "value": 7}
    bases = [
        {"index": 0, "time": 1, "process": 2, "type": "invoke", "f": "send", "key": 3, "value": 7},
        {"index": 0, "time": 1, "process": 2, "type": "invoke", "f": "send", "value": 7},
        {"index": 0, "time": 1, "process": 2, "type": "ok", "f": "send", "value": 7, "partition": 1, "offset": 5},
        {"index": 0, "time": 1, "process": 2, "type": "fail", "f": "send", "value": 7, "error": "x"},
        {"index": 0, "time": 1, "process": 2, "type": "info", "f": "send", "value": 7},
        {"index": 0, "time": 1, "process": 2, "type": "ok", "f": "poll", "records": [dict(record), dict(record)]},
        {"index": 0, "time": 1, "process": 2, "type": "ok", "f": "poll", "records": []},
    ]
    odd = [None, True, False, 1.5, "1", "", -1, MAX_PARTITION + 1, MAX_STORED_OFFSET + 1, [], {}, [1], "nemesis",
           "invoke", "ok", "poll", "send", "assign"]
    variants = []
    for base in bases:
        assert _plain_client_event(base) and _passes(base), base  # the quick path is taken for these
        variants += _changed(base, odd)
        if base.get("records"):
            variants += _changed(base, odd, lambda e: e["records"][1])
            variants.append({**base, "records": [dict(record), 5]})
        variants.append({**base, "extra": 1})
    quick = [e for e in variants if _plain_client_event(e)]
    assert len(quick) > 50 and len(variants) - len(quick) > 300  # both ways taken
    wrongly = [e for e in quick if not _passes(e)]
    assert not wrongly, wrongly[:3]


def test_parquet_checks_refuse_exactly_what_the_field_checks_refuse_at_the_event_s_index(tmp_path):
    """A Parquet batch passes its checks in a pass or two where nothing is
    wrong, and only a batch that may fail is looked at rule by rule
    (core/history/parquet.py): every variant of the common events, each
    field changed to each odd value a Parquet column holds, or removed,
    is refused there exactly when `check_fields` refuses it, and the error
    names that event's index."""
    record = {"partition": 1, "offset": 5, "key": 3, "value": 7}
    position = {"partition": 1, "offset": 5}
    bases = [
        {"process": 2, "type": "invoke", "f": "send", "key": 3, "value": 7},
        {"process": 2, "type": "ok", "f": "send", "value": 7, "partition": 1, "offset": 5},
        {"process": 2, "type": "info", "f": "send", "value": 7, "partition": 1},
        {"process": 2, "type": "ok", "f": "poll", "records": [dict(record), dict(record)]},
        {"process": 2, "type": "invoke", "f": "commit", "offsets": [dict(position)]},
        {"process": 2, "type": "ok", "f": "seek", "partition": 1, "offset": 5},
        {"process": 2, "type": "ok", "f": "assign", "partitions": [1, 2]},
        {"process": 2, "type": "ok", "f": "final-reads", "ends": [dict(position)]},
        {"process": "nemesis", "type": "ok", "f": "start-partition", "value": {"grudge": {}}},
    ]
    odd = [None, -1, MAX_PARTITION + 1, MAX_STORED_OFFSET, "produce", "done", "poll", []]
    variants = []
    for base in bases:
        variants += _changed(base, odd)
        for name in ("records", "offsets", "ends"):
            if base.get(name):
                variants += _changed(base, [None, -1, MAX_PARTITION + 1], lambda e, name=name: e[name][-1])
    first = {"index": 0, "time": 0, "process": 2, "type": "invoke", "f": "poll"}
    tried = refused = 0
    for i, variant in enumerate(variants):
        event = {"index": 1, "time": 1, **variant}
        path = tmp_path / f"v{i}.parquet"
        try:
            write_parquet([first, event], path)
        except (pa.ArrowException, TypeError, ValueError, OverflowError, KeyError):
            continue  # a value no Parquet column of the schema holds, or a required field gone
        tried += 1
        try:
            validate_parquet([path])
            parquet_refuses = False
        except HistoryError as e:
            parquet_refuses = True
            assert "index 1:" in str(e), (event, str(e))
        stored = read_parquet_events(path)[1]  # as the Parquet holds it: process -1 is the nemesis
        assert parquet_refuses == (not _passes(stored)), (stored, parquet_refuses)
        refused += parquet_refuses
    assert tried > 150 and 50 < refused < tried - 50, (tried, refused)  # both ways taken, many times


def test_string_codes_are_a_dictionary_of_distinct_names_whatever_the_column_s_form():
    # A Parquet history's type and f are read as their dictionaries' codes;
    # a user's dictionary with a name twice (or not of strings) is encoded again.
    plain = pa.array(["ok", "invoke", None, "ok"])
    twice = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 2], pa.int8()), pa.array(["ok", "invoke", "ok"]))
    numbers = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0]), pa.array([7, 8]))
    distinct = pa.DictionaryArray.from_arrays(pa.array([1, 0, None, 1]), pa.array(["invoke", "ok"]))
    for column, decoded in ((plain, ["ok", "invoke", None, "ok"]), (twice, ["ok", "invoke", None, "ok"]),
                            (numbers, ["7", "8", None, "7"]), (distinct, ["ok", "invoke", None, "ok"]),
                            (pa.chunked_array([distinct]), ["ok", "invoke", None, "ok"])):
        codes = string_codes(column)
        names = codes.dictionary.to_pylist()
        assert len(set(names)) == len(names) and codes.cast(pa.string()).to_pylist() == decoded
    assert string_codes(distinct) is distinct


def test_records_are_handed_on_without_their_keys_and_a_missing_field_is_still_named(tmp_path):
    # Only the records' checked fields are read (their keys are not); a
    # history whose records lack one of them is read whole, and refused.
    write_parquet(_sample(), tmp_path / "history.parquet")
    records = []
    validate_parquet([tmp_path / "history.parquet"], on_batch=lambda b: records.append(b.column("records")))
    fields = {records[0].type.value_type.field(i).name for i in range(records[0].type.value_type.num_fields)}
    assert fields == {"partition", "offset", "value"}
    assert pc.list_flatten(records[0]).to_pylist() == [{"partition": 0, "offset": 0, "value": 7}]
    table = pq.read_table(tmp_path / "history.parquet")
    record = pa.struct([("partition", pa.int64()), ("offset", pa.int64()), ("key", pa.int64())])
    without_values = pa.array([[{"partition": 0, "offset": 0, "key": 1}] if r else None
                               for r in table["records"].to_pylist()], pa.list_(record))
    pq.write_table(table.set_column(table.schema.get_field_index("records"), "records", without_values),
                   tmp_path / "bad.parquet")
    with pytest.raises(HistoryError, match="records lack 'value'"):
        validate_parquet([tmp_path / "bad.parquet"])


def test_events_are_found_by_index_across_parts_and_row_groups(tmp_path):
    # Index i is the i-th row of a validated history: found in the part and
    # row group that hold it, with None for a column the history lacks.
    n = len(_sample())
    events = [e for i in range(3) for e in _part(_sample(), i)]
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(3):
        write_parquet(events[i * n:(i + 1) * n], tmp_path / "whole.parquet")
        pq.write_table(pq.read_table(tmp_path / "whole.parquet"), parts / f"p{i}.parquet", row_group_size=3)
    files = resolve(parts).files
    assert len(files) == 3 and validate_parquet(files) == len(events)
    wanted = [0, 3, 4, n + 3, 3 * n - 1, 10 * n]  # the last is past the end: not found
    found = events_at(files, wanted, ("time", "error", "no-such-column"))
    assert sorted(found) == wanted[:-1]
    for i in wanted[:-1]:
        assert found[i] == {"time": events[i]["time"], "error": events[i].get("error"), "no-such-column": None}
    assert found[3]["error"] == "_MSG_TIMED_OUT"
    assert events_at(files, [], ("time",)) == {}
    assert events_at(files, [n + 1], ("no-such-column",)) == {n + 1: {"no-such-column": None}}
