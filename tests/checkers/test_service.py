"""The check service (checkers/service.py): a Spark session in a process of its
own, started niced, that checks a history exactly as `check_history` does in
the caller's process, raises itself to normal priority for its first request,
says bad input in the same one line, and dies with the process that started it."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from core.waiting import wait_for
from checkers import service
from checkers.check import Options, _prime_events, check_history
from checkers.load import scratch_for
from core.errors import UserError
from core.history.files import resolve
from core.processes import descendants, session_nice
from lab.synthetic import Plan, generate
from tests.support import REPO

pytestmark = pytest.mark.spark


def _nices(pid: int) -> dict[int, int]:
    """Each thread of process `pid` and of its descendants -> its nice value."""
    found = {}
    for p in [pid] + descendants(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:  # gone since descendants() listed it
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{p}/task/{tid}/stat").read_bytes()
            except OSError:
                continue
            found[int(tid)] = int(stat[stat.rindex(b")") + 2:].split()[16])
    return found


def _java_children(pid: int) -> list[int]:
    """The JVMs below process `pid`; the launcher's short-lived helpers (spark-submit's
    shells) may exit between the listing and the read, and are skipped."""
    found = []
    for p in descendants(pid):
        try:
            program = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if b"java" in program:
            found.append(p)
    return found


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """A service, the nice values of its process tree once its JVM runs, before any request,
    its logs' folder, and its session's nice value then."""
    logs = tmp_path_factory.mktemp("service")
    svc = service.start(logs / "check-service.log", jvm_log_path=logs / "spark.log")
    try:
        wait_for(lambda: _java_children(svc.process.pid), timeout=60, what="the service's JVM")
        yield svc, _nices(svc.process.pid), logs, session_nice(svc.process.pid)
    finally:
        svc.close()


def _anomalous(hist):
    """An inconsistent offset, a skipped offset, a read going backwards."""
    hist.assign(1, [0])
    for v, offset in enumerate((0, 1, 2, 3)):
        hist.send(0, v, 0, offset)
    hist.send(0, 4, 0, 1)  # the offset of value 1: inconsistent
    hist.poll(1, (0, 0, 0), (0, 1, 1), (0, 3, 3))  # 2 skipped
    hist.poll(1, (0, 0, 0))  # backwards
    return hist


def test_the_service_checks_a_history_as_the_checker_does_in_process(started, hist, spark, tmp_path):
    svc, *_ = started
    path = _anomalous(hist).write(tmp_path)
    opts = Options(allow={"duplicate"}, fault_ends={"start-partition": "stop-partition"})
    here = check_history(path, opts, spark=spark)
    there = svc.check(path, opts)
    assert there["valid"] is False and there["counts"] == here["counts"]
    assert {k for k, v in there["anomalies"].items() if v["count"]} >= {"inconsistent-offset", "poll-skip"}
    # Everything but the checker's own timing and master is the same, example for example.
    for results in (here, there):
        results.pop("checker")
    assert there == here


def test_the_first_request_raises_the_service_and_its_jvm_from_nice_19_to_0(started, hist, tmp_path):
    svc, before, _, session_before = started
    assert before and set(before.values()) == {service.BACKGROUND_NICE}, before
    svc.check(_anomalous(hist).write(tmp_path), Options())
    after = _nices(svc.process.pid)
    assert _java_children(svc.process.pid)
    assert set(after.values()) == {0}, after
    # Its session too, where the kernel weighs sessions first (Debian's does): a niced
    # process alone in its session would otherwise take a full share of the CPU.
    if Path("/proc/self/autogroup").exists():
        assert (session_before, session_nice(svc.process.pid)) == (service.BACKGROUND_NICE, 0)


def test_a_claim_stops_the_priming_and_raises_the_priority_before_the_check_comes(tmp_path, hist):
    # `harness run` claims its service when it heals, so that the check finds it idle at nice 0.
    # Primed on a run's history of 50,000 events, the later primes take seconds each: the claim
    # comes before the last even if this test gets the CPU late (the suite runs it at nice 19).
    written = tmp_path / "written" / "history.jsonl"
    written.parent.mkdir()
    written.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in generate(Plan(events=50_000, seed=3)).events))
    svc = service.start(tmp_path / "check-service.log", jvm_log_path=tmp_path / "spark.log", prime_from=written)
    try:
        wait_for(lambda: "primed (1 of" in (tmp_path / "check-service.log").read_text(), timeout=120,
                 what="the first prime")
        svc.claim()
        claimed = (tmp_path / "check-service.log").read_text()
        # Cut short: a prime under way stopped (or none began after the claim), no more to come.
        assert "claimed in" in claimed and claimed.count("primed (") < service.PRIMES, claimed
        nices = _nices(svc.process.pid)
        assert _java_children(svc.process.pid) and set(nices.values()) == {0}, nices
        svc.claim()  # again, as each run of a night does: nothing left to stop
        assert svc.check(_anomalous(hist).write(tmp_path), Options())["valid"] is False
        said = (tmp_path / "check-service.log").read_text()
        assert said.count("claimed in") == 2 and "primed" not in said[len(claimed):], said
    finally:
        svc.close()


def test_bad_input_is_the_same_one_line_error_as_in_process(started, spark, hist, tmp_path):
    svc, _, logs, _ = started
    bad = tmp_path / "history.jsonl"
    bad.write_text('{"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "send", "value": 1}\nnot json\n')
    with pytest.raises(UserError) as here:
        check_history(bad, Options(), spark=spark)
    with pytest.raises(UserError) as there:
        svc.check(bad, Options())
    assert str(there.value) == str(here.value) and "\n" not in str(there.value)
    # The service goes on serving after bad input, and its log says what it checked.
    good = tmp_path / "good"
    good.mkdir()
    assert svc.check(_anomalous(hist).write(good), Options())["valid"] is False
    assert f"checked {good / 'history.jsonl'}" in (logs / "check-service.log").read_text()


def test_a_service_that_is_gone_is_a_service_error_so_the_caller_checks_itself(tmp_path):
    svc = service.start(tmp_path / "check-service.log")
    svc.process.kill()
    svc.process.wait()
    with pytest.raises(service.ServiceError):
        svc.check(tmp_path / "history.jsonl", Options())
    svc.close()
    assert not svc.folder.exists()


def test_the_service_and_its_jvm_die_with_the_process_that_started_it(tmp_path):
    """A `kill -9` of the starter (a harness run) leaves no service and no JVM behind."""
    starter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from checkers import service
        svc = service.start(Path({str(tmp_path / 'check-service.log')!r}))
        print(svc.process.pid, svc.address, flush=True)
        time.sleep(600)
    """)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    pid, address = starter.stdout.readline().split()
    pid = int(pid)
    java = wait_for(lambda: _java_children(pid), timeout=60, what="the service's JVM")
    os.kill(starter.pid, signal.SIGKILL)
    starter.wait()
    gone = lambda p: not Path(f"/proc/{p}").exists() or b"zombie" in Path(f"/proc/{p}/status").read_bytes()  # noqa: E731
    wait_for(lambda: all(gone(p) for p in [pid, *java]), timeout=60, what="the service and its JVM to exit")
    assert not Path(address).exists()


