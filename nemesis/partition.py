"""Network partitions: the grudge shapes, and the `partition` fault.

A grudge maps a node to the nodes it must not hear from; infra.net applies
it with iptables on the nodes and heals it. The schedule draws a shape
(a partition mode) and a shuffle of the nodes; the shape makes the grudge:

- isolate-one, isolate-minority, isolate-majority: that many nodes cut off
  from the rest; halves: two halves; split-all: every node alone;
- majorities-ring: each node hears itself and its neighbours on a ring, a
  majority, and no two nodes hear the same majority;
- bridge: two halves that only one node, the bridge, hears both of;
- isolate-leader, isolate-replicas, isolate-controller: the leader or the
  replicas of a topic partition, or the controller, as the system names
  them when the fault starts, cut off from every other node.

Verified when every cut pair's TCP probe (a sample of at most MAX_PROBES
pairs) times out, and after healing when they answer again.
"""

from __future__ import annotations

import random

from infra import net
from infra.nodes import parallel
from nemesis.fault import NETWORK, Context, Fault, Step, natural, node_words, verdict
from nemesis.targets import TARGETS, controller, leader_of, replicas_of

MAX_PROBES = 12  # cut pairs probed per partition (all of them on small clusters)
PROBE_PORT = 22  # sshd answers on every node, whatever the system is doing
PARTITION_MODES = ("isolate-one", "halves", "majorities-ring", "bridge")  # drawn when targets are random
# The shape a --nemesis-targets asks of a partition; any other target draws one of PARTITION_MODES.
MODE_OF_TARGET = {"one": "isolate-one", "leaders": "isolate-leader", "replicas": "isolate-replicas",
                  "controller": "isolate-controller", "minority": "isolate-minority",
                  "majority": "isolate-majority", "all": "split-all"}


def draw(target: str, n_nodes: int, rng: random.Random) -> tuple[str, tuple[int, ...]]:
    """The schedule's draw: the partition mode, and a shuffle of the nodes for shapes that need one."""
    mode = MODE_OF_TARGET.get(target) or rng.choice(PARTITION_MODES)
    return mode, tuple(rng.sample(range(n_nodes), n_nodes))


