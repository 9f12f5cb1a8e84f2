"""Local clusters for tests and benchmarks: a standalone ZooKeeper from the
Debian package's jars and N brokers as subprocesses on 127.0.0.1.

    with ZooKeeperServer(base_dir / "zk") as zk, LocalCluster(3, base_dir, zk.connect) as cluster:
        cluster.start()
        cluster.kill(1); cluster.restart(1)

Everything started here is tracked by pid and stopped by stop()/__exit__,
also when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from core.waiting import free_ports, wait_for

ZK_JARS = ["/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar"]
ZK_PORTS = range(21810, 21900)
BROKER_PORTS = range(29100, 29900)


class ZooKeeperServer:
    """A standalone ZooKeeper (QuorumPeerMain) with its data under `directory`."""

    def __init__(self, directory, port: int | None = None):
        self.dir = Path(directory)
        self.port = port or free_ports(1, ZK_PORTS)[0]
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text("\n".join([
            "tickTime=500", f"dataDir={self.dir / 'data'}", f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1", "maxClientCnxns=0", "admin.enableServer=false",
            "minSessionTimeout=1000", "maxSessionTimeout=60000", "4lw.commands.whitelist=ruok,srvr",
        ]) + "\n")
        log = open(self.dir / "zookeeper.log", "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false", "-cp", ":".join(ZK_JARS),
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        wait_for(self._ruok, timeout, 0.1, f"ZooKeeper on port {self.port}", retry_on=(Exception,))
        return self

    def _ruok(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.dir / 'zookeeper.log'}")
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class BrokerProcess:
    def __init__(self, broker_id: int, port: int, data_dir: Path, args: list[str]):
        self.id = broker_id
        self.port = port
        self.data_dir = data_dir
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.paused = False

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class LocalCluster:
    """N brokers on 127.0.0.1 sharing one ZooKeeper."""

    def __init__(self, n: int, base_dir, zookeeper: str, settings: dict | None = None,
                 bugs: list[str] | None = None, ports: list[int] | None = None):
        self.n = n
        self.base = Path(base_dir)
        self.zookeeper = zookeeper
        self.settings = {"zookeeper.session.timeout.ms": "4000", "group.initial.rebalance.delay.ms": "0",
                         "replica.lag.time.max.ms": "10000", **(settings or {})}
        self.bugs = list(bugs or [])
        ports = ports or free_ports(n, BROKER_PORTS)
        self.brokers = {}
        for i in range(n):
            bid = i + 1
            data_dir = self.base / f"broker{bid}"
            args = [sys.executable, "-m", "broker", "--id", str(bid), "--listen", f"127.0.0.1:{ports[i]}",
                    "--zookeeper", zookeeper, "--data-dir", str(data_dir)]
            for k, v in self.settings.items():
                args += ["--set", f"{k}={v}"]
            for b in self.bugs:
                args += ["--debug-bug", b]
            self.brokers[bid] = BrokerProcess(bid, ports[i], data_dir, args)
        self._zk = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values())

    def bootstrap_of(self, *ids) -> str:
        return ",".join(f"127.0.0.1:{self.brokers[i].port}" for i in ids)

    # -- processes -----------------------------------------------------------------

    def start_broker(self, bid: int) -> None:
        b = self.brokers[bid]
        if b.alive:
            return
        b.data_dir.mkdir(parents=True, exist_ok=True)
        out = open(b.data_dir / "stdout.log", "ab")
        env = dict(os.environ)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
        b.proc = subprocess.Popen(b.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=env, start_new_session=True)
        out.close()
        b.paused = False

    def start(self, timeout: float = 60.0) -> "LocalCluster":
        for bid in self.brokers:
            self.start_broker(bid)
        self.wait_registered(list(self.brokers), timeout)
        return self

    def kill(self, bid: int) -> None:
        """kill -9."""
        b = self.brokers[bid]
        if b.proc is not None and b.proc.poll() is None:
            if b.paused:
                os.kill(b.proc.pid, signal.SIGCONT)
            b.proc.kill()
            b.proc.wait(10)
        b.paused = False

    def stop_broker(self, bid: int, timeout: float = 20.0) -> None:
        b = self.brokers[bid]
        if b.proc is not None and b.proc.poll() is None:
            if b.paused:
                os.kill(b.proc.pid, signal.SIGCONT)
            b.proc.terminate()
            try:
                b.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait(10)
        b.paused = False

    def pause(self, bid: int) -> None:
        b = self.brokers[bid]
        os.kill(b.proc.pid, signal.SIGSTOP)
        b.paused = True

    def resume(self, bid: int) -> None:
        b = self.brokers[bid]
        if b.paused and b.alive:
            os.kill(b.proc.pid, signal.SIGCONT)
        b.paused = False

    def restart(self, bid: int, timeout: float = 60.0) -> None:
        self.kill(bid)
        self.start_broker(bid)
        self.wait_registered([bid], timeout, new_pid=True)

    def stop(self) -> None:
        for bid in self.brokers:
            try:
                self.kill(bid)
            except Exception:
                pass
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:
                pass
            self._zk = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- ZooKeeper views -------------------------------------------------------------

    @property
    def zk(self):
        if self._zk is None:
            from kazoo.client import KazooClient
            self._zk = KazooClient(hosts=self.zookeeper, timeout=10)
            self._zk.start(timeout=30)
        return self._zk

    def registered(self) -> dict[int, int]:
        """Registered broker id -> pid written in its registration."""
        out = {}
        for child in self.zk.get_children("/brokers/ids") if self.zk.exists("/brokers/ids") else []:
            try:
                out[int(child)] = json.loads(self.zk.get(f"/brokers/ids/{child}")[0]).get("pid", 0)
            except Exception:
                pass
        return out

    def wait_registered(self, ids, timeout: float = 60.0, new_pid: bool = False) -> None:
        def ok():
            reg = self.registered()
            for bid in ids:
                b = self.brokers[bid]
                if not b.alive:
                    raise RuntimeError(f"broker {bid} exited; see {b.log_file}")
                if bid not in reg or (new_pid and reg[bid] != b.proc.pid):
                    return False
            return True
        wait_for(ok, timeout, 0.1, f"brokers {ids} to register", retry_on=(Exception,))

    def controller(self) -> int:
        data, _ = self.zk.get("/controller")
        return int(json.loads(data)["brokerid"])

    def state(self, topic: str, partition: int) -> dict:
        data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data)

    def leader(self, topic: str, partition: int) -> int:
        return self.state(topic, partition)["leader"]

    def isr(self, topic: str, partition: int) -> list[int]:
        return self.state(topic, partition)["isr"]

    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     timeout: float = 30.0, config: dict | None = None) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while True:
            fut = admin.create_topics([NewTopic(topic, partitions, replication_factor, config=config or {})],
                                      operation_timeout=timeout)[topic]
            try:
                fut.result(timeout)
                break
            except KafkaException as e:
                # Brokers register in ZooKeeper before each has seen the others' registrations
                # (a watch later): one that still counts fewer live brokers refuses the
                # replication factor and creates nothing, so asking again is safe.
                if e.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.wait_leaders(topic, partitions, timeout)

    def wait_leaders(self, topic: str, partitions: int, timeout: float = 30.0, isr_size: int | None = None):
        def ok():
            for p in range(partitions):
                st = self.state(topic, p)
                if st["leader"] < 0:
                    return False
                if isr_size is not None and len(st["isr"]) < isr_size:
                    return False
            return True
        wait_for(ok, timeout, 0.1, f"leaders of {topic}", retry_on=(Exception,))

    def log_text(self, bid: int) -> str:
        try:
            return self.brokers[bid].log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""
