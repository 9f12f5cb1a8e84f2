"""How the checker computes, not what it finds: the same results.json
(verdict, counts, examples, statistics) whichever Spark settings the
history's size picks, and on the paths a history with very many odd read
steps or wide gaps takes; a small check runs few Spark jobs; the session's
own settings are left as they were."""

from __future__ import annotations

import gc
import threading

import orjson
import pytest

from checkers import anomalies
from checkers import check as check_module
from checkers import order, read_runs
from checkers.check import Options, check_history, sized_conf
from core.history.parquet import write_parquet
from harness.synthetic import Plan, generate
from tests.checkers.conftest import without_timing
from tests.checkers.reference import reference_counts

pytestmark = pytest.mark.spark

PLAN = Plan(events=8_000, seed=11, partitions=4, producers=3, consumers=3, batch=15, lost=2, lost_acked=2,
            dirty_reads=2, duplicates=3, inconsistent=2, aborted=2, nonmonotonic_polls=2, skips=3,
            nonmonotonic_sends=2, unseen=2, hole_rate=0.01)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    syn = generate(PLAN)
    path = tmp_path_factory.mktemp("planted") / "history.parquet"
    write_parquet(syn.events, path)
    return syn, path


def test_small_and_large_history_settings_give_the_same_results(spark, planted, monkeypatch):
    syn, path = planted
    small = check_history(path, Options(), spark=spark)
    counts = {name: a["count"] for name, a in small["anomalies"].items()}
    assert counts == syn.expected
    assert counts == {k: reference_counts(syn.events)[k] for k in counts}
    assert all(counts.values()), "every kind planted, so every example path runs"
    # The settings of a large history: several shuffle partitions, adaptive execution.
    monkeypatch.setattr(check_module, "SMALL_EVENTS", 0)
    large = check_history(path, Options(), spark=spark)
    assert without_timing(large) == without_timing(small)


def test_the_driver_s_lookups_give_the_same_results_as_arrays_and_as_maps(spark, planted, monkeypatch):
    # Final-read brackets by process, final-log ends and highest reads by
    # partition: looked up in a dense array where the keys are small, in a
    # map where they are not; a missing key is null either way.
    syn, path = planted
    dense = check_history(path, Options(), spark=spark)
    monkeypatch.setattr(anomalies, "DENSE_KEYS", 0)
    assert without_timing(check_history(path, Options(), spark=spark)) == without_timing(dense)
    monkeypatch.undo()
    keys = spark.createDataFrame([(k,) for k in (0, 2, 3, 5000, 7)], "k long")
    for mapping in ({0: 10, 2: -1, 7: 1 << 62}, {0: 10, 2: -1, 7: 1 << 62, 5000: 3}):
        looked_up = keys.select("k", anomalies._lookup(mapping, keys["k"]).alias("v")).collect()
        assert {r["k"]: r["v"] for r in looked_up} == {k: mapping.get(k) for k in (0, 2, 3, 5000, 7)}


def test_final_read_brackets_give_the_same_results_inline_and_as_a_map(check, hist, monkeypatch):
    # A reader with two brackets of final reads (it crashed after the first
    # and read again): tested inline, or in a map of each process's spans.
    for v in range(4):
        hist.send(0, v, 0, v)
    hist.send(0, 4, outcome="info")
    hist.poll(1, (0, 0, 0), (0, 1, 4))  # during the run: 4 is a dirty read, the log has 1 at offset 1
    hist.final_reads(6, [0])  # another reader's bracket, which reads nothing
    hist.poll(6)
    hist.final_reads_ok(6, {})
    hist.final_reads(5, [0])
    hist.poll(5, (0, 0, 0))
    hist.final_reads_ok(5, {})
    hist.crash(5)
    hist.final_reads(5, [0])
    hist.poll(5, (0, 1, 1), (0, 2, 2))
    hist.final_reads_ok(5, {0: 4})
    hist.poll(5, (0, 3, 3))  # after its final reads: a read of the run
    hist.poll(6, (0, 2, 2))  # and after the other's
    inline = check(hist)
    assert inline["counts_by_anomaly"]["dirty-read"] == 1
    assert inline["counts_by_anomaly"]["lost-acked"] == 1  # 3, read only after the final reads
    monkeypatch.setattr(anomalies, "BRACKETS_INLINE", 0)
    assert without_timing(check(hist)) == without_timing(inline)


