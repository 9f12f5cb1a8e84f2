"""Helpers the test areas share: what a test needs of the machine, the
installed `harness` command in a subprocess (as a user runs it), Python code
in a fresh process, a run's history, the clusters a process owns, and a
partition's records as its leader stores them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.record import MemoryRecords

from broker.client import SyncConnection
from infra import state as st

REPO = Path(__file__).resolve().parents[1]
HARNESS = str(Path(sys.executable).with_name("harness"))
# Set to 1 for a developer's quick loop on a machine that lacks some parts:
# a test that cannot run there then skips, saying why, instead of failing.
ALLOW_SKIPS = "HARNESS_ALLOW_SKIPS"


def need(present: bool, what: str) -> None:
    """A test's prerequisite of the machine. `make test` sets up every one, so
    a test without it fails, naming what is missing: a CI whose setup half
    failed is red, not green with skips. With HARNESS_ALLOW_SKIPS=1 it skips."""
    if present:
        return
    message = f"this machine lacks {what}"
    if os.environ.get(ALLOW_SKIPS) == "1":
        pytest.skip(message)
    pytest.fail(f"{message} (`make test` sets it up; {ALLOW_SKIPS}=1 skips such tests instead)", pytrace=False)


def need_root(why: str) -> None:
    need(os.geteuid() == 0, f"root ({why})")


def need_fuse() -> None:
    need_root("FUSE mounts, namespaces")
    need(os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None,
         "/dev/fuse and fusermount3 (Debian's fuse3)")


def harness(*argv: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`harness ARGV` from the repository's folder, output captured."""
    return subprocess.run([HARNESS, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **(env or {})})


def fresh_python(code: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`code` (dedented) run by this Python in a process of its own, from the
    repository's folder, output captured; it must exit 0. For what a process
    holds once (a Spark session, the modules imported)."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def harness_run(results: Path, *argv: str, env: dict | None = None,
                timeout: float = 600) -> tuple[subprocess.CompletedProcess, Path]:
    """`harness run --results RESULTS ARGV`, and the run directory it made
    (RESULTS itself if it made none)."""
    proc = harness("run", "--results", str(results), *argv, env=env, timeout=timeout)
    runs = sorted(results.glob("*/*/run.json"))
    return proc, (runs[-1].parent if runs else results)


def history_events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def clusters_owned_by(pid: int) -> list[str]:
    return [c for c in st.list_cluster_ids() if (st.read_state(c) or {}).get("owner_pid") == pid]


def states_lines(run_dir: Path) -> list[dict]:
    """The run's states.jsonl (the cluster-state timeline), sorted by time."""
    lines = [json.loads(line) for line in (run_dir / "states.jsonl").read_text().splitlines()]
    return sorted(lines, key=lambda x: x["time"])


def check_kill_timeline(run_dir: Path, truncations_in_logs: list[tuple[str, int, int]]) -> dict:
    """What states.jsonl must show of a run that killed partition leaders: the
    phases in order; every killed node `alive: false` between its kill and its
    restart; for a killed leader, a later line of its partition with another
    leader at a higher epoch; a truncation line for each truncation the node
    logs recorded (node, partition, offset). Returns the counts it checked."""
    states = states_lines(run_dir)
    events = history_events(run_dir)
    phases = [x["phase"] for x in states if x["kind"] == "phase"]
    assert phases == ["workload", "heal", "settle", "final-reads", "end"], phases
    kills = [e for e in events if e["process"] == "nemesis" and e["f"] == "kill" and e["type"] == "ok"]
    starts = [e for e in events if e["process"] == "nemesis" and e["f"] == "start" and e["type"] == "ok"]
    assert kills, "the run killed nothing"
    moved = 0
    for kill in kills:
        node = kill["value"]["nodes"][0]
        restart = min((e["time"] for e in starts if e["time"] > kill["time"] and node in e["value"]["nodes"]),
                      default=float("inf"))
        down = [x for x in states if x["kind"] == "node" and x["node"] == node and x["alive"] is False
                and kill["time"] - 2e9 <= x["time"] <= restart + 2e9]
        assert down, f"no alive=false line for {node} around its kill at {kill['time']}"
        p = kill["value"].get("leader_of")
        before = [x for x in states if x["kind"] == "partition" and x["partition"] == p and x["time"] <= kill["time"]]
        if p is None or not before or before[-1]["leader"] != node:
            continue
        after = [x for x in states if x["kind"] == "partition" and x["partition"] == p and x["time"] > kill["time"]
                 and x["leader"] not in (None, node) and x["epoch"] > before[-1]["epoch"]]
        moved += bool(after)
    assert moved, "no killed leader's partition shows a new leader at a higher epoch"
    found = {(x["node"], x["partition"], x["offset"]) for x in states if x["kind"] == "truncation"}
    assert set(truncations_in_logs) <= found, (set(truncations_in_logs) - found)
    return {"kills": len(kills), "leaders moved": moved, "truncations": len(found)}


def leave_nothing_of(run, cids: list[str]) -> None:
    """The `finally` of a test that kills a harness run: stop it if it still
    runs, and clean every cluster it made (named, or found by owner)."""
    if run.poll() is None:
        run.kill()
        run.wait(10)
    for cid in cids or clusters_owned_by(run.pid):
        harness("clean", "--cluster", cid, timeout=120)


@dataclass(frozen=True)
class StoredRecord:
    """One record of a partition's log, with its batch's producer fields."""

    offset: int
    value: str | None  # None for a transaction marker
    marker: str | None  # "COMMIT" or "ABORT" for a transaction marker, else None
    producer_id: int
    producer_epoch: int
    base_sequence: int  # the batch's
    transactional: bool


def stored_records(port: int, topic: str, partition: int) -> list[StoredRecord]:
    """Every record of a partition below its high watermark, markers too, as
    the leader at 127.0.0.1:`port` serves them read_uncommitted (Fetch v11,
    which the own broker and Kafka 3 and 4 all answer): what the log holds,
    not what a client makes of it."""
    F = FetchRequest
    out: list[StoredRecord] = []
    offset, high_watermark = 0, 1
    with SyncConnection("127.0.0.1", port) as conn:
        while offset < high_watermark:
            resp = conn.request(F(
                replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[F.FetchTopic.FetchPartition(
                    partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=0,
                    partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""), 11)
            part = resp.responses[0].partitions[0]
            assert part.error_code == 0, part
            high_watermark = part.high_watermark
            batches = MemoryRecords(part.records)
            while (batch := batches.next_batch()) is not None:
                for r in batch:
                    control = batch.is_control_batch
                    out.append(StoredRecord(r.offset, None if control else r.value.decode(),
                                            ("COMMIT" if r.commit else "ABORT") if control else None,
                                            batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                            batch.is_transactional))
                offset = batch.next_offset
    return out
