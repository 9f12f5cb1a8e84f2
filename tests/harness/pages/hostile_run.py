"""A run folder for the report's tests: a real (synthetic) history with
planted anomalies, a nemesis event of every fault family (start and end,
verified, unverified, failed) and a heal, run.json settings, and node logs in
the own broker's, Kafka's and ZooKeeper's formats, with hostile strings
(markup, quotes, a script) in every field a user, the cluster or a node's
log can put on the page. Checked by the real checker (Spark), so the page
under test is what `harness check` + `harness report` produce.
"""

from __future__ import annotations

import json
from pathlib import Path

from checkers.check import Options, check_history
from checkers.results import write_results
from lab.synthetic import Plan, generate

# Markup that would run a script, load an image (a network request) or close an attribute if not escaped.
EVIL = "\"'><script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
EVIL_NODE = "n9\"'<b onmouseover=x>"  # a node name (no slash: it names a folder too)
NODES = ["n1", "n2", "n3", "n4", "n5"]


def nemesis_events() -> list[tuple[str, str, dict, dict]]:
    """(type, f, value, extra) of a nemesis that used every fault family, in order."""
    cut = {f"{a}->{b}": "cut" for a in ("n1", "n5") for b in ("n2", "n3", "n4")}
    grudge = {"n1": ["n2", "n3", "n4"], "n5": ["n2", "n3", "n4"], "n2": ["n1", "n5"], "n3": ["n1", "n5"],
              "n4": ["n1", "n5"]}
    ring = {"n1": ["n3", "n4"], "n2": ["n4", "n5"], "n3": ["n5", "n1"], "n4": ["n1", "n2"], "n5": ["n2", "n3"]}
    evil_grudge = {EVIL_NODE: ["n1", "n2"], "n1": [EVIL_NODE], "n2": [EVIL_NODE]}
    return [
        ("invoke", "start-partition", {"mode": "halves"}, {}),
        ("ok", "start-partition", {"mode": "halves", "grudge": grudge, "verified": {"ok": True, "probes": cut}}, {}),
        ("invoke", "stop-partition", {"grudge": grudge}, {}),
        ("ok", "stop-partition", {"healed": {n: 4 for n in NODES},
                                  "verified": {"ok": True, "probes": {k: "reached" for k in cut}}}, {}),
        ("invoke", "start-partition", {"mode": "majorities-ring"}, {}),
        ("info", "start-partition", {"mode": "majorities-ring", "grudge": ring,
                                     "verified": {"ok": False, "probes": {"n1->n3": "reached", "n1->n4": "cut"}}},
         {"error": "fault not verified"}),
        ("invoke", "stop-partition", {"grudge": ring}, {}),
        ("ok", "stop-partition", {"healed": {"n1": 2}, "verified": {"ok": True, "probes": {}}}, {}),
        ("invoke", "start-partition", {"mode": EVIL}, {}),
        ("ok", "start-partition", {"mode": EVIL, "isolated": EVIL_NODE, "grudge": evil_grudge,
                                   "verified": {"ok": True, "probes": {f"{EVIL_NODE}->n1": "cut"}}}, {}),
        ("invoke", "stop-partition", {"grudge": evil_grudge}, {}),
        ("ok", "stop-partition", {"healed": {EVIL_NODE: 2}, "verified": {"ok": True, "probes": {}}}, {}),
        ("invoke", "kill", {"mode": "leaders"}, {}),
        ("ok", "kill", {"nodes": ["n4"], "leader_of": 2, "verified": {"ok": True, "process_gone": {"n4": True}}}, {}),
        ("invoke", "start", {"nodes": ["n4"]}, {}),
        ("ok", "start", {"nodes": ["n4"], "verified": {"ok": True, "running": {"n4": True}}}, {}),
        ("invoke", "pause", {"mode": "random"}, {}),
        ("ok", "pause", {"nodes": ["n2", EVIL_NODE], "verified": {"ok": True, "stopped": {"n2": True, EVIL_NODE: True}}},
         {}),
        ("invoke", "resume", {"nodes": ["n2", EVIL_NODE]}, {}),
        ("ok", "resume", {"nodes": ["n2", EVIL_NODE], "verified": {"ok": True, "resumed": {"n2": True, EVIL_NODE: True}}},
         {}),
        ("invoke", "stall-disk", {"mode": "one"}, {}),
        ("ok", "stall-disk", {"nodes": ["n3"], "mode": "stall", "ops": ["write", "fsync"],
                              "verified": {"ok": True, "probe": {"n3": "probe blocked (1 operation(s) waiting)"}}}, {}),
        ("invoke", "unstall-disk", {"nodes": ["n3"]}, {}),
        ("ok", "unstall-disk", {"nodes": ["n3"], "mode": "passthrough",
                                "verified": {"ok": True, "probe": {"n3": "probe took 12 ms"}}}, {}),
        ("invoke", "slow-disk", {"mode": "controller"}, {}),
        ("ok", "slow-disk", {"nodes": ["n1"], "controller": True, "mode": "slow", "ops": [EVIL], "delay_ms": 200.0,
                             "verified": {"ok": True, "probe": {"n1": "probe took 230 ms (asked 200 ms per operation)"}}},
         {}),
        ("invoke", "unslow-disk", {"nodes": ["n1"]}, {}),
        ("ok", "unslow-disk", {"nodes": ["n1"], "mode": "passthrough",
                               "verified": {"ok": True, "probe": {"n1": "probe took 9 ms"}}}, {}),
        ("invoke", "fail-disk", {"mode": "minority"}, {}),
        ("info", "fail-disk", {"mode": "minority"}, {"error": f"faultfs control socket said {EVIL}"}),
        ("invoke", "unfail-disk", {"nodes": []}, {}),
        ("ok", "unfail-disk", {"nodes": [], "mode": "passthrough", "verified": {"ok": True, "probe": {}}}, {}),
        ("invoke", "power-loss", {"mode": "all"}, {}),
        ("ok", "power-loss", {"nodes": NODES, "lost": {n: {"files": 22, "bytes_cut": 4096, "bytes_restored": 0}
                                                       for n in NODES},
                              "verified": {"ok": True, "process_gone": {n: True for n in NODES},
                                           "probe": {n: "probe kept its fsynced part only" for n in NODES}}}, {}),
        ("invoke", "power-restore", {"nodes": NODES}, {}),
        ("ok", "power-restore", {"nodes": NODES, "verified": {"ok": True, "running": {n: True for n in NODES}}}, {}),
        ("invoke", "heal", {}, {}),
        ("ok", "heal", {"rules_removed": {EVIL_NODE: 2}, "started": ["n4"], "disks_released": {EVIL: "stall"}}, {}),
    ]


