"""Bad input to `harness check`: one line on stderr, exit status 2, no
traceback; a cut last line is a warning, not an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

GOOD = [
    {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "send", "key": 1, "value": 1},
    {"index": 1, "time": 5, "process": 0, "type": "ok", "f": "send", "value": 1, "partition": 0, "offset": 0},
    {"index": 2, "time": 6, "process": 1, "type": "invoke", "f": "poll"},
    {"index": 3, "time": 9, "process": 1, "type": "ok", "f": "poll",
     "records": [{"partition": 0, "offset": 0, "key": 1, "value": 1}]},
]


def lines(events) -> str:
    return "".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events)


def changed(i: int, **fields) -> list:
    events = [dict(e) for e in GOOD]
    for k, v in fields.items():
        if v is ...:
            del events[i][k]
        else:
            events[i][k] = v
    return events


def run_check(capsys, *argv) -> tuple[int, str, str]:
    status = main(["check", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status, err, *words):
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("harness: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


# Each case: a file's text, and words its error must contain. None of these needs Spark.
CASES = {
    "empty": ("", ["empty"]),
    "only-blank": ("\n\n", ["empty"]),
    "not-json": (lines(GOOD[:2]) + "this is not json\n" + lines(GOOD[2:]), ["line 3", "not valid JSON"]),
    "not-an-object": (lines(["[1, 2, 3]"]), ["line 1", "JSON object"]),
    "index-is-a-string": (lines(changed(1, index="1")), ["line 2", "'index'", "integer"]),
    "missing-f": (lines(changed(2, f=...)), ["line 3", "'f'"]),
    "missing-process": (lines(changed(0, process=...)), ["line 1", "'process'"]),
    "unknown-type": (lines(changed(3, type="done")), ["line 4", "'type'"]),
    "unknown-client-f": (lines(changed(2, f="produce")), ["line 3", "unknown client operation"]),
    "negative-process": (lines(changed(2, process=-3)), ["line 3", "'process'"]),
    "value-is-a-float": (lines(changed(0, value=1.5)), ["line 1", "'value'"]),
    "ok-send-without-offset": (lines(changed(1, offset=...)), ["line 2", "'offset'"]),
    "records-not-a-list": (lines(changed(3, records={"partition": 0})), ["line 4", "'records'"]),
    "record-without-value": (lines(changed(3, records=[{"partition": 0, "offset": 0}])), ["line 4", "'value'"]),
    "index-out-of-order": (lines(changed(2, index=7)), ["line 3", "expected 2"]),
    "time-goes-back": (lines(changed(2, time=1)), ["line 3", "'time'"]),
    "completion-without-invocation": (lines(GOOD[:2] + GOOD[3:]).replace('"index": 3', '"index": 2'),
                                      ["line 3", "without an invocation"]),
    "send-completed-never-invoked": (lines([{**GOOD[1], "index": 0}]), ["line 1", "never invoked"]),
    "value-sent-twice": (lines(GOOD + [{**GOOD[0], "index": 4, "time": 10}]), ["line 5", "sent twice"]),
    "completed-twice": (lines(GOOD + [{**GOOD[1], "index": 4, "time": 10}]), ["line 5", "second completion"]),
    "completed-by-another-process": (lines(changed(1, process=3)), ["line 2", "completed by 3"]),
    "negative-offset": (lines(changed(1, offset=-1)), ["line 2", "'offset' -1 is out of range"]),
    "bool-is-not-an-int": (lines(changed(1, offset=True)), ["line 2", "'offset'"]),
    "blank-line-in-the-middle": (lines(GOOD[:2]) + "\n" + lines(GOOD[2:]), ["line 3", "empty line"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_jsonl(tmp_path, capsys, name):
    text, words = CASES[name]
    path = tmp_path / "history.jsonl"
    path.write_text(text)
    status, _, err = run_check(capsys, path)
    assert_one_line_error(status, err, *words)
    assert not (tmp_path / "results.json").exists()


def test_missing_file(tmp_path, capsys):
    status, _, err = run_check(capsys, tmp_path / "nope.jsonl")
    assert_one_line_error(status, err, "no such file")


def test_folder_without_history(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    status, _, err = run_check(capsys, tmp_path)
    assert_one_line_error(status, err, "no history here")


def test_folder_with_both_kinds_of_parts(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text(lines(GOOD))
    (tmp_path / "b.parquet").write_bytes(b"PAR1")
    status, _, err = run_check(capsys, tmp_path)
    assert_one_line_error(status, err, "both")


def test_corrupt_parquet(tmp_path, capsys):
    path = tmp_path / "history.parquet"
    path.write_bytes(b"PAR1" + bytes(range(256)) * 4)
    status, _, err = run_check(capsys, path)
    assert_one_line_error(status, err, "Parquet")


def test_parquet_without_a_required_column(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"index": [0], "time": [0], "process": [0], "type": ["invoke"]}), tmp_path / "h.parquet")
    status, _, err = run_check(capsys, tmp_path / "h.parquet")
    assert_one_line_error(status, err, "missing column 'f'")


def test_parquet_with_a_gap_in_indexes(tmp_path, capsys):
    from core.history.parquet import write_parquet

    write_parquet(changed(2, index=5), tmp_path / "h.parquet")
    status, _, err = run_check(capsys, tmp_path / "h.parquet")
    assert_one_line_error(status, err, "'index' is 5, expected 2")


# The rules of one row, in Parquet: each case's events (GOOD changed at an
# event), the event named, and words of its error. Each rule is first looked
# at column-wide, a row at a time only where that fails (core/history/parquet.py).
PARQUET_CASES = {
    "missing-time": (changed(2, time=None), 2, "'time' is missing"),
    "missing-f": (changed(2, f=None), 2, "'f' is missing"),
    "negative-time": (changed(0, time=-5), 0, "'time' must not be negative"),
    "time-goes-back": (changed(2, time=1), 2, "'time' is before the previous event's"),
    "time-goes-back-to-negative": (changed(3, time=-1), 3, "'time' must not be negative"),
    "unknown-type": (changed(3, type="done"), 3, "'type' must be one of"),
    "negative-process": (changed(2, process=-3), 2, "'process' must be non-negative"),
    "unknown-client-f": (changed(2, f="produce"), 2, "unknown client operation 'f'"),
    "send-without-value": (changed(0, value=...), 0, "a send needs 'value'"),
    "ok-send-without-offset": (changed(1, offset=...), 1, "'offset' is missing"),
    "ok-send-negative-offset": (changed(1, offset=-1), 1, "'offset' must not be negative"),
    "ok-poll-without-records": (changed(3, records=...), 3, "'records' must be a list"),
    "record-without-value": (changed(3, records=[{"partition": 0, "offset": 0}]), 3, "a record lacks 'value'"),
    "record-negative-offset": (changed(3, records=[{"partition": 0, "offset": 0, "value": 1},
                                                   {"partition": 0, "offset": -2, "value": 2}]), 3,
                               "'offset' must not be negative"),
}


@pytest.mark.parametrize("name", sorted(PARQUET_CASES))
def test_parquet_rows_that_break_a_rule(tmp_path, capsys, name):
    from core.history.parquet import write_parquet

    events, bad_index, words = PARQUET_CASES[name]
    write_parquet(events, tmp_path / "h.parquet")
    status, _, err = run_check(capsys, tmp_path / "h.parquet")
    assert_one_line_error(status, err, f"index {bad_index}: {words}")


def test_parquet_that_keeps_the_rules_is_checked(tmp_path, capsys):
    """The same events as PARQUET_CASES', unchanged: no error (the cases fail for their change)."""
    from core.history.parquet import write_parquet

    write_parquet(GOOD, tmp_path / "h.parquet")
    status, _, err = run_check(capsys, tmp_path / "h.parquet")
    assert status in (0, 1) and "error" not in err, err


