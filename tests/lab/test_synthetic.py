"""`harness gen-history` in parts (lab/synthetic.py): independent
simulations, each on partitions, processes and values of its own and later
in time than the one before, written as a folder of Parquet parts whose
indexes continue; expected.json sums the parts' counts, and a checker's
counts on the whole equal them. (The parts were once stitched by the
checker bench, which moved every field naming a partition but, at first,
not the final-reads brackets' `ends`: the checker then found 644
lost-acked values in a 10M history where none was planted.)"""

from __future__ import annotations

from dataclasses import replace

import orjson
import pyarrow.parquet as pq
import pytest

from checkers.check import Options, check_history
from core.history.files import resolve
from core.history.parquet import read_parquet_events, validate_parquet
from harness.cli import main
from lab.synthetic import PLANTABLE, Plan, generate, part_plans, write_parts
from tests.checkers.reference import reference_counts

PLAN = Plan(events=9_000, seed=3, lost=4, lost_acked=3, dirty_reads=2, duplicates=3, inconsistent=2, aborted=2,
            nonmonotonic_polls=2, skips=3, nonmonotonic_sends=2, unseen=3)


def _parts(folder) -> list[list[dict]]:
    return [read_parquet_events(f) for f in resolve(folder).files]


def _partitions(e: dict) -> set[int]:
    """Every partition an event names: a send's or seek's, an assign's or a
    bracket's list, a commit's offsets, a bracket's ends, a poll's records."""
    found = {e["partition"]} if e.get("partition") is not None else set()
    found |= set(e.get("partitions") or [])
    for name in ("offsets", "ends", "records"):
        found |= {x["partition"] for x in e.get(name) or []}
    return found


def _values(e: dict) -> set[int]:
    found = {e["value"]} if e["f"] == "send" else set()
    return found | {r["value"] for r in e.get("records") or []}


def test_parts_are_runs_of_their_own_one_after_another(tmp_path):
    written = write_parts(PLAN, 3, 1, tmp_path / "history.parquet")
    files = resolve(tmp_path / "history.parquet").files
    assert [f.name for f in files] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert validate_parquet(files) == written.events  # indexes continue from part to part
    parts = _parts(tmp_path / "history.parquet")
    seen_processes: set[int] = set()
    seen_values: set[int] = set()
    for k, events in enumerate(parts):
        client = [e for e in events if e["process"] != "nemesis"]
        assert set().union(*map(_partitions, client)) == set(range(6 * k, 6 * k + 6))
        processes = {e["process"] for e in client}
        values = set().union(*map(_values, client))
        assert not processes & seen_processes and not values & seen_values
        seen_processes |= processes
        seen_values |= values
        if k:
            assert events[0]["time"] > parts[k - 1][-1]["time"]
        assert sum(e["f"] == "final-reads" for e in client) == 2  # each part its own bracket
    assert seen_processes == set(range(len(seen_processes)))  # numbered on, without gaps
    # The parts' own counts, summed, are what a literal reading of the whole finds.
    reference = reference_counts([e for events in parts for e in events])
    assert {name: reference[name] for name in written.expected} == written.expected
    assert (reference["_info_read"], reference["_info_unread"]) == (written.info_read, written.info_unread)
    # Every planted kind is there, shared out among the parts.
    assert written.expected["duplicate"] == 3 and written.expected["unseen"] >= 3


def test_planted_anomalies_are_shared_out_and_seeds_follow_on():
    plans = part_plans(replace(PLAN, events=10_001), 3)
    assert [p.events for p in plans] == [3_334, 3_334, 3_333]
    assert [p.lost for p in plans] == [2, 1, 1] and [p.skips for p in plans] == [1, 1, 1]
    assert [p.seed for p in plans] == [3, 4, 5]
    assert [p.first_partition for p in plans] == [0, 6, 12]
    assert [p.first_value for p in plans] == [0, 10_000, 20_000]
    for name in PLANTABLE:
        assert sum(getattr(p, name) for p in plans) == getattr(PLAN, name)