def test_the_spark_side_paths_of_read_order_agree_with_the_driver_side(spark, planted, hist, tmp_path, monkeypatch):
    # A wide gap (a jump past 1,024 offsets over a known one), a narrow one, a step back, a send out of order.
    hist.send(0, 0, 0, 0)
    hist.send(0, 1, 0, 1500)
    hist.send(0, 2, 0, 5000)
    hist.send(0, 3, 0, 5001)
    hist.send(0, 4, 0, 5003)
    hist.add(0, "invoke", "send", key=0, value=5)
    hist.add(0, "invoke", "send", key=0, value=6)
    hist.add(0, "ok", "send", value=6, partition=1, offset=0)
    hist.add(0, "ok", "send", value=5, partition=1, offset=1)
    hist.poll(1, (0, 0, 0), (0, 5000, 2))
    hist.poll(1, (0, 5003, 4), (0, 1500, 1))
    hist.poll(2, (0, 5001, 3), (1, 0, 6), (1, 1, 5))
    small = hist.write(tmp_path)
    syn, path = planted
    driver_side = [check_history(p, Options(), spark=spark) for p in (small, path)]
    assert [driver_side[0]["anomalies"][k]["count"] for k in ("poll-skip", "nonmonotonic-poll", "nonmonotonic-send")] \
        == [2, 1, 1]
    # Every odd step kept in Spark, wide gaps by ordering the known offsets.
    monkeypatch.setattr(order, "STEPS_ON_DRIVER", 0)
    spark_side = [check_history(p, Options(), spark=spark) for p in (small, path)]
    monkeypatch.setattr(order, "STEPS_ON_DRIVER", 100_000)
    monkeypatch.setattr(order, "WIDE_GAPS_BROADCAST", 0)
    ordered = [check_history(p, Options(), spark=spark) for p in (small, path)]
    for a, b, c in zip(driver_side, spark_side, ordered):
        assert without_timing(a) == without_timing(b) == without_timing(c)


def test_the_by_value_frame_the_driver_makes_gives_what_spark_s_gives(spark, planted, driver_frames):
    # Every anomaly kind planted: the whole results.json (counts, examples,
    # statistics) from the driver's frame (checkers/driver_by_value.py) and
    # from Spark's aggregation, which a history too large for the driver's
    # memory takes.
    syn, path = planted
    written = driver_frames
    on_driver = check_history(path, Options(), spark=spark)
    assert len(written) == 1
    by_spark = check_history(path, Options(driver_frames_up_to=len(syn.events) - 1), spark=spark)
    assert len(written) == 1, "a history over the bound is aggregated by Spark"
    assert without_timing(by_spark) == without_timing(on_driver)
    assert {name: a["count"] for name, a in on_driver["anomalies"].items()} == syn.expected


@pytest.fixture(params=["driver", "spark"])
def runs_by(request, monkeypatch):
    """Who makes the read runs: the driver as it reads the history (a check
    with a scratch folder), or Spark (a Parquet history on a cluster, no
    --scratch): forced here by giving the driver nowhere to write them."""
    if request.param == "spark":
        monkeypatch.setattr(check_module, "RunsWriter", lambda path, **kw: None)
    return request.param


def test_the_read_runs_the_driver_makes_give_what_spark_s_give(spark, planted, monkeypatch):
    syn, path = planted
    records = []

    class Counting(read_runs.RunsWriter):
        def add(self, poll, *columns):
            records.append(len(poll))
            super().add(poll, *columns)

    monkeypatch.setattr(check_module, "RunsWriter", Counting)
    on_driver = check_history(path, Options(), spark=spark)
    assert sum(records) == on_driver["counts"]["records_read"] > 0
    monkeypatch.setattr(check_module, "RunsWriter", lambda path, **kw: None)
    assert without_timing(check_history(path, Options(), spark=spark)) == without_timing(on_driver)


