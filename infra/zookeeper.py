"""A ZooKeeper ensemble, the first System: Debian's jars on 3 nodes (or 1).

Each ZooKeeper node gets `<data_dir>/zookeeper/zoo.cfg` and `data/myid`,
listens on its own address (client 2181, quorum 2888, election 3888 by
default), logs to `<log_dir>/zookeeper.log` and runs as the daemon
`zookeeper` of its node's Remote (so kill/pause go through pid files).

It runs `org.apache.zookeeper.server.quorum.QuorumPeerMain` from Debian's
`zookeeper` package (/usr/share/java), here and on the Vagrant VMs alike;
slf4j-simple sends its log to the daemon's log file. `setup` returns once a
quorum serves: one node reports `Mode: leader` (or `standalone`), a majority
are leader or follower, and a kazoo client from the control node wrote and
deleted a znode.
"""

from __future__ import annotations

import logging
import shlex
import socket
import time
from dataclasses import asdict, dataclass

from core.errors import UserError
from infra import state as st
from infra.nodes import Cluster, Node, parallel
from infra.remote import RemoteError, last_line

log = logging.getLogger(__name__)

JARS = "/usr/share/java"
DEBIAN_CLASSPATH = ":".join(f"{JARS}/{j}" for j in
                            ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar"))
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
DAEMON = "zookeeper"


@dataclass
class ZooKeeperOptions:
    nodes: int = 3
    client_port: int = 2181
    peer_port: int = 2888
    election_port: int = 3888
    tick_ms: int = 1000
    heap: str = "256m"
    java: str = "java"
    classpath: str = DEBIAN_CLASSPATH
    start_timeout: float = 30.0


def four_letter(address: str, port: int, word: str = "srvr", timeout: float = 1.0) -> str | None:
    """Sends a four-letter word from the control node; the answer, or None if none."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(word.encode())
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None


def parse_mode(srvr_output: str | None) -> str | None:
    """`leader`, `follower`, `standalone`, ... from a `srvr` answer; None if not serving."""
    for line in (srvr_output or "").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


class ZooKeeper:
    """The ensemble on the first `options.nodes` nodes of a cluster; a System,
    Processes, Pausable and LogSource of infra.system."""

    name = "zookeeper"

    def __init__(self, options: ZooKeeperOptions | None = None):
        self.options = options or ZooKeeperOptions()
        self._nodes: list[Node] = []

    # -- where things are -------------------------------------------------

    def nodes(self, cluster: Cluster | None = None) -> list[Node]:
        return list(self._nodes)

    @staticmethod
    def home(node: Node) -> str:
        return f"{node.data_dir}/zookeeper"

    def config_file(self, node: Node) -> str:
        return f"{self.home(node)}/zoo.cfg"

    def log_files(self, node: Node) -> list[str]:
        return [f"{node.log_dir}/zookeeper.log"] if node in self._nodes else []

    def connect_string(self) -> str:
        return ",".join(f"{n.address}:{self.options.client_port}" for n in self._nodes)

    def _config(self, node: Node) -> str:
        o = self.options
        lines = [f"tickTime={o.tick_ms}", "initLimit=10", "syncLimit=5",
                 f"dataDir={self.home(node)}/data", f"clientPort={o.client_port}",
                 f"clientPortAddress={node.address}", "maxClientCnxns=0",
                 "admin.enableServer=false", "4lw.commands.whitelist=*", "autopurge.purgeInterval=0"]
        if len(self._nodes) > 1:
            lines += [f"server.{i}={n.address}:{o.peer_port}:{o.election_port}"
                      for i, n in enumerate(self._nodes, start=1)]
        return "\n".join(lines) + "\n"

    def _argv(self, node: Node) -> list[str]:
        o = self.options
        return [o.java, "-Xms32m", f"-Xmx{o.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.net.preferIPv4Stack=true", "-Dzookeeper.admin.enableServer=false",
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
                "-cp", o.classpath, MAIN_CLASS, self.config_file(node)]

    # -- lifecycle ----------------------------------------------------------

    def setup(self, cluster: Cluster) -> None:
        o = self.options
        if o.nodes < 1:
            raise UserError(f"--zk-nodes must be at least 1, not {o.nodes}")
        if o.nodes > len(cluster.nodes):
            raise UserError(f"--zk-nodes {o.nodes} needs at least {o.nodes} nodes; "
                            f"the cluster has {len(cluster.nodes)}")
        for port in (o.client_port, o.peer_port, o.election_port):
            if not 1 <= port <= 65535:
                raise UserError(f"ZooKeeper port {port} is not a TCP port")
        self._nodes = cluster.nodes[: o.nodes]
        try:
            parallel(self._prepare, self._nodes)
            parallel(self.start, self._nodes)
            st.maybe_stall("zookeeper")
            # Nothing is faulty yet, so wait for every member, not just a quorum.
            self.wait_for_quorum(o.start_timeout, all_members=True)
        except BaseException:
            # Leave nothing of a failed ensemble behind (the cluster itself stays).
            self._stop_all()
            raise
        systems = cluster.meta.setdefault("systems", {})
        systems["zookeeper"] = {"nodes": [n.name for n in self._nodes], "options": asdict(o),
                                "connect": self.connect_string()}
        cluster.save()

    def _prepare(self, node: Node) -> None:
        """Checks java, jars and ports on the node, then writes zoo.cfg and myid."""
        o = self.options
        r = node.remote
        if r.pid_of(DAEMON) is not None:
            r.signal(DAEMON, "KILL")
            r.wait_stopped(DAEMON, 10)
        jars = " ".join(shlex.quote(j) for j in o.classpath.split(":") if j)
        check = (f"command -v {shlex.quote(o.java)} >/dev/null || {{ echo 'no java'; exit 3; }}; "
                 f"for j in {jars}; do [ -r \"$j\" ] || {{ echo \"missing $j\"; exit 4; }}; done; "
                 "ss -Htlnp 2>/dev/null || ss -Htln")
        res = r.run(check, check=False, timeout=30)
        if res.exit_status == 3:
            raise UserError(f"{node.name}: `{o.java}` not found; install openjdk-17-jre-headless")
        if res.exit_status == 4:
            raise UserError(f"{node.name}: ZooKeeper jar {res.stdout.split()[-1]} missing; "
                            "install Debian's zookeeper package (make setup / the Vagrantfile does)")
        if res.exit_status != 0:
            raise RemoteError(node.name, "check ZooKeeper prerequisites", last_line(res.stderr) or "failed")
        busy = ports_in_use(res.stdout, node.address, [o.client_port, o.peer_port, o.election_port])
        if busy:
            port, who = busy[0]
            raise UserError(f"{node.name}: port {port} on {node.address} is already in use"
                            + (f" by {who}" if who else "") + "; free it or pick another ZooKeeper port")
        myid = self._nodes.index(node) + 1
        home = self.home(node)
        r.run(f"rm -rf {shlex.quote(home)}/data && mkdir -p {shlex.quote(home)}/data {shlex.quote(node.log_dir)}")
        r.write_file(self.config_file(node), self._config(node).encode())
        r.write_file(f"{home}/data/myid", f"{myid}\n".encode())

    def start(self, node: Node) -> None:
        """Starts ZooKeeper on the node unless it already runs there."""
        if node.remote.pid_of(DAEMON) is not None:
            return
        node.remote.start_daemon(DAEMON, self._argv(node), f"{node.log_dir}/zookeeper.log",
                                 cwd=self.home(node))

    def kill(self, node: Node) -> None:
        if node.remote.signal(DAEMON, "KILL"):
            node.remote.wait_stopped(DAEMON, 10)

    def process_state(self, node: Node) -> str | None:
        """ZooKeeper's process state letter on the node (R, S, T, ...), None when not running."""
        return node.remote.process_state(DAEMON)

    def pause(self, node: Node) -> None:
        node.remote.signal(DAEMON, "STOP")

    def resume(self, node: Node) -> None:
        node.remote.signal(DAEMON, "CONT")

    def _stop_all(self) -> None:
        def stop(node: Node) -> None:
            try:
                node.remote.signal(DAEMON, "KILL")
            except RemoteError as e:
                log.warning("%s: stopping ZooKeeper: %s", node.name, e)

        parallel(stop, self._nodes)

    def teardown(self, cluster: Cluster) -> None:
        """Kills every ZooKeeper and removes its data (its log stays for collection)."""
        self._stop_all()

        def wipe(node: Node) -> None:
            node.remote.wait_stopped(DAEMON, 10)
            node.remote.run(f"rm -rf {shlex.quote(self.home(node))}", check=False)

        parallel(wipe, self._nodes)
        cluster.meta.get("systems", {}).pop("zookeeper", None)
        cluster.save()

    # -- observing ----------------------------------------------------------

    def modes(self) -> dict[str, str | None]:
        """Each ZooKeeper node's mode (leader/follower/standalone), None if not serving."""
        port = self.options.client_port
        answers = parallel(lambda n: parse_mode(four_letter(n.address, port)), self._nodes)
        return dict(zip([n.name for n in self._nodes], answers))

    def quorum_leaders(self) -> list[str]:
        """The nodes that say they lead the ensemble (one, unless it is splitting)."""
        return [name for name, mode in self.modes().items() if mode in ("leader", "standalone")]

    def has_quorum(self) -> bool:
        modes = self.modes()
        if len(self._nodes) == 1:
            return list(modes.values()) == ["standalone"]
        serving = [m for m in modes.values() if m in ("leader", "follower")]
        return "leader" in serving and len(serving) > len(self._nodes) // 2

    def wait_for_quorum(self, timeout: float = 30.0, all_members: bool = False) -> None:
        """Returns once a quorum (or, with all_members, every member) serves, and a
        write from the control node succeeded; UserError otherwise."""
        deadline = time.monotonic() + timeout

        def ready() -> bool:
            if not self.has_quorum():
                return False
            return not all_members or all(m is not None for m in self.modes().values())

        while not ready():
            if time.monotonic() > deadline:
                what = "not every member serves" if all_members and self.has_quorum() else "formed no quorum"
                raise UserError(f"ZooKeeper {what} within {timeout:g}s: {self._describe()}")
            time.sleep(0.1)
        remaining = max(5.0, deadline - time.monotonic())
        try:
            self._write_check(remaining)
        except Exception as e:  # kazoo's errors are many; all mean "not serving yet"
            raise UserError(f"ZooKeeper quorum does not serve writes from the control node: "
                            f"{type(e).__name__}: {e}") from None

    def _write_check(self, timeout: float) -> None:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.connect_string(), timeout=max(4.0, timeout / 2))
        logging.getLogger("kazoo").setLevel(logging.ERROR)
        try:
            client.start(timeout=timeout)
            path = client.create("/harness-ready-", b"", ephemeral=True, sequence=True)
            client.delete(path)
        finally:
            client.stop()
            client.close()

    def client(self, timeout: float = 10.0):
        """A started kazoo client for the ensemble (the caller stops it)."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.connect_string(), timeout=timeout)
        client.start(timeout=timeout)
        return client

    def _describe(self) -> str:
        parts = []
        for node, mode in zip(self._nodes, self.modes().values()):
            if mode:
                parts.append(f"{node.name} {mode}")
                continue
            try:
                running = node.remote.pid_of(DAEMON) is not None
                tail = node.remote.run(f"tail -n 3 {shlex.quote(node.log_dir)}/zookeeper.log", check=False).stdout
            except RemoteError:
                running, tail = False, ""
            state = "not serving" if running else "not running"
            parts.append(f"{node.name} {state}" + (f" ({last_line(tail)[:160]})" if tail.strip() else ""))
        return "; ".join(parts)

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> "ZooKeeper | None":
        """The ensemble that `setup` recorded in the cluster's state, if any."""
        info = cluster.meta.get("systems", {}).get("zookeeper")
        if not info:
            return None
        zk = cls(ZooKeeperOptions(**info["options"]))
        zk._nodes = [cluster.node(n) for n in info["nodes"]]
        return zk


def ports_in_use(ss_output: str, address: str, ports: list[int]) -> list[tuple[int, str]]:
    """(port, process) for each of `ports` that `ss -Htln[p]` shows bound on address or a wildcard."""
    busy = []
    for line in ss_output.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        local = fields[3]
        host, _, port_text = local.rpartition(":")
        if not port_text.isdigit() or int(port_text) not in ports:
            continue
        host = host.strip("[]").split("%")[0]
        if host in (address, "0.0.0.0", "*", "::", ""):
            who = ""
            if "users:" in line:
                who = line[line.index("users:"):].strip()
            busy.append((int(port_text), who))
    return busy
