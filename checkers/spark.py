"""A Spark session for the checkers: `local[*]` by default, any master by URL.

Spark is loud by default (a banner, INFO lines, progress bars); a checker's
terminal output should be its verdict, so the JVM's log level is set to ERROR
before the session starts, the console progress bar is off, and the JVM's
own output goes to a file (`jvm_log_path`). A session started ahead of a
check, so that the check does not wait for the JVM, is checkers/service.py's.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

from core.class_archive import jdk_id
from core.errors import UserError, first_line

log = logging.getLogger(__name__)

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
"""


def _quiet_log_config() -> str:
    path = Path(tempfile.gettempdir()) / "harness-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return str(path)


JVM_LOG_ENV = "HARNESS_SPARK_LOG"


def default_master() -> str:
    return os.environ.get("HARNESS_SPARK_MASTER", "local[*]")


# One JVM start at a time: a warm-up in the background and the check that
# follows it must end with one session, not two JVMs. Re-entrant: a
# `SessionStart` holds it from before `get_session` until it knows whether
# to keep the session it started.
_START = threading.RLock()


# A JVM that will check one small history and exit spends its time compiling, not
# running: the JIT's first tier alone and the serial collector start it faster
# (docs/decisions.md, "A small check's JVM and plans"; a cold check is what
# `harness bench cold` measures, docs/benchmarks.md, "Cold check"). A long-lived
# session (the check service) keeps the defaults.
QUICK_START_JAVA = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# The driver JVM's class-data archive (Java's CDS): the classes a check loads
# (Spark, Scala, Catalyst), dumped once after a check by `make setup`
# (checkers/spark_archive.py) and mapped by every driver JVM at its start
# instead of read from the jars and verified one by one: a cold session starts
# sooner (docs/decisions.md, "The driver JVM's class-data archive"; `harness bench
# cold` measures a cold check with it and a stock session without it,
# docs/benchmarks.md, "Cold check"). A JVM that cannot
# use it (another JDK, other jars) says so in its log and starts the usual way.
_PROJECT_ROOT = Path(__file__).resolve().parents[1]


def class_archive_path() -> Path:
    """Where this JDK's and this pyspark's archive is (or would be): named by a
    hash of the `java` binary (its path and time) and pyspark's version and
    place, so that an upgrade of either makes a new one rather than a stale one."""
    java_home = os.environ.get("JAVA_HOME")
    java_id = jdk_id(str(Path(java_home) / "bin" / "java") if java_home else "java")
    spec = importlib.util.find_spec("pyspark")
    pyspark_id = f"{importlib.metadata.version('pyspark')}:{spec.origin if spec else ''}"
    key = hashlib.sha256(f"{java_id}|{pyspark_id}".encode()).hexdigest()[:16]
    return _PROJECT_ROOT / ".cache" / "spark" / f"driver-classes-{key}.jsa"


def get_session(master: str | None = None, conf: dict[str, str] | None = None, memory: str | None = None,
                java_options: str = "", class_archive: bool = True):
    """Start (or reuse) a SparkSession on `master`.

    Local masters get settings sized for one machine: few shuffle partitions
    (the default 200 is for clusters) and driver memory from `memory`. The
    JVM's own output goes to `jvm_log_path()`, never to the terminal: it is
    launched with its stdout and stderr there (no redirection of this
    process's descriptors, so other threads keep printing where they did).
    `java_options` are added to the driver JVM's (`QUICK_START_JAVA`); like
    every setting, they count only for the session that starts the JVM. The
    driver maps the class-data archive (`class_archive_path`) if `make setup`
    made one, unless `class_archive` is false.
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise UserError("Spark needs Java: none found on PATH (run `make setup`)")
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    master = master or default_master()
    log_conf = _quiet_log_config()
    java_opts = f"-Dlog4j2.configurationFile=file:{log_conf} -Dlog4j.configurationFile=file:{log_conf}"
    driver_opts = f"{java_opts} {java_options}"
    archive = class_archive_path() if class_archive else None
    if archive is not None and archive.is_file():
        driver_opts += f" -XX:SharedArchiveFile={archive}"
    options = {"spark.ui.enabled": "false",
               "spark.ui.showConsoleProgress": "false",
               # PySpark's call-site capture for error messages: each DataFrame
               # and function call costs more round trips to the JVM, most of a
               # small check's (docs/decisions.md, "A small check's JVM and plans").
               "spark.python.sql.dataFrameDebugging.enabled": "false",
               # Compiled code is cached by its text: with Spark's default of 100
               # classes, each check of a session compiled many of its own again,
               # and the JIT warmed them again (docs/decisions.md, "A small check's
               # JVM and plans").
               "spark.sql.codegen.cache.maxEntries": "1000",
               "spark.driver.extraJavaOptions": driver_opts.strip(),
               "spark.executor.extraJavaOptions": java_opts,
               "spark.sql.session.timeZone": "UTC",
               "spark.sql.execution.arrow.pyspark.enabled": "true",
               "spark.sql.adaptive.enabled": "true"}
    if master.startswith("local"):
        cores = os.cpu_count() or 2
        options.update({"spark.sql.shuffle.partitions": str(max(4, 2 * cores)),
                        "spark.driver.memory": memory or os.environ.get("HARNESS_SPARK_MEMORY", "4g"),
                        "spark.driver.bindAddress": "127.0.0.1",
                        "spark.driver.host": "127.0.0.1"})
    elif on_loopback(master):
        # A cluster on this machine (spark://127.0.0.1:PORT): its executors reach
        # the driver on the loopback address, so it need not listen on any other.
        options.update({"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"})
    options.update(conf or {})
    # The executors' Python runs the checker's kernel (checkers/engines/spark.py):
    # this one, with its packages, unless the user named another.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        with _START:
            if SparkContext._active_spark_context is None:
                spark_conf = SparkConf().setMaster(master).setAppName("harness-check").setAll(list(options.items()))
                with open(jvm_log_path(), "wb") as out:
                    gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": out, "stderr": out})
                SparkContext(conf=spark_conf, gateway=gateway)
            session = SparkSession.builder.master(master).appName("harness-check").config(map=options).getOrCreate()
    except Exception as e:  # a master that does not answer, a JVM that cannot start
        raise UserError(f"cannot start Spark on {master}: {first_line(e)} (JVM output in {jvm_log_path()})") from None
    session.sparkContext.setLogLevel("ERROR")
    return session


class Beside:
    """`work()` in a thread of its own, begun now: `result()` waits for what
    it returns (or raises what it raised), `wait()` for its end however it
    ends. Spark jobs begun there run beside the caller's next ones, on the
    cores their one-task stages leave idle. Where a session is running, the
    thread takes the caller's job group (PySpark's `InheritableThread`), so
    cancelling that group (`checkers.service`'s priming) cancels those jobs
    too; before one runs there is nothing to take (`SessionStart`). Work
    that runs no Spark job (`spark_jobs=False`) takes a plain thread: it may
    begin while a session is still starting in another thread, whose
    context has no job group to take yet."""

    def __init__(self, work, name: str = "spark-beside", spark_jobs: bool = True) -> None:
        from pyspark import InheritableThread, SparkContext

        self._result = None
        self._error: BaseException | None = None
        inherit = spark_jobs and SparkContext._active_spark_context is not None
        thread = InheritableThread if inherit else threading.Thread
        self._thread = thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work) -> None:
        try:
            self._result = work()
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            self._error = e

    def result(self):
        """What `work()` returned, once it has (or what it raised)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self) -> None:
        """Wait for `work()` to end, however it ends (before what it reads is released)."""
        self._thread.join()


