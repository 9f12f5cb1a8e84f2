"""The error classification table: each code's outcome, and the docs that explain it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from workloads import client_errors as E

DOCS = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"


@pytest.mark.parametrize("code", sorted(E.REJECTED_BEFORE_APPEND))
def test_broker_rejections_fail_only_for_single_attempt_producers(code):
    assert E.classify_delivery(code, single_attempt=True) == E.Outcome("fail", E.error_name(code))
    # A retrying producer may have appended the record on an earlier attempt.
    assert E.classify_delivery(code, single_attempt=False) == E.Outcome("info", E.error_name(code))


@pytest.mark.parametrize("code", sorted(E.NEVER_SENT))
def test_never_sent_fail_only_for_single_attempt_producers(code):
    assert E.classify_delivery(code, True).type == "fail"
    assert E.classify_delivery(code, False).type == "info"


@pytest.mark.parametrize("code", sorted(E.INDETERMINATE_NOTES))
def test_indeterminate_errors_are_info_whatever_the_settings(code):
    for single in (True, False):
        outcome = E.classify_delivery(code, single)
        assert outcome.type == "info" and outcome.error == E.error_name(code)


def test_tables_do_not_overlap():
    assert not set(E.REJECTED_BEFORE_APPEND) & set(E.INDETERMINATE_NOTES)
    assert not set(E.NEVER_SENT) & set(E.INDETERMINATE_NOTES)
    assert not set(E.NEVER_SENT) & set(E.REJECTED_BEFORE_APPEND)


def test_specific_names():
    assert E.classify_delivery(KafkaError.NOT_ENOUGH_REPLICAS, True) == E.Outcome("fail", "NOT_ENOUGH_REPLICAS")
    assert E.classify_delivery(KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, True).type == "info"
    assert E.classify_delivery(KafkaError._MSG_TIMED_OUT, True) == E.Outcome("info", "_MSG_TIMED_OUT")
    assert E.classify_delivery(KafkaError.REQUEST_TIMED_OUT, True).type == "info"
    assert E.classify_delivery(KafkaError._PURGE_INFLIGHT, True).type == "info"
    assert E.classify_delivery(KafkaError.KAFKA_STORAGE_ERROR, True).type == "info"


def test_unknown_codes_are_info():
    for code in (KafkaError.UNKNOWN, KafkaError.NETWORK_EXCEPTION, 31337):
        assert E.classify_delivery(code, True).type == "info"
        assert E.classify_delivery(code, False).type == "info"
    assert E.error_name(KafkaError._TRANSPORT) == "_TRANSPORT"


def test_produce_exceptions_are_fail_never_queued():
    assert E.classify_produce_exception(BufferError("Local: Queue full")) == E.Outcome("fail", "_QUEUE_FULL")
    exc = KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert E.classify_produce_exception(exc) == E.Outcome("fail", "MSG_SIZE_TOO_LARGE")
    assert not E.produce_exception_is_fatal(exc)
    fatal = KafkaException(KafkaError(KafkaError._FATAL, fatal=True))
    assert E.classify_produce_exception(fatal).type == "fail"
    assert E.produce_exception_is_fatal(fatal)
    assert E.produce_exception_is_fatal(KafkaException(KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, fatal=True)))


def test_commit_classification():
    for code in E.COMMIT_NEVER_SENT:
        assert E.classify_commit(code).type == "fail"
    for code in (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError._TIMED_OUT,
                 KafkaError._TRANSPORT, KafkaError.NOT_COORDINATOR):
        assert E.classify_commit(code) == E.Outcome("info", E.error_name(code))


def test_consumer_error_actions():
    assert E.consumer_error_action(KafkaError(KafkaError._PARTITION_EOF)) == E.EOF
    for code in E.CONSUMER_CRASH_CODES:
        assert E.consumer_error_action(KafkaError(code)) == E.CRASH
    assert E.consumer_error_action(KafkaError(KafkaError._TRANSPORT, fatal=True)) == E.CRASH
    for code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_COORDINATOR,
                 KafkaError._MAX_POLL_EXCEEDED):
        assert E.consumer_error_action(KafkaError(code)) == E.IGNORE


def test_docs_table_lists_every_classified_code():
    text = DOCS.read_text()
    tables = (E.REJECTED_BEFORE_APPEND, E.NEVER_SENT, E.INDETERMINATE_NOTES, E.COMMIT_NEVER_SENT,
              E.CONSUMER_CRASH_CODES)
    for table in tables:
        for code in table:
            name = E.error_name(code)
            assert re.search(rf"`{re.escape(name)}`", text), f"{name} is not in docs/workloads.md"
