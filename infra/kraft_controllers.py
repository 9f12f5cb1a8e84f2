"""KRaft controllers in processes of their own, beside Kafka's brokers.

In the combined layout (`kafka_controllers = "combined"`, the default) the
first three nodes run broker and controller in one JVM, so a fault on such a
broker (a pause, a kill, a power loss) is a fault on the controller quorum
too: pausing the two followers of a partition on a three-node cluster
pauses two of three voters, and no leader can be elected by anyone. The
`separate` layout runs each voter as a second daemon, `kafka-controller`, on
the same node, with node id 100 + the broker's: process faults on brokers
leave the quorum whole, and the `kraft-controllers` target hits these
processes instead (as `zookeeper` hits ZooKeeper's). A partition of the node
still cuts both, as it cuts a node's ZooKeeper. The controller's metadata
log lives outside the broker's data dir (`<data_dir>/kraft-controller`), so
the disk-fault filesystem, mounted on the broker's, leaves it alone.

`ControllerDaemons` is the process seam the nemesis uses for them (start,
kill, pause, resume, process_state), the same one ZooKeeper offers; its
signals are the brokers' (infra.brokers.NodeDaemon), by another name.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Callable, ClassVar

from infra.brokers import NodeDaemon
from infra.nodes import Node, parallel

DAEMON = "kafka-controller"
LAYOUTS = ("combined", "separate")
ID_BASE = 100  # controller of broker i: node id 100 + i (KRaft ids are unique across roles)
LOG_NAME = "controller.log"


def controller_id(broker_id: int) -> int:
    return ID_BASE + broker_id


def broker_of(controller_node_id: int) -> int:
    """The broker id beside a controller's node id (ids below ID_BASE are combined voters' own)."""
    return controller_node_id - ID_BASE if controller_node_id > ID_BASE else controller_node_id


def metadata_dir(node: Node) -> str:
    """The controller's log dir: its `__cluster_metadata-0` and `quorum-state` live here."""
    return f"{node.data_dir}/kraft-controller"


def config_file(node: Node) -> str:
    return f"{node.run_dir}/kafka-controller.properties"


def log_config_file(node: Node) -> str:
    return f"{node.run_dir}/kafka-controller-log4j.properties"


def log_files(node: Node) -> list[str]:
    return [f"{node.log_dir}/{LOG_NAME}", f"{node.log_dir}/controller.out", config_file(node)]


@dataclass
class ControllerDaemons(NodeDaemon):
    """The `kafka-controller` daemons of a run, one per voter node.
    `argv(node)`: the JVM command line that runs the node's controller."""

    nodes: list[Node]
    argv: Callable[[Node], list[str]]
    daemon: ClassVar[str] = DAEMON

    def start(self, node: Node) -> None:
        if node.remote.pid_of(DAEMON) is None:
            node.remote.start_daemon(DAEMON, self.argv(node), f"{node.log_dir}/controller.out", cwd=node.run_dir)

    def start_all(self) -> None:
        parallel(self.start, self.nodes)

    def prepare(self, node: Node) -> None:
        """An empty metadata dir, and no controller of an earlier setup running."""
        r = node.remote
        if r.pid_of(DAEMON) is not None:
            r.stop_daemon(DAEMON)
        d = shlex.quote(metadata_dir(node))
        r.run(f"rm -rf {d} && mkdir -p {d} && rm -f {shlex.quote(node.log_dir)}/{LOG_NAME} "
              f"{shlex.quote(node.log_dir)}/controller.out")
