"""The by-value frame: a row per value a shard's sends or reads hold.

Every row of a value is in its shard (the first stage's shards are sets of
values), so whatever a definition asks of one value is decided here: its
send's invocation and completion, every position it was acknowledged or
read at, which of its reads are final reads, and whether the final log of
each partition it was read from holds it. Each column is a minimum, a
maximum or an "any" over the value's rows of one role, -1 where the value
has none; the rows are each reduced into their value's row in one
compiled pass (checkers/compiled.py).

What the second stage needs of the values, handed on as rows
(checkers/kernel/rows.py): each acknowledged send with its invocation
(ACK: send order, and the positions acknowledged), each position a value
was read at that is not its acknowledged one (EXTRA: with the
acknowledgements, every position known to hold a value), and, where
asked, the final logs' records (FINAL).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from checkers.anomaly import Lazy
from checkers.compiled import compiled, lower_at, modulo, raise_at
from checkers.kernel import rows as r
from checkers.kernel.facts import Facts, in_brackets, lookup
from checkers.key_rows import key_rows
from core.history.format import MAX_OFFSET, MAX_PARTITION

NONE = r.NONE
OK, FAIL, INFO = r.SEND_OK, r.SEND_FAIL, r.SEND_INFO  # a send's outcome: the kind of its completion's row
_INVOKE = r.SEND_INVOKE
_POS_BITS = r.POS_BITS
_PART_BITS = MAX_PARTITION.bit_length()


@dataclass
class ByValue:
    """The by-value frame (module docstring): NumPy columns, a row per value."""

    value: np.ndarray
    inv_index: np.ndarray  # the send's invocation (its first, and last: two are refused)
    inv_last: np.ndarray
    comp_index: np.ndarray  # its completion (first and last)
    comp_last: np.ndarray
    process: np.ndarray  # the least and greatest process of its send's events
    process_max: np.ndarray
    outcome: np.ndarray  # OK, FAIL, INFO, or -1: no completion
    ack_pos: np.ndarray  # where an ok completion put it
    read_index: np.ndarray  # its first read, any
    first_pos: np.ndarray  # the least and greatest of its acknowledged and read positions
    last_pos: np.ndarray
    ack_read_index: np.ndarray  # its first read at its acknowledged position
    ack_in_final: np.ndarray  # bool: the final log of its acknowledged partition holds it
    dirty_index: np.ndarray  # its first read during the run from a partition whose final log is known and
    dirty_partition: np.ndarray  # does not hold it, and that partition
    # From the facts, by partition: the highest offset read of its acknowledged partition, where that
    # partition's final log ends, and where the final log of `dirty_partition` ends.
    max_read_offset: np.ndarray = field(default=None)
    final_end: np.ndarray = field(default=None)
    dirty_final_end: np.ndarray = field(default=None)
    # The shard's reads, as the parts they came in, and each one's row: for examples and the groups.
    reads: list[r.Rows] = field(default_factory=list, repr=False)
    read_rows: list[np.ndarray] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        n, ack_pos, read_index, comp_index = len(self.value), self.ack_pos, self.read_index, self.comp_index
        # Columns no condition reads whole, made at the rows asked for (`Lazy`;
        # each closure holds arrays, not the frame: no cycle to outlive it).
        self.ack_partition = Lazy(n, lambda at: _partition_of(ack_pos[at]))
        self.ack_offset = Lazy(n, lambda at: _offset_of(ack_pos[at]))
        self.ok, self.fail, self.info = self.outcome == OK, self.outcome == FAIL, self.outcome == INFO
        self.invoked, self.completed = self.inv_index >= 0, self.comp_index >= 0
        self.read = self.read_index >= 0
        self.unfinished = self.invoked & ~self.completed
        self.unsettled = (self.outcome == NONE) | self.info  # no send of it completed ok or fail
        self.first_seen = Lazy(n, lambda at: _first_seen(read_index[at], comp_index[at]))

    def with_facts(self, facts: Facts) -> "ByValue":
        self.max_read_offset = lookup(facts.max_read, self.ack_pos, of_positions=True)
        self.final_end = lookup(facts.logs.ends, self.ack_pos, of_positions=True)
        ends, dirty_partition = facts.logs.ends, self.dirty_partition
        self.dirty_final_end = Lazy(len(self), lambda at: lookup(ends, dirty_partition[at]))
        self.read_past = _read_past(self.ok, self.ack_pos, self.max_read_offset, np.empty(len(self), bool))
        return self

    def __len__(self) -> int:
        return len(self.value)

    def positions(self, at: np.ndarray) -> list[list[dict]]:
        """The distinct positions of rows `at` (acknowledged, and read, each
        with its first read there), each value's in order of position."""
        found: list[dict[tuple[int, int], dict]] = [{} for _ in range(len(at))]
        place = {int(row): i for i, row in enumerate(at.tolist())}
        for i, row in enumerate(at.tolist()):
            if self.outcome[row] == OK:
                p = int(self.ack_pos[row])
                found[i][(p >> r.POS_BITS, p & MAX_OFFSET)] = {"ack_index": int(self.comp_index[row])}
        reads, read_row = self.reads_joined(at)
        order = np.lexsort((reads.index, reads.pos, read_row))
        for row, pos, index in zip(read_row[order].tolist(), reads.pos[order].tolist(), reads.index[order].tolist()):
            refs = found[place[row]].setdefault((pos >> r.POS_BITS, pos & MAX_OFFSET), {})
            refs.setdefault("read_index", index)
        return [[{"partition": p, "offset": o, **refs[(p, o)]} for p, o in sorted(refs)] for refs in found]

    def reads_joined(self, of: np.ndarray | None = None) -> tuple[r.Rows, np.ndarray]:
        """The reads (of rows `of`, default all) in one block, and each one's row."""
        taken, rows = [], []
        for part, row in zip(self.reads, self.read_rows):
            if of is not None:
                at = np.flatnonzero(np.isin(row, of))
                part, row = part.take(at), row[at]
            taken.append(part)
            rows.append(row)
        return r.Rows.joined(taken), (np.concatenate(rows) if rows else np.empty(0, np.int64))