def test_a_shared_service_is_named_by_the_environment_and_not_stopped_by_its_users(monkeypatch, started):
    svc, *_ = started
    monkeypatch.setenv(service.ENV, svc.address)
    shared = service.from_environment()
    assert shared.address == svc.address and shared.process is None
    shared.close()
    assert svc.process.poll() is None
    monkeypatch.delenv(service.ENV)
    assert service.from_environment() is None


def test_clean_removes_the_folder_of_a_killed_service_and_keeps_a_running_ones(started, tmp_path):
    """A service killed outright (SIGKILL) cannot remove its socket folder; `harness clean`
    (`service.remove_stale`) does, and leaves a running service's alone, and the
    folder a check under way converts a JSONL history into (its name starts alike)."""
    running, *_ = started
    killed = service.start(tmp_path / "check-service.log")
    killed.process.kill()
    killed.process.wait()
    assert killed.folder.is_dir()
    history = tmp_path / "run" / "history.jsonl"
    history.parent.mkdir()
    history.write_text("")
    said = []
    with scratch_for(resolve(history), "local[*]") as converting:
        removed = service.remove_stale(said.append)
        assert converting.is_dir() and str(converting) not in removed
    assert str(killed.folder) in removed and not killed.folder.exists()
    assert Path(running.address).parent.is_dir() and str(Path(running.address).parent) not in removed
    assert said and all(line.startswith("check service folder ") for line in said)


def test_the_later_primes_check_the_history_a_run_is_writing(spark, tmp_path, caplog):
    # The first prime compiles every plan on the built-in history; the later ones
    # check the run's history as far as it is written, which `harness run` names.
    events = generate(Plan(events=3_000, seed=5)).events
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    caplog.set_level(logging.INFO, logger="checkers.service")
    session = service._Session({}, str(path))  # in this process: the tests' session, already warm
    session._thread.join(300)
    primed = [re.sub(r" in [0-9.]+ s$", "", r.getMessage()) for r in caplog.records
              if r.getMessage().startswith("primed")]
    n = service.PRIMES
    assert primed == [f"primed (1 of {n}) on {len(_prime_events())} events"] + \
        [f"primed ({i} of {n}) on {len(events)} events" for i in range(2, n + 1)]
