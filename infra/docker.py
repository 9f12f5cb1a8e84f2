"""The `docker` provider: N nodes as containers on a private Docker network.

Node i of cluster c<slot> is the container `harness-c<slot>-<name>` with the
address .10+i of the cluster's subnet (default 10.214.<slot>.0/24, beside the
local provider's 10.213.<slot>.0/24) on the network `harness-c<slot>`, an
internal bridge network: no default route, so nothing a node sends leaves
it, while this machine (the control node, .1 on the bridge) reaches every
node directly, as with namespaces (the default route Docker gives a
container anyway is deleted). Containers get NET_ADMIN (iptables inside
for partitions), SYS_ADMIN and /dev/fuse (the faultfs), and an init that
reaps what the harness kills. Each node's data, logs and run dirs are under
/var/lib/harness/node inside its container.

The harness reaches nodes through the Docker API (`DockerRemote`, the same
methods as the SSH `Remote`: commands through `docker exec`, files as tar
archives). Containers and networks carry the label `harness.cluster=<id>`,
which is how `harness clean` finds them and the only thing it removes.

The node image `harness-node:<hash>` is built locally from Debian's packages
(scripts/build-node-image.sh, no image registry needed); the hash covers the
recipe and the Python packages a node runs, so a changed recipe builds a new
image and an unchanged one is never rebuilt. It is built when first asked
for: by the first docker cluster (saying so on stderr), or ahead of time by
`python -m infra.docker image` (`make docker-image`, which `make test`
runs), which also starts dockerd when none runs. The local default never
needs it, so `make run` does not build it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import ipaddress
import logging
import os
import posixpath
import shlex
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import UserError
from infra import hostops
from infra import state as st
from infra.nodes import (Cluster, Node, Provider, ProvisionOptions, Say, built_or_removed, check_named_nodes,
                         local_node_address, parallel,
                         parse_subnet)
from infra.remote import NodeShell, RemoteError, short_cmd

if TYPE_CHECKING:
    import docker

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "scripts" / "build-node-image.sh"
IMAGE = "harness-node"
LABEL = "harness.cluster"  # value: the cluster id; clean removes what carries it, nothing else
SUBNET_BASE = "10.214"  # 10.214.<slot>.0/24, one /24 per docker cluster
NODE_ROOT = "/var/lib/harness/node"
SOCKET = "unix:///var/run/docker.sock"
DOCKERD_LOG = Path("/var/log/harness-dockerd.log")
# What a node's Python runs: the own broker (kazoo, kafka-python, crc32c) and
# the faultfs (mfusepy); their versions come from requirements.lock.
NODE_PYTHON_PACKAGES = ("kazoo", "kafka-python", "crc32c", "mfusepy")
# Longest any one API call may take; commands end earlier, by the node's `timeout`.
API_TIMEOUT = 3600


# ----------------------------------------------------------------------------
# The daemon and the image


def api_client(timeout: float = API_TIMEOUT) -> docker.APIClient:
    # The Docker SDK (with requests) is imported only when Docker is used, not by every
    # `import infra.cluster` (which names this provider in its table).
    import docker

    return docker.APIClient(base_url=SOCKET, timeout=timeout)


def dockerd_running() -> bool:
    import docker

    try:
        api = api_client(timeout=5)
        try:
            return bool(api.ping())
        finally:
            api.close()
    except (docker.errors.DockerException, OSError):  # requests' errors are OSErrors
        return False


def start_dockerd(wait_s: float = 60.0) -> None:
    """Starts dockerd, detached, when none answers. It is told to leave this
    machine's iptables alone (the local provider's clusters share them) and to
    make no default bridge: the harness's networks are its own."""
    if dockerd_running():
        return
    if hostops.missing_tools(["dockerd"]):
        raise UserError("the docker provider needs dockerd: run `make setup` (it installs Debian's docker.io)")
    if os.geteuid() != 0:
        raise UserError("dockerd is not running, and starting it needs root")
    with open(DOCKERD_LOG, "ab") as out:
        subprocess.Popen(["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none"],
                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if dockerd_running():
            return
        time.sleep(0.5)
    raise UserError(f"dockerd did not answer within {wait_s:g} s; see {DOCKERD_LOG}")


def node_requirements() -> list[str]:
    """`name==version` of each node package, as pinned in requirements.lock."""
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name.lower() in NODE_PYTHON_PACKAGES:
            pins[name.lower()] = f"{name}=={version}"
    missing = [p for p in NODE_PYTHON_PACKAGES if p not in pins]
    if missing:
        raise UserError(f"requirements.lock pins no version of {', '.join(missing)}")
    return [pins[p] for p in NODE_PYTHON_PACKAGES]


def image_tag() -> str:
    """The node image's tag: a hash of its recipe and of the Python packages it holds."""
    h = hashlib.sha256(BUILD_SCRIPT.read_bytes())
    h.update("\n".join(node_requirements()).encode())
    return h.hexdigest()[:12]


def image_name() -> str:
    return f"{IMAGE}:{image_tag()}"


def image_exists(api: docker.APIClient, name: str) -> bool:
    import docker

    try:
        api.inspect_image(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_image() -> str:
    """Builds the node image unless it exists; returns its name."""
    start_dockerd()
    name = image_name()
    api = api_client()
    try:
        if image_exists(api, name):
            return name
    finally:
        api.close()
    if hostops.missing_tools(["debootstrap"]):
        raise UserError("building the docker node image needs debootstrap: run `make setup`")
    res = subprocess.run([str(BUILD_SCRIPT), image_tag(), sys.executable, *node_requirements()])
    if res.returncode != 0:
        raise UserError(f"building the docker node image failed ({BUILD_SCRIPT} exited {res.returncode})")
    return name


# ----------------------------------------------------------------------------
# Reaching a node


class DockerRemote(NodeShell):
    """A container reached through the Docker API: commands through `docker
    exec` (as root, under the node's `timeout`), files as tar archives.
    Thread-safe; one API client per node, opened lazily."""

    transport = "docker"

    def __init__(self, node: str, container: str, *, run_dir: str, tag_scope: str | None = None):
        super().__init__(node, run_dir, tag_scope)
        self.container = container
        self._api: docker.APIClient | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DockerRemote({self.node!r}, {self.container!r})"

    @property
    def where(self) -> str:
        return f"{self.node} (container {self.container})"

    def to_dict(self) -> dict:
        return {"container": self.container, "tag_scope": self.tag_scope}

    def connect(self) -> docker.APIClient:
        with self._lock:
            if self._api is None:
                self._api = api_client()
            return self._api

    def close(self) -> None:
        with self._lock:
            if self._api is not None:
                self._api.close()
                self._api = None

    def _call(self, what: str, fn):
        """Runs one API call; Docker's failures become a RemoteError naming the node."""
        import docker

        try:
            return fn(self.connect())
        except docker.errors.NotFound as e:
            raise RemoteError(self.node, what, f"not found: {e.explanation or e}") from None
        except docker.errors.APIError as e:
            raise RemoteError(self.node, what, f"Docker: {e.explanation or e}") from None
        except (docker.errors.DockerException, OSError) as e:  # requests' errors are OSErrors
            raise RemoteError(self.node, what, f"Docker daemon: {e}") from None

    def exec_bytes(self, cmd: str, timeout: float = 60, env: dict | None = None,
                   stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        line = self.command_line(cmd, env, timeout)
        what = short_cmd(cmd)
        if stdin is None:
            script = f"exec {line} </dev/null"
        else:
            # `docker exec` through the API takes no input without a raw socket: the
            # input goes in as a file first.
            tmp = f"/tmp/harness-stdin-{uuid.uuid4().hex}"
            self.write_file(tmp, stdin, 0o600)
            script = f"{line} <{tmp}; s=$?; rm -f {tmp}; exit $s"

        def run(api):
            started = time.monotonic()
            exec_id = api.exec_create(self.container, ["sh", "-c", script], stdout=True, stderr=True)["Id"]
            out, err = api.exec_start(exec_id, demux=True)
            return started, api.exec_inspect(exec_id).get("ExitCode"), out or b"", err or b""

        started, status, out, err = self._call(what, run)
        if status is None:
            raise RemoteError(self.node, what, "the container stopped before the command finished")
        self.check_timed_out(cmd, status, started, timeout)
        return status, out, err

    # -- files

    def write_file(self, remote_path: str, data: bytes, mode: int = 0o644) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(posixpath.basename(remote_path))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        self._put_archive(f"write {remote_path}", remote_path, buf.getvalue())

    def _put_archive(self, what: str, remote_path: str, archive) -> None:
        parent = posixpath.dirname(remote_path) or "/"
        try:
            self._call(what, lambda api: api.put_archive(self.container, parent, archive))
        except RemoteError as e:
            if "not found" not in e.detail:
                raise
            self.run(f"mkdir -p {shlex.quote(parent)}")
            if hasattr(archive, "seek"):
                archive.seek(0)
            self._call(what, lambda api: api.put_archive(self.container, parent, archive))

    def _archive(self, what: str, remote_path: str):
        """The tar stream of one file on the node and its member."""
        def get(api):
            stream, stat = api.get_archive(self.container, remote_path)
            return stream, stat

        try:
            stream, stat = self._call(what, get)
        except RemoteError as e:
            if "not found" in e.detail:
                raise RemoteError(self.node, what, "no such file") from None
            raise
        spool = tempfile.SpooledTemporaryFile(max_size=16 << 20)
        for chunk in stream:
            spool.write(chunk)
        spool.seek(0)
        tar = tarfile.open(fileobj=spool, mode="r")
        member = next((m for m in tar if m.isfile()), None)
        if member is None:
            raise RemoteError(self.node, what, "not a regular file")
        return tar, member

    def read_file(self, remote_path: str) -> bytes:
        tar, member = self._archive(f"read {remote_path}", remote_path)
        with tar:
            return tar.extractfile(member).read()

    def put(self, local_path: str, remote_path: str) -> None:
        if not os.path.isfile(local_path):
            raise UserError(f"{local_path}: no such file to upload to {self.node}")
        with tempfile.TemporaryFile() as archive:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                tar.add(local_path, arcname=posixpath.basename(remote_path))
            archive.seek(0)
            self._put_archive(f"put {local_path} -> {remote_path}", remote_path, archive)

    def get(self, remote_path: str, local_path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
        tar, member = self._archive(f"get {remote_path}", remote_path)
        with tar, open(local_path, "wb") as f:
            src = tar.extractfile(member)
            while chunk := src.read(1 << 20):
                f.write(chunk)


def save_node(node: Node) -> dict:
    """A docker node, as its cluster's state saves it."""
    return {"name": node.name, "address": node.address, "data_dir": node.data_dir, "log_dir": node.log_dir,
            "run_dir": node.run_dir, "docker": node.remote.to_dict()}


def load_node(d: dict, connect_timeout: float = 10.0) -> Node:
    """The node `save_node` saved, with a fresh DockerRemote (the API has no connect step to time out)."""
    remote = DockerRemote(d["name"], d["docker"]["container"], run_dir=d["run_dir"],
                          tag_scope=d["docker"].get("tag_scope"))
    return Node(d["name"], d["address"], d["data_dir"], d["log_dir"], d["run_dir"], remote)


def login_command(node: Node) -> str:
    """The shell command that logs a user in to a docker node."""
    return f"docker exec -it {node.remote.container} bash"


# ----------------------------------------------------------------------------
# Clusters


def container_name(cid: str, node: str) -> str:
    return f"{st.NETNS_PREFIX}{cid}-{node}"


def network_name(cid: str) -> str:
    return f"{st.NETNS_PREFIX}{cid}"


def _overlaps_host(net: ipaddress.IPv4Network) -> str | None:
    for prefix in hostops.host_prefixes():
        try:
            other = ipaddress.IPv4Network(prefix, strict=False)
        except ValueError:
            continue
        if not other.is_loopback and net.overlaps(other):
            return prefix
    return None


def _slot_is_free(api: docker.APIClient, slot: int, auto_subnet: bool) -> bool:
    name = network_name(f"c{slot}")
    if any(n["Name"] == name for n in api.networks(names=[name])):  # the filter matches prefixes too
        return False
    return not auto_subnet or _overlaps_host(ipaddress.IPv4Network(f"{SUBNET_BASE}.{slot}.0/24")) is None


def provision_docker(o: ProvisionOptions) -> Cluster:
    names = list(o.names) if o.names else [f"n{i}" for i in range(1, o.nodes + 1)]
    explicit_net = parse_subnet(o.subnet, len(names)) if o.subnet else None
    if explicit_net is not None:
        clash = _overlaps_host(explicit_net)
        if clash:
            raise UserError(f"--subnet {o.subnet} overlaps {clash}, which this machine already routes")
    start_dockerd()
    api = api_client()
    try:
        image = image_name()
        if not image_exists(api, image):
            print(f"docker: building the node image {image} from Debian's packages: once per recipe, "
                  "a few minutes (`make docker-image` builds it ahead)", file=sys.stderr, flush=True)
            build_image()
        cid = st.reserve_cluster_id(lambda slot: _slot_is_free(api, slot, explicit_net is None), o.cluster_id)
        net = explicit_net or ipaddress.IPv4Network(f"{SUBNET_BASE}.{st.slot_of(cid)}.0/24")
        return built_or_removed(cid, lambda: _bring_up(api, image, cid, names, net), remove_docker_cluster)
    finally:
        api.close()


def _bring_up(api: docker.APIClient, image: str, cid: str, names: list[str], net: ipaddress.IPv4Network) -> Cluster:
    import docker

    control = str(net.network_address + 1)
    labels = {LABEL: cid}
    state = st.read_state(cid) or {}
    state.update({"provider": "docker", "subnet": str(net), "control_address": control, "image": image,
                  "network": network_name(cid), "containers": [container_name(cid, n) for n in names],
                  "phase": "network", "owner_pid": os.getpid()})
    st.write_state(cid, state)

    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=str(net), gateway=control)])
    api.create_network(network_name(cid), driver="bridge", ipam=ipam, internal=True, labels=labels,
                       options={"com.docker.network.bridge.name": f"hbd-{cid}"})
    st.maybe_stall("network")

    state["phase"] = "containers"
    st.write_state(cid, state)
    host_config = api.create_host_config(
        cap_add=["NET_ADMIN", "SYS_ADMIN"], devices=["/dev/fuse:/dev/fuse:rwm"],
        security_opt=["apparmor:unconfined"], init=True, network_mode=network_name(cid))

    def start(item: tuple[int, str]) -> Node:
        i, name = item
        address = local_node_address(net, i)
        container = container_name(cid, name)
        endpoint = api.create_endpoint_config(ipv4_address=address)
        api.create_container(image, name=container, hostname=name, labels=labels, host_config=host_config,
                             networking_config=api.create_networking_config({network_name(cid): endpoint}))
        api.start(container)
        run_dir = f"{NODE_ROOT}/run"
        remote = DockerRemote(name, container, run_dir=run_dir, tag_scope=f"{cid}/{name}")
        # Docker gives internal networks a default route too; without it nothing leaves the network.
        remote.run(f"ip route del default 2>/dev/null; mkdir -p {NODE_ROOT}/data {NODE_ROOT}/logs {run_dir}")
        return Node(name, address, f"{NODE_ROOT}/data", f"{NODE_ROOT}/logs", run_dir, remote)

    nodes = parallel(start, list(enumerate(names, start=1)))
    st.maybe_stall("containers")
    cluster = Cluster(nodes, PROVIDER, control, cid, st.cluster_dir(cid),
                      meta={k: v for k, v in state.items() if k not in ("cluster_id", "provider", "control_address")})
    cluster.save_ready()
    return cluster


def teardown_docker(cluster: Cluster, say: Say = None) -> list[str]:
    cluster.close()
    return remove_docker_cluster(cluster.cluster_id, say)


def remove_docker_cluster(cid: str | None, say: Say = None) -> list[str]:
    """Removes the containers and networks labelled with cluster `cid` (every
    cluster's with None), and that cluster's state directory. Nothing without
    the harness's label is touched; with no Docker daemon there is nothing to
    remove. Returns (and passes to `say`) one line per thing removed."""
    removed: list[str] = []

    def note(what: str) -> None:
        removed.append(what)
        if say:
            say(what)

    import docker

    label = f"{LABEL}={cid}" if cid else LABEL
    if dockerd_running():
        api = api_client(timeout=120)
        try:
            for c in api.containers(all=True, filters={"label": label}):
                try:
                    api.remove_container(c["Id"], force=True, v=True)
                    note(f"container {c['Names'][0].lstrip('/')}")
                except docker.errors.NotFound:
                    pass
            for n in api.networks(filters={"label": label}):
                try:
                    api.remove_network(n["Id"])
                    note(f"docker network {n['Name']}")
                except docker.errors.NotFound:
                    pass
        finally:
            api.close()
    if cid:
        cdir = st.cluster_dir(cid)
        if cdir.exists() and (st.read_state(cid) or {}).get("provider") == "docker":
            hostops.remove_tree(cdir)
            note(f"state directory {cdir}")
    return removed


def labelled_cluster_ids() -> set[str]:
    """The ids of clusters that have containers or networks here (none without a daemon)."""
    if not dockerd_running():
        return set()
    api = api_client(timeout=60)
    try:
        found = [c["Labels"] for c in api.containers(all=True, filters={"label": LABEL})]
        found += [n.get("Labels") or {} for n in api.networks(filters={"label": LABEL})]
    finally:
        api.close()
    return {labels[LABEL] for labels in found if st.CLUSTER_ID_RE.match(labels.get(LABEL, ""))}


PROVIDER = Provider(
    name="docker", summary="containers on a private Docker network",
    provision=provision_docker, teardown=teardown_docker, validate=check_named_nodes,
    makes_nodes=True, find_clusters=labelled_cluster_ids, remove=remove_docker_cluster,
    save_node=save_node, load_node=load_node, login=login_command)


# ----------------------------------------------------------------------------
# `python -m infra.docker image`: what `make setup` runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.docker", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["image"], help="image: start dockerd if needed, build the node image")
    parser.add_argument("--strict", action="store_true", help="fail (exit 2) when Docker cannot be used")
    args = parser.parse_args(argv)
    try:
        build_image()
    except UserError as e:
        # The local provider needs no Docker: setup goes on without it, saying why.
        print(f"docker: warning: the docker provider will not work: {e}", file=sys.stderr)
        return 2 if args.strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
