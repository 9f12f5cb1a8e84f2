"""The transactional clients (workloads/transactions.py): their knobs, and
a run of them on a real Kafka cluster on loopback, with fencing, aborts, a
consume-transform-produce client and a read_uncommitted reader, whose
history must say exactly what the log holds."""

from __future__ import annotations

import time

import pytest

from checkers.check import Options, check_history as check
from core.errors import UserError
from core.history.jsonl import read_jsonl
from workloads.config import TxnConfig, WorkloadConfig

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
