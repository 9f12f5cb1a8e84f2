"""A check service: one Spark session, in a process of its own, that checks
histories on request.

Why: a check's own work on a run's history is short, but a fresh process
first pays for the JVM's start and for Spark compiling each of the
checker's plans the first time, each longer than that work (docs/decisions.md,
"The check service, claimed when the run heals"; the check phase of a run
is in docs/benchmarks.md, "Check phase of a run").
`harness run` starts a service when its workload starts, so both are paid
while the clients and the faults run; `harness nightly` and `harness
calibrate` start one for all their runs and hand its address to each
(`ENV`), so a night pays them once.

Not disturbing what the history measures: the service runs at nice 19
(`BACKGROUND_NICE`; the JVM inherits it), its session too once it listens
(it leads one of its own, and where the kernel shares the CPU among
sessions first a nice value alone weighs nothing against the others:
`core.processes.set_session_nice`), while it starts and primes
(`checkers.check.prime`: a tiny built-in history with every anomaly, then
the run's own history as far as it is written), so
it takes CPU only that the brokers and clients leave idle. The first
request raises the whole process tree (every JVM thread) and its session back to nice 0,
cancels a priming still under way, and from then on the service checks at
normal priority. Raising priority needs root (CAP_SYS_NICE); without it
checks run at nice 19, which on a machine with nothing else to do is as
fast.

In a process of its own, the check's Python side never holds the harness's
GIL either, where the client threads run.

Protocol: a Unix socket; one request per connection, a JSON line
`{"history": PATH, "options": {...}}` (`checkers.check.Options` without the
master, which is the service's); one answer line, `{"results": {...}}`,
`{"error": "..."}` (bad input: the same one line `harness check` gives),
or `{"failure": "..."}` (anything else: the caller checks in its own
process instead). `{"claim": true}` says a check comes soon: the service
stops priming and raises its priority then, not when the check comes,
and answers `{"claimed": true}`. Requests are served one at a time.

`python -m checkers.service --socket PATH` is the service; `start`,
`connect` and `from_environment` are the callers' side; `remove_stale`
is `harness clean`'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

from checkers.check import Options, check_history, prime
from checkers.spark import JVM_LOG_ENV, conf_pairs, get_session
from core.errors import UserError, first_line
from core.processes import descendants, die_with_parent, set_session_nice

log = logging.getLogger(__name__)

ENV = "HARNESS_CHECK_SERVICE"  # the socket of a service shared by a nightly's or a calibration's runs
BACKGROUND_NICE = 19
# The most times a service primes its session while no request or claim comes. Each prime
# makes the next check faster, less so each time (docs/decisions.md, "The check service,
# claimed when the run heals"); a run claims the service when it heals, so the priming stops
# then, not when the check comes.
PRIMES = 8
START_WAIT_S = 10.0  # how long a caller waits for a service's socket to appear
RENICE_PASSES = 5  # _renice_tree's most passes over a process tree that keeps starting threads
# A service's socket folder, in the temporary folder. Not a prefix of a check's
# JSONL conversion folder (`harness-check-*`, checkers/load.py), which
# `remove_stale` must never take from a check under way.
_FOLDER_PREFIX = "harness-check-service-"


class ServiceError(Exception):
    """The service could not answer (gone, or it failed unexpectedly): check in this process instead."""


@dataclasses.dataclass
class CheckService:
    """A caller's handle on a service: `check` sends it one history."""

    address: str
    process: subprocess.Popen | None = None  # set when this caller started it (and so stops it)
    folder: Path | None = None  # the socket's folder, removed with a service this caller started

    def check(self, history: str | os.PathLike, opts: Options) -> dict:
        """What `check_history(history, opts)` returns, computed by the service.
        Bad input raises UserError; a service that cannot answer, ServiceError."""
        options = dataclasses.asdict(opts)
        options.pop("master")
        options["allow"] = sorted(options["allow"])
        options["scratch"] = str(options["scratch"]) if options["scratch"] is not None else None
        return self._ask({"history": str(Path(history).resolve()), "options": options})["results"]

    def claim(self) -> None:
        """Say a check comes soon: the service stops priming and raises its priority now,
        so that the check does not wait for that (a prime under way takes a while to
        stop). Returns once it has; a service that cannot answer raises ServiceError."""
        self._ask({"claim": True})

    def _ask(self, req: dict) -> dict:
        """One request, its answer; an error answer raised (UserError, else ServiceError)."""
        request = orjson.dumps(req) + b"\n"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(self.address)
                conn.sendall(request)
                conn.shutdown(socket.SHUT_WR)
                with conn.makefile("rb") as answers:
                    line = answers.readline()
        except OSError as e:
            raise ServiceError(f"check service at {self.address}: {e}") from None
        if not line.endswith(b"\n"):
            raise ServiceError(f"check service at {self.address} closed the connection without an answer")
        answer = orjson.loads(line)
        if "results" in answer or "claimed" in answer:
            return answer
        if "error" in answer:
            raise UserError(answer["error"])
        raise ServiceError(f"check service at {self.address}: {answer.get('failure', 'no answer')}")

    def close(self) -> None:
        """Stop the service if this caller started it; a shared one is left running."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def start(log_path: Path, jvm_log_path: Path | None = None, conf: dict[str, str] | None = None,
          nice: int = BACKGROUND_NICE, prime_from: Path | None = None) -> CheckService:
    """Start a service (it dies with this process), its output into `log_path` and
    its JVM's into `jvm_log_path`; returns once its socket listens (the JVM starts after).
    `prime_from`: the JSONL history a run is writing, which the later primes check
    as far as it is written (`checkers.check.prime`)."""
    folder = Path(tempfile.mkdtemp(prefix=_FOLDER_PREFIX))
    address = str(folder / "socket")
    argv = [sys.executable, "-m", "checkers.service", "--socket", address]
    if prime_from is not None:
        argv += ["--prime-from", str(prime_from)]
    for key, value in (conf or {}).items():
        argv += ["--spark-conf", f"{key}={value}"]
    env = dict(os.environ)
    if jvm_log_path is not None:
        env[JVM_LOG_ENV] = str(jvm_log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        # Its own session: a Ctrl-C at the terminal is the harness's to handle (it still
        # checks what it recorded); it dies with the harness instead (SIGTERM).
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                                   cwd=_PROJECT_ROOT, start_new_session=True,
                                   preexec_fn=_niced(die_with_parent(os.getpid()), nice))
    service = CheckService(address, process, folder)
    deadline = time.monotonic() + START_WAIT_S
    while not os.path.exists(address):
        if process.poll() is not None or time.monotonic() > deadline:
            service.close()
            raise ServiceError(f"the check service did not start (exit status {process.poll()}; see {log_path})")
        time.sleep(0.02)
    return service


def _niced(pre_exec, nice: int):
    """`pre_exec`, then `nice`: set before exec, so that every thread the service and its
    JVM ever start inherits it (on Linux a nice value is per thread). Its session takes
    the value once the service listens (`main`)."""
    def both() -> None:
        pre_exec()
        if nice:
            os.nice(nice)
    return both


def running_services() -> dict[str, int]:
    """The services running on this machine: socket address -> pid (from /proc)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue
        if b"checkers.service" in argv and b"--socket" in argv[:-1]:
            found[os.fsdecode(argv[argv.index(b"--socket") + 1])] = int(proc.name)
    return found


