"""Role-aware targets on real clusters: one short run of each system with an
explicit schedule that visits several targets, each event checked for the
nodes it names, how they were chosen, its probes' verdict and its healing.

- the own broker: out-of-sync while every replica is in sync (not applied,
  the run goes on), the followers of partition 0 cut off, and once its ISR
  is the leader alone (an await step) the replicas out of it paused while
  still cut off (overlapping faults), the clients cut off from its leader,
  the ZooKeeper process killed, the brokers cut off from ZooKeeper;
- Kafka in KRaft mode: the controller quorum split on its controller port,
  the voters paused, the followers killed;
- the own broker with clients as processes: a group member, then a
  producer, cut off the network on the control host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra import client_net
from tests.kafka.conftest import left_behind, results  # noqa: F401 - results is a fixture
from tests.support import harness_run, history_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def step(delay: float, action: str, fault: str, mode: str = "", partition: int | None = None) -> str:
    if action == "await":  # `fault` is the condition
        return (f'[[schedule]]\ndelay = {delay}\naction = "await"\nuntil = "{fault}"\n'
                f"partition = {partition}\ntimeout = 6\n")
    lines = ["[[schedule]]", f"delay = {delay}", f'action = "{action}"', f'fault = "{fault}"']
    if action == "start":
        lines += [f'mode = "{mode}"', "picks = []"] + ([f"partition = {partition}"] if partition is not None else [])
    return "\n".join(lines) + "\n"


def spec_file(tmp_path: Path, head: str, steps: list[str]) -> str:
    path = tmp_path / "spec.toml"
    path.write_text(head + "nodes = 3\npartitions = 1\nreplication-factor = 3\nacks = \"all\"\nmin-insync = 1\n"
                    "time-limit = 20.0\nfinal-time-limit = 10.0\nrate = 200.0\nseed = 1\n"
                    '[broker]\n"replica.lag.time.max.ms" = 1000\n' + "".join(steps))
    return str(path)


def nemesis_events(run_dir: Path) -> list[dict]:
    return [e for e in history_events(run_dir) if e["process"] == "nemesis"]


def ends(events: list[dict]) -> list[dict]:
    """Each fault's start or stop as it ended (ok or info), in order."""
    return [e for e in events if e["type"] != "invoke" and e["f"] != "heal"]


def test_own_broker_followers_out_of_sync_clients_and_zookeeper(tmp_path, results):  # noqa: F811
    # ZooKeeper on n1 alone: the leader the followers are cut off from keeps its session, so it
    # can shrink the ISR (as in tests/nemesis/test_overlap_run.py).
    spec = spec_file(tmp_path, 'system = "own"\nzk-nodes = 1\n', [
        step(1.0, "start", "kill", "out-of-sync", 0), step(0.2, "stop", "kill"),
        step(0.2, "start", "partition", "isolate-followers", 0), step(0.0, "await", "isr-leader-only", partition=0),
        step(0.0, "start", "pause", "out-of-sync", 0), step(0.5, "stop", "partition"), step(0.2, "stop", "pause"),
        step(0.5, "start", "partition", "cut-clients", 0), step(1.0, "stop", "partition"),
        step(0.5, "start", "kill", "zookeeper"), step(1.0, "stop", "kill"),
        step(0.5, "start", "partition", "isolate-zookeeper"), step(1.0, "stop", "partition"),
    ])
    proc, run_dir = harness_run(results, "--config", spec)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # the verdict is not what is tested here
    events = ends(nemesis_events(run_dir))
    by = [(e["f"], e["value"].get("mode") if e["f"] == "start-partition" else None) for e in events]
    # Every step ran, in order, within the time limit.
    assert [f for f, _ in by] == ["kill", "start", "start-partition", "await", "pause", "stop-partition", "resume",
                                  "start-partition", "stop-partition", "kill", "start",
                                  "start-partition", "stop-partition"], by
    no_lag, _, followers, shrunk, lagging, _, _, clients, clients_end, zk_kill, zk_start, zk, zk_end = events
    # Every replica was in sync: not applied, said so, and the run went on.
    assert no_lag["type"] == "info" and "every replica of partition 0 is in its ISR" in no_lag["error"]
    # The followers: the replicas but the leader of that moment, cut off from it.
    v = followers["value"]
    assert followers["type"] == "ok" and v["followers_of"] == 0 and v["verified"]["ok"]
    assert sorted(v["isolated"] + [v["leader"]]) == ["n1", "n2", "n3"]
    # Once the ISR is the leader alone (the await), the out-of-sync replicas are those followers.
    assert shrunk["type"] == "ok", shrunk
    lv = lagging["value"]
    assert lagging["type"] == "ok" and lv["out_of_sync_of"] == 0 and lv["verified"]["ok"], lagging
    assert lv["nodes"] == v["isolated"] and lv["isr"] == [v["leader"]]
    # The clients cut off from the leader's broker port; the other brokers still reach it.
    cv = clients["value"]
    assert clients["type"] == "ok" and cv["clients_of"] == 0 and cv["verified"]["ok"], clients
    assert set(cv["verified"]["probes"].values()) == {"cut"} and set(cv["verified"]["still"].values()) == {"reached"}
    assert all(k.startswith("control->" + cv["isolated"]) for k in cv["verified"]["probes"])
    assert clients_end["type"] == "ok" and clients_end["value"]["healed"] == {cv["isolated"]: 2}
    # The brokers cut off from ZooKeeper's port; the control node still reaches it.
    zv = zk["value"]
    assert zk["type"] == "ok" and zv["zookeeper"] is True and zv["port"] == 2181 and zv["verified"]["ok"], zk
    assert zv["isolated"] == ["n1"] and set(zv["verified"]["probes"].values()) == {"cut"}
    assert zk_end["type"] == "ok" and zk_end["value"]["verified"]["ok"]
    # ZooKeeper's processes killed (not the brokers'), and started again.
    assert zk_kill["type"] == "ok" and zk_kill["value"]["zookeeper"] is True
    assert zk_kill["value"]["nodes"] == ["n1"] and zk_start["value"]["verified"]["ok"]
    heal = [e for e in nemesis_events(run_dir) if e["f"] == "heal" and e["type"] != "invoke"]
    assert heal and heal[-1]["type"] == "ok", heal
    report = (run_dir / "report.html").read_text()
    assert "the followers of partition 0, led by" in report and "cut off from ZooKeeper (port 2181)" in report
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}


