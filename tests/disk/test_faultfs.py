"""The faultfs itself, mounted for real on this machine: passthrough, stall,
slow, fail, and lose-unfsynced against a model of what fsync made durable."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from .conftest import Mounted, need_fuse, wait_for

pytestmark = pytest.mark.integration

WRITER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"written while stalled")
os.fsync(fd)
os.close(fd)
print("done", flush=True)
"""


def start_writer(path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)


def test_passthrough_behaves_like_the_source_directory(mounted):
    m = mounted.mount
    (m / "d" / "e").mkdir(parents=True)
    (m / "d" / "e" / "f.log").write_bytes(b"0123456789")
    os.truncate(m / "d" / "e" / "f.log", 4)
    os.rename(m / "d" / "e" / "f.log", m / "d" / "g.log")
    os.symlink("g.log", m / "d" / "link")
    with open(m / "d" / "g.log", "ab") as f:
        f.write(b"+tail")
    os.chmod(m / "d" / "g.log", 0o600)
    assert (mounted.source / "d" / "g.log").read_bytes() == b"0123+tail"
    assert (m / "d" / "link").read_bytes() == b"0123+tail"
    assert sorted(os.listdir(m / "d")) == ["e", "g.log", "link"]
    assert os.stat(m / "d" / "g.log").st_mode & 0o777 == 0o600
    (m / "d" / "g.log").unlink()
    os.unlink(m / "d" / "link")
    (m / "d" / "e").rmdir()
    assert sorted(os.listdir(mounted.source / "d")) == []
    status = mounted.ctl(op="status")
    assert status["mode"] == "passthrough" and status["ops_seen"]["write"] >= 2


def test_a_stall_blocks_a_writer_until_it_is_released(mounted):
    mounted.mode("stall")
    writer = start_writer(mounted.mount / "stalled.log")
    try:
        time.sleep(1.0)
        assert writer.poll() is None, "the writer finished on a stalled disk"
        assert mounted.ctl(op="status")["blocked"] >= 1
        # Even kill -9 cannot take a process out of a stalled FUSE request.
        writer.send_signal(signal.SIGKILL)
        time.sleep(0.3)
        assert writer.poll() is None
        mounted.mode("passthrough")
        writer.wait(10)
    finally:
        mounted.mode("passthrough")
        writer.wait(10)
    assert mounted.ctl(op="status")["blocked"] == 0


def test_a_stall_of_fsyncs_lets_writes_through_and_holds_the_fsync(mounted):
    mounted.mode("stall", ops="fsync")
    writer = start_writer(mounted.mount / "f.log")
    try:
        wait_for(lambda: (mounted.source / "f.log").exists() and (mounted.source / "f.log").stat().st_size > 0,
                 what="the write to reach the source")
        time.sleep(0.5)
        assert writer.poll() is None, "fsync returned on a disk whose fsyncs stall"
        mounted.mode("passthrough")
        out, _ = writer.communicate(timeout=10)
    finally:
        mounted.mode("passthrough")
        writer.wait(10)
    assert out.strip() == "done" and writer.returncode == 0


