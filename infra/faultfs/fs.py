"""faultfs: a passthrough FUSE filesystem that can stall, slow down, fail,
flip bits and forget (or tear) unsynced writes, switched at run time through
a control socket.

    python fs.py SOURCE MOUNTPOINT --control SOCKET [--slow-ms N] [--ops all|write|fsync]
        mounts SOURCE at MOUNTPOINT and serves it in the foreground
    python fs.py ctl SOCKET '{"op": "mode", "mode": "stall"}'
        sends one request, prints the JSON answer (exit 1 when it says ok=false)

Modes (every operation passes a gate that applies the mode in force):
- `passthrough`: every operation goes straight to SOURCE;
- `stall`: operations of the chosen kinds block until the mode changes;
- `slow`: operations of the chosen kinds first sleep `delay_ms`;
- `fail`: operations of the chosen kinds fail with EIO.
Kinds: `write` (write, truncate, fallocate), `fsync` (fsync, fsyncdir),
`all` (those and every lookup, read, create, rename, ...).

`lose-unfsynced` is a command, not a mode: every file is put back to what it
held at its last fsync (or when this mount first saw it change), as a power
loss would leave it; this is LazyFS's idea. Writes go through to SOURCE at
once, so that reads and sizes stay true; what a drop needs is kept beside
them: per file, its size at the last fsync and the old bytes of every
overwrite below that size (an undo log). Appends, the common case of a log,
cost nothing to track. Metadata (create, rename, unlink, mkdir) is taken as
durable at once, as a journaling filesystem would soon make it; a file
created and never fsynced comes back empty.

With the mount's `--power-loss torn` (or `"torn": true` in the request) a
drop tears instead: each file's last write since its fsync keeps a prefix
(1 to all but one of its bytes, drawn from the request's `seed`) at its
offset, as a write in flight when the power went (LazyFS's torn writes);
bytes between the synced size and that write, if any, read as zeros.

`corrupt` arms bit flips, beside whatever mode is in force: a fraction of
the reads or of the writes (`direction`) of files whose names match one of
the FILE_KINDS patterns get one bit flipped, at an offset and bit drawn
from the arm's `seed` (one random stream, so one sequence of operations
gives the same flips). Flipped reads leave the stored bytes intact (the
kernel's cache of matching files is dropped at arm and disarm, so reads
come here, and the flipped pages do not outlive the fault); flipped writes
store wrong bytes, which stay wrong after `corrupt-off`. Every flip is
logged (`flip read|write PATH offset=N bit=B`) and kept for `flips`. Probe
files (names starting `.faultfs-probe-`) that match flip on every
operation, from a stream of their own: a probe sees a flip at once, and the
system's stream stays as the seed drew it.

Only the standard library and mfusepy (for serving), so that this one file
can be copied to a remote node and run there.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fnmatch
import hashlib
import json
import logging
import os
import posixpath
import random
import socket
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

log = logging.getLogger("faultfs")

MODES = ("passthrough", "stall", "slow", "fail")
OPS = ("all", "write", "fsync")
KINDS = {"all": frozenset({"meta", "read", "write", "fsync"}), "write": frozenset({"write"}),
         "fsync": frozenset({"fsync"})}
STRIPES = 64  # locks over files, so writes to different files do not wait for each other
MAX_REPORTED = 20  # files named in a drop's answer
REQUEST_LIMIT = 64 * 1024
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
# Bit flips: which files (one vocabulary of patterns, on the file's name),
# which operations, and how often when the arm does not say.
FILE_KINDS = {"segments": ("*.log",), "indexes": ("*.index", "*.timeindex"), "checkpoints": ("*checkpoint*",)}
DIRECTIONS = ("reads", "writes")
FRACTIONS = (0.01, 0.1, 0.3)  # drawn by the arm's seed when no fraction is set
POWER_LOSS = ("drop", "torn")  # what lose-unfsynced does to the last unsynced write of a file
PROBE_PREFIX = ".faultfs-probe-"
MAX_FLIPS_KEPT = 10_000  # flips kept for `flips` answers (all are logged)


# ----------------------------------------------------------------------------
# The gate: the fault in force


@dataclass(frozen=True)
class Fault:
    mode: str = "passthrough"
    ops: str = "all"
    delay_ms: float = 0.0

    def hits(self, kind: str) -> bool:
        return self.mode != "passthrough" and kind in KINDS[self.ops]

    def to_dict(self) -> dict:
        return {"mode": self.mode, "ops": self.ops, "delay_ms": self.delay_ms}


class Gate:
    """Every operation enters here first; the fault decides what happens to it."""

    def __init__(self):
        self._cond = threading.Condition()
        self.fault = Fault()
        self.blocked = 0  # operations waiting in a stall right now
        self.counts: Counter = Counter()  # operations by kind, since the mount
        self.faulted: Counter = Counter()  # operations a fault hit, by mode

    def enter(self, kind: str, can_fail: bool = True) -> None:
        with self._cond:
            self.counts[kind] += 1
            if self.fault.mode == "stall" and self.fault.hits(kind):
                self.faulted["stall"] += 1
                self.blocked += 1
                try:
                    while self.fault.mode == "stall" and self.fault.hits(kind):
                        self._cond.wait()
                finally:
                    self.blocked -= 1
            fault = self.fault
        if fault.hits(kind):
            if fault.mode == "slow":
                self._count("slow")
                time.sleep(fault.delay_ms / 1000.0)
            elif fault.mode == "fail" and can_fail:
                self._count("fail")
                raise OSError(errno.EIO, os.strerror(errno.EIO))

    def _count(self, mode: str) -> None:
        with self._cond:
            self.faulted[mode] += 1

    def set(self, fault: Fault) -> None:
        with self._cond:
            self.fault = fault
            self._cond.notify_all()  # a stall ends (or changes) for every waiter


# ----------------------------------------------------------------------------
# Bit flips


def parse_files(value) -> tuple[str, ...]:
    """`segments`, `segments,indexes` or a list of FILE_KINDS -> a tuple of them."""
    kinds = value.split(",") if isinstance(value, str) else value
    if not isinstance(kinds, (list, tuple)) or not kinds or not all(isinstance(k, str) for k in kinds):
        raise ValueError(f"files {value!r}: expected some of {', '.join(FILE_KINDS)}")
    kinds = tuple(dict.fromkeys(k.strip() for k in kinds))
    bad = [k for k in kinds if k not in FILE_KINDS]
    if bad:
        raise ValueError(f"files {bad[0]!r}: expected some of {', '.join(FILE_KINDS)}")
    return kinds


def check_fraction(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"fraction {value!r}: expected more than 0, at most 1")
    return float(value)


def draw_fraction(seed: int) -> float:
    """The fraction an arm without one uses: from FRACTIONS, by its seed."""
    return FRACTIONS[int.from_bytes(hashlib.sha256(f"fraction {seed}".encode()).digest()[:4], "big") % len(FRACTIONS)]


@dataclass(frozen=True)
class Corrupt:
    """What an armed corruption flips."""

    direction: str  # reads or writes
    files: tuple[str, ...]  # FILE_KINDS
    fraction: float
    seed: int

    def matches(self, path: str) -> bool:
        name = posixpath.basename(path)
        return any(fnmatch.fnmatchcase(name, pat) for kind in self.files for pat in FILE_KINDS[kind])

    def to_dict(self) -> dict:
        return {"direction": self.direction, "files": list(self.files), "fraction": self.fraction, "seed": self.seed}


class Corruptor:
    """Flips one bit in a seeded fraction of the matching reads or writes."""

    def __init__(self):
        self._lock = threading.Lock()
        self.spec: Corrupt | None = None
        self._rng = random.Random(0)
        self._probe_rng = random.Random(0)
        self.matched = 0  # matching operations since the arm (probes not counted)
        self.flipped = 0  # of them, flipped
        self.probe_flips = 0
        self.flips: deque = deque(maxlen=MAX_FLIPS_KEPT)  # every flip since the mount, newest last

    def arm(self, spec: Corrupt) -> None:
        with self._lock:
            self.spec = spec
            self._rng = random.Random(spec.seed)
            self._probe_rng = random.Random(spec.seed ^ 0x5EED)
            self.matched = self.flipped = self.probe_flips = 0
        log.info("corrupt armed: %s", spec.to_dict())

    def disarm(self) -> dict:
        with self._lock:
            spec, self.spec = self.spec, None
            summary = {"was": spec.to_dict() if spec else None, "matched": self.matched, "flipped": self.flipped,
                       "probe_flips": self.probe_flips}
        log.info("corrupt off: %s", summary)
        return summary

    def state(self) -> dict:
        with self._lock:
            return {"armed": self.spec.to_dict() if self.spec else None, "matched": self.matched,
                    "flipped": self.flipped, "probe_flips": self.probe_flips, "flips_total": len(self.flips)}

    def flips_of(self, path: str | None, limit: int = 1000) -> list[dict]:
        with self._lock:
            found = [f for f in self.flips if path is None or f["path"] == path]
        return found[-limit:]

    def apply(self, direction: str, path: str | None, data: bytes, offset: int) -> bytes:
        """`data`, read from or about to be written to `path` at `offset`, perhaps with one bit flipped."""
        spec = self.spec
        if spec is None or spec.direction != direction or not path or not spec.matches(path):
            return data
        probe = posixpath.basename(path).startswith(PROBE_PREFIX)
        with self._lock:
            if self.spec is not spec:
                return data
            if probe:
                rng = self._probe_rng
            else:
                rng = self._rng
                self.matched += 1
                if rng.random() >= spec.fraction:
                    return data
            if not data:
                return data
            i, bit = rng.randrange(len(data)), rng.randrange(8)
            if probe:
                self.probe_flips += 1
            else:
                self.flipped += 1
            flip = {"op": direction[:-1], "path": path, "offset": offset + i, "bit": bit}
            self.flips.append(flip)
        buf = bytearray(data)
        buf[i] ^= 1 << bit
        log.info("flip %s %s offset=%d bit=%d", flip["op"], path, flip["offset"], bit)
        return bytes(buf)


# ----------------------------------------------------------------------------
# Durability: what a power loss would take back


@dataclass
class Unsynced:
    """A file changed since its last fsync, and how to put it back."""

    fd: int  # our own descriptor of it (the file may be renamed or unlinked meanwhile)
    synced_size: int
    path: str | None  # where it was last written, for reports and cache invalidation
    undo: list = field(default_factory=list)  # (offset, old bytes), oldest first
    written: int = 0  # bytes written since the last fsync
    last: tuple | None = None  # (offset, bytes) of the last write, if no truncation came after it: what a tear keeps a prefix of


class Durability:
    def __init__(self):
        self._stripes = [threading.Lock() for _ in range(STRIPES)]
        self._files: dict[tuple[int, int], Unsynced] = {}
        self._files_lock = threading.Lock()

    def _lock(self, key) -> threading.Lock:
        return self._stripes[hash(key) % STRIPES]

    def _track(self, fd: int, key, path: str | None) -> Unsynced:
        """The file's record, made at its first change since the last fsync
        (what it holds then is what survives). Called under its stripe lock."""
        u = self._files.get(key)
        if u is None:
            # A descriptor of our own: the caller's may be write-only or closed before a drop.
            own = os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
            u = Unsynced(own, os.fstat(fd).st_size, path)
            with self._files_lock:
                self._files[key] = u
        elif path:
            u.path = path
        return u

    @staticmethod
    def _key(fd: int) -> tuple[int, int]:
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino)

    def write(self, fd: int, data: bytes, offset: int, path: str | None, synced: bool) -> int:
        key = self._key(fd)
        with self._lock(key):
            u = self._track(fd, key, path)
            if offset < u.synced_size:
                old = os.pread(u.fd, min(len(data), u.synced_size - offset), offset)
                if old:
                    u.undo.append((offset, old))
            n = os.pwrite(fd, data, offset)
            u.written += n
            u.last = (offset, bytes(data[:n]))
            if synced:  # O_SYNC / O_DSYNC: durable when write returns
                self._forget(u, key)
            return n

    def truncate(self, fd: int, length: int, path: str | None) -> None:
        key = self._key(fd)
        with self._lock(key):
            u = self._track(fd, key, path)
            if length < u.synced_size:
                old = os.pread(u.fd, u.synced_size - length, length)
                if old:
                    u.undo.append((length, old))
            os.ftruncate(fd, length)
            u.last = None

    def extend(self, fd: int, path: str | None, grow) -> None:
        """A change that only adds bytes past the end (fallocate)."""
        key = self._key(fd)
        with self._lock(key):
            self._track(fd, key, path)
            grow()

    def synced(self, fd: int) -> None:
        """After a successful fsync of fd: its file is durable as it is."""
        key = self._key(fd)
        with self._lock(key):
            u = self._files.get(key)
            if u is not None:
                self._forget(u, key)

    def _forget(self, u: Unsynced, key) -> None:
        with self._files_lock:
            self._files.pop(key, None)
        os.close(u.fd)

    def forget_if_gone(self, key) -> None:
        """After an unlink or a rename over a file: forget it once its last link went."""
        if key is None:
            return
        with self._lock(key):
            u = self._files.get(key)
            if u is not None and os.fstat(u.fd).st_nlink == 0:
                self._forget(u, key)

    def unsynced(self) -> dict:
        with self._files_lock:
            files = list(self._files.values())
        return {"files": len(files), "bytes": sum(u.written for u in files)}

    def paths(self) -> list[str]:
        with self._files_lock:
            return [u.path for u in self._files.values() if u.path]

    def drop(self, torn_seed: int | None = None) -> dict:
        """Puts every changed file back to its last fsync; what was lost.
        With `torn_seed`, each file's last write then keeps a prefix drawn
        from that seed (files in path order): a torn write."""
        rng = random.Random(torn_seed) if torn_seed is not None else None
        for lock in self._stripes:
            lock.acquire()
        try:
            with self._files_lock:
                files = list(self._files.values())
                self._files.clear()
            report = {"files": len(files), "bytes_written": 0, "bytes_cut": 0, "bytes_restored": 0,
                      "examples": [], "mode": "torn" if rng else "drop"}
            if rng:
                report.update(torn=0, bytes_torn_kept=0, torn_examples=[])
            for u in sorted(files, key=lambda u: u.path or ""):
                try:
                    size = os.fstat(u.fd).st_size
                    restored = 0
                    for offset, old in reversed(u.undo):
                        os.pwrite(u.fd, old, offset)
                        restored += len(old)
                    os.ftruncate(u.fd, u.synced_size)
                    if rng and u.last and len(u.last[1]) >= 2:
                        offset, data = u.last
                        kept = rng.randrange(1, len(data))
                        os.pwrite(u.fd, data[:kept], offset)
                        report["torn"] += 1
                        report["bytes_torn_kept"] += kept
                        if len(report["torn_examples"]) < MAX_REPORTED:
                            report["torn_examples"].append({"path": u.path, "offset": offset, "kept": kept,
                                                            "of": len(data)})
                        log.info("torn write %s offset=%d kept %d of %d bytes", u.path, offset, kept, len(data))
                    report["bytes_written"] += u.written
                    report["bytes_cut"] += max(0, size - u.synced_size)
                    report["bytes_restored"] += restored
                    if len(report["examples"]) < MAX_REPORTED:
                        report["examples"].append({"path": u.path, "synced_size": u.synced_size, "size": size,
                                                   "restored": restored})
                finally:
                    os.close(u.fd)
            return report
        finally:
            for lock in self._stripes:
                lock.release()


# ----------------------------------------------------------------------------
# The filesystem


def make_filesystem(source: str):
    """The mfusepy Operations of a faultfs over `source` (imported lazily: the
    control client must run where mfusepy is not installed)."""
    import mfusepy

    class FaultFS(mfusepy.Operations):
        use_ns = True

        def __init__(self, root: str):
            self.root = os.path.realpath(root)
            self.gate = Gate()
            self.durability = Durability()
            self.corruptor = Corruptor()
            self.sync_fds: set[int] = set()  # opened O_SYNC / O_DSYNC
            # Paths by descriptor, for reports: with nullpath_ok libfuse passes none to writes.
            self.fd_paths: dict[int, str] = {}
            self.fuse_ptr = None  # struct fuse *, for cache invalidation

        def real(self, path: str) -> str:
            return self.root + path  # libfuse gives absolute, normalised paths

        # -- lifecycle

        def init_with_config(self, conn_info, config):
            self.fuse_ptr = ctypes.c_void_p(mfusepy._libfuse.fuse_get_context().contents.fuse)
            if config is not None:
                # Operations on a file unlinked while open keep working on its descriptor,
                # instead of libfuse renaming it to .fuse_hidden* in the data dir.
                config.hard_remove = 1
                config.nullpath_ok = 1

        def invalidate(self, paths) -> int:
            """Drops the kernel's cached pages and attributes of these files."""
            if self.fuse_ptr is None:
                return 0
            fn = mfusepy._libfuse.fuse_invalidate_path
            fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            fn.restype = ctypes.c_int
            done = 0
            for p in paths:
                if fn(self.fuse_ptr, p.encode("utf-8", "surrogateescape")) == 0:
                    done += 1
            return done

        # -- metadata

        def getattr(self, path, fh=None):
            self.gate.enter("meta")
            st = os.fstat(fh) if fh is not None else os.lstat(self.real(path))
            return {"st_mode": st.st_mode, "st_nlink": st.st_nlink, "st_uid": st.st_uid, "st_gid": st.st_gid,
                    "st_size": st.st_size, "st_blocks": st.st_blocks, "st_ino": st.st_ino,
                    "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

        def access(self, path, amode):
            self.gate.enter("meta")
            if not os.access(self.real(path), amode):
                raise OSError(errno.EACCES, os.strerror(errno.EACCES))
            return 0

        # Directories are opened for real: with nullpath_ok, readdir and fsyncdir get no path.
        def opendir(self, path):
            self.gate.enter("meta")
            return os.open(self.real(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

        def readdir(self, path, fh):
            self.gate.enter("meta")
            return [".", "..", *os.listdir(fh)]

        def releasedir(self, path, fh):
            self.gate.enter("meta", can_fail=False)
            os.close(fh)
            return 0

        def readlink(self, path):
            self.gate.enter("meta")
            return os.readlink(self.real(path))

        def mknod(self, path, mode, dev):
            self.gate.enter("meta")
            os.mknod(self.real(path), mode, dev)
            return 0

        def mkdir(self, path, mode):
            self.gate.enter("meta")
            os.mkdir(self.real(path), mode)
            return 0

        def rmdir(self, path):
            self.gate.enter("meta")
            os.rmdir(self.real(path))
            return 0

        def _key_of(self, real: str):
            try:
                st = os.lstat(real)
            except OSError:
                return None
            return (st.st_dev, st.st_ino)

        def unlink(self, path):
            self.gate.enter("meta")
            key = self._key_of(self.real(path))
            os.unlink(self.real(path))
            self.durability.forget_if_gone(key)
            return 0

        def rename(self, old, new):
            self.gate.enter("meta")
            replaced = self._key_of(self.real(new))
            os.rename(self.real(old), self.real(new))
            self.durability.forget_if_gone(replaced)
            for fd, p in list(self.fd_paths.items()):
                if p == old or p.startswith(old + "/"):
                    self.fd_paths[fd] = new + p[len(old):]
            return 0

        def symlink(self, target, source):
            self.gate.enter("meta")
            os.symlink(source, self.real(target))
            return 0

        def link(self, target, source):
            self.gate.enter("meta")
            os.link(self.real(source), self.real(target))
            return 0

        # With nullpath_ok, fchmod, fchown and futimens come with a descriptor and no path.
        def chmod(self, path, mode, fh=None):
            self.gate.enter("meta")
            os.chmod(fh if path is None else self.real(path), mode)
            return 0

        def chown(self, path, uid, gid, fh=None):
            self.gate.enter("meta")
            if path is None:
                os.fchown(fh, uid, gid)
            else:
                os.chown(self.real(path), uid, gid, follow_symlinks=False)
            return 0

        def utimens(self, path, times=None, fh=None):
            self.gate.enter("meta")
            target = fh if path is None else self.real(path)
            if times and None in times:  # one of them left as it is
                st = os.stat(target)
                times = (times[0] if times[0] is not None else st.st_atime_ns,
                         times[1] if times[1] is not None else st.st_mtime_ns)
            if times:
                os.utime(target, ns=times)
            else:
                os.utime(target)
            return 0

        def statfs(self, path):
            self.gate.enter("meta")
            sv = os.statvfs(self.real(path))
            return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

        # -- files

        def _opened(self, fd: int, path: str, flags: int) -> int:
            self.fd_paths[fd] = path
            if flags & (os.O_SYNC | os.O_DSYNC):
                self.sync_fds.add(fd)
            return fd

        @staticmethod
        def _flags(flags: int) -> int:
            # The kernel gives every write its offset (appends included), and a
            # truncation on open is done through the undo log, not by open(2).
            # O_DIRECT is the kernel's business (it bypasses its cache); our buffers are not aligned.
            return (flags & ~(os.O_APPEND | os.O_TRUNC | os.O_CREAT | os.O_EXCL | os.O_DIRECT)) | os.O_CLOEXEC

        def open(self, path, flags):
            self.gate.enter("meta")
            fd = os.open(self.real(path), self._flags(flags))
            if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
                self.gate.enter("write")
                self.durability.truncate(fd, 0, path)
            return self._opened(fd, path, flags)

        def create(self, path, mode, flags):
            self.gate.enter("meta")
            fd = os.open(self.real(path), self._flags(flags) | os.O_CREAT | (flags & os.O_EXCL), mode)
            if flags & os.O_TRUNC and os.fstat(fd).st_size:
                self.durability.truncate(fd, 0, path)
            return self._opened(fd, path, flags)

        def read(self, path, size, offset, fh):
            self.gate.enter("read")
            data = os.pread(fh, size, offset)
            if self.corruptor.spec is not None:
                data = self.corruptor.apply("reads", path or self.fd_paths.get(fh), data, offset)
            return data

        def write(self, path, data, offset, fh):
            self.gate.enter("write")
            path = path or self.fd_paths.get(fh)
            if self.corruptor.spec is not None:
                data = self.corruptor.apply("writes", path, data, offset)
            return self.durability.write(fh, data, offset, path, fh in self.sync_fds)

        def truncate(self, path, length, fh=None):
            self.gate.enter("write")
            if fh is not None:
                self.durability.truncate(fh, length, path or self.fd_paths.get(fh))
                return 0
            fd = os.open(self.real(path), os.O_WRONLY | os.O_CLOEXEC)
            try:
                self.durability.truncate(fd, length, path)
            finally:
                os.close(fd)
            return 0

        def fallocate(self, path, mode, offset, size, fh):
            self.gate.enter("write")
            if mode != 0:  # punching holes or zeroing would need the undo log too
                raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
            self.durability.extend(fh, path or self.fd_paths.get(fh), lambda: os.posix_fallocate(fh, offset, size))
            return 0

        def flush(self, path, fh):
            self.gate.enter("meta")
            return 0

        def release(self, path, fh):
            self.gate.enter("meta", can_fail=False)  # the descriptor is closed whatever the mode
            self.sync_fds.discard(fh)
            self.fd_paths.pop(fh, None)
            os.close(fh)
            return 0

        def fsync(self, path, datasync, fh):
            self.gate.enter("fsync")
            (os.fdatasync if datasync else os.fsync)(fh)
            self.durability.synced(fh)
            return 0

        def fsyncdir(self, path, datasync, fh):
            self.gate.enter("fsync")
            os.fsync(fh)
            return 0

    return FaultFS(source)


def make_fuse_class():
    """mfusepy's FUSE, passing the descriptor on to truncate, chmod, chown and
    utimens (mfusepy drops it, and with nullpath_ok there is no path then)."""
    import mfusepy

    def fh_of(fip):
        return fip.contents.fh if fip else None

    class FUSE(mfusepy.FUSE):
        def _path(self, path):
            return None if path is None else path.decode(self.encoding, self.errors)

        def truncate_fuse_3(self, path, length, fip):
            return self.operations.truncate(self._path(path), length, fh_of(fip))

        def chmod_fuse_3(self, path, mode, fip):
            return self.operations.chmod(self._path(path), mode, fh_of(fip))

        def chown_fuse_3(self, path, uid, gid, fip):
            # -1 (leave it) arrives as the largest unsigned value
            uid = -1 if uid == mfusepy.c_uid_t(-1).value else uid
            gid = -1 if gid == mfusepy.c_gid_t(-1).value else gid
            return self.operations.chown(self._path(path), uid, gid, fh_of(fip))

        def utimens_fuse_3(self, path, buf, fip):
            def ns(ts):  # UTIME_NOW and UTIME_OMIT travel in tv_nsec
                if ts.tv_nsec == UTIME_NOW:
                    return time.time_ns()
                return None if ts.tv_nsec == UTIME_OMIT else mfusepy.time_of_timespec(ts, use_ns=True)

            times = (ns(buf.contents.actime), ns(buf.contents.modtime)) if buf else None
            return self.operations.utimens(self._path(path), times, fh_of(fip))

    return FUSE


# ----------------------------------------------------------------------------
# Control


def parse_fault(req: dict, defaults: Fault) -> Fault:
    """The fault a `mode` request asks for; missing parameters from the mount's defaults."""
    mode = req.get("mode")
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    ops = req.get("ops", defaults.ops)
    if ops not in OPS:
        raise ValueError(f"ops {ops!r}: expected one of {', '.join(OPS)}")
    delay = req.get("delay_ms", defaults.delay_ms)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 600_000:
        raise ValueError(f"delay_ms {delay!r}: expected 0 to 600000")
    if mode == "slow" and delay <= 0:
        raise ValueError("mode slow needs delay_ms > 0")
    return Fault(mode, ops, float(delay))


class Control:
    """Answers one JSON request per connection on a Unix socket."""

    def __init__(self, fs, socket_path: str, defaults: Fault, info: dict, options: dict | None = None):
        self.fs = fs
        self.path = socket_path
        self.defaults = defaults
        self.info = info
        # The mount's defaults for corruption and power loss: direction, files, fraction (None: drawn), power_loss.
        self.options = {"direction": "reads", "files": ("segments",), "fraction": None, "power_loss": "drop",
                        **(options or {})}
        self.drops = 0
        if os.path.exists(socket_path):
            os.unlink(socket_path)  # left by a killed daemon
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            self.sock.bind(socket_path)
        finally:
            os.umask(old)
        self.sock.listen(16)

    def serve_forever(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                data = b""
                while not data.endswith(b"\n") and len(data) < REQUEST_LIMIT:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                req = json.loads(data or b"{}")
                if not isinstance(req, dict):
                    raise ValueError("expected a JSON object")
                answer = {"ok": True, **self.handle(req)}
            except Exception as e:  # an answer, whatever went wrong
                answer = {"ok": False, "error": f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)}
            try:
                conn.sendall(json.dumps(answer).encode() + b"\n")
            except OSError:
                pass

    def status(self) -> dict:
        gate = self.fs.gate
        return {**self.info, **gate.fault.to_dict(), "blocked": gate.blocked, "ops_seen": dict(gate.counts),
                "ops_faulted": dict(gate.faulted), "unsynced": self.fs.durability.unsynced(),
                "corrupt": self.fs.corruptor.state(),
                "defaults": {**self.defaults.to_dict(), **self.options, "files": list(self.options["files"])},
                "drops": self.drops, "pid": os.getpid()}

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "status":
            return self.status()
        if op == "mode":
            fault = parse_fault(req, self.defaults)
            self.fs.gate.set(fault)
            log.info("mode %s", fault.to_dict())
            return self.status()
        if op == "lose-unfsynced":
            torn = req.get("torn", self.options["power_loss"] == "torn")
            if not isinstance(torn, bool):
                raise ValueError(f"torn {torn!r}: expected true or false")
            return {"dropped": self.lose_unfsynced(_seed(req) if torn else None), **self.status()}
        if op == "corrupt":
            return {"armed": self.corrupt(req), **self.status()}
        if op == "corrupt-off":
            return {"disarmed": self.corrupt_off(), **self.status()}
        if op == "flips":
            path = req.get("path")
            if path is not None and not isinstance(path, str):
                raise ValueError(f"path {path!r}: expected a path under the mount, like /dir/file")
            return {"flips": self.fs.corruptor.flips_of(path)}
        raise ValueError(f"op {op!r}: expected status, mode, lose-unfsynced, corrupt, corrupt-off or flips")

    def corrupt(self, req: dict) -> dict:
        """Arms bit flips; missing parameters from the mount's defaults (a
        fraction, when none is set, drawn by the seed from FRACTIONS)."""
        direction = req.get("direction", self.options["direction"])
        if direction not in DIRECTIONS:
            raise ValueError(f"direction {direction!r}: expected one of {', '.join(DIRECTIONS)}")
        files = parse_files(req.get("files", self.options["files"]))
        seed = _seed(req)
        fraction = req.get("fraction", self.options["fraction"])
        fraction = draw_fraction(seed) if fraction is None else check_fraction(fraction)
        spec = Corrupt(direction, files, fraction, seed)
        self.fs.corruptor.arm(spec)
        if direction == "reads":
            # Reads of cached pages never reach us: drop them, so that the files are read here again.
            self.fs.invalidate(self._matching(spec))
        return spec.to_dict()

    def corrupt_off(self) -> dict:
        summary = self.fs.corruptor.disarm()
        was = summary["was"]
        if was and was["direction"] == "reads":
            # The kernel caches what a flipped read returned: drop it, so that reads are clean again.
            # (Flipped writes are on the disk: they stay.)
            self.fs.invalidate(self._matching(Corrupt("reads", tuple(was["files"]), 1.0, 0)))
        return summary

    def _matching(self, spec: Corrupt) -> list[str]:
        """The matching files, whose cached pages an arm or disarm of read flips
        drops; none in a stall: dropping them writes dirty mmap pages back
        first, which the stall would hold (and this request with it)."""
        if self.fs.gate.fault.mode == "stall":
            log.info("in a stall: the kernel's cache of the matching files is left as it is")
            return []
        return [p for p in _all_paths(self.fs.root) if spec.matches(p)]

    def lose_unfsynced(self, torn_seed: int | None = None) -> dict:
        fs = self.fs
        # Pages dirtied through mmap reach us only when the kernel writes them
        # back: have it do so now, so they are dropped with the rest.
        if fs.gate.fault.mode != "stall":
            fs.invalidate(fs.durability.paths())
        report = fs.durability.drop(torn_seed)
        # What the kernel still caches of these files is what was just taken back.
        if fs.gate.fault.mode != "stall":
            report["invalidated"] = fs.invalidate(_all_paths(fs.root))
        self.drops += 1
        log.info("lost unsynced writes: %s", {k: v for k, v in report.items() if k != "examples"})
        return report


def _seed(req: dict) -> int:
    seed = req.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed {seed!r}: expected an integer, 0 to 2^63-1")
    return seed


def _all_paths(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = dirpath[len(root):] or ""
        out.extend(f"{rel}/{name}" for name in filenames)
    return out


def request(socket_path: str, req: dict, timeout: float = 30.0) -> dict:
    """Sends one request to a faultfs control socket; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(socket_path)
        s.sendall(json.dumps(req).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


# ----------------------------------------------------------------------------
# Command line


def serve(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="faultfs", description="mount a fault-injecting passthrough filesystem")
    p.add_argument("source", help="the directory that holds the data")
    p.add_argument("mountpoint", help="where the filesystem appears")
    p.add_argument("--control", required=True, metavar="SOCKET", help="Unix socket for mode changes")
    p.add_argument("--slow-ms", type=float, default=100.0, help="default added latency of mode slow (100)")
    p.add_argument("--ops", choices=OPS, default="all", help="default kinds of operation a mode hits (all)")
    p.add_argument("--name", default="faultfs", help="filesystem name shown in mount tables")
    p.add_argument("--corrupt", choices=DIRECTIONS, default="reads", help="default of what a corrupt arm flips (reads)")
    p.add_argument("--corrupt-files", default="segments", metavar="KINDS",
                   help=f"default files a corrupt arm hits, some of {','.join(FILE_KINDS)} (segments)")
    p.add_argument("--corrupt-fraction", type=float, default=None, metavar="F",
                   help=f"default fraction of operations flipped (drawn by the seed from {FRACTIONS})")
    p.add_argument("--power-loss", choices=POWER_LOSS, default="drop",
                   help="what lose-unfsynced does to each file's last unsynced write: drop or torn (drop)")
    args = p.parse_args(argv)
    try:
        files = parse_files(args.corrupt_files)
        fraction = None if args.corrupt_fraction is None else check_fraction(args.corrupt_fraction)
    except ValueError as e:
        print(f"faultfs: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s faultfs: %(message)s", stream=sys.stderr)
    for d in (args.source, args.mountpoint):
        if not os.path.isdir(d):
            print(f"faultfs: {d}: not a directory", file=sys.stderr)
            return 2
    import mfusepy

    fs = make_filesystem(args.source)
    defaults = Fault("passthrough", args.ops, args.slow_ms)
    control = Control(fs, args.control, defaults,
                      {"source": os.path.realpath(args.source), "mountpoint": os.path.realpath(args.mountpoint)},
                      {"direction": args.corrupt, "files": files, "fraction": fraction, "power_loss": args.power_loss})
    threading.Thread(target=control.serve_forever, name="control", daemon=True).start()
    log.info("mounting %s at %s (control %s)", args.source, args.mountpoint, args.control)
    # SIGTERM: libfuse leaves its loop (its handler, installed because ours is the default).
    # The harness unmounts with `fusermount3 -u -z` after releasing any stall instead.
    try:
        # auto_unmount: fusermount3 stays behind and unmounts even if this process is killed -9.
        make_fuse_class()(fs, args.mountpoint, foreground=True, allow_other=True, auto_unmount=True,
                     fsname=args.name, subtype="faultfs", hard_remove=True)
    finally:
        try:
            os.unlink(args.control)
        except OSError:
            pass
    log.info("unmounted %s", args.mountpoint)
    return 0


def ctl(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: fs.py ctl SOCKET JSON-REQUEST", file=sys.stderr)
        return 2
    try:
        req = json.loads(argv[1])
        answer = request(argv[0], req)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else e
        gone = isinstance(e, (FileNotFoundError, ConnectionRefusedError))  # no daemon there (any more)
        print(json.dumps({"ok": False, "error": f"{argv[0]}: {why}", "unreachable": gone}))
        return 1
    print(json.dumps(answer))
    return 0 if answer.get("ok") else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ctl"]:
        return ctl(argv[1:])
    return serve(argv)


if __name__ == "__main__":
    sys.exit(main())
