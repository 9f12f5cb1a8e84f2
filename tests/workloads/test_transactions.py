"""The transactional clients (workloads/transactions.py): their knobs, and
a run of them on a real Kafka cluster on loopback, with fencing, aborts, a
consume-transform-produce client and a read_uncommitted reader, whose
history must say exactly what the log holds; and a committed record that
librdkafka loses after an abort, which the checker must report, beside
what Apache's Java producer does in the same transactions."""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.groups import coordinator_for
from checkers.check import Options, check_history as check
from core.errors import UserError
from core.history.jsonl import read_jsonl
from core.waiting import wait_for
from infra.kafka_dist import kafka_classpath
from lab.loopback_broker import ZK_JARS, LocalCluster, ZooKeeperServer
from lab.loopback_kafka import LoopbackKafka
from workloads.config import TxnConfig, WorkloadConfig
from workloads.transactions import TxnPacer, TxnSlot
from workloads.workload import Workload

from tests.support import need, stored_records
from tests.workloads.history_checks import check_history


@pytest.mark.parametrize("table, says", [
    ({"abort-probability": 1.5}, "abort-probability"),
    ({"min-sends": 5, "max-sends": 2}, "min-sends"),
    ({"producers": 0, "transformers": 0}, "no transactional client"),
    ({"fence-every": 3}, "unknown setting 'fence-every'"),
    ({"rate": -1}, "rate"),
])
def test_bad_transaction_knobs_are_one_line_errors(table, says):
    with pytest.raises(UserError, match=says):
        WorkloadConfig(transactions=table)


def test_transactions_from_a_table_and_back():
    cfg = WorkloadConfig(transactions={"producers": 3, "abort-probability": 0.5, "fence_interval_s": 2})
    assert cfg.transactions == TxnConfig(producers=3, abort_probability=0.5, fence_interval_s=2)
    assert WorkloadConfig(transactions=cfg.to_dict()["transactions"]).transactions == cfg.transactions
    assert WorkloadConfig(transactions={}).transactions is None
    assert cfg.committing_groups() == [cfg.transformer_group]


def test_settings_the_transactions_own_are_refused():
    with pytest.raises(UserError, match="transactional.id"):
        WorkloadConfig(producer_settings={"transactional.id": "x"})
    with pytest.raises(UserError, match="isolation.level"):
        WorkloadConfig(consumer_settings={"isolation.level": "read_uncommitted"})
    with pytest.raises(UserError, match="client_processes"):
        WorkloadConfig(transactions={"producers": 1}, client_processes=True)


