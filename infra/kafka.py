"""Apache Kafka as a System: one `kafka.Kafka` JVM per node, ZooKeeper or KRaft mode.

The jars come from `infra.kafka_dist` (the cache `make setup` fills) or from
a distribution the user names (`--kafka-dist`, a folder or a tarball). Local
nodes share this machine's filesystem and run the jars where they are; SSH
and Vagrant nodes get them uploaded once into their run folder (a marker
file says which tarball is there, so a second run uploads nothing).

Each node gets a generated `server.properties` in its run folder: broker id
n1 -> 1, n2 -> 2, ..., one PLAINTEXT listener on the node's address, the data
dir `<data_dir>/kafka`, and the spec's settings (replication factor,
min.insync.replicas, unclean election, flush policy, anything in `[broker]`)
over a few defaults that suit a small cluster that fails over in seconds.

- ZooKeeper mode (`zk`, the default; Kafka 3.x only): every broker uses the
  run's ensemble under the chroot `/kafka`; leaders and the controller are
  read from ZooKeeper (`infra.zk_state`, Kafka's own layout).
- KRaft mode (`kraft`, Kafka 3.3 and later): the first three nodes (one, on
  clusters of one or two) are voters, running broker and controller in one
  process (`kafka_controllers = "combined"`) or a controller process of
  their own beside the broker (`"separate"`, infra/kraft_controllers.py);
  storage is formatted with one cluster id per run, and with the features
  `kafka_features` names (`eligible.leader.replicas.version=0`, say).
  Leaders come from a metadata request, the controller from the voters'
  `quorum-state` files.

A broker that dies while starting is a UserError quoting the last lines of
its log and of kafka.out (the JVM's own output), naming both files, and what
became of its process. In ZooKeeper mode a restarted broker waits until the registration
of its killed predecessor has expired: Kafka refuses to start while another
session still owns `/brokers/ids/<id>`.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import socket
import sys
import tarfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator

from core.errors import UserError
from infra import kafka_dist
from infra import kraft_controllers, kraft_metadata
from infra import zk_state
from infra.brokers import BrokerBase
from infra.nodes import Cluster, Node, parallel
from infra.own_broker import REPO, dump_data_dir
from infra.remote import RemoteError, one_line
from infra.system import DUMP_NICE, SystemKind, SystemOption, count_lines

log = logging.getLogger(__name__)

DAEMON = "kafka"
CHROOT = "/kafka"
PORT = 9092
CONTROLLER_PORT = 9093
OFFSETS_TOPIC = "__consumer_offsets"  # where a group's coordinator keeps its commits (its leader is the coordinator)
MODES = ("zk", "kraft")
DEFAULT_VERSION = kafka_dist.DEFAULT_VERSION
CACHE_ENV = "HARNESS_KAFKA_CACHE"  # another jar cache than .cache/kafka (shared machines, tests)
# Releases this system knows how to configure: KRaft is production-ready from
# 3.3; ZooKeeper mode is gone from 4.0.
OLDEST, NEWEST_MAJOR = (3, 3), 4
# Kafka's log dump tool: in the broker's jar up to 4.1, in kafka-tools (the cache's tools/) later.
DUMP_CLASSES = ("kafka.tools.DumpLogSegments", "org.apache.kafka.tools.DumpLogSegments")
LOG_ERROR_RE = re.compile(r"^\[[^]]*\] (ERROR|FATAL) |^Error: |^Exception in thread ")
# The lines of server.log that tell a truncation (Kafka 3.9, both modes), in order:
#   [Broker id=1] Follower harness-0 starts at leader epoch 1 from offset 702 with partition epoch 1
#       and high watermark 679. Current leader is 2. ...               (the leadership and the log end)
#   [ReplicaFetcher replicaId=1, leaderId=2, fetcherId=0] Truncating partition harness-0 with
#       TruncationState(offset=687, completed=true) due to leader epoch and offset EpochEndOffset(...)
#   [UnifiedLog partition=harness-0, dir=...] Truncating to offset 687          (it cut something)
#   [UnifiedLog partition=harness-0, dir=...] Truncating to 0 has no effect as ...   (it did not)
KAFKA_LOG_TIME_RE = r"^\[(?P<logged>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \S+ "
FOLLOWER_RE = re.compile(KAFKA_LOG_TIME_RE + r".*?Follower (?P<topic>\S+)-(?P<partition>\d+) starts at leader epoch "
                         r"(?P<epoch>-?\d+) from offset (?P<log_end>\d+)")
FETCHER_TRUNCATING_RE = re.compile(
    KAFKA_LOG_TIME_RE + r"\[ReplicaFetcher [^\]]*leaderId=(?P<leader>-?\d+)[^\]]*\] Truncating partition "
    r"(?P<topic>\S+)-(?P<partition>\d+) with TruncationState\(offset=(?P<offset>\d+)[^)]*\) due to (?P<why>.*?)"
    r"(?: \(kafka\.[\w.]+\))?$")
LOG_TRUNCATING_RE = re.compile(
    KAFKA_LOG_TIME_RE + r"\[UnifiedLog partition=(?P<topic>\S+)-(?P<partition>\d+), [^\]]*\] Truncating to "
    r"(?:offset )?(?P<offset>\d+)(?P<no_effect> has no effect)?")

# What a small test cluster needs where Kafka's production defaults differ;
# the spec's settings and [broker] table override every one of these.
BASE_SETTINGS = {
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "10",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.dedupe.buffer.size": str(16 << 20),
    # A dead broker is noticed in seconds, not Kafka's 18 s / 9 s.
    "zookeeper.session.timeout.ms": "6000",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
    "controlled.shutdown.enable": "false",
}
# Which of those belong to one mode only (Kafka warns about the others).
MODE_ONLY = {"zk": ("zookeeper.session.timeout.ms",),
             "kraft": ("broker.session.timeout.ms", "broker.heartbeat.interval.ms")}
# Settings that are the harness's to set; a [broker] table cannot move them.
OWN_KEYS = ("broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs", "log.dir",
            "zookeeper.connect", "process.roles", "controller.quorum.voters", "controller.listener.names",
            "listener.security.protocol.map", "inter.broker.listener.name", "metadata.log.dir")

LOG4J = """\
# Written by the harness: everything to ${kafka.logs.dir}/server.log.
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
"""
LOG4J2 = """\
# Written by the harness: everything to ${sys:kafka.logs.dir}/server.log.
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or kafka_dist.DEFAULT_CACHE)


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    return int(parts[0]), int(parts[1])