def test_unreadable_run_json(tmp_path, capsys):
    (tmp_path / "history.jsonl").write_text(lines(GOOD))
    (tmp_path / "run.json").write_text("{not json")
    status, _, err = run_check(capsys, tmp_path)
    assert_one_line_error(status, err, "run.json")


@pytest.mark.parametrize("argv,words", [
    (["--allow", "lost-writes"], ["lost-writes", "not an anomaly"]),
    (["--spark-conf", "novalue"], ["KEY=VALUE"]),
    (["--no-such-flag"], ["unrecognized arguments"]),
    (["--engine", "duckdb"], ["--engine", "invalid choice"]),
])
def test_bad_options(tmp_path, capsys, argv, words):
    (tmp_path / "history.jsonl").write_text(lines(GOOD))
    status, _, err = run_check(capsys, tmp_path / "history.jsonl", *argv)
    assert_one_line_error(status, err, *words)


@pytest.mark.spark
def test_parquet_completion_without_invocation_is_caught_by_spark(spark, tmp_path, capsys):
    from core.history.parquet import write_parquet

    events = [dict(e) for e in GOOD[:2]] + [{**GOOD[3], "index": 2}]
    write_parquet(events, tmp_path / "h.parquet")
    status, _, err = run_check(capsys, tmp_path / "h.parquet")
    assert_one_line_error(status, err, "index 2", "without an invocation")


@pytest.mark.spark
def test_a_cut_last_line_is_a_warning(spark, tmp_path, capsys):
    path = tmp_path / "history.jsonl"
    path.write_text(lines(GOOD) + '{"index": 4, "time": 12, "proc')
    status, out, err = run_check(capsys, path)
    assert status == 0, err
    assert "last line is cut short" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["valid"] is True and results["checker"]["events"] == 4
    assert any("line 5" in w for w in results["warnings"])


