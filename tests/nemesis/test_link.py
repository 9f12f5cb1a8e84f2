"""Degraded links (nemesis.link): the draw of targets and settings, the
probe's sizes and bounds, the words of the report; and, on a real 3-node
local cluster (integration), each fault applied through its record, measured
by its own probe within 20% of what it set, healed and measured again, and
the sweep removing every trace."""

from __future__ import annotations

import math
import random

import pytest

from core.errors import UserError
from infra import net
from infra.nodes import parallel
from nemesis import link, schedule
from nemesis.fault import Context, FaultError, Step
from nemesis.registry import FAULTS
from nemesis.targets import NODE_TARGETS
from tests.infra.conftest import local_cluster


# ----------------------------------------------------------------------------
# draw, settings, words


def test_the_draw_gives_targets_then_a_setting_from_the_small_set():
    for fault, key, values in (("lossy-link", "loss", link.LOSSES), ("slow-link", "rate", link.RATES)):
        f = FAULTS[fault]
        assert f.targets == NODE_TARGETS  # every node target; a link is not the clients' side
        seen = set()
        for seed in range(40):
            mode, picks, settings = f.draw("minority", 5, random.Random(seed))
            assert mode == "minority" and len(picks) == 2 and all(0 <= i < 5 for i in picks)
            assert set(settings) == {key} and settings[key] in values
            seen.add(settings[key])
            assert f.draw("minority", 5, random.Random(seed)) == (mode, picks, settings)  # the seed decides
        assert seen == set(values)


def test_the_schedule_keeps_the_drawn_setting_and_a_written_schedule_states_it():
    steps = schedule.plan(("lossy-link", "slow-link"), "one", 3, 5.0, 60.0, seed=7)
    starts = [s for s in steps if s.action == "start"]
    assert starts and all(set(s.extra) == {link.SETTING_OF[s.fault]} for s in starts)
    assert schedule.plan(("lossy-link", "slow-link"), "one", 3, 5.0, 60.0, seed=7) == steps
    # run.json's records give the same steps back, settings included.
    assert schedule.from_records(schedule.to_records(steps), 3, 1) == [
        Step(round(s.delay, 3), s.action, s.fault, s.mode, s.picks, s.extra) for s in steps]

    def step(**kw):
        return {"delay": 1, "action": "start", "fault": "lossy-link", "mode": "one", "picks": [0], **kw}

    assert schedule.from_records([step(loss=0.25)], 3, 1)[0].extra == {"loss": 0.25}
    assert schedule.from_records([step(fault="slow-link", rate="500kbit")], 3, 1)[0].extra == {"rate": "500kbit"}
    for bad, words in ((step(loss=0), "schedule step 1: loss 0: expected a fraction"),
                       (step(loss=True), "loss True"),
                       (step(fault="slow-link", rate="fast"), "schedule step 1: rate 'fast': expected a rate"),
                       (step(fault="slow-link", rate=10), "rate 10"),
                       (step(fault="kill", loss=0.1), "loss is a setting of lossy-link, not of kill"),
                       (step(rate="1mbit"), "rate is a setting of slow-link, not of lossy-link")):
        with pytest.raises(UserError) as e:
            schedule.from_records([bad], 3, 1)
        assert words in str(e.value) and "\n" not in str(e.value)


def test_the_loss_probe_sends_enough_packets_for_its_bound():
    for loss in link.LOSSES:
        n = link.loss_packets(loss)
        sd = math.sqrt(loss * (1 - loss) / n)  # of the measured fraction
        assert link.TOLERANCE * loss >= link.Z * sd * 0.999
        assert 400 <= n <= 5000
    assert link.loss_packets(0.5) == 400  # the floor
    assert link.loss_packets(1.0) == link.HEALED_PACKETS


def test_within_bounds():
    assert link.loss_within({"loss": 0.33}, 0.3) and link.loss_within({"loss": 0.25}, 0.3)
    assert not link.loss_within({"loss": 0.37}, 0.3) and not link.loss_within({"error": "x"}, 0.3)
    assert link.rate_within({"mbit": 0.95}, "1mbit") and link.rate_within({"mbit": 11.9}, "10mbit")
    assert not link.rate_within({"mbit": 0.7}, "1mbit") and not link.rate_within({"mbit": None}, "1mbit")
    assert link.rate_bits("500kbit") == 5e5 and link.rate_probe_bytes("1mbit") == 187500
    # 3x the transfer at the set rate, and 5 s: 1.5 s at 1mbit and 10mbit, 64 KB (65.5 s) at 8kbit
    assert link.rate_probe_deadline("1mbit") == link.rate_probe_deadline("10mbit") == 9.5
    assert link.rate_probe_deadline("8kbit") == 201.6
    with pytest.raises(FaultError):
        link.check_setting("rate", "1 mbit", "here")


