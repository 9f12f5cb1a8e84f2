"""harness gen-history: write a synthetic history with planted anomalies.

A small simulation of a Kafka-like run, not a sampler of events: producers
append unique values to partition logs (pipelined sends completing ok, fail
or info), consumers poll their partitions in order (with rebalances,
commits, crashes), the nemesis starts and stops faults (a partition and a
pause, overlapping and crossing), and final reads go
through every partition, bracketed by a `final-reads` operation that names
the end of each partition's log. Anomalies are planted into the logs and
reads on purpose, a known number of each, and the simulation counts every
consequence (a lost write that a consumer reads past is also a poll skip; a
value read at a position that holds another, from a partition whose final
log is known, is also a dirty read), so `expected` holds exactly what a
correct checker must report.

Where the plants go: lost-acked and dirty-read records are appended at the
tails of partitions, read there by a consumer, then cut off the log before
the final reads (replicas that lost what they had served); unseen records
are appended past the final reads' reach in the last partition, which the
final reads then do not report as read to its end.

Transactions (`--transactions R`, and any planted transactional anomaly)
run on partitions of their own (`--txn-partitions`, numbered after the
plain ones), one at a time (each invoked after the one before completed):
each of `--txn-producers` processes, at each tick with probability R,
runs a transaction that sends one record to each of two of them (one
where there is one), reads the next committed record at its own place in
one of them (its reads step only over aborted records, which no read
returns), and commits, or aborts (5 %: its records take offsets no read
returns). Serial transactions make no cycle and tear none; the plants are
small sets of transactions after the fault phase, each set by processes
of its own, invoked after the one before completed, its records after
that one's in every log (so no cycle runs through two sets): two
concurrent ones whose records cross in two partitions (`--ww-cycles`: a
G0); two concurrent ones that read each other's record (`--wr-cycles`: a
G1c and a wr-cycle); one that reads its own record (`--precommitted`);
one whose three records in a partition a fresh reader returns but for the
middle one (`--torn`: a torn-transaction, and a poll-skip, the record
stepped over being acknowledged there); two, one invoked after the other
completed, whose records land the other way round, the later one's in an
offset held free below the earlier one's (`--ww-realtime-cycles`: a
G0-realtime); and three in a cycle of a ww, a wr and a realtime edge that
needs all three (`--ww-wr-realtime-cycles`: a G1c-realtime, and neither a
G0, G1c, G0-realtime nor wr-cycle). The final reads read the
transactions' partitions to their end.

Serial transactions leave the cycles' search
(checkers/kernel/txn_segments.py) nothing to do but the plants: a
transaction's node is its completion's index, and an edge goes backward (to
a lower node), making a segment, only where transactions overlap.
`--txn-overlap K` (K >= 2; 1, the default, is the serial transactions above,
the same history for a seed) makes them overlap as concurrent Kafka
transactions do, without a cycle: each transactional producer is a set of K
processes (transactional ids, one open transaction each), which at each
tick, with chance R, invokes a transaction on its longest idle process; the
transaction reaches its commit point 1 to K ticks later and completes 1 to K
ticks after that, so up to K of a set's transactions are open at once, their
sends and reads interleaved across the partitions, and they complete in
another order than they commit. At its commit point a transaction reads,
then its records take their offsets (aborted: offsets no read returns), so
every partition's records lie in the order of their transactions' commit
points (a broker admitting a partition's transactional records in commit
order) and a read returns only records committed before it. Each of the
transactions' partitions has a reader, one of the sets' processes, that at
each of its commit points reads everything new in it, as a stream task
consumes its input partition (a record a transaction, at a process's own
place, falls ever further behind the partition's end), so it reads records
of transactions committed and not yet completed; the other processes read as
serial ones do. Every ww, wr and realtime edge then runs from an earlier
commit point to a later one: the commit points are a serial order of the
graph, which has no cycle but the planted ones. Yet an edge to a transaction
that committed later but completed sooner runs backward, and such edges are
many (at K = 8, over a third of the ww edges and one wr edge in fifteen). A
segment spans only stretches where some transaction has committed and not
completed, so segments grow quickly with K: with 4 producers at R = 0.9 on 4
partitions, 1M events (about 215,000 transactions) fall into about 1,900
segments at K = 8 (the largest of about 900 transactions), 400 at K = 10
(2,400), 90 at K = 12 (13,000), and at K = 16 into 4, one of nine in ten
transactions. The fault phase's end lets every open transaction commit and
complete, before the plants.

A history in parts (`--parts K`, Parquet only): K independent simulations
of events/K events each, made by worker processes (`--jobs`) and written in
order as DIR/history.parquet/part-00000.parquet, ... (a folder of parts, as
docs/history.md allows): part k on partitions and values of its own (the
simulation numbers them from its plan's `first_partition` and
`first_value`), its indexes, times and processes moved on after part k-1's
by the writer (the only fields that must continue from part to part, and
flat columns, so an Arrow addition each). The anomalies planted are shared
out among the parts and expected.json holds the sums. Memory holds a part
per worker, whatever the size.

Used by tests (property test against the checker) and by benchmarks.
"""

from __future__ import annotations

import gc
import heapq
import multiprocessing
import os
import random
import shutil
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Iterator

import orjson

from checkers.registry import (ABORTED_READ, DIRTY_READ, DUPLICATE, G0, G0_REALTIME, G1C, G1C_REALTIME,
                               INCONSISTENT_OFFSET, LOST_ACKED, LOST_WRITE, NAMES, NONMONOTONIC_POLL,
                               NONMONOTONIC_SEND, POLL_SKIP, PRECOMMITTED_READ, TORN_TRANSACTION, UNSEEN, WR_CYCLE)
from core.errors import UserError
from core.history.format import NEMESIS_PROCESS_ID
from core.history.parquet import events_to_table, write_parquet
from nemesis.partition import grudge_for
from nemesis.registry import FAULTS

# Each plan's field (and --flag) that plants an anomaly -> the anomaly (checkers/registry.py).
ANOMALY_OF = {"lost": LOST_WRITE.name, "lost_acked": LOST_ACKED.name, "dirty_reads": DIRTY_READ.name,
              "duplicates": DUPLICATE.name, "inconsistent": INCONSISTENT_OFFSET.name,
              "aborted": ABORTED_READ.name, "nonmonotonic_polls": NONMONOTONIC_POLL.name, "skips": POLL_SKIP.name,
              "nonmonotonic_sends": NONMONOTONIC_SEND.name, UNSEEN.name: UNSEEN.name, "ww_cycles": G0.name,
              "wr_cycles": WR_CYCLE.name, "precommitted": PRECOMMITTED_READ.name, "torn": TORN_TRANSACTION.name,
              "ww_realtime_cycles": G0_REALTIME.name, "ww_wr_realtime_cycles": G1C_REALTIME.name}
