"""Network faults on nodes: partitions with iptables, healing, and probes.

A grudge maps a node to the nodes it must not hear from:

    partition(cluster, {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]})

For every `a: [b, ...]` the harness drops, on `a`, what comes from `b`
(INPUT) and, on `b`, what goes to `a` (OUTPUT), so the cut holds whichever
side's table is consulted, and it deletes the conntrack entries between them.
The DROP rules sit first in their chains and match every packet, not just new
connections, so established TCP connections are cut too: their segments are
dropped, they stall and eventually time out, as in a real partition.

A port cut is narrower: it cuts one TCP port of a node off from given
addresses (a node's, or the control node's), leaving every other port:

    cut_ports(cluster, {"n1": [("10.213.0.1", 9092)]})

drops, on n1, what comes from 10.213.0.1 to port 9092 (INPUT) and what n1
sends back from that port (OUTPUT). It serves services that share a node
with others (ZooKeeper beside a broker; a KRaft controller's port) and the
one cut of the control node's traffic the harness makes: the clients cut
off from a broker, whose SSH (port 22) stays open, so the nemesis still
reaches the node.

Every rule carries the comment `harness-partition`; `heal` deletes exactly
those rules and nothing else. Grudges never touch traffic with the control
node (clients and the nemesis run there); only a port cut naming its
address does. The same commands run over SSH on local namespaces and on VMs.

Degraded links (nemesis.link applies them) leave traces of their own on a
node, never mixed with the partition rules: the iptables chain `LINK_CHAIN`
(its packet-loss rules) with one jump into it from INPUT, and root qdiscs
of handle `LINK_HANDLE` (the bandwidth limits). `heal_links_node` removes
exactly those; the ssh provider's teardown calls it, since a VM outlives a
killed run (a namespace or a container takes them with it).
"""

from __future__ import annotations

import shlex
import socket

from core.errors import UserError
from infra.nodes import Cluster, Node, parallel
from infra.state import NODE_RULE_TAG

IPT = "iptables -w"
LINK_CHAIN = "HARNESS-LINK"  # a node's chain of lossy-link rules (nemesis.link)
LINK_JUMP = f"-m comment --comment harness-link -j {LINK_CHAIN}"  # INPUT's jump into it
LINK_HANDLE = "7a1"  # the handle of a node's bandwidth-limiting root qdiscs (nemesis.link)


def _check_grudge(cluster: Cluster, grudge: dict[str, list[str]]) -> None:
    names = set(cluster.names)
    for a, bs in grudge.items():
        if a not in names:
            raise UserError(f"grudge names unknown node {a!r} (nodes: {', '.join(cluster.names)})")
        for b in bs:
            if b not in names:
                raise UserError(f"grudge names unknown node {b!r} (nodes: {', '.join(cluster.names)})")
            if b == a:
                raise UserError(f"grudge makes {a} drop itself")


def _rule(chain: str, direction: str, address: str) -> str:
    return f"{chain} {direction} {address} -m comment --comment {NODE_RULE_TAG} -j DROP"


def partition(cluster: Cluster, grudge: dict[str, list[str]]) -> None:
    """Applies the grudge on every node it involves (in parallel); idempotent."""
    _check_grudge(cluster, grudge)
    rules: dict[str, list[str]] = {}
    flows: dict[str, set[str]] = {}
    for a, bs in grudge.items():
        for b in bs:
            addr_a, addr_b = cluster.node(a).address, cluster.node(b).address
            rules.setdefault(a, []).append(_rule("INPUT", "-s", addr_b))
            rules.setdefault(b, []).append(_rule("OUTPUT", "-d", addr_a))
            flows.setdefault(a, set()).add(addr_b)
            flows.setdefault(b, set()).add(addr_a)

    def apply(name: str) -> None:
        lines = []
        for r in dict.fromkeys(rules[name]):
            chain, spec = r.split(" ", 1)
            lines.append(f"{IPT} -C {chain} {spec} 2>/dev/null || {IPT} -I {chain} 1 {spec}")
        for peer in sorted(flows.get(name, ())):
            # conntrack exits 1 when nothing matched; that is fine.
            lines.append(f"conntrack -D -s {peer} >/dev/null 2>&1; conntrack -D -d {peer} >/dev/null 2>&1; true")
        cluster.node(name).remote.run(" && ".join(lines), timeout=30)

    parallel(apply, sorted(rules))


def _port_rule(chain: str, address: str, port: int) -> str:
    # INPUT: what `address` sends to the port; OUTPUT: what the port answers to `address`.
    direction, which = ("-s", "--dport") if chain == "INPUT" else ("-d", "--sport")
    return (f"{chain} {direction} {address} -p tcp {which} {int(port)} "
            f"-m comment --comment {NODE_RULE_TAG} -j DROP")


