"""Reading the KRaft controller's metadata log (infra/kraft_metadata.py) as
Kafka's `DumpLogSegments --cluster-metadata-decoder` prints it: the lines
below keep that tool's shape (batch headers, records, other topics' and
record types the timeline leaves out)."""

from __future__ import annotations

from infra import kraft_metadata
from workloads.observer import controller_lines

T = "harness-topic-id"
O = "offsets-topic-id"


def rec(offset: int, ms: int, payload: str) -> str:
    return (f"| offset: {offset} CreateTime: {ms} keySize: -1 valueSize: 90 sequence: -1 headerKeys: [] "
            f"payload: {payload}")


DUMP = [
    "Dumping /d/kraft-controller/__cluster_metadata-0/00000000000000000000.log",
    "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 CreateTime: 1000 size: 106",
    rec(1, 1000, '{"type":"REGISTER_BROKER_RECORD","version":3,"data":{"brokerId":1,"brokerEpoch":18,"fenced":true}}'),
    rec(2, 1100, '{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":0,"data":{"brokerId":1,"brokerEpoch":18,'
                 '"fenced":-1}}'),
    rec(3, 1200, '{"type":"TOPIC_RECORD","version":0,"data":{"name":"__consumer_offsets","topicId":"' + O + '"}}'),
    rec(4, 1200, '{"type":"PARTITION_RECORD","version":2,"data":{"partitionId":0,"topicId":"' + O
                 + '","replicas":[1,2,3],"isr":[1,2,3],"leader":1,"leaderEpoch":0}}'),
    rec(5, 1300, '{"type":"TOPIC_RECORD","version":0,"data":{"name":"harness","topicId":"' + T + '"}}'),
    rec(6, 1300, '{"type":"PARTITION_RECORD","version":2,"data":{"partitionId":0,"topicId":"' + T
                 + '","replicas":[3,1,2],"isr":[3,1,2],"leader":3,"leaderEpoch":0}}'),
    rec(7, 2000, '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":0,"topicId":"' + T
                 + '","isr":[3],"eligibleLeaderReplicas":[1,2]}}'),
    rec(8, 2000, '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":0,"topicId":"' + O
                 + '","isr":[1]}}'),
    rec(9, 2500, '{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":0,"data":{"brokerId":3,"brokerEpoch":16,'
                 '"fenced":1}}'),
    rec(10, 2500, '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":0,"topicId":"' + T
                  + '","leader":-1,"isr":[],"lastKnownElr":[3]}}'),
    rec(11, 2600, '{"type":"NO_OP_RECORD","version":0,"data":{}}'),
    rec(12, 3000, '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":0,"topicId":"' + T
                  + '","leader":1,"isr":[1],"eligibleLeaderReplicas":[2]}}'),
    "| offset: 13 CreateTime: 3100 keySize: 4 valueSize: 34 LeaderChange: {\"version\":0,\"leaderId\":102}",
    rec(14, 3200, '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":0,"topicId":"' + T
                  + '","isr":[1,2,3],"eligibleLeaderReplicas":[],"lastKnownElr":[]}}'),
]


def test_the_topic_s_partition_state_is_carried_from_record_to_record():
    got = [r for r in kraft_metadata.records(DUMP, "harness") if r["kind"] == "partition"]
    assert [(r["wall_ms"], r["leader"], r["isr"], r["elr"], r["last_known_elr"]) for r in got] == [
        (1300, 3, [3, 1, 2], [], []),
        (2000, 3, [3], [1, 2], []),       # the followers left the ISR below min ISR: eligible
        (2500, -1, [], [1, 2], [3]),      # the leader fenced: no ISR, its last member known
        (3000, 1, [1], [2], [3]),         # elected from the ELR
        (3200, 1, [1, 2, 3], [], []),
    ]
    assert all(r["partition"] == 0 for r in got)  # the offsets topic's partition 0 is another's


def test_brokers_registrations_and_fencing():
    got = [(r["wall_ms"], r["broker"], r["epoch"], r["event"]) for r in kraft_metadata.records(DUMP, "harness")
           if r["kind"] == "broker"]
    assert got == [(1000, 1, 18, "registered"), (1100, 1, 18, "unfenced"), (2500, 3, 16, "fenced")]


def test_nothing_of_another_topic_or_a_line_of_another_shape():
    assert [r for r in kraft_metadata.records(DUMP, "other") if r["kind"] == "partition"] == []
    assert kraft_metadata.records(["| offset: 1 CreateTime: 5 payload: {not json}", "garbage"], "harness") == []


def test_the_grep_on_the_node_keeps_exactly_the_records_read():
    import re
    kept = [line for line in DUMP if re.search(kraft_metadata.GREP, line)]
    assert kraft_metadata.records(kept, "harness") == kraft_metadata.records(DUMP, "harness")
    assert not any("NO_OP_RECORD" in line or "LeaderChange" in line for line in kept)


def test_timeline_lines_are_on_the_history_s_clock():
    lines = controller_lines([
        {"wall": 101.5, "kind": "partition", "partition": 0, "leader": "n1", "isr": ["n1"], "elr": ["n2"],
         "last_known_elr": ["n3"]},
        {"wall": 102.25, "kind": "broker", "node": "n3", "event": "registered", "epoch": 144},
    ], origin_wall=100.0)
    assert lines == [
        {"time": 1_500_000_000, "kind": "kraft-partition", "partition": 0, "leader": "n1", "isr": ["n1"],
         "elr": ["n2"], "last_known_elr": ["n3"]},
        {"time": 2_250_000_000, "kind": "kraft-broker", "node": "n3", "event": "registered", "epoch": 144},
    ]


def test_the_finalized_feature_levels_are_read_from_the_controller_s_records():
    from core.history.features import features_words, finalized

    dump = DUMP + [
        rec(20, 900, '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":27}}'),
        rec(21, 900, '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"transaction.version",'
                     '"featureLevel":2}}'),
        rec(22, 4000, '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"transaction.version",'
                      '"featureLevel":0}}'),  # an operator turned it off later
    ]
    import re
    kept = [line for line in dump if re.search(kraft_metadata.GREP, line)]
    got = [r for r in kraft_metadata.records(kept, "harness") if r["kind"] == "feature"]
    assert got == [{"wall_ms": 900, "kind": "feature", "name": "metadata.version", "level": 27},
                   {"wall_ms": 900, "kind": "feature", "name": "transaction.version", "level": 2},
                   {"wall_ms": 4000, "kind": "feature", "name": "transaction.version", "level": 0}]
    lines = controller_lines([{"wall": r["wall_ms"] / 1000, **{k: v for k, v in r.items() if k != "wall_ms"}}
                              for r in got], origin_wall=1.0)
    assert lines[0] == {"time": -100_000_000, "kind": "kraft-feature", "name": "metadata.version", "level": 27}
    # The last level of each, whatever the file's order; nothing from other lines.
    levels = finalized(list(reversed(lines)) + [{"time": 0, "kind": "kraft-broker", "node": "n1"},
                                                {"time": 5, "kind": "kraft-feature", "name": "x"}])
    assert levels == {"metadata.version": 27, "transaction.version": 0}
    assert features_words(levels) == "metadata.version 27, transaction.version 0"
    assert finalized(None) == {} and finalized([]) == {}
