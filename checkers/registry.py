"""Every anomaly the checker reports, one record each, in report order.

The summary, the report, the stories, the examples, `harness gen-history`
and results.json read this table; nothing else names an anomaly. A record
(checkers/anomaly.py says what it holds) is the anomaly's definition: its
condition over a frame of the kernel, written once, run by every engine.
Adding one: a record here (its condition over the columns of an existing
frame, or a column added to the frame's file in checkers/kernel/), its
definition in docs/history.md, and the reference checker's reading of it
(tests/checkers/reference.py); docs/checker.md, "Adding an anomaly".
"""

from __future__ import annotations

import numpy as np

from checkers.anomaly import ALWAYS, IF_IDEMPOTENT, NEVER, Anomaly, pick


def _at(p: dict) -> str:
    refs = []
    if "ack_index" in p:
        refs.append(f"acked event {p['ack_index']}")
    if "read_index" in p:
        refs.append(f"read event {p['read_index']}")
    return f" ({', '.join(refs)})" if refs else ""


# --------------------------------------------------------------------------
# By value: a value's send and every read of it


def _lost_line(e: dict, clock) -> str:
    reach = (f"reads reached offset {e['max_read_offset']}" if e.get("max_read_offset") is not None
             else "no read of that partition")
    return (f"value {e['value']} acknowledged at partition {e['partition']} offset {e['offset']} "
            f"(event {e['ack_index']}), never read; {reach}")


def _acked_unread(v, at, facts) -> list[dict]:
    return pick(v, at, value="value", partition="ack_partition", offset="ack_offset", invoke_index="inv_index",
                ack_index="comp_index", max_read_offset="max_read_offset")


def _acked_record(v, at) -> np.ndarray:
    return np.stack((v.value[at], v.ack_partition[at], v.ack_offset[at]), axis=1)


def _lost_write(v) -> np.ndarray:
    return v.ok & ~v.read & v.read_past


LOST_WRITE = Anomaly(
    name="lost-write", when=ALWAYS, meaning="acknowledged, never read, though reads went past it",
    counted="distinct values", frame="by-value", condition=_lost_write, order=("comp_index", "value"),
    example=_acked_unread, line=_lost_line, story=lambda x, name, e: x.lost(name, e, final=False),
    missing=_acked_record)


def _lost_acked_line(e: dict, clock) -> str:
    read = (f"read at {clock(e['read_time'])} (event {e['read_index']})" if e.get("read_index") is not None
            else "never read")
    return (f"value {e['value']} acknowledged at partition {e['partition']} offset {e['offset']} "
            f"(event {e['ack_index']}), {read}, not in the topic at the end "
            f"(the final log of partition {e['partition']} ends at offset {e['final_end']})")


LOST_ACKED = Anomaly(
    name="lost-acked", when=ALWAYS,
    meaning="acknowledged, not in the topic at the end (the final reads did not find it)",
    counted="distinct values", frame="by-value",
    condition=lambda v: v.ok & (v.final_end >= 0) & ~v.ack_in_final & ~_lost_write(v),
    order=("comp_index", "value"),
    example=lambda v, at, facts: pick(v, at, value="value", partition="ack_partition", offset="ack_offset",
                                      invoke_index="inv_index", ack_index="comp_index", read_index="read_index",
                                      final_end="final_end"),
    enrich=(("read_index", "time", "read_time"),), line=_lost_acked_line,
    story=lambda x, name, e: x.lost(name, e, final=True), missing=_acked_record)

def _dirty_examples(v, at, facts) -> list[dict]:
    out = pick(v, at, value="value", partition="dirty_partition", read_index="dirty_index",
               invoke_index="inv_index", completion_index="comp_index", final_end="dirty_final_end")
    for e, info, invoked in zip(out, v.info[at].tolist(), v.invoked[at].tolist()):
        e["send"] = "info" if info else "never completed" if invoked else "no send"
    return out


