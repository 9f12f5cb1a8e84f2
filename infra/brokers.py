"""What the own broker and Apache Kafka share as systems: one broker daemon per
node, broker ids in the nodes' order, and the look-ups built on that.

`NodeDaemon` is one named daemon per node, signalled and stopped by its
name: the `Processes` and `Pausable` seams' signals, which the brokers and
Kafka's separate KRaft controllers (infra/kraft_controllers.py) share.
`BrokerBase` fills the `Processes`, `Pausable` and `DataDir` seams of
infra.system and the parts of `LogSource`, `Primaries` and `PartitionStates`
that are only bookkeeping (which node is broker 3, which log files record
truncations); a system (infra.own_broker, infra.kafka) adds how to
configure, start and observe its brokers, and how its logs say a replica
truncated (`parse_truncations`).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from infra import zk_state
from infra.nodes import Cluster, Node, parallel
from infra.remote import RemoteError
from infra.system import Truncation

log = logging.getLogger(__name__)
# How often a transaction coordinator's look-up is tried, and the pause between tries.
TXN_COORDINATOR_TRIES = 3
TXN_COORDINATOR_PAUSE_S = 1.0
# The admin client's connection complaints while brokers start or are cut off are expected.
client_log = logging.getLogger("infra.brokers.librdkafka")
client_log.setLevel(logging.ERROR)


class NodeDaemon:
    """The daemon named `daemon` on each node: SIGKILL (returning once it is
    gone), SIGSTOP, SIGCONT, its state, and stopping it everywhere."""

    daemon: str

    def kill(self, node: Node) -> None:
        node.remote.signal(self.daemon, "KILL")
        node.remote.wait_stopped(self.daemon, timeout=10)

    def pause(self, node: Node) -> None:
        node.remote.signal(self.daemon, "STOP")

    def resume(self, node: Node) -> None:
        node.remote.signal(self.daemon, "CONT")

    def process_state(self, node: Node) -> str | None:
        """The process's state letter (R, S, T, ...), None when not running."""
        return node.remote.process_state(self.daemon)

    def stop_on(self, nodes: list[Node], title: str) -> None:
        """Stops the daemon on every node of `nodes` at once; a node that
        cannot be reached is logged (`title` names the daemon), not raised."""
        def stop(node: Node) -> None:
            try:
                node.remote.stop_daemon(self.daemon)
            except RemoteError as e:
                log.warning("stopping %s on %s: %s", title, node.name, e)

        parallel(stop, nodes)


