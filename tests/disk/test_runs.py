"""`harness run` with disk faults, end to end in subprocesses: power loss on the
own broker with and without fsync per write, a stalled leader, and a run
killed -9 in the middle of a stall that `harness clean` must clear."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from infra import hostops
from infra import state as st

from tests.support import (HARNESS, clusters_owned_by, harness, harness_run, history_events, leave_nothing_of,
                           need_fuse)

from .conftest import faultfs_mounts

pytestmark = pytest.mark.integration


def nemesis(run_dir: Path, f: str, type_: str = "ok") -> list[dict]:
    return [e for e in history_events(run_dir) if e["process"] == "nemesis" and e["f"] == f and e["type"] == type_]


def assert_unmounted(run_dir: Path) -> None:
    """Every faultfs the run mounted is gone. (Not whether its directories
    are: another run on this machine may have taken the cluster slot since.)"""
    run = json.loads((run_dir / "run.json").read_text())
    targets = [m["target"] for m in run["faultfs"].values()]
    assert targets
    mounted = set(faultfs_mounts(st.state_root()))
    assert not mounted & set(targets), mounted


@pytest.mark.slow
def test_power_loss_of_a_partitions_replicas_loses_acknowledged_writes_with_default_flushing(tmp_path):
    need_fuse()
    proc, run_dir = harness_run(tmp_path, "--scenario", "own-power-loss", "--final-time-limit", "10")
    # The page cache of three replicas was all there was.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "scenario own-power-loss: expectation met" in proc.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["anomalies"]["lost-write"]["count"] > 0
    (loss,) = nemesis(run_dir, "power-loss")
    # The scenario's seed picks partition 4, whose replicas are brokers 4, 0, 1 ((i + j) mod 5).
    assert loss["value"]["replicas_of"] == 4 and loss["value"]["nodes"] == ["n1", "n2", "n5"]
    assert loss["value"]["verified"]["ok"]
    assert {x["partition"] for x in results["anomalies"]["lost-write"]["examples"]} == {4}
    assert all(v == "probe kept its fsynced part only" for v in loss["value"]["verified"]["probe"].values())
    assert all(lost["bytes_cut"] > 10_000 for lost in loss["value"]["lost"].values())
    assert nemesis(run_dir, "power-restore")[0]["value"]["verified"]["ok"]
    # The lost writes were acknowledged before the power went.
    assert all(x["ack_index"] < loss["index"] for x in results["anomalies"]["lost-write"]["examples"])
    assert_unmounted(run_dir)


@pytest.mark.slow
def test_power_loss_of_a_partitions_replicas_loses_nothing_when_every_write_is_fsynced(tmp_path):
    need_fuse()
    proc, run_dir = harness_run(tmp_path, "--scenario", "own-power-loss-fsync", "--final-time-limit", "10")
    # Every acknowledged record was on three disks.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scenario own-power-loss-fsync: expectation met" in proc.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True and results["counts"]["sends"]["ok"] > 1000
    (loss,) = nemesis(run_dir, "power-loss")
    assert loss["value"]["replicas_of"] == 4 and loss["value"]["nodes"] == ["n1", "n2", "n5"]
    assert loss["value"]["verified"]["ok"]
    # What the drop took is a torn tail at most, not the logs.
    assert all(lost["bytes_cut"] < 10_000 for lost in loss["value"]["lost"].values()), loss["value"]["lost"]
    assert_unmounted(run_dir)


@pytest.mark.slow
def test_a_stalled_leader_makes_writes_wait_and_loses_nothing(tmp_path):
    need_fuse()
    proc, run_dir = harness_run(tmp_path, "--scenario", "own-disk-stall-leader", "--time-limit", "16",
                                "--final-time-limit", "20")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "expectation met" in proc.stdout
    stalls = nemesis(run_dir, "stall-disk")
    assert stalls and all(e["value"]["verified"]["ok"] and "leader_of" in e["value"] for e in stalls)
    assert all(e["value"]["verified"]["ok"] for e in nemesis(run_dir, "unstall-disk"))
    # Writes waited for the disk: some send invoked during a stall completed only after it.
    windows, start = [], None
    for e in history_events(run_dir):
        if e["process"] == "nemesis" and e["f"] == "stall-disk" and e["type"] == "ok":
            start = e["time"]
        elif e["process"] == "nemesis" and e["f"] == "unstall-disk" and e["type"] == "invoke" and start:
            windows.append((start, e["time"]))
            start = None
    invoked, waited = {}, 0
    for e in history_events(run_dir):
        if e["f"] != "send":
            continue
        if e["type"] == "invoke":
            invoked[e["value"]] = e["time"]
        elif any(a <= invoked.get(e["value"], -1) < b < e["time"] for a, b in windows):
            waited += 1
    assert waited > 0, windows
    assert_unmounted(run_dir)


def test_a_run_killed_during_a_disk_stall_is_cleaned_up(tmp_path):
    """kill -9 of the harness while a broker is stuck on a stalled disk (where
    not even kill -9 reaches it); `harness clean` must still clear it all."""
    need_fuse()
    run = subprocess.Popen([HARNESS, "run", "--results", str(tmp_path), "--nemesis", "disk-stall",
                            "--nemesis-targets", "all", "--nemesis-interval", "20", "--seed", "31",
                            "--nodes", "1", "--zk-nodes", "1", "--replication-factor", "1", "--min-insync", "1",
                            "--partitions", "1", "--time-limit", "120", "--rate", "100"],
                           stdout=subprocess.DEVNULL, stderr=open(tmp_path / "stderr.txt", "w"))
    cids: list[str] = []
    try:
        deadline = time.monotonic() + 120
        stalled = False
        while time.monotonic() < deadline and not stalled and run.poll() is None:
            cids = cids or clusters_owned_by(run.pid)
            found = list(tmp_path.glob("*/*/history.jsonl"))
            stalled = bool(found) and any('"f":"stall-disk"' in line and '"type":"ok"' in line
                                          for line in found[0].read_text().splitlines())
            time.sleep(0.2)
        assert stalled, "the run never stalled a disk: " + (tmp_path / "stderr.txt").read_text()[-2000:]
        (cid,) = cids
        mounts = faultfs_mounts(st.cluster_dir(cid))
        assert len(mounts) == 1 and mounts[0].endswith("/n1/data/broker")
        ours = [p.pid for p in hostops.scan_processes() if (p.daemon_tag or "").startswith(f"{cid}/")]
        assert any(p.comm == "fusermount3" or "faultfs" in (p.daemon_tag or "") for p in hostops.scan_processes()
                   if p.pid in ours)
        run.send_signal(signal.SIGKILL)
        run.wait(10)

        res = harness("clean", "--cluster", cid, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"removed mount {mounts[0]}" in res.stdout
        assert not faultfs_mounts(st.state_root() / "clusters" / cid)
        assert not [pid for pid in ours if hostops.is_alive(pid)]  # faultfs, broker, ZooKeeper, sshd
        assert f"removed state directory {st.cluster_dir(cid)}" in res.stdout
    finally:
        leave_nothing_of(run, cids)
