"""Benchmark: the own broker against Apache Kafka, side by side, and Kafka's bring-up.

    harness bench kafka [--records N] [--warmup N] [--size B] [--rate R] [--repeats K]
                        [--bring-up-nodes 5] [--bring-up-repeats 3] [--skip-compare] [--skip-bring-up]

Produce: one local cluster (3 namespaces with sshd, a 3-node ZooKeeper) runs
each system in turn, own broker first, then Kafka in ZooKeeper mode, on the
same nodes, with the same topic (3 partitions, replication factor 3,
min.insync.replicas=2) and the same confluent-kafka producer on this machine
(acks=all, idempotent, linger.ms=5): --warmup records that are not
measured (connections, producer id, and the JVM's JIT for Kafka), a
saturation run of --records records (throughput; latency from produce() to
the delivery report, queueing included) and a paced run at --rate records/s
(latency without queueing).
With --repeats K the two systems alternate K times.

Bring-up: a fresh cluster of --bring-up-nodes nodes with ZooKeeper, then
Kafka set up on all of them until every broker is registered and accepts
connections; the time of each phase, for each mode.

The medians are recorded (bench/record.py) against TARGETS, the produce
figures named by value size (`100B.own_over_kafka`).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from bench import record
from bench.produce_loop import cpu_seconds_of_stat, produce_timed
from core.errors import UserError
from infra.cluster import ProvisionOptions, provision
from infra.kafka import MODES as KAFKA_MODES
from infra.kafka import KafkaOptions, KafkaSystem, resolve
from infra.own_broker import OwnBroker
from infra.zookeeper import ZooKeeper, ZooKeeperOptions
from workloads.config import WorkloadConfig
from workloads.topic import create_topic as create

TOPIC = "bench"
TARGETS = (
    record.Target("100B.own_over_kafka", ">=", 0.5, "issue 6: the own broker's acks=all produce throughput at "
                  "least half of Apache Kafka's on the same 3-node cluster"),
    record.Target("bring_up.zk.total_s", "<=", 45.0, "issue 6: a 5-node Kafka cluster (ZooKeeper mode) up in 45 s"),
    record.Target("bring_up.kraft.total_s", "<=", 45.0, "issue 6: a 5-node Kafka cluster (KRaft) up in 45 s"),
)


def configure(parser) -> None:
    """Flags, for `harness bench kafka`."""
    a = parser.add_argument
    a("--records", type=int, default=300_000, help="records in each saturation run (default 300000)")
    a("--warmup", type=int, default=50_000, help="records sent before each saturation run, not measured (default 50000)")
    a("--size", type=int, default=100, help="value size in bytes (default 100)")
    a("--rate", type=int, default=2000, help="records/s of the paced run (default 2000)")
    a("--paced-seconds", type=float, default=5.0, help="length of the paced run (default 5)")
    a("--repeats", type=int, default=1, help="times each system is measured, alternating (default 1)")
    a("--nodes", type=int, default=3, help="nodes of the produce comparison (default 3)")
    a("--bring-up-nodes", type=int, default=5, help="nodes of the bring-up measurement (default 5)")
    a("--bring-up-repeats", type=int, default=3, help="bring-ups per Kafka mode (default 3)")
    a("--skip-compare", action="store_true", help="only measure bring-up")
    a("--skip-bring-up", action="store_true", help="only compare produce throughput")
    a("--json", action="store_true", help="also print the raw numbers as JSON")


def _cpu_seconds(system, node) -> float:
    pid = node.remote.pid_of(system.name if system.name == "kafka" else "broker")
    if pid is None:
        return 0.0
    return cpu_seconds_of_stat(node.remote.run(f"cat /proc/{pid}/stat", check=False).stdout)


def create_topic(bootstrap: str, replication_factor: int) -> None:
    """The benchmark topic (3 partitions), once every partition has a leader."""
    create(bootstrap, WorkloadConfig(topic=TOPIC, partitions=3, replication_factor=replication_factor,
                                     topic_settings={"min.insync.replicas": str(min(2, replication_factor))}))


def _measure_system(kind: str, cluster, zk_connect: str, args) -> dict:
    settings = {"default.replication.factor": 3, "min.insync.replicas": 2, "num.partitions": 3,
                "unclean.leader.election.enable": "false"}
    if kind == "own":
        system = OwnBroker(zk_connect, settings)
    else:
        system = KafkaSystem(zk_connect, settings)
    try:
        t0 = time.monotonic()
        system.setup(cluster)
        up = time.monotonic() - t0
        rf = min(3, len(cluster.nodes))
        create_topic(system.bootstrap(), rf)
        cpu0 = [_cpu_seconds(system, n) for n in cluster.nodes]
        saturation = produce_timed(system.bootstrap(), TOPIC, args.records, args.size, warmup=args.warmup)
        cpu = [round(_cpu_seconds(system, n) - c, 1) for n, c in zip(cluster.nodes, cpu0)]
        paced = produce_timed(system.bootstrap(), TOPIC, int(args.rate * args.paced_seconds), args.size,
                              rate=args.rate)
        return {"system": system.version(), "setup_s": round(up, 2), "saturation": saturation,
                "paced": paced, "broker_cpu_s": cpu}
    finally:
        system.teardown(cluster)


def compare(args) -> list[dict]:
    """The produce comparison: each system on one cluster, --repeats times, alternating."""
    results = []
    cluster = provision("local", ProvisionOptions(nodes=args.nodes))
    try:
        zookeeper = ZooKeeper(ZooKeeperOptions(nodes=min(3, args.nodes)))
        zookeeper.setup(cluster)
        for i in range(args.repeats):
            for kind in ("own", "kafka"):
                print(f"  measuring {kind} (round {i + 1} of {args.repeats}) ...", file=sys.stderr)
                # Separate chroots (/own, /kafka); the topic is recreated by each system.
                results.append({"kind": kind, "round": i + 1, **_measure_system(kind, cluster,
                                                                                 zookeeper.connect_string(), args)})
    finally:
        cluster.teardown()
    return results


def bring_up(args) -> list[dict]:
    """Kafka's bring-up on a fresh cluster, per mode: seconds of each phase."""
    out = []
    for mode in KAFKA_MODES:
        for i in range(args.bring_up_repeats):
            print(f"  bring-up {mode} {i + 1} of {args.bring_up_repeats} ...", file=sys.stderr)
            t0 = time.monotonic()
            cluster = provision("local", ProvisionOptions(nodes=args.bring_up_nodes))
            try:
                t1 = time.monotonic()
                zookeeper = ZooKeeper(ZooKeeperOptions(nodes=min(3, args.bring_up_nodes)))
                zookeeper.setup(cluster)
                t2 = time.monotonic()
                system = KafkaSystem(zookeeper.connect_string(), {}, KafkaOptions(mode=mode))
                system.setup(cluster)
                t3 = time.monotonic()
                system.teardown(cluster)
            finally:
                cluster.teardown()
            out.append({"mode": mode, "nodes_s": round(t1 - t0, 2), "zookeeper_s": round(t2 - t1, 2),
                        "kafka_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2)})
    return out


def _print_compare(results: list[dict], args) -> None:
    print(f"\nproduce, acks=all, idempotent, {args.size}-byte values, 3 partitions x RF 3, "
          f"min.insync.replicas=2, {args.nodes} local nodes")
    print(f"{'system':<22} {'records/s':>10} {'MB/s':>6} {'sat p50':>8} {'sat p99':>8} "
          f"{'paced p50':>9} {'paced p99':>9}  broker CPU s")
    for r in results:
        s, p = r["saturation"], r["paced"]
        print(f"{r['system']:<22} {s['records_per_s']:>10,.0f} {s['records_per_s'] * args.size / 1e6:>6.1f} "
              f"{s['p50_ms']:>6.1f}ms {s['p99_ms']:>6.1f}ms {p['p50_ms']:>7.1f}ms {p['p99_ms']:>7.1f}ms  "
              f"{r['broker_cpu_s']}" + (f"  errors {s['errors'] + p['errors']}" if s["errors"] + p["errors"] else ""))
    own = [r["saturation"]["records_per_s"] for r in results if r["kind"] == "own"]
    kafka = [r["saturation"]["records_per_s"] for r in results if r["kind"] == "kafka"]
    if own and kafka:
        ratio = statistics.median(own) / statistics.median(kafka)
        print(f"own / Kafka saturation throughput (medians): {ratio:.2f}x (goal: at least 0.5x)")


def _print_bring_up(results: list[dict], args) -> None:
    print(f"\nKafka bring-up on {args.bring_up_nodes} local nodes (seconds; median, min-max)")
    for mode in KAFKA_MODES:
        rows = [r for r in results if r["mode"] == mode]
        if not rows:
            continue
        parts = []
        for key in ("nodes_s", "zookeeper_s", "kafka_s", "total_s"):
            xs = [r[key] for r in rows]
            parts.append(f"{key[:-2]} {statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})")
        print(f"  {mode:<5} " + ", ".join(parts))


def figures(report: dict, args) -> dict:
    """Medians: each system's saturation throughput and p99, paced p99, their
    throughputs' ratio (by value size); each Kafka mode's bring-up (by phase)."""
    out = {}
    compared = report.get("compare", [])
    for kind in ("own", "kafka"):
        rows = [r for r in compared if r["kind"] == kind]
        if rows:
            name = f"{args.size}B.{kind}."
            out[name + "records_per_s"] = round(statistics.median(r["saturation"]["records_per_s"] for r in rows))
            out[name + "p99_ms"] = statistics.median(r["saturation"]["p99_ms"] for r in rows)
            out[name + "paced_p99_ms"] = statistics.median(r["paced"]["p99_ms"] for r in rows)
    if f"{args.size}B.own.records_per_s" in out and f"{args.size}B.kafka.records_per_s" in out:
        out[f"{args.size}B.own_over_kafka"] = round(out[f"{args.size}B.own.records_per_s"]
                                                    / out[f"{args.size}B.kafka.records_per_s"], 2)
    for mode in KAFKA_MODES:
        rows = [r for r in report.get("bring_up", []) if r["mode"] == mode]
        for key in ("nodes_s", "zookeeper_s", "kafka_s", "total_s") if rows else ():
            out[f"bring_up.{mode}.{key}"] = statistics.median(r[key] for r in rows)
    return out


def run(args) -> int:
    """Check the flags and the jar cache, measure, print, record; exit 1 if a send failed."""
    begun = record.start()
    if args.warmup < 0:
        raise UserError("bench kafka: --warmup must be 0 or more")
    for name in ("records", "size", "rate", "repeats", "nodes", "bring_up_nodes", "bring_up_repeats"):
        if getattr(args, name) < 1:
            raise UserError(f"bench kafka: --{name.replace('_', '-')} must be at least 1")
    if args.nodes < 3:
        raise UserError("bench kafka: --nodes must be at least 3 (the topic has 3 replicas)")
    resolve(KafkaOptions(), unpack=False)  # a missing jar cache fails before anything starts
    report: dict = {}
    if not args.skip_compare:
        report["compare"] = compare(args)
        _print_compare(report["compare"], args)
    if not args.skip_bring_up:
        report["bring_up"] = bring_up(args)
        _print_bring_up(report["bring_up"], args)
    if args.json:
        print(json.dumps(report, indent=1))
    record.write(args, "kafka", begun, figures(report, args), TARGETS, details=report)
    failed = any(r["saturation"]["errors"] or r["saturation"]["undelivered"] for r in report.get("compare", []))
    return 1 if failed else 0