def remove_stale(say) -> list[str]:
    """Remove the socket folders of services no longer running (`harness clean`):
    a service killed outright (SIGKILL) could not remove its own. A folder whose
    socket a running service was started with is left alone."""
    running = {Path(address).parent for address in running_services()}
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{_FOLDER_PREFIX}*"):
        if folder.is_dir() and folder not in running:
            shutil.rmtree(folder, ignore_errors=True)
            say(f"check service folder {folder}")
            removed.append(str(folder))
    return removed


def connect(address: str) -> CheckService:
    """A handle on a service someone else started (and will stop)."""
    return CheckService(address)


def from_environment() -> CheckService | None:
    """The shared service named by `ENV`, if any."""
    address = os.environ.get(ENV)
    return connect(address) if address else None


# The service is started from the project's root, so `-m` finds this module.
_PROJECT_ROOT = str(Path(__file__).resolve().parents[1])


# --------------------------------------------------------------------------
# The service process


class _Session:
    """The service's one Spark session: started and primed in the background,
    claimed (raised to normal priority, priming cut short) by the first request."""

    PRIME_GROUP = "harness-prime"

    def __init__(self, conf: dict[str, str], prime_from: str | None = None):
        self.conf = conf
        self.prime_from = prime_from
        self.spark = None
        self.error: UserError | None = None
        self.claimed = threading.Event()
        self._thread = threading.Thread(target=self._start, name="spark-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        started = time.monotonic()
        try:
            self.spark = get_session(conf=self.conf)
        except UserError as e:
            self.error = e
            return
        log.info("Spark session started in %.1f s", time.monotonic() - started)
        if self.claimed.is_set():
            return
        primed = time.monotonic()
        try:
            # Job groups are per thread: cancelling this one leaves the requests' jobs alone.
            self.spark.sparkContext.setJobGroup(self.PRIME_GROUP, "priming the checker", interruptOnCancel=True)
            # Spark's code generation and the JVM's JIT keep improving over the first few
            # checks (a real check after several primes is quicker than after one): so
            # prime again while no request came. The
            # first round compiles every plan (the built-in history has every anomaly);
            # the later ones warm them on the run's history so far, if it is long enough.
            for round_no in range(1, PRIMES + 1):
                if self.claimed.is_set():
                    break
                primed_on = prime(self.spark, sample=self.prime_from if round_no > 1 else None,
                                  stop=self.claimed)
                log.info("primed (%d of %d) on %d events in %.1f s", round_no, PRIMES,
                         primed_on["checker"]["events"], time.monotonic() - primed)
                primed = time.monotonic()
        except Exception as e:  # noqa: BLE001 - cancelled by a request, or a priming problem: checks go on
            log.info("priming stopped after %.1f s: %s", time.monotonic() - primed,
                     (str(e).strip().splitlines() or [type(e).__name__])[0][:200])

    def claim(self):
        """The session, at normal priority and with no priming in its way."""
        if not self.claimed.is_set():
            self.claimed.set()
            _renice_tree(0)
            set_session_nice(0)
        # A cancel stops only the prime job running at that moment; between two of a
        # check's jobs the priming would go on with the next. So cancel until it stops.
        if self._thread.is_alive():
            waited = time.monotonic()
            while self._thread.is_alive():
                if self.spark is not None:
                    self.spark.sparkContext.cancelJobGroup(self.PRIME_GROUP)
                self._thread.join(0.05)
            log.info("waited %.2f s for the priming to stop", time.monotonic() - waited)
        if self.error is not None:
            raise self.error
        return self.spark


def _renice_tree(nice: int) -> None:
    """Every thread of this process and of its descendants (the JVM) to `nice`. A thread
    started meanwhile by one not yet set inherits the old value, so the threads are gone
    over again until a pass finds none to set (at most RENICE_PASSES)."""
    for _ in range(RENICE_PASSES):
        changed = failed = 0
        for pid in [os.getpid()] + descendants(os.getpid()):
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    if os.getpriority(os.PRIO_PROCESS, int(tid)) != nice:
                        os.setpriority(os.PRIO_PROCESS, int(tid), nice)
                        changed += 1
                except ProcessLookupError:  # the thread ended meanwhile
                    continue
                except OSError:
                    failed += 1
        if failed:
            log.info("could not set %d thread(s) to nice %d (raising priority needs root): checks run niced",
                     failed, nice)
            return
        if not changed:
            return


def _serve_one(conn: socket.socket, session: _Session) -> None:
    with conn.makefile("rb") as requests:
        line = requests.readline()
    try:
        request = orjson.loads(line)
        claim = isinstance(request, dict) and request.get("claim") is True
        if not claim:
            options = request["options"]
            opts = Options(**{**options, "allow": set(options["allow"])})
            history = request["history"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        answer = {"failure": f"a bad request: {e}"}
    else:
        what = "claiming the session" if claim else f"checking {history}"
        started = time.monotonic()
        try:
            if claim:
                session.claim()
                answer = {"claimed": True}
                log.info("claimed in %.2f s: a check comes soon", time.monotonic() - started)
            else:
                answer = {"results": check_history(history, opts, spark=session.claim())}
                log.info("checked %s in %.1f s", history, time.monotonic() - started)
        except UserError as e:  # bad input, or a session that did not start
            answer = {"error": str(e)}
        except Exception as e:  # noqa: BLE001 - the caller checks in its own process instead
            log.exception("%s failed", what)
            answer = {"failure": f"{type(e).__name__}: {first_line(e)}"}
    try:
        conn.sendall(orjson.dumps(answer) + b"\n")
    except OSError as e:  # the caller is gone (interrupted): the next request is served all the same
        log.info("the caller left before its answer: %s", e)


def _stop(signum, frame):
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a check service (started by harness run / nightly / calibrate)")
    parser.add_argument("--socket", required=True, help="the Unix socket to listen on")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--prime-from", metavar="PATH", help="a JSONL history being written, to prime on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s check-service: %(message)s")
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the harness's; it stops this process after
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(args.socket)
        server.listen(16)
        log.info("listening on %s (pid %d)", args.socket, os.getpid())
        # Its session niced as the process is (the module docstring) only now: its
        # start, Python's imports, is what the caller waits for (START_WAIT_S), and a
        # session at nice 19 on a busy machine would hardly get the CPU for them.
        set_session_nice(os.nice(0))
        session = _Session(conf_pairs(args.spark_conf), args.prime_from)
        while True:
            conn, _ = server.accept()
            with conn:
                _serve_one(conn, session)
    finally:
        server.close()
        Path(args.socket).unlink(missing_ok=True)
        try:  # its folder too, if it is ours alone (`start` made it): nothing is left in /tmp
            Path(args.socket).parent.rmdir()
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