TXN_PLANTS = ("ww_cycles", "wr_cycles", "precommitted", "torn", "ww_realtime_cycles", "ww_wr_realtime_cycles")
PLANTABLE = tuple(ANOMALY_OF)
MS = 1_000_000


@dataclass
class Plan:
    events: int = 10_000
    seed: int = 0
    partitions: int = 6
    producers: int = 4
    consumers: int = 3
    batch: int = 20  # most records one poll returns
    lost: int = 0
    lost_acked: int = 0
    dirty_reads: int = 0
    duplicates: int = 0
    inconsistent: int = 0
    aborted: int = 0
    nonmonotonic_polls: int = 0
    skips: int = 0
    nonmonotonic_sends: int = 0
    unseen: int = 0
    ww_cycles: int = 0
    wr_cycles: int = 0
    precommitted: int = 0
    torn: int = 0
    ww_realtime_cycles: int = 0
    ww_wr_realtime_cycles: int = 0
    transactions: float = 0.0  # each transactional producer's chance of a transaction at each tick
    txn_producers: int = 2
    txn_partitions: int = 2  # the transactions' own partitions (where there are transactions)
    txn_overlap: int = 1  # transactions of a transactional producer open at once (1: one after another)
    fail_rate: float = 0.01
    info_rate: float = 0.01
    hole_rate: float = 0.002  # offsets taken by records the history does not know
    nemesis: bool = True
    final_reads: bool = True  # bracket the final reads (False: a history of a tool that has none)
    # Where numbering starts: a part of a history in parts has partitions and values of its own.
    first_partition: int = 0
    first_value: int = 0


# A partition log holds, at each offset, a value (>= 0); None, a record the
# history does not know (a hole); or hidden(v) < 0, the lost write of v
# (acknowledged at that offset, never delivered). Plain ints, not objects:
# a part of a large history holds a million of them.
def hidden(value: int) -> int:
    return -1 - value


def readable(entry: int | None) -> bool:
    """A record a consumer is given: not a hole, not a lost write."""
    return entry is not None and entry >= 0


@dataclass
class Synthetic:
    events: list[dict]
    expected: dict[str, int]  # anomaly name -> count a correct checker reports
    sends: dict[str, int] = field(default_factory=dict)  # ok / fail / info (unfinished included)
    info_read: int = 0
    info_unread: int = 0


class _Sim:
    def __init__(self, plan: Plan):
        self.p = plan
        self.rng = random.Random(plan.seed)
        # randrange(n) is _randbelow(n) and randint(a, b) a + _randbelow(b - a + 1): the
        # same draws without the argument checks around them (a million calls a part).
        self.below = self.rng._randbelow
        self.parts = list(range(plan.first_partition, plan.first_partition + plan.partitions))
        top = plan.first_partition + plan.partitions
        self.txn_parts = list(range(top, top + txn_partitions(plan)))
        self.logs: dict[int, list[int | None]] = {p: [] for p in self.parts + self.txn_parts}
        self.txn_place: dict[tuple[int, int], int] = {}  # (process, partition) -> the next offset it reads
        # (time, seq, droppable, event) for later completion; index and time are set when it is due.
        self.pending: list[tuple[int, int, bool, dict]] = []
        self.seq = 0
        self.out: list[dict] = []
        self.now = 0
        self.next_value = plan.first_value
        self.next_process = 0
        self.expected = dict.fromkeys(NAMES, 0)
        self.outcome: dict[int, str] = {}  # value -> ok/fail/info/unfinished
        self.read_values: set[int] = set()
        self.info_values: set[int] = set()
        # Each value costs two send events and, read twice in batches, some poll events.
        n_send_estimate = max(100, int(0.9 * plan.events / (2.3 + 4 / min(plan.batch, 10))))
        if plan.transactions > 0:  # transactions take their share of the events (two each, and reads)
            plain = plan.producers * 0.9
            n_send_estimate = max(100, int(n_send_estimate * plain / (plain + 1.5 * plan.txn_producers
                                                                      * plan.transactions)))
        self.plant_at = self._spread(n_send_estimate)
        self.sends_done = 0
        self.held: dict[tuple[int, int], int] = {}  # (producer, partition) -> a value held back
        self.lost: list[tuple[int, int]] = []  # positions of hidden (lost) records

    # -- plumbing

    def _spread(self, n_sends: int) -> dict[int, str]:
        """Send numbers at which to plant each kind, spread over the first 85 % of the run."""
        kinds = []
        for name in ("lost", "duplicates", "aborted", "nonmonotonic_sends"):  # planted at send time
            kinds += [name] * getattr(self.p, name)
        slots = max(len(kinds) * 4, 1)
        span = int(n_sends * 0.85)
        if len(kinds) * 8 > span:
            raise UserError(f"too many planted anomalies ({len(kinds)}) for {self.p.events} events")
        step = span // slots
        at = {}
        for i, kind in enumerate(kinds):
            at[step * (4 * i + 2) + self.rng.randrange(step)] = kind
        return at

    def emit(self, process, type_, f, **fields) -> dict:
        event = {"index": len(self.out), "time": self.now, "process": process, "type": type_, "f": f, **fields}
        self.out.append(event)
        return event

    def later(self, delay: int, process, type_, f, droppable: bool = False, **fields) -> None:
        """A completion `delay` from now; a droppable one may never come (_end_sends)."""
        self.seq += 1
        event = {"index": None, "time": None, "process": process, "type": type_, "f": f, **fields}
        heapq.heappush(self.pending, (self.now + delay, self.seq, droppable, event))

    def flush_due(self) -> None:
        pending, out, now = self.pending, self.out, self.now
        while pending and pending[0][0] <= now:
            event = heapq.heappop(pending)[3]
            event["index"] = len(out)
            event["time"] = now
            out.append(event)

    def new_value(self) -> int:
        self.next_value += 1
        return self.next_value - 1

    def process_id(self) -> int:
        self.next_process += 1
        return self.next_process - 1

    def append(self, partition: int, entry: int | None) -> int:
        log = self.logs[partition]
        log.append(entry)
        return len(log) - 1


