"""Benchmark: the workload's history recorder overhead, and the highest op rate one control node sustains.

    .venv/bin/python -m bench.workload_overhead [--seconds 8] [--repeats 3] [--json out.json]

Starts a 2-broker Apache Kafka on 127.0.0.1 (lab/loopback_kafka.py: KRaft,
the jars `make setup` resolved, ports 39xxx, data in a temp folder, stopped
at the end), creates one topic,
and in the same run, against the same cluster, alternates:

- `recorded`: the workload's producer loop writing history.jsonl;
- `unrecorded`: the very same loop with a recorder that drops every event;
- `bare`: a plain confluent-kafka produce/poll loop with the same client
  settings and in-flight bound (what any Kafka load generator does).

Each runs unthrottled (rate 0) with consumers off, and its throughput is
acknowledged sends per second after a warm-up. A first round of the three is
not counted (the workload loop's first run, and the recorder's, are slower
in both arms), and the order turns each round, so that no variant always
runs first after the others. The overhead ratio is
recorded / unrecorded (target >= 0.8). Then a rate sweep runs the full
workload (producers and consumers, recording) at rising targets and reports
which it sustained (>= 95 % of the target acknowledged, nothing piling up).
The medians are recorded (bench/record.py) against TARGETS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from bench import record
from core.history.jsonl import iter_jsonl
from core.history.writer import HistoryWriter
from lab.loopback_kafka import LoopbackKafka
from workloads.config import WorkloadConfig
from workloads.topic import create_topic
from workloads.workload import Workload

TARGETS = (
    record.Target("recorded_over_unrecorded", ">=", 0.8, "issue 5: the workload's throughput with the history "
                  "recorded at least 0.8 of the same loop without recording, unthrottled"),
)


class NullHistory:
    """Same interface as HistoryWriter; keeps nothing."""

    def record(self, process, type, f, **fields):  # noqa: A002 - HistoryWriter's names
        return None

    def send_invoked(self, process, key, value):
        return None

    def send_acked(self, process, value, partition, offset):
        return None

    def sends_invoked(self, process, keys, values):
        return None

    def sends_acked(self, process, acks):
        return None

    def now(self) -> int:
        return time.monotonic_ns()

    def close(self) -> None:
        pass


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds of this process's threads so far, by role: the producer
    threads (`wl-producer-*`), the history's shipper, and the rest (librdkafka's
    threads, the main thread, consumers)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out = {"producer": 0.0, "shipper": 0.0, "other": 0.0}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(task.name), "")
        role = "producer" if name.startswith("wl-producer") else "shipper" if name == "history-ship" else "other"
        out[role] += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def run_workload(bootstrap: str, cfg: WorkloadConfig, seconds: float, warmup: float, history) -> dict:
    """The workload for `warmup` + `seconds`: rates and CPU over the measured seconds."""
    wl = Workload(cfg, bootstrap, history)
    wl.start()
    try:
        time.sleep(warmup)
        s0, t0, c0, th0 = wl.stats(), time.monotonic(), time.process_time(), thread_cpu_s()
        time.sleep(seconds)
        s1, t1, c1, th1 = wl.stats(), time.monotonic(), time.process_time(), thread_cpu_s()
    finally:
        wl.stop(timeout=10)
        wl.abandon()
    ok = s1["ops"].get("send", {}).get("ok", 0) - s0["ops"].get("send", {}).get("ok", 0)
    invoked = s1["ops"].get("send", {}).get("invoke", 0) - s0["ops"].get("send", {}).get("invoke", 0)
    polls = s1["ops"].get("poll", {}).get("ok", 0) - s0["ops"].get("poll", {}).get("ok", 0)
    read = s1["records_read"] - s0["records_read"]
    return {"acked_per_s": ok / (t1 - t0), "invoked_per_s": invoked / (t1 - t0), "polls_per_s": polls / (t1 - t0),
            # CPU of this whole process (client threads included) per acknowledged send
            "cpu_us_per_send": (c1 - c0) / max(ok, 1) * 1e6,
            # where it went: each role's CPU per acknowledged send, and the producer thread's busy share
            **{f"{role}_cpu_us_per_send": round((th1[role] - th0[role]) / max(ok, 1) * 1e6, 3) for role in th1},
            "producer_busy": round((th1["producer"] - th0["producer"]) / (t1 - t0), 3),
            "records_read_per_s": read / (t1 - t0), "in_flight_end": s1["in_flight"],
            "info": s1["ops"].get("send", {}).get("info", 0), "fail": s1["ops"].get("send", {}).get("fail", 0)}


def closed_writer_cpu_s(history: HistoryWriter) -> float:
    """Close `history` and return the CPU seconds its writer process used (the
    writer is the only child process that ends in between)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    history.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2)


