"""How the checker runs, not what it finds: the same results.json whichever
engine runs the kernel and however many shards Spark's engine cuts the
history into (the transactions' cycles too, found segment by segment, as
one search of the whole graph finds them); a small check is one Spark job
that leaves the session's settings as they were; the priming history takes
every path."""

from __future__ import annotations

import gc
import threading
from dataclasses import replace

import orjson
import pytest

from checkers import check as check_module
from checkers import registry
from checkers.check import Options, check_history
from checkers.engines import spark as spark_engine
from core.history.parquet import write_parquet
from lab.synthetic import Plan, generate
from tests.checkers.conftest import without_timing
from tests.checkers.reference import reference_counts

pytestmark = pytest.mark.spark

PLAN = Plan(events=8_000, seed=11, partitions=4, producers=3, consumers=3, batch=15, lost=2, lost_acked=2,
            dirty_reads=2, duplicates=3, inconsistent=2, aborted=2, nonmonotonic_polls=2, skips=3,
            nonmonotonic_sends=2, unseen=2, hole_rate=0.01)


# Transactions of four producers with every transactional plant.
TXN_PLAN = Plan(events=20_000, seed=5, partitions=3, producers=2, consumers=2, transactions=0.9, txn_producers=4,
                txn_partitions=3, ww_cycles=2, wr_cycles=2, precommitted=1, torn=2, ww_realtime_cycles=2,
                ww_wr_realtime_cycles=2)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    syn = generate(PLAN)
    path = tmp_path_factory.mktemp("planted") / "history.parquet"
    write_parquet(syn.events, path, batch_rows=1_000)  # 8 row groups: 8 reading tasks
    return syn, path


@pytest.mark.parametrize("shards", [1, 3, 7])
def test_any_number_of_shards_gives_the_results_of_one_process(spark, planted, monkeypatch, shards):
    syn, path = planted
    monkeypatch.setattr(spark_engine, "shards_for", lambda events, cores: shards)
    in_spark = check_history(path, Options(), spark=spark)
    local = check_history(path, Options(engine="local"))
    assert without_timing(in_spark) == without_timing(local)
    counts = {name: a["count"] for name, a in local["anomalies"].items()}
    reference = reference_counts(syn.events)
    assert counts == {name: reference[name] for name in counts}
    assert counts == {name: syn.expected.get(name, 0) for name in counts}
    assert in_spark["checker"]["engine"] == "spark" and local["checker"]["engine"] == "local"


@pytest.mark.parametrize("overlap", [1, 8])
def test_a_generated_transactional_history_s_cycles_are_alike_in_process_in_spark_and_in_the_whole_graph(
        spark, tmp_path, monkeypatch, overlap):
    from checkers.engines import local as local_engine
    from tests.checkers.conftest import Hist
    from tests.checkers.test_transactions import CYCLES, whole_graph

    syn = generate(replace(TXN_PLAN, txn_overlap=overlap))
    path = tmp_path / "history.parquet"
    write_parquet(syn.events, path, batch_rows=2_000)
    monkeypatch.setattr(spark_engine, "shards_for", lambda events, cores: 3)
    monkeypatch.setattr(local_engine, "SHARDS", 3)
    in_spark = check_history(path, Options(), spark=spark)
    local = check_history(path, Options(engine="local"))
    assert without_timing(in_spark) == without_timing(local)
    assert {name: a["count"] for name, a in local["anomalies"].items()} == {
        name: syn.expected.get(name, 0) for name in registry.NAMES}
    hist = Hist()
    hist.events = syn.events
    assert {name: {k: local["anomalies"][name][k] for k in ("count", "examples")} for name in CYCLES} == \
        whole_graph(hist)
    assert in_spark["checker"]["cycles"] == local["checker"]["cycles"]
    segments, largest = local["checker"]["cycles"]["segments"], local["checker"]["cycles"]["largest_segment"]
    if overlap == 1:
        # A segment per planted cycle of two or three transactions (the generator's others run one at a time).
        assert segments >= 8 and largest["transactions"] in (2, 3)
    else:
        # Overlapping transactions (lab/synthetic.py's --txn-overlap): their backward edges make
        # segments of hundreds of transactions, each one searched, and no cycle but the planted ones.
        assert segments >= 40 and largest["transactions"] >= 200 and largest["edges"] >= 500


