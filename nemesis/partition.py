"""Network partitions: the grudge shapes, and the `partition` fault.

A grudge maps a node to the nodes it must not hear from; infra.net applies
it with iptables on the nodes and heals it. The schedule draws a shape
(a partition mode) and a shuffle of the nodes; the shape makes the grudge:

- isolate-one, isolate-minority, isolate-majority: that many nodes cut off
  from the rest; halves: two halves; split-all: every node alone;
- majorities-ring: each node hears itself and its neighbours on a ring, a
  majority, and no two nodes hear the same majority (4 nodes or more: on 3
  it would cut nothing, and the draw gives isolate-one instead);
- bridge: two halves that only one node, the bridge, hears both of;
- isolate-leader, isolate-replicas, isolate-followers, isolate-out-of-sync,
  isolate-controller, isolate-group-coordinator, isolate-group-follower,
  isolate-txn-coordinator: the leader, the replicas, the followers or the
  out-of-sync replicas of a topic partition, the controller, the
  coordinator of the run's consumer group or one in-sync follower of the
  `__consumer_offsets` partition holding its commits, or the coordinator
  of its first transactional producer, as the system names them when the
  fault starts, cut off from every other node.

Three shapes cut one port, not whole nodes (infra.net.cut_ports), because
what they cut shares its node with what must stay connected:

- isolate-zookeeper (`--nemesis-targets zookeeper`): every broker cut off
  from ZooKeeper's client port on the ensemble's nodes; ZooKeeper's quorum
  and the control node still reach it. Verified when the brokers' probes of
  that port time out and the control node's still answer;
- split-kraft-controllers (`kraft-controllers`): each KRaft voter's
  controller port cut off from every other node, so the metadata quorum
  loses its majority while the brokers' port stays open. Verified when the
  voters' probes of each other's controller port time out and of each
  other's broker port answer;
- cut-clients (`clients`): the control node, where the producers and
  consumers run, cut off from the broker port of the leader of the drawn
  partition, while the brokers still reach it (and it reaches ZooKeeper):
  a zombie leader as the clients see it. Verified when the control node's
  probe of that port times out and the other brokers' answer.

With targets consumers and producers (shapes isolate-consumer and
isolate-producer) a partition cuts one client process off the network on
the control host instead (nemesis/clients.py).

Verified when every cut pair's TCP probe (a sample of at most MAX_PROBES
pairs) times out (and, for port cuts, the links that must stay answer), and
after healing when they all answer again.
"""

from __future__ import annotations

import random

from infra import net
from infra.nodes import parallel
from infra.system import ControllerQuorum
from nemesis import clients
from nemesis.fault import NETWORK, Context, Fault, FaultError, Step, how_words, natural, node_words, verdict
from nemesis.targets import (PARTITION_TARGETS, controller, followers_of, group_coordinator, group_follower,
                             kraft_controllers, leader_of, out_of_sync_of, replicas_of, txn_coordinator,
                             watched_group, watched_transactional_id, zookeeper)

MAX_PROBES = 12  # cut pairs probed per partition (all of them on small clusters)
PROBE_PORT = 22  # sshd answers on every node, whatever the system is doing
PARTITION_MODES = ("isolate-one", "halves", "majorities-ring", "bridge")  # drawn when targets are random
# The shape a --nemesis-targets asks of a partition; any other target draws one of PARTITION_MODES.
MODE_OF_TARGET = {"one": "isolate-one", "leaders": "isolate-leader", "replicas": "isolate-replicas",
                  "followers": "isolate-followers", "out-of-sync": "isolate-out-of-sync",
                  "controller": "isolate-controller", "group-coordinator": "isolate-group-coordinator",
                  "group-follower": "isolate-group-follower",
                  "txn-coordinator": "isolate-txn-coordinator",
                  "kraft-controllers": "split-kraft-controllers",
                  "zookeeper": "isolate-zookeeper", "clients": "cut-clients", "minority": "isolate-minority",
                  "majority": "isolate-majority", "all": "split-all",
                  **{target: shape for shape, target in clients.CUT_SHAPES.items()}}