class _Consumer:
    """A consumer: reads its partitions in order, tracking what a checker sees."""

    def __init__(self, sim: _Sim, partitions: list[int]):
        self.sim = sim
        self.pid = sim.process_id()
        self.partitions = partitions
        self.position = {p: 0 for p in partitions}
        self.last_read: dict[int, int | None] = {p: None for p in partitions}
        self.committed = {p: 0 for p in partitions}
        self.rewind_next = False
        self.skip_next = False
        sim.emit(self.pid, "invoke", "assign", partitions=partitions)
        sim.emit(self.pid, "ok", "assign", partitions=partitions)

    def reassign(self) -> None:
        """A rebalance: the same partitions again, from the committed offsets."""
        sim = self.sim
        sim.emit(self.pid, "invoke", "assign", partitions=self.partitions)
        sim.emit(self.pid, "ok", "assign", partitions=self.partitions)
        for p in self.partitions:
            self.position[p] = self.committed[p]
            self.last_read[p] = None

    def poll(self, limit_of: dict[int, int] | None = None) -> int:
        """One poll; returns how many records it delivered.

        Every record delivered at offset `o` after `last` (the offset last read
        from its partition) is counted as a checker sees it: `o <= last` is a
        nonmonotonic poll, `o > last + 1` over a record that is there (a lost
        write's included) a poll skip."""
        sim = self.sim
        out, batch, expected, read = sim.out, sim.p.batch, sim.expected, sim.read_values.add
        out.append({"index": len(out), "time": sim.now, "process": self.pid, "type": "invoke", "f": "poll"})
        records: list[dict] = []
        for p in sim.rng.sample(self.partitions, len(self.partitions)):
            log = sim.logs[p]
            end = len(log) if limit_of is None else limit_of[p]
            o, last = self.position[p], self.last_read[p]
            while o < end and len(records) < batch:
                value = log[o]
                o += 1
                if value is None or value < 0:
                    continue
                at = o - 1
                if self.skip_next and last is not None and o < end and readable(log[o]):
                    # A planted skip: jump over a record that is there.
                    self.skip_next = False
                    continue
                if last is not None and at != last + 1:
                    if at <= last:
                        expected[NONMONOTONIC_POLL.name] += 1
                    elif any(log[x] is not None for x in range(last + 1, at)):
                        expected[POLL_SKIP.name] += 1
                last = at
                read(value)
                records.append({"partition": p, "offset": at, "key": value % 97, "value": value})
                if self.rewind_next and at >= 5:
                    back = at - 1 - sim.below(5)
                    if readable(log[back]):
                        # A planted rewind: deliver an earlier record again, then go on from there.
                        self.rewind_next = False
                        expected[NONMONOTONIC_POLL.name] += 1
                        last = back
                        read(log[back])
                        records.append({"partition": p, "offset": back, "key": log[back] % 97, "value": log[back]})
                        o = back + 1
            self.position[p], self.last_read[p] = o, last
            if len(records) >= batch:
                break
        sim.now += sim.below(3) * MS
        out.append({"index": len(out), "time": sim.now, "process": self.pid, "type": "ok", "f": "poll",
                    "records": records})
        return len(records)

    def commit(self) -> None:
        sim = self.sim
        offsets = [{"partition": p, "offset": self.position[p]} for p in self.partitions]
        sim.emit(self.pid, "invoke", "commit", offsets=offsets)
        if sim.rng.random() < 0.05:
            sim.emit(self.pid, "info", "commit", error="REQUEST_TIMED_OUT")
        else:
            sim.emit(self.pid, "ok", "commit", offsets=offsets)
            self.committed = dict(self.position)

    def crash(self) -> None:
        """Torn down after an indeterminate error; goes on as a new process."""
        sim = self.sim
        sim.emit(self.pid, "invoke", "crash")
        sim.emit(self.pid, "ok", "crash")
        self.pid = sim.process_id()
        sim.emit(self.pid, "invoke", "assign", partitions=self.partitions)
        sim.emit(self.pid, "ok", "assign", partitions=self.partitions)
        for p in self.partitions:
            self.position[p] = self.committed[p]
            self.last_read[p] = None


@contextmanager
def _gc_paused():
    """The cyclic collector off while a simulation allocates its million small,
    acyclic objects (events, records): it would scan them again and again for
    cycles there are none of, a large share of the time; reference counting frees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def generate(plan: Plan) -> Synthetic:
    check_plan(plan)
    with _gc_paused():
        return _simulate(plan)


def check_plan(plan: Plan) -> None:
    """What a plan must hold before it is simulated (UserError, naming the flag)."""
    if plan.events < 200:
        raise UserError("--events must be at least 200")
    for name in PLANTABLE:
        if getattr(plan, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must not be negative")
    if plan.partitions < 1 or plan.producers < 1 or plan.consumers < 1:
        raise UserError("--partitions, --producers and --consumers must be at least 1")
    tails = plan.lost_acked + plan.dirty_reads
    if tails and not plan.final_reads:
        raise UserError("--lost-acked and --dirty-reads need final reads (drop --no-final-reads)")
    if tails and plan.unseen and plan.partitions < 2:
        raise UserError("--unseen with --lost-acked or --dirty-reads needs at least 2 partitions")
    if not 0 <= plan.transactions <= 1:
        raise UserError("--transactions must be between 0 and 1")
    if txn_partitions(plan) and (plan.txn_partitions < 2 or plan.txn_producers < 1):
        raise UserError("transactions need --txn-partitions at least 2 and --txn-producers at least 1")
    if plan.txn_overlap < 1:
        raise UserError("--txn-overlap must be at least 1")
    if plan.txn_overlap > 1 and not plan.transactions > 0:
        raise UserError("--txn-overlap goes with --transactions")


def txn_partitions(plan: Plan) -> int:
    """How many partitions of its own a plan's transactions take (none without transactions)."""
    return plan.txn_partitions if plan.transactions > 0 or any(getattr(plan, n) for n in TXN_PLANTS) else 0