def test_polls_that_interleave_partitions_are_read_record_by_record(check, hist):
    # Read order is checked on runs of a poll's records next to each other
    # whose offsets rise by one: records of one partition with another's
    # between them are runs apart, so 10, (another), 12 does not hide the
    # skip of 11, known here.
    for v, o in enumerate((10, 11, 12, 13)):
        hist.send(0, v, 0, o)
    hist.send(0, 100, 1, 0)
    hist.send(0, 101, 1, 1)
    hist.poll(1, (0, 10, 0), (1, 0, 100), (0, 12, 2), (1, 1, 101), (0, 13, 3))
    hist.poll(2, (0, 10, 0), (1, 0, 100), (0, 11, 1), (1, 1, 101), (0, 12, 2))  # interleaved, in order
    hist.poll(3, (0, 12, 2), (1, 1, 101), (0, 10, 0))  # interleaved, back by two
    results = check(hist)
    assert results["counts_by_anomaly"]["poll-skip"] == 1
    assert results["counts_by_anomaly"]["nonmonotonic-poll"] == 1
    (skip,) = results["anomalies"]["poll-skip"]["examples"]
    assert (skip["process"], skip["prev_offset"], skip["offset"], skip["skipped_offset"]) == (1, 10, 12, 11)
    (back,) = results["anomalies"]["nonmonotonic-poll"]["examples"]
    assert (back["process"], back["prev_offset"], back["offset"]) == (3, 12, 10)


def test_a_small_check_is_one_spark_job_and_leaves_the_session_as_it_was(spark, hist, tmp_path):
    for v in range(3):
        hist.send(0, v, 0, v)
    hist.poll(1, (0, 0, 0), (0, 1, 1))
    hist.poll(1, (0, 2, 2))
    path = hist.write(tmp_path)
    key = "spark.sql.adaptive.enabled"
    before = spark.conf.get(key, None)
    sc = spark.sparkContext
    sc.setJobGroup("test-engines-small", "a small check")
    try:
        assert check_history(path, Options(), spark=spark)["valid"] is True
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert len(sc.statusTracker().getJobIdsForGroup("test-engines-small")) == 1
    assert spark.conf.get(key, None) == before
    assert spark_engine.shards_for(1_000, 2) == 1
    assert spark_engine.shards_for(10_000_000, 2) == 4
    assert spark_engine.shards_for(100_000_000, 2) == 40


def test_a_check_sets_the_objects_alive_before_it_aside_from_the_collector_and_gives_them_back(
        spark, hist, tmp_path, monkeypatch):
    hist.send(0, 1, 0, 0)
    hist.poll(1, (0, 0, 1))
    path = hist.write(tmp_path)
    frozen = []
    merge = check_module.merge
    monkeypatch.setattr(check_module, "merge", lambda partials: frozen.append(gc.get_freeze_count()) or merge(partials))
    assert check_history(path, Options(), spark=spark)["valid"] is True
    assert frozen and frozen[0] > 1000
    assert gc.get_freeze_count() == 0
    # A refused history gives them back too.
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(Exception):
        check_history(tmp_path / "bad.jsonl", Options(), spark=spark)
    assert gc.get_freeze_count() == 0


def test_the_priming_history_takes_every_path(spark):
    # `prime` warms the executors' Python and the kernel's compiled loops
    # ahead of a real check: only on the paths its history takes, so it
    # should find every kind of anomaly.
    from checkers.check import prime

    results = prime(spark)
    assert {name for name, a in results["anomalies"].items() if a["count"] and a["examples"]} == set(registry.NAMES)


