"""The workload against a real local Apache Kafka: histories, stop, final reads, rebalances."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError

from core.errors import UserError
from workloads.config import WorkloadConfig
from workloads.topic import create_topic
from workloads.workload import Workload

from tests.workloads.history_checks import check_history

pytestmark = pytest.mark.integration


def _run(kafka, history, workloads, config: WorkloadConfig, seconds: float = 3.0, final_s: float = 30.0):
    create_topic(kafka.bootstrap, config, timeout_s=30)
    wl = Workload(config, kafka.bootstrap, history)
    workloads.append(wl)
    wl.start()
    time.sleep(seconds)
    live = wl.stats()
    stop = wl.stop(timeout=10)
    report = wl.final_reads(final_s)
    history.close()
    return wl, live, stop, report


@pytest.mark.parametrize("mode", ["assign", "subscribe"])
def test_history_follows_contract_and_final_reads_reach_acked(kafka, history, workloads, topic_name, mode):
    cfg = WorkloadConfig(topic=topic_name, partitions=4, replication_factor=2, rate=800, producers=2,
                         consumers=2, consumer_mode=mode, commit_interval_s=0.5)
    wl, live, stop, report = _run(kafka, history, workloads, cfg)
    facts = check_history(history.path)

    # Every send invoke got its completion from stop(), and nothing else is left open.
    assert stop.sends_without_completion == 0 and not stop.threads_left
    assert facts.incomplete == []
    oks = facts.of_type("send", "ok")
    # Every partition took writes, so the final-read checks below cover each one.
    # (The rate the workload sustains is a benchmark: bench/workload_overhead.py.)
    assert {e["partition"] for e in oks} == set(range(cfg.partitions))
    assert live["ops"]["send"]["invoke"] > 0 and live["ops"]["poll"]["ok"] > 0

    # Keys are value % key_count, values encoded as ASCII digits and read back as ints.
    for inv in list(facts.sends.values())[:100]:
        assert inv["key"] == inv["value"] % cfg.key_count

    # Final reads: complete, every partition past its highest acked offset and high watermark.
    assert report.complete, report
    acked = {}
    for e in oks:
        acked[e["partition"]] = max(acked.get(e["partition"], -1), e["offset"])
    for reach in report.partitions:
        assert reach.done and reach.reached >= reach.high_watermark
        assert reach.reached > acked.get(reach.partition, -1)
    assert set(report.processes).isdisjoint({e["process"] for e in facts.events if e["index"] < oks[-1]["index"]})
    # The final reads are bracketed (docs/history.md): each final reader's polls lie between its
    # final-reads invocation and completion, and the last completion names every partition's end.
    brackets = [e for e in facts.events if e["f"] == "final-reads"]
    assert [(e["process"], e["type"]) for e in brackets] == [(p, t) for p in report.processes for t in ("invoke", "ok")]
    assert all(e["partitions"] == [0, 1, 2, 3] for e in brackets if e["type"] == "invoke")
    assert brackets[-1]["ends"] == [{"partition": r.partition, "offset": r.reached} for r in report.partitions]
    final_polls = [e for e in facts.events if e["f"] == "poll" and e["process"] in report.processes]
    assert final_polls and all(brackets[0]["index"] < e["index"] < brackets[-1]["index"] for e in final_polls)

    # With acks=all on a healthy cluster every acknowledged value is read, at its ack position.
    for e in oks:
        assert (e["partition"], e["offset"]) in facts.reads[e["value"]], f"acked value {e['value']} not read back"
    # A read never returns a value that was not sent.
    assert set(facts.reads) <= set(facts.sends)

    # Consumers committed what they read.
    commits = facts.of_type("commit", "ok")
    assert commits and all(c["offsets"] for c in commits)
    assigns = facts.of_type("assign", "ok")
    consumer_pids = {e["process"] for e in facts.of_type("poll", "ok")} - set(report.processes)
    assert len(consumer_pids) == 2
    if mode == "assign":
        # Explicit assigns: the two consumers split the four partitions.
        main = [a for a in assigns if a["process"] in consumer_pids]
        assert sorted(p for a in main for p in a["partitions"]) == [0, 1, 2, 3]
    else:
        # Rebalances recorded as assign ops, each an invoke and an ok with the new assignment;
        # at some point the group's assignments covered every partition.
        main = [a for a in assigns if a["process"] in consumer_pids]
        assert main
        latest: dict[int, list[int]] = {}
        covered = False
        for a in main:
            latest[a["process"]] = a["partitions"]
            covered |= sorted(p for ps in latest.values() for p in ps) == [0, 1, 2, 3]
        assert covered, main
        invokes = [e for e in facts.of_type("assign", "invoke") if e["process"] in consumer_pids]
        assert len(invokes) == len(main)


def test_idempotent_explicit_partitions(kafka, history, workloads, topic_name):
    cfg = WorkloadConfig(topic=topic_name, partitions=3, replication_factor=2, rate=500, producers=1, consumers=1,
                         idempotent=True, explicit_partitions=True, key_count=6)
    wl, _, _, report = _run(kafka, history, workloads, cfg, seconds=2.0)
    facts = check_history(history.path)
    assert facts.incomplete == [] and report.complete
    oks = facts.of_type("send", "ok")
    assert oks
    for e in oks:
        assert e["partition"] == facts.sends[e["value"]]["key"] % 3
    assert wl.run_info()["producer"]["enable.idempotence"] is True


def test_acks_0_sends_are_info(kafka, history, workloads, topic_name):
    cfg = WorkloadConfig(topic=topic_name, partitions=2, replication_factor=2, rate=300, producers=1, consumers=1,
                         acks="0")
    _, live, _, report = _run(kafka, history, workloads, cfg, seconds=1.5)
    facts = check_history(history.path)
    completions = list(facts.completions.values())
    assert completions and all(e["type"] == "info" and e["error"] == "ACKS_0" for e in completions)
    # acks=0 infos are expected for every send: they do not replace the producer.
    assert not facts.of_type("crash", "ok")
    assert report.complete


def test_stop_completes_every_send_when_nothing_answers(history, workloads):
    """No broker at all: sends pile up to max_in_flight, then stop() purges them.
    A single-attempt producer's purged sends never left the queue: fail."""
    cfg = WorkloadConfig(topic="nowhere", partitions=2, rate=0, producers=2, consumers=1, max_in_flight=50,
                         producer_settings={"retries": 0})
    wl = Workload(cfg, "127.0.0.1:1", history)  # port 1: nothing listens, nothing leaves the host
    workloads.append(wl)
    wl.start()
    time.sleep(1.0)
    assert wl.stats()["in_flight"] <= 2 * 50
    stop = wl.stop(timeout=1.0)
    assert stop.sends_without_completion == 0
    report = wl.final_reads(1.0)
    assert not report.complete and report.partitions and not any(r.done for r in report.partitions)
    history.close()
    facts = check_history(history.path)
    # No partition was read to its end: the final-reads completion says so.
    assert [e.get("ends") for e in facts.events if e["f"] == "final-reads" and e["type"] == "ok"] == [[]]
    assert facts.incomplete == []
    sends = facts.of_type("send", "invoke")
    assert 0 < len(sends) <= 2 * 50, "max_in_flight bounds what a producer has outstanding"
    errors = {e["error"] for e in facts.completions.values()}
    assert errors <= {"_PURGE_QUEUE", "_MSG_TIMED_OUT"} and "_PURGE_QUEUE" in errors
    assert all(e["type"] == "fail" for e in facts.completions.values() if e["error"] == "_PURGE_QUEUE")