def test_links_with_a_target_at_one_end_and_the_probed_sample():
    names = ["n1", "n2", "n3", "n4"]
    assert link.links_of(names, ["n2"]) == [("n1", "n2"), ("n2", "n1"), ("n2", "n3"), ("n2", "n4"),
                                           ("n3", "n2"), ("n4", "n2")]
    assert len(link.links_of(names, ["n1", "n2"])) == 10  # n1<->n2 once each way, not twice
    assert link.probed_links(names, ["n2", "n4"]) == [("n2", "n1"), ("n1", "n2"), ("n4", "n1"), ("n1", "n4")]
    assert link.probed_links(["n1", "n2"], ["n1", "n2"]) == [("n1", "n2"), ("n2", "n1")]
    assert len(link.probed_links(names, names)) <= link.MAX_PROBES


def test_words_of_the_events():
    start = {"nodes": ["n2"], "mode": "one", "loss": 0.3, "rules": {"n1": 1, "n2": 2, "n3": 1},
             "verified": {"ok": True, "loss": {"n2->n1": {"sent": 636, "received": 449, "loss": 0.294},
                                               "n1->n2": {"sent": 636, "received": 440, "loss": 0.3082}}}}
    assert link.describe(start, False) == (
        "n2, 30.0% of packets dropped on its links (both ways)",
        "verified: measured loss n2->n1 29.4% of 636, n1->n2 30.8% of 636 (set 30.0%, within 20%)")
    stop = {"nodes": ["n2"], "healed": {"n1": 1, "n2": 2, "n3": 1},
            "verified": {"ok": False, "loss": {"n2->n1": {"sent": 400, "error": "error=no-result"}}}}
    assert link.describe(stop, True) == (
        "n2, links healed (on n1 n2 n3)",
        "NOT verified: loss back to at most 2.0%: n2->n1 failed (error=no-result)")
    slow = {"nodes": ["n1", "n3"], "leader_of": 0, "rate": "1mbit", "limited": {"n1": 2},
            "verified": {"ok": True, "rate": {"n1->n2": {"bytes": 187000, "seconds": 1.57, "mbit": 0.953}}}}
    assert link.describe(slow, False) == (
        "n1 n3 (the leader of partition 0), links limited to 1mbit each way",
        "verified: measured n1->n2 0.953 mbit/s (set 1mbit, within 20%)")
    healed = {"nodes": ["n1"], "rate": "1mbit", "healed": {},
              "verified": {"ok": True, "rate": {"n1->n2": {"bytes": 187000, "seconds": 0.01, "mbit": 149.6}}}}
    assert link.describe(healed, True) == (
        "n1, links healed", "verified: no limit (at least 2x 1mbit): n1->n2 149.6 mbit/s")
    assert link.describe({"mode": "one"}, False) == ("targets: one", "")  # an invoke
    assert link.describe({"nodes": ["n1"]}, True) == ("n1, healing its links", "")  # a stop's invoke
    assert link.describe("junk", True) == ("", "")


# ----------------------------------------------------------------------------
# integration: a real local cluster


@pytest.fixture(scope="module")
def cluster3():
    yield from local_cluster(3)


def traces(cluster) -> dict[str, tuple[int, bool]]:
    """node -> (rules in the harness's link chain, whether a link qdisc is there)."""
    def one(node):
        out = node.remote.run(f"{net.IPT} -S {net.LINK_CHAIN} 2>/dev/null | grep -c '^-A'; "
                              f"tc qdisc show | grep -c '^qdisc htb {net.LINK_HANDLE}: '", check=False).stdout
        rules, qdiscs = (int(x) for x in out.split()[:2])
        return rules, qdiscs > 0
    return dict(zip(cluster.names, parallel(one, cluster.nodes)))


