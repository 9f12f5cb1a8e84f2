"""Starved members (checkers/group_balance.py) on hand-made histories,
through the whole checker: a KIP-848 member never given a partition, a
cooperative hand-over, an eager rebalance, a holder that crashes, a group
with fewer partitions than members, and the [expect] limit."""

from __future__ import annotations

import pytest

from harness.run.spec import expectation, liveness_failed
from tests.checkers.test_liveness import Timed, live

pytestmark = pytest.mark.spark


def _traffic(h: Timed, until: float, start: float = 0.5, polling: tuple[int, ...] = ()) -> None:
    """Acknowledged sends to partitions 0 and 1, every 0.5 s, and a poll
    by each of the `polling` members (a member is one while it records
    events): the run goes on until `until`."""
    t, v = start, 0
    while t < until:
        h.at(t)
        h.send(0, v, v % 2, v // 2)
        for member in polling:
            h.poll(member)
        t, v = t + 0.5, v + 1


def test_a_member_never_given_a_partition_while_another_holds_both_is_starved_to_the_end(check):
    # Today's finding (docs/scenarios.md): the KIP-848 member that dropped the
    # answer naming its new assignment kept both partitions; the newcomer held
    # nothing for the rest of the run.
    h = Timed()
    h.at(1.0).assign(4, [], group="g")
    h.at(1.1).assign(4, [0, 1], group="g", generation=2)
    h.at(1.3).assign(3, [], group="g")
    _traffic(h, until=20.0, start=1.5, polling=(3, 4))
    out = live(check, h)
    assert out["starved_member_s"] == pytest.approx(20.0 - 0.5 - 1.3, abs=0.01)
    (stretch,) = out["starved_members"]
    assert stretch["group"] == "g" and stretch["member"] == 3 and stretch["open"] is True
    assert stretch["holder"] == 4 and stretch["holder_partitions"] == [0, 1]
    assert stretch["start"] == pytest.approx(1.3, abs=0.01)


def test_a_cooperative_hand_over_starves_the_newcomer_until_the_holder_gives_one_up(check):
    h = Timed()
    h.at(1.0).assign(4, [0, 1], group="g", generation=2)
    h.at(1.2).assign(3, [], group="g")
    h.at(2.0).assign(4, [0], group="g", generation=3)  # revoked 1: nobody holds two any more
    h.at(2.5).assign(3, [1], group="g", generation=3)
    _traffic(h, until=10.0, start=3.0)
    out = live(check, h)
    assert out["starved_member_s"] == pytest.approx(0.8, abs=0.01)
    assert out["starved_members"] == []  # shorter than a second: not listed


def test_an_eager_rebalance_starves_a_newcomer_until_the_holder_revokes_everything(check):
    # The classic protocol: the newcomer's join makes the holder rejoin, which revokes
    # all it held first; from then on nobody holds two while the newcomer waits.
    h = Timed()
    h.at(1.0).assign(4, [0, 1], group="g", generation=1)
    h.at(2.0).assign(3, [], group="g")
    h.at(2.6).assign(4, [], group="g", generation=1)
    h.at(3.0).assign(4, [0], group="g", generation=2)
    h.assign(3, [1], group="g", generation=2)
    _traffic(h, until=10.0, start=3.5)
    out = live(check, h)
    assert out["starved_member_s"] == pytest.approx(0.6, abs=0.01) and out["starved_members"] == []


def test_a_stretch_ends_when_its_holder_crashes_and_a_crashed_member_starves_no_more(check):
    h = Timed()
    h.at(1.0).assign(4, [0, 1], group="g", generation=2)
    h.assign(3, [], group="g")
    h.assign(5, [], group="g")
    h.at(3.0).crash(5)  # starved from 1.0 to its crash
    h.at(6.0).crash(4)  # the holder: 3's stretch ends, nobody holds two
    h.poll(3)  # 3 runs on
    _traffic(h, until=12.0, start=6.5, polling=(3,))
    out = live(check, h)
    assert [(s["member"], s["seconds"], s["open"]) for s in out["starved_members"]] == [(3, 5.0, False),
                                                                                       (5, 2.0, False)]


def test_a_member_the_nemesis_paused_is_not_starved_until_it_is_resumed(check):
    # kafka4-group-protocol-starved-member's first tries: a member paused past its
    # session held nothing in its history while the other took every partition;
    # it had not been starved, it had been stopped.
    h = Timed()
    h.at(1.0).assign(4, [0, 1], group="g", generation=2)
    h.assign(3, [], group="g")
    h.at(2.0).nemesis("pause", clients=[3], role="member", group="g")  # starved 1.0 to 2.0
    h.at(3.0).nemesis("pause", nodes=["n1"])  # a broker's pause names no client
    h.at(4.0).nemesis("resume", nodes=["n1"])
    h.at(8.0).nemesis("resume", clients=[3], role="member", group="g")  # starved again from 8.0
    h.at(11.0).assign(3, [1], group="g", generation=3)
    h.assign(4, [0], group="g", generation=3)
    h.at(12.0).assign(5, [], group="g")
    h.at(13.0).nemesis("pause", clients=[5], role="member", group="g")  # 5 never starved: nobody holds two
    h.at(14.0).assign(3, [0, 1], group="g", generation=4)
    h.assign(4, [], group="g", generation=4)  # starved from 14.0 on
    h.at(16.0).nemesis("heal", clients_resumed=[5])  # 5 starved from the heal on
    _traffic(h, until=20.0, start=16.5, polling=(3, 4, 5))
    out = live(check, h)
    got = sorted((s["member"], s["start"], s["end"]) for s in out["starved_members"])
    assert got == [(3, 1.0, 2.0), (3, 8.0, 11.0), (4, 14.0, 19.5), (5, 16.0, 19.5)]


def test_a_member_ends_at_its_last_event_so_leaving_as_the_workload_stops_starves_nobody(check):
    # kafka4-group-protocol-starved-member: as the workload stopped, one member
    # revoked everything on leaving and the other took it all while its last
    # committed read hung for 5 s; the leaver counted as starved to the end.
    h = Timed()
    h.at(1.0).assign(4, [0], group="g", generation=2)
    h.assign(3, [1], group="g", generation=2)
    _traffic(h, until=10.0, start=1.5, polling=(3, 4))
    h.at(10.0).assign(3, [], group="g", generation=2)  # leaving: its last event
    h.at(10.4).assign(4, [0, 1], group="g", generation=3)
    h.add(4, "invoke", "committed", group="g", partitions=[0, 1])
    h.at(15.0).add(4, "info", "committed", error="exit status 0")
    h.add(7, "invoke", "committed", group="g", partitions=[0, 1], final=True)
    h.add(7, "ok", "committed", offsets=[{"partition": 0, "offset": 10}, {"partition": 1, "offset": 10}])
    out = live(check, h)
    assert out["starved_members"] == [] and out["starved_member_s"] == 0.0
    # A member starved until it stopped is an open stretch, ended at its last event.
    h = Timed()
    h.at(1.0).assign(4, [0, 1], group="g", generation=2)
    h.assign(3, [], group="g")
    _traffic(h, until=8.0, start=1.5, polling=(3, 4))
    for i in range(8):  # 3 stopped; 4 and the producer go on
        h.at(8.0 + 0.5 * i)
        h.send(0, 100 + i, i % 2, 100 + i)
        h.poll(4)
    (stretch,) = live(check, h)["starved_members"]
    assert stretch["member"] == 3 and stretch["open"] is True and stretch["end"] == pytest.approx(7.5, abs=0.01)


def test_fewer_partitions_than_members_starves_nobody(check):
    # One partition, two members: the idle one could not be given anything.
    h = Timed()
    h.at(1.0).assign(4, [0], group="g", generation=1)
    h.assign(3, [], group="g")
    _traffic(h, until=10.0, start=1.5)
    assert live(check, h)["starved_member_s"] == 0.0


def test_members_of_other_groups_and_plain_consumers_do_not_count(check):
    h = Timed()
    h.at(1.0).assign(4, [0, 1], group="a", generation=1)
    h.assign(3, [], group="b")
    h.assign(6, [])  # a plain consumer, no group
    _traffic(h, until=10.0, start=1.5)
    assert live(check, h)["starved_member_s"] == 0.0


def test_no_group_no_measure(check):
    h = Timed()
    _traffic(h, until=5.0)
    out = live(check, h)
    assert out["starved_member_s"] is None and out["starved_members"] == []


def test_the_expect_limit_judges_the_longest_stretch(check):
    h = Timed()
    h.at(1.0).assign(4, [0, 1], group="g", generation=2)
    h.assign(3, [], group="g")
    _traffic(h, until=15.0, start=1.5, polling=(3, 4))
    results = {"valid": True, "liveness": live(check, h), "anomalies": {}}
    met, misses = expectation({"max-starved-member-s": 10}, results)
    assert not met and misses == ["expected a group member starved at most 10 s, measured 13.5 s"]
    assert liveness_failed({"max-starved-member-s": 10}, results) == misses
    assert expectation({"max-starved-member-s": 20}, results) == (True, [])
