"""The broker-log scan (checkers.node_logs) over node log folders written in
the formats the own broker, Kafka, ZooKeeper and a process's stderr use."""

from __future__ import annotations

from checkers.node_logs import normalize, records, scan, warnings
from tests.harness.pages.hostile_run import KAFKA_LOG, OWN_LOG, OWN_OUT, ZK_LOG


def write(root, files: dict[str, dict[str, str]]):
    for node, by_name in files.items():
        (root / "nodes" / node).mkdir(parents=True)
        for name, text in by_name.items():
            (root / "nodes" / node / name).write_text(text)
    return root


def test_records_keep_their_traces_and_levels(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(KAFKA_LOG)
    rs = list(records(path))
    assert [r.level for r in rs] == ["INFO", "WARN", "WARN", "ERROR", "ERROR", "ERROR", "ERROR", "INFO"]
    warn = rs[1]
    assert warn.line == 2 and warn.time == "2026-11-23 09:20:30.911" and len(warn.lines) == 4 and warn.has_trace()
    assert warn.exception() == "java.io.IOException: Connection to 10.213.0.11:9092 (id: 1 rack: null) failed."
    (tmp_path / "zookeeper.log").write_text(ZK_LOG)
    zk = list(records(tmp_path / "zookeeper.log"))
    assert [r.level for r in zk] == ["INFO", "WARN", "ERROR"]  # a thread name with brackets in it
    # A process's stderr: no timestamps; a chained Python traceback is one record, named by its last exception.
    (tmp_path / "broker.out").write_text(OWN_OUT)
    out = list(records(tmp_path / "broker.out"))
    assert len(out) == 2 and out[0].exception().startswith("kazoo.exceptions.NoNodeError: ")
    assert out[1].message == "broker: error: [Errno 5] Input/output error" and out[1].level == "ERROR"


def test_signatures_group_the_same_event_across_nodes(tmp_path):
    assert normalize("[Broker id=1] leader -1 at 10.213.0.11:9092 session 0x1000a2b3c epoch 12") == \
        "[Broker id=N] leader N at <addr> session <hex> epoch N"
    root = write(tmp_path, {"n1": {"server.log": KAFKA_LOG, "kafka.properties": "ERROR=not a log\n"},
                            "n2": {"server.log": KAFKA_LOG.replace("id=1", "id=2"), "kafka.out": ""},
                            "n10": {"broker.log": OWN_LOG}})
    found = scan(root)
    assert found["scanned"] == {"n1": ["server.log"], "n2": ["kafka.out", "server.log"], "n10": ["broker.log"]}
    by_sig = {g["signature"]: g for g in found["groups"]}
    # Leader -1 and leader 3 are one signature; 2 per node.
    leader = next(g for s, g in by_sig.items() if "LeaderAndIsrRequest" in s)
    assert leader["count"] == 4 and leader["nodes"] == {"n1": 2, "n2": 2}
    assert leader["first"]["node"] == "n1" and leader["first"]["line"] == 9
    # A WARN is kept for its stack trace, the trace folded into its first line.
    warn = next(g for s, g in by_sig.items() if s.startswith("WARN "))
    assert warn["count"] == 4 and warn["signature"].endswith("— java.io.IOException: Connection to <addr> "
                                                              "(id: N rack: null) failed.")
    assert "\tat org.apache.kafka.clients.NetworkClientUtils" in warn["first"]["text"]
    assert not any("INFO" in s for s in by_sig)  # INFO lines without traces are not errors
    # ERROR before WARN; the most frequent first within a level.
    levels = [g["level"] for g in found["groups"]]
    assert levels == sorted(levels, key=["ERROR", "WARN"].index)


def test_a_broker_that_exited_is_flagged_once_with_its_first_evidence(tmp_path):
    root = write(tmp_path, {"n1": {"server.log": KAFKA_LOG}, "n2": {"broker.log": OWN_LOG, "broker.out": OWN_OUT},
                            "n3": {"broker.log": OWN_LOG.split("2026-11-23 09:48:05")[0]},
                            "n4": {"zookeeper.log": "2026-11-23T09:21:00.000 [main] ERROR x - Exiting Kafka\n"}})
    exits = scan(root)["exits"]
    assert [e["node"] for e in exits] == ["n1", "n2"]  # n3 did not exit; ZooKeeper's log is no broker's
    assert exits[0]["line"] == 14 and exits[0]["evidence"].startswith("ERROR Shutdown broker because all log dirs")
    assert exits[1]["file"] == "broker.log" and exits[1]["evidence"].startswith("ERROR [broker] fatal: ")
    said = warnings(scan(root))
    assert len(said) == 2 and said[0].startswith("the broker on n1 exited unexpectedly (server.log line 14: ")


def test_a_run_without_node_logs_scans_nothing(tmp_path):
    assert scan(tmp_path) == {"scanned": {}, "groups": [], "more_groups": 0, "exits": []}
    root = write(tmp_path, {"n1": {"server.log": "[2026-11-23 09:20:30,911] INFO started\n", "broker.out": ""}})
    assert scan(root)["groups"] == [] and scan(root)["exits"] == []