def test_a_real_process_prints_one_line_and_exits_2(tmp_path):
    """The installed command, not just main(): no traceback escapes."""
    path = tmp_path / "history.jsonl"
    path.write_text("garbage\n" * 3)
    harness = Path(sys.executable).with_name("harness")
    proc = subprocess.run([str(harness), "check", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "line 1" in proc.stderr and "Traceback" not in proc.stderr


# Both formats validate alike (a partition beyond 23 bits would not fit the
# checker's packed positions; an offset may be any int64, larger ones are
# folded: test_offsets_past_40_bits_are_checked_as_read). Each case:
# (event index to change, fields; None deletes), and a word of the error.
BOTH_FORMATS = {
    "partition-past-23-bits": (1, {"partition": 1 << 23}, "'partition'"),
    "negative-partition": (1, {"partition": -1}, "'partition'"),
    "record-partition-past-23-bits": (3, {"records": [{"partition": 1 << 23, "offset": 0, "key": 1, "value": 1}]},
                                      "'partition'"),
}
EXTRA_EVENTS = {
    "seek-without-partition": ([{"process": 1, "type": "invoke", "f": "seek", "offset": 0}], "'partition'"),
    "commit-negative-offset": ([{"process": 1, "type": "invoke", "f": "commit",
                                 "offsets": [{"partition": 0, "offset": -1}]}], "'offset'"),
    "commit-without-offsets": ([{"process": 1, "type": "invoke", "f": "commit"}], "'offsets'"),
    "assign-without-partitions": ([{"process": 1, "type": "invoke", "f": "assign"}], "'partitions'"),
    "final-reads-without-partitions": ([{"process": 2, "type": "invoke", "f": "final-reads"}], "'partitions'"),
    "txn-without-sends": ([{"process": 3, "type": "invoke", "f": "txn"}], "'sends'"),
    "committed-txn-send-without-offset": ([{"process": 3, "type": "invoke", "f": "txn", "sends": [{"value": 7}]},
                                           {"process": 3, "type": "ok", "f": "txn",
                                            "sends": [{"value": 7, "partition": 0}]}], "'offset'"),
    "txn-offsets-without-group": ([{"process": 3, "type": "invoke", "f": "txn", "sends": [],
                                    "offsets": [{"partition": 0, "offset": 1}]}], "'group'"),
    "txn-record-without-value": ([{"process": 3, "type": "invoke", "f": "txn", "sends": []},
                                  {"process": 3, "type": "ok", "f": "txn", "sends": [],
                                   "records": [{"partition": 0, "offset": 0}]}], "'value'"),
    "unknown-isolation": ([{"process": 1, "type": "invoke", "f": "poll", "isolation": "serializable"}],
                          "'isolation'"),
    "final-reads-ok-without-ends": ([{"process": 2, "type": "invoke", "f": "final-reads", "partitions": [0]},
                                     {"process": 2, "type": "ok", "f": "final-reads"}], "'ends'"),
}


def _bad_history(name: str) -> tuple[list[dict], str, int]:
    """The events of a case, its word, and the index of the bad event."""
    if name in BOTH_FORMATS:
        i, fields, word = BOTH_FORMATS[name]
        return changed(i, **fields), word, i
    extra, word = EXTRA_EVENTS[name]
    events = [dict(e) for e in GOOD]
    for e in extra:
        events.append({"index": len(events), "time": 20 + len(events), **e})
    return events, word, len(events) - 1


@pytest.mark.parametrize("name", sorted(BOTH_FORMATS) + sorted(EXTRA_EVENTS))
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_both_formats_refuse_the_same_events(tmp_path, capsys, name, fmt):
    from core.history.parquet import write_parquet

    events, word, bad_index = _bad_history(name)
    path = tmp_path / f"history.{fmt}"
    if fmt == "jsonl":
        path.write_text(lines(events))
        where = f"line {bad_index + 1}"
    else:
        write_parquet(events, path)
        where = f"index {bad_index}"
    status, _, err = run_check(capsys, path)
    assert_one_line_error(status, err, where, word)


@pytest.mark.parametrize("i,fields", [
    (1, {"offset": 1 << 63}),
    (3, {"records": [{"partition": 0, "offset": 1 << 63, "key": 1, "value": 1}]}),
    (1, {"offset": -1}),
])
def test_an_offset_beyond_int64_or_negative_is_refused(tmp_path, capsys, i, fields):
    (tmp_path / "history.jsonl").write_text(lines(changed(i, **fields)))
    status, _, err = run_check(capsys, tmp_path / "history.jsonl")
    assert_one_line_error(status, err, f"line {i + 1}", "'offset'")


def test_both_formats_accept_the_largest_positions_and_any_integer_value(tmp_path):
    from core.history.jsonl import read_jsonl
    from core.history.parquet import validate_parquet, write_parquet

    events = changed(1, partition=(1 << 23) - 1, offset=(1 << 40) - 1, value=-5)
    events[0]["value"] = -5
    events[3]["records"] = [{"partition": (1 << 23) - 1, "offset": (1 << 40) - 1, "key": None, "value": -5}]
    (tmp_path / "history.jsonl").write_text(lines(events))
    assert len(read_jsonl(tmp_path / "history.jsonl")) == 4
    write_parquet(events, tmp_path / "history.parquet")
    assert validate_parquet([tmp_path / "history.parquet"]) == 4
