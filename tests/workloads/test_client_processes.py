"""Group members as OS processes (workloads/process_slot.py, workloads/client_process.py),
killed with SIGKILL mid-handling against a real local Apache Kafka: the seed notes' two sentences,
no process left and no stale member in the group."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time

import pytest

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from checkers.check import Options, check_history as check
from workloads.config import GroupConfig, WorkloadConfig

from tests.support import need_root
from tests.workloads.history_checks import check_history

pytestmark = pytest.mark.integration


def _wait_for(what, timeout: float = 30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = what()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError("timed out")


def _stop_and_read_back(wl, history):
    """Stop the workload, read every partition to its end, close the history; the stop's report."""
    stop = wl.stop(timeout=10)
    report = wl.final_reads(30.0)
    history.close()
    assert not stop.threads_left and report.complete
    return stop


@pytest.mark.parametrize("commit", ["auto", "after-processing"])
def test_a_member_killed_while_handling_a_poll(kafka, history, started, topic_name, commit):
    # Slow handling (0.1 s a record) and a quick library commit (0.1 s): a poll's records
    # are committed by the library long before they are all handled.
    group = GroupConfig("g", consumers=1, commit=commit, process_s=0.1, commit_interval_s=0.1)
    cfg = WorkloadConfig(topic=topic_name, partitions=1, replication_factor=2, rate=100, producers=1, consumers=0,
                         groups=(group,), client_processes=True)
    wl = started(cfg)
    (slot,) = [s for s in wl.client_processes() if s.role == "member"]
    # Once the member handles a poll of several records, kill it after its second step.
    _wait_for(lambda: wl.stats()["ops"].get("process", {}).get("ok", 0) >= 1)
    time.sleep(1.5)  # a poll's backlog of records piles up behind the slow steps
    os_pid = slot.os_pid
    killed = slot.signal(signal.SIGKILL)
    assert killed is not None
    _wait_for(lambda: slot.pid != killed and slot.os_pid is not None)
    # The successor joins once the group dropped the dead member (its 10 s session), and
    # handles from where the group's commits stood.
    handled = wl.stats()["ops"]["process"]["ok"]
    _wait_for(lambda: wl.stats()["ops"]["process"]["ok"] > handled + 20, timeout=40)
    # The killed process is gone, and the group holds no stale member: only the successor.
    assert not os.path.exists(f"/proc/{os_pid}") or open(f"/proc/{os_pid}/stat").read().split()[2] == "Z"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    members = admin.describe_consumer_groups(["g"])["g"].result(timeout=10).members
    assert [m.client_id for m in members] == [f"harness-c{slot.pid}"]
    _stop_and_read_back(wl, history)

    facts = check_history(history.path)
    mine = facts.by_process(killed)
    # Its history is whole up to the kill: the step it was in ends info, then its crash; nothing after.
    assert [(e["f"], e["type"]) for e in mine[-3:]] == [("process", "info"), ("crash", "invoke"), ("crash", "ok")]
    assert mine[-3]["error"] == "SIGKILL"
    assert sum(e["f"] == "process" and e["type"] == "invoke" for e in mine) == \
        sum(e["f"] == "process" and e["type"] in ("ok", "info") for e in mine)
    # A successor with a new process id joined the group and handled records.
    successor = [e for e in facts.events if e["f"] == "process" and e["type"] == "ok" and e["process"] > killed]
    assert successor and any(e["f"] == "assign" and e.get("group") == "g" and e["process"] > killed
                             for e in facts.events)

    results = check(history.path, Options(engine="local"))
    found = {name: a["count"] for name, a in results["anomalies"].items()}
    assert found["lost-commit"] == 0
    if commit == "auto":
        # Delivered, committed by the library, never handled: the seed's loss.
        assert found["consumer-loss"] > 0 and not results["valid"]
    else:
        # Committed only once handled: nothing lost, the steps before the kill handled again.
        assert found["consumer-loss"] == 0 and found["redelivery"] > 0 and results["valid"]