def _run_against_nothing(history, workloads, cfg: WorkloadConfig, seconds: float):
    """Run `cfg` for `seconds` against port 1 of loopback (nothing listens, nothing
    leaves the host), stop it, and check its history."""
    wl = Workload(cfg, "127.0.0.1:1", history)
    workloads.append(wl)
    wl.start()
    time.sleep(seconds)
    wl.stop(timeout=0.5)
    history.close()
    return check_history(history.path)


def test_retrying_producer_purged_sends_are_info(history, workloads):
    cfg = WorkloadConfig(topic="nowhere", partitions=1, rate=200, producers=1, consumers=0)
    facts = _run_against_nothing(history, workloads, cfg, 0.5)
    assert facts.completions and facts.incomplete == []
    assert all(e["type"] == "info" for e in facts.completions.values())


@pytest.mark.parametrize("replace", [True, False])
def test_a_producer_whose_send_ended_indeterminate_is_replaced_unless_told_to_keep_it(history, workloads, replace):
    """Sends that time out (nothing listens) end `info`: by default the producer
    is replaced by a new process id, as Jepsen does; replace_on_info=False keeps it."""
    cfg = WorkloadConfig(topic="nowhere", partitions=1, rate=100, producers=1, consumers=0,
                         replace_on_info=replace, producer_settings={"message.timeout.ms": 200})
    facts = _run_against_nothing(history, workloads, cfg, 1.5)
    timed_out = [e for e in facts.completions.values() if e["error"] == "_MSG_TIMED_OUT"]
    assert timed_out and all(e["type"] == "info" for e in timed_out)
    senders = {e["process"] for e in facts.of_type("send", "invoke")}
    crashed = {e["process"] for e in facts.of_type("crash", "ok")}
    if replace:
        assert crashed and len(senders) > 1
    else:
        assert not crashed and len(senders) == 1