def _partition_of(pos: np.ndarray) -> np.ndarray:
    return np.where(pos >= 0, pos >> r.POS_BITS, NONE)


def _offset_of(pos: np.ndarray) -> np.ndarray:
    return np.where(pos >= 0, pos & MAX_OFFSET, NONE)


def _first_seen(read_index: np.ndarray, comp_index: np.ndarray) -> np.ndarray:
    """A value's first event seen: its first read if before its completion, else its completion."""
    return np.where((read_index >= 0) & ((comp_index < 0) | (read_index < comp_index)), read_index, comp_index)


@compiled
def _read_past(ok, ack_pos, max_read_offset, out):
    """Which values were acknowledged (`ok`) below the highest offset read of
    their partition, into `out`: one pass, no column of offsets."""
    for i in range(len(ok)):
        offset = ack_pos[i] & MAX_OFFSET if ack_pos[i] >= 0 else NONE
        out[i] = ok[i] and offset < max_read_offset[i]
    return out


def by_value(shard: r.Shard, facts: Facts, cut: int = 1) -> tuple[ByValue, r.Shard]:
    """The frame of a shard's sends and reads, and the rows it hands on to
    the second stage (ACK, EXTRA, and FINAL where `facts` asks for them).
    The rows are taken a part at a time (a batch's, as they were read), so
    the shard's rows are never copied whole. The ACK rows come in `cut`
    parts, each of one of `cut` second stage shards (`Shard.split`'s):
    cutting them again is no copy."""
    sends, reads = shard.parts(r.SENDS), shard.parts(r.READS)
    values, row_of = key_rows([p.value for p in sends] + [p.value for p in reads])
    n = len(values)
    inv_min, inv_max, comp_min, comp_max, proc_min, proc_max, ack_pos = (np.full(n, NONE, np.int64)
                                                                         for _ in range(7))
    outcome = np.full(n, NONE, np.int8)
    for part in sends:
        _reduce_sends(row_of(part.value), part.kind, part.index, part.process, part.pos, inv_min, inv_max, comp_min,
                      comp_max, proc_min, proc_max, outcome, ack_pos)
    read_index, ack_read_index = np.full(n, NONE, np.int64), np.full(n, NONE, np.int64)
    first_pos, last_pos = ack_pos.copy(), ack_pos.copy()
    ack_in_final = np.zeros(n, bool)
    unsettled = (outcome == NONE) | (outcome == INFO)
    want_final = facts.final_records_wanted
    read_rows = []
    # What is gathered of the reads, a part at a time: few rows each (but the final logs', where asked).
    dirty: list[list[np.ndarray]] = [[], [], []]  # row, partition, index of reads during the run of unsettled values
    held: list[np.ndarray] = []  # (row, partition) of those values in a final log
    extra: list[list[np.ndarray]] = [[], [], []]  # row, position, index of reads away from the acknowledged one
    finals: list[list[np.ndarray]] = [[], [], []]  # row, position, index of the final logs' records
    for part in reads:
        row = row_of(part.value)
        read_rows.append(row)
        # Each read is final (in a final-reads bracket of its process), in its
        # partition's final log (final, and below the log's known end), or read
        # during the run from a partition whose final log is known.
        partition = part.pos >> r.POS_BITS
        end = lookup(facts.logs.ends, partition)
        final = in_brackets(part.process, part.index, facts.logs.brackets)
        in_final = final & (end >= 0) & ((part.pos & MAX_OFFSET) < end)
        _reduce_reads(row, part.pos, part.index, in_final, ack_pos, read_index, first_pos, last_pos,
                      ack_read_index, ack_in_final)
        mine = unsettled[row]
        at = np.flatnonzero(~final & (end >= 0) & mine)
        for kept, column in zip(dirty, (row, partition, part.index)):
            kept.append(column[at])
        at = np.flatnonzero(in_final & mine)
        held.append((row[at] << _PART_BITS) | partition[at])
        at = np.flatnonzero(part.pos != ack_pos[row])
        for kept, column in zip(extra, (row, part.pos, part.index)):
            kept.append(column[at])
        if want_final:
            at = np.flatnonzero(in_final)
            for kept, column in zip(finals, (row, part.pos, part.index)):
                kept.append(column[at])
    dirty_index, dirty_partition = _dirty(*(_joined(c) for c in dirty), _joined(held), n)
    frame = ByValue(values, inv_min, inv_max, comp_min, comp_max, proc_min, proc_max, outcome, ack_pos, read_index,
                    first_pos, last_pos, ack_read_index, ack_in_final, dirty_index, dirty_partition,
                    reads=reads, read_rows=read_rows).with_facts(facts)
    handed = {r.ACKS: _acks(frame, cut), r.EXTRAS: _distinct(r.EXTRA, *(_joined(c) for c in extra), values)}
    if want_final:
        handed[r.FINALS] = _distinct(r.FINAL, *(_joined(c) for c in finals), values)
    return frame, r.Shard(handed)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


