"""Client-side helpers for the broker tests: produce with delivery tracking, read everything back."""

from __future__ import annotations

import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from core import waiting


def produce(bootstrap: str, topic: str, values, conf: dict | None = None, timeout: float = 60.0,
            key_of=None):
    """Sends every value (int) once; returns ({value: (partition, offset)}, {value: error name})."""
    acked, failed = {}, {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(conf or {})})

    def cb(err, msg):
        v = int(msg.value())
        if err is None:
            acked[v] = (msg.partition(), msg.offset())
        else:
            failed[v] = err.name()

    for v in values:
        while True:
            try:
                p.produce(topic, str(v).encode(), key=None if key_of is None else str(key_of(v)).encode(),
                          on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(timeout)
    assert left == 0, f"{left} messages still undelivered after {timeout}s"
    return acked, failed


class BackgroundProducer:
    """Produces increasing integers until stopped, recording what was acknowledged and when."""

    def __init__(self, bootstrap: str, topic: str, conf: dict | None = None, start: int = 0, rate_sleep=0.001):
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **(conf or {})})
        self.topic = topic
        self.next = start
        self.acked: dict[int, tuple[int, int, float]] = {}
        self.failed: dict[int, str] = {}
        self.stop_flag = threading.Event()
        self.rate_sleep = rate_sleep
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err, msg):
        v = int(msg.value())
        if err is None:
            self.acked[v] = (msg.partition(), msg.offset(), time.monotonic())
        else:
            self.failed[v] = err.name()

    def _run(self):
        while not self.stop_flag.is_set():
            try:
                self.producer.produce(self.topic, str(self.next).encode(), on_delivery=self._cb)
                self.next += 1
            except BufferError:
                pass
            self.producer.poll(self.rate_sleep)

    def start(self):
        self.thread.start()
        return self

    def stop(self, flush_timeout: float = 60.0) -> int:
        self.stop_flag.set()
        self.thread.join(10)
        return self.producer.flush(flush_timeout)


def read_all(bootstrap: str, topic: str, partitions: int, expected: int | None = None, timeout: float = 60.0,
             idle: float = 3.0):
    """Reads every partition from the beginning with assign(); [(partition, offset, value)]."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout
        last_data = time.monotonic()
        while time.monotonic() < deadline:
            if expected is not None and len(out) >= expected:
                # Linger a little to catch duplicates beyond the expected count.
                if time.monotonic() - last_data > 1.0:
                    break
            elif expected is None and time.monotonic() - last_data > idle:
                break
            msgs = c.consume(10000, 0.2)
            for m in msgs:
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error: {m.error()}")
                out.append((m.partition(), m.offset(), int(m.value())))
            if msgs:
                last_data = time.monotonic()
        return out
    finally:
        c.close()


def check_partition_offsets(records):
    """Offsets per partition are strictly increasing without repeats."""
    by_p = {}
    for p, off, _ in records:
        by_p.setdefault(p, []).append(off)
    for p, offs in by_p.items():
        assert offs == sorted(set(offs)), f"partition {p}: offsets not strictly increasing"


def log_values(cluster, broker_id: int, topic: str, partition: int) -> list[bytes]:
    """Record values in a (stopped) broker's log files for one partition, in offset order."""
    from broker import records
    from broker.storage import Log
    from tests.broker.conftest import batch_values
    lg = Log(str(cluster.brokers[broker_id].data_dir / f"{topic}-{partition}"))
    lg.open()
    try:
        out, offset = [], 0
        while offset < lg.end_offset:
            chunk = lg.read(offset, 1 << 30, lg.end_offset)
            out += batch_values(chunk)
            offset = [h for _, h in records.iter_batches(chunk)][-1].next_offset
        return out
    finally:
        lg.close()


def wait_for(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    """core.waiting.wait_for, a predicate's error counting as not yet: a
    cluster's metadata reads fail now and then while it changes leaders."""
    return waiting.wait_for(predicate, timeout, interval, what, retry_on=(Exception,))
