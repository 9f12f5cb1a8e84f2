"""A Spark session for the checkers: `local[*]` by default, any master by URL.

Spark is loud by default (a banner, INFO lines, progress bars); a checker's
terminal output should be its verdict, so the JVM's log level is set to ERROR
before the session starts and the console progress bar is off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from core.errors import UserError

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


def default_master() -> str:
    return os.environ.get("HARNESS_SPARK_MASTER", "local[*]")


def get_session(master: str | None = None, conf: dict[str, str] | None = None, memory: str | None = None):
    """Start (or reuse) a SparkSession on `master`.

    Local masters get settings sized for one machine: few shuffle partitions
    (the default 200 is for clusters) and driver memory from `memory`.
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise UserError("Spark needs Java: none found on PATH (run `make setup`)")
    from pyspark.sql import SparkSession

    master = master or default_master()
    log_conf = _quiet_log_config()
    java_opts = f"-Dlog4j2.configurationFile=file:{log_conf} -Dlog4j.configurationFile=file:{log_conf}"
    builder = (SparkSession.builder.master(master).appName("harness-check")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.extraJavaOptions", java_opts)
               .config("spark.executor.extraJavaOptions", java_opts)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.adaptive.enabled", "true"))
    if master.startswith("local"):
        cores = os.cpu_count() or 2
        builder = (builder.config("spark.sql.shuffle.partitions", str(max(4, 2 * cores)))
                   .config("spark.driver.memory", memory or os.environ.get("HARNESS_SPARK_MEMORY", "4g"))
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.host", "127.0.0.1"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        with _jvm_output_to(jvm_log_path()):
            session = builder.getOrCreate()
    except Exception as e:  # a master that does not answer, a JVM that cannot start
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"cannot start Spark on {master}: {first} (JVM output in {jvm_log_path()})") from None
    session.sparkContext.setLogLevel("ERROR")
    return session


def jvm_log_path() -> Path:
    return Path(tempfile.gettempdir()) / "harness-spark.log"


@contextlib.contextmanager
def _jvm_output_to(path: Path):
    """Point fds 1 and 2 at `path` while the JVM starts, so that it inherits
    them: the JVM's own start-up lines and Spark's stray console output land
    in a file, not on the user's terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for x in (fd, *saved):
            os.close(x)