@pytest.mark.integration
def test_transactions_on_kafka_commit_abort_and_fence_as_recorded(started, history, topic_name):
    cfg = WorkloadConfig(topic=topic_name, partitions=3, replication_factor=2, rate=50, producers=0, consumers=1,
                         idempotent=True,
                         transactions={"producers": 2, "transformers": 1, "rate": 30, "max-sends": 4,
                                       "abort-probability": 0.2, "fence-interval-s": 2.0})
    wl = started(cfg)
    # Until enough happened (the cluster's first transactional client creates
    # __transaction_state, slow on a busy machine), within a bound.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        done = wl.transaction_summary()
        if done["transactions"]["ok"] >= 40 and done["transactions"]["fail"] >= 5 and done["fenced"] >= 2:
            break
        time.sleep(1.0)
    stop = wl.stop(timeout=10)
    report = wl.final_reads(30.0)
    summary = wl.transaction_summary()
    history.close()
    assert not stop.threads_left and report.complete, report.summary()
    outcomes = summary["transactions"]
    assert outcomes["ok"] >= 10 and outcomes["fail"] >= 3 and summary["fenced"] >= 2, summary
    # The read_uncommitted reader saw aborted records: the aborts reached the log.
    assert summary["aborted_values_read_uncommitted"] > 0, summary

    check_history(history.path)  # the per-line contract and invocations matched to completions
    events = read_jsonl(history.path)
    final = {e["process"] for e in events if e["f"] == "final-reads"}
    committed_reads, uncommitted_reads, final_log = set(), set(), {}
    for e in events:
        if e["type"] != "ok" or e["f"] not in ("poll", "txn"):
            continue
        for r in e.get("records") or []:
            if e["process"] in final:
                final_log[(r["partition"], r["offset"])] = r["value"]
            elif e.get("isolation") == "read_uncommitted":
                uncommitted_reads.add(r["value"])
            else:
                committed_reads.add(r["value"])
    txns = [e for e in events if e["f"] == "txn" and e["type"] != "invoke"]
    ok = [s for e in txns if e["type"] == "ok" for s in e["sends"]]
    aborted = {s["value"] for e in txns if e["type"] == "fail" for s in e["sends"]}
    # Every committed send is in the final log at the position its delivery report gave.
    assert all(final_log.get((s["partition"], s["offset"])) == s["value"] for s in ok)
    # No read_committed reader, final reads included, returned a value of an aborted transaction.
    assert not aborted & (committed_reads | set(final_log.values()))
    assert aborted & uncommitted_reads
    # The transformer read in its transactions and committed its group's offsets in them.
    transformed = [e for e in txns if e["type"] == "ok" and e.get("offsets")]
    assert transformed and all(e["group"] == cfg.transformer_group and e["records"] for e in transformed)
    final_committed = [e for e in events if e["f"] == "committed" and e["type"] == "ok"]
    assert final_committed and any(o["offset"] > 0 for o in final_committed[-1]["offsets"])
    # A fenced producer's commit was refused and recorded as not committed.
    assert any(e["type"] == "fail" and e.get("error") in ("_FENCED", "PRODUCER_FENCED") for e in txns)

    results = check(history.path, Options(engine="local"))
    found = {k: a["count"] for k, a in results["anomalies"].items() if a["count"] and a.get("error")}
    assert results["valid"], found


@pytest.mark.integration
def test_a_transaction_left_open_holds_final_reads_back_and_nothing_is_called_lost(started, kafka, history,
                                                                                  topic_name):
    """A transaction begun and never ended (its timeout far away) holds every
    read_committed reader below its first record. The final reads must not
    take that last stable offset for the log's end (which would call every
    acknowledged record above it lost): they stop short, say why, and the
    checker concludes nothing about the partition."""
    from confluent_kafka import Producer

    cfg = WorkloadConfig(topic=topic_name, partitions=1, replication_factor=2, rate=200, producers=1, consumers=1)
    wl = started(cfg)
    time.sleep(1.0)
    hanging = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic_name}-open",
                        "transaction.timeout.ms": 600_000})
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(topic_name, b"-1", partition=0)
    hanging.flush(10)
    time.sleep(2.0)
    wl.stop(timeout=10)
    report = wl.final_reads(8.0)
    history.close()
    try:
        hanging.abort_transaction(10)
    except Exception:  # the cluster is the session's: leave nothing open, but never fail on it
        pass
    (reach,) = report.partitions
    assert not report.complete and not reach.done and not reach.ends_below_acked
    assert reach.stable_offset is not None and reach.stable_offset < reach.high_watermark, reach
    assert "held back by an open transaction" in report.summary()
    results = check(history.path, Options(engine="local"))
    counts = {k: a["count"] for k, a in results["anomalies"].items()}
    assert counts["lost-acked"] == 0 and counts["lost-write"] == 0 and counts["unseen"] > 0, counts


class _Script:
    """A TxnSlot's dice, scripted: each transaction's abort draw the next of `draws`, its size the least."""

    def __init__(self, draws: list[float]):
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)

    def randint(self, low: int, high: int) -> int:
        return low


