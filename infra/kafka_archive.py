"""The class-data archive (Java's CDS) of a Kafka version's JVMs, made once:
`python -m infra.kafka_archive --version 3.9.2`, which `make setup` runs for
each version it resolves.

It does nothing, and says nothing, when the archive of this JDK is there
already (`infra.kafka_dist.class_archive`). Otherwise, in a temporary
folder, it formats the storage of one KRaft node (broker and controller in
one process) on 127.0.0.1 and free ports, starts its broker with the
command line a run uses (`infra.kafka.java_argv`) and `-XX:ArchiveClassesAtExit`,
waits for "Kafka Server started", stops it with SIGTERM (the JVM writes the
classes it loaded as it exits), waits for that, checks that a JVM maps the
file, and only then moves it into place (`core.class_archive.make`); then
writes the version's `cds/.complete`, the Makefile's stamp.

One archive serves every Kafka JVM of the version (docs/decisions.md,
"Kafka's JVMs' class-data archive"): the broker in KRaft and in ZooKeeper
mode, a separate controller, and the short-lived StorageTool and
DumpLogSegments, whose classes are mostly the broker's. A run's JVMs map
it where they run these jars in place (`infra.kafka.class_archive`). If this
machine's JVM cannot make one, it says so in one line and setup goes on:
the JVMs start without it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from core import class_archive
from core.errors import UserError, first_line
from core.processes import die_with_parent
from core.waiting import free_ports, wait_for
from infra import kafka_dist
from infra.kafka import (BASE_SETTINGS, MODE_ONLY, cache_dir, java_argv, log_config_text, new_cluster_id,
                         uses_log4j2)

# The line a server logs once it serves: KRaft's (kafka.server.KafkaRaftServer), then ZooKeeper mode's.
STARTED = re.compile(rb"Kafka Server started|\] started \(kafka\.server\.KafkaServer\)")
START_TIMEOUT_S = 180
# The JVM shuts the broker down, then writes the archive: tens of megabytes, seconds.
DUMP_TIMEOUT_S = 300
DUMP_LOG = "dump.log"  # the dumping JVMs' own output, beside the archive


@dataclass
class LoneNode:
    """One Kafka node alone on 127.0.0.1, in the folder `work`, on free
    ports, run with a run's command lines (`infra.kafka.java_argv`): in
    KRaft mode broker and controller in one JVM, or a ZooKeeper-mode broker
    of the ensemble at `zookeeper` (host:port/chroot). The archive is made
    from one; the benchmark (bench/kafka_jvms.py) and the tests start them
    too. Its log is `work`/server.log."""

    work: Path
    version: str
    java: str = "java"
    zookeeper: str | None = None
    cache: Path = field(default_factory=cache_dir)

    def __post_init__(self) -> None:
        self.home = kafka_dist.kafka_home(self.version, self.cache)
        self.work.mkdir(parents=True, exist_ok=True)
        self.config = self.work / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in sorted(self._settings().items())))
        (self.work / "log4j.properties").write_bytes(log_config_text(self.version, "server.log"))

    def _settings(self) -> dict[str, str]:
        port, controller_port = free_ports(2)
        mode = "zk" if self.zookeeper else "kraft"
        settings = {k: v for k, v in BASE_SETTINGS.items() if k not in MODE_ONLY["kraft" if mode == "zk" else "zk"]}
        settings.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(self.work / "data"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        })
        if mode == "zk":
            return {**settings, "broker.id": "1", "zookeeper.connect": self.zookeeper}
        return {**settings, "node.id": "1", "process.roles": "broker,controller",
                "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
                "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT"}

    def argv(self, main: list[str], tool: bool = False, archive: Path | None = None,
             vm_options: tuple[str, ...] = ()) -> list[str]:
        return java_argv(self.java, str(self.home), main, str(self.work), str(self.work / "log4j.properties"),
                         uses_log4j2(self.version), tool=tool, archive=archive, vm_options=vm_options)

    def format(self, archive: Path | None = None, out=subprocess.DEVNULL) -> int:
        """StorageTool's format of the KRaft node's storage; its exit status."""
        argv = self.argv(["kafka.tools.StorageTool", "format", "-t", new_cluster_id(), "-c", str(self.config)],
                         tool=True, archive=archive)
        return subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.work,
                              timeout=START_TIMEOUT_S).returncode

    def start(self, archive: Path | None = None, vm_options: tuple[str, ...] = (), out=None) -> subprocess.Popen:
        """The node's JVM, started; its output to `out` (else `work`/kafka.out)."""
        with open(self.work / "kafka.out", "ab") if out is None else nullcontext(out) as sink:
            return subprocess.Popen(self.argv(["kafka.Kafka", str(self.config)], archive=archive,
                                              vm_options=vm_options),
                                    stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.work,
                                    preexec_fn=die_with_parent(os.getpid()))

    def started(self) -> bool:
        """Whether the server said it serves."""
        try:
            return STARTED.search((self.work / "server.log").read_bytes()) is not None
        except FileNotFoundError:
            return False

    def wait_started(self, proc: subprocess.Popen, timeout: float = START_TIMEOUT_S) -> bool:
        """Until the server serves or its JVM exits; whether it serves."""
        wait_for(lambda: proc.poll() is not None or self.started(), timeout, 0.1, "Kafka's server to start")
        return self.started()

    @staticmethod
    def stop(proc: subprocess.Popen, timeout: float = DUMP_TIMEOUT_S) -> int:
        """SIGTERM (not SIGKILL: a dumping JVM writes its archive as it exits),
        then its exit status; killed if it has not exited within `timeout`."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise


def build(version: str, cache: Path, java: str = "java", force: bool = False) -> bool:
    """Make the archive of `version`'s jars in `cache` if it is missing (or
    `force`); True if it is there after (and the version's stamp written)."""
    path = kafka_dist.class_archive(kafka_dist.kafka_home(version, cache), java)
    made = (path.is_file() and not force) or class_archive.make(path, lambda to: _dump(version, cache, java, to))
    if made:
        (path.parent / kafka_dist.COMPLETE).write_text(path.name + "\n")
    return made


def _dump(version: str, cache: Path, java: str, partial: Path) -> bool:
    """One KRaft node started and stopped, its classes dumped to `partial`;
    whether the dump completed and a JVM maps it."""
    with tempfile.TemporaryDirectory(prefix="harness-kafka-archive-") as work, \
            open(partial.parent / DUMP_LOG, "wb") as out:
        node = LoneNode(Path(work), version, java, cache=cache)
        if node.format(out=out) != 0:
            return False
        broker = node.start(vm_options=(f"-XX:ArchiveClassesAtExit={partial}",), out=out)
        try:
            node.wait_started(broker)
        finally:
            status = node.stop(broker)
        if status not in (0, 128 + signal.SIGTERM) or not node.started():
            return False
        # The archive maps with this class path, and under a tool's settings: a file cut short would not.
        check = node.argv(["-version"], tool=True, vm_options=("-Xshare:on", f"-XX:SharedArchiveFile={partial}"))
        return subprocess.run(check, stdout=out, stderr=subprocess.STDOUT, cwd=work, timeout=60).returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.kafka_archive", description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=kafka_dist.DEFAULT_VERSION,
                        help=f"Kafka version, in the jar cache (default {kafka_dist.DEFAULT_VERSION})")
    parser.add_argument("--force", action="store_true", help="make it again even if it is there")
    args = parser.parse_args(argv)
    cache = cache_dir()
    try:
        made = build(args.version, cache, force=args.force)
    except UserError as e:
        made, why = False, first_line(e)
    except Exception as e:  # noqa: BLE001 - a faster start is a nicety: setup goes on without it
        made, why = False, f"{type(e).__name__}: {first_line(e)}"
    else:
        why = f"see {kafka_dist.class_archive(kafka_dist.version_home(args.version, cache)).parent / DUMP_LOG}"
    if not made:
        print(f"harness setup: no class-data archive for Kafka {args.version}'s JVMs ({why}); "
              "they start without it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
