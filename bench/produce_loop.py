"""A timed acks=all produce loop, shared by the throughput benchmarks
(`harness bench broker`, `harness bench kafka`, `python -m bench.faultfs_overhead`),
so that the own broker and Kafka, with and without faultfs, are measured by
the very same loop: idempotent confluent-kafka producer, 5 ms linger, large
batches, per-record latency from produce() to the delivery callback.
"""

from __future__ import annotations

import os
import statistics
import time


def percentile(values: list[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank); NaN for none."""
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def cpu_seconds_of_stat(stat: str) -> float:
    """User + system CPU seconds from the text of a /proc/<pid>/stat (0 if unreadable)."""
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a local process has used (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return cpu_seconds_of_stat(f.read())
    except OSError:
        return 0.0


def produce_timed(bootstrap: str, topic: str, count: int, size: int, rate: float | None = None,
                  warmup: int = 200, linger_ms: float = 5.0, flush_timeout: float = 180.0) -> dict:
    """Send `count` records of `size` bytes (paced at `rate`/s if given) after
    `warmup` records outside the measurement; return what was measured."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": linger_ms, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                         "message.timeout.ms": int(flush_timeout * 1000)})
    payload = b"x" * size
    latencies: list[float] = []
    errors: list[str] = []

    def delivered(err, _msg, sent):
        if err is not None:
            errors.append(err.name())
        else:
            latencies.append(time.perf_counter() - sent)

    def send(**kw):
        while True:
            try:
                producer.produce(topic, payload, **kw)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)

    # Connections, metadata, the producer id and (for Kafka's JVMs) the JIT's
    # first compilations happen outside the measurement.
    for _ in range(warmup):
        send()
    producer.flush(120)
    start = time.perf_counter()
    for i in range(count):
        if rate:
            due = start + i / rate
            while time.perf_counter() < due:
                producer.poll(0.0005)
        sent = time.perf_counter()
        send(on_delivery=lambda e, m, s=sent: delivered(e, m, s))
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(flush_timeout)
    elapsed = time.perf_counter() - start
    return {"records": len(latencies), "seconds": round(elapsed, 3),
            "records_per_s": round(len(latencies) / elapsed, 1) if elapsed else 0.0,
            "p50_ms": round(percentile(latencies, 0.5) * 1e3, 2),
            "p99_ms": round(percentile(latencies, 0.99) * 1e3, 2),
            "mean_ms": round(statistics.fmean(latencies) * 1e3, 2) if latencies else float("nan"),
            "errors": len(errors), "error_names": sorted(set(errors)), "undelivered": left}
