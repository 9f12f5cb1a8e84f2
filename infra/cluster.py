"""Nodes and clusters, and `provision()`, the one way to get them.

    with provision("local", ProvisionOptions(nodes=5)) as cluster:
        cluster.node("n1").remote.run("hostname -I")

A provider turns `ProvisionOptions` into a `Cluster` of `Node`s, each with its
data/log/run directories and a `Remote`. Bring-up that fails half-way tears
down what it built before raising. The cluster's state is saved under the
state root (see infra.state), so `load_cluster()` can rebuild it in another
process (`harness cluster status|down`) and `harness clean` can remove it.

Providers:
- `local`: network namespaces on a bridge, one sshd each (infra.local);
- `ssh`: hosts you name (infra.ssh);
- `vagrant`: the VMs of a Vagrantfile, through `vagrant ssh-config` (infra.ssh);
- `docker`: containers on a private Docker network, through the Docker API (infra.docker).
"""

from __future__ import annotations

import argparse
import ipaddress
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from core.errors import UserError
from infra import state as st
from infra.remote import Remote

PROVIDERS = ("local", "ssh", "vagrant", "docker")
DEFAULT_NODES = 5
DEFAULT_LOCAL_SUBNET_BASE = "10.213"  # 10.213.<slot>.0/24, one /24 per local cluster
DEFAULT_REMOTE_DIR = "/var/lib/harness/nodes"
DEFAULT_VAGRANT_SUBNET = "192.168.56.0/24"

T = TypeVar("T")
R = TypeVar("R")


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
    remote: Remote

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.address!r})"


@dataclass
class Cluster:
    nodes: list[Node]
    provider: str
    control_address: str | None
    cluster_id: str
    state_dir: Path
    # Saved with the cluster: provider details and what systems run on it.
    meta: dict = field(default_factory=dict)

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

    def close(self) -> None:
        """Closes the SSH connections, leaving the cluster running."""
        for n in self.nodes:
            n.remote.close()

    def teardown(self) -> list[str]:
        """Stops everything the harness started on the nodes and removes the cluster."""
        if self.provider == "local":
            from infra.local import teardown_local

            return teardown_local(self)
        if self.provider == "docker":
            from infra.docker import teardown_docker

            return teardown_docker(self)
        from infra.ssh import teardown_ssh

        return teardown_ssh(self)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()


def provision(provider: "str | ProvisionOptions" = "local", options: ProvisionOptions | None = None) -> Cluster:
    """Brings a cluster up with the named provider; raises UserError on bad input."""
    if isinstance(provider, ProvisionOptions):
        options = provider
        provider = options.provider
    options = options or ProvisionOptions(provider=provider)
    options.provider = provider
    validate_options(options)
    if provider == "local":
        from infra.local import provision_local

        return provision_local(options)
    if provider == "docker":
        from infra.docker import provision_docker

        return provision_docker(options)
    from infra.ssh import provision_ssh, provision_vagrant

    if provider == "ssh":
        return provision_ssh(options)
    return provision_vagrant(options)


def validate_options(o: ProvisionOptions) -> None:
    """Checks what can be checked before anything is created."""
    if o.provider not in PROVIDERS:
        raise UserError(f"unknown provider {o.provider!r} (one of {', '.join(PROVIDERS)})")
    if o.cluster_id is not None and not st.CLUSTER_ID_RE.match(o.cluster_id):
        raise UserError(f"bad cluster id {o.cluster_id!r}: use c<number>, e.g. c3")
    if o.provider in ("local", "docker"):
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
    else:
        if not 1 <= o.ssh_port <= 65535:
            raise UserError(f"--ssh-port must be a TCP port, not {o.ssh_port}")
        if o.ssh_key and not Path(o.ssh_key).expanduser().is_file():
            raise UserError(f"--ssh-key {o.ssh_key}: no such file")
        if o.known_hosts and not Path(o.known_hosts).expanduser().is_file():
            raise UserError(f"--known-hosts {o.known_hosts}: no such file")
        if o.provider == "ssh" and not (o.nodes_file or o.hosts):
            raise UserError("the ssh provider needs --nodes-file FILE or --hosts HOST,HOST,...")


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


def node_to_dict(node: Node) -> dict:
    r = node.remote
    if hasattr(r, "container"):  # a docker node (infra.docker.DockerRemote)
        return {"name": node.name, "address": node.address, "data_dir": node.data_dir, "log_dir": node.log_dir,
                "run_dir": node.run_dir, "docker": r.to_dict()}
    return {"name": node.name, "address": node.address, "data_dir": node.data_dir, "log_dir": node.log_dir,
            "run_dir": node.run_dir,
            "ssh": {"host": r.host, "port": r.port, "user": r.user, "key_file": r.key_file,
                    "known_hosts": r.known_hosts, "insecure": r.insecure, "sudo": r.sudo,
                    "tag_scope": r.tag_scope}}