def _dirty_line(e: dict, clock) -> str:
    send = {"info": f"its send's outcome unknown (event {e['completion_index']})",
            "never completed": f"its send never completed (event {e['invoke_index']})",
            "no send": "no send in the history wrote it"}.get(e["send"], e["send"])
    return (f"value {e['value']} read from partition {e['partition']} at {clock(e['read_time'])} "
            f"(event {e['read_index']}), {send}, not in the topic at the end "
            f"(its final log ends at offset {e['final_end']})")


DIRTY_READ = Anomaly(
    name="dirty-read", when=ALWAYS,
    meaning="a consumer was given a record whose send never settled, and the topic did not keep it",
    counted="distinct values", frame="by-value", condition=lambda v: v.unsettled & (v.dirty_index >= 0),
    order=("dirty_index", "value"), example=_dirty_examples, enrich=(("read_index", "time", "read_time"),),
    line=_dirty_line, story=lambda x, name, e: x.dirty(name, e))


def _duplicate_line(e: dict, clock) -> str:
    where = ", ".join(f"{p['partition']}/{p['offset']}" + _at(p) for p in e["positions"])
    return f"value {e['value']} at {where}"


DUPLICATE = Anomaly(
    name="duplicate", when=IF_IDEMPOTENT, meaning="one value at two or more positions", counted="distinct values",
    frame="by-value", condition=lambda v: v.first_pos != v.last_pos, order=("first_seen", "value"),
    example=lambda v, at, facts: [{**e, "positions": p} for e, p in zip(
        pick(v, at, value="value", invoke_index="inv_index"), v.positions(at))],
    line=_duplicate_line, story=lambda x, name, e: x.duplicate(name, e, failed=False))


def _aborted_line(e: dict, clock) -> str:
    return (f"value {e['value']} failed ({e.get('error')}, event {e['fail_index']}) "
            f"but was read (event {e['read_index']})")


ABORTED_READ = Anomaly(
    name="aborted-read", when=ALWAYS, meaning="a read returned a value whose send failed", counted="distinct values",
    frame="by-value", condition=lambda v: v.fail & v.read, order=("read_index", "value"),
    example=lambda v, at, facts: [{**e, "error": None, "positions": p} for e, p in zip(
        pick(v, at, value="value", invoke_index="inv_index", fail_index="comp_index", read_index="read_index"),
        v.positions(at))],
    enrich=(("fail_index", "error", "error"),), line=_aborted_line,
    story=lambda x, name, e: x.duplicate(name, e, failed=True))

UNSEEN = Anomaly(
    name="unseen", when=NEVER, meaning="acknowledged, never read, no read reached it", counted="distinct values",
    frame="by-value", condition=lambda v: v.ok & ~v.read & ~v.read_past & (v.final_end < 0),
    order=("comp_index", "value"), example=_acked_unread, line=_lost_line)


# --------------------------------------------------------------------------
# By position: the values at each (partition, offset)


def _inconsistent_line(e: dict, clock) -> str:
    values = ", ".join(f"{v['value']}" + _at(v) for v in e["values"])
    return f"partition {e['partition']} offset {e['offset']} holds values {values}"


INCONSISTENT_OFFSET = Anomaly(
    name="inconsistent-offset", when=ALWAYS, meaning="two values at one position", counted="distinct positions",
    frame="by-position", condition=lambda p: p.n_values >= 2, order=("pos",),
    example=lambda p, at, facts: [{**e, "values": values} for e, values in zip(
        pick(p, at, partition="partition", offset="offset"), p.values_at(at, 20))],
    line=_inconsistent_line, story=lambda x, name, e: x.inconsistent(name, e))


# --------------------------------------------------------------------------
# Read order and send order: each consumer's, each producer's


def _step_line(e: dict, clock) -> str:
    text = (f"process {e['process']} read partition {e['partition']} offset {e['prev_offset']} "
            f"(event {e['prev_index']}) then {e['offset']} (event {e['index']})")
    if "skipped_offset" in e:
        text += f", skipping known offset {e['skipped_offset']}"
    return text


