"""The `local` provider: N nodes as network namespaces on a bridge, one sshd each.

Node i of cluster c<slot> is the namespace `harness-c<slot>-<name>`, whose
`eth0` (a veth whose other end `hv-c<slot>-<i>` sits on the bridge
`hbr-c<slot>`) has address .10+i of the cluster's subnet (default
10.213.<slot>.0/24). The control node (this machine) is .1 on the bridge.
No default route exists in the namespaces, so nothing a node sends can leave
the bridge. Each node runs its own sshd bound to its address, with a host
key and an authorised client key generated for this cluster (0600, under the
cluster's state dir, removed on teardown); the harness reaches nodes only
through SSH, exactly as it reaches VMs.

Nodes share this machine's filesystem (sshd is entered into the namespace
with `nsenter --net`, not `ip netns exec`, so mounts made on a node are
visible here and `harness clean` can find them) but have their own
`data`, `logs` and `run` directories under `<state>/clusters/<id>/nodes/`.

If the bridge netfilter hook is on (br_netfilter), bridged frames cross the
host's FORWARD chain; the harness inserts ACCEPT rules for its bridge,
tagged `harness:<id>`, and deletes them on teardown.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from pathlib import Path

from core.errors import UserError
from infra import hostops
from infra import state as st
from infra.nodes import (Cluster, Node, Provider, ProvisionOptions, Say, built_or_removed, check_named_nodes,
                         local_node_address, parallel,
                         parse_subnet)
from infra.remote import Remote

log = logging.getLogger(__name__)

REQUIRED_TOOLS = ["ip", "nsenter", "sshd", "iptables"]
SSHD = "/usr/sbin/sshd"


def _overlaps_host(net: ipaddress.IPv4Network) -> str | None:
    for prefix in hostops.host_prefixes():
        try:
            other = ipaddress.IPv4Network(prefix, strict=False)
        except ValueError:
            continue
        if other.prefixlen == 32 and str(other.network_address).startswith("127."):
            continue
        if net.overlaps(other):
            return prefix
    return None


def _slot_is_free(slot: int, auto_subnet: bool) -> bool:
    cid = f"c{slot}"
    if any(ns.startswith(f"{st.NETNS_PREFIX}{cid}-") for ns in hostops.list_netns()):
        return False
    links = hostops.list_links()
    if st.bridge_name(cid) in links or any(l.startswith(f"hv-{cid}-") for l in links):
        return False
    if auto_subnet:
        return _overlaps_host(ipaddress.IPv4Network(f"10.213.{slot}.0/24")) is None
    return True


def _sshd_config(address: str, keys: Path, node_dir: Path) -> str:
    return "\n".join([
        f"ListenAddress {address}:22",
        f"HostKey {keys / 'host_key'}",
        f"AuthorizedKeysFile {keys / 'authorized_keys'}",
        # Outside run/: sshd overwrites its environment (process title), so it carries no
        # HARNESS_DAEMON tag; clean finds it by its namespace instead.
        f"PidFile {node_dir / 'sshd.pid'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # No PAM (no login session machinery in a namespace); keys live under /var/lib.
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "MaxSessions 64",
        "MaxStartups 100:30:200",
        "Subsystem sftp internal-sftp",
        # Bash sources ~/.bashrc for commands that come over SSH unless it looks
        # nested; an rc file that runs `pyenv init` would slow every command.
        "SetEnv SHLVL=1",
        "LogLevel ERROR",
        "",
    ])


def provision_local(o: ProvisionOptions) -> Cluster:
    if os.geteuid() != 0:
        raise UserError("the local provider needs root (namespaces, bridge, iptables); run as root or use --provider ssh")
    missing = hostops.missing_tools(REQUIRED_TOOLS)
    if missing:
        raise UserError(f"the local provider needs {', '.join(missing)}: run `make setup`")
    names = list(o.names) if o.names else [f"n{i}" for i in range(1, o.nodes + 1)]
    explicit_net = parse_subnet(o.subnet, len(names)) if o.subnet else None
    if explicit_net is not None:
        clash = _overlaps_host(explicit_net)
        if clash:
            raise UserError(f"--subnet {o.subnet} overlaps {clash}, which this machine already routes")

    cid = st.reserve_cluster_id(lambda slot: _slot_is_free(slot, explicit_net is None), o.cluster_id)
    net = explicit_net or ipaddress.IPv4Network(f"10.213.{st.slot_of(cid)}.0/24")
    return built_or_removed(cid, lambda: _bring_up(cid, names, net), remove_local_cluster)


def _bring_up(cid: str, names: list[str], net: ipaddress.IPv4Network) -> Cluster:
    cdir = st.cluster_dir(cid)
    keys = cdir / "keys"
    bridge = st.bridge_name(cid)
    control = str(net.network_address + 1)
    nodes_info = []
    for i, name in enumerate(names, start=1):
        ndir = cdir / "nodes" / name
        nodes_info.append({"index": i, "name": name, "address": local_node_address(net, i),
                           "netns": st.netns_name(cid, name), "veth": st.veth_name(cid, i), "dir": ndir})
    state = st.read_state(cid) or {}
    state.update({"provider": "local", "subnet": str(net), "control_address": control, "bridge": bridge,
                  "netns": [n["netns"] for n in nodes_info], "veths": [n["veth"] for n in nodes_info],
                  "phase": "keys", "owner_pid": os.getpid()})
    st.write_state(cid, state)

    # Keys: one client key for the run, one host key shared by the cluster's sshds
    # (pinned in a known_hosts file, so host keys are checked as for real hosts).
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    client_pub = hostops.generate_ed25519(keys / "id_ed25519")
    host_pub = hostops.generate_ed25519(keys / "host_key")
    hostops.write_private(keys / "authorized_keys", (client_pub + "\n").encode())
    (keys / "known_hosts").write_text("".join(f"{n['address']} {host_pub}\n" for n in nodes_info))
    for n in nodes_info:
        for sub in ("data", "logs", "run"):
            (n["dir"] / sub).mkdir(parents=True, exist_ok=True)

    # Network. Record first, create second: clean must know about half-made things.
    state["phase"] = "network"
    tag = st.host_rule_tag(cid)
    host_rules = [["INPUT", "-i", bridge], ["OUTPUT", "-o", bridge], ["FORWARD", "-i", bridge, "-o", bridge]]
    state["host_rules"] = host_rules
    st.write_state(cid, state)
    batch = [f"link add {bridge} type bridge", f"addr add {control}/{net.prefixlen} dev {bridge}",
             f"link set {bridge} up"]
    for n in nodes_info:
        batch += [f"netns add {n['netns']}",
                  f"link add {n['veth']} type veth peer name eth0 netns {n['netns']}",
                  f"link set {n['veth']} master {bridge} up"]
    hostops.sh(["ip", "-batch", "-"], input="\n".join(batch) + "\n")
    for n in nodes_info:
        hostops.sh(["ip", "-n", n["netns"], "-batch", "-"],
                   input=f"addr add {n['address']}/{net.prefixlen} dev eth0\nlink set eth0 up\nlink set lo up\n")
    for rule in host_rules:
        hostops.sh(["iptables", "-w", "-I", rule[0], "1", *rule[1:], "-m", "comment", "--comment", tag, "-j", "ACCEPT"])
    st.maybe_stall("network")

    # One sshd per node, inside its namespace, bound to its address.
    state["phase"] = "sshd"
    st.write_state(cid, state)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    for n in nodes_info:
        cfg = n["dir"] / "run" / "sshd_config"
        cfg.write_text(_sshd_config(n["address"], keys, n["dir"]))
        hostops.sh(["nsenter", f"--net=/run/netns/{n['netns']}", "env",
                    f"{st.DAEMON_ENV}={st.daemon_tag(cid, n['name'], 'sshd')}",
                    SSHD, "-f", str(cfg), "-E", str(n["dir"] / "logs" / "sshd.log")])
    st.maybe_stall("sshd")

    nodes = []
    for n in nodes_info:
        run_dir = str(n["dir"] / "run")
        remote = Remote(n["name"], n["address"], user="root", key_file=str(keys / "id_ed25519"),
                        known_hosts=str(keys / "known_hosts"), run_dir=run_dir,
                        tag_scope=f"{cid}/{n['name']}", sudo=False, connect_timeout=5.0, connect_retry_s=5.0)
        nodes.append(Node(n["name"], n["address"], str(n["dir"] / "data"), str(n["dir"] / "logs"), run_dir, remote))
    parallel(lambda node: node.remote.connect(), nodes)

    cluster = Cluster(nodes, PROVIDER, control, cid, cdir, meta={k: v for k, v in state.items()
                                                                   if k not in ("cluster_id", "provider", "control_address")})
    cluster.save_ready()
    return cluster


def teardown_local(cluster: Cluster, say: Say = None) -> list[str]:
    cluster.close()
    return remove_local_cluster(cluster.cluster_id, say)


def find_local_clusters() -> set[str]:
    """Ids of local clusters from the names of what they made: namespaces,
    links, host rules, tagged processes (found even without a state dir)."""
    ids = set()
    for ns in hostops.list_netns():
        m = st.NETNS_RE.match(ns)
        if m:
            ids.add(m.group(1))
    for link in hostops.list_links():
        m = st.BRIDGE_RE.match(link) or st.VETH_RE.match(link.split("@")[0])
        if m:
            ids.add(m.group(1))
    for rule in hostops.iptables_rules("harness:"):
        m = st.HOST_RULE_RE.search(rule)
        if m:
            ids.add(m.group(1))
    for proc in hostops.scan_processes():
        m = re.match(r"^(c\d{1,3})/", proc.daemon_tag or "")
        if m:
            ids.add(m.group(1))
    return ids


def remove_local_cluster(cid: str, say: Say = None) -> list[str]:
    """Removes every trace of local cluster `cid`, from its names alone if need be.

    Order matters: abort FUSE connections (so nothing blocks), kill the
    processes (in its namespaces, or tagged as its daemons), unmount, delete
    namespaces, links and tagged host rules, and last the state directory.
    Returns (and passes to `say`) one line per thing removed.
    """
    removed: list[str] = []

    def note(what: str) -> None:
        removed.append(what)
        if say:
            say(what)

    cdir = st.cluster_dir(cid)
    namespaces = [ns for ns in hostops.list_netns() if ns.startswith(f"{st.NETNS_PREFIX}{cid}-")]
    inodes = {hostops.netns_inode(ns) for ns in namespaces} - {None}

    mounts = hostops.mounts_under(cdir)
    for m in mounts:
        if m.fstype.startswith("fuse"):
            hostops.abort_fuse(m)

    tag_prefix = f"{cid}/"
    victims = [p for p in hostops.scan_processes()
               if (p.netns_inode in inodes) or (p.daemon_tag or "").startswith(tag_prefix)]
    if victims:
        still = hostops.kill_and_wait([p.pid for p in victims])
        for p in victims:
            if p.pid not in still:
                note(f"process {p.pid} ({p.comm})")
        for pid in still:
            log.warning("process %d of cluster %s would not die", pid, cid)

    for m in hostops.mounts_under(cdir):
        if hostops.unmount(m):
            note(f"mount {m.mount_point} ({m.fstype})")

    for ns in namespaces:
        if hostops.sh(["ip", "netns", "del", ns], check=False).returncode == 0:
            note(f"namespace {ns}")
    for link in hostops.list_links():
        # A veth whose peer went with its namespace is gone already.
        if link == st.bridge_name(cid) or link.startswith(f"hv-{cid}-"):
            if hostops.sh(["ip", "link", "del", link], check=False).returncode == 0:
                note(f"link {link}")
    tag = st.host_rule_tag(cid)
    for rule in hostops.iptables_rules(f"--comment {tag} "):
        hostops.delete_iptables_rule(rule)
        note(f"iptables rule {rule}")
    for rule in hostops.iptables_rules(f"--comment \"{tag}\""):
        hostops.delete_iptables_rule(rule)
        note(f"iptables rule {rule}")

    if cdir.exists():
        hostops.remove_tree(cdir)
        note(f"state directory {cdir} (keys, node dirs)")
    return removed


PROVIDER = Provider(
    name="local", summary="network namespaces on this machine",
    provision=provision_local, teardown=teardown_local, validate=check_named_nodes,
    makes_nodes=True, shares_filesystem=True, find_clusters=find_local_clusters, remove=remove_local_cluster)
