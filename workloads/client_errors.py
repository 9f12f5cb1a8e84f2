"""Which client errors prove an operation did not happen: the classification table.

A send is `fail` only when the error proves the record was not written;
anything else is `info` (docs/history.md). Getting this wrong in the `fail`
direction is what makes a checker cry wolf (an "aborted read" of a record
that was in fact written), so the rules below are conservative.

Why the producer's settings matter. librdkafka retries a batch internally
(`retries`, default practically unbounded, within `message.timeout.ms`).
The delivery report carries only the error of the *last* attempt. librdkafka
itself tracks whether *any* attempt may have reached the broker
(`rd_kafka_message_status()`: NOT_PERSISTED / POSSIBLY_PERSISTED /
PERSISTED), but confluent-kafka's `Message` does not expose it (checked for
2.16: no status field is copied from the C message), so we cannot ask. A
broker rejection such as NOT_ENOUGH_REPLICAS on the last attempt says nothing
about an earlier attempt that timed out in flight and may have been appended.
Hence:

- A producer that may retry (the default, and always an idempotent one):
  every delivery error is `info`.
- A producer that sends each record once (`retries=0`, not idempotent): the
  broker errors in `REJECTED_BEFORE_APPEND` prove the record absent -- Kafka
  returns them before appending the batch, and librdkafka re-sends a batch
  under retries=0 only after an attempt that is known not to have been
  persisted (a metadata refresh, or a request that was never sent) -- and so
  do the local errors in `NEVER_SENT`. Everything else stays `info`.
- An exception from `produce()` itself means the record was never queued:
  `fail`, whatever the settings.
- acks=0: the broker never answers, so a "successful" delivery report proves
  nothing: `info` with error `ACKS_0`.
- A successful delivery report without an offset (librdkafka's idempotent
  producer reports a retried batch the broker answered as a duplicate that
  way): acknowledged, but at no known position, and the contract's `ok`
  needs one: `info` with error `ACKED_WITHOUT_OFFSET`, which the checker
  never counts against the system.

KAFKA_STORAGE_ERROR is treated as `info` although librdkafka counts it as
not persisted: the leader's log directory failed during the append, and what
reached its files is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError

FAIL = "fail"
INFO = "info"

# Name used for acks=0 deliveries, which carry no broker acknowledgement.
ACKS_0 = "ACKS_0"
# Name used for deliveries reported successful without an offset.
ACKED_WITHOUT_OFFSET = "ACKED_WITHOUT_OFFSET"

# Broker errors returned for a partition's batch before it is appended.
REJECTED_BEFORE_APPEND: dict[int, str] = {
    KafkaError.NOT_ENOUGH_REPLICAS: "the leader checks the ISR against min.insync.replicas before appending",
    KafkaError.NOT_LEADER_FOR_PARTITION: "only the leader appends; a follower or a stale leader rejects the batch",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "the broker hosts no such partition, so there is no log to append to",
    KafkaError.MSG_SIZE_TOO_LARGE: "batch validation before the append rejects oversized records",
    KafkaError.RECORD_LIST_TOO_LARGE: "batch validation before the append rejects oversized batches",
    2: "CORRUPT_MESSAGE (librdkafka: INVALID_MSG): CRC validation happens before the append",
    KafkaError.INVALID_RECORD: "record validation before the append rejects the whole batch",
    KafkaError.INVALID_TIMESTAMP: "timestamp validation before the append rejects the batch",
    KafkaError.INVALID_REQUIRED_ACKS: "the request is rejected before any partition is touched",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "authorization is checked before the append",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "authorization is checked before the append",
    KafkaError.TOPIC_EXCEPTION: "an invalid topic has no log",
    KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT: "format validation before the append rejects the batch",
}

# Local delivery errors for records librdkafka never put on the wire.
NEVER_SENT: dict[int, str] = {
    KafkaError._PURGE_QUEUE: "purged from the partition queue, which holds records not in flight",
    KafkaError._TIMED_OUT_QUEUE: "the request timed out in the client's output queue, before it was sent",
}

# Local delivery errors worth naming in the docs although they stay info.
INDETERMINATE_NOTES: dict[int, str] = {
    KafkaError._MSG_TIMED_OUT: "message.timeout.ms passed; an attempt may be in flight or appended",
    KafkaError._TRANSPORT: "the connection broke after the request may have been sent",
    KafkaError._TIMED_OUT: "no response within request.timeout.ms; the broker may have appended",
    KafkaError.REQUEST_TIMED_OUT: "the leader appended, then timed out waiting for the ISR (acks=all)",
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "the leader appended, then the ISR shrank",
    KafkaError._PURGE_INFLIGHT: "purged while a request was in flight; its response is ignored",
    KafkaError.KAFKA_STORAGE_ERROR: "the log directory failed during the append",
    KafkaError._FATAL: "the producer instance failed fatally; earlier attempts may have been appended",
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER: "idempotence lost track of what the broker has",
    KafkaError.UNKNOWN_PRODUCER_ID: "idempotence lost track of what the broker has",
    KafkaError.INVALID_PRODUCER_EPOCH: "idempotence lost track of what the broker has",
}


@dataclass(frozen=True)
class Outcome:
    """A completion: `type` is ok, fail or info; `error` the client's error name."""

    type: str
    error: str | None = None


