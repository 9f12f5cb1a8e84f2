"""Benchmark of the own broker: acks=all produce throughput and latency on a
local 3-broker cluster (real ZooKeeper, real processes, confluent-kafka).

    harness bench broker [--records N] [--size BYTES] [--partitions P] [--rate R]

Two phases: a saturation run (throughput, and p50/p99 latency under load)
and a paced run at --rate records/s (latency without queueing).  It also
reports the CPU seconds each broker process used, which is what limits a
Python broker on a small machine. The result is recorded (bench/record.py),
figures named by value size (`100B.records_per_s`); its goal against Kafka
is `harness bench kafka`'s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from bench import record
from bench.produce_loop import cpu_seconds, produce_timed
from lab.loopback_broker import LocalCluster, ZooKeeperServer
from core.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    """Flags, for `harness bench broker`."""
    parser.add_argument("--records", type=int, default=200_000, help="records in the saturation run")
    parser.add_argument("--size", type=int, default=100, help="value size in bytes")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the benchmark topic")
    parser.add_argument("--brokers", type=int, default=3, help="brokers in the local cluster")
    parser.add_argument("--rate", type=int, default=2000, help="records/s in the paced latency run")
    parser.add_argument("--paced-seconds", type=float, default=5.0, help="length of the paced run")
    parser.add_argument("--linger-ms", type=float, default=5.0, help="producer linger.ms")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs) afterwards")


def run(args) -> int:
    """Bring the cluster up, measure both phases, print, record; exit 1 if a send failed."""
    begun = record.start()
    if args.records < 1 or args.size < 1 or args.partitions < 1 or args.brokers < 1 or args.rate < 1:
        raise UserError("bench broker: --records, --size, --partitions, --brokers and --rate must be positive")
    base = tempfile.mkdtemp(prefix="own-broker-bench-")
    rf = min(3, args.brokers)
    settings = {"default.replication.factor": str(rf), "min.insync.replicas": str(min(2, rf)),
                "zookeeper.session.timeout.ms": "6000"}
    with ZooKeeperServer(os.path.join(base, "zk")) as zk, \
            LocalCluster(args.brokers, base, zk.connect, settings=settings) as cluster:
        cluster.start()
        cluster.create_topic("bench", partitions=args.partitions, replication_factor=rf)
        pids = {b: cluster.brokers[b].proc.pid for b in cluster.brokers}
        cpu0 = {b: cpu_seconds(pid) for b, pid in pids.items()}
        sat = produce_timed(cluster.bootstrap, "bench", args.records, args.size, warmup=100,
                            linger_ms=args.linger_ms, flush_timeout=120)
        cpu = {b: cpu_seconds(pid) - cpu0[b] for b, pid in pids.items()}
        paced = produce_timed(cluster.bootstrap, "bench", int(args.rate * args.paced_seconds), args.size,
                              rate=args.rate, warmup=100, linger_ms=args.linger_ms, flush_timeout=120)
        leaders = {p: cluster.leader("bench", p) for p in range(args.partitions)}
    ok, elapsed = sat["records"], sat["seconds"]
    print(f"own broker, {args.brokers} brokers, topic with {args.partitions} partitions x RF {rf}, "
          f"acks=all, idempotent, {args.size}-byte values, linger.ms={args.linger_ms}")
    print(f"saturation: {ok} records in {elapsed:.2f}s = {ok / elapsed:,.0f} records/s "
          f"= {ok * args.size / elapsed / 1e6:.2f} MB/s; latency p50 {sat['p50_ms']:.1f} ms, "
          f"p99 {sat['p99_ms']:.1f} ms; errors {sat['errors']}, undelivered {sat['undelivered']}")
    print(f"paced at {args.rate}/s: {paced['records']} records, latency p50 {paced['p50_ms']:.1f} ms, "
          f"p99 {paced['p99_ms']:.1f} ms, mean {paced['mean_ms']:.1f} ms; "
          f"errors {paced['errors']}, undelivered {paced['undelivered']}")
    print("broker CPU seconds during saturation: " + ", ".join(
        f"broker {b}: {s:.1f}s ({s / elapsed * 100:.0f}% of a core)" for b, s in sorted(cpu.items()))
          + f"; partition leaders {leaders}")
    if args.keep:
        print(f"cluster directory kept: {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    size = f"{args.size}B."
    record.write(args, "broker", begun, {
        size + "records_per_s": round(ok / elapsed), size + "mb_per_s": round(ok * args.size / elapsed / 1e6, 2),
        size + "p50_ms": sat["p50_ms"], size + "p99_ms": sat["p99_ms"],
        size + "paced_p50_ms": paced["p50_ms"], size + "paced_p99_ms": paced["p99_ms"],
        size + "broker_cpu_share": round(max(cpu.values()) / elapsed, 3),
        size + "errors": sat["errors"] + sat["undelivered"]},
        details={"saturation": sat, "paced": paced, "broker_cpu_s": cpu, "params": {
            k: getattr(args, k) for k in ("records", "size", "partitions", "brokers", "rate", "linger_ms")}})
    return 0 if not sat["errors"] and not sat["undelivered"] else 1