def test_one_part_is_the_history_itself_and_workers_do_not_change_it(tmp_path):
    write_parts(PLAN, 1, 1, tmp_path / "one")
    assert _parts(tmp_path / "one") == [generate(PLAN).events]
    write_parts(PLAN, 3, 1, tmp_path / "in-process")
    write_parts(PLAN, 3, 2, tmp_path / "two-workers")
    for a, b in zip(resolve(tmp_path / "in-process").files, resolve(tmp_path / "two-workers").files, strict=True):
        assert pq.read_table(a).equals(pq.read_table(b))


def test_gen_history_parts_replaces_what_the_folder_held(tmp_path, capsys):
    assert main(["gen-history", "--events", "3000", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "history.jsonl").is_file() and (tmp_path / "history.parquet").is_file()
    assert main(["gen-history", "--events", "6000", "--parts", "2", "--jobs", "2", "--out", str(tmp_path),
                 "--lost", "3"]) == 0
    assert not (tmp_path / "history.jsonl").exists()
    source = resolve(tmp_path)
    assert [f.name for f in source.files] == ["part-00000.parquet", "part-00001.parquet"]
    expected = orjson.loads((tmp_path / "expected.json").read_bytes())
    assert expected["parts"] == 2 and expected["events"] == validate_parquet(source.files)
    assert expected["anomalies"]["lost-write"] + expected["anomalies"]["unseen"] == 3
    assert "in 2 parts" in capsys.readouterr().out
    # And back: one file again, the parts gone.
    assert main(["gen-history", "--events", "3000", "--format", "jsonl", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "history.parquet").exists() and resolve(tmp_path).format == "jsonl"


@pytest.mark.parametrize("flags, message", [
    (["--parts", "0"], "--parts must be at least 1"),
    (["--parts", "2", "--jobs", "0"], "--jobs must be at least 1"),
    (["--jobs", "2"], "--jobs goes with --parts"),
    (["--parts", "2", "--format", "jsonl"], "--parts writes Parquet parts"),
    (["--parts", "30"], "each part needs at least 200 events"),
    (["--parts", "2", "--lost", "-1"], "--lost must not be negative"),
    (["--parts", "2", "--lost", "400"], "too many planted anomalies"),
    (["--transactions", "0.5", "--txn-overlap", "0"], "--txn-overlap must be at least 1"),
    (["--parts", "2", "--txn-overlap", "4"], "--txn-overlap goes with --transactions"),
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys, flags, message):
    assert main(["gen-history", "--events", "5000", "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness: error: ") and message in err, err
    assert not (tmp_path / "out" / "history.parquet").exists()


@pytest.mark.spark
def test_the_checker_finds_in_parts_what_expected_json_says(spark, tmp_path, capsys):
    planted = [f"--{name.replace('_', '-')}={getattr(PLAN, name)}" for name in PLANTABLE]
    assert main(["gen-history", "--events", "12000", "--parts", "3", "--jobs", "2", "--seed", "11",
                 "--out", str(tmp_path), *planted]) == 0
    expected = orjson.loads((tmp_path / "expected.json").read_bytes())
    results = check_history(tmp_path, Options(), spark=spark)
    assert {name: a["count"] for name, a in results["anomalies"].items()} == expected["anomalies"]
    assert results["counts"]["sends"] == expected["sends"]
    assert results["stats"]["info_sends"] == expected["info_sends"]


@pytest.mark.parametrize("flag, alone", [
    # Each plant, the only one in a history of serial transactions: what it is counted as, all of it.
    ("--ww-cycles", {"G0": 2}),
    ("--wr-cycles", {"G1c": 2, "wr-cycle": 2}),
    ("--precommitted", {"precommitted-read": 2}),
    # The reader's step over the transaction's middle record, acknowledged there, is also a poll skip.
    ("--torn", {"torn-transaction": 2, "poll-skip": 2}),
    ("--ww-realtime-cycles", {"G0-realtime": 2}),
    # A cycle of a ww, a wr and a realtime edge: no cycle of fewer kinds (G1c, G0-realtime, wr-cycle).
    ("--ww-wr-realtime-cycles", {"G1c-realtime": 2}),
])
def test_each_transactional_plant_is_counted_as_it_is_and_as_nothing_else(tmp_path, capsys, flag, alone):
    assert main(["gen-history", "--events", "4000", "--seed", "9", "--transactions", "0.4", flag, "2",
                 "--format", "parquet", "--out", str(tmp_path)]) == 0
    expected = orjson.loads((tmp_path / "expected.json").read_bytes())["anomalies"]
    assert {name: n for name, n in expected.items() if n} == alone
    reference = reference_counts(read_parquet_events(tmp_path / "history.parquet"))
    assert {name: reference[name] for name in expected} == expected
    results = check_history(tmp_path, Options(engine="local"))
    assert {name: a["count"] for name, a in results["anomalies"].items()} == expected


TXN_PLANTED = {"G0": 3, "G1c": 2, "wr-cycle": 2, "precommitted-read": 2, "torn-transaction": 3, "G0-realtime": 2,
               "G1c-realtime": 3}


@pytest.mark.spark
def test_transactions_in_parts_are_counted_as_expected_json_says(spark, tmp_path, capsys):
    # Transactional producers on partitions of their own (numbered after each part's plain
    # ones), one transaction at a time, with every planted transactional anomaly: the
    # generator's counts are a literal reading's and the checker's.
    assert main(["gen-history", "--events", "12000", "--parts", "2", "--jobs", "1", "--seed", "5",
                 "--transactions", "0.5", "--txn-partitions", "3", "--ww-cycles", "3", "--wr-cycles", "2",
                 "--precommitted", "2", "--torn", "3", "--ww-realtime-cycles", "2", "--ww-wr-realtime-cycles", "3",
                 "--lost", "2", "--skips", "2", "--out", str(tmp_path)]) == 0
    expected = orjson.loads((tmp_path / "expected.json").read_bytes())
    assert {k: n for k, n in expected["anomalies"].items() if k in TXN_PLANTED} == TXN_PLANTED
    parts = _parts(tmp_path / "history.parquet")
    for k, events in enumerate(parts):
        txns = [e for e in events if e["f"] == "txn"]
        assert len(txns) > 500
        assert {s["partition"] for e in txns for s in e["sends"] if s.get("partition") is not None} \
            == set(range(9 * k + 6, 9 * k + 9))
    reference = reference_counts([e for events in parts for e in events])
    assert {name: reference[name] for name in expected["anomalies"]} == expected["anomalies"]
    results = check_history(tmp_path, Options(), spark=spark)
    assert {name: a["count"] for name, a in results["anomalies"].items()} == expected["anomalies"]
    assert results["counts"]["sends"] == expected["sends"]


def _open_at_once(events: list[dict], group=lambda process: process) -> dict:
    """The most transactions open at once, by `group` of their processes."""
    open_: dict = {}
    most: dict = {}
    for e in events:
        if e["f"] == "txn":
            g = group(e["process"])
            open_[g] = open_.get(g, 0) + (1 if e["type"] == "invoke" else -1)
            most[g] = max(most.get(g, 0), open_[g])
    return most


def test_transactions_overlap_k_at_a_time_in_each_producer_s_set_and_by_default_not_at_all():
    serial = generate(Plan(events=3_000, seed=4, transactions=0.9, txn_producers=3, txn_partitions=3)).events
    assert _open_at_once(serial, lambda process: 0) == {0: 1}  # one transaction after another
    overlap = Plan(events=3_000, seed=4, transactions=0.9, txn_producers=3, txn_partitions=3, txn_overlap=4)
    events = generate(overlap).events
    first = min(e["process"] for e in events if e["f"] == "txn")  # the sets' processes follow the plain ones'
    assert set(_open_at_once(events).values()) == {1}  # a transaction at a time on each process
    assert _open_at_once(events, lambda process: (process - first) // 4) == {0: 4, 1: 4, 2: 4}
    assert _open_at_once(events, lambda process: 0)[0] >= 8
    # They complete in another order than they were invoked, and each partition's reader reads
    # everything new in it: transactions of many records read.
    invoked = [e["process"] for e in events if e["f"] == "txn" and e["type"] == "invoke"]
    completed = [e["process"] for e in events if e["f"] == "txn" and e["type"] != "invoke"]
    assert invoked != completed and sorted(invoked) == sorted(completed)
    assert max(len(e["records"]) for e in events if e["f"] == "txn" and e["type"] != "invoke") >= 5


def test_overlapping_transactions_are_counted_as_expected_json_says_in_segments_of_many(tmp_path, capsys):
    # Every transactional plant beside overlapping transactions: the generator's counts are a literal
    # reading's and the checker's, the overlapping ones a cycle of none (tests/checkers/test_engines.py
    # and test_txn_segments.py: their cycles are the whole graph's), in segments of dozens.
    assert main(["gen-history", "--events", "2000", "--seed", "3", "--transactions", "0.9", "--txn-producers", "3",
                 "--txn-partitions", "3", "--txn-overlap", "8", "--ww-cycles", "1", "--wr-cycles", "1",
                 "--precommitted", "1", "--torn", "1", "--ww-realtime-cycles", "1", "--ww-wr-realtime-cycles", "1",
                 "--skips", "1", "--format", "parquet", "--out", str(tmp_path)]) == 0
    expected = orjson.loads((tmp_path / "expected.json").read_bytes())["anomalies"]
    assert {name: n for name, n in expected.items() if n} == {
        "G0": 1, "G1c": 1, "wr-cycle": 1, "precommitted-read": 1, "torn-transaction": 1, "poll-skip": 2,
        "G0-realtime": 1, "G1c-realtime": 1}
    reference = reference_counts(read_parquet_events(tmp_path / "history.parquet"))
    assert {name: reference[name] for name in expected} == expected
    results = check_history(tmp_path, Options(engine="local"))
    assert {name: a["count"] for name, a in results["anomalies"].items()} == expected
    cycles = results["checker"]["cycles"]
    assert cycles["segments"] >= 10 and cycles["largest_segment"]["transactions"] >= 40


@pytest.mark.spark
def test_overlapping_transactions_in_parts_are_counted_through_spark(spark, tmp_path, capsys):
    assert main(["gen-history", "--events", "8000", "--parts", "2", "--jobs", "1", "--seed", "7",
                 "--transactions", "0.9", "--txn-producers", "3", "--txn-partitions", "3", "--txn-overlap", "8",
                 "--ww-cycles", "2", "--wr-cycles", "1", "--ww-wr-realtime-cycles", "2", "--lost", "1",
                 "--out", str(tmp_path)]) == 0
    expected = orjson.loads((tmp_path / "expected.json").read_bytes())
    assert {k: n for k, n in expected["anomalies"].items() if k in TXN_PLANTED} == {
        "G0": 2, "G1c": 1, "wr-cycle": 1, "precommitted-read": 0, "torn-transaction": 0, "G0-realtime": 0,
        "G1c-realtime": 2}
    results = check_history(tmp_path, Options(), spark=spark)
    assert {name: a["count"] for name, a in results["anomalies"].items()} == expected["anomalies"]
    assert results["counts"]["sends"] == expected["sends"]
    cycles = results["checker"]["cycles"]
    assert cycles["segments"] >= 20 and cycles["largest_segment"]["transactions"] >= 40