@compiled
def _reduce_sends(rows, kind, index, process, pos, inv_min, inv_max, comp_min, comp_max, proc_min, proc_max,
                  outcome, ack_pos):
    """Each send event into its value's row (`rows`), in one pass."""
    for i in range(len(rows)):
        row, x = rows[i], index[i]
        if kind[i] == _INVOKE:
            lower_at(inv_min, row, x)
            raise_at(inv_max, row, x)
        else:
            lower_at(comp_min, row, x)
            raise_at(comp_max, row, x)
            raise_at(outcome, row, kind[i])
            if kind[i] == OK:
                raise_at(ack_pos, row, pos[i])
        lower_at(proc_min, row, process[i])
        raise_at(proc_max, row, process[i])


@compiled
def _reduce_reads(rows, pos, index, in_final, ack_pos, read_index, first_pos, last_pos, ack_read_index,
                  ack_in_final):
    """Each read into its value's row, in one pass: its first read, its
    least and greatest position (`first_pos` and `last_pos` begin as the
    acknowledged one), its first read at its acknowledged position, and
    whether the final log of its acknowledged partition holds it."""
    for i in range(len(rows)):
        row, p = rows[i], pos[i]
        lower_at(read_index, row, index[i])
        lower_at(first_pos, row, p)
        raise_at(last_pos, row, p)
        a = ack_pos[row]
        if a >= 0:
            if p == a:
                lower_at(ack_read_index, row, index[i])
            if in_final[i] and (p >> _POS_BITS) == (a >> _POS_BITS):
                ack_in_final[row] = True


