"""The System seam: software the harness installs and runs on a cluster's nodes.

A system (a ZooKeeper ensemble, the own broker, Apache Kafka) is any object
with these methods; the optional ones may be missing, and callers check with
`hasattr` (the nemesis targets leaders only on systems that name them):

    setup(cluster)            configure and start on its nodes; return when it serves
    teardown(cluster)         stop it everywhere and remove its data
    start(node)               start it on one node (after a kill)
    kill(node)                SIGKILL it on one node
    pause(node) / resume(node)   SIGSTOP / SIGCONT
    log_files(node) -> [path]    files worth collecting from that node
    nodes(cluster) -> [Node]     the nodes it runs on (default: all)
    leaders(...) -> [name]       optional: nodes currently leading something
    controller() -> name | None  optional: the node acting as controller

`collect_logs` downloads each node's declared log files (or, given no
systems, everything in the node's log dir) into `dest_dir/<node>/`, the
layout of a run's store.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shlex
from pathlib import Path
from typing import Protocol, runtime_checkable

from infra.cluster import Cluster, Node, parallel
from infra.remote import RemoteError

log = logging.getLogger(__name__)


@runtime_checkable
class System(Protocol):
    name: str

    def setup(self, cluster: Cluster) -> None: ...

    def teardown(self, cluster: Cluster) -> None: ...

    def start(self, node: Node) -> None: ...

    def kill(self, node: Node) -> None: ...

    def pause(self, node: Node) -> None: ...

    def resume(self, node: Node) -> None: ...

    def log_files(self, node: Node) -> list[str]: ...


def system_nodes(system, cluster: Cluster) -> list[Node]:
    nodes = getattr(system, "nodes", None)
    return list(nodes(cluster)) if callable(nodes) else list(cluster.nodes)


def collect_logs(cluster: Cluster, dest_dir: str | os.PathLike, systems: list | None = None,
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
        for node in system_nodes(system, cluster):
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
