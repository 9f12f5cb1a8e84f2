"""The own broker as a System: one `python -m broker` per node.

Broker ids follow the nodes' order (n1 is broker 1), each listens on its
node's address, and all share the run's ZooKeeper ensemble under a chroot.
Settings are written as a properties file with Kafka's names; planted bugs
(`--debug-bug`) are passed on the command line, never through the file.

Nodes that share the control machine's filesystem (the local provider) run
this checkout's code with this venv's Python. Other nodes get the broker's
code (`broker/`, which imports nothing else of the project) uploaded into
their run folder and run it with `python3`, whose packages (kazoo,
kafka-python, crc32c) the Vagrantfile provisions.
"""

from __future__ import annotations

import importlib.metadata
import io
import re
import shlex
import sys
import tarfile
import time
from datetime import datetime
from pathlib import Path

from core.errors import UserError
from infra import zk_state
from infra.brokers import BrokerBase
from infra.nodes import Cluster, Node, parallel
from infra.system import DUMP_NICE, SystemKind, SystemOption, count_lines

PORT = 9092
DAEMON = "broker"
CHROOT = "/own"
REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("broker",)  # what a broker process imports from the project
# broker/partition.py's note_truncation, after broker/cli.py's timestamp and level:
# "2026-11-23 09:55:03.366 INFO [broker.partition] TRUNCATING harness-4 to 3225 (log end 3230;
#  leader 5, epoch 3; reason: leader epoch; leader epoch 2 ends at 3225 on leader 5; hw 3225)"
TRUNCATING_RE = re.compile(
    r"^(?P<logged>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \S+ \[[^\]]*\] TRUNCATING (?P<topic>\S+)-(?P<partition>\d+) "
    r"to (?P<offset>\d+) \(log end (?P<log_end>\d+); leader (?P<leader>-?\d+), epoch (?P<epoch>-?\d+); "
    r"reason: (?P<reason>[^;)]+)", re.M)


