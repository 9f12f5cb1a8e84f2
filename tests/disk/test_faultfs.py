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

from core.waiting import wait_for
from tests.support import need_fuse

from .conftest import Mounted

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
        # libfuse's auto_unmount helper notices the daemon is gone and unmounts. On a
        # busy machine that once outlasted wait_for's default time-out (the suite's other
        # tests beside it).
        wait_for(lambda: not m.is_mounted(), timeout=60, what="the mount to go away")
        assert os.listdir(m.mount) == []
        assert (m.source / "x").read_bytes() == b"x"
    finally:
        m.close()


# ----------------------------------------------------------------------------
# Bit flips and torn writes


def flipped_bits(expected: bytes, got: bytes) -> set[tuple[int, int]]:
    """The (offset, bit)s where two byte strings of one length differ."""
    assert len(expected) == len(got)
    return {(i, b) for i, (x, y) in enumerate(zip(expected, got)) if x != y for b in range(8) if (x ^ y) >> b & 1}


def within_binomial(k: int, n: int, p: float) -> bool:
    """k successes of n at probability p, within 5 standard deviations (a
    false alarm about once in 3 million runs)."""
    return abs(k - n * p) <= 5 * (n * p * (1 - p)) ** 0.5 + 1


def logged_flips(mounted, op: str) -> list[tuple[str, int, int]]:
    """The flips in the faultfs's own log: (path, offset, bit)."""
    out = []
    for line in mounted.log.read_text().splitlines():
        words = line.split()
        if "flip" in words and words[words.index("flip") + 1] == op:
            i = words.index("flip")
            out.append((words[i + 2], int(words[i + 3].split("=")[1]), int(words[i + 4].split("=")[1])))
    return out


def test_the_file_kinds_match_kafka_and_own_broker_names():
    from infra.faultfs.fs import Corrupt
    names = {"segments": ["/t-0/00000000000000000000.log", "/x.log"],
             "indexes": ["/t-0/00000000000000000000.index", "/t-0/00000000000000000000.timeindex"],
             "checkpoints": ["/replication-offset-checkpoint", "/t-0/leader-epoch-checkpoint",
                             "/recovery-point-offset-checkpoint.tmp"]}
    others = ["/meta.properties", "/t-0/partition.metadata", "/t-0/00000000000000000000.snapshot", "/x.log.bak"]
    for kind, paths in names.items():
        c = Corrupt("writes", (kind,), 1.0, 0)
        assert all(c.matches(p) for p in paths), kind
        assert not any(c.matches(p) for k, ps in names.items() if k != kind for p in ps), kind
        assert not any(c.matches(p) for p in others), kind


