"""Which set each KRaft leader came from (core/history/elections.py), on
hand-made timelines of both KIP-966 runs."""

from __future__ import annotations

from core.history.elections import election_sentence, elections

S = 10**9


def part(t: float, leader, isr, elr=(), lke=()) -> dict:
    return {"time": int(t * S), "kind": "kraft-partition", "partition": 0, "leader": leader, "isr": list(isr),
            "elr": list(elr), "last_known_elr": list(lke)}


def broker(t: float, node: str, event: str, epoch: int) -> dict:
    return {"time": int(t * S), "kind": "kraft-broker", "node": node, "event": event, "epoch": epoch}


# Followers n1, n2 stopped, leader n3 then loses power and comes back.
WITH_ELR = [part(0, "n3", ["n3", "n1", "n2"]), part(9, "n3", ["n3"], elr=["n1", "n2"]),
            broker(12, "n1", "fenced", 18), broker(12, "n2", "fenced", 10),
            broker(17, "n3", "fenced", 16), part(17, None, [], elr=["n1", "n2"], lke=["n3"]),
            broker(25, "n1", "unfenced", 18), part(25, "n1", ["n1"], elr=["n2"], lke=["n3"]),
            broker(27, "n3", "registered", 144), part(31, "n1", ["n1", "n3", "n2"])]
WITHOUT_ELR = [part(0, "n3", ["n3", "n1", "n2"]), part(9, "n3", ["n3"]),
               broker(12, "n1", "fenced", 18), broker(12, "n2", "fenced", 10),
               broker(17, "n3", "fenced", 16), part(17, None, ["n3"]),
               broker(25, "n1", "unfenced", 18), broker(27, "n3", "registered", 144),
               broker(29, "n3", "unfenced", 144), part(29, "n3", ["n3"]), part(31, "n3", ["n3", "n1", "n2"])]


def test_a_leader_from_the_eligible_leader_replicas():
    (e,) = elections(WITH_ELR)
    assert (e["time"], e["leader"], e["source"], e["elr"], e["isr"], e["returned"]) == (
        25 * S, "n1", "elr", ["n1", "n2"], [], None)
    assert election_sentence(e) == ("25.0 s: n1 elected leader of partition 0 from the eligible leader replicas "
                                    "[n1, n2] (KIP-966), the ISR being [].")


def test_the_isr_s_last_member_back_from_its_restart():
    (e,) = elections(WITHOUT_ELR)
    assert (e["leader"], e["source"], e["returned"]) == ("n3", "isr", 27 * S)
    assert election_sentence(e) == (
        "29.0 s: n3 elected leader of partition 0 from the ISR [n3], its only member (no eligible leader "
        "replicas); it had been fenced and registered again at 27.0 s, so it leads with the log its restart left.")


def test_a_leader_outside_every_set_is_an_unclean_election():
    lines = [part(0, "n1", ["n1", "n2"]), part(5, None, ["n1"]), part(9, "n2", ["n2"])]
    (e,) = elections(lines)
    assert e["source"] == "other" and "an unclean election" in election_sentence(e)