def has_zookeeper_mode(version: str) -> bool:
    """Whether release `version` still has ZooKeeper mode (removed in 4.0);
    True for what is no release number, which `check_version` refuses."""
    m = re.fullmatch(r"(\d+)\.\d+\.\d+", version) if isinstance(version, str) else None
    return m is None or int(m[1]) < 4


def check_version(version: str, mode: str) -> str:
    """The version if this system can run it in `mode`, else a one-line UserError."""
    if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise UserError(f"--kafka-version {version!r}: unknown Kafka version; expected a release "
                        f"number such as {DEFAULT_VERSION}")
    mm = _major_minor(version)
    if mm < OLDEST or mm[0] > NEWEST_MAJOR:
        raise UserError(f"--kafka-version {version}: unknown Kafka version; the harness runs "
                        f"{OLDEST[0]}.{OLDEST[1]}.x to {NEWEST_MAJOR}.x (default {DEFAULT_VERSION})")
    if mode == "zk" and not has_zookeeper_mode(version):
        raise UserError(f"--kafka-version {version} has no ZooKeeper mode (removed in 4.0): "
                        "use --kafka-mode kraft, or a 3.x version such as 3.9.2")
    return version


@dataclass(frozen=True)
class KafkaOptions:
    """How to run Kafka: which jars, which mode, and JVM sizing."""

    version: str = ""  # "" = the dist's version, else DEFAULT_VERSION
    mode: str = "zk"
    dist: str | None = None  # --kafka-dist: a folder or tarball; None = the jar cache
    port: int = PORT
    controller_port: int = CONTROLLER_PORT
    heap: str = "512m"
    java: str = "java"
    start_timeout: float = 120.0
    controllers: str = "combined"  # KRaft: infra/kraft_controllers.py LAYOUTS
    features: tuple[str, ...] = ()  # KRaft: NAME=LEVEL, given to the storage format


@dataclass(frozen=True)
class Distribution:
    """Where the jars are on this machine, and what to ship to remote nodes."""

    version: str
    home: Path | None  # a folder with libs/ (None: a tarball only usable by upload)
    source: kafka_dist.KafkaDist | None  # the user's --kafka-dist, if any


def resolve(options: KafkaOptions, in_place: bool = True, unpack: bool = True) -> Distribution:
    """Find the jars without downloading anything: the user's --kafka-dist, or
    the cache. Unknown versions and a missing cache are UserErrors. `in_place`:
    the nodes share this machine's files (Cluster.shares_filesystem), so a
    tarball is unpacked here once. With `unpack` false nothing is written (a
    check before a run starts)."""
    if options.mode not in MODES:
        raise UserError(f"--kafka-mode {options.mode!r}: expected one of {', '.join(MODES)}")
    if options.mode != "kraft" and (options.controllers != "combined" or options.features):
        flag = "--kafka-controllers" if options.controllers != "combined" else "--kafka-features"
        raise UserError(f"{flag} is for KRaft mode only: add --kafka-mode kraft")
    if options.dist:
        dist = kafka_dist.resolve_kafka_dist(options.dist)
        if options.version and options.version != dist.version:
            raise UserError(f"--kafka-dist {options.dist} holds Kafka {dist.version}, "
                            f"not --kafka-version {options.version}")
        check_version(dist.version, options.mode)
        if dist.kind == "folder":
            return Distribution(dist.version, dist.path, dist)
        if in_place and unpack:  # nodes that share our files run from a folder: unpack the tarball once
            return Distribution(dist.version, _unpack_once(dist), dist)
        return Distribution(dist.version, None, dist)
    version = check_version(options.version or DEFAULT_VERSION, options.mode)
    cache = cache_dir()
    if not kafka_dist.is_cached(version, cache):
        raise UserError(f"Kafka {version} jars are not in the cache {cache / version} (run `make setup`, or "
                        f"`python -m infra.kafka_dist --version {version}` to resolve them from Maven Central)")
    return Distribution(version, kafka_dist.kafka_home(version, cache), None)


def check_spec(options: KafkaOptions, broker_settings: dict) -> None:
    """Everything about a Kafka run that can be checked before anything starts."""
    resolve(options, unpack=False)
    _refuse_own_keys(broker_settings)


def _refuse_own_keys(settings: dict) -> None:
    taken = sorted(set(settings) & set(OWN_KEYS))
    if taken:
        raise UserError(f"[broker] {taken[0]}: the harness sets this one itself, per node")