# Shapes whose nodes are looked up when the fault starts (the seed's shuffle goes unused).
ROLE_SHAPES = ("isolate-leader", "isolate-replicas", "isolate-followers", "isolate-out-of-sync",
               "isolate-controller", "isolate-group-coordinator", "isolate-group-follower", "isolate-txn-coordinator",
               "split-kraft-controllers", "isolate-zookeeper", "cut-clients", *clients.CUT_SHAPES)
CONTROL = "control"  # the control node, in a port cut's probes
PORT_SHAPES = ("isolate-zookeeper", "split-kraft-controllers", "cut-clients")  # cut a port, not whole nodes


def draw(target: str, n_nodes: int, rng: random.Random) -> tuple[str, tuple[int, ...]]:
    """The schedule's draw: the partition mode, and a shuffle of the nodes for shapes that need one.
    A drawn shape that cuts nothing on so few nodes (majorities-ring on 3: each node's ring
    neighbours are all the others) becomes isolate-one, with the same draws of the seed."""
    mode = MODE_OF_TARGET.get(target) or rng.choice(PARTITION_MODES)
    picks = tuple(rng.sample(range(n_nodes), n_nodes))
    if mode in PARTITION_MODES and n_nodes > 1 and not grudge_for(mode, [str(i) for i in range(n_nodes)], picks):
        mode = "isolate-one"
    return mode, picks


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
    # A partition that cuts no pair took no effect: not verified (healing it, nothing to undo, is).
    ok = all((not r) if expect_cut else r for r in reached) and bool(pairs or not expect_cut)
    return {"ok": ok, "probes": {f"{a}->{b}": ("reached" if r else "cut") for (a, b), r in zip(pairs, reached)}}


def _port_of(ctx: Context, name: str) -> int:
    """The broker port clients reach a node on, from the system's bootstrap list."""
    brokers = clients.broker_addresses(ctx)
    if brokers:
        address = ctx.cluster.node(name).address
        for host, port in brokers:
            if host == address:
                return port
    raise FaultError(f"clients: no broker port known for {name}")


def port_cut(ctx: Context, step: Step) -> tuple[dict, dict[str, list[tuple[str, int]]], list, list]:
    """A port-cutting shape: (what the history records, the cuts for
    infra.net.cut_ports, the probes that must time out, the probes that must
    answer); a probe is (from: a node or CONTROL, to: a node, port)."""
    mode = step.mode
    address = {n.name: n.address for n in ctx.cluster.nodes}
    if mode == "isolate-zookeeper":
        zk = zookeeper(ctx)
        port = zk.options.client_port
        zk_nodes = sorted(n.name for n in zk.nodes())
        brokers = list(ctx.names)
        cuts = {z: [(address[b], port) for b in brokers] for z in zk_nodes}
        value = {"mode": mode, "zookeeper": True, "isolated": zk_nodes, "cut_from": brokers, "port": port}
        return (value, cuts, [(b, z, port) for b in brokers for z in zk_nodes],
                [(CONTROL, z, port) for z in zk_nodes])
    if mode == "split-kraft-controllers":
        voters = kraft_controllers(ctx)
        if len(voters) < 2:
            raise FaultError(f"kraft-controllers: the quorum is {voters[0]} alone: no link to cut")
        port = ctx.system.controller_port() if isinstance(ctx.system, ControllerQuorum) else 0
        cuts = {v: [(address[o], port) for o in ctx.names if o != v] for v in voters}
        value = {"mode": mode, "kraft_controllers": True, "isolated": voters, "port": port}
        broker_port = _port_of(ctx, voters[0])
        return (value, cuts, [(a, b, port) for a in voters for b in voters if a != b],
                [(a, b, broker_port) for a in voters for b in voters if a != b])
    if mode == "cut-clients":
        partition = step.extra.get("partition", 0)
        node = leader_of(ctx, partition)
        if not ctx.cluster.control_address:
            raise FaultError(f"clients: the {ctx.cluster.provider.name} provider does not say the control "
                             "node's address")
        port = _port_of(ctx, node)
        value = {"mode": mode, "clients_of": partition, "isolated": node, "port": port}
        cuts = {node: [(ctx.cluster.control_address, port)]}
        return (value, cuts, [(CONTROL, node, port)],
                [(b, node, port) for b in ctx.names if b != node])
    raise ValueError(f"not a port cut: {mode}")


