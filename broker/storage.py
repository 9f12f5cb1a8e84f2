"""Per-partition logs on disk: segment files of record batches, an offset index,
recovery after kill -9, truncation, and the broker's HW checkpoint file.

Layout of a partition directory `<data-dir>/<topic>-<partition>/`:
  <base offset, 20 digits>.log    record batches, back to back, as produced
  <base offset, 20 digits>.index  sparse index: (offset - base: int32, position: int32)
  leader-epoch-checkpoint         the leader-epoch cache: (epoch, start offset) per line
The broker-wide `replication-offset-checkpoint` holds every partition's HW.

Recovery scans every segment's batch headers (and the CRCs of the last
segment), cuts the log at the first torn or corrupt batch and rebuilds the
indexes; the scan also yields the headers the partition needs to rebuild
its leader-epoch cache and idempotent-producer state.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import time
from dataclasses import dataclass, field

from broker import records
from broker.records import HEADER_SIZE, BatchHeader

log = logging.getLogger("broker.storage")

_INDEX_ENTRY = struct.Struct(">ii")
_SCAN_CHUNK = 4 << 20


def _seg_name(base: int, ext: str) -> str:
    return f"{base:020d}.{ext}"


@dataclass
class Segment:
    base_offset: int
    dir: str
    fd: int = -1
    size: int = 0
    next_offset: int = 0  # one past the last offset stored here
    index_offsets: list[int] = field(default_factory=list)  # absolute base offsets of indexed batches
    index_positions: list[int] = field(default_factory=list)
    bytes_since_index: int = 0
    index_fd: int = -1

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, _seg_name(self.base_offset, "log"))

    @property
    def index_path(self) -> str:
        return os.path.join(self.dir, _seg_name(self.base_offset, "index"))

    def open(self) -> None:
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.index_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT, 0o644)

    def close(self) -> None:
        for fd in (self.fd, self.index_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.index_fd = -1

    def add_index_entry(self, offset: int, position: int, write: bool = True) -> None:
        self.index_offsets.append(offset)
        self.index_positions.append(position)
        self.bytes_since_index = 0
        if write:
            os.write(self.index_fd, _INDEX_ENTRY.pack(offset - self.base_offset, position))

    def rewrite_index(self) -> None:
        data = b"".join(_INDEX_ENTRY.pack(o - self.base_offset, p)
                        for o, p in zip(self.index_offsets, self.index_positions))
        os.ftruncate(self.index_fd, 0)
        os.pwrite(self.index_fd, data, 0)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before `offset` (0 if none)."""
        i = bisect.bisect_right(self.index_offsets, offset) - 1
        return self.index_positions[i] if i >= 0 else 0


def scan_file(fd: int, start: int, end: int, check_crc: bool):
    """Yields (position, header) of the whole, valid batches in fd[start:end]."""
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
        if not chunk:
            return
        consumed = 0
        for p, h in records.iter_batches(chunk, 0, check_crc=check_crc):
            yield pos + p, h
            consumed = p + h.length
        if consumed == 0:
            # One batch larger than the chunk, or a torn / bad batch.
            if len(chunk) < HEADER_SIZE:
                return
            try:
                h = records.parse_header(chunk, 0)
            except records.InvalidBatch:
                return
            if pos + h.length > end:
                return
            whole = os.pread(fd, h.length, pos)
            if len(whole) < h.length or (check_crc and not records.crc_ok(whole, 0, h.length)):
                return
            if h.attributes & records.CONTROL_FLAG:
                h.control_type = records.control_type(whole, 0, h.length)
            yield pos, h
            consumed = h.length
        pos += consumed


