"""Benchmark of the own broker: acks=all produce throughput and latency on a
local 3-broker cluster (real ZooKeeper, real processes, confluent-kafka).

    harness bench broker [--records N] [--size BYTES] [--partitions P] [--rate R]

Two phases: a saturation run (throughput, and p50/p99 latency under load)
and a paced run at --rate records/s (latency without queueing).  It also
reports the CPU seconds each broker process used, which is what limits a
Python broker on a small machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from harness.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=200_000, help="records in the saturation run")
    parser.add_argument("--size", type=int, default=100, help="value size in bytes")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the benchmark topic")
    parser.add_argument("--brokers", type=int, default=3, help="brokers in the local cluster")
    parser.add_argument("--rate", type=int, default=2000, help="records/s in the paced latency run")
    parser.add_argument("--paced-seconds", type=float, default=5.0, help="length of the paced run")
    parser.add_argument("--linger-ms", type=float, default=5.0, help="producer linger.ms")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs) afterwards")


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _percentile(values, q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _produce(bootstrap, topic, count, size, linger_ms, rate=None):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": linger_ms, "queue.buffering.max.messages": 1_000_000,
                  "batch.size": 1_000_000})
    payload = b"x" * size
    latencies = []
    errors = []

    def cb(err, msg, sent):
        if err is not None:
            errors.append(err.name())
        else:
            latencies.append(time.perf_counter() - sent)

    # Warm up this producer (connections, metadata, producer id) outside the measurement.
    for _ in range(100):
        p.produce(topic, payload)
    p.flush(60)
    start = time.perf_counter()
    for i in range(count):
        if rate:
            due = start + i / rate
            while time.perf_counter() < due:
                p.poll(0.0005)
        sent = time.perf_counter()
        while True:
            try:
                p.produce(topic, payload, on_delivery=lambda e, m, s=sent: cb(e, m, s))
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    return elapsed, latencies, errors, left


def run(args) -> int:
    from broker.testing import LocalCluster, ZooKeeperServer
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
        cpu0 = {b: _cpu_seconds(pid) for b, pid in pids.items()}
        elapsed, lat, errors, left = _produce(cluster.bootstrap, "bench", args.records, args.size, args.linger_ms)
        cpu = {b: _cpu_seconds(pid) - cpu0[b] for b, pid in pids.items()}
        paced_n = int(args.rate * args.paced_seconds)
        p_elapsed, p_lat, p_errors, p_left = _produce(cluster.bootstrap, "bench", paced_n, args.size,
                                                      args.linger_ms, rate=args.rate)
        leaders = {p: cluster.leader("bench", p) for p in range(args.partitions)}
    ok = len(lat)
    print(f"own broker, {args.brokers} brokers, topic with {args.partitions} partitions x RF {rf}, "
          f"acks=all, idempotent, {args.size}-byte values, linger.ms={args.linger_ms}")
    print(f"saturation: {ok} records in {elapsed:.2f}s = {ok / elapsed:,.0f} records/s "
          f"= {ok * args.size / elapsed / 1e6:.2f} MB/s; latency p50 {_percentile(lat, .5) * 1e3:.1f} ms, "
          f"p99 {_percentile(lat, .99) * 1e3:.1f} ms; errors {len(errors)}, undelivered {left}")
    print(f"paced at {args.rate}/s: {len(p_lat)} records, latency p50 {_percentile(p_lat, .5) * 1e3:.1f} ms, "
          f"p99 {_percentile(p_lat, .99) * 1e3:.1f} ms, mean {statistics.fmean(p_lat) * 1e3 if p_lat else 0:.1f} ms; "
          f"errors {len(p_errors)}, undelivered {p_left}")
    print("broker CPU seconds during saturation: " + ", ".join(
        f"broker {b}: {s:.1f}s ({s / elapsed * 100:.0f}% of a core)" for b, s in sorted(cpu.items()))
          + f"; partition leaders {leaders}")
    if args.keep:
        print(f"cluster directory kept: {base}")
    else:
        import shutil
        shutil.rmtree(base, ignore_errors=True)
    return 0 if not errors and not left else 1