def start(ctx: Context, step: Step) -> tuple[dict, dict]:
    mode = step.mode
    partition = step.extra.get("partition", 0)
    if mode in clients.CUT_SHAPES:
        return clients.start_cut(ctx, step)
    if mode in PORT_SHAPES:
        value, cuts, cut, still = port_cut(ctx, step)
        net.cut_ports(ctx.cluster, cuts)
        value["verified"] = probe_ports(ctx, cut, still, healed=False)
        return value, {"grudge": {}, "cut": cut, "still": still}
    if mode == "isolate-leader":
        node = leader_of(ctx, partition)
        grudge = net.isolate(ctx.cluster, [node])
        value = {"mode": mode, "leader_of": partition, "isolated": node}
    elif mode == "isolate-replicas":
        nodes = replicas_of(ctx, partition)
        grudge = net.isolate(ctx.cluster, nodes)
        value = {"mode": mode, "replicas_of": partition, "isolated": nodes}
    elif mode in ("isolate-followers", "isolate-out-of-sync"):
        nodes, how = (followers_of if mode == "isolate-followers" else out_of_sync_of)(ctx, partition)
        grudge = net.isolate(ctx.cluster, nodes)
        value = {"mode": mode, **how, "isolated": nodes}
    elif mode == "isolate-controller":
        node = controller(ctx)
        grudge = net.isolate(ctx.cluster, [node])
        value = {"mode": mode, "isolated": node}
    elif mode == "isolate-group-coordinator":
        group = watched_group(ctx)
        node = group_coordinator(ctx, group)
        grudge = net.isolate(ctx.cluster, [node])
        value = {"mode": mode, "coordinator_of": group, "isolated": node}
    elif mode == "isolate-group-follower":
        nodes, how = group_follower(ctx, watched_group(ctx), step.picks[0] if step.picks else 0)
        grudge = net.isolate(ctx.cluster, nodes)
        value = {"mode": mode, **how, "isolated": nodes[0]}
    elif mode == "isolate-txn-coordinator":
        transactional_id = watched_transactional_id(ctx)
        node = txn_coordinator(ctx, transactional_id)
        grudge = net.isolate(ctx.cluster, [node])
        value = {"mode": mode, "txn_coordinator_of": transactional_id, "isolated": node}
    else:
        grudge = grudge_for(mode, ctx.names, step.picks)
        value = {"mode": mode}
    value["grudge"] = grudge
    net.partition(ctx.cluster, grudge)
    value["verified"] = probe_cuts(ctx, grudge, expect_cut=True)
    return value, {"grudge": grudge}


def probe_ports(ctx: Context, cut: list, still: list, healed: bool) -> dict:
    """Probe a port cut: the links `cut` must time out (answer again once
    `healed`), the links `still` must answer throughout; a sample of at most
    MAX_PROBES of each."""
    nodes = {n.name: n for n in ctx.cluster.nodes}
    cut, still = sorted(cut)[:MAX_PROBES], sorted(still)[:MAX_PROBES]

    def probe(link):
        a, b, port = link
        if a == CONTROL:
            return net.control_can_reach(nodes[b], port=port, timeout=1.5)
        return net.can_reach(nodes[a], nodes[b], port=port, timeout=1.5)

    reached = parallel(probe, cut + still) if cut or still else []
    words = {f"{a}->{b}:{port}": ("reached" if r else "cut") for (a, b, port), r in zip(cut + still, reached)}
    ok = all(r == healed for r in reached[:len(cut)]) and all(reached[len(cut):])
    return {"ok": ok, "probes": {k: words[k] for k in (f"{a}->{b}:{p}" for a, b, p in cut)},
            "still": {k: words[k] for k in (f"{a}->{b}:{p}" for a, b, p in still)}}