_STEP = dict(process="process", partition="partition", prev_offset="prev_offset", prev_value="prev_value",
             prev_index="prev_index", offset="offset", value="value", index="index")

NONMONOTONIC_POLL = Anomaly(
    name="nonmonotonic-poll", when=ALWAYS, meaning="a consumer went back without assign/seek",
    counted="occurrences", frame="read-order", condition=lambda s: s.offset <= s.prev_offset,
    order=("index", "slot"), example=lambda s, at, facts: pick(s, at, **_STEP), line=_step_line,
    story=lambda x, name, e: x.read_step(name, e))

POLL_SKIP = Anomaly(
    name="poll-skip", when=ALWAYS, meaning="a consumer jumped over a known record", counted="occurrences",
    frame="read-order", condition=lambda s: (s.offset > s.prev_offset + 1) & (s.skipped_offset >= 0),
    order=("index", "slot"), example=lambda s, at, facts: pick(s, at, **_STEP, skipped_offset="skipped_offset"),
    line=_step_line, story=lambda x, name, e: x.read_step(name, e))


def _send_order_line(e: dict, clock) -> str:
    return (f"process {e['process']} sent {e['prev_value']} (event {e['prev_invoke_index']}) "
            f"then {e['value']} (event {e['invoke_index']}) to partition {e['partition']}; "
            f"acked at offsets {e['prev_offset']} then {e['offset']}")


NONMONOTONIC_SEND = Anomaly(
    name="nonmonotonic-send", when=IF_IDEMPOTENT, meaning="a producer's acks went backwards", counted="occurrences",
    frame="send-order", condition=lambda s: s.offset < s.prev_offset, order=("invoke_index",),
    example=lambda s, at, facts: pick(s, at, process="process", partition="partition", prev_value="prev_value",
                                      prev_offset="prev_offset", prev_invoke_index="prev_invoke_index",
                                      value="value", offset="offset", invoke_index="invoke_index",
                                      ack_index="ack_index"),
    line=_send_order_line, story=lambda x, name, e: x.send_order(name, e))


# --------------------------------------------------------------------------
# Replicas at the end


def _replica_examples(f, at, facts) -> list[dict]:
    return [{**e, "replicas": records} for e, records in zip(
        pick(f, at, partition="partition", offset="offset", value="final_value"),
        f.records_at(at, facts.replica_nodes))]


def _replica_line(e: dict, clock) -> str:
    held = ", ".join(f"{x['node']} {x['value']} (epoch {x['epoch']})" for x in e["replicas"] if x["diverges"])
    return (f"partition {e['partition']} offset {e['offset']}: the final log holds {e['value']}, "
            f"but at the end {held}")


REPLICA_DIVERGENCE = Anomaly(
    name="replica-divergence", when=ALWAYS,
    meaning="a replica held another record than the topic's at an offset the final reads read",
    counted="distinct (partition, offset)", frame="replicas", condition=lambda f: f.divergent > 0,
    order=("pos",), example=_replica_examples, line=_replica_line,
    story=lambda x, name, e: x.replica(name, e))


# --------------------------------------------------------------------------
# Consumer groups


def _group_names(examples: list[dict], facts) -> list[dict]:
    for e in examples:
        e["group"] = facts.groups[e["group"]] if 0 <= e["group"] < len(facts.groups) else str(e["group"])
    return examples


def _loss_line(e: dict, clock) -> str:
    delivered = (f"delivered to process {e['read_process']} (event {e['read_index']})"
                 if e.get("read_index") is not None else "never delivered to a member")
    return (f"group {e['group']}: value {e['value']} at partition {e['partition']} offset {e['offset']}, "
            f"{delivered}, never handled, below the group's final committed offset {e['final_committed']}")