def _unpack_once(dist: kafka_dist.KafkaDist) -> Path:
    """A tarball --kafka-dist unpacked into the cache, keyed by its size and mtime."""
    st = dist.path.stat()
    key = hashlib.sha1(f"{dist.path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_dir() / "dists" / f"{dist.version}-{key}"
    home = target / dist.top if dist.top else target
    if (target / ".complete").is_file():
        return home
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(dist.path) as tar:
            tar.extractall(staging, filter="data")
        (staging / ".complete").write_text(str(dist.path) + "\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except (tarfile.TarError, OSError) as e:
        raise UserError(f"--kafka-dist {dist.path}: cannot unpack: {e}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return home


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def uses_log4j2(version: str) -> bool:
    """Whether Kafka `version` logs through Log4j 2 (from 4.0) rather than reload4j."""
    return _major_minor(version)[0] >= 4


def log_config_text(version: str, file_name: str) -> bytes:
    """log4j's (or, from Kafka 4, log4j2's) configuration writing everything to `file_name`."""
    return (LOG4J2 if uses_log4j2(version) else LOG4J).replace("server.log", file_name).encode()


def java_argv(java: str, home: str, main: list[str], logs_dir: str, log_config: str, log4j2: bool,
              heap: str = "512m", tool: bool = False, archive: Path | None = None,
              vm_options: tuple[str, ...] = ()) -> list[str]:
    """A Kafka JVM's command line: the broker's (`kafka.Kafka`), with its heap
    and G1; or a short-lived `tool`'s (StorageTool, DumpLogSegments): 256 MB,
    C1 only and the serial collector, which cut such a JVM's CPU, and a Kafka
    run dumps every node's log at once (docs/decisions.md, "Kafka's
    short-lived tools: C1 only and the serial collector"). `archive`: the
    class-data archive to map (`class_archive`); `vm_options`: more of the
    JVM's own (infra/kafka_archive.py's dump). The class path is the one the
    archive was made with: the JVM refuses an archive of another."""
    flag = f"-Dlog4j2.configurationFile={log_config}" if log4j2 else f"-Dlog4j.configuration=file:{log_config}"
    vm = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"] if tool else \
         [f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
    shared = [f"-XX:SharedArchiveFile={archive}"] if archive is not None else []
    return [java, *vm, "-Xms64m", *shared, *vm_options,
            "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            flag, f"-Dkafka.logs.dir={logs_dir}", "-cp", f"{home}/libs/*:{home}/tools/*", *main]


def class_archive(dist: Distribution, local: bool, java: str) -> Path | None:
    """The class-data archive every Kafka JVM of a run maps (the broker's, a
    controller's, StorageTool's, DumpLogSegments'): the one `make setup` made
    for the version's jars in the cache and this machine's JDK
    (infra/kafka_archive.py), where the nodes run exactly those (`local`:
    they share this machine's files). None elsewhere (a --kafka-dist, jars
    shipped to other machines) and when there is none: the JVMs start without."""
    if not local or dist.source is not None or dist.home is None:
        return None
    path = kafka_dist.class_archive(dist.home, java)
    return path if path.is_file() else None


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: 31-fold over the UTF-16 code units, in a signed 32-bit int."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition_of(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition holding `group`'s commits, as Kafka
    places it: `Utils.abs(group.hashCode()) % partitions`, where Utils.abs
    takes Integer.MIN_VALUE to 0."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _properties_text(props: dict[str, str]) -> bytes:
    """A .properties file's bytes: one `key=value` line each, sorted."""
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items())).encode()


def _value(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _tail_line(text: str) -> str:
    """The telling lines of a log's end: the last ERROR/FATAL entry and the
    exception under it; else the last two lines that are not stack frames."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("at ", "..."))]
    for i in range(len(lines) - 1, -1, -1):
        if LOG_ERROR_RE.search(lines[i]):
            picked = [lines[i]]
            if i + 1 < len(lines) and not lines[i + 1].startswith("["):
                picked.append(lines[i + 1])  # the exception the entry logged
            return " | ".join(picked)
    return " | ".join(lines[-2:]) if lines else "no output"


_DUMPING = re.compile(r"^Dumping (.*)$")
_BATCH_EPOCH = re.compile(r"^baseOffset: .* partitionLeaderEpoch: (-?\d+) ")
_RECORD = re.compile(r"^\| offset: (\d+) .*?(?: key: (.*?))?(?: payload: (.*))?$")


def _number_or_text(x: str | None):
    if x is None:
        return None
    try:
        return int(x)
    except ValueError:
        return x


def parse_dump_log(lines) -> Iterator[list]:
    """kafka-dump-log's `--print-data-log` output (kafka.tools.DumpLogSegments) as disk-dump rows,
    [partition, offset, leader_epoch, key, value] (infra.system), the partition from each
    segment's folder name (`<topic>-<partition>`)."""
    partition = epoch = None
    for line in lines:
        line = line.rstrip("\n")
        m = _DUMPING.match(line)
        if m:
            folder = m.group(1).rstrip("/").rsplit("/", 2)[-2]
            p = folder.rpartition("-")[2]
            partition, epoch = (int(p) if p.isdigit() else None), None
            continue
        m = _BATCH_EPOCH.match(line)
        if m:
            epoch = int(m.group(1))
            continue
        m = _RECORD.match(line)
        if m and partition is not None:
            yield [partition, int(m.group(1)), epoch, _number_or_text(m.group(2)), _number_or_text(m.group(3))]


class KafkaSystem(BrokerBase):
    """Apache Kafka on every node of a cluster (see the module docstring)."""

    name = "kafka"
    title = "Kafka"
    daemon = DAEMON
    data_subdir = "kafka"
    config_name = "kafka.properties"
    chroot = CHROOT
    truncation_logs = ("server.log",)

    def __init__(self, zookeeper_connect: str, settings: dict | None = None,
                 options: KafkaOptions | None = None):
        super().__init__()
        self.zookeeper_connect = zookeeper_connect
        self.settings = {k: _value(v) for k, v in (settings or {}).items()}
        self.options = options or KafkaOptions()
        _refuse_own_keys(self.settings)
        self._homes: dict[str, str] = {}  # node -> Kafka home (libs/) on that node
        self.cluster_id = new_cluster_id()
        self.dist: Distribution | None = None
        self._class_archive: Path | None = None  # the JVMs' class-data archive, where they use one
        # The voters' own daemons in the separate KRaft layout, else None.
        self.controllers: kraft_controllers.ControllerDaemons | None = None

    # -- where things are

    @property
    def mode(self) -> str:
        return self.options.mode

    @property
    def port(self) -> int:
        return self.options.port

    @staticmethod
    def log_config_file(node: Node) -> str:
        return f"{node.run_dir}/kafka-log4j.properties"

    def log_files(self, node: Node) -> list[str]:
        own = [f"{node.log_dir}/server.log", f"{node.log_dir}/kafka.out", self.config_file(node)]
        return own + (kraft_controllers.log_files(node) if self._separate() and node in self.voters() else [])

    def version(self) -> str:
        version = self.dist.version if self.dist else (self.options.version or DEFAULT_VERSION)
        return f"kafka {version} ({self.mode})"

    def voters(self) -> list[Node]:
        """KRaft controller voters: the first three nodes (one on clusters of one or two)."""
        return self._nodes[: 3 if len(self._nodes) >= 3 else 1]

    def controller_quorum(self) -> list[str]:
        """The KRaft voters' node names ([] in ZooKeeper mode): infra.system.ControllerQuorum."""
        return [n.name for n in self.voters()] if self.mode == "kraft" else []

    def _separate(self) -> bool:
        return self.mode == "kraft" and self.options.controllers == "separate"

    def controller_processes(self) -> kraft_controllers.ControllerDaemons | None:
        """The voters' own processes, which `kraft-controllers` faults hit (the
        separate layout); None where they are the brokers' (infra.system.ControllerProcesses)."""
        return self.controllers

    def _metadata_dir(self, node: Node) -> str:
        """Where a voter keeps `__cluster_metadata-0` (its log and `quorum-state`)."""
        return kraft_controllers.metadata_dir(node) if self._separate() else self.data_dir(node)

    def _voter_id(self, node: Node) -> int:
        return kraft_controllers.controller_id(self.broker_id(node)) if self._separate() else self.broker_id(node)

    def controller_port(self) -> int:
        """The port of the KRaft voters' CONTROLLER listener."""
        return self.options.controller_port

    # -- configuration

    def _log4j2(self) -> bool:
        return uses_log4j2(self.dist.version)

    def properties(self, node: Node) -> dict[str, str]:
        """The node's server.properties, as a dict (written sorted)."""
        o = self.options
        n = len(self._nodes)
        other_mode = MODE_ONLY["kraft" if self.mode == "zk" else "zk"]
        props = {k: v for k, v in BASE_SETTINGS.items() if k not in other_mode}
        props.update({
            "offsets.topic.replication.factor": str(min(3, n)),
            "transaction.state.log.replication.factor": str(min(3, n)),
            "transaction.state.log.min.isr": str(min(2, n)),
        })
        props.update(self.settings)
        listener = f"PLAINTEXT://{node.address}:{o.port}"
        props.update({"log.dirs": self.data_dir(node), "advertised.listeners": listener})
        if self.mode == "zk":
            props.update({"broker.id": str(self.broker_id(node)), "listeners": listener,
                          "zookeeper.connect": self.zookeeper_connect + CHROOT})
        else:
            voter = node in self.voters() and not self._separate()
            props.update({
                "node.id": str(self.broker_id(node)),
                "process.roles": "broker,controller" if voter else "broker",
                "controller.quorum.voters": self._quorum_voters(),
                "listeners": listener + (f",CONTROLLER://{node.address}:{o.controller_port}" if voter else ""),
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
            })
        return props

    def _quorum_voters(self) -> str:
        return ",".join(f"{self._voter_id(v)}@{v.address}:{self.options.controller_port}" for v in self.voters())

    def controller_properties(self, node: Node) -> dict[str, str]:
        """A separate controller's properties: the broker's settings (the
        controller reads min.insync.replicas and the session timeouts too),
        a controller's roles, id, listener and metadata dir."""
        props = {k: v for k, v in self.properties(node).items()
                 if k not in ("advertised.listeners", "inter.broker.listener.name")}
        props.update({
            "node.id": str(self._voter_id(node)),
            "process.roles": "controller",
            "listeners": f"CONTROLLER://{node.address}:{self.options.controller_port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            "log.dirs": kraft_controllers.metadata_dir(node),
        })
        return props

    def _java(self, node: Node, main: list[str], tool: bool = False, log_config: str | None = None) -> list[str]:
        """`java_argv` of the node's Kafka home, its logs and the run's class-data archive."""
        return java_argv(self.options.java, self._homes[node.name], main, node.log_dir,
                         log_config or self.log_config_file(node), self._log4j2(), self.options.heap, tool,
                         self._class_archive)

    def _dump_segments(self, node: Node, args: list[str]) -> str:
        """The shell command running Kafka's DumpLogSegments with `args` on the
        node, its output on stdout: the class is in the broker's jar up to 4.1
        and in kafka-tools (`tools/`) later, so the second is tried where the
        first is not found."""
        q = shlex.quote
        tries = [f"{DUMP_NICE} " + " ".join(q(a) for a in self._java(node, [main, *args], tool=True)) + " 2>/dev/null"
                 for main in DUMP_CLASSES]
        return "{ " + " || ".join(tries) + "; }"

    # -- lifecycle

    def setup(self, cluster: Cluster) -> None:
        self.place(cluster)
        self.dist = resolve(self.options, self._local)
        self._class_archive = class_archive(self.dist, self._local, self.options.java)
        if self.mode == "zk":
            zk_state.fresh_chroot(self.zookeeper_connect, CHROOT)
        if self._separate():
            self.controllers = kraft_controllers.ControllerDaemons(self.voters(), self._controller_argv)
        parallel(self._prepare, self._nodes)
        if self.controllers is not None:
            self.controllers.start_all()
        parallel(self.start, self._nodes)
        self.wait_serving(self._nodes, self.options.start_timeout)

    def _controller_argv(self, node: Node) -> list[str]:
        return self._java(node, ["kafka.Kafka", kraft_controllers.config_file(node)],
                          log_config=kraft_controllers.log_config_file(node))

    def _prepare(self, node: Node) -> None:
        r = node.remote
        if r.pid_of(DAEMON) is not None:  # a broker of an earlier setup on this node
            r.stop_daemon(DAEMON)
        check = r.run(f"command -v {shlex.quote(self.options.java)}", check=False)
        if check.exit_status != 0:
            raise UserError(f"{node.name}: `{self.options.java}` not found; install openjdk-17-jre-headless")
        # Empty the data dir but keep it: it may be a mount point (the disk-fault filesystem).
        data = shlex.quote(self.data_dir(node))
        r.run(f"mkdir -p {data} {shlex.quote(node.log_dir)} {shlex.quote(node.run_dir)} && "
              f"find {data} -mindepth 1 -delete && rm -f {shlex.quote(node.log_dir)}/server.log "
              f"{shlex.quote(node.log_dir)}/kafka.out")
        self._homes[node.name] = str(self.dist.home) if self._local and self.dist.home else self._ship(node)
        r.write_file(self.config_file(node), _properties_text(self.properties(node)))
        r.write_file(self.log_config_file(node), self._log_config("server.log"))
        if self.mode == "kraft":
            self._format(node, self.config_file(node))
            # What the format wrote is durable, as the OS's writeback would have
            # made it long before a run: the disk-fault filesystem, when mounted
            # here, would otherwise empty it at a power loss (it keeps only
            # fsynced bytes), and the broker would not start again.
            r.run(f"find {data} -type f -exec sync -- {{}} +")
        if self.controllers is not None and node in self.controllers.nodes:
            self.controllers.prepare(node)
            r.write_file(kraft_controllers.config_file(node), _properties_text(self.controller_properties(node)))
            r.write_file(kraft_controllers.log_config_file(node), self._log_config(kraft_controllers.LOG_NAME))
            self._format(node, kraft_controllers.config_file(node))

    def _log_config(self, file_name: str) -> bytes:
        return log_config_text(self.dist.version, file_name)

    def _format(self, node: Node, config: str) -> None:
        """Formats the storage `config` names for this run's KRaft cluster id, with the run's features."""
        features = [a for f in self.options.features for a in ("--feature", f)]
        argv = self._java(node, ["kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                                 "-c", config, "--ignore-formatted", *features], tool=True)
        res = node.remote.run(" ".join(shlex.quote(a) for a in argv) + " 2>&1", check=False, timeout=180)
        if res.exit_status != 0:
            raise UserError(f"Kafka on {node.name}: formatting KRaft storage failed: {_tail_line(res.stdout)}")

    def _ship(self, node: Node) -> str:
        """Uploads the jars to a remote node once; the Kafka home there."""
        d = self.dist
        source = d.source or kafka_dist.KafkaDist(d.home, "folder", d.version)
        tarball = kafka_dist.dist_tarball(source, cache_dir() / "upload")
        st = tarball.stat()
        stamp = f"{tarball.name} {st.st_size} {int(st.st_mtime)}"
        home = f"{node.run_dir}/kafka-{d.version}"
        q = shlex.quote
        have = node.remote.run(f"cat {q(home)}/.shipped 2>/dev/null", check=False).stdout.strip()
        if have == stamp:
            return home
        top = source.top if source.kind == "tarball" else f"kafka-{d.version}"
        strip = len([p for p in top.split("/") if p]) if top else 0
        upload = f"{node.run_dir}/kafka-upload.tgz"
        log.info("%s: uploading Kafka %s (%d MB)", node.name, d.version, st.st_size >> 20)
        node.remote.put(str(tarball), upload)
        node.remote.run(f"rm -rf {q(home)} && mkdir -p {q(home)} && tar -xzf {q(upload)} -C {q(home)} "
                        f"--strip-components={strip} && rm -f {q(upload)} && printf '%s\\n' {q(stamp)} > "
                        f"{q(home)}/.shipped", timeout=300)
        return home

    def dump_log(self, node: Node, topic: str, dest: str) -> int:
        """The node's records of `topic` (infra.system.LogDump). Where the node
        shares this machine's files (the local provider): read by the own
        broker's `python -m broker.dump`, Kafka's on-disk format being its
        own, a Python process instead of a JVM beside the run's check
        (docs/decisions.md, "The history converted while written; Kafka's
        dumps without a JVM"); the same rows as kafka-dump-log
        (tests/kafka/test_dump_log.py). Elsewhere, and where that dump
        refuses a batch (compressed with a codec other than gzip), with
        kafka-dump-log (`_dump_with_kafka_tool`)."""
        if self._local:
            try:
                return dump_data_dir(node, self.data_dir(node), topic, dest, sys.executable, str(REPO),
                                     "--refuse-compressed")
            except RemoteError as e:
                log.info("%s: the own dump did not read the log (%s); kafka-dump-log instead", node.name, e)
        return self._dump_with_kafka_tool(node, topic, dest)

    def _dump_with_kafka_tool(self, node: Node, topic: str, dest: str) -> int:
        """kafka-dump-log (DumpLogSegments `--print-data-log`) from
        the node's jars over every segment, gzip'd on the node, parsed here
        into `dest`."""
        q = shlex.quote
        listing = node.remote.run(f"ls -1 {q(self.data_dir(node))}/{q(topic)}-*/*.log 2>/dev/null", check=False)
        files = [f for f in listing.stdout.split() if f.endswith(".log")]
        with gzip.open(dest, "wt", compresslevel=6) as out:
            if not files:
                return 0
            raw = f"{node.run_dir}/kafka-dump-log.txt"
            dump = self._dump_segments(node, ["--print-data-log", "--files", ",".join(files)])
            node.remote.run(f"{dump} > {q(raw)} && {DUMP_NICE} gzip -1 -f {q(raw)}", timeout=600)
            local = dest + ".raw.gz"
            node.remote.get(raw + ".gz", local)
            try:
                with gzip.open(local, "rt", encoding="utf-8", errors="replace") as text:
                    for row in parse_dump_log(text):
                        out.write(json.dumps(row, separators=(",", ":")) + "\n")
            finally:
                os.unlink(local)
        return count_lines(dest)

    def start(self, node: Node) -> None:
        """Starts the broker on the node unless it runs there already."""
        if node.remote.pid_of(DAEMON) is not None:
            return
        if self.mode == "zk":
            self._wait_registration_gone(node)
        argv = self._java(node, ["kafka.Kafka", self.config_file(node)])
        try:
            node.remote.start_daemon(DAEMON, argv, f"{node.log_dir}/kafka.out", cwd=node.run_dir)
        except RemoteError as e:
            if e.result is None or e.result.exit_status != 18:  # 18: it exited before it was recognisable
                raise
            raise UserError(f"Kafka on {node.name} exited while starting: {e.detail}; "
                            f"{self._file_tail(node, f'{node.log_dir}/server.log')}") from None

    def _wait_registration_gone(self, node: Node) -> None:
        """Kafka will not start while the session of a killed predecessor still owns its id."""
        if not self._nodes:
            return
        try:
            timeout = int(self.properties(node).get("zookeeper.session.timeout.ms", "18000")) / 1000 + 5
        except ValueError:  # Kafka itself will say what is wrong with the value
            timeout = 23.0
        deadline = time.monotonic() + timeout
        me = self.broker_id(node)
        while time.monotonic() < deadline:
            try:
                if me not in zk_state.registered_brokers(self.zookeeper_connect, CHROOT):
                    return
            except UserError:  # ZooKeeper unreachable right now: let Kafka try anyway
                return
            time.sleep(0.2)
        log.warning("%s: broker %d still registered after %.0f s; starting anyway", node.name, me, timeout)

    def teardown(self, cluster: Cluster) -> None:
        if self.controllers is not None:
            self.controllers.stop_on(self.controllers.nodes, "Kafka's controller")
        super().teardown(cluster)

    # -- readiness

    def wait_serving(self, nodes: list[Node], timeout: float) -> None:
        """Until every broker serves (registered, or listed in metadata in KRaft
        mode) and accepts connections; a UserError quoting the log of one that died."""
        want = {self.broker_id(n) for n in nodes}
        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while time.monotonic() < deadline:
            dead = [n for n in nodes if self.process_state(n) is None]
            if dead:
                raise UserError(self.startup_failure(dead[0]))
            if self.controllers is not None:
                gone = [n for n in self.controllers.nodes if self.controllers.process_state(n) is None]
                if gone:
                    raise UserError(f"Kafka's controller on {gone[0].name} exited while starting; "
                                    f"{self._file_tail(gone[0], f'{gone[0].log_dir}/{kraft_controllers.LOG_NAME}')}; "
                                    f"{self._file_tail(gone[0], f'{gone[0].log_dir}/controller.out')}")
            seen = self._serving_ids()
            if want <= seen and all(self._accepts(n) for n in nodes):
                return
            time.sleep(0.5)
        missing = sorted(want - seen)
        node = next((n for n in nodes if self.broker_id(n) in missing), nodes[0])
        raise UserError(f"Kafka did not serve within {timeout:.0f} s (brokers not up: {missing or 'none'}); "
                        f"last lines of {node.name}'s log: {self._log_tail(node)}")

    def _serving_ids(self) -> set[int]:
        if self.mode == "zk":
            return zk_state.registered_brokers(self.zookeeper_connect, CHROOT)
        meta = self.metadata(timeout=3.0)
        return set(meta.brokers) if meta is not None else set()

    def _accepts(self, node: Node) -> bool:
        try:
            with socket.create_connection((node.address, self.options.port), timeout=1.0):
                return True
        except OSError:
            return False

    def _log_tail(self, node: Node) -> str:
        files = f"{node.log_dir}/kafka.out {node.log_dir}/server.log"
        text = node.remote.run(f"tail -q -n 40 {files} 2>/dev/null", check=False).stdout
        return one_line(_tail_line(text), 500)

    def _file_tail(self, node: Node, path: str) -> str:
        """`PATH: its telling last lines`, or that it is missing or empty."""
        q = shlex.quote(path)
        res = node.remote.run(f"[ -e {q} ] || {{ echo missing; exit 3; }}; tail -n 40 {q}", check=False)
        if res.exit_status == 3:
            return f"{path}: missing"
        text = res.stdout if res.exit_status == 0 else ""
        return f"{path}: " + (one_line(_tail_line(text), 500) if text.strip() else "empty")

    def startup_failure(self, node: Node) -> str:
        """Why the node's broker is not running, from everything the node shows:
        the process (gone, a zombie, another process by now), Kafka's own log,
        and kafka.out, where the JVM, java launcher and setsid write."""
        try:
            process = node.remote.describe_daemon(DAEMON)
        except RemoteError as e:
            process = f"cannot tell: {e}"
        return (f"Kafka on {node.name} exited while starting ({process}; its exit status is not known: "
                f"it was no longer the harness's child); "
                f"{self._file_tail(node, f'{node.log_dir}/server.log')}; "
                f"{self._file_tail(node, f'{node.log_dir}/kafka.out')}")

    # -- state, for targeted faults

    def _partition_metadata(self, topic: str, timeout: float = 5.0) -> dict:
        """partition -> its metadata from a metadata request ({} when no broker answers)."""
        meta = self.metadata(topic, timeout=timeout)
        info = meta.topics.get(topic) if meta is not None else None
        return info.partitions if info is not None else {}

    def _answered_partitions(self, topic: str) -> dict:
        """`_partition_metadata` of a look-up a fault waits on (2 s); a RemoteError when no broker answers."""
        partitions = self._partition_metadata(topic, timeout=2.0)
        if not partitions:
            raise RemoteError("control node", "metadata", f"no broker answered a metadata request for {topic}")
        return partitions

    def leaders(self, topic: str) -> dict[int, str]:
        """partition -> the node leading it (partitions without a leader left out)."""
        if self.mode == "zk":
            by_id = zk_state.leaders(self.zookeeper_connect, CHROOT, topic)
        else:
            by_id = {p: pm.leader for p, pm in self._partition_metadata(topic).items()}
        return self.named_leaders(by_id)

    def replicas(self, topic: str) -> dict[int, list[str]]:
        """partition -> the nodes holding its replicas."""
        if self.mode == "zk":
            by_id = zk_state.replicas(self.zookeeper_connect, CHROOT, topic)
        else:
            by_id = {p: list(pm.replicas) for p, pm in self._partition_metadata(topic).items()}
        return self.named_replicas(by_id)

    def controller(self) -> str | None:
        """The node acting as controller: from ZooKeeper, or the KRaft quorum leader."""
        if self.mode == "zk":
            return self.node_of(zk_state.controller(self.zookeeper_connect, CHROOT))

        def quorum_state(node: Node) -> tuple[int, int]:
            path = f"{self._metadata_dir(node)}/__cluster_metadata-0/quorum-state"
            try:
                data = json.loads(node.remote.run(f"cat {shlex.quote(path)}", check=False).stdout or "{}")
                return int(data.get("leaderEpoch", -1)), int(data.get("leaderId", -1))
            except (ValueError, RemoteError):
                return -1, -1

        epoch, leader = max(parallel(quorum_state, self.voters()), default=(-1, -1))
        return self.node_of(kraft_controllers.broker_of(leader)) if epoch >= 0 else None

    def controller_records(self, topic: str) -> list[dict]:
        """The KRaft controller's decisions about `topic`, the brokers and the
        finalized features (infra.system.ControllerRecords; infra/kraft_metadata.py), read from
        the first voter whose metadata log the dump tool reads, node names for
        broker ids, `wall` seconds for the records' CreateTime. [] in
        ZooKeeper mode or where no voter's log can be read."""
        if self.mode != "kraft":
            return []
        q = shlex.quote
        for node in self.voters():
            listing = node.remote.run(f"ls -1 {q(self._metadata_dir(node))}/__cluster_metadata-0/*.log 2>/dev/null",
                                      check=False)
            files = [f for f in listing.stdout.split() if f.endswith(".log")]
            if not files:
                continue
            dump = self._dump_segments(node, ["--cluster-metadata-decoder", "--files", ",".join(files)])
            res = node.remote.run(f"{dump} | grep -E {q(kraft_metadata.GREP)}", check=False, timeout=300)
            found = kraft_metadata.records(res.stdout.splitlines(), topic)
            if found:
                return [self._named_record(r) for r in found]
        return []

    def _named_record(self, r: dict) -> dict:
        out = {"wall": r["wall_ms"] / 1000, "kind": r["kind"]}
        if r["kind"] == "broker":
            return {**out, "node": self.node_of(r["broker"]), "event": r["event"], "epoch": r["epoch"]}
        if r["kind"] == "feature":
            return {**out, "name": r["name"], "level": r["level"]}
        names = {k: [self.node_of(b) for b in r[k]] for k in ("isr", "elr", "last_known_elr")}
        return {**out, "partition": r["partition"], "leader": self.node_of(r["leader"]) if r["leader"] >= 0 else None,
                **names}

    def partition_states(self, topic: str) -> dict[int, tuple[str | None, int | None, list[str]]]:
        """partition -> (leader, epoch, ISR): from ZooKeeper in ZooKeeper mode; in
        KRaft mode from a metadata request, which does not carry the epoch (None)."""
        if self.mode == "zk":
            return self.named_states(self.zk_reader().partition_states(topic))
        return self.named_states({p: (pm.leader, None, list(pm.isrs))
                                  for p, pm in self._answered_partitions(topic).items()})

    def group_offsets_state(self, group: str) -> tuple[int, str | None, list[str], list[str]]:
        """(partition, leader, replicas, ISR) of the `__consumer_offsets`
        partition holding `group`'s commits, from a metadata request (both
        modes): its leader is the group's coordinator, its followers are
        what the coordinator's commits wait for (infra.system.GroupOffsets)."""
        partitions = self._answered_partitions(OFFSETS_TOPIC)
        partition = offsets_partition_of(group, len(partitions))
        pm = partitions[partition]
        names = self.named_replicas({0: list(pm.replicas), 1: list(pm.isrs)})
        return partition, self.node_of(pm.leader), names[0], names[1]

    @staticmethod
    def parse_truncations(text: str) -> list[dict]:
        """Kafka's truncations in server.log (see FETCHER_TRUNCATING_RE): the fetcher's
        line names the offset, the leader and why; the follower line before it the
        leader epoch and the log end; the log's own line after it whether anything
        was cut (truncations that cut nothing are left out)."""
        following: dict[tuple[str, int], tuple[int, int | None]] = {}  # tp -> (epoch, log end not yet used)
        pending: dict[tuple[str, int], dict] = {}
        out = []

        def when(m) -> datetime:
            return datetime.strptime(m["logged"], "%Y-%m-%d %H:%M:%S,%f")

        for line in text.splitlines():
            if "Truncating" not in line and "Follower" not in line:
                continue
            m = FOLLOWER_RE.match(line)
            if m:
                following[(m["topic"], int(m["partition"]))] = (int(m["epoch"]), int(m["log_end"]))
                continue
            m = FETCHER_TRUNCATING_RE.match(line)
            if m:
                tp = (m["topic"], int(m["partition"]))
                epoch, log_end = following.get(tp, (None, None))
                following[tp] = (epoch, None)  # the log end is the one before the first cut only
                why = m["why"]
                reason = ("leader epoch" if why.startswith("leader epoch") else
                          "high watermark" if "high watermark" in why else why.split(" (")[0])
                leader = int(m["leader"])
                pending[tp] = {"logged": when(m), "topic": tp[0], "partition": tp[1], "offset": int(m["offset"]),
                               "log_end": log_end, "epoch": epoch if epoch is not None and epoch >= 0 else None,
                               "leader_id": leader if leader >= 0 else None, "reason": reason}
                continue
            m = LOG_TRUNCATING_RE.match(line)
            if m:
                tp = (m["topic"], int(m["partition"]))
                record = pending.pop(tp, None)
                if record is not None and not m["no_effect"] and record["offset"] == int(m["offset"]):
                    out.append(record)
        # A fetcher's line whose log line never came (another version's wording): kept when it cut something.
        out += [r for r in pending.values() if r["log_end"] is not None and r["offset"] < r["log_end"]]
        return out


def _options(values: dict) -> KafkaOptions:
    return KafkaOptions(version=values["kafka_version"], mode=values["kafka_mode"], dist=values["kafka_dist"],
                        controllers=values.get("kafka_controllers") or "combined",
                        features=_features(values.get("kafka_features")))


FEATURE_RE = re.compile(r"[a-z][a-z0-9._-]*=\d+")


def _features(text) -> tuple[str, ...]:
    """`NAME=LEVEL,NAME=LEVEL` as StorageTool's --feature takes them; a UserError otherwise."""
    if not text:
        return ()
    items = tuple(f.strip() for f in str(text).split(",") if f.strip())
    bad = [f for f in items if not FEATURE_RE.fullmatch(f)]
    if bad:
        raise UserError(f"--kafka-features {bad[0]!r}: expected NAME=LEVEL, e.g. eligible.leader.replicas.version=0")
    return items


SYSTEM = SystemKind(
    name="kafka",
    summary="Apache Kafka from Maven Central's jars, in ZooKeeper or KRaft mode (the baseline)",
    make=lambda zookeeper_connect, settings, options: KafkaSystem(zookeeper_connect, settings, _options(options)),
    check=lambda options, broker_settings: check_spec(_options(options), broker_settings),
    # KRaft keeps its metadata in its own quorum: nothing of a run's needs ZooKeeper then.
    uses_zookeeper=lambda options: options.get("kafka_mode", "zk") == "zk",
    options=(
        SystemOption("kafka_version", "", f"the Kafka release (default {DEFAULT_VERSION}, from the jar cache)",
                     metavar="X.Y.Z"),
        SystemOption("kafka_mode", "zk", "zk (ZooKeeper, default) or kraft", choices=MODES),
        SystemOption("kafka_dist", None, "a Kafka folder or .tgz to run instead of the jar cache", metavar="PATH"),
        SystemOption("kafka_controllers", "combined", "KRaft: the voters' controllers in the brokers' processes "
                     "(combined, default) or in processes of their own beside them (separate)",
                     choices=kraft_controllers.LAYOUTS),
        SystemOption("kafka_features", "", "KRaft: features the storage is formatted with, NAME=LEVEL[,...] "
                     "(e.g. eligible.leader.replicas.version=0)", metavar="NAME=LEVEL"),
    ),
)