class _ThreeBrokers:
    """3 brokers on loopback, one of which a test can stop (SIGSTOP) and go on (SIGCONT):
    the own broker with its ZooKeeper, or Apache Kafka (KRaft, node 1 the controller)."""

    def __init__(self, system: str, root: Path):
        self.system = system
        self.zk = None
        if system == "own":
            if not Path(ZK_JARS[0]).exists():
                pytest.fail("ZooKeeper (Debian package `zookeeper`) is needed: run `make setup`")
            self.zk = ZooKeeperServer(root / "zk")
            # A stopped broker stays registered (and in every ISR) until it goes on.
            self.cluster = LocalCluster(3, root, self.zk.connect, settings={
                "zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "60000"})
        else:
            # The same in KRaft; the transaction log one partition on one replica: one coordinator.
            self.cluster = LoopbackKafka(root, nodes=3, version=system, broker_settings={
                "broker.session.timeout.ms": "30000", "replica.lag.time.max.ms": "60000",
                "transaction.state.log.replication.factor": "1", "transaction.state.log.num.partitions": "1"})

    def start(self) -> None:
        if self.zk is not None:
            self.zk.start()
        self.cluster.start()

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def spare(self, *transactional_ids: str) -> int:
        """A broker the test may stop: neither the controller nor the ids' transaction coordinator."""
        if self.system == "own":
            busy = {self.cluster.controller(), *(coordinator_for(t, [1, 2, 3]) for t in transactional_ids)}
        else:
            meta = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics("__transaction_state", timeout=10)
            busy = {1, meta.topics["__transaction_state"].partitions[0].leader}
        assert busy != {1, 2, 3}, f"no broker to stop: controller and coordinators {busy}"
        return max({1, 2, 3} - busy)

    def port(self, node: int) -> int:
        return self.cluster.brokers[node].port if self.system == "own" else self.cluster.node(node).port

    def signal(self, node: int, sig: int) -> None:
        if self.system == "own":
            (self.cluster.pause if sig == signal.SIGSTOP else self.cluster.resume)(node)
        else:
            os.killpg(self.cluster.node(node).proc.pid, sig)

    def stop(self) -> None:
        """Every process stopped, a stopped one too (LocalCluster sends it SIGCONT itself)."""
        if self.zk is None:
            for node in self.cluster.nodes:
                if node.proc is not None and node.proc.poll() is None:
                    os.killpg(node.proc.pid, signal.SIGCONT)
        self.cluster.stop()
        if self.zk is not None:
            self.zk.stop()


def _read(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    """Partition 0 of `topic` up to its end (not recorded): offset -> value."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out, deadline = {}, time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            out[msg.offset()] = int(msg.value())
    finally:
        consumer.close()
    return out


@pytest.mark.integration
@pytest.mark.parametrize("system", ["own", "3.9.2"])
def test_an_abort_that_purges_a_timed_out_send_makes_the_next_commit_a_lost_write(tmp_path, history, system):
    """librdkafka (2.16) reuses a sequence number across an abort, and the
    checker must call the committed record it costs a lost-write.

    A transaction's send waits for acks=all past request.timeout.ms (a
    follower stopped) and goes back to the queue to be retried; the
    workload then aborts the transaction (TxnSlot: flush, then
    abort_transaction()). The abort purges the queued send and, since it
    "will not be produced", advances the partition's base msgid past it
    (rd_kafka_toppar_purge_queues, ADVBASE) without a new epoch, although
    the leader had appended it. The next transaction's first record gets
    the purged one's sequence; the leader takes it for a retry of that
    batch (the producer's last five sequences survive the abort marker, as
    in Kafka with transaction version 1, which librdkafka's EndTxn v1
    keeps Kafka 4 on too) and answers with the aborted record's offset.
    That transaction commits, acknowledged at a position that holds the
    aborted record, and its own record is nowhere. The own broker and
    Kafka 3.9.2 answer alike; so does 4.4.0 (docs/scenarios.md: the
    lost-write of own-bug-txn-partial-commit's control was this)."""
    cfg = WorkloadConfig(
        topic="seq", partitions=1, replication_factor=3, producers=0, consumers=0, explicit_partitions=True,
        topic_settings={"min.insync.replicas": "2"},
        # The send times out after 2 s and waits 4-5 s (the jitter) to be retried: the
        # workload's 5 s flush before its abort ends while the send is queued.
        producer_settings={"request.timeout.ms": 2000, "retry.backoff.ms": 5000, "retry.backoff.max.ms": 5000},
        transactions={"producers": 1, "transformers": 0, "read_uncommitted": 0, "rate": 0, "min-sends": 1,
                      "max-sends": 1, "abort-probability": 0.5, "commit-timeout-s": 20.0})
    cluster = _ThreeBrokers(system, tmp_path / "cluster")
    try:
        cluster.start()
        wl = Workload(cfg, cluster.bootstrap, history)
        # The workload's transactional producer, its transactions driven one at a
        # time: a commit, an abort (a follower stopped), a commit, a commit.
        slot = TxnSlot(wl.clients, 0, itertools.count(), wl.transactions, TxnPacer(0, 1), 0)
        slot.random = _Script([0.9, 0.1, 0.9, 0.9])
        client = slot._start()
        assert client is not None, "init_transactions() failed"
        follower = cluster.spare(cfg.transactional_id(0))
        leader = min({1, 2, 3} - {follower})
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(cfg.topic, 1, replica_assignment=[[leader, follower, 6 - leader - follower]],
                                      config=dict(cfg.topic_settings))])[cfg.topic].result(30)

        def in_sync() -> bool:
            (part,) = admin.list_topics(cfg.topic, timeout=10).topics[cfg.topic].partitions.values()
            return part.leader == leader and len(part.isrs) == 3
        wait_for(in_sync, 30, 0.2, "the topic's leader and ISR", retry_on=(Exception,))
        slot._transact(client)
        # Its commit marker on every replica (read_committed passes it) before the follower stops.
        wait_for(lambda: _read(cluster.bootstrap, cfg.topic, "read_committed"), 30, 0.2, "the first commit")
        time.sleep(1.0)
        cluster.signal(follower, signal.SIGSTOP)
        try:
            slot._transact(client)
        finally:
            cluster.signal(follower, signal.SIGCONT)
        assert client.tainted is None, f"the abort failed: {client.tainted}"
        slot._transact(client)
        slot._transact(client)
        slot._retire(client)
        report = wl.final_reads(30.0)
        history.close()
        raw = _read(cluster.bootstrap, cfg.topic, "read_uncommitted")
    finally:
        cluster.stop()
    assert report.complete, report.summary()
    txns = [e for e in read_jsonl(history.path) if e["f"] == "txn" and e["type"] != "invoke"]
    outcomes = [(e["type"], e.get("error")) for e in txns]
    assert outcomes == [("ok", None), ("fail", "ABORTED"), ("ok", None), ("ok", None)], txns
    (aborted,), (lost,) = txns[1]["sends"], txns[2]["sends"]
    # The reproduction itself: the committed record acknowledged where the aborted one is, and nowhere.
    assert raw.get(lost["offset"]) == aborted["value"] and lost["value"] not in raw.values(), \
        f"no sequence reused (librdkafka fixed?): {lost} acknowledged, the log holds {raw}"
    results = check(history.path, Options(engine="local"))
    found = {k: a["count"] for k, a in results["anomalies"].items() if a["count"]}
    # The final reader, at read_committed, passes over the aborted record's offset,
    # where the lost record was acknowledged: a poll-skip as well (the run had both).
    assert not results["valid"] and found == {"lost-write": 1, "poll-skip": 1}, found
    (example,) = results["anomalies"]["lost-write"]["examples"]
    assert (example["value"], example["partition"], example["offset"]) == (lost["value"], 0, lost["offset"])
    (skip,) = results["anomalies"]["poll-skip"]["examples"]
    assert skip["skipped_offset"] == lost["offset"], skip


JAVA_CLIENTS = ("3.9.2", "4.4.0")
# The abort (delivery.timeout.ms, ms from the send to abortTransaction()): while the
# timed-out send waits for its retry, as in librdkafka's reproduction above; or
# after the send expired, its outcome unknown.
ABORTS = {"held": (60000, 3000), "expired": (5000, 7000)}


@pytest.fixture(scope="module")
def java_clients(tmp_path_factory) -> dict[str, str]:
    """TxnAfterAbort.java compiled against each Java client's jars: version -> classpath."""
    need(shutil.which("javac") is not None, "javac (Debian's default-jdk-headless)")
    source = Path(__file__).with_name("TxnAfterAbort.java")
    found, compiling = {}, []
    for version in JAVA_CLIENTS:  # both at once: a javac takes seconds to start
        jars, classes = kafka_classpath(version), tmp_path_factory.mktemp(f"java-{version}")
        compiling.append(subprocess.Popen(["javac", "-cp", jars, "-d", str(classes), str(source)],
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        found[version] = f"{classes}:{jars}"
    for javac in compiling:
        out, _ = javac.communicate(timeout=120)
        assert javac.returncode == 0, out
    return found


class _JavaProducers:
    """TxnAfterAbort in a JVM of its own: one producer per run given, each line asked
    a transaction of them all, their answers sorted by producer (TxnAfterAbort.java)."""

    def __init__(self, classpath: str, bootstrap: str, runs: dict[str, tuple], log: Path):
        """runs: name -> (topic, transactional id, delivery.timeout.ms, ms before an abort)."""
        args = [str(a) for name, run in runs.items() for a in (name, *run)]
        with open(log, "w") as err:
            # The C1 compiler alone: the JVM starts sooner, and the producers are brief.
            self.proc = subprocess.Popen(
                ["java", "-Xmx192m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", classpath,
                 "TxnAfterAbort", bootstrap, *args],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self.lines: dict[str, queue.Queue[str]] = {name: queue.Queue() for name in runs}
        threading.Thread(target=self._sort, daemon=True).start()

    def _sort(self) -> None:
        for line in self.proc.stdout:
            name, _, text = line.strip().partition(" ")
            if name in self.lines:
                self.lines[name].put(text)

    def ask(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self, name: str, timeout: float = 60.0) -> str:
        try:
            return self.lines[name].get(timeout=timeout)
        except queue.Empty:
            return "no answer"


def _one_coordinator(names: list[str]) -> list[str]:
    """A transactional id per name (name-K, K the first that fits), all of them
    coordinated by one of the own broker's three: with the controller, that
    leaves a broker to stop. (Kafka's one transaction-log partition here
    coordinates every id on one broker anyway.)"""
    first = coordinator_for(f"{names[0]}-0", [1, 2, 3])
    return [next(f"{n}-{k}" for k in itertools.count() if coordinator_for(f"{n}-{k}", [1, 2, 3]) == first)
            for n in names]


@pytest.mark.integration
@pytest.mark.parametrize("system", ["own", "3.9.2", "4.4.0"])
def test_apache_s_java_producer_reuses_no_sequence_after_an_abort(tmp_path, java_clients, system):
    """The transactions of the librdkafka reproduction above, by Apache's Java
    producer (kafka-clients 3.9.2 and 4.4.0), on the own broker and Kafka
    3.9.2 and 4.4.0: commit, abort, commit, commit, one record each, the
    abort's send held past request.timeout.ms by a stopped follower. No
    sequence is reused, and each committed record is where it was
    acknowledged, by one of two means.

    Aborted while its timed-out send waits for a retry, the Java producer
    does not drop the send: abortTransaction() returns once the retry is
    answered (after the follower goes on; the leader answers it as a
    duplicate, with the offset it had appended it at), and the next
    transaction's send takes the next sequence under the same epoch.
    Aborted after the send expired (delivery.timeout.ms), it bumps its
    epoch (KIP-360: InitProducerId with its own producer id and epoch) and
    starts again at sequence 0. With transactions v2 (KIP-890: the 4.4.0
    client on Kafka 4.4.0) every EndTxn bumps the epoch anyway."""
    runs = [(client, abort) for client in JAVA_CLIENTS for abort in ABORTS]
    names = {run: f"java-{run[0].replace('.', '-')}-{run[1]}" for run in runs}  # also its topic
    ids = dict(zip(runs, _one_coordinator([names[run] for run in runs])))
    cluster = _ThreeBrokers(system, tmp_path / "cluster")
    jvms: dict[str, _JavaProducers] = {}
    answers: dict[tuple, list[str]] = {run: [] for run in runs}

    def each(line: str | None, timeout: float = 60.0) -> None:
        """`line` asked of every producer (None: nothing asked), then an answer of each read."""
        for jvm in jvms.values():
            if line is not None:
                jvm.ask(line)
        for run in runs:
            answers[run].append(jvms[run[0]].answer(names[run], timeout))
    try:
        cluster.start()
        for client in JAVA_CLIENTS:
            jvms[client] = _JavaProducers(java_clients[client], cluster.bootstrap, {
                names[run]: (names[run], ids[run], *ABORTS[run[1]]) for run in runs if run[0] == client},
                tmp_path / f"java-{client}.log")
        each(None)  # initTransactions(): the transaction log exists, its coordinator is known
        assert all(a == ["ready"] for a in answers.values()), answers
        follower = cluster.spare(*ids.values())
        leader = min({1, 2, 3} - {follower})
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for topic in names.values():
            admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader, follower, 6 - leader - follower]],
                                          config={"min.insync.replicas": "2"})])[topic].result(30)

        def in_sync() -> bool:
            found = admin.list_topics(timeout=10).topics
            return all(found[t].partitions[0].leader == leader and len(found[t].partitions[0].isrs) == 3
                       for t in names.values())
        wait_for(in_sync, 30, 0.2, "the topics' leader and ISR", retry_on=(Exception,))
        each("commit 1")
        # Each commit marker on every replica (read_committed passes it) before the follower stops.
        wait_for(lambda: all(_read(cluster.bootstrap, t, "read_committed") for t in names.values()), 30, 0.2,
                 "the first commits")
        time.sleep(1.0)
        cluster.signal(follower, signal.SIGSTOP)
        try:
            each("abort 2")  # each answers as its abort begins
            time.sleep(2.0)
            # An abort still waiting for its held send has returned nothing while the follower is stopped.
            waiting = {run: jvms[run[0]].lines[names[run]].empty() for run in runs}
        finally:
            cluster.signal(follower, signal.SIGCONT)
        each(None)  # the aborts return
        each("commit 3")
        each("commit 4")
        logs = {run: stored_records(cluster.port(leader), names[run], 0) for run in runs}
    finally:
        for jvm in jvms.values():
            jvm.proc.kill()
        cluster.stop()

    for client, abort in runs:
        run = (client, abort)
        says = f"Java client {client} on {system}, abort {abort}"
        values = [r.value for r in logs[run] if r.value is not None]
        records = {r.value: r for r in logs[run] if r.value is not None}
        assert sorted(values) == ["1", "2", "3", "4"], (says, answers[run], logs[run])
        aborted, committed = records["2"], records["3"]
        # Each committed record where it was acknowledged (librdkafka's 3 is acknowledged at 2's offset).
        acknowledged = [answers[run][i] for i in (1, 4, 5)]
        assert acknowledged == [f"committed {v} {records[v].offset}" for v in ("1", "3", "4")], \
            f"{says}: acknowledged {acknowledged}, the log holds {logs[run]}"
        sequences = [(r.producer_id, r.producer_epoch, r.base_sequence) for r in logs[run] if r.value is not None]
        assert len(set(sequences)) == len(sequences), f"{says}: a sequence used twice: {logs[run]}"
        marker = next((r for r in logs[run] if r.marker is not None and r.offset > aborted.offset), None)
        assert marker is not None and marker.marker == "ABORT", (says, logs[run])
        # How: the abort waited for the held send (the leader then answered its retry with the
        # offset it had appended it at), or the send had expired.
        outcome = ["pending", str(aborted.offset)] if abort == "held" else ["TimeoutException"] * 2
        assert answers[run][2:4] == [f"aborting 2 {outcome[0]}", f"aborted 2 {outcome[1]}"], (says, answers[run])
        if abort == "held":
            assert waiting[run], f"{says}: abortTransaction() returned while its send was held: {answers[run]}"
        # A new epoch after an expired send (KIP-360), and after every EndTxn of transactions v2
        # (KIP-890: a 4.x client on Kafka 4.x, whose new clusters finalize transaction.version 2).
        bumped = abort == "expired" or (client.startswith("4.") and system.startswith("4."))
        expected = (aborted.producer_epoch + 1, 0) if bumped else (aborted.producer_epoch, aborted.base_sequence + 1)
        assert (committed.producer_epoch, committed.base_sequence) == expected, \
            f"{says}: expected {'a new epoch' if bumped else 'the next sequence, same epoch'} after the abort: " \
            f"aborted send at epoch {aborted.producer_epoch} sequence {aborted.base_sequence}, the next " \
            f"transaction's at epoch {committed.producer_epoch} sequence {committed.base_sequence}"