KAFKA_LOG = f"""\
[2026-11-23 09:20:30,911] INFO [KafkaServer id=1] started (kafka.server.KafkaServer)
[2026-11-23 09:20:30,911] WARN [RequestSendThread controllerId=1] Controller 1's connection to broker 10.213.0.11:9092 (id: 1 rack: null) was unsuccessful (kafka.controller.RequestSendThread)
java.io.IOException: Connection to 10.213.0.11:9092 (id: 1 rack: null) failed.
\tat org.apache.kafka.clients.NetworkClientUtils.awaitReady(NetworkClientUtils.java:71)
\tat kafka.controller.RequestSendThread.doWork(ControllerChannelManager.scala:252)
[2026-11-23 09:20:31,002] WARN [RequestSendThread controllerId=1] Controller 1's connection to broker 10.213.0.12:9092 (id: 2 rack: null) was unsuccessful (kafka.controller.RequestSendThread)
java.io.IOException: Connection to 10.213.0.12:9092 (id: 2 rack: null) failed.
\tat org.apache.kafka.clients.NetworkClientUtils.awaitReady(NetworkClientUtils.java:71)
[2026-11-23 09:20:57,933] ERROR [Broker id=1] Received LeaderAndIsrRequest with correlation id 1 from controller 4 epoch 2 for partition harness-0 (last update controller epoch 2) but cannot become follower since the new leader -1 is unavailable. (state.change.logger)
[2026-11-23 09:20:58,117] ERROR [Broker id=1] Received LeaderAndIsrRequest with correlation id 3 from controller 4 epoch 2 for partition harness-2 (last update controller epoch 2) but cannot become follower since the new leader 3 is unavailable. (state.change.logger)
[2026-11-23 09:21:02,000] ERROR [ReplicaManager broker=1] Error processing append operation on partition {EVIL} (kafka.server.ReplicaManager)
org.apache.kafka.common.errors.KafkaStorageException: {EVIL}
\tat kafka.log.UnifiedLog.append(UnifiedLog.scala:1)
[2026-11-23 09:21:05,100] ERROR Shutdown broker because all log dirs in /var/lib/harness/{EVIL} have failed (kafka.log.LogManager)
[2026-11-23 09:21:05,200] INFO [KafkaServer id=1] shutting down (kafka.server.KafkaServer)
"""

OWN_LOG = f"""\
2026-11-23 09:47:46.364 INFO [broker] broker 2 listening on 10.213.0.12:9092, planted bugs: none
2026-11-23 09:48:03.936 ERROR [kazoo.recipe.watchers] {EVIL}
Traceback (most recent call last):
  File "/work/main/broker/metadata.py", line 238, in _watch_brokers
    data, stat = self.zk.get(f"{{Z.BROKERS}}/{{child}}")
kazoo.exceptions.ConnectionLoss: {EVIL}
2026-11-23 09:48:04.100 INFO [broker.partition] FOLLOWER harness-4: broker 2 follows leader 3, epoch 5
2026-11-23 09:48:05.000 ERROR [broker] fatal: [Errno 5] Input/output error: '/data/{EVIL}'
"""

