"""A standalone Spark cluster on this machine: a master and workers on
127.0.0.1, for proving the checker on a real cluster (tests/checkers) and
measuring it there (`harness bench check --standalone`).

Started from the pyspark distribution itself (`bin/spark-class` with the
Master and Worker classes, SPARK_HOME = pyspark's package folder, Java from
JAVA_HOME or PATH), so nothing beyond `make setup` is needed. Everything
binds to 127.0.0.1 (SPARK_LOCAL_IP, `--host`): the master, the workers, their
web UIs and the executors the workers launch. Ports are picked free, work
and log folders live in one temporary folder, and `standalone` always stops
what it started (each daemon leads its own process group, which holds the
executors it launches), also when starting fails half-way. A driver on this
machine binds to 127.0.0.1 for such a master by itself (`checkers.spark`).

Only what this module started is stopped: never a JVM found by name.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from checkers.spark import QUICK_START_JAVA
from core.errors import UserError
from core.waiting import free_ports

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass
class Standalone:
    """A running standalone cluster: its master URL, web UI and processes."""

    url: str  # spark://127.0.0.1:PORT
    web: str  # http://127.0.0.1:PORT (the master's UI; /json is its state)
    folder: Path  # logs (master.log, worker-N.log) and the workers' work folders
    processes: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)  # each process's output, in the same order

    @property
    def pids(self) -> list[int]:
        """The daemons' process ids (each the leader of its process group)."""
        return [p.pid for p in self.processes]

    def state(self) -> dict:
        """The master's own view (its UI's /json): workers, cores, applications."""
        with urllib.request.urlopen(f"{self.web}/json/", timeout=5) as answer:
            return json.loads(answer.read())

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except (OSError, ValueError):  # the UI not up yet, or a half-written answer
            return 0


def spark_home() -> Path:
    """pyspark's package folder, which holds Spark's bin/ and jars/."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("pyspark is not installed (run `make setup`)")
    home = Path(list(spec.submodule_search_locations)[0])
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise UserError(f"{home}: no bin/spark-class or jars/ (pyspark's distribution is incomplete)")
    return home


def environment(home: Path, daemon_memory: str) -> dict[str, str]:
    """The daemons' environment: loopback only, Spark's home, small daemon heaps
    and quick-starting JVMs."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise UserError("a standalone Spark cluster needs Java: none found on PATH (run `make setup`)")
    env = dict(os.environ)
    # A configuration folder of the user's (spark-env.sh, spark-defaults.conf)
    # could bind elsewhere or set other ports: the cluster uses Spark's defaults.
    for name in ("SPARK_CONF_DIR", "SPARK_MASTER_HOST", "SPARK_MASTER_PORT", "SPARK_WORKER_OPTS",
                 "SPARK_MASTER_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        env.pop(name, None)
    env.update({"SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST, "SPARK_DAEMON_MEMORY": daemon_memory,
                "SPARK_NO_DAEMONIZE": "1",
                # The master and workers do little but start and pass messages: with
                # C1 alone and the serial collector they are up in half the time or
                # less. The executors they launch get the application's settings.
                "SPARK_DAEMON_JAVA_OPTS": QUICK_START_JAVA,
                # The master's REST submission server listens on a fixed port (6066)
                # by default: nothing here submits through it, and a fixed port collides.
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"})
    return env


@contextmanager
def standalone(workers: int = 2, cores: int = 1, memory: str = "1g", daemon_memory: str = "256m",
               timeout: float = 120.0, folder: Path | None = None) -> Iterator[Standalone]:
    """A master and `workers` workers of `cores` cores and `memory` each on
    127.0.0.1, up once every worker has registered with the master (its /json
    lists them ALIVE); stopped, with the executors they launched, on the way
    out. `folder` keeps the logs and work folders (default: a temporary folder,
    removed afterwards, but kept when the cluster did not start)."""
    home = spark_home()
    env = environment(home, daemon_memory)
    own_folder = folder is None
    root = Path(tempfile.mkdtemp(prefix="harness-spark-standalone-")) if own_folder else folder
    root.mkdir(parents=True, exist_ok=True)
    port, web_port = free_ports(2)
    cluster = Standalone(f"spark://{HOST}:{port}", f"http://{HOST}:{web_port}", root)
    started = False
    try:
        _daemon(cluster, home, env, "master", [MASTER_CLASS, "--host", HOST, "--port", str(port),
                                               "--webui-port", str(web_port)])
        _wait(cluster, lambda: _answers(cluster), "the master's web UI", timeout)
        for n in range(workers):
            work = root / f"worker-{n}"
            work.mkdir(exist_ok=True)
            worker_port, worker_web_port = free_ports(2)
            _daemon(cluster, home, env, f"worker-{n}",
                    [WORKER_CLASS, "--host", HOST, "--port", str(worker_port), "--webui-port", str(worker_web_port),
                     "--cores", str(cores), "--memory", memory, "--work-dir", str(work), cluster.url])
        _wait(cluster, lambda: cluster.alive_workers() >= workers, f"{workers} workers to register", timeout)
        started = True
        yield cluster
    finally:
        stop(cluster)
        # A cluster that did not start keeps its logs: the error names them.
        if own_folder and started:
            shutil.rmtree(root, ignore_errors=True)


def _daemon(cluster: Standalone, home: Path, env: dict[str, str], name: str, argv: list[str]) -> None:
    """Start one Spark daemon in a process group of its own (spark-class execs
    the JVM, which launches executors into the same group), its output in
    NAME.log, and count it as the cluster's."""
    log_path = cluster.folder / f"{name}.log"
    with open(log_path, "wb") as out:
        cluster.processes.append(subprocess.Popen(
            [str(home / "bin" / "spark-class"), *argv], env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True))
    cluster.logs.append(log_path)


def _answers(cluster: Standalone) -> bool:
    try:
        cluster.state()
        return True
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _wait(cluster: Standalone, ready, what: str, timeout: float) -> None:
    """Poll `ready()` until it holds; a daemon that exits first, or the time
    running out, is a UserError naming the daemon's log and its last line."""
    deadline = time.monotonic() + timeout
    while not ready():
        for p, log_path in zip(cluster.processes, cluster.logs):
            if p.poll() is not None:
                raise UserError(f"standalone Spark: {log_path.stem} exited ({p.returncode}) while waiting for "
                                f"{what}: {_telling_line(log_path)} (its log: {log_path})")
        if time.monotonic() > deadline:
            raise UserError(f"standalone Spark: no {what} after {timeout:.0f} s (logs in {cluster.folder})")
        time.sleep(0.5)


def _telling_line(log_path: Path) -> str:
    """The line of a daemon's log that says why it stopped: the first error,
    exception or usage line (Spark prints its usage for a bad argument), else
    the last line."""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    for line in lines:
        if " ERROR " in line or "Exception" in line or line.startswith(("Error", "Usage:")):
            return line
    return lines[-1] if lines else "(its log is empty)"


def stop(cluster: Standalone, grace: float = 10.0) -> None:
    """Stop every daemon this cluster started, with its process group
    (the executors): SIGTERM (a worker kills its executors on the way out),
    then SIGKILL whatever is left after `grace` seconds. Workers first, so
    that none re-registers with a master that is going away."""
    groups = [p.pid for p in reversed(cluster.processes)]
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in cluster.processes:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    while time.monotonic() < deadline and any(_group_alive(g) for g in groups):
        time.sleep(0.2)
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)
    for p in cluster.processes:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    cluster.processes.clear()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
