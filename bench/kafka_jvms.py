"""Benchmark: Kafka's JVMs with and without the class-data archive `make
setup` made (infra/kafka_archive.py), alternated, on 127.0.0.1 alone.

    harness bench kafka-jvms [--version 3.9.2] [--tries 5] [--brokers 3] [--zookeeper]

Each try, once without the archive and once with it: StorageTool's format
of a lone KRaft node (wall and CPU time of the process); the node's broker
from its JVM's start to "Kafka Server started" (wall, and the JVM's CPU
time then); DumpLogSegments over the node's metadata log after the broker
stopped (wall and CPU); `--brokers` lone KRaft nodes started at once, as a
run starts its nodes (wall until the last serves, the JVMs' CPU summed);
with `--zookeeper` (a 3.x version), a ZooKeeper-mode broker of a
standalone ZooKeeper (lab/loopback_broker.py). The command lines are a
run's (`infra.kafka.java_argv`). Medians are printed and recorded
(bench/record.py); no targets.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench import record
from core.errors import UserError
from infra import kafka_dist
from infra.kafka import DEFAULT_VERSION, DUMP_CLASSES, cache_dir, has_zookeeper_mode
from infra.kafka_archive import LoneNode
from lab.loopback_broker import ZooKeeperServer

_TICK = os.sysconf("SC_CLK_TCK")


def configure(parser) -> None:
    """Flags, for `harness bench kafka-jvms`."""
    parser.add_argument("--version", default=DEFAULT_VERSION, help=f"Kafka version (default {DEFAULT_VERSION})")
    parser.add_argument("--tries", type=int, default=5, help="alternated tries of each (default 5)")
    parser.add_argument("--brokers", type=int, default=3, help="lone brokers started at once (default 3; 0: none)")
    parser.add_argument("--zookeeper", action="store_true", help="also a ZooKeeper-mode broker (Kafka 3.x)")


def _cpu_s(pid: int) -> float:
    """A live process's CPU time so far (user and system, every thread)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _tool(argv: list[str]) -> tuple[float, float, int]:
    """(wall, CPU, exit status) of a short-lived JVM run to its end."""
    started, cpu = time.monotonic(), _children_cpu_s()
    status = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.monotonic() - started, _children_cpu_s() - cpu, status


def _start(nodes: list[LoneNode], archive: Path | None) -> tuple[float, float]:
    """(wall until every node's server serves, the JVMs' CPU summed then), started at once."""
    started = time.monotonic()
    procs = [node.start(archive) for node in nodes]
    try:
        for node, proc in zip(nodes, procs):
            if not node.wait_started(proc):
                raise UserError(f"Kafka exited while starting; see {node.work / 'kafka.out'}")
        return time.monotonic() - started, sum(_cpu_s(p.pid) for p in procs)
    finally:
        for proc in procs:
            LoneNode.stop(proc)


def _try(work: Path, version: str, archive: Path | None, brokers: int, zookeeper: str | None) -> dict:
    """One try of each measure, with `archive` or without (None)."""
    out = {}
    node = LoneNode(work / "lone", version)
    started, cpu = time.monotonic(), _children_cpu_s()
    if node.format(archive) != 0:
        raise UserError(f"StorageTool's format failed in {node.work}")
    out["format"] = (time.monotonic() - started, _children_cpu_s() - cpu)
    out["start"] = _start([node], archive)
    segments = ",".join(str(p) for p in sorted((work / "lone" / "data" / "__cluster_metadata-0").glob("*.log")))
    for main in DUMP_CLASSES:  # the class moved to kafka-tools in 4.2
        wall, cpu, status = _tool(node.argv([main, "--cluster-metadata-decoder", "--files", segments],
                                            tool=True, archive=archive))
        if status == 0:
            out["dump"] = (wall, cpu)
            break
    if brokers:
        many = [LoneNode(work / f"many-{i}", version) for i in range(brokers)]
        for n in many:
            n.format()
        out[f"start_{brokers}"] = _start(many, archive)
    if zookeeper:
        out["start_zk"] = _start([LoneNode(work / "zk-mode", version, zookeeper=zookeeper)], archive)
    return out


def run(args) -> int:
    begun = record.start()
    if args.tries < 1 or args.brokers < 0:
        raise UserError("--tries: at least 1; --brokers: 0 or more")
    if args.zookeeper and not has_zookeeper_mode(args.version):
        raise UserError(f"--zookeeper: Kafka {args.version} has no ZooKeeper mode")
    archive = kafka_dist.class_archive(kafka_dist.kafka_home(args.version, cache_dir()))
    if not archive.is_file():
        raise UserError(f"no class-data archive of Kafka {args.version} for this JDK ({archive}): "
                        f"run `make setup` or `python -m infra.kafka_archive --version {args.version}`")
    tries: dict[str, dict[str, list]] = {"without": {}, "with": {}}
    with tempfile.TemporaryDirectory(prefix="harness-bench-kafka-jvms-") as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zookeeper").start() if args.zookeeper else None
        try:
            for i in range(args.tries):
                for label, used in (("without", None), ("with", archive)):
                    work = Path(tmp) / f"{i}-{label}"
                    chroot = f"{zk.connect}/bench-{i}-{label}" if zk else None
                    for what, (wall, cpu) in _try(work, args.version, used, args.brokers, chroot).items():
                        tries[label].setdefault(what, []).append((round(wall, 2), round(cpu, 2)))
                        print(f"try {i + 1} {label:7s} archive: {what:8s} {wall:5.2f} s wall, {cpu:5.2f} s CPU",
                              flush=True)
        finally:
            if zk is not None:
                zk.stop()
    figures = {}
    print(f"medians of {args.tries}, Kafka {args.version}:")
    for what in tries["without"]:
        row = []
        for label in ("without", "with"):
            walls, cpus = zip(*tries[label][what])
            figures[f"{what}.{label}.wall_s"] = round(statistics.median(walls), 2)
            figures[f"{what}.{label}.cpu_s"] = round(statistics.median(cpus), 2)
            row.append(f"{label} {figures[f'{what}.{label}.wall_s']:.2f} s wall, "
                       f"{figures[f'{what}.{label}.cpu_s']:.2f} s CPU")
        print(f"  {what:8s} " + "; ".join(row))
    record.write(args, "kafka-jvms", begun, figures, details={"version": args.version, "tries": tries})
    return 0