def test_a_producer_killed_mid_run_leaves_its_sends_in_doubt_and_a_successor_sends_on(history, started, topic_name):
    from workloads.process_slot import VALUE_BLOCK

    cfg = WorkloadConfig(topic=topic_name, partitions=2, replication_factor=2, rate=400, producers=2, consumers=1,
                         client_processes=True)
    wl = started(cfg)
    producers = [s for s in wl.client_processes() if s.role == "producer"]
    assert len(producers) == 2
    _wait_for(lambda: wl.stats()["ops"].get("send", {}).get("ok", 0) >= 200)
    victim = producers[0]
    killed = victim.signal(signal.SIGKILL)
    _wait_for(lambda: victim.pid != killed and victim.os_pid is not None)
    acked = wl.stats()["ops"]["send"]["ok"]
    _wait_for(lambda: wl.stats()["ops"]["send"]["ok"] > acked + 400)
    stop = _stop_and_read_back(wl, history)
    assert stop.sends_without_completion == 0

    facts = check_history(history.path)
    mine = facts.by_process(killed)
    assert [(e["f"], e["type"]) for e in mine[-2:]] == [("crash", "invoke"), ("crash", "ok")]
    doubt = [e for e in mine if e["f"] == "send" and e["type"] == "info"]
    assert all(e["error"] == "SIGKILL" for e in doubt)
    # Each producer process sends values of a block of its own: no value twice.
    senders = {e["process"] for e in facts.of_type("send", "invoke")}
    assert len(senders) == 3
    blocks = {e["process"]: e["value"] // VALUE_BLOCK for e in facts.of_type("send", "invoke")}
    assert len(set(blocks.values())) == 3
    # Every acknowledged value is read back at its position: the kill lost nothing acknowledged.
    for e in facts.of_type("send", "ok"):
        assert (e["partition"], e["offset"]) in facts.reads[e["value"]]
    results = check(history.path, Options(engine="local"))
    assert results["valid"], {k: a["count"] for k, a in results["anomalies"].items() if a["count"]}


def test_a_member_cut_off_the_network_loses_its_partitions_and_rejoins_once_the_cut_is_lifted(
        kafka, history, started, topic_name):
    # A member whose every packet is dropped (infra/client_net.py) falls silent: the group
    # drops it after its session and its partner takes both partitions; once the cut is
    # lifted it joins again. Committing after handling, nothing is lost on the way.
    from infra import client_net

    need_root("cutting a client off the network")
    group = GroupConfig("g", consumers=2, commit="after-processing", process_s=0.005, commit_interval_s=0.2)
    cfg = WorkloadConfig(topic=topic_name, partitions=2, replication_factor=2, rate=200, producers=1, consumers=0,
                         groups=(group,), client_processes=True)
    wl = started(cfg)
    cut, partner = [s for s in wl.client_processes() if s.role == "member"]
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})

    def members() -> list[str] | None:
        """The group's members' client ids; None while the group's coordinator moves or is slow to
        answer (asked again)."""
        try:
            return sorted(m.client_id for m in admin.describe_consumer_groups(["g"])["g"].result(timeout=10).members)
        except concurrent.futures.TimeoutError:
            return None
        except KafkaException as e:
            if e.args[0].code() not in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                        KafkaError.COORDINATOR_NOT_AVAILABLE):
                raise
            return None

    _wait_for(lambda: len(members() or ()) == 2 and wl.stats()["ops"].get("process", {}).get("ok", 0) >= 50)
    client_net.cut(cut.gid)
    try:
        host, port = kafka.bootstrap.split(",")[0].rsplit(":", 1)
        assert not client_net.can_connect(cut.gid, host, int(port), timeout=1.0)
        # Dropped after its 10 s session: the partner alone, holding both partitions.
        _wait_for(lambda: members() == [f"harness-c{partner.pid}"], timeout=60)
    finally:
        client_net.restore(cut.gid)
    _wait_for(lambda: len(members() or ()) == 2, timeout=60)
    _stop_and_read_back(wl, history)

    facts = check_history(history.path)
    assigned = [e for e in facts.events if e["f"] == "assign" and e["type"] == "ok" and e["process"] == partner.pid]
    assert any(sorted(e["partitions"]) == [0, 1] for e in assigned), "the partner took both partitions"
    results = check(history.path, Options(engine="local"))
    found = {name: a["count"] for name, a in results["anomalies"].items()}
    assert found["consumer-loss"] == 0 and found["lost-commit"] == 0 and results["valid"], found