def send_latencies_ms(path: Path) -> dict:
    """p50/p99 of ok time - invoke time over the sends of a history."""
    invoked: dict[int, int] = {}
    lat = []
    for e in iter_jsonl(path):
        if e["f"] != "send":
            continue
        if e["type"] == "invoke":
            invoked[e["value"]] = e["time"]
        elif e["type"] == "ok":
            lat.append((e["time"] - invoked.pop(e["value"])) / 1e6)
    lat.sort()
    if not lat:
        return {"p50": float("nan"), "p99": float("nan"), "n": 0}
    return {"p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)], "n": len(lat)}


def run_bare(bootstrap: str, cfg: WorkloadConfig, seconds: float, warmup: float) -> dict:
    """A plain produce loop: same settings and bound, no recording, no classification."""
    settings = Workload(cfg, bootstrap, NullHistory()).producer_settings()
    acked = [0]
    outstanding = [0]

    def delivered(err, msg):
        outstanding[0] -= 1
        if err is None:
            acked[0] += 1

    producer = Producer({**settings, "on_delivery": delivered})
    value = 0
    start = time.monotonic()
    t0 = a0 = None
    while True:
        now = time.monotonic()
        if t0 is None and now - start >= warmup:
            t0, a0, c0 = now, acked[0], time.process_time()
        if t0 is not None and now - t0 >= seconds:
            break
        room = cfg.max_in_flight - outstanding[0]
        if room <= 0:
            producer.poll(0.002)
            continue
        for _ in range(min(room, 256)):
            producer.produce(cfg.topic, str(value).encode(), str(value % cfg.key_count).encode())
            value += 1
            outstanding[0] += 1
        producer.poll(0)
    done = acked[0] - a0
    rate = done / (time.monotonic() - t0)
    cpu = (time.process_time() - c0) / max(done, 1) * 1e6
    producer.flush(10)
    return {"acked_per_s": rate, "cpu_us_per_send": cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per trial")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring")
    parser.add_argument("--repeats", type=int, default=5, help="trials per variant (alternated, after one not counted)")
    parser.add_argument("--broker-warmup", type=float, default=20.0, help="seconds of load before any trial")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--sweep", default="5000,10000,20000,40000,60000,80000",
                        help="target rates (sends/s) for the sustained-rate sweep; empty to skip")
    parser.add_argument("--fixed-rate", type=float, default=20000,
                        help="target for the recorded/unrecorded comparison at a fixed rate; 0 to skip")
    parser.add_argument("--latency-rate", type=float, default=2000,
                        help="steady rate for the max.in.flight latency comparison; 0 to skip")
    parser.add_argument("--json", help="also write the results to this file")
    record.add_arguments(parser)
    args = parser.parse_args(argv)
    begun = record.start()

    results: dict = {"host": {"cpus": os.cpu_count()}, "params": dict(vars(args))}
    with tempfile.TemporaryDirectory(prefix="wl-bench-") as tmp, LoopbackKafka(Path(tmp) / "kafka") as kafka:
        base = dict(partitions=args.partitions, replication_factor=2, producers=args.producers, consumers=0,
                    rate=0, acks="all")
        topic = WorkloadConfig(topic="bench", **base)
        create_topic(kafka.bootstrap, topic)
        # Brokers start cold (JIT): warm them up before anything is measured.
        warm = run_bare(kafka.bootstrap, topic, args.broker_warmup, 0.0)
        print(f"broker warm-up: {warm['acked_per_s']:.0f} acked sends/s over {args.broker_warmup:g} s", flush=True)
        trials: dict[str, list[float]] = {"recorded": [], "unrecorded": [], "bare": []}
        cpu: dict[str, list[float]] = {}
        writer_cost: list[float] = []  # the writer process's CPU per history event, recorded trials
        firsts = iter(range(10**9, 10**15, 10**9))  # each trial's values apart from the others'
        variants = list(trials)
        for i in range(-1, args.repeats):  # round -1: the warm-up round, not counted
            for variant in variants[i % 3:] + variants[:i % 3]:
                cfg = WorkloadConfig(topic="bench", first_value=next(firsts), **base)
                if variant == "bare":
                    r = run_bare(kafka.bootstrap, cfg, args.seconds, args.warmup)
                elif variant == "recorded":
                    path = Path(tmp) / f"h-{i}.jsonl"
                    history = HistoryWriter(path)
                    r = run_workload(kafka.bootstrap, cfg, args.seconds, args.warmup, history)
                    r["writer_cpu_s"] = closed_writer_cpu_s(history)
                    r["history_mb"] = round(path.stat().st_size / 1e6, 1)
                    r["history_events"] = path.read_bytes().count(b"\n")
                    r["writer_us_per_event"] = round(r["writer_cpu_s"] / max(r["history_events"], 1) * 1e6, 3)
                    path.unlink()
                else:
                    r = run_workload(kafka.bootstrap, cfg, args.seconds, args.warmup, NullHistory())
                label = f"trial {i + 1}" if i >= 0 else "warm-up"
                print(f"{variant:>10} {label}: {r['acked_per_s']:9.0f} acked sends/s  {json.dumps(r)}", flush=True)
                if i < 0:
                    continue
                trials[variant].append(r["acked_per_s"])
                if "writer_us_per_event" in r:
                    writer_cost.append(r["writer_us_per_event"])
                cpu.setdefault(variant, []).append(r["cpu_us_per_send"])
        med = {k: statistics.median(v) for k, v in trials.items()}
        results["overhead"] = {"trials": trials, "median": med,
                               "cpu_us_per_send": {k: statistics.median(v) for k, v in cpu.items()},
                               "writer_us_per_event": statistics.median(writer_cost),
                               "recorded_over_unrecorded": med["recorded"] / med["unrecorded"],
                               "recorded_over_bare": med["recorded"] / med["bare"]}
        print(f"median acked sends/s: recorded {med['recorded']:.0f}, unrecorded {med['unrecorded']:.0f}, "
              f"bare {med['bare']:.0f}; recorded/unrecorded = {med['recorded'] / med['unrecorded']:.2f}, "
              f"recorded/bare = {med['recorded'] / med['bare']:.2f}; "
              f"writer process {results['overhead']['writer_us_per_event']:.2f} us CPU per event", flush=True)

        # What one history event costs the recording thread on this machine now.
        with HistoryWriter(Path(tmp) / "micro.jsonl") as micro:
            n = 200_000
            c0 = time.perf_counter()
            for v in range(n):
                micro.record(0, "invoke", "send", key=v % 16, value=v)
            c1 = time.perf_counter()
            for v in range(n):
                micro.send_invoked(0, v % 16, v)
            c2 = time.perf_counter()
            for v in range(n):
                micro.send_acked(0, v, 3, v)
            c3 = time.perf_counter()
            for start in range(0, n, 256):  # a producer's bursts, the lists made as the producer makes them
                values = list(range(start, start + 256))
                micro.sends_invoked(0, [v % 16 for v in values], values)
            c4 = time.perf_counter()
            acks: list[int] = []
            for v in range(n):  # a poll's acknowledgements, kept as the delivery callback keeps them
                acks.extend((v, 3, v))
                if len(acks) == 3 * 256:
                    micro.sends_acked(0, acks)
                    acks = []
            c5 = time.perf_counter()
            results["record_us_per_event"] = (c1 - c0) / n * 1e6
            results["send_invoked_us_per_event"] = (c2 - c1) / n * 1e6
            results["send_acked_us_per_event"] = (c3 - c2) / n * 1e6
            results["sends_invoked_us_per_event"] = (c4 - c3) / n * 1e6
            results["sends_acked_us_per_event"] = (c5 - c4) / n * 1e6
        print(f"HistoryWriter.record: {results['record_us_per_event']:.2f} us per event, "
              f"send_invoked: {results['send_invoked_us_per_event']:.2f} us, "
              f"send_acked: {results['send_acked_us_per_event']:.2f} us, "
              f"sends_invoked (bursts of 256, lists included): {results['sends_invoked_us_per_event']:.2f} us, "
              f"sends_acked (256 per poll, the callback's list included): {results['sends_acked_us_per_event']:.2f} us",
              flush=True)

        # At a fixed target both arms keep up; the cost of recording shows as CPU.
        fixed = {"recorded": [], "unrecorded": []}
        if args.fixed_rate > 0:
            for i in range(max(1, args.repeats // 2)):
                for variant in fixed:
                    cfg = WorkloadConfig(topic="bench", first_value=next(firsts), **{**base, "rate": args.fixed_rate})
                    history = HistoryWriter(Path(tmp) / f"f-{i}.jsonl") if variant == "recorded" else NullHistory()
                    r = run_workload(kafka.bootstrap, cfg, args.seconds, args.warmup, history)
                    history.close()
                    fixed[variant].append(r)
                    print(f"fixed {args.fixed_rate:.0f}/s {variant:>10}: acked {r['acked_per_s']:8.0f}/s, "
                          f"cpu {r['cpu_us_per_send']:.1f} us/send", flush=True)
            results["fixed_rate"] = {
                "target": args.fixed_rate,
                "acked_per_s": {k: statistics.median(x["acked_per_s"] for x in v) for k, v in fixed.items()},
                "cpu_us_per_send": {k: statistics.median(x["cpu_us_per_send"] for x in v) for k, v in fixed.items()},
            }

        # Why the workload sets max.in.flight.requests.per.connection=5: send latency
        # (ok time - invoke time, from the history) at a steady rate, with librdkafka's default.
        if args.latency_rate > 0:
            results["in_flight_latency"] = {}
            for label, extra in (("max.in.flight=5 (workload default)", {}),
                                 ("max.in.flight=1000000 (librdkafka default)",
                                  {"max.in.flight.requests.per.connection": 1000000})):
                cfg = WorkloadConfig(topic="bench", first_value=next(firsts), producer_settings=extra,
                                     **{**base, "rate": args.latency_rate})
                path = Path(tmp) / "latency.jsonl"
                history = HistoryWriter(path)
                run_workload(kafka.bootstrap, cfg, args.seconds, args.warmup, history)
                history.close()
                lat = send_latencies_ms(path)
                path.unlink()
                results["in_flight_latency"][label] = lat
                print(f"{args.latency_rate:.0f}/s, {label}: send latency p50 {lat['p50']:.1f} ms, "
                      f"p99 {lat['p99']:.1f} ms", flush=True)

        sweep = []
        rates = [float(x) for x in args.sweep.split(",") if x.strip()]
        if rates:
            create_topic(kafka.bootstrap, WorkloadConfig(topic="sweep", partitions=args.partitions,
                                                         replication_factor=2))
        for n, rate in enumerate(rates):
            cfg = WorkloadConfig(topic="sweep", partitions=args.partitions, replication_factor=2,
                                 producers=args.producers, consumers=2, rate=rate, first_value=next(firsts))
            history = HistoryWriter(Path(tmp) / f"sweep-{n}.jsonl")
            r = run_workload(kafka.bootstrap, cfg, args.seconds, args.warmup, history)
            history.close()
            r["target"] = rate
            r["sustained"] = r["acked_per_s"] >= 0.95 * rate and r["in_flight_end"] < cfg.max_in_flight / 2
            r["events_per_s"] = 2 * r["invoked_per_s"] + 2 * r["polls_per_s"]
            sweep.append(r)
            print(f"target {rate:8.0f}/s: acked {r['acked_per_s']:8.0f}/s, read {r['records_read_per_s']:8.0f}/s, "
                  f"history events ~{r['events_per_s']:8.0f}/s, sustained={r['sustained']}", flush=True)
        results["sweep"] = sweep
        best = max((r["target"] for r in sweep if r["sustained"]), default=None)
        results["highest_sustained_target"] = best
        print(f"highest sustained target rate: {best}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    record.write(args, "workload_overhead", begun, figures(results), TARGETS, details=results)
    return 0


def figures(results: dict) -> dict:
    """The medians: each loop's acknowledged sends/s, the ratios, the recorder's
    CPU, the fixed rate's CPU per send, the highest sustained target."""
    over = results["overhead"]
    out = {f"{k}_per_s": round(v) for k, v in over["median"].items()}
    out.update({"recorded_over_unrecorded": round(over["recorded_over_unrecorded"], 3),
                "recorded_over_bare": round(over["recorded_over_bare"], 3),
                "writer_us_per_event": over["writer_us_per_event"],
                **{f"{k}_cpu_us_per_send": round(v, 2) for k, v in over["cpu_us_per_send"].items()},
                "send_invoked_us_per_event": round(results["send_invoked_us_per_event"], 3),
                "sends_acked_us_per_event": round(results["sends_acked_us_per_event"], 3),
                "highest_sustained_target": results.get("highest_sustained_target")})
    for k, v in results.get("fixed_rate", {}).get("cpu_us_per_send", {}).items():
        out[f"fixed_rate.{k}_cpu_us_per_send"] = round(v, 2)
    for label, lat in results.get("in_flight_latency", {}).items():
        out[f"in_flight_{label.split()[0].split('=')[1]}.p99_ms"] = round(lat["p99"], 2)
    return out


if __name__ == "__main__":
    sys.exit(main())