def _simulate(plan: Plan) -> Synthetic:
    sim = _Sim(plan)
    rng = sim.rng
    producers = [sim.process_id() for _ in range(plan.producers)]
    txn_producers = [sim.process_id() for _ in range(plan.txn_producers)] \
        if plan.transactions > 0 and plan.txn_overlap == 1 else []
    overlap = _Overlap(sim, [[sim.process_id() for _ in range(plan.txn_overlap)] for _ in range(plan.txn_producers)]) \
        if plan.transactions > 0 and plan.txn_overlap > 1 else None
    parts = sim.parts
    consumers = [_Consumer(sim, parts[i::plan.consumers]) for i in range(min(plan.consumers, plan.partitions))]
    read_plants = ["skip"] * plan.skips + ["rewind"] * plan.nonmonotonic_polls
    rng.shuffle(read_plants)
    fault_open = pause_open = False  # a partition and a pause, which overlap
    tails = plan.lost_acked + plan.dirty_reads
    fixed_tail = 4 * plan.unseen + 8 * plan.inconsistent + 8 * tails + 4 * plan.partitions + 22
    tick = 0
    random_, out = rng.random, sim.out
    # Stop the fault phase when what is left (catch-up and final reads, about
    # two events per batch of records) would bring the total to `events`.
    while len(out) + fixed_tail + 2 * (sim.sends_done // plan.batch) * 1.1 < plan.events:
        tick += 1
        sim.now = max(sim.now, tick * MS)
        sim.flush_due()
        for pid in producers:
            if random_() < 0.9:
                _send(sim, pid)
        for pid in txn_producers:
            if random_() < plan.transactions:
                _transaction(sim, pid)
        if overlap is not None:
            overlap.tick(tick)
        if tick % 3 == 0:
            c = consumers[sim.below(len(consumers))]
            if read_plants and tick > 30 and random_() < 0.25 and not (c.skip_next or c.rewind_next):
                if read_plants.pop() == "skip":
                    c.skip_next = True
                else:
                    c.rewind_next = True
            c.poll()
            r = random_()
            if r < 0.05:
                c.commit()
            elif r < 0.06:
                c.reassign()
            elif r < 0.065:
                c.crash()
        if plan.nemesis and tick % 500 == 0:
            fault_open = _nemesis(sim, fault_open)
        if plan.nemesis and tick % 500 == 350:
            pause_open = _pause(sim, pause_open)
    # The heal ends what is in force, the last started first.
    if fault_open and pause_open:
        fault_open = _nemesis(sim, True)
    if pause_open:
        _pause(sim, True)
    if fault_open:
        _nemesis(sim, True)
    # Sends still held back for a reordering go in now, with nothing after them.
    for pid, partition in list(sim.held):
        _append_held(sim, pid, partition)
    if overlap is not None:  # the open transactions commit and complete; none is invoked
        overlap.drain()
    _end_sends(sim)
    # Consumers catch up; read anomalies not yet placed are placed here.
    for c in consumers:
        while any(c.position[p] < len(sim.logs[p]) for p in c.partitions):
            c.poll()
    if read_plants or any(c.skip_next or c.rewind_next for c in consumers):
        raise UserError("could not place every planted read anomaly; use more --events")
    used: set[tuple[int, int]] = set()
    planted_at = [_plant_inconsistent(sim, producers[0], used) for _ in range(plan.inconsistent)]
    _plant_transactions(sim)
    # The final log of every partition is known but the unseen tail's.
    unseen_part = parts[-1] if plan.unseen else None
    known = [p for p in parts + sim.txn_parts if p != unseen_part] if plan.final_reads else []
    _plant_tails(sim, producers, known)
    sim.expected[DIRTY_READ.name] += sum(1 for p in planted_at if p in known)
    # Unseen: acknowledged records at the end of a partition that no read reaches.
    limit = {p: len(sim.logs[p]) for p in parts + sim.txn_parts}
    for i in range(plan.unseen):
        pid = producers[i % len(producers)]
        value = sim.new_value()
        sim.emit(pid, "invoke", "send", key=value % 97, value=value)
        offset = sim.append(unseen_part, value)
        sim.now += MS
        sim.emit(pid, "ok", "send", value=value, partition=unseen_part, offset=offset)
        sim.outcome[value] = "ok"
        sim.expected[UNSEEN.name] += 1
    # Final reads by a fresh process, up to where the unseen tail begins.
    final = _Consumer(sim, parts + sim.txn_parts)
    if plan.final_reads:
        sim.emit(final.pid, "invoke", "final-reads", partitions=parts + sim.txn_parts)
    while any(final.position[p] < limit[p] for p in final.partitions):
        sim.now += MS
        final.poll(limit)
    if plan.final_reads:
        sim.emit(final.pid, "ok", "final-reads", ends=[{"partition": p, "offset": limit[p]} for p in known])
    _count_lost(sim, limit, set(known))
    return _finish(sim)


def _plant_tails(sim: _Sim, producers: list[int], known: list[int]) -> None:
    """Records a consumer was given and the log then lost: each appended at a
    partition's tail, read there by a fresh process, and cut off with the
    rest of the tail before the final reads (so no offset holds two values).
    An acknowledged one is lost-acked; one whose send timed out, a dirty read."""
    kinds = ["ok"] * sim.p.lost_acked + ["info"] * sim.p.dirty_reads
    if not kinds:
        return
    keep = {p: len(sim.logs[p]) for p in known}
    for i, kind in enumerate(kinds):
        pid, p = producers[i % len(producers)], known[i % len(known)]
        value = sim.new_value()
        sim.emit(pid, "invoke", "send", key=value % 97, value=value)
        offset = sim.append(p, value)
        sim.now += MS
        if kind == "ok":
            sim.emit(pid, "ok", "send", value=value, partition=p, offset=offset)
            sim.expected[LOST_ACKED.name] += 1
        else:
            sim.emit(pid, "info", "send", value=value, error="_MSG_TIMED_OUT")
            sim.info_values.add(value)
            sim.expected[DIRTY_READ.name] += 1
        sim.outcome[value] = kind
        _read_once(sim, p, offset, value)
    for p, length in keep.items():
        del sim.logs[p][length:]


def _end_sends(sim: _Sim) -> None:
    """The fault phase ends: a few sends in flight never complete (info), the rest do."""
    due = sorted(sim.pending)
    sim.pending = []
    for when, seq, droppable, event in due:
        if droppable and sim.rng.random() < 0.3:
            sim.outcome[event["value"]] = "info"
            sim.info_values.add(event["value"])
            continue
        heapq.heappush(sim.pending, (when, seq, False, event))
    if sim.pending:
        sim.now = max(sim.now, max(w for w, _, _, _ in sim.pending))
    sim.flush_due()


def _send(sim: _Sim, pid: int) -> None:
    rng, below, out = sim.rng, sim.below, sim.out
    value = sim.next_value
    sim.next_value += 1
    key = below(97)
    partition = sim.p.first_partition + key % sim.p.partitions
    out.append({"index": len(out), "time": sim.now, "process": pid, "type": "invoke", "f": "send", "key": key,
                "value": value})
    plant = sim.plant_at.pop(sim.sends_done, None) if sim.plant_at else None
    sim.sends_done += 1
    delay = (1 + below(8)) * MS
    if plant == "nonmonotonic_sends" and (pid, partition) not in sim.held:
        # Held back, to be appended after this producer's next acknowledged send here.
        sim.held[(pid, partition)] = value
        sim.outcome[value] = "ok"
        return
    acked = False
    log = sim.logs[partition]
    if plant == "lost":
        offset = sim.append(partition, hidden(value))
        sim.later(delay, pid, "ok", "send", value=value, partition=partition, offset=offset)
        sim.outcome[value] = "ok"
        sim.lost.append((partition, offset))
        acked = True
    elif plant == "duplicates":
        # A retry that was written twice; the ack names the first copy.
        offset = sim.append(partition, value)
        sim.append(partition, value)
        sim.later(delay, pid, "ok", "send", value=value, partition=partition, offset=offset)
        sim.outcome[value] = "ok"
        sim.expected[DUPLICATE.name] += 1
        acked = True
    elif plant == "aborted":
        sim.append(partition, value)
        sim.later(delay, pid, "fail", "send", value=value, error="NOT_ENOUGH_REPLICAS")
        sim.outcome[value] = "fail"
        sim.expected[ABORTED_READ.name] += 1
    else:
        if rng.random() < sim.p.hole_rate:
            log.append(None)
        r = rng.random()
        if r < sim.p.fail_rate:
            sim.later(delay, pid, "fail", "send", value=value, error="NOT_ENOUGH_REPLICAS")
            sim.outcome[value] = "fail"
        elif r < sim.p.fail_rate + sim.p.info_rate:
            if rng.random() < 0.5:
                log.append(value)
            sim.later(delay, pid, "info", "send", value=value, error="_MSG_TIMED_OUT")
            sim.outcome[value] = "info"
            sim.info_values.add(value)
        else:
            log.append(value)
            sim.later(delay, pid, "ok", "send", droppable=True, value=value, partition=partition,
                      offset=len(log) - 1)
            sim.outcome[value] = "ok"
            acked = True
    if acked and sim.held and (pid, partition) in sim.held:
        # The held send lands after this one: acks in invocation order go backwards once.
        _append_held(sim, pid, partition)
        sim.expected[NONMONOTONIC_SEND.name] += 1


def _transaction(sim: _Sim, pid: int) -> None:
    """One transaction of `pid`, invoked and completed before any other
    begins (module docstring): its sends, its read, commit or abort."""
    below, txn_parts = sim.below, sim.txn_parts
    targets = sim.rng.sample(txn_parts, 2)
    values = [sim.new_value() for _ in targets]
    sim.emit(pid, "invoke", "txn", sends=[{"key": v % 97, "value": v} for v in values])
    records = []
    p = txn_parts[below(len(txn_parts))]
    log, o = sim.logs[p], sim.txn_place.get((pid, p), 0)
    while o < len(log) and not readable(log[o]):
        o += 1  # an aborted record: no read returns it
    if o < len(log):
        records.append({"partition": p, "offset": o, "key": log[o] % 97, "value": log[o]})
        sim.read_values.add(log[o])
        sim.txn_place[(pid, p)] = o + 1
    committed = below(20) > 0
    sends = []
    for v, q in zip(values, targets):
        offset = sim.append(q, v if committed else None)
        sends.append({"key": v % 97, "value": v, **({"partition": q, "offset": offset} if committed else {})})
        sim.outcome[v] = "ok" if committed else "fail"
    sim.now += MS
    sim.emit(pid, "ok" if committed else "fail", "txn", sends=sends, records=records,
             **({} if committed else {"error": "ABORTED"}))


class _Overlap:
    """The transactional producers under --txn-overlap K (module docstring):
    each a set of K processes, a transaction open on each at most; every
    step of a transaction (its commit point, its completion) is due at a
    tick and taken in the order due, in the tick's turn of the transactional
    producers, before its invocations."""

    def __init__(self, sim: _Sim, sets: list[list[int]]):
        self.sim = sim
        self.k = sim.p.txn_overlap
        self.free = [deque(s) for s in sets]  # each set's processes with no transaction open, longest idle first
        self.set_of = {pid: i for i, s in enumerate(sets) for pid in s}
        # Each partition's reader, the sets' processes in turn: it reads everything new in it.
        every = [pid for s in sets for pid in s]
        self.reads: dict[int, list[int]] = {}
        for i, p in enumerate(sim.txn_parts):
            self.reads.setdefault(every[i % len(every)], []).append(p)
        # (tick, seq, pid, values): its commit point (values: what it sends) or its completion (an event).
        self.due: list[tuple[int, int, int, object]] = []
        self.seq = 0

    def _at(self, tick: int, pid: int, step) -> None:
        self.seq += 1
        heapq.heappush(self.due, (tick, self.seq, pid, step))

    def tick(self, tick: int) -> None:
        """The steps due by `tick`, then each set's invocation (chance R, on its longest idle process)."""
        sim = self.sim
        self._steps(tick)
        for free in self.free:
            if free and sim.rng.random() < sim.p.transactions:
                pid = free.popleft()
                values = [sim.new_value(), sim.new_value()]
                sim.emit(pid, "invoke", "txn", sends=[{"key": v % 97, "value": v} for v in values])
                self._at(tick + 1 + sim.below(self.k), pid, values)

    def drain(self) -> None:
        """Every open transaction's steps, in order, a tick's at its time."""
        while self.due:
            tick = self.due[0][0]
            self.sim.now = max(self.sim.now, tick * MS)
            self._steps(tick)

    def _steps(self, tick: int) -> None:
        due, sim = self.due, self.sim
        while due and due[0][0] <= tick:
            _, _, pid, step = heapq.heappop(due)
            if isinstance(step, dict):  # its completion
                sim.out.append({"index": len(sim.out), "time": sim.now, "process": pid, **step})
                self.free[self.set_of[pid]].append(pid)
            else:
                self._commit(tick, pid, step)

    def _commit(self, tick: int, pid: int, values: list[int]) -> None:
        """A transaction's commit point: it reads (a partition's reader everything
        new in it, another process the next committed record at its own place
        in one partition), then its records take their offsets (or, aborted,
        offsets no read returns); its completion is due 1..K ticks later."""
        sim = self.sim
        below, txn_parts, place = sim.below, sim.txn_parts, sim.txn_place
        records = []
        mine = self.reads.get(pid)
        for p in mine or (txn_parts[below(len(txn_parts))],):
            log, o = sim.logs[p], place.get((pid, p), 0)
            while o < len(log):
                v = log[o]
                o += 1
                if v is None:  # an aborted record: no read returns it
                    continue
                records.append({"partition": p, "offset": o - 1, "key": v % 97, "value": v})
                sim.read_values.add(v)
                if not mine:
                    break
            place[(pid, p)] = o
        committed = below(20) > 0
        sends = []
        for v, q in zip(values, sim.rng.sample(txn_parts, 2)):
            offset = sim.append(q, v if committed else None)
            sends.append({"key": v % 97, "value": v, **({"partition": q, "offset": offset} if committed else {})})
            sim.outcome[v] = "ok" if committed else "fail"
        self._at(tick + 1 + below(self.k), pid,
                 {"type": "ok" if committed else "fail", "f": "txn", "sends": sends, "records": records,
                  **({} if committed else {"error": "ABORTED"})})


def _plant_transactions(sim: _Sim) -> None:
    """The planted transactional anomalies (module docstring), each a small
    set of transactions by processes of their own, one set after another
    (each invoked after the one before completed, its records after the one
    before's in every log), so that no cycle runs through two sets."""
    p, q = sim.txn_parts[:2] if sim.txn_parts else (None, None)
    at: dict[int, tuple[int, int]] = {}  # a planted value -> (partition, offset)

    def invoke(values: list[int]) -> int:
        pid = sim.process_id()
        sim.emit(pid, "invoke", "txn", sends=[{"key": v % 97, "value": v} for v in values])
        return pid

    def put(v: int, partition: int, offset: int | None = None) -> None:
        """`v` appended to `partition`, or into an `offset` held free for it (a hole until then)."""
        if offset is None:
            offset = sim.append(partition, v)
        else:
            sim.logs[partition][offset] = v
        at[v] = (partition, offset)
        sim.outcome[v] = "ok"

    def record(v: int) -> dict:
        return {"partition": at[v][0], "offset": at[v][1], "key": v % 97, "value": v}

    def commit(pid: int, values: list[int], read: list[int]) -> None:
        sim.emit(pid, "ok", "txn", sends=[{"key": v % 97, "value": v, "partition": at[v][0], "offset": at[v][1]}
                                          for v in values], records=[record(v) for v in read])
        sim.read_values.update(read)

    def concurrent(writes: list[list[tuple[int, int]]], reads: list[list[int]], order: list[int]) -> None:
        """Transactions all invoked before any completes: each one's sends (value, partition),
        appended to the logs in `order` (of values), and the values each then read where they were put."""
        pids = [invoke([v for v, _ in sends]) for sends in writes]
        where = dict(x for sends in writes for x in sends)
        for v in order:
            put(v, where[v])
        sim.now += MS
        for pid, sends, read in zip(pids, writes, reads):
            commit(pid, [v for v, _ in sends], read)

    for _ in range(sim.p.ww_cycles):  # a's record first in p, b's first in q: ww both ways
        a1, a2, b1, b2 = (sim.new_value() for _ in range(4))
        concurrent([[(a1, p), (a2, q)], [(b1, p), (b2, q)]], [[], []], [a1, b1, b2, a2])
        sim.expected[G0.name] += 1
    for _ in range(sim.p.wr_cycles):  # c and d each read the other's record: wr both ways
        c, d = sim.new_value(), sim.new_value()
        concurrent([[(c, p)], [(d, q)]], [[d], [c]], [c, d])
        sim.expected[G1C.name] += 1
        sim.expected[WR_CYCLE.name] += 1
    for _ in range(sim.p.precommitted):  # a transaction that reads its own record
        e = sim.new_value()
        concurrent([[(e, p)]], [[e]], [e])
        sim.expected[PRECOMMITTED_READ.name] += 1
    for _ in range(sim.p.torn):
        # A transaction's three records in p; a reader returns the first and the third, stepping
        # over the second: torn, and a poll skip (the record stepped over is acknowledged there).
        values = [sim.new_value() for _ in range(3)]
        t = invoke(values)
        for v in values:
            put(v, p)
        sim.now += MS
        commit(t, values, [])
        reader = sim.process_id()
        sim.emit(reader, "invoke", "assign", partitions=[p])
        sim.emit(reader, "ok", "assign", partitions=[p])
        for v in values[::2]:
            sim.emit(reader, "invoke", "poll")
            sim.emit(reader, "ok", "poll", records=[record(v)])
            sim.read_values.add(v)
        sim.expected[TORN_TRANSACTION.name] += 1
        sim.expected[POLL_SKIP.name] += 1
    for _ in range(sim.p.ww_realtime_cycles):
        # f completes, then g is invoked (realtime f -> g), yet g's record lands in the offset of p
        # below f's, held free (ww g -> f): no wr edge, so only this cycle's G0-realtime.
        f, g = sim.new_value(), sim.new_value()
        tf = invoke([f])
        free = sim.append(p, None)
        put(f, p)
        sim.now += MS
        commit(tf, [f], [])
        tg = invoke([g])
        put(g, p, free)
        sim.now += MS
        commit(tg, [g], [])
        sim.expected[G0_REALTIME.name] += 1
    for _ in range(sim.p.ww_wr_realtime_cycles):
        # k runs throughout; j reads k's record and completes; then i is invoked and its record lands
        # in the offset of q below k's, held free: ww i -> k, wr k -> j, realtime j -> i. The cycle
        # needs all three kinds (k overlaps i and j, so no realtime edge joins it to them; i reads
        # nothing): G1c-realtime, and neither G0, G1c, G0-realtime nor wr-cycle.
        i, j, k = (sim.new_value() for _ in range(3))
        tk = invoke([k])
        free = sim.append(q, None)
        put(k, q)
        tj = invoke([j])
        put(j, p)
        sim.now += MS
        commit(tj, [j], [k])
        ti = invoke([i])
        put(i, q, free)
        sim.now += MS
        commit(ti, [i], [])
        commit(tk, [k], [])
        sim.expected[G1C_REALTIME.name] += 1


def _append_held(sim: _Sim, pid: int, partition: int) -> None:
    value = sim.held.pop((pid, partition))
    offset = sim.append(partition, value)
    sim.later((1 + sim.below(8)) * MS, pid, "ok", "send", value=value, partition=partition, offset=offset)


def _pause(sim: _Sim, paused: bool) -> bool:
    """A pause of n2, started or stopped: 350 ticks into each partition's cycle of 1000,
    so that pauses and partitions overlap and cross (a pause starts before a partition
    and stops while it is in force; the next pause starts in it and outlives it)."""
    pause = FAULTS["pause"]
    f = pause.stop_action if paused else pause.start_action
    value = {"nodes": ["n2"]}
    sim.emit("nemesis", "invoke", f, value=value)
    sim.emit("nemesis", "ok", f, value={**value, "verified": {"ok": True}})
    return not paused


def _nemesis(sim: _Sim, fault_open: bool) -> bool:
    """A partition isolating n1 of three nodes, started or stopped."""
    partition = FAULTS["partition"]
    f = partition.stop_action if fault_open else partition.start_action
    value = {"grudge": grudge_for("isolate-one", ["n1", "n2", "n3"], (0, 1, 2))}
    sim.emit("nemesis", "invoke", f, value=value)
    sim.emit("nemesis", "ok", f, value=value, verified=True)
    return not fault_open


def _plant_inconsistent(sim: _Sim, producer: int, used: set) -> int:
    """A reader that sees another value at a known position: a fresh process
    reads, once, an info send's value where the log holds an acked one.
    Returns the partition (where its final log is known, also a dirty read)."""
    rng = sim.rng
    for _ in range(10_000):
        p = sim.p.first_partition + rng.randrange(sim.p.partitions)
        if not sim.logs[p]:
            continue
        o = rng.randrange(len(sim.logs[p]))
        entry = sim.logs[p][o]
        if (p, o) not in used and readable(entry) and sim.outcome.get(entry) == "ok":
            break
    else:
        raise UserError("could not place an inconsistent offset; use more --events")
    used.add((p, o))
    value = sim.new_value()
    sim.emit(producer, "invoke", "send", key=value % 97, value=value)
    sim.now += MS
    sim.emit(producer, "info", "send", value=value, error="_MSG_TIMED_OUT")
    sim.outcome[value] = "info"
    sim.info_values.add(value)
    _read_once(sim, p, o, value)
    sim.expected[INCONSISTENT_OFFSET.name] += 1
    return p


def _read_once(sim: _Sim, p: int, o: int, value: int) -> None:
    """A fresh process assigned partition `p` reads `value` at offset `o`, once."""
    pid = sim.process_id()
    sim.emit(pid, "invoke", "assign", partitions=[p])
    sim.emit(pid, "ok", "assign", partitions=[p])
    sim.emit(pid, "invoke", "poll")
    sim.emit(pid, "ok", "poll", records=[{"partition": p, "offset": o, "key": value % 97, "value": value}])
    sim.read_values.add(value)


def _count_lost(sim: _Sim, limit: dict[int, int], known: set[int]) -> None:
    """A hidden record is a lost write where a later one was read; else
    lost-acked where its partition's final log is known, unseen where not."""
    for p, o in sim.lost:
        read_after = any(readable(e) for e in sim.logs[p][o + 1:limit[p]])
        sim.expected[LOST_WRITE.name if read_after else LOST_ACKED.name if p in known else UNSEEN.name] += 1


def _finish(sim: _Sim) -> Synthetic:
    sends = {"ok": 0, "fail": 0, "info": 0}
    for outcome in sim.outcome.values():
        sends[outcome] += 1
    info_read = sum(1 for v in sim.info_values if v in sim.read_values)
    return Synthetic(sim.out, dict(sim.expected), sends, info_read, len(sim.info_values) - info_read)


# --------------------------------------------------------------------------
# A history in parts


@dataclass
class Tally:
    """A history's size and what a correct checker reports of it (expected.json),
    added up part by part for a history in parts."""

    events: int = 0
    expected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NAMES, 0))
    sends: dict[str, int] = field(default_factory=lambda: {"ok": 0, "fail": 0, "info": 0})
    info_read: int = 0
    info_unread: int = 0

    @classmethod
    def of(cls, syn: Synthetic) -> Tally:
        return cls(len(syn.events), dict(syn.expected), dict(syn.sends), syn.info_read, syn.info_unread)

    def add(self, other: Tally) -> None:
        self.events += other.events
        for mine, theirs in ((self.expected, other.expected), (self.sends, other.sends)):
            for name, n in theirs.items():
                mine[name] = mine.get(name, 0) + n
        self.info_read += other.info_read
        self.info_unread += other.info_unread

    def write(self, out: Path, parts: int | None) -> None:
        """out/expected.json (with `parts` for a history in parts)."""
        (out / "expected.json").write_bytes(orjson.dumps(
            {"events": self.events, **({"parts": parts} if parts else {}), "anomalies": self.expected,
             "sends": self.sends, "info_sends": {"read": self.info_read, "unread": self.info_unread}},
            option=orjson.OPT_INDENT_2))


