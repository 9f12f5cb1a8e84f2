"""The table of providers, and `provision()`, the one way to get a cluster.

    with provision("local", ProvisionOptions(nodes=5)) as cluster:
        cluster.node("n1").remote.run("hostname -I")

Each provider is one module that builds an `infra.nodes.Provider` record (the
seam: what a provider must define is documented there) and one line in
`PROVIDERS` below; everything else looks providers up here by name:

- `local`: network namespaces on a bridge, one sshd each (infra.local);
- `ssh`: hosts you name (infra.ssh);
- `vagrant`: the VMs of a Vagrantfile, through `vagrant ssh-config` (infra.ssh);
- `docker`: containers on a private Docker network, through the Docker API (infra.docker).

The provider flags, shared by `harness cluster up` and `harness run`, are
defined here once (`add_provider_arguments`, `options_from_args`).
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from core.errors import UserError
from infra import docker, local, ssh
from infra import state as st
from infra.nodes import (DEFAULT_NODES, DEFAULT_REMOTE_DIR, DEFAULT_VAGRANT_SUBNET, Cluster, Provider,
                         ProvisionOptions)

PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    local.PROVIDER,
    ssh.SSH,
    ssh.VAGRANT,
    docker.PROVIDER,
)}


def provider_named(name: str) -> Provider:
    """The provider called `name`; a UserError naming the known ones otherwise."""
    try:
        return PROVIDERS[name]
    except KeyError:
        raise UserError(f"unknown provider {name!r} (one of {', '.join(PROVIDERS)})") from None


def provision(provider: "str | ProvisionOptions" = "local", options: ProvisionOptions | None = None) -> Cluster:
    """Brings a cluster up with the named provider; raises UserError on bad input."""
    if isinstance(provider, ProvisionOptions):
        options = provider
        provider = options.provider
    options = options or ProvisionOptions(provider=provider)
    options.provider = provider
    validate_options(options)
    return PROVIDERS[provider].provision(options)


def validate_options(o: ProvisionOptions) -> None:
    """Checks what can be checked before anything is created."""
    provider = provider_named(o.provider)
    if o.cluster_id is not None and not st.CLUSTER_ID_RE.match(o.cluster_id):
        raise UserError(f"bad cluster id {o.cluster_id!r}: use c<number>, e.g. c3")
    provider.validate(o)


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
    provider = provider_named(state["provider"])
    nodes = [provider.load_node(d, connect_timeout) for d in state["nodes"]]
    meta = {k: v for k, v in state.items() if k not in ("cluster_id", "provider", "control_address")}
    return Cluster(nodes, provider, state.get("control_address"), cluster_id, st.cluster_dir(cluster_id), meta)


# The provider flags, for `harness cluster up` and `harness run` alike. Every
# flag defaults to None, so that a run's spec file shows through;
# `options_from_args` fills in ProvisionOptions' defaults.
PROVIDER_FLAGS: list[tuple[tuple[str, ...], dict]] = [
    (("--provider",), {"help": "where nodes come from: "
                               + ", ".join(f"{p.name} ({p.summary})" for p in PROVIDERS.values()) + "; default local"}),
    (("--nodes",), {"type": int, "help": f"local, docker: number of nodes, named n1..nN (default {DEFAULT_NODES})"}),
    (("--subnet",), {"help": "local, docker: private IPv4 subnet for the nodes "
                             "(default 10.213.<slot>.0/24, docker 10.214.<slot>.0/24)"}),
    (("--cluster",), {"dest": "cluster_id", "help": "cluster id c<N> (default: the first free one)"}),
    (("--nodes-file",), {"help": "ssh: file with one node a line: [NAME] [USER@]HOST[:PORT]"}),
    (("--hosts",), {"help": "ssh: comma-separated [USER@]HOST[:PORT] instead of --nodes-file"}),
    (("--ssh-user",), {"help": "ssh: login user (default root; others use sudo -n)"}),
    (("--ssh-key",), {"help": "ssh: private key file (default: ssh-agent and ~/.ssh keys)"}),
    (("--ssh-port",), {"type": int, "help": "ssh: port (default 22)"}),
    (("--known-hosts",), {"help": "ssh: known_hosts file (default ~/.ssh/known_hosts)"}),
    (("--ssh-insecure",), {"action": "store_const", "const": True, "help": "ssh: do not check host keys (unsafe)"}),
    (("--remote-dir",), {"help": f"ssh: where node dirs go on the hosts (default {DEFAULT_REMOTE_DIR})"}),
    (("--vagrant-dir",), {"help": "vagrant: directory of the Vagrantfile (default .)"}),
    (("--vagrant-subnet",), {"help": f"vagrant: the VMs' private network (default {DEFAULT_VAGRANT_SUBNET})"}),
]
# ProvisionOptions fields that the flags set (argparse dests).
FLAG_FIELDS = ("provider", "nodes", "subnet", "cluster_id", "nodes_file", "hosts", "ssh_user", "ssh_key", "ssh_port",
               "known_hosts", "ssh_insecure", "remote_dir", "vagrant_dir", "vagrant_subnet")


def add_provider_arguments(parser: argparse.ArgumentParser) -> None:
    """The provider flags, shared by `harness cluster up` and `harness run`."""
    g = parser.add_argument_group("cluster")
    for names, kwargs in PROVIDER_FLAGS:
        g.add_argument(*names, **kwargs)


def split_hosts(text: "str | list[str] | tuple[str, ...] | None") -> list[str] | None:
    """`--hosts a,b` (or a list of hosts) -> ["a", "b"]; None when none given."""
    if not text:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    return [h.strip() for h in items if h.strip()] or None


def options_from_values(values: dict) -> ProvisionOptions:
    """ProvisionOptions from flag or spec values; those None or missing keep their defaults."""
    known = {f.name for f in fields(ProvisionOptions)}
    given = {k: v for k, v in values.items() if k in known and v is not None}
    if "hosts" in given:
        given["hosts"] = split_hosts(given["hosts"])
    if "ssh_insecure" in given:
        given["ssh_insecure"] = bool(given["ssh_insecure"])
    return ProvisionOptions(**given)


def options_from_args(args: argparse.Namespace) -> ProvisionOptions:
    """ProvisionOptions from the parsed provider flags."""
    return options_from_values({name: getattr(args, name, None) for name in FLAG_FIELDS})
