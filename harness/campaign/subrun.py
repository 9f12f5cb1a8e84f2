"""One `harness run` in a process of its own, with a time limit of its own: what
`harness calibrate` and `harness nightly` both do for every run.

The child is the command a user would type (`python -m harness.cli run ...`),
so it provisions, heals and tears down its own cluster exactly as that command
does. It runs in a session of its own, so a Ctrl-C at the terminal reaches only
this process, which passes exactly one SIGINT on and waits for the child to
heal and tear down. It is asked to die with its parent (PR_SET_PDEATHSIG:
SIGTERM, which `harness run` treats as Ctrl-C), so a `kill -9` of calibrate or
nightly still heals and tears the current run down. A child that outlives its
limit gets a SIGINT, then `GRACE_S` to heal and tear down, then SIGKILL of its
process group and `harness clean` of the clusters it owned.

`Outcome` is what such a run came to: exit status, verdict (valid, invalid or
could not run, with the reason: the child's last `harness: error:` line), its
run directory, its run.json and results.json.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from checkers import service
from core.processes import die_with_parent
from infra import state as st
from infra.clean import clean

RUN_LINE_RE = re.compile(r"^run \S+: (.+) \(seed \d+\)$", re.M)
VERDICTS = {0: "valid", 1: "invalid"}  # `harness run` exit statuses; anything else: could not run
NOT_RUN = "could not run"
GRACE_S = 240.0  # after a SIGINT, how long a run may take to heal, tear down and check what it has


@dataclass
class Outcome:
    """What one `harness run` came to."""

    argv: list[str]
    status: int | None  # exit status; negative: killed by that signal
    verdict: str  # valid, invalid, or NOT_RUN
    seconds: float
    log: str  # the child's stdout and stderr
    run_dir: str | None = None
    run: dict | None = None  # run.json
    results: dict | None = None  # results.json
    problem: str | None = None  # why it could not be carried out
    timed_out: bool = False  # it outlived its limit and was stopped
    interrupted: bool = False  # a Ctrl-C or SIGTERM of ours stopped it


@contextmanager
def shared_checks(log_dir: Path):
    """One check service for every run started inside the block (they find it
    through `checkers.service.ENV`), so that a night or a calibration starts
    Spark's JVM and compiles the checker's plans once, not once per run. If it
    cannot start, each run checks with a service of its own."""
    try:
        shared = service.start(log_dir / "check-service.log", jvm_log_path=log_dir / "spark.log")
    except (OSError, service.ServiceError) as e:
        print(f"harness: no shared check service ({e}): each run starts its own", file=sys.stderr)
        yield
        return
    os.environ[service.ENV] = shared.address
    try:
        yield
    finally:
        os.environ.pop(service.ENV, None)
        shared.close()


def run(argv: list[str], log_path: Path, limit_s: float | None = None,
        on_start: Callable[[subprocess.Popen], None] | None = None, say: Callable[[str], None] | None = None) -> Outcome:
    """`harness ARGV` (ARGV starting with `run`) in a process of its own, its
    output into `log_path`; the Outcome. On Ctrl-C (KeyboardInterrupt) the
    child is let heal and tear down, then the KeyboardInterrupt goes on up,
    with the outcome as its `outcome` attribute."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    full = [sys.executable, "-m", "harness.cli", *argv]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    timed_out = False
    with open(log_path, "w") as log:
        child = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, preexec_fn=die_with_parent(os.getpid()))
        if on_start:
            on_start(child)
        try:
            try:
                status = child.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                say(f"    the run outlived its limit of {limit_s:g} s: stopping it (SIGINT, then heal and tear down)")
                status = stop(child, say)
        except KeyboardInterrupt as e:
            say("\nharness: interrupted; waiting for the current run to heal and tear down ...")
            status = stop(child, say)
            e.outcome = outcome(full, status, log_path, time.monotonic() - started, interrupted=True)
            raise
    return outcome(full, status, log_path, time.monotonic() - started, timed_out=timed_out, limit_s=limit_s)


def stop(child: subprocess.Popen, say: Callable[[str], None]) -> int:
    """One SIGINT, then `GRACE_S` for the child to heal and tear down (more
    Ctrl-Cs do not cut it short); then SIGKILL of its process group and
    `harness clean` of every cluster it owned. Its exit status."""
    try:
        child.send_signal(signal.SIGINT)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + GRACE_S
    while True:
        try:
            return child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            continue
        except subprocess.TimeoutExpired:
            break
    owned = [c for c in st.list_cluster_ids() if (st.read_state(c) or {}).get("owner_pid") == child.pid]
    say(f"    the run did not end {GRACE_S:g} s after SIGINT: killing it and cleaning {', '.join(owned) or 'nothing'}")
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    status = child.wait()
    for cid in owned:
        try:
            clean(cid, say=lambda line: say(f"    removed {line}"))
        except Exception as e:  # noqa: BLE001 - the matrix goes on; `harness clean` can finish it
            say(f"    harness clean --cluster {cid} failed: {e}")
    return status


def outcome(argv: list[str], status: int, log_path: Path, seconds: float, timed_out: bool = False,
            interrupted: bool = False, limit_s: float | None = None) -> Outcome:
    """The Outcome of a finished child, from its output and its run folder."""
    text = log_path.read_text(errors="replace")
    match = RUN_LINE_RE.search(text)
    run_dir = Path(match.group(1)) if match else None
    o = Outcome(argv=argv, status=status, verdict=VERDICTS.get(status, NOT_RUN), seconds=round(seconds, 1),
                log=str(log_path), run_dir=str(run_dir) if run_dir else None, timed_out=timed_out,
                interrupted=interrupted)
    if run_dir is not None:
        o.run = read_json(run_dir / "run.json")
        o.results = read_json(run_dir / "results.json")
    if timed_out or interrupted:
        o.verdict = NOT_RUN
    if o.verdict != NOT_RUN and o.results is None:  # an exit status without results is no verdict
        o.verdict = NOT_RUN
    elif o.verdict != NOT_RUN and isinstance(o.results.get("valid"), bool):
        # The verdict is about safety: a HANG or a missed liveness limit exits 1
        # too, and a valid run that hung is not an invalid one.
        o.verdict = "valid" if o.results["valid"] else "invalid"
    if o.verdict == NOT_RUN:
        if timed_out:
            o.problem = f"outlived its limit of {limit_s:g} s and was stopped"
        elif interrupted:
            o.problem = "interrupted"
        else:
            o.problem = problem(text, status, log_path)
    return o


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def problem(text: str, status: int, log_path: Path) -> str:
    """Why a run could not be carried out: its last `harness: error:` line, or its exit status."""
    errors = [ln for ln in text.splitlines() if ln.startswith("harness: error: ")]
    if errors:
        return errors[-1].removeprefix("harness: error: ").removeprefix("the run was not carried out: ")
    how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
    return f"`harness run` {how}; see {log_path}"
