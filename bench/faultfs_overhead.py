"""Benchmark: what the faultfs (in passthrough) costs the brokers' acks=all throughput.

    .venv/bin/python -m bench.faultfs_overhead [--systems own,kafka] [--records 100000]
        [--size 100] [--repeats 3] [--json out.json]

For each system and repeat, two runs that differ only in the data dirs:
`plain` (the node's directory as it is) and `faultfs` (the faultfs mounted
over it in passthrough, as a run with disk faults has it). Each run brings
up a local 3-node cluster (namespaces, one-node ZooKeeper), the system on
all three nodes, a topic of 3 partitions x RF 3 with min.insync.replicas=2,
then one confluent-kafka producer (acks=all, idempotent, linger.ms=5) sends
--records values of --size bytes as fast as it can: throughput, latency
from produce() to delivery (p50/p99, queueing included), and the CPU seconds
the three faultfs daemons used. Variants alternate within a repeat, so that
the machine's load drifts over both alike; the table reports medians, and
they are recorded (bench/record.py), figures named by system and data dir
(`own.faultfs_over_plain`). A question, not a goal: no target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench import record
from bench.produce_loop import cpu_seconds, produce_timed
from infra import faultfs
from infra.cluster import ProvisionOptions, provision
from infra.kafka import KafkaSystem
from infra.own_broker import OwnBroker
from infra.zookeeper import ZooKeeper, ZooKeeperOptions
from workloads.config import WorkloadConfig
from workloads.topic import create_topic

TOPIC = "bench"


def one_run(system_name: str, mounted: bool, records: int, size: int) -> dict:
    """One cluster, one system, data dirs plain or under the faultfs: the produce loop's numbers."""
    settings = {"default.replication.factor": 3, "min.insync.replicas": 2, "num.partitions": 3,
                "unclean.leader.election.enable": "false"}
    cluster = provision("local", ProvisionOptions(nodes=3))
    zk = system = mounts = None
    try:
        zk = ZooKeeper(ZooKeeperOptions(nodes=1))
        zk.setup(cluster)
        if system_name == "own":
            system = OwnBroker(zk.connect_string(), settings)
        else:
            system = KafkaSystem(zk.connect_string(), settings)
        if mounted:
            mounts = faultfs.mount_system(cluster, system)
        system.setup(cluster)
        create_topic(system.bootstrap(), WorkloadConfig(topic=TOPIC, partitions=3, replication_factor=3,
                                                        topic_settings={"min.insync.replicas": "2"}))
        pids = [m.pid for m in mounts.mounts.values()] if mounts else []
        cpu0 = [cpu_seconds(p) for p in pids]
        result = produce_timed(system.bootstrap(), TOPIC, records, size, flush_timeout=300)
        result["faultfs_cpu_s"] = sum(cpu_seconds(p) - c for p, c in zip(pids, cpu0))
        return result
    finally:
        if system is not None:
            system.teardown(cluster)
        if mounts is not None:
            faultfs.unmount_system(cluster, mounts)
        if zk is not None:
            zk.teardown(cluster)
        cluster.teardown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="own,kafka", help="comma list of own, kafka")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", metavar="FILE", help="write every measurement here")
    record.add_arguments(ap)
    args = ap.parse_args()
    begun = record.start()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems or set(systems) - {"own", "kafka"} or args.records < 1 or args.repeats < 1:
        ap.error("--systems takes own and/or kafka; --records and --repeats must be positive")
    runs: dict = {s: {"plain": [], "faultfs": []} for s in systems}
    for r in range(args.repeats):
        for s in systems:
            order = ("plain", "faultfs") if r % 2 == 0 else ("faultfs", "plain")
            for variant in order:
                res = one_run(s, variant == "faultfs", args.records, args.size)
                runs[s][variant].append(res)
                print(f"{s:5} {variant:7} repeat {r + 1}: {res['records_per_s']:9,.0f} records/s  "
                      f"p50 {res['p50_ms']:6.1f} ms  p99 {res['p99_ms']:7.1f} ms  "
                      f"faultfs CPU {res['faultfs_cpu_s']:.1f} s  errors {res['errors']}", flush=True)
    print(f"\nmedians of {args.repeats}, {args.records:,} x {args.size} B, acks=all, 3 partitions x RF 3:")
    print("| system | data dir | records/s | p50 ms | p99 ms | faultfs CPU s (3 daemons) | throughput vs plain |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    figures = {}
    for s in systems:
        base = statistics.median(x["records_per_s"] for x in runs[s]["plain"])
        for variant in ("plain", "faultfs"):
            xs = runs[s][variant]
            tput = statistics.median(x["records_per_s"] for x in xs)
            print(f"| {s} | {variant} | {tput:,.0f} | {statistics.median(x['p50_ms'] for x in xs):.1f} | "
                  f"{statistics.median(x['p99_ms'] for x in xs):.1f} | "
                  f"{statistics.median(x['faultfs_cpu_s'] for x in xs):.1f} | {tput / base:.2f} |")
            figures.update({f"{s}.{variant}.records_per_s": round(tput),
                            f"{s}.{variant}.p50_ms": statistics.median(x["p50_ms"] for x in xs),
                            f"{s}.{variant}.p99_ms": statistics.median(x["p99_ms"] for x in xs)})
        figures[f"{s}.faultfs_over_plain"] = round(figures[f"{s}.faultfs.records_per_s"] / base, 2)
        figures[f"{s}.faultfs_cpu_s"] = round(statistics.median(x["faultfs_cpu_s"] for x in runs[s]["faultfs"]), 2)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    record.write(args, "faultfs_overhead", begun, figures,
                 details={"records": args.records, "size": args.size, "repeats": args.repeats, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