def test_polls_that_interleave_partitions_are_read_record_by_record(check, hist, runs_by):
    # Read order is checked on runs of a poll's records whose offsets rise
    # with their place in the poll (checkers.anomalies.read_runs). Records of
    # one partition with another's between them fall in one run when their
    # offsets rise by exactly as many places: 10, (another), 12 hides the
    # skip of 11, known here, so such polls are split record by record.
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


def test_a_small_check_runs_few_spark_jobs_and_leaves_the_session_as_it_was(spark, hist, tmp_path):
    for v in range(3):
        hist.send(0, v, 0, v)
    hist.poll(1, (0, 0, 0), (0, 1, 1))
    hist.poll(1, (0, 2, 2))
    path = hist.write(tmp_path)
    keys = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled", "spark.sql.subexpressionElimination.enabled")
    before = {k: spark.conf.get(k, None) for k in keys}
    sc = spark.sparkContext

    def jobs(options: Options, group: str) -> int:
        sc.setJobGroup(group, "a small check")
        try:
            assert check_history(path, options, spark=spark)["valid"] is True
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        return len(sc.statusTracker().getJobIdsForGroup(group))

    # Every pass the driver's (docs/checker.md, "Passes"): no Spark job.
    assert jobs(Options(), "test-passes-driver") == 0
    # The by-value and by-position passes in Spark, as for a history over
    # --driver-frames-up-to: the passes, what they keep, and the few jobs
    # Spark adds, the read runs made on the driver. Before the passes were
    # merged, a small history took about 40 (docs/benchmarks.md); with the
    # runs made by Spark, 7. Read order's job would run in a thread beside
    # the others, and count here: it takes the check's job group.
    assert 1 <= jobs(Options(driver_frames_up_to=0), "test-passes-spark") <= 6
    assert {k: spark.conf.get(k, None) for k in keys} == before
    assert sized_conf(1_000, 2) == {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false",
                                    "spark.sql.subexpressionElimination.enabled": "false"}
    assert sized_conf(10_000_000, 2)["spark.sql.shuffle.partitions"] == "4"
    assert sized_conf(100_000_000, 2)["spark.sql.shuffle.partitions"] == "40"


def test_a_check_sets_the_objects_alive_before_it_aside_from_the_collector_and_gives_them_back(
        spark, hist, tmp_path, monkeypatch):
    hist.send(0, 1, 0, 0)
    hist.poll(1, (0, 0, 1))
    path = hist.write(tmp_path)
    frozen = []
    faults = check_module.stats.faults
    monkeypatch.setattr(check_module.stats, "faults", lambda few: frozen.append(gc.get_freeze_count()) or faults(few))
    assert check_history(path, Options(), spark=spark)["valid"] is True
    assert frozen and frozen[0] > 1000
    assert gc.get_freeze_count() == 0
    # A refused history gives them back too.
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(Exception):
        check_history(tmp_path / "bad.jsonl", Options(), spark=spark)
    assert gc.get_freeze_count() == 0


def test_the_priming_history_takes_every_path(spark):
    # `prime` compiles the checker's plans ahead of a real check: only the
    # paths its history takes, so it should find every kind of anomaly.
    from checkers.anomalies import ANOMALIES
    from checkers.check import prime

    results = prime(spark)
    assert {name for name, a in results["anomalies"].items() if a["count"] and a["examples"]} == set(ANOMALIES)


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


def test_a_history_like_the_last_one_finds_the_checks_code_compiled(spark, tmp_path):
    # Spark compiles each plan's code the first time a session sees its text,
    # and the JIT warms it anew: a check service is only warm for the next
    # history if the code does not change with the history's numbers (its
    # final-read brackets, the order of common subexpressions that follows
    # them) and stays in the cache (at Spark's default of 100 classes, each
    # check compiled about 30 of its own again).
    paths = []
    for seed in (1, 2):
        (tmp_path / str(seed)).mkdir()
        paths.append(tmp_path / str(seed) / "history.parquet")
        write_parquet(generate(Plan(events=6_000, seed=seed, partitions=4, producers=2, consumers=2)).events, paths[-1])
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    check_history(paths[0], Options(), spark=spark)
    before = compiled.getCount()
    check_history(paths[1], Options(), spark=spark)
    # What is left compiles anew in every check: a limit's counter and a lambda's
    # variable are named from counters of the whole JVM.
    assert compiled.getCount() - before <= 4