class OwnBroker(BrokerBase):
    name = "own"
    title = "the broker"
    daemon = DAEMON
    data_subdir = "broker"
    config_name = "broker.properties"
    chroot = CHROOT
    truncation_logs = ("broker.log",)

    def __init__(self, zookeeper_connect: str, settings: dict | None = None, debug_bugs: tuple[str, ...] = (),
                 port: int = PORT, start_timeout: float = 30.0):
        super().__init__()
        self.zookeeper_connect = zookeeper_connect
        self.settings = dict(settings or {})
        self.debug_bugs = tuple(debug_bugs)
        self.port = port
        self.start_timeout = start_timeout

    def log_files(self, node: Node) -> list[str]:
        return [f"{node.log_dir}/broker.log", f"{node.log_dir}/broker.out"]

    def version(self) -> str:
        try:
            return f"own {importlib.metadata.version('harness')}"
        except importlib.metadata.PackageNotFoundError:  # a checkout used without installing it
            return "own (not installed)"

    # -- lifecycle

    def setup(self, cluster: Cluster) -> None:
        self.place(cluster)
        zk_state.fresh_chroot(self.zookeeper_connect, CHROOT)
        parallel(self._prepare, self._nodes)
        parallel(self.start, self._nodes)
        self.wait_serving(self._nodes)

    def _prepare(self, node: Node) -> None:
        r = node.remote
        # Empty the data dir but keep it: it may be a mount point (the disk-fault filesystem).
        data = self.data_dir(node)
        # The logs start empty too (a restart after a kill appends): a run's logs hold that run only.
        r.run(f"mkdir -p {data} {node.log_dir} {node.run_dir} && find {data} -mindepth 1 -delete"
              f" && rm -f {' '.join(self.log_files(node))}")
        text = "".join(f"{k}={v}\n" for k, v in sorted(self.settings.items()))
        r.write_file(self.config_file(node), text.encode())
        if not self._local:
            self._upload_code(node)

    def _upload_code(self, node: Node) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for package in PACKAGES:
                tar.add(REPO / package, arcname=package,
                        filter=lambda t: None if "__pycache__" in t.name else t)
        target = f"{node.run_dir}/code"
        node.remote.write_file(f"{node.run_dir}/code.tar.gz", buf.getvalue())
        node.remote.run(f"rm -rf {target} && mkdir -p {target} && tar -xzf {node.run_dir}/code.tar.gz -C {target}")

    def _argv(self, node: Node) -> tuple[list[str], dict, str]:
        python = sys.executable if self._local else "python3"
        code = str(REPO) if self._local else f"{node.run_dir}/code"
        argv = [python, "-m", "broker", "--id", str(self.broker_id(node)),
                "--listen", f"{node.address}:{self.port}",
                "--zookeeper", self.zookeeper_connect + CHROOT,
                "--data-dir", self.data_dir(node), "--config", self.config_file(node),
                "--log-file", f"{node.log_dir}/broker.log"]
        for bug in self.debug_bugs:
            argv += ["--debug-bug", bug]
        return argv, {"PYTHONPATH": code, "PYTHONUNBUFFERED": "1"}, code

    def start(self, node: Node) -> None:
        argv, env, cwd = self._argv(node)
        node.remote.start_daemon(DAEMON, argv, f"{node.log_dir}/broker.out", env=env, cwd=cwd)

    # -- evidence

    def dump_log(self, node: Node, topic: str, dest: str) -> int:
        """The node's records of `topic` (infra.system.LogDump), read by `python -m broker.dump`
        with the broker's own storage code (`dump_data_dir`)."""
        argv, _env, code = self._argv(node)
        return dump_data_dir(node, self.data_dir(node), topic, dest, argv[0], code)

    # -- state, for targeted faults

    def wait_serving(self, nodes: list[Node]) -> None:
        """Until every broker is registered in ZooKeeper and knows every other
        one live (or the log says why not). A topic is placed over the live
        brokers the broker that creates it knows, which its ZooKeeper watch
        tells it some milliseconds after a registration: a topic created
        right after the last broker registered was once placed over four of
        five brokers, the fifth holding no replica."""
        want = {self.broker_id(n) for n in nodes}
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            registered = zk_state.registered_brokers(self.zookeeper_connect, CHROOT)
            if want <= registered and all(self._knows(n, want) for n in nodes):
                return
            dead = [n for n in nodes if self.process_state(n) is None]
            if dead:
                node = dead[0]
                tail = node.remote.run(f"tail -n 3 {node.log_dir}/broker.out {node.log_dir}/broker.log 2>/dev/null",
                                       check=False).stdout.strip().splitlines()
                raise UserError(f"the own broker on {node.name} exited at start: {tail[-1] if tail else 'no output'}")
            time.sleep(0.2)
        raise UserError(f"the own brokers did not all register in ZooKeeper and know each other within "
                        f"{self.start_timeout:.0f} s "
                        f"(registered: {sorted(zk_state.registered_brokers(self.zookeeper_connect, CHROOT))})")

    def _knows(self, node: Node, want: set[int]) -> bool:
        """Whether the broker on `node` lists every broker of `want` in its metadata (its live ones)."""
        meta = self.metadata(timeout=2.0, bootstrap=f"{node.address}:{self.port}")
        return meta is not None and want <= set(meta.brokers)

    def leaders(self, topic: str) -> dict[int, str]:
        return self.named_leaders(zk_state.leaders(self.zookeeper_connect, CHROOT, topic))

    def replicas(self, topic: str) -> dict[int, list[str]]:
        return self.named_replicas(zk_state.replicas(self.zookeeper_connect, CHROOT, topic))

    def controller(self) -> str | None:
        return self.node_of(zk_state.controller(self.zookeeper_connect, CHROOT))

    def partition_states(self, topic: str) -> dict[int, tuple[str | None, int | None, list[str]]]:
        """partition -> (leader, epoch, ISR) as the controller wrote them in ZooKeeper."""
        return self.named_states(self.zk_reader().partition_states(topic))

    @staticmethod
    def parse_truncations(text: str) -> list[dict]:
        """The broker's TRUNCATING lines (broker/partition.py `note_truncation`)."""
        out = []
        for m in TRUNCATING_RE.finditer(text):
            leader = int(m["leader"])
            out.append({"logged": datetime.strptime(m["logged"], "%Y-%m-%d %H:%M:%S.%f"), "topic": m["topic"],
                        "partition": int(m["partition"]), "offset": int(m["offset"]),
                        "log_end": int(m["log_end"]), "epoch": int(m["epoch"]) if int(m["epoch"]) >= 0 else None,
                        "leader_id": leader if leader >= 0 else None, "reason": m["reason"].strip()})
        return out


SYSTEM = SystemKind(
    name="own",
    summary="the project's own Kafka-compatible broker (broker/)",
    make=lambda zookeeper_connect, settings, options: OwnBroker(zookeeper_connect, settings,
                                                                tuple(options["debug_bug"])),
    options=(SystemOption("debug_bug", (), "plant a known bug in the own broker (repeatable)",
                          repeatable=True, metavar="NAME"),),
)


def dump_data_dir(node: Node, data_dir: str, topic: str, dest: str, python: str, code: str,
                  *options: str) -> int:
    """`python -m broker.dump` over `data_dir` on the node (the own broker's, or
    Apache Kafka's: the same on-disk format), the broker's code in folder
    `code` there; gzip'd on the node and downloaded to `dest`; the records
    dumped. Raises RemoteError if it fails (exit 3: a batch it refused, with
    `--refuse-compressed` among `options`)."""
    out = f"{node.run_dir}/disk-dump.jsonl"
    q = shlex.quote
    node.remote.run(f"cd {q(code)} && {DUMP_NICE} {q(python)} -m broker.dump --data-dir {q(data_dir)} "
                    f"--topic {q(topic)} {' '.join(q(o) for o in options)} > {q(out)} && "
                    f"{DUMP_NICE} gzip -1 -f {q(out)}", env={"PYTHONPATH": code}, timeout=600)
    node.remote.get(out + ".gz", dest)
    return count_lines(dest)
