"""The system seams: software the harness installs and runs on a cluster's nodes.

Small protocols in the spirit of Jepsen's db.clj; a system declares the ones
it fills, and callers ask with `isinstance(system, Proto)`, never getattr:

    System        name; setup(cluster), return when it serves; teardown(cluster),
                  stop it everywhere (and remove its data)
    Processes     start(node) after a kill; kill(node), SIGKILL, returns once gone;
                  process_state(node) -> "R", "S", "T", ... or None when not running
    Pausable      pause(node) / resume(node): SIGSTOP / SIGCONT
    Primaries     leaders(topic) -> {partition: node}; replicas(topic) ->
                  {partition: [node]}; controller() -> node or None
    ControllerQuorum  controller_quorum() -> the nodes of its KRaft controller
                  quorum ([] when it runs none, e.g. Kafka in ZooKeeper mode);
                  controller_port() -> the TCP port its controllers listen on
    ControllerRecords  controller_records(topic) -> the controller's own record of
                  its decisions about the topic's partitions (leader, ISR, eligible
                  leader replicas) and the brokers (registered, fenced), in order,
                  with `wall` seconds (Kafka's KRaft metadata log; states.jsonl)
    GroupOffsets  group_offsets_state(group) -> (partition, leader, replicas, ISR) of
                  where the group's commits are replicated (Kafka's `__consumer_offsets`
                  partition for the group; its leader is the coordinator)
    ControllerProcesses  controller_processes() -> the quorum's own processes
                  (start, kill, pause, resume, process_state by node) where they
                  are not the brokers' (Kafka's separate KRaft layout), else None
    PartitionStates  partition_states(topic) -> {partition: (leader, epoch, isr)}
                  from the system's own metadata; truncations(node, logs) -> the
                  truncations a node's collected logs record (the cluster-state
                  observer, workloads/observer.py, states.jsonl)
    DataDir       data_dir(node) -> the folder its data lives in (disk faults mount there)
    LogSource     nodes(cluster) -> the nodes it runs on; log_files(node) -> files
                  worth collecting there (a run's faultfs mounts are one too)
    BrokerSystem  all of the above, plus bootstrap() and version(): what
                  `harness run` tests (infra.own_broker, infra.kafka)
    LogDump       dump_log(node, topic, dest): the records on the node's disk,
                  read with the system's own tools, written to a local file
                  (the format below); `collect_disk` calls it on every node

A disk dump (`disk/<node>.jsonl.gz` in a run folder) is gzip'd JSON
lines, one per record on that node's disk, `[partition, offset,
leader_epoch, key, value]`, key and value integers where their bytes are
a decimal number (the workload's), else text or null.

A system that `harness run` can test is also one `SystemKind` record in its
own file (its name, its settings of its own with their flags, a check before
anything starts, and how to build it), listed once in `infra.systems.SYSTEMS`.

Nodes are `infra.nodes.Node`s, node names in answers are `Node.name`.
`collect_logs` downloads each node's declared log files (or, given no
systems, everything in the node's log dir) into `dest_dir/<node>/`, the
layout of a run's store.
"""

from __future__ import annotations

import gzip
import logging
import os
import posixpath
import shlex
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from core.processes import SESSION_NICE_PREFIX
from infra.nodes import Cluster, Node, parallel
from infra.remote import RemoteError

log = logging.getLogger(__name__)


@runtime_checkable
class System(Protocol):
    """Set up and torn down on a cluster (db.clj's DB)."""

    name: str

    def setup(self, cluster: Cluster) -> None: ...

    def teardown(self, cluster: Cluster) -> None: ...


@runtime_checkable
class Processes(Protocol):
    """One process per node that faults kill and restart (db.clj's Process)."""

    def start(self, node: Node) -> None: ...

    def kill(self, node: Node) -> None: ...

    def process_state(self, node: Node) -> str | None: ...


@runtime_checkable
class Pausable(Protocol):
    """Processes that SIGSTOP and SIGCONT (db.clj's Pause)."""

    def pause(self, node: Node) -> None: ...

    def resume(self, node: Node) -> None: ...