def test_a_plain_consumer_killed_mid_run_is_resumed_where_its_reads_stopped(history, started, topic_name):
    # A plain consumer (assign mode) as a process: killed, its successor takes its partitions
    # from the offsets after its recorded reads, as a supervisor resuming it would.
    cfg = WorkloadConfig(topic=topic_name, partitions=2, replication_factor=2, rate=300, producers=1, consumers=1,
                         client_processes=True)
    wl = started(cfg)
    (reader,) = [s for s in wl.client_processes() if s.role == "consumer"]
    assert reader.partitions == [0, 1]
    _wait_for(lambda: sum(reader.positions.values()) >= 200)
    killed = reader.signal(signal.SIGKILL)
    _wait_for(lambda: reader.pid != killed and reader.os_pid is not None)
    _wait_for(lambda: sum(reader.positions.values()) >= 600)
    _stop_and_read_back(wl, history)

    facts = check_history(history.path)
    mine = facts.by_process(killed)
    assert [(e["f"], e["type"]) for e in mine[-2:]] == [("crash", "invoke"), ("crash", "ok")]
    # The successor was assigned both partitions from where the killed one's reads stopped.
    last = {}
    for e in mine:
        if e["f"] == "poll" and e["type"] == "ok":
            for r in e["records"]:
                last[r["partition"]] = r["offset"] + 1
    first_polls = [e for e in facts.events if e["process"] > killed and e["f"] == "poll" and e["type"] == "ok"
                   and e["records"] and e["process"] != report_process(facts)]
    successor = first_polls[0]["process"]
    firsts = {}
    for e in facts.by_process(successor):
        if e["f"] == "poll" and e["type"] == "ok":
            for r in e["records"]:
                firsts.setdefault(r["partition"], r["offset"])
    assert firsts and all(firsts[p] == last[p] for p in firsts), (firsts, last)
    results = check(history.path, Options(engine="local"))
    assert results["valid"], {k: a["count"] for k, a in results["anomalies"].items() if a["count"]}


def report_process(facts) -> int:
    """The process of the final reads."""
    return next(e["process"] for e in facts.events if e["f"] == "final-reads")


def test_the_client_library_s_debug_lines_reach_the_run_s_clients_log_from_threads_and_processes(
        tmp_path, history, started, topic_name):
    """`debug` in the consumer settings: librdkafka's debug lines, a group
    member's in its own process and a plain consumer's in a thread, land in
    the file the run keeps for them (harness/run/runner.py's _log_to), and
    not in harness.log."""
    import logging

    from harness.run.runner import _log_to

    handler = _log_to(tmp_path / "harness.log", client_debug_to=tmp_path / "clients.log")
    library = logging.getLogger("workloads.librdkafka")
    try:
        cfg = WorkloadConfig(topic=topic_name, partitions=2, replication_factor=2, rate=100, producers=1,
                             consumers=1, groups=(GroupConfig("g-debug", consumers=1),), client_processes=True,
                             consumer_settings={"debug": "cgrp"})
        wl = started(cfg)
        (member,) = [s for s in wl.client_processes() if s.role == "member"]
        _wait_for(lambda: wl.stats()["ops"].get("poll", {}).get("ok", 0) >= 20)
        _stop_and_read_back(wl, history)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
        library.removeHandler(handler.clients)
        library.setLevel(logging.WARNING)
        handler.clients.close()
    kept = (tmp_path / "clients.log").read_text().splitlines()
    # The member's process, its lines under its history process id, printed by
    # librdkafka itself with the time it logged each (the same second as they
    # reached the file, give or take the pipe); the in-thread consumer's too.
    import re
    printed = [m for m in (re.match(r"^\S+ (\d\d:\d\d:\d\d),\d+ DEBUG workloads\.librdkafka\.process: process "
                                    rf"{member.pid}: logged (\d\d:\d\d:\d\d)\.\d{{3}} UTC: CGRP", line)
                                    for line in kept) if m]
    assert printed, kept[:5]
    assert any(m[1] == m[2] for m in printed)
    assert any(" DEBUG workloads.librdkafka: CGRP" in line for line in kept), kept[:5]
    assert " DEBUG " not in (tmp_path / "harness.log").read_text()
