"""Benchmark of the own broker's failover: how long after its partition
leader is killed (SIGKILL) a write is acknowledged again, on a local
3-broker cluster (real ZooKeeper, real processes, confluent-kafka).

    harness bench failover [--rounds 5] [--session-ms 6000]

Each round: a producer writes continuously (acks=all, idempotent); the
leader of the topic's one partition is killed; the round measures when
ZooKeeper names a new leader and when the first record produced after the
kill is acknowledged; then the old leader is restarted and has to rejoin
before the next round. The ZooKeeper session timeout bounds the first
number (the controller learns of the death when the session expires). The
medians and maxima are recorded (bench/record.py) against TARGETS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time

from bench import record
from lab.loopback_broker import LocalCluster, ZooKeeperServer
from core.errors import UserError

TARGETS = (
    record.Target("writes_again_max_s", "<=", 10.0, "the own broker acknowledges writes again within 10 s of its "
                  "leader's kill -9 (once a timed assertion of tests/broker/test_cluster.py), with the default "
                  "session timeout of 6 s"),
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Flags, for `harness bench failover`."""
    parser.add_argument("--rounds", type=int, default=5, help="leader kills to time")
    parser.add_argument("--session-ms", type=int, default=6000, help="the brokers' zookeeper.session.timeout.ms")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs) afterwards")


class _Writer:
    """Produces continuously; remembers when each record was produced and acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer  # heavy: only when the benchmark runs

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "message.timeout.ms": 60000, "linger.ms": 1,
                                  "log_level": 2})  # its disconnect chatter would drown the rounds
        self.topic = topic
        self.acked: list[tuple[float, float]] = []  # (produced at, acknowledged at), monotonic
        self.failed = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        n = 0
        while not self.stopping.is_set():
            produced = time.monotonic()

            def done(err, msg, produced=produced):
                if err is None:
                    self.acked.append((produced, time.monotonic()))
                else:
                    self.failed += 1

            try:
                self.producer.produce(self.topic, str(n).encode(), on_delivery=done)
                n += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def first_ack_after(self, t: float, timeout: float) -> float | None:
        """When the first record produced at or after `t` was acknowledged."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [acked for produced, acked in list(self.acked) if produced >= t]
            if later:
                return min(later)
            time.sleep(0.02)
        return None

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.producer.flush(60)


def _new_leader(cluster: LocalCluster, old: int, timeout: float) -> tuple[int, float] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader = cluster.leader("failover", 0)
        if leader not in (-1, old):
            return leader, time.monotonic()
        time.sleep(0.02)
    return None


def run(args) -> int:
    """Kill the leader --rounds times, print each round and the medians, record them; exit 1 if a round
    never recovered."""
    begun = record.start()
    if args.rounds < 1 or args.session_ms < 1000:
        raise UserError("bench failover: --rounds must be positive and --session-ms at least 1000")
    base = tempfile.mkdtemp(prefix="own-broker-failover-")
    settings = {"default.replication.factor": "3", "min.insync.replicas": "2",
                "zookeeper.session.timeout.ms": str(args.session_ms)}
    rounds, stuck = [], 0
    try:
        with ZooKeeperServer(os.path.join(base, "zk")) as zk, \
                LocalCluster(3, base, zk.connect, settings=settings) as cluster:
            cluster.start()
            cluster.create_topic("failover", partitions=1, replication_factor=3)
            writer = _Writer(cluster.bootstrap, "failover")
            writer.thread.start()
            try:
                for i in range(args.rounds):
                    time.sleep(2.0)  # steady writes before the kill
                    old = cluster.leader("failover", 0)
                    killed = time.monotonic()
                    cluster.kill(old)
                    elected = _new_leader(cluster, old, 60)
                    acked = writer.first_ack_after(killed, 60)
                    if elected is None or acked is None:
                        stuck += 1
                        print(f"round {i + 1}: broker {old} killed; no "
                              + ("new leader" if elected is None else "acknowledged write") + " within 60 s")
                    else:
                        rounds.append((elected[1] - killed, acked - killed))
                        print(f"round {i + 1}: broker {old} killed; broker {elected[0]} leads after "
                              f"{elected[1] - killed:.2f} s; first write acknowledged after {acked - killed:.2f} s")
                    cluster.start_broker(old)
                    cluster.wait_registered([old])
            finally:
                writer.stop()
    finally:
        if args.keep:
            print(f"logs kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    if rounds:
        print(f"own broker failover, 3 brokers, zookeeper.session.timeout.ms={args.session_ms}, "
              f"{len(rounds)} rounds: new leader median {statistics.median(r[0] for r in rounds):.2f} s "
              f"(max {max(r[0] for r in rounds):.2f}); writes again median "
              f"{statistics.median(r[1] for r in rounds):.2f} s (max {max(r[1] for r in rounds):.2f}); "
              f"{writer.failed} sends failed")
    record.write(args, "failover", begun, {
        "rounds": len(rounds), "stuck": stuck, "failed_sends": writer.failed,
        "new_leader_median_s": round(statistics.median(r[0] for r in rounds), 2) if rounds else None,
        "new_leader_max_s": round(max(r[0] for r in rounds), 2) if rounds else None,
        "writes_again_median_s": round(statistics.median(r[1] for r in rounds), 2) if rounds else None,
        "writes_again_max_s": round(max(r[1] for r in rounds), 2) if rounds else None},
        TARGETS, details={"session_ms": args.session_ms, "rounds": rounds})
    return 1 if stuck else 0