def test_priming_on_a_history_being_written_checks_its_complete_lines(spark, planted, tmp_path):
    # The check service primes on the run's own history as far as it is
    # written: its complete lines are a history; a cut last line is not read.
    from checkers.check import PRIME_MIN_LINES, PrimingStopped, prime

    syn, _ = planted
    lines = b"".join(orjson.dumps(e) + b"\n" for e in syn.events)
    assert len(syn.events) >= PRIME_MIN_LINES
    (tmp_path / "written").mkdir()
    (tmp_path / "whole").mkdir()
    being_written = tmp_path / "written" / "history.jsonl"
    being_written.write_bytes(lines + b'{"index": 99999, "time": 12')
    whole = tmp_path / "whole" / "history.jsonl"
    whole.write_bytes(lines)
    primed = prime(spark, sample=being_written)
    assert primed["checker"]["events"] == len(syn.events)
    assert without_timing(primed) == without_timing(check_history(whole, Options(), spark=spark))
    # Too few lines yet, or no file yet: the built-in history, every anomaly in it.
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"".join(lines.splitlines(keepends=True)[:PRIME_MIN_LINES - 1]))
    built_in = without_timing(prime(spark))
    assert without_timing(prime(spark, sample=short)) == built_in
    assert without_timing(prime(spark, sample=tmp_path / "not-yet.jsonl")) == built_in
    # A real check wants the session: the conversion, which no Spark cancel reaches, stops.
    wanted = threading.Event()
    wanted.set()
    with pytest.raises(PrimingStopped):
        prime(spark, sample=being_written, stop=wanted)


def _hand_made_transactional_tests() -> list[tuple[str, object, dict]]:
    """Every test of tests/checkers/test_transactions.py (each of its
    parameters), as (name, function, keyword arguments but `hist` and `check`)."""
    import inspect

    from tests.checkers import test_transactions

    found = []
    for name, test in vars(test_transactions).items():
        if not (name.startswith("test_") and inspect.isfunction(test)):
            continue
        cases = [{}]
        for mark in getattr(test, "pytestmark", []):
            if mark.name == "parametrize":
                names, values = mark.args[0].split(","), mark.args[1]
                cases = [dict(zip(names, v if len(names) > 1 else (v,))) for v in values]
        found += [(name, test, case) for case in cases]
    return found


@pytest.mark.parametrize("shards", [3])
def test_every_hand_made_transactional_history_is_counted_alike_in_spark_s_shards(spark, tmp_path, monkeypatch,
                                                                                  shards):
    # The transactions' frames (their values, torn reads, send order) and the cycles' edges,
    # gathered from several shards of each stage, in Spark and in process: each test of
    # test_transactions.py run again, its checks made with `shards` shards in both engines,
    # which must give the same results.json, and its own assertions then hold of it.
    from checkers.engines import local as local_engine
    from tests.checkers.conftest import Hist

    monkeypatch.setattr(spark_engine, "shards_for", lambda events, cores: shards)
    monkeypatch.setattr(local_engine, "SHARDS", shards)
    checked = []

    def check(h, run_json=None, **options):
        folder = tmp_path / str(len(checked))
        folder.mkdir()
        path = h.write(folder, run_json)
        in_spark = check_history(path, Options(**options), spark=spark)
        local = check_history(path, Options(**{**options, "engine": "local"}))
        assert without_timing(in_spark) == without_timing(local), name
        checked.append(name)
        return {**in_spark, "counts_by_anomaly": {k: v["count"] for k, v in in_spark["anomalies"].items()}}

    tests = _hand_made_transactional_tests()
    for name, test, case in tests:
        test(hist=Hist(), check=check, **case)
    assert len(set(checked)) == len({name for name, _, _ in tests}) >= 15