def test_bad_client_settings_are_one_line_user_errors(history):
    cfg = WorkloadConfig(producer_settings={"no.such.property": 1}, consumers=0)
    wl = Workload(cfg, "127.0.0.1:1", history)
    with pytest.raises(UserError) as e:
        wl.start()
    assert "no.such.property" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError):
        Workload(WorkloadConfig(), "not a host", history)


def test_create_topic_rejects_impossible_replication(kafka, topic_name):
    cfg = WorkloadConfig(topic=topic_name, partitions=1, replication_factor=5)
    with pytest.raises(UserError) as e:
        create_topic(kafka.bootstrap, cfg, timeout_s=20)
    assert "INVALID_REPLICATION_FACTOR" in str(e.value)


def test_create_topic_accepts_existing_topic_with_same_partitions(kafka, topic_name):
    cfg = WorkloadConfig(topic=topic_name, partitions=2, replication_factor=1)
    create_topic(kafka.bootstrap, cfg, timeout_s=20)
    create_topic(kafka.bootstrap, cfg, timeout_s=20)
    with pytest.raises(UserError) as e:
        create_topic(kafka.bootstrap, WorkloadConfig(topic=topic_name, partitions=3, replication_factor=1),
                     timeout_s=20)
    assert "already exists with 2 partitions" in str(e.value)


class _Delivered:
    """What confluent-kafka hands a delivery callback, as far as the producer reads it."""

    def __init__(self, value: int, offset):
        self._value, self._offset = value, offset

    def partition(self) -> int:
        return 0

    def offset(self):
        return self._offset

    def value(self) -> bytes:
        return str(self._value).encode()


def test_a_delivery_reported_without_an_offset_is_info_not_an_ok_without_position(history, workloads):
    """librdkafka's idempotent producer reports a batch the broker answered as a
    duplicate as delivered with no offset (msg.offset() is None); an `ok` needs a
    position, so it is recorded as info, and the history stays checkable."""
    cfg = WorkloadConfig(topic="nowhere", partitions=1, rate=0, producers=1, consumers=1)
    wl = Workload(cfg, "127.0.0.1:1", history)  # port 1: nothing listens, nothing leaves the host
    client = wl.new_producer_client()
    for value in (7, 8):
        history.record(client.pid, "invoke", "send", key=0, value=value)
        client.outstanding += 1
    client._on_delivery(None, _Delivered(7, None))
    client._on_delivery(None, _Delivered(8, 3))
    client.poll(0)  # records the acknowledgements the reports brought
    history.close()
    facts = check_history(history.path)
    assert [(e["type"], e.get("error"), e.get("offset")) for e in facts.completions.values()] == [
        ("info", "ACKED_WITHOUT_OFFSET", None), ("ok", None, 3)]
    assert client.acked_max == {0: 3}


def test_acknowledgements_are_recorded_by_the_poll_that_served_them_in_the_order_they_came(history, workloads):
    """The delivery callback keeps an acknowledgement; the client's poll records
    the kept ones at one time. A report of another kind records the kept ones
    first, so the process's completions keep their order; nothing kept is lost."""
    cfg = WorkloadConfig(topic="nowhere", partitions=1, rate=0, producers=1, consumers=1)
    wl = Workload(cfg, "127.0.0.1:1", history)  # port 1: nothing listens, nothing leaves the host
    client = wl.new_producer_client()
    for value in (7, 8, 9, 10):
        history.record(client.pid, "invoke", "send", key=0, value=value)
        client.outstanding += 1
    client._on_delivery(None, _Delivered(7, 3))
    assert client.acked == 0  # kept, not yet recorded
    client._on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), _Delivered(8, None))
    client._on_delivery(None, _Delivered(9, 4))
    client._on_delivery(None, _Delivered(10, 5))
    client.poll(0)
    assert (client.acked, client.acked_max, client.outstanding) == (3, {0: 5}, 0)
    history.close()
    facts = check_history(history.path)
    done = sorted(facts.completions.values(), key=lambda e: e["index"])
    assert [(e["type"], e["value"], e.get("offset")) for e in done] == [
        ("ok", 7, 3), ("info", 8, None), ("ok", 9, 4), ("ok", 10, 5)]
    assert done[0]["time"] <= done[1]["time"] <= done[2]["time"] == done[3]["time"]