@runtime_checkable
class Primaries(Protocol):
    """Who leads what, for faults aimed at leaders, replicas or the controller (db.clj's Primary)."""

    def leaders(self, topic: str) -> dict[int, str]: ...

    def replicas(self, topic: str) -> dict[int, list[str]]: ...

    def controller(self) -> str | None: ...


@runtime_checkable
class GroupCoordinators(Protocol):
    """Which node coordinates a consumer group, for faults aimed at it."""

    def group_coordinator(self, group: str) -> str | None: ...


@runtime_checkable
class GroupOffsets(Protocol):
    """Where a consumer group's commits are replicated, for faults aimed at the
    replicas its coordinator's commits wait for (Kafka's `__consumer_offsets`)."""

    def group_offsets_state(self, group: str) -> tuple[int, str | None, list[str], list[str]]: ...


@runtime_checkable
class TxnCoordinators(Protocol):
    """Which node coordinates a transactional.id's transactions, for faults aimed at it."""

    def txn_coordinator(self, transactional_id: str) -> str | None: ...


@runtime_checkable
class ControllerQuorum(Protocol):
    """The nodes voting in the system's KRaft controller quorum, for faults aimed at them."""

    def controller_quorum(self) -> list[str]: ...

    def controller_port(self) -> int: ...


@runtime_checkable
class ControllerRecords(Protocol):
    """What the controller recorded of its decisions, read after a run."""

    def controller_records(self, topic: str) -> list[dict]: ...


@runtime_checkable
class ControllerProcesses(Protocol):
    """The controller quorum's processes where they run beside the brokers, not in them."""

    def controller_processes(self): ...


@dataclass(frozen=True)
class Truncation:
    """A replica cut its log to `offset` (records at `offset` and after removed),
    as the node's own log says. `logged` is the log line's timestamp, naive, in
    the node's local time; `epoch` and `leader` (a node name) are the
    leadership under which it truncated; `log_end` its log end before, where
    the log says it; `reason` e.g. "leader epoch", "high watermark"."""

    node: str
    logged: datetime
    topic: str
    partition: int
    offset: int
    log_end: int | None
    epoch: int | None
    leader: str | None
    reason: str


@runtime_checkable
class PartitionStates(Protocol):
    """What the system itself records of each partition, and the truncations
    its brokers log: the cluster-state observer's sources (states.jsonl).

    partition_states: partition -> (leader node or None, leader epoch or None
    when the system does not say, ISR nodes), from the system's metadata
    store (ZooKeeper, or KRaft metadata through the admin API); it may raise
    when that store cannot answer. truncations: parsed from the logs collected
    from `node` into the folder `logs` (the run's nodes/<node>/)."""

    def partition_states(self, topic: str) -> dict[int, tuple[str | None, int | None, list[str]]]: ...

    def truncations(self, node: str, logs: Path) -> list[Truncation]: ...


@runtime_checkable
class DataDir(Protocol):
    """Where a node's data lives (disk faults put their filesystem there)."""

    def data_dir(self, node: Node) -> str: ...


@runtime_checkable
class LogSource(Protocol):
    """Files worth collecting after a run (db.clj's LogFiles)."""

    name: str

    def nodes(self, cluster: Cluster) -> list[Node]: ...

    def log_files(self, node: Node) -> list[str]: ...


@runtime_checkable
class BrokerSystem(System, Processes, Pausable, Primaries, DataDir, LogSource, Protocol):
    """A Kafka-compatible system under test: every seam above, and where clients connect."""

    def bootstrap(self) -> str: ...

    def version(self) -> str: ...