@pytest.mark.integration
def test_lossy_link_measures_the_loss_it_set_and_heals(cluster3):
    ctx = Context(cluster3, system=None, topic="t")
    value, state = FAULTS["lossy-link"].start(ctx, Step(0, "start", "lossy-link", "one", (1,), {"loss": 0.3}))
    try:
        assert value["nodes"] == ["n2"] and value["loss"] == 0.3
        assert value["rules"] == {"n1": 1, "n2": 2, "n3": 1}  # on the receiving side of each direction
        measured = value["verified"]["loss"]
        assert set(measured) == {"n2->n1", "n1->n2"}
        for m in measured.values():
            assert m["sent"] == link.loss_packets(0.3) and abs(m["loss"] - 0.3) <= 0.06, measured
        assert value["verified"]["ok"]
        assert traces(cluster3) == {"n1": (1, False), "n2": (2, False), "n3": (1, False)}
        # The control node's traffic is never dropped: 20 commands in a row all answer.
        assert all(cluster3.node("n2").remote.run("echo ok").stdout == "ok\n" for _ in range(20))
    finally:
        healed = FAULTS["lossy-link"].stop(ctx, state)
    assert healed["healed"] == {"n1": 1, "n2": 2, "n3": 1}
    assert healed["verified"]["ok"] and all(m["loss"] <= link.HEALED_LOSS for m in healed["verified"]["loss"].values())
    assert traces(cluster3) == {n: (0, False) for n in cluster3.names}
    print("lossy-link", value["verified"], healed["verified"])


@pytest.mark.integration
@pytest.mark.parametrize("rate", ["1mbit", "10mbit"])
def test_slow_link_measures_the_rate_it_set_and_heals(cluster3, rate):
    ctx = Context(cluster3, system=None, topic="t")
    value, state = FAULTS["slow-link"].start(ctx, Step(0, "start", "slow-link", "one", (0,), {"rate": rate}))
    try:
        assert value["nodes"] == ["n1"] and value["limited"] == {"n1": 2, "n2": 1, "n3": 1}
        measured = value["verified"]["rate"]
        assert set(measured) == {"n1->n2", "n2->n1"}
        for m in measured.values():
            assert abs(m["mbit"] * 1e6 - link.rate_bits(rate)) <= 0.2 * link.rate_bits(rate), measured
        assert value["verified"]["ok"]
        assert traces(cluster3) == {n: (0, True) for n in cluster3.names}
    finally:
        healed = FAULTS["slow-link"].stop(ctx, state)
    assert healed["healed"] == {n: 1 for n in cluster3.names}
    assert healed["verified"]["ok"]
    assert all(m["mbit"] >= 2 * link.rate_bits(rate) / 1e6 for m in healed["verified"]["rate"].values())
    assert traces(cluster3) == {n: (0, False) for n in cluster3.names}
    print("slow-link", rate, value["verified"], healed["verified"])


@pytest.mark.integration
def test_a_slow_link_probed_across_a_lossy_link_is_cut_off_and_not_verified(cluster3):
    """Faults crossing: n2's links drop half their packets, then n1's are slowed;
    the rate probe n1 <-> n2 crawls (TCP under loss). It is cut off at its
    deadline, an error that names it, rather than held until a minute passes."""
    ctx = Context(cluster3, system=None, topic="t")
    _, loss_state = FAULTS["lossy-link"].start(ctx, Step(0, "start", "lossy-link", "one", (1,), {"loss": 0.5}))
    rate_state = None
    try:
        value, rate_state = FAULTS["slow-link"].start(ctx, Step(0, "start", "slow-link", "one", (0,), {"rate": "1mbit"}))
        measured = value["verified"]["rate"]
        assert set(measured) == {"n1->n2", "n2->n1"} and not value["verified"]["ok"], measured
        cut = [m for m in measured.values() if "cut off after" in m.get("error", "")]
        assert cut, measured
        for m in cut:
            assert m["error"].startswith(f"cut off after {link.rate_probe_deadline('1mbit'):g} s")
            assert m["bytes"] < link.rate_probe_bytes("1mbit") and "mbit" not in m
        assert "NOT verified" in link.describe(value, False)[1]
        print("slow-link across a lossy link", measured)
    finally:
        FAULTS["lossy-link"].stop(ctx, loss_state)
        if rate_state is not None:
            FAULTS["slow-link"].stop(ctx, rate_state)
    assert traces(cluster3) == {n: (0, False) for n in cluster3.names}


@pytest.mark.integration
def test_the_sweep_removes_both_whatever_the_schedule_did(cluster3):
    ctx = Context(cluster3, system=None, topic="t")
    link.apply_loss(ctx, ["n1", "n3"], 0.5)
    link.apply_rate(ctx, ["n3"], "1mbit")
    link.apply_rate(ctx, ["n3"], "1mbit")  # twice: replaced, not stacked
    # n1 or n3 at one end of every link: each node drops from both others; each sends slowly to n3 or from it.
    assert traces(cluster3) == {n: (2, True) for n in cluster3.names}
    done = FAULTS["slow-link"].sweep(ctx)
    assert done == {"links_healed": {n: {"rules": 2, "qdiscs": 1} for n in cluster3.names}}
    assert traces(cluster3) == {n: (0, False) for n in cluster3.names}
    assert FAULTS["lossy-link"].sweep(ctx) == {}  # nothing left: a second sweep finds nothing