class SessionStart:
    """`get_session(**kwargs)` in a thread of its own, begun now: a check
    from the shell starts its JVM while the driver reads the history
    (`checkers.check.check_history`), not after. `result()` waits for the
    session (or raises what starting it raised); `abandon()`, for a check
    that stops before it needs the session (a refused history), stops the
    session if this start made it, so that a caller in the same process
    (`harness check`'s `main` in tests) is not left with one it never
    asked for. The thread is a daemon: a `harness check` process that
    stops on bad input exits at once, and the JVM, whose input is a pipe
    from this process, exits with it."""

    def __init__(self, **kwargs) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._settled = False  # the session made, and whether to keep it decided (under _lock)
        self._made = False  # no session was running before this start made one
        self._session = None
        self._starting = Beside(lambda: self._start(kwargs), name="spark-session-start")

    def _start(self, kwargs: dict) -> None:
        from pyspark import SparkContext

        # Held until the session is kept or stopped: no other caller in this
        # process is handed a session an abandoned start is about to stop.
        with _START:
            self._made = SparkContext._active_spark_context is None
            self._session = get_session(**kwargs)
            with self._lock:
                self._settled = True
                if self._abandoned:
                    self._stop_if_made()

    def result(self):
        """The session, once started (None once `abandon` stopped it)."""
        self._starting.result()
        return self._session

    def abandon(self) -> None:
        """The session is not wanted after all: stopped if this start made it,
        now or as soon as it is made."""
        with self._lock:
            self._abandoned = True
            if not self._settled:
                return  # still starting (the thread stops it once made), or it failed
        with _START:
            self._stop_if_made()

    def _stop_if_made(self) -> None:
        if self._made and self._session is not None:
            stop_jvm(self._session)
            self._session = None


def stop_jvm(session, wait_s: float | None = None) -> None:
    """Stop `session` and the JVM behind it, so that the next `get_session`
    starts a JVM of its own settings (PySpark keeps a stopped session's JVM
    and would start the next session in it); `wait_s`: wait that long for
    the JVM to exit."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    session.stop()
    if gateway is None:
        return
    gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None
    gateway.proc.stdin.close()  # the gateway's JVM exits when its standard input ends
    if wait_s is not None:
        gateway.proc.wait(timeout=wait_s)


def conf_pairs(pairs: list[str]) -> dict[str, str]:
    """--spark-conf KEY=VALUE pairs as a dict (`harness check`, `harness bench
    check`); a pair without '=' is a UserError."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--spark-conf {pair!r}: expected KEY=VALUE")
        conf[key.strip()] = value.strip()
    return conf


def on_loopback(master: str) -> bool:
    """Whether a cluster master's URL names this machine's loopback address
    (spark://127.0.0.1:7077, spark://localhost:7077)."""
    host = urlsplit(master).hostname or ""
    return host == "localhost" or host.startswith("127.")


def jvm_log_path() -> Path:
    """Where the JVM's own output goes: `JVM_LOG_ENV` if set (a run's or a night's
    check service keeps its own), else one file in the temporary folder."""
    return Path(os.environ.get(JVM_LOG_ENV) or Path(tempfile.gettempdir()) / "harness-spark.log")