CONSUMER_LOSS = Anomaly(
    name="consumer-loss", when=ALWAYS,
    meaning="a consumer group committed past a record no member handled (processed, or read in a committed "
            "transaction of the group): the auto-commit loss, or an aborted transaction's offsets kept",
    counted="distinct (group, value)", frame="group-records",
    condition=lambda g: ((g.offset < g.final_committed) & (g.first_delivered >= 0)
                         & (g.offset >= g.first_delivered) & ~g.handled),
    order=("group", "value"),
    example=lambda g, at, facts: _group_names(pick(
        g, at, group="group", value="value", partition="partition", offset="offset",
        final_committed="final_committed", first_delivered="first_delivered", read_index="read_index",
        read_process="read_process"), facts),
    line=_loss_line, story=lambda x, name, e: x.consumer_loss(name, e))


def _redelivery_line(e: dict, clock) -> str:
    return (f"group {e['group']}: value {e['value']} handled {e['times']} times "
            f"(events {e['first_index']} and {e['second_index']})")


REDELIVERY = Anomaly(
    name="redelivery", when=NEVER,
    meaning="a consumer group handled one record twice or more (processed, or read by committed transactions of "
            "the group): at-least-once",
    counted="distinct (group, value)", frame="group-values", condition=lambda g: g.processed_ok >= 2,
    order=("group", "first_index"),
    example=lambda g, at, facts: _group_names(pick(
        g, at, group="group", value="value", times="processed_ok", first_index="first_index",
        second_index="second_index"), facts),
    line=_redelivery_line)


def _lost_commit_line(e: dict, clock) -> str:
    returned = "none" if e["returned"] == -1 else e["returned"]
    return (f"group {e['group']} partition {e['partition']}: a commit of offset {e['acked']} was acknowledged "
            f"(event {e['acked_index']}), yet a committed read (event {e['completion_index']}) returned {returned}")


LOST_COMMIT = Anomaly(
    name="lost-commit", when=ALWAYS, meaning="a consumer group's acknowledged commit was lost",
    counted="occurrences", frame="commits", condition=lambda c: c.acked > c.returned,
    order=("completion_index",),
    example=lambda c, at, facts: _group_names([{**e, "returned": int(ret)} for e, ret in zip(pick(
        c, at, group="group", partition="partition", invoke_index="invoke_index",
        completion_index="completion_index", acked="acked", acked_index="acked_index"),
        c.returned[at].tolist())], facts),
    line=_lost_commit_line, story=lambda x, name, e: x.lost_commit(name, e))


# --------------------------------------------------------------------------
# Transactions (docs/history.md, "Transactions")


def _precommitted_line(e: dict, clock) -> str:
    return (f"value {e['value']}, sent by the transaction of events {e['invoke_index']}-{e['txn_index']}, "
            f"was read by that same transaction (event {e['read_index']}) before it committed")


PRECOMMITTED_READ = Anomaly(
    name="precommitted-read", when=ALWAYS,
    meaning="a transaction read its own record before it committed (read_committed)",
    counted="distinct values", frame="txn-values", condition=lambda t: t.own_read >= 0, order=("own_read", "value"),
    example=lambda t, at, facts: pick(t, at, value="value", invoke_index="invoke_index", txn_index="txn",
                                      read_index="own_read"),
    line=_precommitted_line)


def _torn_line(e: dict, clock) -> str:
    return (f"process {e['process']} read value {e['read_value']} (offset {e['read_offset']}) of the transaction "
            f"completed at event {e['txn_index']} in partition {e['partition']}, but stepped over its value "
            f"{e['skipped_value']} at offset {e['skipped_offset']} (events {e['prev_index']} then {e['index']})")


TORN_TRANSACTION = Anomaly(
    name="torn-transaction", when=ALWAYS,
    meaning="a read_committed consumer saw part of a committed transaction's records in a partition and "
            "stepped over the rest",
    counted="distinct (transaction, process, partition)", frame="torn", condition=lambda t: t.txn >= 0,
    order=("index", "txn"),
    example=lambda t, at, facts: pick(t, at, txn_index="txn", process="process", partition="partition",
                                      skipped_value="skipped_value", skipped_offset="skipped_offset",
                                      read_value="read_value", read_offset="read_offset", prev_index="prev_index",
                                      index="index"),
    line=_torn_line)


