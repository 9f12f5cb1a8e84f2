"""The cluster-state observer: what the system itself says about its partitions
and nodes during a run, written to the run's `states.jsonl` (docs/history.md).

From just after the history starts until the final reads end, three threads
sample on the history's clock (`HistoryWriter.now()`, passed in as `clock`):

- every 250 ms, each partition's leader, leader epoch and ISR from the
  system's own metadata (`infra.system.PartitionStates`: ZooKeeper for the
  own broker and Kafka in ZooKeeper mode, a metadata request in KRaft
  mode), and whether the control node opens a TCP connection to each
  node's broker port;
- every second, whether each broker process exists (the system's
  `process_state`, a command on the node: two SSH round trips, too many for
  every 250 ms on five nodes, docs/history.md gives the measured cost) and
  which node is the controller (`Primaries.controller`);
- every second, each partition's high watermark from its leader
  (ListOffsets, latest, through a consumer that never subscribes).

A line is written when something changed (the high watermark at most once
a second per partition), and the first sample writes everything. The run
adds phase lines (`phase`), and after collecting the nodes' logs
`append_truncations` adds the truncations they record, their timestamps
moved onto the history's clock through the history's wall-clock origin.

The observer never makes a run fail: a read that fails is logged (once per
kind of failure, then counted) and leaves the last line standing, a node
that cannot be asked is `alive: null`, a leader that cannot be asked gives
`hw: null`.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import orjson

from infra.nodes import Cluster, Node
from infra.system import ControllerRecords, PartitionStates, Primaries, Processes, Truncation

log = logging.getLogger(__name__)
# librdkafka's own complaints (a dead leader) go where the workload's go: harness.log only.
client_log = logging.getLogger("workloads.librdkafka.observer")
client_log.setLevel(logging.ERROR)  # a dead leader times out every second: counted by the observer instead

STATES_FILE = "states.jsonl"
PHASES = ("workload", "heal", "settle", "final-reads", "end")


class Observer:
    """Samples a running system into `path` (see the module docstring).

    `clock()` is the history's clock (ns); `nodes` the nodes the system runs
    on; `port` the broker port the control node connects to.
    """

    def __init__(self, path: str | Path, clock: Callable[[], int], system, nodes: list[Node], topic: str,
                 bootstrap: str, port: int, interval: float = 0.25, slow_interval: float = 1.0,
                 hw_interval: float = 1.0):
        self.path = Path(path)
        self.clock = clock
        self.system = system
        self.nodes = list(nodes)
        self.topic = topic
        self.bootstrap = bootstrap
        self.port = port
        self.interval, self.slow_interval, self.hw_interval = interval, slow_interval, hw_interval
        self._file = open(self.path, "ab")
        self._lock = threading.Lock()  # the file and the last written state
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # One pool per loop: a slow remote command must not hold up the 250 ms reads.
        self._pools = {name: ThreadPoolExecutor(max_workers=max(2, len(self.nodes)),
                                                thread_name_prefix=f"observer-{name}")
                       for name in ("fast", "slow", "hw")}
        self._partitions: dict[int, dict] = {}  # partition -> last written {leader, epoch, isr, hw}
        self._hw_written: dict[int, float] = {}  # partition -> monotonic time of its last hw line
        self._controller: object = ...  # ... = nothing written yet
        self._node_state: dict[str, list] = {n.name: [None, None] for n in self.nodes}  # [alive, reachable]
        self._node_written: dict[str, tuple] = {}
        self._complaints: dict[str, int] = {}
        self._watermarks = None  # a confluent_kafka Consumer, made on first use
        self.samples = {"fast": 0, "slow": 0, "hw": 0}
        self.sample_seconds = {"fast": 0.0, "slow": 0.0, "hw": 0.0}

    # -- lifecycle

    def start(self) -> None:
        """Takes the first slow sample here (so the first node lines have `alive`), then starts the threads."""
        try:
            self._slow()
        except Exception as e:
            self._complain("slow sample", e)
        for name, loop, every in (("fast", self._fast, self.interval), ("slow", self._slow, self.slow_interval),
                                  ("hw", self._hw, self.hw_interval)):
            if name == "slow" and not (isinstance(self.system, Processes) or isinstance(self.system, Primaries)):
                continue
            t = threading.Thread(target=self._loop, args=(name, loop, every), name=f"observer-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def phase(self, name: str) -> None:
        """A phase line: workload, heal, settle, final-reads, end."""
        self._write({"time": self.clock(), "kind": "phase", "phase": name})

    def stop(self) -> None:
        """Stops sampling, writes the `end` phase, closes the file. Idempotent.
        A sample under way (a remote command, a ListOffsets to a dead leader:
        up to seconds) is not waited for, since the check phase would wait
        with it; what it finds is not written (`join` waits for it)."""
        if self._stop.is_set():
            return
        self._stop.set()
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        try:
            self.phase("end")
            with self._lock:
                self._file.close()
        except OSError as e:  # a full disk: the timeline is short, the run goes on
            log.warning("observer: closing %s: %s", self.path, e)
        costs = {k: f"{self.samples[k]} samples, {1000 * self.sample_seconds[k] / max(1, self.samples[k]):.0f} ms each"
                 for k in self.samples}
        log.info("observer stopped: %s%s", costs,
                 f"; failed reads: {self._complaints}" if self._complaints else "")

    def join(self, timeout: float = 10.0) -> None:
        """After `stop`: wait for the samples that were under way."""
        for t in self._threads:
            t.join(timeout=timeout)

    # -- the loops

    def _loop(self, name: str, sample: Callable[[], None], every: float) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                sample()
            except Exception as e:  # never let the observer take the run down
                self._complain(f"{name} sample", e)
            took = time.monotonic() - started
            self.samples[name] += 1
            self.sample_seconds[name] += took
            self._stop.wait(max(0.0, every - took))
        if name == "hw" and self._watermarks is not None:  # its consumer, closed by the thread that uses it
            try:
                self._watermarks.close()
            except Exception as e:
                log.debug("observer: closing its consumer: %s", e)

    def _fast(self) -> None:
        if isinstance(self.system, PartitionStates):
            try:
                states = self.system.partition_states(self.topic)
            except Exception as e:
                self._complain("partition states", e)
            else:
                self._note_states(self.clock(), states)
        reachable = list(self._pools["fast"].map(self._reachable, self.nodes))
        now = self.clock()
        for node, ok in zip(self.nodes, reachable):
            self._note_node(now, node.name, reachable=ok)

    def _slow(self) -> None:
        if isinstance(self.system, Processes):
            alive = list(self._pools["slow"].map(self._alive, self.nodes))
            now = self.clock()
            for node, ok in zip(self.nodes, alive):
                self._note_node(now, node.name, alive=ok)
        if isinstance(self.system, Primaries):
            try:
                controller = self.system.controller()
            except Exception as e:
                self._complain("controller", e)
            else:
                self._note_controller(self.clock(), controller)

    def _hw(self) -> None:
        with self._lock:
            known = sorted(self._partitions)
        if not known:
            return
        hws = self._high_watermarks(known)
        now = self.clock()
        for p in known:
            self._note_hw(now, p, hws.get(p))

    # -- reads

    def _reachable(self, node: Node) -> bool:
        try:
            with socket.create_connection((node.address, self.port), timeout=min(0.5, self.interval * 2)):
                return True
        except OSError:
            return False

    def _alive(self, node: Node) -> bool | None:
        try:
            return self.system.process_state(node) is not None
        except Exception as e:
            self._complain(f"process state of {node.name}", e)
            return None

    def _consumer(self):
        from confluent_kafka import Consumer

        if self._watermarks is None:
            # Never subscribes: only asks leaders for their offsets (ListOffsets, latest).
            self._watermarks = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "harness-observer",
                                         "enable.auto.commit": False, "logger": client_log,
                                         "socket.timeout.ms": 2000, "topic.metadata.refresh.interval.ms": 1000})
        return self._watermarks

    def _high_watermarks(self, partitions: list[int]) -> dict[int, int | None]:
        """partition -> its leader's high watermark; None where the leader did not answer."""
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        timeout = max(0.5, min(2.0, self.hw_interval))

        def ask(p: int) -> int | None:
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout,
                                                            cached=False)
            except Exception as e:  # this partition's leader did not answer
                self._complain("high watermark", e)
                return None
            return int(high) if high is not None and high >= 0 else None

        hws = dict(zip(partitions, self._pools["hw"].map(ask, partitions)))
        consumer.poll(0)  # serves librdkafka's log lines
        return hws

    # -- what changed, and the lines

    def _note_states(self, now: int, states: dict) -> None:
        lines = []
        with self._lock:
            for p, (leader, epoch, isr) in sorted(states.items()):
                last = self._partitions.get(p)
                if last is not None and (last["leader"], last["epoch"], last["isr"]) == (leader, epoch, list(isr)):
                    continue
                hw = last["hw"] if last is not None else None
                self._partitions[p] = {"leader": leader, "epoch": epoch, "isr": list(isr), "hw": hw}
                lines.append({"time": now, "kind": "partition", "partition": p, "leader": leader, "epoch": epoch,
                              "isr": list(isr), "hw": hw})
            self._write_locked(lines)

    def _note_hw(self, now: int, p: int, hw: int | None) -> None:
        with self._lock:
            last = self._partitions.get(p)
            if last is None or last["hw"] == hw:
                return
            # At most one hw line a second per partition (it moves with every write).
            if last["hw"] is not None and time.monotonic() - self._hw_written.get(p, 0.0) < 0.9:
                return
            last["hw"] = hw
            self._hw_written[p] = time.monotonic()
            self._write_locked([{"time": now, "kind": "partition", "partition": p, "leader": last["leader"],
                                 "epoch": last["epoch"], "isr": last["isr"], "hw": hw}])

    def _note_controller(self, now: int, controller: str | None) -> None:
        with self._lock:
            if controller == self._controller:
                return
            self._controller = controller
            self._write_locked([{"time": now, "kind": "controller", "node": controller}])

    def _note_node(self, now: int, name: str, **fields) -> None:
        with self._lock:
            state = self._node_state[name]
            if "alive" in fields:
                state[0] = fields["alive"]
            if "reachable" in fields:
                state[1] = fields["reachable"]
            alive, reachable = state
            if reachable is None:  # not connected to yet: the first line waits for it
                return
            if self._node_written.get(name) == (alive, reachable):
                return
            self._node_written[name] = (alive, reachable)
            self._write_locked([{"time": now, "kind": "node", "node": name, "alive": alive,
                                 "reachable": reachable}])

    def _write(self, line: dict) -> None:
        with self._lock:
            self._write_locked([line])

    def _write_locked(self, lines: list[dict]) -> None:
        if not lines or self._file.closed:
            return
        self._file.write(b"".join(orjson.dumps(x, option=orjson.OPT_APPEND_NEWLINE) for x in lines))
        self._file.flush()

    def _complain(self, what: str, e: BaseException) -> None:
        """Logs the first failure of each kind; later ones are counted (the stop line gives the counts)."""
        if self._stop.is_set():  # a sample that outlived the stop, its nodes going away: not news
            return
        n = self._complaints.get(what, 0)
        self._complaints[what] = n + 1
        if n == 0:
            log.info("observer: reading %s failed (later failures counted, not logged): %s: %s", what,
                     type(e).__name__, e)


