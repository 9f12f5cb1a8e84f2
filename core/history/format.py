"""The history contract of docs/history.md, in code: its vocabulary and the
checks of single events and of what spans events (`OrderCheck`), which the
JSONL reader and the Parquet validator share.

Checks that need joins over the whole history (every completion has its
invocation, values are unique) are the checker's, in Spark.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.errors import HistoryError


TYPES = ("invoke", "ok", "fail", "info")
COMPLETIONS = ("ok", "fail", "info")
CLIENT_FS = ("send", "poll", "assign", "seek", "commit", "crash", "final-reads", "process", "committed", "txn")
FINAL_READS = "final-reads"
# A transaction (docs/history.md, "Transactions"): its sends, the records its
# polls returned, the consumer offsets it commits; and the isolation level a
# poll or a transaction read at (absent: read_committed).
TXN = "txn"
ISOLATION = ("read_committed", "read_uncommitted")
READ_UNCOMMITTED = "read_uncommitted"
# A consumer group's committed offsets read from the cluster: -1 where the group has none.
COMMITTED = "committed"
NO_OFFSET = -1
NEMESIS = "nemesis"
# Parquet stores `process` as int64; the nemesis is this id there.
NEMESIS_PROCESS_ID = -1
BASE_FIELDS = ("index", "time", "process", "type", "f")
# Fields with a column of their own in Parquet; every other field goes to `extra`.
COLUMN_FIELDS = ("key", "value", "partition", "offset", "error", "records", "partitions", "offsets", "ends", "group",
                 "generation", "final", "sends", "isolation")
# Positions are packed into one long by the checker (partition << 40 | offset).
# A partition beyond MAX_PARTITION is rejected. An offset may be any int64
# (MAX_STORED_OFFSET): a real broker has served a record at offset 2^42 + 28
# (a flipped bit in a batch's base offset, which no CRC covers), and that
# read is evidence. The checker folds the few offsets near or above
# MAX_OFFSET into the top of the packed range, in order (checkers/offsets.py).
MAX_PARTITION = (1 << 23) - 1
MAX_OFFSET = (1 << 40) - 1
MAX_STORED_OFFSET = (1 << 63) - 1
# Offsets above this are collected while a history is validated and folded,
# in order, into the top FOLD_ROOM values of the packed range: whatever lies
# at or below it keeps its place, and the order of all offsets is kept.
FOLD_ROOM = 1 << 20
FOLD_ABOVE = MAX_OFFSET - FOLD_ROOM



# --------------------------------------------------------------------------
# Validation of single events


def _is_int(x: Any) -> bool:
    return type(x) is int


def _check_int(event: dict, name: str, where: str, nullable: bool = False) -> None:
    if name not in event:
        raise HistoryError(f"{where}: missing field '{name}'")
    x = event[name]
    if x is None and nullable:
        return
    if not _is_int(x):
        raise HistoryError(f"{where}: field '{name}' must be an integer, not {_show(x)}")


def _show(x: Any) -> str:
    text = orjson.dumps(x).decode() if not isinstance(x, bytes) else repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def check_event(event: Any, where: str) -> None:
    """Raise HistoryError if one event breaks HISTORY.md on its own.

    `where` names the event in the message (e.g. "line 12").
    """
    if not (type(event) is dict and _plain_client_event(event)):
        check_fields(event, where)


def check_fields(event: Any, where: str) -> None:
    """`check_event` field by field, each failure said precisely."""
    if not isinstance(event, dict):
        raise HistoryError(f"{where}: expected a JSON object, got {_show(event)}")
    for name in ("index", "time"):
        _check_int(event, name, where)
    if event["time"] < 0:
        raise HistoryError(f"{where}: 'time' must not be negative")
    if "process" not in event:
        raise HistoryError(f"{where}: missing field 'process'")
    process = event["process"]
    if not (_is_int(process) and process >= 0) and process != NEMESIS:
        raise HistoryError(f"{where}: 'process' must be a non-negative integer or \"nemesis\", not {_show(process)}")
    type_ = event.get("type")
    if type_ not in TYPES:
        raise HistoryError(f"{where}: 'type' must be one of invoke, ok, fail, info; got {_show(type_)}")
    f = event.get("f")
    if not isinstance(f, str) or not f:
        raise HistoryError(f"{where}: 'f' must be a non-empty string, got {_show(f)}")
    if type_ != "invoke" and type_ != "ok" and "error" in event and not isinstance(event["error"], (str, type(None))):
        raise HistoryError(f"{where}: 'error' must be a string")
    if process == NEMESIS:
        return  # a nemesis event's value is free-form
    _check_group_fields(event, where)
    if f not in CLIENT_FS:
        raise HistoryError(f"{where}: unknown client operation f={_show(f)} (expected one of {', '.join(CLIENT_FS)})")
    if f == "send":
        _check_int(event, "value", where)
        if type_ == "invoke" and "key" in event:
            _check_int(event, "key", where, nullable=True)
        if type_ == "ok":
            _check_position(event, where)
    elif f == "poll" and type_ == "ok":
        _check_objects(event, "records", where, _check_record)
    elif (f == "assign" and type_ in ("invoke", "ok")) or (f == FINAL_READS and type_ == "invoke"):
        parts = event.get("partitions")
        if not isinstance(parts, list) or not all(_is_int(p) for p in parts):
            raise HistoryError(f"{where}: 'partitions' must be a list of integers")
    elif f == FINAL_READS and type_ == "ok":
        _check_objects(event, "ends", where, _check_position)
    elif f == "seek" and type_ in ("invoke", "ok"):
        _check_position(event, where)
    elif f == "commit" and type_ in ("invoke", "ok"):
        _check_objects(event, "offsets", where, _check_position)
    elif f == "process" and type_ in ("invoke", "ok"):
        _check_objects(event, "records", where, _check_record)
    elif f == COMMITTED and type_ == "invoke":
        if not isinstance(event.get("group"), str):
            raise HistoryError(f"{where}: a committed read needs 'group' (a string)")
        parts = event.get("partitions")
        if not isinstance(parts, list) or not all(_is_int(p) for p in parts):
            raise HistoryError(f"{where}: 'partitions' must be a list of integers")
    elif f == COMMITTED and type_ == "ok":
        _check_objects(event, "offsets", where, _check_committed)
    elif f == TXN:
        _check_txn(event, type_, where)


def _check_txn(event: dict, type_: str, where: str) -> None:
    """A transaction: `sends` always (an ok completion's with their positions),
    and where present its `records` read and its `offsets` committed."""
    # A committed transaction's sends are acknowledged: each with its position.
    _check_objects(event, "sends", where, _check_record if type_ == "ok" else _check_txn_send)
    if type_ != "invoke" and event.get("records") is not None:
        _check_objects(event, "records", where, _check_record)
    if event.get("offsets") is not None:
        if not isinstance(event.get("group"), str):
            raise HistoryError(f"{where}: a transaction that commits offsets needs 'group' (a string)")
        _check_objects(event, "offsets", where, _check_position)


def _check_txn_send(x: dict, where: str) -> None:
    """A send of a transaction invoked, aborted or unknown: its value, its position where known."""
    _check_int(x, "value", where)
    if "key" in x:
        _check_int(x, "key", where, nullable=True)
    if x.get("partition") is not None or x.get("offset") is not None:
        _check_position(x, where)


def _check_group_fields(event: dict, where: str) -> None:
    """A consumer group's fields, on any client event that carries them: `group`
    a string, `generation` an integer, `final` true or false."""
    if "group" in event and event["group"] is not None and not isinstance(event["group"], str):
        raise HistoryError(f"{where}: 'group' must be a string, not {_show(event['group'])}")
    if "generation" in event and event["generation"] is not None:
        _check_int(event, "generation", where)
    if "final" in event and event["final"] is not None and not isinstance(event["final"], bool):
        raise HistoryError(f"{where}: 'final' must be true or false, not {_show(event['final'])}")
    if event.get("isolation") is not None and event["isolation"] not in ISOLATION:
        raise HistoryError(f"{where}: 'isolation' must be one of {', '.join(ISOLATION)}, not "
                           f"{_show(event['isolation'])}")


def _check_committed(x: dict, where: str) -> None:
    """A committed offset: a partition in range and an offset, -1 where the group has none."""
    _check_int(x, "partition", where)
    _check_int(x, "offset", where)
    if x["partition"] < 0 or x["partition"] > MAX_PARTITION:
        raise HistoryError(f"{where}: 'partition' {x['partition']} is out of range")
    if x["offset"] < NO_OFFSET or x["offset"] > MAX_STORED_OFFSET:
        raise HistoryError(f"{where}: 'offset' {x['offset']} is out of range")


def _plain_client_event(e: dict) -> bool:
    """True for a send, or a poll's ok, that `check_event` passes: most of a
    history, accepted here in one go (the per-field checks were where a JSONL
    history's conversion spent its time). False hands the event to `check_fields`,
    which says what is wrong; so this may refuse more, never pass more."""
    f, type_, index, time_, process = e.get("f"), e.get("type"), e.get("index"), e.get("time"), e.get("process")
    if (type(index) is not int or type(time_) is not int or time_ < 0
            or type(process) is not int or process < 0):
        return False
    if f == "send":
        if type(e.get("value")) is not int:
            return False
        if type_ == "invoke":
            key = e.get("key")
            return key is None or type(key) is int
        if type_ == "ok":
            return _plain_position(e)
        return type_ in ("fail", "info") and (e.get("error") is None or type(e["error"]) is str)
    if f == "poll" and type_ == "ok" and "isolation" not in e:
        records = e.get("records")
        if type(records) is not list:
            return False
        for r in records:
            if type(r) is not dict or type(r.get("value")) is not int or not _plain_position(r):
                return False
            key = r.get("key")
            if key is not None and type(key) is not int:
                return False
        return True
    return False


def _plain_position(x: dict) -> bool:
    p, o = x.get("partition"), x.get("offset")
    return type(p) is int and type(o) is int and 0 <= p <= MAX_PARTITION and 0 <= o <= MAX_STORED_OFFSET


def _check_position(x: dict, where: str) -> None:
    """`partition` and `offset`: integers, not negative, the partition small enough to pack."""
    for name in ("partition", "offset"):
        _check_int(x, name, where)
        if x[name] < 0 or x[name] > (MAX_STORED_OFFSET if name == "offset" else MAX_PARTITION):
            raise HistoryError(f"{where}: '{name}' {x[name]} is out of range")


def _check_record(r: dict, where: str) -> None:
    _check_position(r, where)
    _check_int(r, "value", where)
    if "key" in r:
        _check_int(r, "key", where, nullable=True)


def _check_objects(event: dict, name: str, where: str, check_one) -> None:
    """`event[name]` is a list of objects, each passing `check_one(obj, where)`."""
    items = event.get(name)
    if not isinstance(items, list):
        raise HistoryError(f"{where}: '{name}' must be a list")
    for i, item in enumerate(items):
        at = f"{where}: {name}[{i}]"
        if not isinstance(item, dict):
            raise HistoryError(f"{at} must be an object")
        check_one(item, at)


class OrderCheck:
    """Checks what spans events, fed one event at a time in file order:
    index i on the i-th event, time non-decreasing, and with `pairs` on,
    each completion answering an outstanding invocation of its process (by
    value for sends, by order for the rest) and send values unique.

    Pairing keeps every send value in memory, so the Parquet path leaves it
    to the checker's Spark pass instead.
    """

    def __init__(self, pairs: bool = True) -> None:
        self.next_index = 0
        self.last_time = 0
        self.pairs = pairs
        self._sent: dict[int, object] = {}  # value -> process while outstanding, None once complete
        self._open: dict[tuple, int] = {}  # (process, f) -> outstanding invocations

    def event(self, event: dict, where: str) -> None:
        if event["index"] != self.next_index:
            raise HistoryError(f"{where}: 'index' is {event['index']}, expected {self.next_index} (indexes count 0, 1, 2, ... in file order)")
        if event["time"] < self.last_time:
            raise HistoryError(f"{where}: 'time' {event['time']} is before the previous event's {self.last_time}")
        self.next_index += 1
        self.last_time = event["time"]
        if self.pairs:
            self._pair(event, where)

    def _pair(self, e: dict, where: str) -> None:
        process, f = e["process"], e["f"]
        if f == "send" and process != NEMESIS:
            value = e["value"]
            if e["type"] == "invoke":
                if value in self._sent:
                    raise HistoryError(f"{where}: value {value} sent twice (values must be unique across the history)")
                self._sent[value] = process
                return
            owner = self._sent.get(value, ...)
            if owner is ...:
                raise HistoryError(f"{where}: a send completion for value {value}, which was never invoked")
            if owner is None:
                raise HistoryError(f"{where}: a second completion of the send of value {value}")
            if owner != process:
                raise HistoryError(f"{where}: value {value} was sent by process {owner} but completed by {process}")
            self._sent[value] = None
            return
        key = (process, f)
        if e["type"] == "invoke":
            self._open[key] = self._open.get(key, 0) + 1
        elif self._open.get(key, 0) == 0:
            raise HistoryError(f"{where}: a completion of '{f}' without an invocation by process {process} before it")
        else:
            self._open[key] -= 1