def node_from_dict(d: dict, connect_timeout: float = 10.0) -> Node:
    if "docker" in d:
        from infra.docker import remote_from_dict

        return Node(d["name"], d["address"], d["data_dir"], d["log_dir"], d["run_dir"],
                    remote_from_dict(d["name"], d["run_dir"], d["docker"]))
    s = d["ssh"]
    remote = Remote(d["name"], s["host"], port=s["port"], user=s["user"], key_file=s.get("key_file"),
                    known_hosts=s.get("known_hosts"), insecure=s.get("insecure", False), run_dir=d["run_dir"],
                    tag_scope=s.get("tag_scope"), sudo=s.get("sudo"), connect_timeout=connect_timeout)
    return Node(d["name"], d["address"], d["data_dir"], d["log_dir"], d["run_dir"], remote)


def load_cluster(cluster_id: str | None = None, connect_timeout: float = 10.0) -> Cluster:
    """Rebuilds a cluster that another process brought up, from its state.json."""
    ids = st.list_cluster_ids()
    if cluster_id is None:
        ready = [c for c in ids if (st.read_state(c) or {}).get("phase") == "ready"]
        if not ready:
            raise UserError("no cluster is up on this machine (`harness cluster up` starts one)")
        if len(ready) > 1:
            raise UserError(f"several clusters are up ({', '.join(ready)}); name one with --cluster")
        cluster_id = ready[0]
    elif not st.CLUSTER_ID_RE.match(cluster_id):
        raise UserError(f"bad cluster id {cluster_id!r}: use c<number>, e.g. c3")
    state = st.read_state(cluster_id)
    if state is None or "nodes" not in state:
        raise UserError(f"no cluster {cluster_id} on this machine"
                        + (f" (known: {', '.join(ids)})" if ids else ""))
    nodes = [node_from_dict(d, connect_timeout) for d in state["nodes"]]
    meta = {k: v for k, v in state.items() if k not in ("cluster_id", "provider", "control_address")}
    return Cluster(nodes, state["provider"], state.get("control_address"), cluster_id,
                   st.cluster_dir(cluster_id), meta)


def add_provider_arguments(parser: argparse.ArgumentParser) -> None:
    """The provider flags, shared by `harness cluster up` and `harness run`."""
    g = parser.add_argument_group("cluster")
    g.add_argument("--provider", default="local", help=f"where nodes come from: {', '.join(PROVIDERS)} (default local)")
    g.add_argument("--nodes", type=int, default=DEFAULT_NODES,
                   help="local, docker: number of nodes, named n1..nN (default 5)")
    g.add_argument("--subnet", help="local, docker: private IPv4 subnet for the nodes "
                                    "(default 10.213.<slot>.0/24, docker 10.214.<slot>.0/24)")
    g.add_argument("--cluster", dest="cluster_id", help="cluster id c<N> (default: the first free one)")
    g.add_argument("--nodes-file", help="ssh: file with one node a line: [NAME] [USER@]HOST[:PORT]")
    g.add_argument("--hosts", help="ssh: comma-separated [USER@]HOST[:PORT] instead of --nodes-file")
    g.add_argument("--ssh-user", help="ssh: login user (default root; others use sudo -n)")
    g.add_argument("--ssh-key", help="ssh: private key file (default: ssh-agent and ~/.ssh keys)")
    g.add_argument("--ssh-port", type=int, default=22, help="ssh: port (default 22)")
    g.add_argument("--known-hosts", help="ssh: known_hosts file (default ~/.ssh/known_hosts)")
    g.add_argument("--ssh-insecure", action="store_true", help="ssh: do not check host keys (unsafe)")
    g.add_argument("--remote-dir", default=DEFAULT_REMOTE_DIR, help="ssh: where node dirs go on the hosts")
    g.add_argument("--vagrant-dir", default=".", help="vagrant: directory of the Vagrantfile (default .)")
    g.add_argument("--vagrant-subnet", default=DEFAULT_VAGRANT_SUBNET,
                   help=f"vagrant: the VMs' private network (default {DEFAULT_VAGRANT_SUBNET})")


def options_from_args(args: argparse.Namespace) -> ProvisionOptions:
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if getattr(args, "hosts", None) else None
    return ProvisionOptions(
        provider=args.provider, nodes=args.nodes, subnet=args.subnet, cluster_id=args.cluster_id,
        ssh_user=args.ssh_user, ssh_key=args.ssh_key, ssh_port=args.ssh_port, nodes_file=args.nodes_file,
        hosts=hosts, ssh_insecure=args.ssh_insecure, known_hosts=args.known_hosts, remote_dir=args.remote_dir,
        vagrant_dir=args.vagrant_dir, vagrant_subnet=args.vagrant_subnet)


def options_to_dict(o: ProvisionOptions) -> dict:
    return asdict(o)