# --------------------------------------------------------------------------
# Truncations, from the logs collected after the run


def origin_seconds(history_origin: str) -> float:
    """run.json's `history_origin` ("2026-11-23T15:26:00.123Z", UTC) as seconds since the epoch."""
    return datetime.strptime(history_origin, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def node_utc_offset(node: Node) -> timedelta | None:
    """The node's UTC offset (`date +%z`), in which its logs' timestamps are written; None if it cannot say."""
    try:
        text = node.remote.run("date +%z", check=False, timeout=10).stdout.strip()
    except Exception as e:
        log.info("%s: cannot ask its time zone: %s", node.name, e)
        return None
    if len(text) == 5 and text[0] in "+-" and text[1:].isdigit():
        sign = 1 if text[0] == "+" else -1
        return sign * timedelta(hours=int(text[1:3]), minutes=int(text[3:5]))
    return None


def truncation_lines(truncations: list[Truncation], topic: str, origin_wall: float,
                     offsets: dict[str, timedelta | None]) -> list[dict]:
    """states.jsonl lines for the truncations of `topic`, on the history's clock.

    A log timestamp is the node's local time: with its UTC offset from
    `offsets` (the control machine's zone where unknown) it becomes a wall
    clock instant; `origin_wall` (seconds since the epoch) is the history's
    time 0."""
    origin = datetime.fromtimestamp(origin_wall, timezone.utc)
    out = []
    for t in truncations:
        if t.topic != topic:
            continue
        offset = offsets.get(t.node)
        # A naive datetime's astimezone() reads it as this machine's local time (its DST rules included).
        when = t.logged.replace(tzinfo=timezone(offset)) if offset is not None else t.logged.astimezone()
        since = when - origin  # exact to the microsecond (float seconds lose the last digits)
        out.append({"time": since // timedelta(microseconds=1) * 1000, "kind": "truncation",
                    "node": t.node, "partition": t.partition, "offset": t.offset, "log_end": t.log_end,
                    "epoch": t.epoch, "leader": t.leader, "reason": t.reason})
    return sorted(out, key=lambda x: x["time"])


def controller_lines(records: list[dict], origin_wall: float) -> list[dict]:
    """states.jsonl lines for the controller's records (infra.system.ControllerRecords),
    on the history's clock: `kraft-partition` and `kraft-broker`."""
    out = []
    for r in records:
        line = {"time": round((r["wall"] - origin_wall) * 1e9), "kind": "kraft-" + r["kind"]}
        line.update({k: v for k, v in r.items() if k not in ("wall", "kind")})
        out.append(line)
    return out


def append_controller_records(path: str | Path, system, topic: str, origin_wall: float) -> int:
    """Appends the controller's records of `topic` and the brokers to
    states.jsonl, while the controllers' data is still there; how many.
    Never raises: they are evidence."""
    if not isinstance(system, ControllerRecords):
        return 0
    return _appended(path, "the controller's records",
                     lambda: controller_lines(system.controller_records(topic), origin_wall))


def _appended(path: str | Path, what: str, make: Callable[[], list[dict]]) -> int:
    """`make()`'s lines appended to states.jsonl; how many. A failure is
    logged and appends nothing: what is collected after a run is evidence,
    never a reason for the run to fail."""
    try:
        lines = make()
        with open(path, "ab") as f:
            f.write(b"".join(orjson.dumps(x, option=orjson.OPT_APPEND_NEWLINE) for x in lines))
        return len(lines)
    except Exception as e:
        log.warning("collecting %s into %s failed: %s: %s", what, path, type(e).__name__, e)
        return 0


def append_truncations(path: str | Path, system, cluster: Cluster, nodes_dir: str | Path, topic: str,
                       origin_wall: float) -> int:
    """Reads the truncations in each node's collected logs (`nodes_dir/<node>/`)
    and appends them to states.jsonl; returns how many. Never raises."""
    if not isinstance(system, PartitionStates):
        return 0

    def lines() -> list[dict]:
        nodes = list(system.nodes(cluster)) if hasattr(system, "nodes") else list(cluster.nodes)
        found: list[Truncation] = []
        for node in nodes:
            found += system.truncations(node.name, Path(nodes_dir) / node.name)
        offsets = {}
        if not getattr(cluster, "shares_filesystem", False):  # local nodes share this machine's clock and zone
            with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
                offsets = dict(zip([n.name for n in nodes], pool.map(node_utc_offset, nodes)))
        return truncation_lines(found, topic, origin_wall, offsets)

    return _appended(path, "truncations", lines)