def test_write_flips_hit_the_set_fraction_of_matching_writes_only_and_are_logged(mounted):
    n, size, fraction = 2000, 64, 0.1
    chunks = [bytes((i * 7 + j) % 251 for j in range(size)) for i in range(n)]
    expected = b"".join(chunks)
    armed = mounted.ctl(op="corrupt", direction="writes", files="segments", fraction=fraction, seed=42)
    assert armed["armed"] == {"direction": "writes", "files": ["segments"], "fraction": fraction, "seed": 42}
    for name in ("a.log", "b.index", "c.txt"):
        fd = os.open(mounted.mount / name, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            for i, chunk in enumerate(chunks):  # one write request each
                assert os.pwrite(fd, chunk, i * size) == size
        finally:
            os.close(fd)
    state = mounted.ctl(op="status")["corrupt"]
    flips = mounted.ctl(op="flips", path="/a.log")["flips"]
    # The stored bytes differ from what was written exactly where the faultfs says it flipped.
    stored = (mounted.source / "a.log").read_bytes()
    assert flipped_bits(expected, stored) == {(f["offset"], f["bit"]) for f in flips}
    assert state["matched"] == n and state["flipped"] == len(flips) > 0
    assert within_binomial(len(flips), n, fraction), len(flips)
    # ... and its own log says so, flip for flip.
    assert sorted(logged_flips(mounted, "write")) == sorted(("/a.log", f["offset"], f["bit"]) for f in flips)
    # No other kind of file was touched.
    assert (mounted.source / "b.index").read_bytes() == expected
    assert (mounted.source / "c.txt").read_bytes() == expected
    assert mounted.ctl(op="flips")["flips"] == flips
    # A flipped write stays flipped: the stop ends the flips, not their damage.
    off = mounted.ctl(op="corrupt-off")["disarmed"]
    assert off["flipped"] == len(flips) and off["matched"] == n
    assert (mounted.mount / "a.log").read_bytes() == stored
    (mounted.mount / "d.log").write_bytes(expected)
    assert (mounted.source / "d.log").read_bytes() == expected

    # The same seed and the same writes: the same flips.
    mounted.ctl(op="corrupt", direction="writes", fraction=fraction, seed=42)
    fd = os.open(mounted.mount / "again.log", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for i, chunk in enumerate(chunks):
            os.pwrite(fd, chunk, i * size)
    finally:
        os.close(fd)
    again = mounted.ctl(op="flips", path="/again.log")["flips"]
    assert [(f["offset"], f["bit"]) for f in again] == [(f["offset"], f["bit"]) for f in flips]
    mounted.ctl(op="corrupt-off")


def test_read_flips_hit_the_set_fraction_of_reads_and_leave_the_disk_alone(mounted):
    data = bytes(range(256)) * 16  # 4 KiB: one read request per open
    for name in ("s.log", "s.txt"):
        with open(mounted.mount / name, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    held = os.open(mounted.mount / "s.log", os.O_RDONLY)  # open across the arm: its cached pages are dropped
    try:
        assert os.pread(held, len(data), 0) == data
        mounted.ctl(op="corrupt", direction="reads", files=["segments"], fraction=0.3, seed=7)
        seen = set()
        for _ in range(400):
            got = (mounted.mount / "s.log").read_bytes()  # each open drops FUSE's cache: read here again
            assert len(got) == len(data)
            bits = flipped_bits(data, got)
            assert len(bits) <= 1
            seen |= bits
            assert (mounted.mount / "s.txt").read_bytes() == data
        state = mounted.ctl(op="status")["corrupt"]
        flips = mounted.ctl(op="flips", path="/s.log")["flips"]
        assert state["matched"] >= 400 and state["flipped"] == len(flips)
        assert within_binomial(state["flipped"], state["matched"], 0.3), state
        assert seen and seen <= {(f["offset"], f["bit"]) for f in flips}
        assert len(logged_flips(mounted, "read")) == len(flips)
        assert (mounted.source / "s.log").read_bytes() == data  # the disk holds what was written
        # A page read flipped stays in the kernel's cache while the fault lasts ...
        cached = os.pread(held, len(data), 0)
        # ... and is dropped at the stop: the open descriptor reads clean data again.
        mounted.ctl(op="corrupt-off")
        assert os.pread(held, len(data), 0) == data
        assert flipped_bits(data, cached) <= {(f["offset"], f["bit"]) for f in flips}
    finally:
        os.close(held)
    assert (mounted.mount / "s.log").read_bytes() == data


def test_probe_files_that_match_flip_every_time_without_moving_the_seeded_stream(mounted):
    mounted.ctl(op="corrupt", direction="writes", fraction=0.01, seed=3)
    for i in range(5):
        (mounted.mount / f".faultfs-probe-x-{i}.log").write_bytes(b"p" * 100)
        (mounted.mount / f".faultfs-probe-x-{i}.clean").write_bytes(b"p" * 100)
    state = mounted.ctl(op="corrupt-off")["disarmed"]
    assert state["probe_flips"] == 5 and state["matched"] == 0
    for i in range(5):
        assert len(flipped_bits(b"p" * 100, (mounted.source / f".faultfs-probe-x-{i}.log").read_bytes())) == 1
        assert (mounted.source / f".faultfs-probe-x-{i}.clean").read_bytes() == b"p" * 100


def write_history(m, name: str) -> bytes:
    """A synced part, then two unsynced appends; the second is what a tear cuts."""
    with open(m / name, "wb") as f:
        f.write(b"synced|")
        f.flush()
        os.fsync(f.fileno())
        f.write(b"first unsynced|")
        f.flush()
        f.write(b"the last unsynced write")
        f.flush()
    return b"the last unsynced write"


def test_a_torn_power_loss_keeps_a_prefix_of_each_files_last_unsynced_write(mounted):
    m = mounted.mount
    last = write_history(m, "seg.log")
    # An overwrite below the synced size, torn: new bytes over the old, then the old.
    with open(m / "over", "wb") as f:
        f.write(b"A" * 40)
        f.flush()
        os.fsync(f.fileno())
    with open(m / "over", "r+b") as f:
        f.seek(10)
        f.write(b"b" * 20)
    # A truncation after the last write: nothing to tear, dropped as before.
    with open(m / "cut", "wb") as f:
        f.write(b"keep")
        f.flush()
        os.fsync(f.fileno())
        f.write(b"+gone")
        f.flush()
        f.truncate(2)
    (m / "synced").write_bytes(b"")  # created, never written: comes back empty

    dropped = mounted.ctl(op="lose-unfsynced", torn=True, seed=99)["dropped"]
    assert dropped["mode"] == "torn" and dropped["torn"] == 2
    kept = {t["path"]: t for t in dropped["torn_examples"]}
    k = kept["/seg.log"]["kept"]
    assert 0 < k < len(last) and kept["/seg.log"]["of"] == len(last)
    # The synced part, a hole where the earlier unsynced write was, a prefix of the last one, nothing after.
    assert (m / "seg.log").read_bytes() == b"synced|" + b"\0" * len(b"first unsynced|") + last[:k]
    assert (mounted.source / "seg.log").read_bytes() == (m / "seg.log").read_bytes()
    j = kept["/over"]["kept"]
    assert 0 < j < 20 and (m / "over").read_bytes() == b"A" * 10 + b"b" * j + b"A" * (30 - j)
    assert (m / "cut").read_bytes() == b"keep"
    assert dropped["bytes_torn_kept"] == k + j

    # The same history and seed tear the same way; a plain drop tears nothing.
    (m / "seg.log").unlink()
    write_history(m, "seg.log")
    again = mounted.ctl(op="lose-unfsynced", torn=True, seed=99)["dropped"]
    assert [t["kept"] for t in again["torn_examples"]] == [k]
    write_history(m, "plain.log")
    plain = mounted.drop()
    assert plain["mode"] == "drop" and "torn" not in plain
    assert (m / "plain.log").read_bytes() == b"synced|"


def test_a_mount_can_tear_by_default_and_set_the_flips_it_arms(tmp_path):
    need_fuse()
    m = Mounted(tmp_path, args=("--power-loss", "torn", "--corrupt", "writes", "--corrupt-files",
                                "indexes,checkpoints", "--corrupt-fraction", "0.5"))
    try:
        last = write_history(m.mount, "seg.log")
        dropped = m.drop()
        k = dropped["torn_examples"][0]["kept"]
        assert dropped["mode"] == "torn" and (m.mount / "seg.log").read_bytes().endswith(last[:k])
        assert m.ctl(op="lose-unfsynced", torn=False)["dropped"]["mode"] == "drop"
        assert m.ctl(op="corrupt", seed=1)["armed"] == {"direction": "writes", "files": ["indexes", "checkpoints"],
                                                        "fraction": 0.5, "seed": 1}
        st = m.ctl(op="status")
        assert st["defaults"]["power_loss"] == "torn" and st["corrupt"]["armed"]["fraction"] == 0.5
    finally:
        m.close()


def test_an_arm_without_a_fraction_draws_one_by_its_seed(mounted):
    from infra.faultfs.fs import FRACTIONS
    drawn = {mounted.ctl(op="corrupt", seed=s)["armed"]["fraction"] for s in range(40)}
    assert drawn == set(FRACTIONS)
    assert mounted.ctl(op="corrupt", seed=5)["armed"] == mounted.ctl(op="corrupt", seed=5)["armed"]
    mounted.ctl(op="corrupt-off")


def test_bad_corrupt_requests_are_answered_not_crashed_on(mounted):
    assert "direction 'sideways'" in mounted.ctl(op="corrupt", direction="sideways")["error"]
    assert "files 'movies'" in mounted.ctl(op="corrupt", files="segments,movies")["error"]
    assert "fraction 0" in mounted.ctl(op="corrupt", fraction=0)["error"]
    assert "fraction 1.5" in mounted.ctl(op="corrupt", fraction=1.5)["error"]
    assert "seed -1" in mounted.ctl(op="corrupt", seed=-1)["error"]
    assert "torn 'yes'" in mounted.ctl(op="lose-unfsynced", torn="yes")["error"]
    assert "path 3" in mounted.ctl(op="flips", path=3)["error"]
    assert mounted.ctl(op="status")["corrupt"]["armed"] is None  # nothing armed by a refused request
