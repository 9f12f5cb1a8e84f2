"""Benchmarks, one target per measured part: `harness bench TARGET [options]`.

The command line's table names this module for `bench`; it dispatches to
the benchmark modules beside it, each exposing configure(parser) and
run(args) -> int, and each recording its result (bench/record.py: every
target here takes --record-dir and --no-record). `harness bench latest`
prints the newest recorded figures of each.
"""

from __future__ import annotations

from bench import (broker_vs_kafka, checker_cost, cluster_up, cold_check, kafka_jvms, own_broker_failover,
                   own_broker_throughput, record, report_cost)

# target -> (module, one-line help)
TARGETS = {
    "cluster": (cluster_up, "bring-up and teardown of a 5-node local cluster with ZooKeeper"),
    "check": (checker_cost, "the checker's wall time and peak memory on histories of 1M, 10M (and 100M) events "
                            "(--standalone: also on a two-worker Spark cluster)"),
    "cold": (cold_check, "a cold harness check from the shell against a bare cold Spark scan of the same history"),
    "broker": (own_broker_throughput,
               "acks=all produce throughput and latency of the own broker on a local 3-node cluster"),
    "failover": (own_broker_failover,
                 "own broker: seconds from a leader's kill -9 to a new leader and to the next acknowledged write"),
    "kafka": (broker_vs_kafka,
              "own broker vs Apache Kafka: acks=all produce throughput and p99 side by side; Kafka bring-up"),
    "kafka-jvms": (kafka_jvms, "Kafka's JVMs (storage format, a broker's start, the log dump tool) with and "
                               "without the class-data archive, on 127.0.0.1"),
    "report": (report_cost, "building the report of a 10M-event run: time, memory, page sizes, browser load time"),
    "latest": (record, "print the newest recorded figures of each benchmark (results/bench/), and their targets"),
}


def configure(parser):
    sub = parser.add_subparsers(dest="bench_target", metavar="TARGET", parser_class=type(parser))
    for name, (module, help_text) in TARGETS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(p)
        if module is not record:
            record.add_arguments(p)
        p.set_defaults(_bench_module=module)


def run(args):
    module = getattr(args, "_bench_module", None)
    if module is None:
        return 0  # no target named: nothing to measure (kept for `make bench` until its targets exist)
    return module.run(args)