@dataclass(frozen=True)
class SystemOption:
    """A setting only one system has: a spec key `name` and a flag `--name`
    (underscores as dashes). Its type is its default's; `repeatable` ones are
    lists of strings (the flag may be given several times)."""

    name: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    repeatable: bool = False
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class SystemKind:
    """A system `harness run --system NAME` can test: the one record the spec,
    the run and the scenario list read.

    `check(options, broker_settings)` raises UserError for anything wrong that
    can be known before a cluster exists; `make(zookeeper_connect,
    broker_settings, options)` returns the BrokerSystem, not yet set up;
    `uses_zookeeper(options)`: whether a run starts a ZooKeeper ensemble for
    it (if not, `make` is given an empty connect string). `options` hold
    exactly this system's `SystemOption`s, by name."""

    name: str
    summary: str
    make: Callable[[str, dict, dict], BrokerSystem]
    check: Callable[[dict, dict], None] = lambda options, broker_settings: None
    options: tuple[SystemOption, ...] = ()
    uses_zookeeper: Callable[[dict], bool] = lambda options: True


@runtime_checkable
class LogDump(Protocol):
    """The records a node's replicas hold on disk (Kafka's kafka-dump-log)."""

    def dump_log(self, node: Node, topic: str, dest: str) -> int: ...


# The disk dumps' commands on the nodes start with this: `harness run` takes
# them beside the check (harness/run/runner.py), whose Spark JVM should have the
# CPU first; the dumps fill what it leaves. Their session niced too: each
# command comes in a session of its own (sshd's, or docker exec's), and a
# niced command alone in its session would otherwise weigh as much as the
# check's (core/processes.py).
DUMP_NICE = SESSION_NICE_PREFIX.format(n=10)


def count_lines(path: str | os.PathLike) -> int:
    """Records in a local disk dump (gzip'd lines)."""
    n = 0
    with gzip.open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            n += chunk.count(b"\n")
    return n


def collect_disk(cluster: Cluster, system, topic: str, dest_dir: str | os.PathLike) -> dict[str, int | None]:
    """Each node's disk dump of `topic` into dest_dir/<node>.jsonl.gz; node -> records dumped.

    Evidence, never a reason to fail a run: a node that cannot be dumped
    (unreachable, no data dir) is logged and maps to None. A system
    without the capability dumps nothing.
    """
    if not isinstance(system, LogDump):
        return {}
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    nodes = system.nodes(cluster) if isinstance(system, LogSource) else list(cluster.nodes)

    def one(node: Node) -> int | None:
        try:
            return system.dump_log(node, topic, str(dest / f"{node.name}.jsonl.gz"))
        except Exception as e:  # noqa: BLE001 - evidence only; the run goes on
            log.warning("%s: no disk dump: %s", node.name, getattr(e, "detail", None) or e)
            return None

    return {n.name: count for n, count in zip(nodes, parallel(one, nodes))}


def collect_logs(cluster: Cluster, dest_dir: str | os.PathLike, systems: list[LogSource] | None = None,
                 extra: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Downloads log files into dest_dir/<node>/.

    With `systems`, the files they declare; without, every file in each
    node's log dir (where systems and the provider's sshd write by
    convention). Missing files are skipped (a system that never started has
    none); an unreachable node is logged and skipped, since logs are collected
    after faults. Returns node -> local paths written.
    """
    dest = Path(dest_dir)
    wanted: dict[str, list[str]] = {n.name: [] for n in cluster.nodes}
    for system in systems or []:
        for node in system.nodes(cluster):
            wanted[node.name] += list(system.log_files(node))
    for name, paths in (extra or {}).items():
        wanted.setdefault(name, []).extend(paths)

    def everything_in_log_dir(node: Node) -> list[str]:
        res = node.remote.run(f"find {shlex.quote(node.log_dir)} -maxdepth 1 -type f", check=False, timeout=30)
        return sorted(line for line in res.stdout.splitlines() if line.strip())

    def fetch(node: Node) -> list[str]:
        written = []
        try:
            paths = wanted.get(node.name, []) if systems is not None else everything_in_log_dir(node)
        except RemoteError as e:
            log.warning("%s: cannot list logs: %s", node.name, e.detail)
            return written
        for remote_path in dict.fromkeys(paths):
            local = dest / node.name / posixpath.basename(remote_path)
            try:
                node.remote.get(remote_path, str(local))
                written.append(str(local))
            except RemoteError as e:
                log.info("%s: not collecting %s: %s", node.name, remote_path, e.detail)
        return written

    return dict(zip(cluster.names, parallel(fetch, cluster.nodes)))