class BrokerBase(NodeDaemon):
    """A broker per node: node i of the cluster is broker i, with the daemon
    `daemon`, data in `<data_dir>/<data_subdir>` and settings in
    `<run_dir>/<config_name>`. Subclasses set those and `port`."""

    name: str
    title: str  # in messages: "the broker", "Kafka"
    daemon: str
    data_subdir: str
    config_name: str
    port: int
    zookeeper_connect: str
    chroot: str  # where in ZooKeeper the system keeps its state
    truncation_logs: tuple[str, ...] = ()  # names of the log files that record truncations

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._ids: dict[str, int] = {}
        self._local = True  # nodes share this machine's files: run this checkout and these jars in place
        self._reader: zk_state.Reader | None = None
        self._reader_lock = threading.Lock()

    def place(self, cluster: Cluster) -> None:
        """Takes every node of the cluster, numbering brokers from 1 in order."""
        self._nodes = list(cluster.nodes)
        self._ids = {n.name: i for i, n in enumerate(self._nodes, start=1)}
        self._local = cluster.shares_filesystem

    # -- where things are

    def nodes(self, cluster: Cluster | None = None) -> list[Node]:
        return list(self._nodes)

    def broker_id(self, node: Node) -> int:
        return self._ids[node.name]

    def bootstrap(self) -> str:
        return ",".join(f"{n.address}:{self.port}" for n in self._nodes)

    def data_dir(self, node: Node) -> str:
        return f"{node.data_dir}/{self.data_subdir}"

    def config_file(self, node: Node) -> str:
        return f"{node.run_dir}/{self.config_name}"

    def metadata(self, topic: str | None = None, timeout: float = 5.0, bootstrap: str | None = None):
        """A metadata response (confluent-kafka's ClusterMetadata) from the
        brokers, or from the one broker at `bootstrap` (its own view of the
        live brokers); None when none answers."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap or self.bootstrap(),
                             "socket.timeout.ms": int(timeout * 1000), "logger": client_log})
        try:
            return admin.list_topics(topic=topic, timeout=timeout)
        except KafkaException as e:
            log.debug("metadata request failed: %s", e)
            return None

    def group_coordinator(self, group: str, timeout: float = 5.0) -> str | None:
        """The node coordinating consumer group `group`, as the brokers answer a
        DescribeGroups request (None when none answers)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "socket.timeout.ms": int(timeout * 1000),
                             "logger": client_log})
        try:
            found = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout=timeout)
        except (KafkaException, ValueError) as e:
            log.debug("describing group %s failed: %s", group, e)
            return None
        return self.node_of(found.coordinator.id) if found.coordinator is not None else None

    def txn_coordinator(self, transactional_id: str, timeout: float = 5.0) -> str | None:
        """The node coordinating the transactions of `transactional_id`, as the
        brokers answer a DescribeTransactions request (routed to the
        coordinator a FindCoordinator names); None when none answers.
        confluent-kafka has no such call: kafka-python's admin client makes it."""
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError

        # Just after a coordinator died the brokers may still name it (until its
        # session ends) and the describe fails: asked again, they name the next.
        for attempt in range(TXN_COORDINATOR_TRIES):
            if attempt:
                time.sleep(TXN_COORDINATOR_PAUSE_S)
            try:
                admin = KafkaAdminClient(bootstrap_servers=self.bootstrap().split(","),
                                         request_timeout_ms=int(timeout * 1000), client_id="harness-nemesis")
            except (KafkaError, OSError, ValueError) as e:
                log.info("no admin client for transactional id %s: %s", transactional_id, e)
                continue
            try:
                found = admin.describe_transactions([transactional_id])[transactional_id]
            except (KafkaError, OSError, KeyError, ValueError) as e:
                log.info("describing transactional id %s failed: %s", transactional_id, e)
                continue
            finally:
                admin.close()
            return self.node_of(found.coordinator_id)
        return None

    def node_of(self, broker_id: int | None) -> str | None:
        """The node running broker `broker_id`, None if none does."""
        return {i: name for name, i in self._ids.items()}.get(broker_id)

    def named_leaders(self, by_id: dict[int, int]) -> dict[int, str]:
        """partition -> leader broker id, as partition -> node (unknown brokers left out)."""
        names = {i: name for name, i in self._ids.items()}
        return {p: names[b] for p, b in by_id.items() if b in names}

    def named_replicas(self, by_id: dict[int, list[int]]) -> dict[int, list[str]]:
        """partition -> replica broker ids, as partition -> nodes."""
        names = {i: name for name, i in self._ids.items()}
        return {p: [names[b] for b in brokers if b in names] for p, brokers in by_id.items()}

    # -- observing (infra.system.PartitionStates)

    def zk_reader(self) -> zk_state.Reader:
        """A ZooKeeper session kept open for the observer's frequent reads (closed by teardown)."""
        with self._reader_lock:
            if self._reader is None:
                self._reader = zk_state.Reader(self.zookeeper_connect, self.chroot)
            return self._reader

    def named_states(self, by_id: dict[int, tuple[int, int | None, list[int]]]
                     ) -> dict[int, tuple[str | None, int | None, list[str]]]:
        """partition -> (leader id, epoch, ISR ids), with node names (an unknown or -1 leader is None)."""
        names = {i: name for name, i in self._ids.items()}
        return {p: (names.get(leader), epoch, [names[b] for b in isr if b in names])
                for p, (leader, epoch, isr) in by_id.items()}

    @staticmethod
    def parse_truncations(text: str) -> list[dict]:
        """The truncations in one log file's text: dicts of logged (naive local
        datetime), topic, partition, offset, log_end, epoch, leader_id (broker
        id or None) and reason. Each system reads its own log format."""
        return []

    def truncations(self, node: str, logs: Path) -> list[Truncation]:
        out = []
        for name in self.truncation_logs:
            path = Path(logs) / name
            if not path.is_file():
                continue
            for t in self.parse_truncations(path.read_text(errors="replace")):
                leader = t.pop("leader_id")
                out.append(Truncation(node=node, leader=self.node_of(leader), **t))
        return out

    # -- the process on each node (its signals: NodeDaemon)

    def teardown(self, cluster: Cluster) -> None:
        self.stop_on(self._nodes or list(cluster.nodes), self.title)
        with self._reader_lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
