"""Overlapping faults and an await step in a real run (own broker, 3 nodes).

An explicit schedule, as a scenario would state the first half of "the last
replica standing": cut the followers of partition 0 (n2 n3; n1 leads it
from the start, replica j of partition i being broker (i + j) mod n) off the
leader, with ZooKeeper on n1 alone so that the leader can still shrink the
ISR; pause n3 as well; await until the ISR is the leader alone; stop the
partition while the pause is still in force (the faults cross); stop the
pause; await until the ISR is full again. The history must show both faults
in force at once, each start and stop verified, the awaits with what they
saw, and the final heal. Then a run killed -9 while four faults are in
force at once, which `harness clean` must clear.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from infra import hostops
from infra import state as st
from tests.support import HARNESS, clusters_owned_by, harness, harness_run, history_events, leave_nothing_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = """\
system = "own"
nodes = 3
zk-nodes = 1
partitions = 1
time-limit = 15.0
final-time-limit = 30.0
rate = 100.0
seed = 1

[broker]
"replica.lag.time.max.ms" = 1000

[[schedule]]
delay = 2.0
action = "start"
fault = "partition"
mode = "isolate-majority"
picks = [1, 2, 0]

[[schedule]]
delay = 0.0
action = "start"
fault = "pause"
mode = "one"
picks = [2]

[[schedule]]
delay = 0.0
action = "await"
until = "isr-leader-only"
partition = 0
timeout = 8.0

[[schedule]]
delay = 0.5
action = "stop"
fault = "partition"

[[schedule]]
delay = 0.5
action = "stop"
fault = "pause"

[[schedule]]
delay = 0.0
action = "await"
until = "isr-full"
timeout = 8.0
"""


def test_crossing_faults_and_awaits_on_the_isr_run_verified_and_healed(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    proc, run_dir = harness_run(tmp_path / "results", "--config", str(spec), timeout=900)
    out = proc.stdout + proc.stderr
    assert (run_dir / "history.jsonl").exists(), out
    nemesis = [e for e in history_events(run_dir) if e["process"] == "nemesis"]
    done = [(e["f"], e["type"]) for e in nemesis if e["type"] != "invoke"]
    assert done[:5] == [("start-partition", "ok"), ("pause", "ok"), ("await", "ok"), ("stop-partition", "ok"),
                        ("resume", "ok")], (done, out)
    assert done[-1] == ("heal", "ok"), done
    # Both faults in force at once: the pause began before the partition ended.
    at = {(e["f"], e["type"]): e for e in nemesis}
    assert at[("pause", "invoke")]["index"] < at[("stop-partition", "invoke")]["index"]
    assert at[("stop-partition", "ok")]["index"] < at[("resume", "invoke")]["index"]
    # Every start and stop verified by its probe.
    assert at[("start-partition", "ok")]["value"]["verified"]["ok"] is True
    assert at[("pause", "ok")]["value"]["verified"]["ok"] is True
    assert at[("resume", "ok")]["value"]["verified"]["ok"] is True
    # The await saw the ISR shrink to the leader alone, n1.
    first_await = next(e for e in nemesis if e["f"] == "await" and e["type"] != "invoke")
    seen = first_await["value"]["seen"]
    assert seen["leader"] == "n1" and seen["isr"] == ["n1"], first_await
    assert first_await["value"]["until"] == "isr-leader-only" and first_await["value"]["partition"] == 0
    # The second await is recorded, whatever it found (ok, or info "timed out"), and the schedule went on.
    second = [e for e in nemesis if e["f"] == "await" and e["type"] != "invoke"][1]
    assert second["value"]["until"] == "isr-full" and (second["type"] == "ok" or second["error"] == "timed out")
    # The report names the await in words.
    assert "until isr-leader-only on partition 0; saw leader n1, ISR n1" in (run_dir / "report.html").read_text()


KILLED_SPEC = """\
system = "own"
nodes = 3
zk-nodes = 1
partitions = 1
time-limit = 120.0
rate = 100.0

[[schedule]]
delay = 1.0
action = "start"
fault = "partition"
mode = "isolate-one"
picks = [2, 0, 1]

[[schedule]]
delay = 0.0
action = "start"
fault = "lossy-link"
mode = "one"
picks = [1]
loss = 0.3

[[schedule]]
delay = 0.0
action = "start"
fault = "slow-link"
mode = "one"
picks = [0]
rate = "1mbit"

[[schedule]]
delay = 0.0
action = "start"
fault = "pause"
mode = "one"
picks = [1]

[[schedule]]
delay = 100.0
action = "stop"
fault = "pause"
"""

IN_FORCE = ("start-partition", "start-lossy-link", "start-slow-link", "pause")


def test_a_run_killed_with_four_faults_in_force_is_cleaned_up(tmp_path):
    """kill -9 of the harness while a partition, a lossy link, a slow link and
    a pause are all in force: nothing heals them but `harness clean`, which
    must leave no process, namespace (with its iptables rules and qdiscs) or
    state of the cluster behind."""
    spec = tmp_path / "spec.toml"
    spec.write_text(KILLED_SPEC)
    run = subprocess.Popen([HARNESS, "run", "--results", str(tmp_path / "results"), "--config", str(spec)],
                           stdout=subprocess.DEVNULL, stderr=open(tmp_path / "stderr.txt", "w"))
    cids: list[str] = []
    try:
        deadline = time.monotonic() + 180
        applied: set[str] = set()
        while time.monotonic() < deadline and run.poll() is None and not applied >= set(IN_FORCE):
            cids = cids or clusters_owned_by(run.pid)
            found = list((tmp_path / "results").glob("*/*/history.jsonl"))
            if found:
                events = [json.loads(line) for line in found[0].read_text().splitlines()[:-1]]
                applied = {e["f"] for e in events if e["process"] == "nemesis" and e["type"] in ("ok", "info")}
            time.sleep(0.2)
        assert applied >= set(IN_FORCE), (applied, (tmp_path / "stderr.txt").read_text()[-2000:])
        (cid,) = cids
        namespaces = [ns for ns in hostops.list_netns() if ns.startswith(f"{st.NETNS_PREFIX}{cid}-")]
        assert len(namespaces) == 3
        ours = [p.pid for p in hostops.scan_processes() if (p.daemon_tag or "").startswith(f"{cid}/")]
        assert ours
        run.send_signal(signal.SIGKILL)
        run.wait(10)

        res = harness("clean", "--cluster", cid, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert not [ns for ns in hostops.list_netns() if ns.startswith(f"{st.NETNS_PREFIX}{cid}-")]
        assert not [pid for pid in ours if hostops.is_alive(pid)]  # brokers (one stopped), ZooKeeper, sshd
        assert f"removed state directory {st.cluster_dir(cid)}" in res.stdout
    finally:
        leave_nothing_of(run, cids)