def _dirty(row: np.ndarray, partition: np.ndarray, index: np.ndarray, held: np.ndarray,
           n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per value whose send never settled (no ok or fail completion): its
    first read during the run (`row`, `partition`, `index`: those reads) from
    a partition whose final log does not hold it (`held`: the (row,
    partition) pairs of a final log), and that partition (-1, -1: none).
    Such reads are few (the reads of sends that timed out)."""
    first, part = np.full(n, NONE, np.int64), np.full(n, NONE, np.int64)
    if not len(row):
        return first, part
    dirty = np.flatnonzero(~np.isin((row << _PART_BITS) | partition, np.unique(held)))
    dirty = dirty[np.lexsort((index[dirty], row[dirty]))]
    take = np.concatenate(([True], row[dirty][1:] != row[dirty][:-1])) if len(dirty) else dirty.astype(bool)
    dirty = dirty[take]
    first[row[dirty]], part[row[dirty]] = index[dirty], partition[dirty]
    return first, part


def _acks(v: ByValue, cut: int = 1) -> list[r.Rows]:
    """Every acknowledged send, with its invocation and the first read there
    (ACK rows), in `cut` parts by partition as `Shard.split` cuts them
    (each part's rows in the frame's order): one compiled pass to count, one
    to fill, into one block of columns the parts are slices of (made by
    NumPy, which asks for huge pages for it: a compiled loop's arrays are
    first touched a small page at a time)."""
    ack = (v.outcome == OK) & (v.ack_pos >= 0)
    bounds = np.cumsum(np.concatenate(([0], _ack_counts(ack, v.ack_pos, np.zeros(cut, np.int64)))))
    columns = np.empty((6, int(bounds[-1])), np.int64)
    _ack_fill(ack, v.ack_pos, (v.value, v.ack_pos, v.comp_index, v.process, v.inv_index, v.ack_read_index),
              bounds[:-1].copy(), columns)
    names = ("value", "pos", "index", "process", "x", "y")
    return [r.Rows.of(r.ACK, b - a, **{name: c[a:b] for name, c in zip(names, columns)})
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


@compiled
def _ack_counts(ack, ack_pos, count):
    """How many of the `ack` rows go to each part (`count`, by partition)."""
    cut = len(count)
    for i in range(len(ack)):
        if ack[i]:
            count[modulo(ack_pos[i] >> _POS_BITS, cut)] += 1
    return count


@compiled
def _ack_fill(ack, ack_pos, sources, at, columns):
    """The `ack` rows' `sources` into `columns`, each part's from `at` on, in order."""
    cut = len(at)
    for i in range(len(ack)):
        if ack[i]:
            part = modulo(ack_pos[i] >> _POS_BITS, cut)
            j = at[part]
            at[part] += 1
            for c in range(len(sources)):
                columns[c, j] = sources[c][i]


def _distinct(kind: int, row: np.ndarray, pos: np.ndarray, index: np.ndarray, values: np.ndarray) -> r.Rows:
    """Rows of `kind`, one per distinct (value's row, position), with the least index."""
    if not len(row):
        return r.Rows.empty()
    order = np.lexsort((index, pos, row))
    row, pos, index = row[order], pos[order], index[order]
    first = np.concatenate(([True], (row[1:] != row[:-1]) | (pos[1:] != pos[:-1])))
    return r.Rows.of(kind, int(first.sum()), value=values[row[first]], pos=pos[first], index=index[first])


def counts(v: ByValue) -> dict[str, int]:
    """The sends by outcome, and what the results' statistics say of them."""
    unsure = v.info | v.unfinished
    return {"ok": int(v.ok.sum()), "fail": int(v.fail.sum()), "info": int(v.info.sum()),
            "unfinished": int(v.unfinished.sum()), "info_read": int((unsure & v.read).sum()),
            "info_unread": int((unsure & ~v.read).sum()), "unknown_values": int((~v.invoked & v.read).sum()),
            "send_invokes": int(v.invoked.sum())}


# The contract's checks across a value's send events (docs/history.md), in
# the order a history is refused by them: what is wrong, and the first event
# of each found (its index).
SEND_PROBLEMS = (
    ("value sent twice (values must be unique across the history)", lambda v: v.inv_index != v.inv_last,
     "inv_last"),
    ("a send completion without an invocation of its value", lambda v: v.completed & ~v.invoked, "comp_index"),
    ("a second completion of the same send", lambda v: v.comp_index != v.comp_last, "comp_last"),
    ("a send completion before its invocation", lambda v: v.completed & v.invoked & (v.comp_index < v.inv_index),
     "comp_index"),
    ("a send completion by another process than its invocation's", lambda v: v.completed & (v.process_max != v.process),
     "comp_index"),
)


def send_problems(v: ByValue) -> list[int]:
    """The first index of each of SEND_PROBLEMS in the shard (-1: none)."""
    found = []
    for _, broken, column in SEND_PROBLEMS:
        at = getattr(v, column)[broken(v)]
        found.append(int(at.min()) if len(at) else NONE)
    return found
