"""Nodes and clusters, and `Provider`, the seam every provider fills in.

A provider (infra.local, infra.ssh, ...) turns `ProvisionOptions` into a
`Cluster` of `Node`s, each with its data/log/run directories and a remote
(an `infra.remote.NodeShell`: `Remote`, one SSH connection, or a provider's own
transport such as infra.docker's) that reaches it. This module sits
below the providers: they import it, it imports none of them; the table of
providers is `infra.cluster.PROVIDERS`.

A cluster's state is saved under the state root (see infra.state), so
`infra.cluster.load_cluster()` can rebuild it in another process and
`harness clean` can remove it.
"""

from __future__ import annotations

import ipaddress
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, TypeVar

from core.errors import UserError
from infra import state as st
from infra.remote import NodeShell, Remote

DEFAULT_NODES = 5
DEFAULT_REMOTE_DIR = "/var/lib/harness/nodes"
DEFAULT_VAGRANT_SUBNET = "192.168.56.0/24"

T = TypeVar("T")
R = TypeVar("R")
# Where teardown and clean report each thing they removed, one line each.
Say = Optional[Callable[[str], None]]


@dataclass
class ProvisionOptions:
    """Everything any provider may need; each reads only its own fields."""

    provider: str = "local"
    nodes: int = DEFAULT_NODES            # local: how many (names n1..nN)
    names: list[str] | None = None        # local: explicit node names instead
    subnet: str | None = None             # local: default 10.213.<slot>.0/24
    cluster_id: str | None = None         # default: the first free c<slot>
    ssh_user: str | None = None           # ssh: default root (sudo is used for others)
    ssh_key: str | None = None            # ssh: private key file; default agent/~/.ssh
    ssh_port: int = 22
    nodes_file: str | None = None         # ssh: one node a line (see infra.ssh)
    hosts: list[str] | None = None        # ssh: instead of a nodes file
    ssh_insecure: bool = False            # ssh: skip host key checks (loudly)
    known_hosts: str | None = None        # ssh: default ~/.ssh/known_hosts
    remote_dir: str = DEFAULT_REMOTE_DIR  # ssh: node dirs are <remote_dir>/<node>/{data,logs,run}
    vagrant_dir: str = "."
    vagrant_subnet: str = DEFAULT_VAGRANT_SUBNET
    connect_timeout: float = 10.0


@dataclass
class Node:
    name: str
    address: str
    data_dir: str
    log_dir: str
    run_dir: str
    remote: NodeShell

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.address!r})"


def node_to_dict(node: Node) -> dict:
    """A node reached over SSH, as its cluster's state saves it."""
    r = node.remote
    return {"name": node.name, "address": node.address, "data_dir": node.data_dir, "log_dir": node.log_dir,
            "run_dir": node.run_dir,
            "ssh": {"host": r.host, "port": r.port, "user": r.user, "key_file": r.key_file,
                    "known_hosts": r.known_hosts, "insecure": r.insecure, "sudo": r.sudo,
                    "tag_scope": r.tag_scope}}


def node_from_dict(d: dict, connect_timeout: float = 10.0) -> Node:
    """The node `node_to_dict` saved, with a fresh (unconnected) Remote."""
    s = d["ssh"]
    remote = Remote(d["name"], s["host"], port=s["port"], user=s["user"], key_file=s.get("key_file"),
                    known_hosts=s.get("known_hosts"), insecure=s.get("insecure", False), run_dir=d["run_dir"],
                    tag_scope=s.get("tag_scope"), sudo=s.get("sudo"), connect_timeout=connect_timeout)
    return Node(d["name"], d["address"], d["data_dir"], d["log_dir"], d["run_dir"], remote)


def ssh_command(node: Node) -> str:
    """The ssh command line that logs a user in to a node reached over SSH."""
    r = node.remote
    parts = ["ssh"]
    if r.key_file:
        parts += ["-i", r.key_file]
    if r.known_hosts:
        parts += ["-o", f"UserKnownHostsFile={r.known_hosts}"]
    if r.insecure:
        parts += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    if r.port != 22:
        parts += ["-p", str(r.port)]
    parts.append(f"{r.user}@{r.host}")
    return " ".join(parts)


def _no_checks(options: ProvisionOptions) -> None:
    return None


def _no_clusters() -> set[str]:
    return set()


@dataclass(frozen=True)
class Provider:
    """What a provider defines: one module that builds this record, and one
    line in `infra.cluster.PROVIDERS`. Nothing else names a provider.

    Required:
      name        the `--provider` value, also saved in the cluster's state
      summary     a few words for `--provider`'s help
      provision   ProvisionOptions -> a ready Cluster; on failure it removes
                  what it built before raising
      teardown    (cluster, say) -> lines: stops what the harness started on
                  the nodes and forgets the cluster

    Optional (the defaults suit hosts the user names):
      validate    checks its own options before anything is created (UserError)
      makes_nodes it creates `--nodes` nodes itself (else the user's hosts are the nodes)
      shares_filesystem  nodes see this machine's files, so systems run this
                  checkout and these jars in place instead of uploading them
      find_clusters  ids of its clusters found on this machine from names alone
                  (for `harness clean` after a kill -9, before any state was saved)
      remove      (cluster id, say) -> lines: removes a cluster from its id
                  alone; None: clean loads the saved cluster and tears it down
      save_node / load_node  a node to and from its saved dict (the remote's settings)
      login       the shell command that logs a user in to a node
    """

    name: str
    summary: str
    provision: Callable[[ProvisionOptions], "Cluster"]
    teardown: Callable[["Cluster", Say], list[str]]
    validate: Callable[[ProvisionOptions], None] = _no_checks
    makes_nodes: bool = False
    shares_filesystem: bool = False
    find_clusters: Callable[[], set[str]] = _no_clusters
    remove: Callable[[str, Say], list[str]] | None = None
    save_node: Callable[[Node], dict] = node_to_dict
    load_node: Callable[[dict, float], Node] = node_from_dict
    login: Callable[[Node], str] = ssh_command