OWN_OUT = f"""\
Traceback (most recent call last):
  File "/work/main/broker/metadata.py", line 152, in _register
    await self.zk_call(lambda c: c.create(path, data, ephemeral=True))
kazoo.exceptions.NodeExistsError

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/work/main/broker/metadata.py", line 160, in _register
kazoo.exceptions.NoNodeError: {EVIL}
broker: error: [Errno 5] Input/output error
"""

ZK_LOG = f"""\
2026-11-23T09:20:21.102 [main] INFO org.apache.zookeeper.server.quorum.QuorumPeerConfig - clientPortAddress is 10.213.0.11:2181
2026-11-23T09:21:00.000 [QuorumConnectionThread-[myid=1]-3] WARN org.apache.zookeeper.server.quorum.QuorumCnxManager - Cannot open channel to 2 at election address /10.213.0.12:3888
java.net.ConnectException: Connection refused
\tat java.base/sun.nio.ch.Net.pollConnect(Native Method)
2026-11-23T09:21:01.000 [LearnerHandler-/10.213.0.12:4000] ERROR org.apache.zookeeper.server.quorum.LearnerHandler - Unexpected exception in LearnerHandler: {EVIL}
"""


def build(root: Path, spark) -> tuple[Path, dict]:
    """A run folder under `root`, checked: (its path, its results)."""
    run_dir = root / "run"
    run_dir.mkdir(parents=True)
    syn = generate(Plan(events=6000, seed=5, lost=2, lost_acked=1, dirty_reads=1, duplicates=1, nonmonotonic_polls=1))
    events = [e for e in syn.events if e["process"] != "nemesis"]
    for e in events:
        if e["f"] == "send" and e["type"] == "fail":
            e["error"] = EVIL
    # The nemesis's events spread over the run; indexes renumbered so that the history stays in order.
    faults = nemesis_events()
    step = len(events) // (len(faults) + 1)
    merged: list[dict] = []
    for i, e in enumerate(events):
        k = i // step - 1
        if i % step == 0 and 0 <= k < len(faults):
            type_, f, value, extra = faults[k]
            merged.append({"time": e["time"], "process": "nemesis", "type": type_, "f": f, "value": value, **extra})
        merged.append(e)
    for i, e in enumerate(merged):
        e["index"] = i
    (run_dir / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in merged))
    (run_dir / "run.json").write_text(json.dumps({
        "name": EVIL, "history_origin": "2026-11-23T10:02:00.000Z", "started": EVIL, "outcome": EVIL,
        "command": f"harness run --name {EVIL}",
        "spec": {"name": EVIL, "system": "own", "provider": "local", "nodes": 5, "zk_nodes": 3,
                 "nemesis": ["partition", EVIL], "nemesis_targets": "random", "nemesis_interval": 8.0,
                 "time_limit": 40.0, "final_time_limit": 60.0, "replication_factor": 3, "unclean_election": False,
                 "kafka_version": "", "kafka_dist": None, "ssh_insecure": False, "vagrant_dir": ".",
                 "broker": {EVIL: EVIL, "replica.lag.time.max.ms": 10000},
                 "description": f"a line\nand {EVIL}", "expect": {}, "debug_bug": []},
        "schedule": [{"delay": 4.97, "action": "start", "fault": "partition", "mode": EVIL, "picks": [0, 1]},
                     {"delay": 5.59, "action": "stop", "fault": "partition", "mode": "", "picks": []}]}))
    for node, files in {"n1": {"server.log": KAFKA_LOG, "kafka.out": "", "zookeeper.log": ZK_LOG,
                               "kafka.properties": f"broker.id={EVIL}\n"},
                        "n2": {"broker.log": OWN_LOG, "broker.out": OWN_OUT},
                        "n3": {"broker.log": OWN_LOG.replace("broker 2", "broker 3"), "broker.out": ""},
                        EVIL_NODE: {"broker.log": f"2026-11-23 09:49:00.000 ERROR [broker] {EVIL}\n",
                                    f"{EVIL_NODE}.log": "2026-11-23 09:49:00.000 INFO nothing\n"}}.items():
        (run_dir / "nodes" / node).mkdir(parents=True)
        for name, text in files.items():
            (run_dir / "nodes" / node / name).write_text(text)
    results = check_history(run_dir, Options(), spark=spark)
    write_results(results, run_dir)
    return run_dir, results