@pytest.mark.parametrize("ops,delay_ms", [("fsync", 300), ("all", 150)])
def test_slow_adds_at_least_the_asked_latency(mounted, ops, delay_ms):
    fd = os.open(mounted.mount / "slow.log", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        mounted.mode("slow", ops=ops, delay_ms=delay_ms)
        started = time.monotonic()
        os.write(fd, b"x" * 100)
        wrote = time.monotonic()
        os.fsync(fd)
        synced = time.monotonic()
    finally:
        mounted.mode("passthrough")
        os.close(fd)
    assert synced - wrote >= delay_ms / 1000
    if ops == "all":
        assert wrote - started >= delay_ms / 1000
    assert mounted.ctl(op="status")["ops_faulted"]["slow"] >= 1


def test_fail_gives_eio_on_writes_on_fsyncs_or_on_everything(mounted):
    path = mounted.mount / "f.log"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        mounted.mode("fail", ops="write")
        with pytest.raises(OSError) as e:
            os.write(fd, b"lost")
        assert e.value.errno == errno.EIO
        os.fsync(fd)  # fsyncs still work
        mounted.mode("fail", ops="fsync")
        os.write(fd, b"kept")
        with pytest.raises(OSError) as e:
            os.fsync(fd)
        assert e.value.errno == errno.EIO
        mounted.mode("fail", ops="all")
        with pytest.raises(OSError) as e:
            os.stat(mounted.mount / "anything")
        assert e.value.errno == errno.EIO
        mounted.mode("passthrough")
        os.fsync(fd)
        assert os.pread(fd, 100, 0) == b"kept"
    finally:
        mounted.mode("passthrough")
        os.close(fd)


def test_lose_unfsynced_drops_exactly_the_unsynced_suffix(mounted):
    path = mounted.mount / "segment.log"
    with open(path, "ab") as f:
        f.write(b"synced part|")
        f.flush()
        os.fsync(f.fileno())
        f.write(b"unsynced part")
        f.flush()
    assert path.read_bytes() == b"synced part|unsynced part"
    dropped = mounted.drop()
    assert path.read_bytes() == b"synced part|"  # through the mount (no stale cache) ...
    assert (mounted.source / "segment.log").read_bytes() == b"synced part|"  # ... and on the disk
    assert dropped["files"] == 1 and dropped["bytes_cut"] == len(b"unsynced part")
    assert os.stat(path).st_size == len(b"synced part|")
    assert mounted.drop()["files"] == 0  # nothing left to lose


def test_what_a_drop_puts_back(mounted):
    m = mounted.mount
    # Overwrites below the synced size come back; a truncation is undone.
    with open(m / "overwritten", "wb") as f:
        f.write(b"AAAAAAAAAA")
        f.flush()
        os.fsync(f.fileno())
    with open(m / "overwritten", "r+b") as f:
        f.seek(3)
        f.write(b"bbb")
    os.truncate(m / "overwritten", 2)
    with open(m / "overwritten", "ab") as f:
        f.write(b"ccccccccccccccc")
    # Never fsynced: comes back empty (the file itself, metadata, stays).
    (m / "never").write_bytes(b"nothing of this survives")
    # O_SYNC writes are durable when they return.
    fd = os.open(m / "osync", os.O_CREAT | os.O_WRONLY | os.O_SYNC, 0o644)
    os.write(fd, b"durable")
    os.close(fd)
    # Renamed after the write: still the same file, still dropped.
    (m / "tmp").write_bytes(b"renamed")
    os.rename(m / "tmp", m / "renamed")
    # Written, then unlinked: forgotten, the drop does not trip over it.
    (m / "gone").write_bytes(b"x")
    os.unlink(m / "gone")
    # Synced and then left alone: untouched.
    with open(m / "clean", "wb") as f:
        f.write(b"clean")
        f.flush()
        os.fsync(f.fileno())
    # Kept open by a writer across the drop.
    held = os.open(m / "held", os.O_CREAT | os.O_RDWR, 0o644)
    os.write(held, b"held")
    os.fsync(held)
    os.write(held, b"+more")

    dropped = mounted.drop()
    assert (m / "overwritten").read_bytes() == b"AAAAAAAAAA"
    assert (m / "never").read_bytes() == b""
    assert (m / "osync").read_bytes() == b"durable"
    assert (m / "renamed").read_bytes() == b""
    assert not (m / "gone").exists()
    assert (m / "clean").read_bytes() == b"clean"
    assert os.pread(held, 100, 0) == b"held"
    os.close(held)
    assert dropped["files"] == 4  # overwritten, never, renamed, held
    assert dropped["bytes_restored"] >= 8


def test_a_drop_matches_a_model_of_fsync_on_random_histories(mounted):
    """Random writes, truncations and fsyncs on a few files; after a drop
    each file holds what it held at its last fsync, byte for byte."""
    rng = random.Random(1234)
    for round_ in range(12):
        names = [f"r{round_}-{i}" for i in range(3)]
        durable = {n: b"" for n in names}
        current = {n: bytearray() for n in names}
        fds = {n: os.open(mounted.mount / n, os.O_CREAT | os.O_RDWR, 0o644) for n in names}
        try:
            for _ in range(60):
                n = rng.choice(names)
                cur = current[n]
                op = rng.random()
                if op < 0.6:
                    off = rng.randrange(0, len(cur) + 50)
                    data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
                    os.pwrite(fds[n], data, off)
                    if off > len(cur):
                        cur.extend(b"\0" * (off - len(cur)))
                    cur[off:off + len(data)] = data
                elif op < 0.75:
                    size = rng.randrange(0, len(cur) + 100)
                    os.ftruncate(fds[n], size)
                    del cur[size:]
                    cur.extend(b"\0" * (size - len(cur)))
                else:
                    os.fsync(fds[n])
                    durable[n] = bytes(cur)
            for n in names:
                assert os.pread(fds[n], 1 << 20, 0) == bytes(current[n])
            mounted.drop()
            for n in names:
                assert (mounted.mount / n).read_bytes() == durable[n], (round_, n)
                assert (mounted.source / n).read_bytes() == durable[n], (round_, n)
        finally:
            for fd in fds.values():
                os.close(fd)


def test_bad_control_requests_are_answered_not_crashed_on(mounted):
    assert mounted.ctl(op="mode", mode="melt") == {
        "ok": False, "error": "mode 'melt': expected one of passthrough, stall, slow, fail"}
    assert "ops" in mounted.ctl(op="mode", mode="fail", ops="reads")["error"]
    assert "delay_ms" in mounted.ctl(op="mode", mode="slow", delay_ms=-5)["error"]
    assert "op 'explode'" in mounted.ctl(op="explode")["error"]
    assert mounted.ctl(op="status")["mode"] == "passthrough"  # still serving, unchanged


def test_kill_9_of_the_daemon_leaves_no_mount(tmp_path):
    need_fuse()
    m = Mounted(tmp_path)
    try:
        (m.mount / "x").write_bytes(b"x")
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait(10)
        # libfuse's auto_unmount helper notices the daemon is gone and unmounts.
        wait_for(lambda: not m.is_mounted(), what="the mount to go away")
        assert os.listdir(m.mount) == []
        assert (m.source / "x").read_bytes() == b"x"
    finally:
        m.close()