class Log:
    """One partition's replicated log: append, read, truncate, flush, recover."""

    def __init__(self, directory: str, segment_bytes: int = 1 << 30, index_interval: int = 4096,
                 flush_messages: int | None = None):
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.index_interval = index_interval
        self.flush_messages = flush_messages
        self.segments: list[Segment] = []
        self.unflushed_messages = 0
        self.dirty = False
        self.last_flush = time.monotonic()
        self.recovered_cut_bytes = 0  # bytes dropped by recovery (torn tail)
        os.makedirs(directory, exist_ok=True)

    # -- opening and recovery -------------------------------------------------

    def open(self, on_batch=None) -> None:
        """Opens (or creates) the log, cutting a torn tail; calls on_batch(header) for every batch."""
        bases = sorted(int(n[:-4]) for n in os.listdir(self.dir)
                       if n.endswith(".log") and n[:-4].isdigit())
        if not bases:
            bases = [0]
        expected_next = None
        for i, base in enumerate(bases):
            if expected_next is not None and base != expected_next:
                # A gap means a later segment cannot be trusted: drop it and everything after.
                for stale in bases[i:]:
                    for ext in ("log", "index"):
                        try:
                            os.unlink(os.path.join(self.dir, _seg_name(stale, ext)))
                        except FileNotFoundError:
                            pass
                log.warning("%s: dropped segments from %d (expected %d)", self.dir, base, expected_next)
                break
            seg = Segment(base, self.dir)
            seg.open()
            seg.next_offset = base
            file_size = os.fstat(seg.fd).st_size
            last = i == len(bases) - 1
            good_end = 0
            for pos, h in scan_file(seg.fd, 0, file_size, check_crc=last):
                if h.base_offset != seg.next_offset:
                    break  # offsets must be contiguous; anything else is damage
                if not seg.index_offsets or seg.bytes_since_index >= self.index_interval:
                    seg.add_index_entry(h.base_offset, pos, write=False)
                seg.bytes_since_index += h.length
                seg.next_offset = h.next_offset
                good_end = pos + h.length
                if on_batch is not None:
                    on_batch(h)
            if good_end < file_size:
                self.recovered_cut_bytes += file_size - good_end
                log.warning("%s: recovery cut %d torn/corrupt bytes at position %d of segment %d",
                            self.dir, file_size - good_end, good_end, base)
                os.ftruncate(seg.fd, good_end)
            seg.size = good_end
            seg.rewrite_index()
            self.segments.append(seg)
            expected_next = seg.next_offset
            if good_end < file_size and not last:
                # Damage in a middle segment: the segments after it are unreachable.
                for stale in bases[i + 1:]:
                    for ext in ("log", "index"):
                        try:
                            os.unlink(os.path.join(self.dir, _seg_name(stale, ext)))
                        except FileNotFoundError:
                            pass
                break

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments = []

    # -- state ----------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The log end offset (LEO): the offset the next appended record gets."""
        return self.segments[-1].next_offset

    @property
    def start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- writing --------------------------------------------------------------

    def append(self, batch, header: BatchHeader) -> None:
        """Appends one batch whose base offset is already the LEO."""
        seg = self.segments[-1]
        if header.base_offset != seg.next_offset:
            raise ValueError(f"append at {header.base_offset}, log end is {seg.next_offset}")
        if seg.size > 0 and seg.size + header.length > self.segment_bytes:
            seg = self._roll()
        pos = seg.size
        n = os.pwrite(seg.fd, batch, pos)
        if n != header.length:
            raise OSError(f"short write to {seg.log_path}")
        if not seg.index_offsets or seg.bytes_since_index >= self.index_interval:
            seg.add_index_entry(header.base_offset, pos)
        seg.bytes_since_index += header.length
        seg.size += header.length
        seg.next_offset = header.next_offset
        self.dirty = True
        self.unflushed_messages += header.record_count
        if self.flush_messages is not None and self.unflushed_messages >= self.flush_messages:
            self.flush()

    def _roll(self) -> Segment:
        seg = Segment(self.end_offset, self.dir)
        seg.open()
        seg.next_offset = seg.base_offset
        self.segments.append(seg)
        log.info("%s: rolled new segment at offset %d", self.dir, seg.base_offset)
        return seg

    def flush(self) -> None:
        if not self.dirty:
            return
        for seg in self.segments[-2:]:
            os.fsync(seg.fd)
        self.dirty = False
        self.unflushed_messages = 0
        self.last_flush = time.monotonic()

    def truncate_to(self, offset: int) -> int:
        """Removes every batch at or above `offset`; returns the new LEO.

        A batch that straddles `offset` goes too, so the new LEO may be lower.
        """
        if offset >= self.end_offset:
            return self.end_offset
        offset = max(offset, self.start_offset)
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            seg.close()
            os.unlink(seg.log_path)
            os.unlink(seg.index_path)
        seg = self.segments[-1]
        cut = None
        new_next = seg.base_offset
        for p, h in scan_file(seg.fd, seg.lookup(offset), seg.size, check_crc=False):
            if h.next_offset > offset:
                cut, new_next = p, h.base_offset
                break
        if cut is not None:
            os.ftruncate(seg.fd, cut)
            seg.size = cut
            seg.next_offset = new_next
            keep = bisect.bisect_left(seg.index_positions, cut)
            del seg.index_offsets[keep:]
            del seg.index_positions[keep:]
            seg.bytes_since_index = self.index_interval  # index the next append
            seg.rewrite_index()
        self.dirty = True
        return self.end_offset

    # -- reading --------------------------------------------------------------

    def _segment_for(self, offset: int) -> Segment | None:
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        return self.segments[i] if i >= 0 else None

    def read(self, offset: int, max_bytes: int, limit: int) -> bytes:
        """Whole batches holding offsets from `offset` up to (not including) `limit`.

        At most `max_bytes`, except that the first batch is returned whole
        even if it is larger, so a reader always makes progress.
        """
        if offset >= limit or offset >= self.end_offset:
            return b""
        seg = self._segment_for(offset)
        if seg is None:
            return b""
        pos = seg.lookup(offset)
        want = min(seg.size - pos, max_bytes + 2 * self.index_interval + HEADER_SIZE)
        buf = os.pread(seg.fd, want, pos)
        start = None
        end = None
        for p, h in records.iter_batches(buf):
            if h.next_offset <= offset:
                continue
            if h.next_offset > limit:
                break
            if start is None:
                start = p
            elif p + h.length - start > max_bytes:
                break
            end = p + h.length
        if start is not None:
            return bytes(buf[start:end])
        # The batch we want did not fit in the buffer: find it header by header.
        for p, h in scan_file(seg.fd, pos, seg.size, check_crc=False):
            if h.next_offset <= offset:
                continue
            if h.next_offset > limit:
                return b""
            return os.pread(seg.fd, h.length, p)
        return b""

    def headers(self, from_offset: int = 0):
        """Every batch header from the batch holding `from_offset` on."""
        for seg in self.segments:
            if seg.next_offset <= from_offset:
                continue
            pos = seg.lookup(from_offset) if seg.base_offset <= from_offset else 0
            for _, h in scan_file(seg.fd, pos, seg.size, check_crc=False):
                if h.next_offset > from_offset:
                    yield h

    def offset_for_timestamp(self, ts: int) -> int | None:
        """Base offset of the first batch whose max timestamp is >= ts (None if none)."""
        for h in self.headers(0):
            if h.max_timestamp >= ts:
                return h.base_offset
        return None