@dataclass
class Part:
    """One part of a history in parts, as its worker made it: its events as an
    Arrow table whose indexes, times and processes count from 0 (the writer
    moves them on), whose partitions and values are already the part's own."""

    table: object  # a pyarrow.Table in core.history.parquet's schema
    processes: int
    tally: Tally


def part_plans(plan: Plan, parts: int) -> list[Plan]:
    """The plans of `plan` in `parts` parts: independent simulations of about
    events/parts events each, seeds seed, seed+1, ..., each on partitions of
    its own (part k's are k*(partitions + txn_partitions) on) and values of its own (from k*10^d,
    10^d above a part's events, so above its values); the planted anomalies
    shared out, the first parts taking what does not divide."""
    if parts < 1:
        raise UserError("--parts must be at least 1")
    if plan.events // parts < 200:
        raise UserError(f"--events {plan.events} in {parts} parts: each part needs at least 200 events")
    stride = 10 ** len(str(-(-plan.events // parts)))
    plans = []
    for k in range(parts):
        share = {name: getattr(plan, name) // parts + (k < getattr(plan, name) % parts) for name in PLANTABLE}
        plans.append(replace(plan, events=plan.events // parts + (k < plan.events % parts), seed=plan.seed + k,
                             first_partition=plan.first_partition + k * (plan.partitions + txn_partitions(plan)),
                             first_value=plan.first_value + k * stride, **share))
    return plans


def make_part(plan: Plan) -> Part:
    """One part: simulated, then turned into Arrow columns (in a worker process)."""
    import pyarrow.compute as pc

    with _gc_paused():
        syn = generate(plan)
        table = events_to_table(syn.events)
    return Part(table, pc.max(table["process"]).as_py() + 1, Tally.of(syn))


def _parts_in_order(plans: list[Plan], jobs: int) -> Iterator[Part]:
    """The parts of `plans`, in order, made by `jobs` worker processes; no more
    than `jobs` are made or waiting at a time, so memory holds a part per worker."""
    if jobs == 1:
        yield from map(make_part, plans)
        return
    # Spawned, not forked: the caller may hold threads (a Spark session's, in tests).
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        todo = iter(plans)
        running = deque(pool.submit(make_part, plan) for plan in islice(todo, jobs))
        while running:
            part = running.popleft().result()
            following = next(todo, None)
            if following is not None:
                running.append(pool.submit(make_part, following))
            yield part


def write_parts(plan: Plan, parts: int, jobs: int, folder: Path, say=lambda line: None) -> Tally:
    """Write `plan` as `parts` Parquet files in `folder` (part-00000.parquet, ...):
    each part moved on to the indexes, times and processes after the previous
    one's (the next part starts 1 ms after it ends), as docs/history.md's
    histories in parts have it. The folder is written beside and then put in
    place whole, so an interrupted write leaves no half history."""
    plans = part_plans(plan, parts)
    tmp = folder.with_name(folder.name + ".tmp")
    _remove(tmp)
    tmp.mkdir(parents=True)
    try:
        written = _write_parts_into(tmp, plans, jobs, say)
    except BaseException:
        _remove(tmp)
        raise
    _remove(folder)
    os.replace(tmp, folder)
    return written


def _write_parts_into(folder: Path, plans: list[Plan], jobs: int, say) -> Tally:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    width = max(5, len(str(len(plans) - 1)))
    index = time_base = process = 0
    total = Tally()
    for k, part in enumerate(_parts_in_order(plans, jobs)):
        table = part.table
        if k + 1 < len(plans) and pc.max(table["value"]).as_py() >= plans[k + 1].first_value:
            raise UserError(f"part {k} of {plans[k].events} events ran into the next part's values; "
                            "plant fewer anomalies per part")
        own = table["process"]
        moved = {"index": pc.add(table["index"], index), "time": pc.add(table["time"], time_base),
                 "process": pc.if_else(pc.equal(own, NEMESIS_PROCESS_ID), own, pc.add(own, process))}
        for name, column in moved.items():
            table = table.set_column(table.schema.get_field_index(name), name, column)
        pq.write_table(table, folder / f"part-{k:0{width}d}.parquet", compression="zstd", row_group_size=250_000)
        index += table.num_rows
        time_base = pc.max(table["time"]).as_py() + MS
        process += part.processes
        total.add(part.tally)
        say(f"part {k + 1}/{len(plans)}: {table.num_rows} events")
    return total


def _remove(path: Path) -> None:
    """A file or a folder, if there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# --------------------------------------------------------------------------
# CLI


def configure(parser) -> None:
    parser.add_argument("--events", type=int, default=10_000, help="about how many events (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", metavar="DIR", required=True,
                        help="folder for history.jsonl/.parquet (a folder of parts with --parts) and expected.json")
    parser.add_argument("--format", choices=("jsonl", "parquet", "both"), default=None,
                        help="default both; with --parts, parquet (the only one)")
    parser.add_argument("--parts", type=int, default=None, metavar="K",
                        help="write the history as K Parquet parts in DIR/history.parquet/, each an independent "
                             "simulation of events/K events on partitions, processes and values of its own, "
                             "later than the one before; planted anomalies are shared out")
    parser.add_argument("--jobs", type=int, default=None, metavar="J",
                        help="with --parts: make parts in J worker processes (default: as many as cores)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions (of each part, with --parts)")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--no-final-reads", dest="final_reads", action="store_false",
                        help="leave out the final-reads bracket, as a tool without one would")
    parser.add_argument("--transactions", type=float, default=0.0, metavar="R",
                        help="each transactional producer's chance of a transaction at each tick (default 0: "
                             "none; 0.9 makes about as many transactions as plain sends per producer)")
    parser.add_argument("--txn-producers", type=int, default=2, help="transactional producers")
    parser.add_argument("--txn-partitions", type=int, default=2,
                        help="the transactions' own partitions (of each part, with --parts)")
    parser.add_argument("--txn-overlap", type=int, default=1, metavar="K",
                        help="each transactional producer a set of K processes whose transactions overlap: "
                             "each one commits, then completes, 1 to K ticks after its step before, a "
                             "partition's records in commit order, so the graph has many backward edges "
                             "(large segments) and no cycle (default 1: one transaction after another)")
    for name in PLANTABLE:
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=0, metavar="K",
                            help=f"plant K {ANOMALY_OF[name]} anomalies (in all, with --parts)")


def run(args) -> int:
    plan = Plan(events=args.events, seed=args.seed, partitions=args.partitions, producers=args.producers,
                consumers=args.consumers, final_reads=args.final_reads, transactions=args.transactions,
                txn_producers=args.txn_producers, txn_partitions=args.txn_partitions, txn_overlap=args.txn_overlap,
                **{name: getattr(args, name) for name in PLANTABLE})
    if args.parts is None:
        if args.jobs is not None:
            raise UserError("--jobs goes with --parts")
        return _write_one(plan, Path(args.out), args.format or "both")
    if args.format not in (None, "parquet"):
        raise UserError("--parts writes Parquet parts: --format parquet or none")
    jobs = (os.cpu_count() or 1) if args.jobs is None else args.jobs
    if jobs < 1:
        raise UserError("--jobs must be at least 1")
    # Bad flags are found here, not in a worker, and before anything is written.
    check_plan(plan)
    part_plans(plan, args.parts)
    out = Path(args.out)
    started = time.monotonic()
    try:
        out.mkdir(parents=True, exist_ok=True)
        _remove(out / "expected.json")  # until this history's is written
        written = write_parts(plan, args.parts, min(jobs, args.parts), out / "history.parquet",
                              say=lambda line: print(line, file=sys.stderr, flush=True))
        _remove(out / "history.jsonl")  # an earlier one's, which would be read beside it
        written.write(out, args.parts)
    except OSError as e:
        raise UserError(f"cannot write to {out}: {e.strerror}") from None
    print(f"wrote {written.events} events in {args.parts} part{'s' * (args.parts != 1)} to "
          f"{out / 'history.parquet'} in {time.monotonic() - started:.1f} s (expected: "
          + ", ".join(f"{k} {v}" for k, v in written.expected.items() if v) + ")")
    return 0


def _write_one(plan: Plan, out: Path, fmt: str) -> int:
    """The history as one file (or one of each format) in `out`."""
    with _gc_paused():
        return _write_files(generate(plan), out, fmt)


def _write_files(syn: Synthetic, out: Path, fmt: str) -> int:
    try:
        out.mkdir(parents=True, exist_ok=True)
        # What an earlier run left under the other names would be read instead of, or beside, this one.
        for name in ("expected.json", "history.jsonl", "history.parquet"):
            _remove(out / name)
        if fmt in ("jsonl", "both"):
            with open(out / "history.jsonl", "wb") as f:
                for e in syn.events:
                    f.write(orjson.dumps(e) + b"\n")
        if fmt in ("parquet", "both"):
            write_parquet(syn.events, out / "history.parquet")
        Tally.of(syn).write(out, None)
    except OSError as e:
        raise UserError(f"cannot write to {out}: {e.strerror}") from None
    print(f"wrote {len(syn.events)} events to {out} (expected: "
          + ", ".join(f"{k} {v}" for k, v in syn.expected.items() if v) + ")")
    return 0