def _cycle_examples(c, at, facts) -> list[dict]:
    return [{**e, "steps": c.cycle[row].steps()} for e, row in zip(pick(c, at, first="first", size="size"),
                                                                   at.tolist())]


def _cycle_line(e: dict, clock) -> str:
    def txn(t: dict) -> str:
        return f"T{t['invoke_index']}" + (f"-{t['complete_index']}" if t["complete_index"] is not None else "")
    steps = e["steps"]
    return (f"{e['size']} transactions in a cycle: "
            + " ".join(f"{txn(s['from'])} -{s['kind']}->" for s in steps) + (f" {txn(steps[0]['from'])}"
                                                                                if steps else ""))


def _cycle(name: str, when: str, meaning: str, condition) -> Anomaly:
    return Anomaly(name=name, when=when, meaning=meaning, counted="strongly connected components", frame="cycles",
                   condition=condition, order=("first", "graph"), example=_cycle_examples, line=_cycle_line)


# The graphs' numbers are checkers/kernel/transactions.py's (WW, DEP, WW_RT, DEP_RT, WR_RT): the kernel
# imports this table, so it does not import them. Kafka does not isolate writes (a partition's log order is not the order transactions commit in), so
# cycles with ww edges are information, as in Jepsen's Kafka test; wr and realtime edges both follow the
# order transactions commit in, and a cycle of them alone is an error.
G0 = _cycle("G0", NEVER, "a cycle of write-write dependencies between transactions", lambda c: c.graph == 0)
G1C = _cycle("G1c", NEVER, "a cycle of write-write and write-read dependencies (at least one write-read)",
             lambda c: (c.graph == 1) & c.has_wr)
G0_REALTIME = _cycle("G0-realtime", NEVER, "a cycle of write-write and realtime dependencies (at least one realtime)",
                     lambda c: (c.graph == 2) & c.has_rt)
G1C_REALTIME = _cycle("G1c-realtime", NEVER,
                      "a cycle of write-write, write-read and realtime dependencies (a write-read and a realtime)",
                      lambda c: (c.graph == 3) & c.has_wr & c.has_rt)
WR_CYCLE = _cycle("wr-cycle", ALWAYS,
                  "a cycle of write-read and realtime dependencies: transactions that each read the other's "
                  "committed records", lambda c: c.graph == 4)


# --------------------------------------------------------------------------
# The table


def _table(*records: Anomaly) -> dict[str, Anomaly]:
    table: dict[str, Anomaly] = {}
    for a in records:
        if a.name in table:
            raise ValueError(f"anomaly {a.name!r} twice")
        table[a.name] = a
    return table


ANOMALIES: dict[str, Anomaly] = _table(
    LOST_WRITE, LOST_ACKED, DIRTY_READ, DUPLICATE, INCONSISTENT_OFFSET, ABORTED_READ, NONMONOTONIC_POLL,
    POLL_SKIP, NONMONOTONIC_SEND, UNSEEN, REPLICA_DIVERGENCE, CONSUMER_LOSS, REDELIVERY, LOST_COMMIT,
    PRECOMMITTED_READ, TORN_TRANSACTION, G0, G1C, G0_REALTIME, G1C_REALTIME, WR_CYCLE)
NAMES = tuple(ANOMALIES)
MEANING = {a.name: a.meaning for a in ANOMALIES.values()}
STORIES = {a.name: a.story for a in ANOMALIES.values() if a.story is not None}


def of_frame(frame: str) -> list[Anomaly]:
    """The anomalies decided over `frame`, in report order."""
    return [a for a in ANOMALIES.values() if a.frame == frame]


def describe(name: str, example: dict, clock) -> str:
    """One line of an example of anomaly `name` (str() of it for a name no record has)."""
    a = ANOMALIES.get(name)
    if a is None:
        return str(example)
    try:
        return a.line(example, clock)
    except (KeyError, TypeError, ValueError):  # an example of another shape (an older results.json)
        return str(example)