def cut_ports(cluster: Cluster, cuts: dict[str, list[tuple[str, int]]]) -> None:
    """On each node named, cuts its TCP `port` off from `address`, for every
    (address, port) listed (in parallel); idempotent. Healed by `heal`."""
    for name, pairs in cuts.items():
        cluster.node(name)  # a UserError for an unknown node
        for address, port in pairs:
            if not 1 <= int(port) <= 65535 or not address or any(c.isspace() for c in str(address)):
                raise UserError(f"port cut on {name}: bad address {address!r} or port {port!r}")

    def apply(name: str) -> None:
        lines = []
        for address, port in dict.fromkeys(cuts[name]):
            for chain in ("INPUT", "OUTPUT"):
                spec = _port_rule(chain, address, port).split(" ", 1)[1]
                lines.append(f"{IPT} -C {chain} {spec} 2>/dev/null || {IPT} -I {chain} 1 {spec}")
        if lines:
            cluster.node(name).remote.run(" && ".join(lines), timeout=30)

    parallel(apply, sorted(n for n, pairs in cuts.items() if pairs))


def heal_node(node: Node) -> int:
    """Deletes the harness's partition rules on one node; returns how many."""
    # `iptables -S` prints each rule as the arguments that made it; -A -> -D deletes it.
    script = (f"{IPT} -S | grep -F -- '--comment {NODE_RULE_TAG} ' | sed 's/^-A /-D /' | "
              f"{{ n=0; while read -r rule; do {IPT} $rule && n=$((n+1)); done; echo $n; }}")
    res = node.remote.run(script, timeout=30)
    try:
        return int(res.stdout.split()[-1])
    except (ValueError, IndexError):
        return 0


def heal_links_node(node: Node, rules: bool = True, qdiscs: bool = True) -> dict[str, int]:
    """Removes the degraded links' traces on one node, whatever made them: the
    jump into LINK_CHAIN, the chain and its rules (`rules`), and every root
    qdisc of handle LINK_HANDLE (`qdiscs`); how many rules and qdiscs it removed."""
    script = "r=0; q=0; "
    if rules:
        script += (f"r=$({IPT} -S {LINK_CHAIN} 2>/dev/null | grep -c '^-A'); "
                   f"while {IPT} -D INPUT {LINK_JUMP} 2>/dev/null; do :; done; "
                   f"{IPT} -F {LINK_CHAIN} 2>/dev/null; {IPT} -X {LINK_CHAIN} 2>/dev/null; ")
    if qdiscs:
        # Every interface, not just the one of the node's address: nothing of ours stays anywhere.
        script += (f"for d in $(ls /sys/class/net); do "
                   f"if tc qdisc show dev \"$d\" root 2>/dev/null | grep -q '^qdisc htb {LINK_HANDLE}: '; then "
                   f"tc qdisc del dev \"$d\" root && q=$((q+1)); fi; done; ")
    out = node.remote.run(script + 'echo "rules=$r qdiscs=$q"', timeout=30).stdout.split()
    fields = dict(x.split("=", 1) for x in out if "=" in x)
    return {k: int(fields.get(k, 0) or 0) for k in ("rules", "qdiscs")}


def heal(cluster: Cluster) -> dict[str, int]:
    """Removes every harness partition rule on every node: node -> rules removed."""
    counts = parallel(heal_node, cluster.nodes)
    return dict(zip(cluster.names, counts))


def rules_in_force_node(node: Node) -> list[str]:
    """The harness's partition rules on one node, as `iptables -S` lines."""
    out = node.remote.run(f"{IPT} -S", timeout=30).stdout
    return [line for line in out.splitlines() if f"--comment {NODE_RULE_TAG} " in line]


def rules_in_force(cluster: Cluster) -> dict[str, list[str]]:
    """The harness's partition rules on each node, as `iptables -S` lines."""
    return dict(zip(cluster.names, parallel(rules_in_force_node, cluster.nodes)))


def can_reach(node_a: Node, node_b: Node | str, port: int = 22, timeout: float = 2.0) -> bool:
    """Whether a TCP connection from node_a to node_b:port gets an answer.

    A refused connection counts as reachable (the host answered); only
    silence (a timeout) or a network error counts as unreachable.
    """
    addr = node_b.address if isinstance(node_b, Node) else node_b
    script = (f"timeout {timeout:g} bash -c {shlex.quote(f'exec 3<>/dev/tcp/{addr}/{int(port)}')} 2>&1; "
              f"echo \"rc=$?\"")
    out = node_a.remote.run(script, timeout=timeout + 10).stdout
    if out.strip().endswith("rc=0"):
        return True
    return "refused" in out.lower()


def control_can_reach(node: Node, port: int = 22, timeout: float = 2.0) -> bool:
    """Whether this (control) machine gets an answer from node:port."""
    try:
        with socket.create_connection((node.address, port), timeout=timeout):
            return True
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def isolate(cluster: Cluster, names: list[str]) -> dict[str, list[str]]:
    """The grudge that cuts `names` off from every other node (both ways)."""
    inside = set(names)
    for n in inside:
        cluster.node(n)
    outside = [n for n in cluster.names if n not in inside]
    return grudge_from_components([sorted(inside), outside])


def grudge_from_components(components: list[list[str]]) -> dict[str, list[str]]:
    """The grudge for a partition into components: each node drops every
    other component (sorted, so that equal partitions record equal grudges)."""
    grudge: dict[str, list[str]] = {}
    for i, comp in enumerate(components):
        others = sorted(n for j, c in enumerate(components) if j != i for n in c)
        for n in comp:
            if others:
                grudge[n] = list(others)
    return grudge