def test_kafka_kraft_controllers_and_followers(tmp_path, results):  # noqa: F811
    spec = spec_file(tmp_path, 'system = "kafka"\nkafka-mode = "kraft"\n', [
        step(1.0, "start", "partition", "split-kraft-controllers"), step(2.5, "stop", "partition"),
        step(0.5, "start", "pause", "kraft-controllers"), step(1.0, "stop", "pause"),
        step(0.5, "start", "kill", "followers", 0), step(2.0, "stop", "kill"),
    ])
    proc, run_dir = harness_run(results, "--config", spec)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    run = json.loads((run_dir / "run.json").read_text())
    assert run["versions"]["system"].endswith("(kraft)")
    events = ends(nemesis_events(run_dir))
    assert [e["f"] for e in events] == ["start-partition", "stop-partition", "pause", "resume", "kill", "start"]
    split, split_end, pause, resume, kill, start = events
    sv = split["value"]
    assert split["type"] == "ok" and sv["mode"] == "split-kraft-controllers" and sv["port"] == 9093, split
    assert sv["isolated"] == ["n1", "n2", "n3"] and set(sv["verified"]["probes"].values()) == {"cut"}
    assert set(sv["verified"]["still"].values()) == {"reached"}  # the broker port stays open
    assert split_end["type"] == "ok" and split_end["value"]["verified"]["ok"]
    assert pause["type"] == "ok" and pause["value"]["kraft_controllers"] is True
    assert pause["value"]["nodes"] == ["n1", "n2", "n3"] and resume["value"]["verified"]["ok"]
    kv = kill["value"]
    assert kill["type"] == "ok" and kv["followers_of"] == 0 and kv["leader"] not in kv["nodes"], kill
    assert len(kv["nodes"]) == 2 and start["value"]["verified"]["ok"]
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}


def test_own_broker_a_consumer_and_a_producer_cut_off_the_network(tmp_path, results):  # noqa: F811
    # Clients as processes: a group member, then a producer, cut off the network on the
    # control host (nemesis/clients.py): their probes of the brokers time out, then answer.
    spec = spec_file(tmp_path, 'system = "own"\nzk-nodes = 1\nclient-processes = true\nconsumers = 1\n', [
                         '[[groups]]\nname = "g"\nconsumers = 2\ncommit = "after-processing"\n',
                         step(1.0, "start", "partition", "isolate-consumer"), step(2.0, "stop", "partition"),
                         step(0.5, "start", "partition", "isolate-producer"), step(2.0, "stop", "partition")])
    proc, run_dir = harness_run(results, "--config", spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = ends(nemesis_events(run_dir))
    assert [(e["f"], e["type"]) for e in events] == [("start-partition", "ok"), ("stop-partition", "ok")] * 2, events
    member, member_end, producer, producer_end = events
    for cut, lifted, role in ((member, member_end, "member"), (producer, producer_end, "producer")):
        v = cut["value"]
        assert v["role"] == role and v["gid"] and len(v["clients"]) == 1 and v["verified"]["ok"], cut
        assert set(v["verified"]["probes"].values()) == {"cut"}
        w = lifted["value"]
        assert w["gid"] == v["gid"] and w["healed"] == {"control": 1} and w["verified"]["ok"], lifted
        assert set(w["verified"]["probes"].values()) == {"reached"}
    assert member["value"]["group"] == "g"
    report = (run_dir / "report.html").read_text()
    assert "cut off the network" in report and "cut lifted" in report
    assert left_behind(run_dir) == {"processes": [], "namespaces": []}
    assert client_net.cut_gids() == []  # no cut outlives its run