def grudge_for(mode: str, names: list[str], picks: tuple[int, ...]) -> dict[str, list[str]]:
    """The grudge (node -> nodes it must not hear from) of a partition mode.

    `names` is the sorted node list, `picks` a shuffle of its indexes.
    """
    order = [names[i] for i in picks]
    n = len(order)

    def components(*parts):
        return net.grudge_from_components(list(parts))

    if mode in ("isolate-one",):
        return components(order[:1], order[1:])
    if mode == "isolate-minority":
        k = max(1, (n - 1) // 2)
        return components(order[:k], order[k:])
    if mode == "isolate-majority":
        k = n // 2 + 1
        return components(order[:k], order[k:])
    if mode == "halves":
        return components(order[: n // 2], order[n // 2:])
    if mode == "split-all":
        return components(*[[x] for x in order])
    if mode == "majorities-ring":
        # Each node sees itself and its neighbours on a ring, a majority in all,
        # and no two nodes see the same majority.
        reach = (n // 2 + 1) // 2
        g = {}
        for i, x in enumerate(order):
            seen = {order[(i + d) % n] for d in range(-reach, reach + 1)}
            cut = sorted(y for y in order if y not in seen)
            if cut:
                g[x] = cut
        return g
    if mode == "bridge":
        # Two halves that only one node, the bridge, can talk to both of.
        bridge, rest = order[0], order[1:]
        half = len(rest) // 2
        g = components(rest[:half], rest[half:])
        g.pop(bridge, None)
        return {k: v for k, v in g.items() if v}
    raise ValueError(f"unknown partition mode {mode}")


def probe_cuts(ctx: Context, grudge: dict[str, list[str]], expect_cut: bool) -> dict:
    """Probe (a sample of) the cut pairs; the verdict and what each probe saw."""
    pairs = sorted({(a, b) for a, bs in grudge.items() for b in bs})[:MAX_PROBES]
    nodes = {n.name: n for n in ctx.cluster.nodes}

    def probe(pair):
        a, b = pair
        return net.can_reach(nodes[a], nodes[b], port=PROBE_PORT, timeout=1.5)

    reached = parallel(probe, pairs) if pairs else []
    ok = all((not r) if expect_cut else r for r in reached)
    return {"ok": ok, "probes": {f"{a}->{b}": ("reached" if r else "cut") for (a, b), r in zip(pairs, reached)}}


def start(ctx: Context, step: Step) -> tuple[dict, dict]:
    mode = step.mode
    if mode == "isolate-leader":
        node = leader_of(ctx, step.extra.get("partition", 0))
        grudge = net.isolate(ctx.cluster, [node])
        value = {"mode": mode, "leader_of": step.extra.get("partition", 0), "isolated": node}
    elif mode == "isolate-replicas":
        nodes = replicas_of(ctx, step.extra.get("partition", 0))
        grudge = net.isolate(ctx.cluster, nodes)
        value = {"mode": mode, "replicas_of": step.extra.get("partition", 0), "isolated": nodes}
    elif mode == "isolate-controller":
        node = controller(ctx)
        grudge = net.isolate(ctx.cluster, [node])
        value = {"mode": mode, "isolated": node}
    else:
        grudge = grudge_for(mode, ctx.names, step.picks)
        value = {"mode": mode}
    value["grudge"] = grudge
    net.partition(ctx.cluster, grudge)
    value["verified"] = probe_cuts(ctx, grudge, expect_cut=True)
    return value, {"grudge": grudge}


def stop(ctx: Context, state: dict) -> dict:
    removed = net.heal(ctx.cluster)
    grudge = state.get("grudge", {})
    verified = probe_cuts(ctx, grudge, expect_cut=False)
    return {"healed": {k: v for k, v in removed.items() if v}, "verified": verified}


def sweep(ctx: Context) -> dict:
    """Every harness partition rule removed from every node: how many, where."""
    try:
        removed = net.heal(ctx.cluster)
    except Exception as e:  # keep healing the rest
        return {"rules_error": str(e)}
    return {"rules_removed": {k: v for k, v in removed.items() if v}}


def components(grudge: dict) -> list[list[str]] | None:
    """The groups of nodes that hear each other and nobody else, when the
    grudge cuts the cluster into such groups (every shape but majorities-ring,
    and bridge without its bridge); None when it does not."""
    nodes = sorted({str(n) for n in grudge} | {str(n) for cut in grudge.values() for n in cut}, key=natural)
    hears = {n: frozenset(nodes) - {str(x) for x in grudge.get(n, [])} for n in nodes}
    if any(hears[m] != hears[n] for n in nodes for m in hears[n]):
        return None
    groups = {tuple(sorted(h, key=natural)) for h in hears.values()}
    return [list(g) for g in sorted(groups, key=lambda g: natural(g[0]))]


def describe(value: dict, stopping: bool) -> tuple[str, str]:
    """`n1 n5 | n2 n3 n4 (halves)`, `verified: 12 links cut`; its end:
    `healed: 22 rules removed on n1 ...`, `verified: 12 links answer again`."""
    if not isinstance(value, dict):
        return "", ""
    v = value.get("verified") if isinstance(value.get("verified"), dict) else {}
    probes = v.get("probes") if isinstance(v.get("probes"), dict) else {}
    if stopping:
        healed = value.get("healed")
        if isinstance(healed, dict) and healed:
            rules = sum(n for n in healed.values() if isinstance(n, int))
            what = f"healed: {rules} rules removed on {node_words(healed)}"
        else:
            what = "healed" if "verified" in value else "healing"
        answered = sum(1 for x in probes.values() if x == "reached")
        words = f"{answered} of {len(probes)} links answer again" if answered < len(probes) else \
            f"{len(probes)} links answer again"
        return what, verdict(value, words)
    grudge = value.get("grudge")
    mode = str(value.get("mode") or "")
    if not isinstance(grudge, dict):
        return (f"shape: {mode}" if mode else ""), ""
    groups = components(grudge)
    if groups is not None:
        what = " | ".join(node_words(g) for g in groups)
        if mode == "bridge":
            what += ", and a bridge node that hears both sides"
    else:  # who cannot hear whom, node by node
        what = "; ".join(f"{n} cut from {node_words(cut)}"
                         for n, cut in sorted(grudge.items(), key=lambda x: natural(x[0])))
    detail = [mode] if mode else []
    if "isolated" in value:
        detail.append(f"isolated {node_words(value['isolated'])}")
    if "leader_of" in value:
        detail.append(f"the leader of partition {value['leader_of']}")
    if "replicas_of" in value:
        detail.append(f"the replicas of partition {value['replicas_of']}")
    what += f" ({', '.join(map(str, detail))})" if detail else ""
    cut = sum(1 for x in probes.values() if x == "cut")
    words = f"{cut} links cut" if cut == len(probes) else f"{cut} of {len(probes)} links cut"
    return what, verdict(value, words)


PARTITION = Fault(
    name="partition", start_action="start-partition", start=start, stop_action="stop-partition", stop=stop,
    verified_by="every cut pair's TCP probe times out; after healing, every pair answers",
    targets=TARGETS, draw=draw, sweep=sweep, sweep_stage=NETWORK, colour="#ffc9c9", label="partition",
    describe=describe)