@dataclass
class Cluster:
    nodes: list[Node]
    kind: Provider  # the provider that made it
    control_address: str | None
    cluster_id: str
    state_dir: Path
    # Saved with the cluster: provider details and what systems run on it.
    meta: dict = field(default_factory=dict)

    @property
    def provider(self) -> str:
        """The provider's name."""
        return self.kind.name

    @property
    def shares_filesystem(self) -> bool:
        """Whether the nodes see this machine's files (see Provider)."""
        return self.kind.shares_filesystem

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise UserError(f"cluster {self.cluster_id} has no node {name!r} (nodes: {', '.join(self.names)})")

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def by_address(self, address: str) -> Node | None:
        return next((n for n in self.nodes if n.address == address), None)

    def save(self) -> None:
        """Writes the cluster's state.json (what load_cluster and clean read)."""
        state = st.read_state(self.cluster_id) or {}
        state.update(self.meta)
        state["cluster_id"] = self.cluster_id
        state["provider"] = self.provider
        state["control_address"] = self.control_address
        st.write_state(self.cluster_id, state)

    def save_nodes(self) -> None:
        """Records the nodes (as the provider saves them) in meta, for save()."""
        self.meta["nodes"] = [self.kind.save_node(n) for n in self.nodes]

    def save_ready(self) -> None:
        """Records the nodes and marks the cluster ready in state.json: the last
        step of every provider's provision."""
        self.save_nodes()
        self.meta["phase"] = "ready"
        self.save()

    def close(self) -> None:
        """Closes the connections to the nodes, leaving the cluster running."""
        for n in self.nodes:
            n.remote.close()

    def teardown(self, say: Say = None) -> list[str]:
        """Stops everything the harness started on the nodes and removes the cluster."""
        return self.kind.teardown(self, say)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()


def parse_subnet(text: str, node_count: int) -> ipaddress.IPv4Network:
    """A private IPv4 subnet big enough for the control address and the nodes."""
    try:
        net = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        raise UserError(f"--subnet {text!r} is not an IPv4 subnet like 10.213.7.0/24") from None
    if not net.is_private or net.is_loopback or net.is_link_local:
        raise UserError(f"--subnet {text}: must be a private range (10/8, 172.16/12, 192.168/16)")
    if net.num_addresses < node_count + 12:
        raise UserError(f"--subnet {text}: too small for {node_count} nodes (they start at .11)")
    return net


def local_node_address(net: ipaddress.IPv4Network, index: int) -> str:
    """Node i (1-based) lives at .10+i; the control node at .1."""
    return str(net.network_address + 10 + index)


def parallel(fn: Callable[[T], R], items: Iterable[T], max_workers: int = 16) -> list[R]:
    """Runs fn over items in threads; re-raises the first failure after all finished."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(items))) as pool:
        futures = [pool.submit(fn, i) for i in items]
        results, first_error = [], None
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as e:  # noqa: BLE001 - re-raised below
                results.append(None)
                first_error = first_error or e
    if first_error is not None:
        raise first_error
    return results


def check_ssh_options(o: ProvisionOptions) -> None:
    """The checks of the SSH settings every host-based provider takes."""
    if not 1 <= o.ssh_port <= 65535:
        raise UserError(f"--ssh-port must be a TCP port, not {o.ssh_port}")
    if o.ssh_key and not Path(o.ssh_key).expanduser().is_file():
        raise UserError(f"--ssh-key {o.ssh_key}: no such file")
    if o.known_hosts and not Path(o.known_hosts).expanduser().is_file():
        raise UserError(f"--known-hosts {o.known_hosts}: no such file")


def check_named_nodes(o: ProvisionOptions) -> None:
    """The checks for a provider that makes its nodes: names or count, subnet,
    and no host list (which only host-based providers read)."""
    if o.names:
        for name in o.names:
            if not st.NODE_NAME_RE.match(name):
                raise UserError(f"bad node name {name!r}: letters, digits, '.', '_', '-'")
        if len(set(o.names)) != len(o.names):
            raise UserError("node names must be unique")
    elif not 1 <= o.nodes <= 200:
        raise UserError(f"--nodes must be between 1 and 200, not {o.nodes}")
    if o.subnet is not None:
        parse_subnet(o.subnet, len(o.names or []) or o.nodes)
    if o.nodes_file:
        raise UserError("--nodes-file is for --provider ssh")
    if o.hosts:
        raise UserError("--hosts is for --provider ssh")


def built_or_removed(cluster_id: str, build: Callable[[], "Cluster"], remove: Callable[[str], object]) -> "Cluster":
    """`build()`; if anything fails (or Ctrl-C), `remove(cluster_id)` first, so
    that no half-built cluster is left, then the original error goes on up."""
    try:
        return build()
    except BaseException:
        try:
            remove(cluster_id)
        except Exception as e:  # the original error matters more
            logging.getLogger(__name__).warning("cleaning up cluster %s failed: %s", cluster_id, e)
        raise
