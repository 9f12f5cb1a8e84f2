"""A small real Apache Kafka cluster on 127.0.0.1, without nodes or providers,
for the workload's tests and its overhead benchmark (bench/workload_overhead.py).

KRaft mode, from the jars `infra.kafka_dist` resolved: node 1 is broker and
controller, nodes 2.. are brokers only (a 2-node cluster starts in a few
seconds and still lets a test kill a replica). Ports come from 39000-39999,
checked free at start; data and logs live under the given folder. Every
process is started in its own session and killed by its pid, never by name.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from core.waiting import free_ports
from infra.kafka_dist import DEFAULT_CACHE, DEFAULT_VERSION, class_archive, ensure_kafka, log4j_jvm_flag

PORT_RANGE = (39000, 39999)


@dataclass
class Node:
    """One Kafka process of the cluster: its ids, ports and folder."""

    node_id: int
    port: int
    controller_port: int | None
    home: Path
    proc: subprocess.Popen | None = None

    @property
    def pid_file(self) -> Path:
        return self.home / "kafka.pid"


def _cluster_id() -> str:
    # Like Kafka's own ids: base64 of a UUID, never starting with '-' (it would read as a flag).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class LoopbackKafka:
    """Start, kill, restart and stop a local KRaft cluster."""

    def __init__(self, root: Path, nodes: int = 2, version: str = DEFAULT_VERSION, heap: str = "512m",
                 broker_settings: dict[str, str] | None = None):
        self.root = Path(root)
        self.version = version
        self.heap = heap
        self.libs = ensure_kafka(version, DEFAULT_CACHE, quiet=True)
        self.home = self.libs.parent
        ports = free_ports(nodes + 1, range(*PORT_RANGE))
        self.controller_port = ports[0]
        self.nodes = [Node(i + 1, ports[i + 1], ports[0] if i == 0 else None, self.root / f"n{i + 1}")
                      for i in range(nodes)]
        self.cluster_id = _cluster_id()
        replication = str(min(2, nodes))
        self.settings = {
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # Fail over in seconds, not Kafka's production defaults.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "replica.lag.time.max.ms": "3000",
            "controlled.shutdown.enable": "false",
            "num.network.threads": "2",
            "num.io.threads": "4",
            **(broker_settings or {}),
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    def _properties(self, node: Node) -> str:
        roles = "broker,controller" if node.controller_port else "broker"
        listeners = f"PLAINTEXT://127.0.0.1:{node.port}"
        if node.controller_port:
            listeners += f",CONTROLLER://127.0.0.1:{node.controller_port}"
        lines = {
            "process.roles": roles,
            "node.id": str(node.node_id),
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.home / "data"),
            **self.settings,
        }
        return "".join(f"{k}={v}\n" for k, v in lines.items())

    def _java(self, node: Node, main: list[str]) -> list[str]:
        """A node's JVM, mapping the version's class-data archive where setup made
        one (infra/kafka_archive.py), on the class path it was made with."""
        archive = class_archive(self.home)
        shared = [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []
        return ["java", f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC", *shared, "-Djava.awt.headless=true",
                log4j_jvm_flag(self.home), f"-Dkafka.logs.dir={node.home / 'logs'}",
                "-cp", f"{self.libs}/*:{self.home}/tools/*", *main]

    def start(self, timeout_s: float = 60.0) -> None:
        for node in self.nodes:
            node.home.mkdir(parents=True, exist_ok=True)
            (node.home / "server.properties").write_text(self._properties(node))
            fmt = subprocess.run(self._java(node, ["kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                                                   "-c", str(node.home / "server.properties")]),
                                 capture_output=True, text=True)
            if fmt.returncode != 0:
                raise RuntimeError(f"formatting node {node.node_id} failed: {fmt.stderr[-500:]}")
        for node in self.nodes:
            self.start_node(node.node_id, wait=False)
        for node in self.nodes:
            self.wait_ready(node.node_id, timeout_s)

    def start_node(self, node_id: int, wait: bool = True, timeout_s: float = 60.0) -> None:
        node = self.node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            return
        out = open(node.home / "out.log", "ab")
        node.proc = subprocess.Popen(self._java(node, ["kafka.Kafka", str(node.home / "server.properties")]),
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()
        node.pid_file.write_text(str(node.proc.pid))
        if wait:
            self.wait_ready(node_id, timeout_s)

    def wait_ready(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Until the node's listener accepts connections and it says it started."""
        node = self.node(node_id)
        deadline = time.monotonic() + timeout_s
        log = node.home / "out.log"
        offset = 0
        while time.monotonic() < deadline:
            if node.proc is None or node.proc.poll() is not None:
                raise RuntimeError(f"kafka node {node_id} exited: {self.tail(node_id)}")
            text = log.read_bytes()[offset:] if log.exists() else b""
            if b"Kafka Server started" in text:
                try:
                    with socket.create_connection(("127.0.0.1", node.port), timeout=1):
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"kafka node {node_id} not ready in {timeout_s:g} s: {self.tail(node_id)}")

    def kill(self, node_id: int) -> None:
        """kill -9 the node's process group and reap it."""
        node = self.node(node_id)
        if node.proc is None:
            return
        if node.proc.poll() is None:
            try:
                os.killpg(node.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        node.proc.wait(timeout=30)
        node.proc = None
        # The next start's "started" line must be a new one.
        log = node.home / "out.log"
        if log.exists():
            log.rename(node.home / f"out.{time.time_ns()}.log")

    def pause(self, node_id: int) -> None:
        """SIGSTOP the node's process: it keeps its connections and answers nothing."""
        os.kill(self.node(node_id).proc.pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        os.kill(self.node(node_id).proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop every node: SIGTERM, then SIGKILL after a few seconds."""
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                try:
                    os.killpg(node.proc.pid, signal.SIGCONT)  # a paused node acts on SIGTERM only once continued
                    os.killpg(node.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for node in self.nodes:
            if node.proc is None:
                continue
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(node.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                node.proc.wait(timeout=30)
            node.proc = None

    def tail(self, node_id: int, lines: int = 20) -> str:
        log = self.node(node_id).home / "out.log"
        if not log.exists():
            return "(no output)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> "LoopbackKafka":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
