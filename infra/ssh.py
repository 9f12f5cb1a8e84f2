"""The `ssh` and `vagrant` providers: nodes are hosts you name, reached over SSH.

Nodes file (`--nodes-file`), one node a line; `#` starts a comment:

    # [NAME] [USER@]HOST[:PORT]
    n1 10.0.0.11
    n2 admin@10.0.0.12:2222
    10.0.0.13                  # named after its host

Host keys are checked against known_hosts (`--known-hosts`, default
~/.ssh/known_hosts); `--ssh-insecure` skips the check and says so on stderr.
A user other than root runs every command through `sudo -n`.

The `vagrant` provider runs `vagrant ssh-config` in `--vagrant-dir`, logs in
as it says (user, port, key), and takes each VM's address on the private
network (`--vagrant-subnet`, the Vagrantfile's 192.168.56.0/24) as the node's
address, the one other nodes and the clients use.

Teardown kills the daemons the harness started (pid files in each node's run
dir, checked against their HARNESS_DAEMON tag), removes the harness's
partition rules, and leaves the hosts' data and logs in place.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import UserError
from infra import hostops
from infra import state as st
from infra.net import heal_links_node, heal_node
from infra.nodes import Cluster, Node, Provider, ProvisionOptions, Say, check_ssh_options, parallel
from infra.remote import Remote, RemoteError

log = logging.getLogger(__name__)

HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class HostSpec:
    name: str
    host: str
    user: str | None = None
    port: int | None = None


def parse_host(spec: str, where: str = "host") -> HostSpec:
    """`[USER@]HOST[:PORT]`, HOST a name, an IPv4 address or `[IPv6]`."""
    user = None
    rest = spec
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_.-]*$", user):
            raise UserError(f"{where}: bad user {user!r} in {spec!r}")
    port = None
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise UserError(f"{where}: unclosed [ in {spec!r}")
        host, tail = rest[1:end], rest[end + 1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UserError(f"{where}: bad IPv6 address {host!r} in {spec!r}") from None
        if tail:
            if not tail.startswith(":"):
                raise UserError(f"{where}: unexpected {tail!r} after ] in {spec!r}")
            port = _port(tail[1:], spec, where)
    else:
        host, sep, port_text = rest.partition(":")
        if sep:
            port = _port(port_text, spec, where)
        if not host or not HOST_RE.match(host):
            raise UserError(f"{where}: bad host {host!r} in {spec!r}")
    return HostSpec(name=host, host=host, user=user, port=port)


def _port(text: str, spec: str, where: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise UserError(f"{where}: bad port {text!r} in {spec!r}")
    return int(text)


def parse_nodes_text(text: str, source: str = "nodes file") -> list[HostSpec]:
    """Parses a nodes file; every error names the file and line."""
    nodes: list[HostSpec] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}:{lineno}"
        tokens = line.split()
        if len(tokens) == 1:
            spec = parse_host(tokens[0], where)
        elif len(tokens) == 2:
            if not st.NODE_NAME_RE.match(tokens[0]):
                raise UserError(f"{where}: bad node name {tokens[0]!r} (letters, digits, '.', '_', '-')")
            h = parse_host(tokens[1], where)
            spec = HostSpec(tokens[0], h.host, h.user, h.port)
        else:
            raise UserError(f"{where}: expected `[NAME] [USER@]HOST[:PORT]`, got {line!r}")
        if not st.NODE_NAME_RE.match(spec.name):
            raise UserError(f"{where}: {spec.name!r} cannot be a node name; put a name before it")
        if any(n.name == spec.name for n in nodes):
            raise UserError(f"{where}: node {spec.name!r} appears twice")
        if any((n.host, n.port) == (spec.host, spec.port) for n in nodes):
            raise UserError(f"{where}: host {spec.host} appears twice")
        nodes.append(spec)
    if not nodes:
        raise UserError(f"{source}: no nodes in it")
    return nodes


def read_nodes_file(path: str) -> list[HostSpec]:
    try:
        text = Path(path).expanduser().read_text()
    except OSError as e:
        raise UserError(f"--nodes-file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UserError(f"--nodes-file {path}: not a text file") from None
    return parse_nodes_text(text, path)


@dataclass
class SshConfigHost:
    """One `Host` block of `ssh -G`/`vagrant ssh-config` style output."""

    alias: str
    options: dict[str, str] = field(default_factory=dict)  # lower-cased keys; first value wins
    identity_files: list[str] = field(default_factory=list)

    @property
    def hostname(self) -> str:
        return self.options.get("hostname", self.alias)

    @property
    def port(self) -> int:
        return int(self.options.get("port", "22"))

    @property
    def user(self) -> str | None:
        return self.options.get("user")

    @property
    def checks_host_keys(self) -> bool:
        return (self.options.get("stricthostkeychecking", "ask").lower() not in ("no", "off", "accept-new")
                and self.options.get("userknownhostsfile") != "/dev/null")


def parse_ssh_config(text: str, source: str = "vagrant ssh-config") -> list[SshConfigHost]:
    """Parses ssh_config text as `vagrant ssh-config` prints it."""
    hosts: list[SshConfigHost] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(\S+?)(?:\s*=\s*|\s+)(.*)$", line)
        if not m or not m.group(2).strip():
            raise UserError(f"{source}:{lineno}: expected `Keyword value`, got {line!r}")
        key, value = m.group(1).lower(), m.group(2).strip()
        try:
            words = shlex.split(value)
        except ValueError:
            raise UserError(f"{source}:{lineno}: unbalanced quotes in {line!r}") from None
        if key == "host":
            if len(words) != 1:
                raise UserError(f"{source}:{lineno}: expected one host alias, got {value!r}")
            hosts.append(SshConfigHost(words[0]))
            continue
        if not hosts:
            raise UserError(f"{source}:{lineno}: {m.group(1)} before any Host line")
        h = hosts[-1]
        joined = " ".join(words)
        if key == "identityfile":
            h.identity_files.append(os.path.expanduser(joined))
        elif key == "port" and not (joined.isdigit() and 1 <= int(joined) <= 65535):
            raise UserError(f"{source}:{lineno}: bad port {joined!r}")
        else:
            h.options.setdefault(key, joined)
    if not hosts:
        raise UserError(f"{source}: no hosts in it (are the VMs up? `vagrant up`)")
    return hosts


# ----------------------------------------------------------------------
# Provisioning


def _warn_insecure(reason: str) -> None:
    print(f"WARNING: {reason}: SSH host keys are NOT checked; anyone on the path can impersonate "
          f"these nodes. Use only on a network you trust.", file=sys.stderr)


def _make_nodes(cid: str, specs: list[tuple[str, Remote]], remote_dir: str) -> list[Node]:
    nodes = []
    for name, remote in specs:
        base = f"{remote_dir.rstrip('/')}/{name}"
        remote.run_dir = f"{base}/run"
        remote.tag_scope = f"{cid}/{name}"
        nodes.append(Node(name, remote.host, f"{base}/data", f"{base}/logs", f"{base}/run", remote))
    return nodes


def _finish(cid: str, provider: Provider, nodes: list[Node], control: str | None, extra: dict) -> Cluster:
    def prepare(node: Node) -> None:
        node.remote.run(f"mkdir -p {shlex.quote(node.data_dir)} {shlex.quote(node.log_dir)} "
                        f"{shlex.quote(node.run_dir)}", timeout=30)

    parallel(prepare, nodes)
    meta = {"owner_pid": os.getpid(), **extra}
    cluster = Cluster(nodes, provider, control, cid, st.cluster_dir(cid), meta)
    cluster.save_ready()
    return cluster


def _abandon(cid: str, nodes_or_remotes) -> None:
    for r in nodes_or_remotes:
        (r.remote if isinstance(r, Node) else r).close()
    shutil.rmtree(st.cluster_dir(cid), ignore_errors=True)


def provision_ssh(o: ProvisionOptions) -> Cluster:
    specs = read_nodes_file(o.nodes_file) if o.nodes_file else parse_nodes_text("\n".join(o.hosts or []), "--hosts")
    if o.ssh_insecure:
        _warn_insecure("--ssh-insecure")
    key = str(Path(o.ssh_key).expanduser()) if o.ssh_key else None
    known = str(Path(o.known_hosts).expanduser()) if o.known_hosts else None
    cid = st.reserve_cluster_id(lambda slot: True, o.cluster_id)
    remotes = [(s.name, Remote(s.name, s.host, port=s.port or o.ssh_port, user=s.user or o.ssh_user or "root",
                               key_file=key, known_hosts=known, insecure=o.ssh_insecure,
                               connect_timeout=o.connect_timeout)) for s in specs]
    nodes = _make_nodes(cid, remotes, o.remote_dir)
    try:
        parallel(lambda n: n.remote.connect(), nodes)
        for n in nodes:
            # The address other nodes (and partitions) know this node by: the IP we reached.
            n.address = n.remote.connect().get_transport().getpeername()[0]
        control = nodes[0].remote.local_address()
        return _finish(cid, SSH, nodes, control, {"provider_options": {"remote_dir": o.remote_dir}})
    except BaseException:
        _abandon(cid, nodes)
        raise


def vagrant_ssh_config(vagrant_dir: str) -> str:
    d = Path(vagrant_dir).expanduser()
    if not (d / "Vagrantfile").is_file():
        raise UserError(f"--vagrant-dir {vagrant_dir}: no Vagrantfile there")
    try:
        res = subprocess.run(["vagrant", "ssh-config"], cwd=d, capture_output=True, text=True, timeout=180)
    except FileNotFoundError:
        raise UserError("the vagrant provider needs `vagrant` installed") from None
    except subprocess.TimeoutExpired:
        raise UserError("`vagrant ssh-config` took longer than 180 s") from None
    if res.returncode != 0:
        lines = [l for l in (res.stderr or res.stdout).splitlines() if l.strip()]
        raise UserError(f"`vagrant ssh-config` failed: {lines[0].strip() if lines else res.returncode} "
                        "(are the VMs up? `vagrant up`)")
    return res.stdout


def pick_address(ip_addr_output: str, subnet: ipaddress.IPv4Network) -> str | None:
    """The first IPv4 address in `subnet` from `ip -4 -o addr show` output."""
    for m in re.finditer(r"\binet (\d+\.\d+\.\d+\.\d+)/\d+", ip_addr_output):
        if ipaddress.IPv4Address(m.group(1)) in subnet:
            return m.group(1)
    return None


def provision_vagrant(o: ProvisionOptions, config_text: str | None = None) -> Cluster:
    try:
        subnet = ipaddress.IPv4Network(o.vagrant_subnet, strict=False)
    except ValueError:
        raise UserError(f"--vagrant-subnet {o.vagrant_subnet!r} is not an IPv4 subnet") from None
    hosts = parse_ssh_config(config_text if config_text is not None else vagrant_ssh_config(o.vagrant_dir))
    for h in hosts:
        if not st.NODE_NAME_RE.match(h.alias):
            raise UserError(f"vagrant ssh-config: VM name {h.alias!r} cannot be a node name")
    insecure = o.ssh_insecure or (not o.known_hosts and not all(h.checks_host_keys for h in hosts))
    if insecure:
        _warn_insecure("--ssh-insecure" if o.ssh_insecure else "vagrant ssh-config says StrictHostKeyChecking no")
    known = str(Path(o.known_hosts).expanduser()) if o.known_hosts else None
    cid = st.reserve_cluster_id(lambda slot: True, o.cluster_id)
    remotes = []
    for h in hosts:
        key = o.ssh_key or (h.identity_files[0] if h.identity_files else None)
        remotes.append((h.alias, Remote(h.alias, h.hostname, port=h.port, user=o.ssh_user or h.user or "vagrant",
                                        key_file=key, known_hosts=known, insecure=insecure,
                                        connect_timeout=o.connect_timeout)))
    nodes = _make_nodes(cid, remotes, o.remote_dir)
    try:
        def find_address(n: Node) -> None:
            out = n.remote.run("ip -4 -o addr show", timeout=30).stdout
            addr = pick_address(out, subnet)
            if addr is None:
                raise UserError(f"{n.name}: no address in {subnet} (is the Vagrantfile's private network up?)")
            n.address = addr

        parallel(find_address, nodes)
        control = None
        for prefix in hostops.host_prefixes():
            try:
                iface = ipaddress.IPv4Interface(prefix)
            except ValueError:
                continue
            if iface.ip in subnet and iface.network.prefixlen < 32 and str(iface.ip) not in [n.address for n in nodes]:
                control = str(iface.ip)
                break
        return _finish(cid, VAGRANT, nodes, control,
                       {"provider_options": {"remote_dir": o.remote_dir, "vagrant_dir": o.vagrant_dir}})
    except BaseException:
        _abandon(cid, nodes)
        raise


def teardown_ssh(cluster: Cluster, say: Say = None) -> list[str]:
    """Stops the harness's daemons, partition rules and degraded links on every host; forgets the cluster."""
    removed: list[str] = []

    def one(node: Node) -> list[str]:
        done = []
        try:
            killed = []
            for name, pid in node.remote.daemons().items():
                if pid is not None and node.remote.signal(name, "KILL"):
                    killed.append(name)
                    done.append(f"{node.name}: daemon {name} (pid {pid})")
            for name in killed:  # stopped means gone when this returns
                node.remote.wait_stopped(name, 10)
            n = heal_node(node)
            if n:
                done.append(f"{node.name}: {n} partition rule(s)")
            links = heal_links_node(node)
            if any(links.values()):
                done.append(f"{node.name}: {links['rules']} lossy-link rule(s), {links['qdiscs']} bandwidth limit(s)")
        except RemoteError as e:
            done.append(f"{node.name}: not reached ({e}); its daemons and rules may remain")
        finally:
            node.remote.close()
        return done

    for lines in parallel(one, cluster.nodes):
        for line in lines:
            removed.append(line)
            if say:
                say(line)
    cdir = st.cluster_dir(cluster.cluster_id)
    if cdir.exists():
        hostops.remove_tree(cdir)
        line = f"state directory {cdir}"
        removed.append(line)
        if say:
            say(line)
    return removed


def validate_ssh(o: ProvisionOptions) -> None:
    check_ssh_options(o)
    if not (o.nodes_file or o.hosts):
        raise UserError("the ssh provider needs --nodes-file FILE or --hosts HOST,HOST,...")


SSH = Provider(name="ssh", summary="hosts you name", provision=provision_ssh, teardown=teardown_ssh,
               validate=validate_ssh)
VAGRANT = Provider(name="vagrant", summary="the VMs of a Vagrantfile", provision=provision_vagrant,
                   teardown=teardown_ssh, validate=check_ssh_options)
