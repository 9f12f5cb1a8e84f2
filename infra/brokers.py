"""What the own broker and Apache Kafka share as systems: one broker daemon per
node, broker ids in the nodes' order, and the look-ups built on that.

`BrokerBase` fills the `Processes`, `Pausable` and `DataDir` seams of
infra.system and the parts of `LogSource` and `Primaries` that are only
bookkeeping (which node is broker 3); a system (infra.own_broker,
infra.kafka) adds how to configure, start and observe its brokers.
"""

from __future__ import annotations

import logging

from infra.nodes import Cluster, Node, parallel
from infra.remote import RemoteError

log = logging.getLogger(__name__)


class BrokerBase:
    """A broker per node: node i of the cluster is broker i, with the daemon
    `daemon`, data in `<data_dir>/<data_subdir>` and settings in
    `<run_dir>/<config_name>`. Subclasses set those and `port`."""

    name: str
    title: str  # in messages: "the broker", "Kafka"
    daemon: str
    data_subdir: str
    config_name: str
    port: int

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._ids: dict[str, int] = {}
        self._local = True  # nodes share this machine's files: run this checkout and these jars in place

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

    # -- the process on each node

    def kill(self, node: Node) -> None:
        node.remote.signal(self.daemon, "KILL")
        node.remote.wait_stopped(self.daemon, timeout=10)

    def pause(self, node: Node) -> None:
        node.remote.signal(self.daemon, "STOP")

    def resume(self, node: Node) -> None:
        node.remote.signal(self.daemon, "CONT")

    def process_state(self, node: Node) -> str | None:
        """The broker process's state letter (R, S, T, ...), None when not running."""
        return node.remote.process_state(self.daemon)

    def teardown(self, cluster: Cluster) -> None:
        def stop(node: Node) -> None:
            try:
                node.remote.stop_daemon(self.daemon)
            except RemoteError as e:
                log.warning("stopping %s on %s: %s", self.title, node.name, e)

        parallel(stop, self._nodes or list(cluster.nodes))