def stop(ctx: Context, state: dict) -> dict:
    if "client_cut" in state:
        return clients.stop_cut(ctx, state)
    removed = net.heal(ctx.cluster)
    if "cut" in state:
        verified = probe_ports(ctx, state["cut"], state["still"], healed=True)
    else:
        verified = probe_cuts(ctx, state.get("grudge", {}), expect_cut=False)
    return {"healed": {k: v for k, v in removed.items() if v}, "verified": verified}


def sweep(ctx: Context) -> dict:
    """Every harness partition rule removed from every node: how many, where."""
    cuts = clients.sweep_cuts()
    try:
        removed = net.heal(ctx.cluster)
    except Exception as e:  # keep healing the rest
        return {"rules_error": str(e), **cuts}
    return {"rules_removed": {k: v for k, v in removed.items() if v}, **cuts}


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
    if value.get("mode") in clients.CUT_SHAPES or "gid" in value:
        return clients.describe_cut(value, stopping)
    v = value.get("verified") if isinstance(value.get("verified"), dict) else {}
    probes = v.get("probes") if isinstance(v.get("probes"), dict) else {}
    if stopping:
        healed = value.get("healed")
        if isinstance(healed, dict) and healed:
            rules = sum(n for n in healed.values() if isinstance(n, int))
            what = f"healed: {rules} rules removed on {node_words(healed)}"
        else:
            what = "healed" if "verified" in value else "healing"
        still = v.get("still") if isinstance(v.get("still"), dict) else {}
        links = list(probes.values()) + list(still.values())
        answered = sum(1 for x in links if x == "reached")
        words = (f"{answered} of {len(links)}" if answered < len(links) else f"{len(links)}") + " links answer again"
        return what, verdict(value, words)
    if "port" in value:
        return describe_port_cut(value, probes, v.get("still") if isinstance(v.get("still"), dict) else {})
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
    if how_words(value):
        detail.append(how_words(value))
    what += f" ({', '.join(map(str, detail))})" if detail else ""
    cut = sum(1 for x in probes.values() if x == "cut")
    words = f"{cut} links cut" if cut == len(probes) else f"{cut} of {len(probes)} links cut"
    return what, verdict(value, words)


def describe_port_cut(value: dict, probes: dict, still: dict) -> tuple[str, str]:
    """A port cut in words: who cannot reach which port of whom, and its probes."""
    mode, port = str(value.get("mode") or ""), value.get("port")
    isolated = node_words(value.get("isolated"))
    if mode == "isolate-zookeeper":
        what = (f"brokers {node_words(value.get('cut_from'))} cut off from ZooKeeper (port {port}) "
                f"on {isolated}")
    elif mode == "split-kraft-controllers":
        what = f"KRaft controllers {isolated} cut off from each other and the brokers (controller port {port})"
    elif mode == "cut-clients":
        what = f"the clients cut off from {isolated} (port {port})"
    else:
        what = f"{isolated} port {port} cut"
    what += f" ({', '.join(x for x in (mode, how_words(value)) if x)})"
    cut = sum(1 for x in probes.values() if x == "cut")
    words = f"{cut} links cut" if cut == len(probes) else f"{cut} of {len(probes)} links cut"
    if still:
        answered = sum(1 for x in still.values() if x == "reached")
        words += f"; {answered} of {len(still)} links that stay open answer"
    return what, verdict(value, words)


PARTITION = Fault(
    name="partition", start_action="start-partition", start=start, stop_action="stop-partition", stop=stop,
    verified_by="every cut pair's TCP probe times out; after healing, every pair answers",
    targets=PARTITION_TARGETS, draw=draw, sweep=sweep, sweep_stage=NETWORK, colour="#ffc9c9", label="partition",
    describe=describe)
