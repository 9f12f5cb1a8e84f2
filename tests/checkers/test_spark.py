"""The Spark session's settings (checkers/spark.py): a cluster master on this
machine's loopback address gets a driver that listens there too, one
elsewhere Spark's own choice of address; a JVM started for one small check
starts quickly, and in a thread of its own."""

from __future__ import annotations

import threading

import pytest

from checkers import check
from checkers import spark as spark_module
from checkers.engines import spark as spark_engine
from checkers.spark import QUICK_START_JAVA, Beside, SessionStart, on_loopback
from tests.checkers.test_bad_input import changed, lines
from tests.support import fresh_python


@pytest.mark.parametrize("master, loopback", [
    ("spark://127.0.0.1:7077", True),
    ("spark://localhost:7077", True),
    ("spark://127.0.0.1:7077,127.0.0.1:7078", True),
    ("spark://10.0.0.5:7077", False),
    ("spark://spark-master.example:7077", False),
    ("yarn", False),
    ("k8s://https://127.0.0.1:6443", False),
])
def test_a_master_on_the_loopback_address_is_recognised(master, loopback):
    assert on_loopback(master) is loopback


class _Started(Exception):
    pass


@pytest.mark.parametrize("small_events, expected", [(1000, QUICK_START_JAVA), (0, "")])
def test_a_session_started_for_one_small_check_gets_the_quick_start_jvm(monkeypatch, hist, tmp_path,
                                                                         small_events, expected):
    """A cold `harness check` of a small history starts its JVM with the JIT's first tier only
    (faster to start: docs/decisions.md, "A small check's JVM and plans"); a larger history's
    JVM keeps the defaults. The session starts in a thread of its own (`SessionStart`): what
    starting it raised, the check raises."""
    asked = {}

    def started(master=None, conf=None, memory=None, java_options=""):
        asked["java_options"] = java_options
        raise _Started

    monkeypatch.setattr(spark_module, "get_session", started)
    monkeypatch.setattr(spark_engine, "SMALL_EVENTS", small_events)
    for v in range(3):
        hist.send(0, v, 0, v)
    with pytest.raises(_Started):
        check.check_history(hist.write(tmp_path), check.Options())
    assert asked["java_options"] == expected


def test_a_session_started_in_a_thread_is_the_one_this_process_has(spark):
    """`SessionStart` hands over the session `get_session` gives: this
    process's own, where one is running (tests, the check service)."""
    assert SessionStart(master="local[2]").result().sparkContext is spark.sparkContext


def test_an_abandoned_start_stops_the_session_and_jvm_it_made_and_no_other():
    """Abandoned while starting (the thread stops what it makes) and once
    started: no session and no JVM are left, and the next session starts a
    JVM of its own. A session that was running before is left running."""
    out = fresh_python("""
        from pyspark import SparkContext
        from checkers.spark import SessionStart, get_session
        start = SessionStart(master="local[1]")
        start.abandon()  # while its JVM starts
        print(start.result() is None and SparkContext._active_spark_context is None, SparkContext._gateway is None)
        start = SessionStart(master="local[1]")
        jvm = start.result().sparkContext._gateway.proc
        start.abandon()
        print(SparkContext._active_spark_context is None, jvm.wait(timeout=60) is not None)
        running = get_session("local[1]")
        start = SessionStart(master="local[1]")
        assert start.result().sparkContext is running.sparkContext
        start.abandon()
        print(SparkContext._active_spark_context is running.sparkContext)
        """).stdout.strip()
    assert out.split("\n") == ["True True", "True True", "True"]


def test_a_refused_history_leaves_no_session_in_the_process_that_checked_it(tmp_path):
    """`harness check`'s `main` in a process of its own, as tests call it: the
    session started while the history was read is gone once it is refused."""
    path = tmp_path / "history.jsonl"
    path.write_text(lines(changed(3, index=7)))
    out = fresh_python(f"""
        import threading
        from pyspark import SparkContext
        from harness.cli import main
        status = main(["check", {str(path)!r}])
        for t in threading.enumerate():
            if t.name == "spark-session-start":
                t.join()
        print(status, SparkContext._active_spark_context is None)
        """).stdout.strip()
    assert out.split("\n")[-1] == "2 True"


def test_work_beside_runs_in_the_callers_job_group_and_hands_back_its_result_or_error(spark):
    # Read order's job runs in a thread beside the check's others
    # (checkers.check._analyse): in the check's job group, so that
    # cancelling the group (the check service's priming) reaches it too.
    sc = spark.sparkContext
    sc.setJobGroup("test-beside", "work beside")
    try:
        assert Beside(lambda: spark.range(10).count()).result() == 10
        beside_jobs = len(sc.statusTracker().getJobIdsForGroup("test-beside"))
        # The same work in a plain thread: its jobs are in no group.
        plain = threading.Thread(target=lambda: spark.range(10).count())
        plain.start()
        plain.join()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert beside_jobs >= 1
    assert len(sc.statusTracker().getJobIdsForGroup("test-beside")) == beside_jobs

    def fails():
        raise ValueError("in the thread")

    failed = Beside(fails)
    failed.wait()  # waits however the work ends
    with pytest.raises(ValueError, match="in the thread"):
        failed.result()


def test_the_driver_s_read_begins_its_threads_while_a_session_is_still_starting(spark, monkeypatch, tmp_path):
    # A check from the shell starts its session in a thread while the driver
    # reads the history (SessionStart); liveness begins in a thread of its own
    # at the read's end. A context half made then (no JVM handle yet) must not
    # fail it: it runs no Spark job and takes none of its job group. A
    # stand-in for that context, from the read's end until liveness began.
    from pyspark import SparkContext

    from tests.checkers.conftest import Hist

    h = Hist()
    for v in range(4):
        h.send(0, v, 0, v)
    h.poll(1, (0, 0, 0), (0, 1, 1))
    path = h.write(tmp_path, parquet=True)
    started = SparkContext._active_spark_context
    faults = check.HistoryRead.faults

    def while_starting(self):
        SparkContext._active_spark_context = object.__new__(SparkContext)  # no _jsc: still starting
        return faults(self)

    unfinished = check._unfinished_processing

    def started_now(*args):  # the next step after liveness began
        SparkContext._active_spark_context = started
        return unfinished(*args)

    monkeypatch.setattr(check.HistoryRead, "faults", while_starting)
    monkeypatch.setattr(check, "_unfinished_processing", started_now)
    try:
        results = check.check_history(path, check.Options(), spark=spark)
    finally:
        SparkContext._active_spark_context = started
    assert results["counts"]["sends"]["ok"] == 4 and results["liveness"]["verdict"] == "ok"