def error_name(code: int) -> str:
    """librdkafka's name for an error code (e.g. `_MSG_TIMED_OUT`)."""
    try:
        return KafkaError(code).name()
    except Exception:  # an unknown code: keep the number
        return f"ERROR_{code}"


def classify_delivery(code: int, single_attempt: bool) -> Outcome:
    """The completion of a send whose delivery report carries error `code`.

    `single_attempt`: the producer sends each record at most once
    (`WorkloadConfig.single_attempt`: retries=0 and not idempotent).
    """
    name = error_name(code)
    if single_attempt and (code in REJECTED_BEFORE_APPEND or code in NEVER_SENT):
        return Outcome(FAIL, name)
    return Outcome(INFO, name)


def classify_produce_exception(exc: BaseException) -> Outcome:
    """A send whose `produce()` call raised: the record never entered the
    client's queue, so it cannot have been written."""
    if isinstance(exc, BufferError):
        return Outcome(FAIL, error_name(KafkaError._QUEUE_FULL))
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is not None:
        return Outcome(FAIL, err.name())
    return Outcome(FAIL, type(exc).__name__)


def produce_exception_is_fatal(exc: BaseException) -> bool:
    """True when the instance that raised is unusable (it must be replaced)."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return err is not None and (err.fatal() or err.code() == KafkaError._FATAL)


# --------------------------------------------------------------------------
# Consumers

# Local commit errors raised before anything was sent to the coordinator.
COMMIT_NEVER_SENT: dict[int, str] = {
    KafkaError._NO_OFFSET: "nothing to commit",
    KafkaError._INVALID_ARG: "the client rejected the arguments",
    KafkaError._STATE: "the client was not in a state to commit (e.g. closed)",
}


def classify_commit(code: int) -> Outcome:
    """A commit that failed with `code`. librdkafka may retry a commit
    internally, so a coordinator's rejection after a retry does not prove an
    earlier attempt was not applied: only local errors are `fail`."""
    name = error_name(code)
    return Outcome(FAIL, name) if code in COMMIT_NEVER_SENT else Outcome(INFO, name)


# What a consumer does with an error event from consume().
IGNORE = "ignore"   # informational (a broker went away, a rebalance); the client recovers by itself
EOF = "eof"         # the end of a partition was reached (only with enable.partition.eof)
CRASH = "crash"     # the instance is unusable or its position is unknown: replace it

CONSUMER_CRASH_CODES: dict[int, str] = {
    KafkaError._FATAL: "the consumer instance failed fatally",
    KafkaError._LOG_TRUNCATION: "the log was truncated under the consumer; its position moved without a seek",
    KafkaError._AUTO_OFFSET_RESET: "the position is invalid and auto.offset.reset=error: no reads until moved",
    KafkaError.OFFSET_OUT_OF_RANGE: "the position is gone from the log",
}


def consumer_error_action(err: KafkaError) -> str:
    """How a consumer reacts to an error event returned by consume()."""
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        return EOF
    if err.fatal() or code in CONSUMER_CRASH_CODES:
        return CRASH
    return IGNORE