# -- the broker's HW checkpoint file ------------------------------------------

CHECKPOINT_NAME = "replication-offset-checkpoint"


def write_checkpoint(data_dir: str, hws: dict[tuple[str, int], int]) -> None:
    """Atomically replaces the checkpoint (write, fsync, rename) so a crash leaves the old one."""
    path = os.path.join(data_dir, CHECKPOINT_NAME)
    tmp = path + ".tmp"
    lines = ["0", str(len(hws))] + [f"{t} {p} {hw}" for (t, p), hw in sorted(hws.items())]
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_checkpoint(data_dir: str) -> dict[tuple[str, int], int]:
    path = os.path.join(data_dir, CHECKPOINT_NAME)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    out = {}
    try:
        count = int(lines[1])
        for line in lines[2:2 + count]:
            t, p, hw = line.rsplit(" ", 2)
            out[(t, int(p))] = int(hw)
    except (IndexError, ValueError):
        log.warning("unreadable HW checkpoint %s; treating every HW as 0", path)
        return {}
    return out


# -- a partition's leader-epoch checkpoint --------------------------------------

EPOCH_CHECKPOINT_NAME = "leader-epoch-checkpoint"


def write_epoch_checkpoint(directory: str, entries: list[tuple[int, int]]) -> None:
    """Replaces a partition's leader-epoch checkpoint (Kafka's format: version, count, "epoch offset" lines).

    Written atomically (write, fsync, rename) like the HW checkpoint: a
    follower decides what to truncate from this cache, so a crash must
    leave the old file or the new one, never a torn one.
    """
    path = os.path.join(directory, EPOCH_CHECKPOINT_NAME)
    tmp = path + ".tmp"
    lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_epoch_checkpoint(directory: str) -> list[tuple[int, int]]:
    """The (epoch, start offset) entries of a partition's leader-epoch checkpoint; [] if absent or unreadable."""
    path = os.path.join(directory, EPOCH_CHECKPOINT_NAME)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    try:
        count = int(lines[1])
        out = []
        for line in lines[2:2 + count]:
            e, o = line.split()
            out.append((int(e), int(o)))
        if len(out) != count:
            raise ValueError("short file")
    except (IndexError, ValueError):
        # The batch headers still carry every epoch that has records: recovery rebuilds from them.
        log.warning("unreadable leader-epoch checkpoint %s; rebuilding the cache from batch headers", path)
        return []
    return out


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    topic, sep, p = name.rpartition("-")
    if not sep or not p.isdigit() or not topic:
        return None
    return topic, int(p)
