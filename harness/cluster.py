"""Bring a cluster up, look at it, take it down: `harness cluster up|status|down`.

    harness cluster up                      # 5 local nodes + 3-node ZooKeeper
    harness cluster up --nodes 3 --zk-nodes 1
    harness cluster up --provider ssh --nodes-file nodes.txt --ssh-key ~/.ssh/id_ed25519
    harness cluster status [--cluster c0]
    harness cluster down [--cluster c0]

`up` prints each node's address and the ssh command that reaches it, and
leaves the cluster running for you to poke at. A failed `up` removes what
it had built. `harness clean` removes every cluster, also half-built ones.
"""

from __future__ import annotations

import json
import signal
import time

from core.errors import UserError
from infra import net
from infra import state as st
from infra.clean import find_cluster_ids
from infra.cluster import add_provider_arguments, load_cluster, options_from_args, provider_named, provision, validate_options
from infra.hostops import is_alive
from infra.remote import RemoteError
from infra.zookeeper import ZooKeeper, ZooKeeperOptions


def configure(parser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION")
    up = sub.add_parser("up", help="bring a cluster (and ZooKeeper) up and leave it running")
    add_provider_arguments(up)
    up.add_argument("--zk-nodes", type=int, default=3,
                    help="ZooKeeper ensemble size on the first nodes: 3 (default), 1, or 0 for none")
    up.add_argument("--zk-port", type=int, default=2181, help="ZooKeeper client port (default 2181)")
    up.add_argument("--json", action="store_true", help="print the cluster as JSON")
    status = sub.add_parser("status", help="show clusters: nodes, daemons, partitions, ZooKeeper")
    status.add_argument("--cluster", dest="cluster_id", help="only this cluster (c<N>)")
    down = sub.add_parser("down", help="stop everything on a cluster and remove it")
    down.add_argument("--cluster", dest="cluster_id", help="the cluster (c<N>); needed when several are up")


def run(args) -> int:
    action = getattr(args, "cluster_command", None)
    if action == "up":
        return _up(args)
    if action == "status":
        return _status(args)
    if action == "down":
        return _down(args)
    raise UserError("harness cluster: say up, status or down")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _up(args) -> int:
    options = options_from_args(args)
    validate_options(options)
    if args.zk_nodes < 0:
        raise UserError(f"--zk-nodes must be 0 or more, not {args.zk_nodes}")
    if provider_named(options.provider).makes_nodes and args.zk_nodes > options.nodes:
        raise UserError(f"--zk-nodes {args.zk_nodes} needs at least {args.zk_nodes} nodes; --nodes is {options.nodes}")
    if not 1 <= args.zk_port <= 65535:
        raise UserError(f"--zk-port must be a TCP port, not {args.zk_port}")
    # A plain `kill` should clean up like Ctrl-C does (kill -9 is for `harness clean`).
    signal.signal(signal.SIGTERM, _raise_interrupt)
    started = time.monotonic()
    cluster = provision(options)
    try:
        zk = None
        if args.zk_nodes:
            zk = ZooKeeper(ZooKeeperOptions(nodes=args.zk_nodes, client_port=args.zk_port))
            zk.setup(cluster)
    except BaseException:
        cluster.teardown()
        raise
    elapsed = time.monotonic() - started
    cluster.close()
    if args.json:
        print(json.dumps(_describe(cluster, zk, elapsed), indent=1))
    else:
        _print_up(cluster, zk, elapsed)
    return 0


def _describe(cluster, zk, elapsed: float) -> dict:
    return {"cluster_id": cluster.cluster_id, "provider": cluster.provider,
            "control_address": cluster.control_address, "seconds": round(elapsed, 3),
            "nodes": [{"name": n.name, "address": n.address, "data_dir": n.data_dir, "log_dir": n.log_dir,
                       "ssh": cluster.kind.login(n)} for n in cluster.nodes],
            "zookeeper": ({"connect": zk.connect_string(), "nodes": [n.name for n in zk.nodes()],
                           "leaders": zk.quorum_leaders()} if zk else None)}


def _print_up(cluster, zk, elapsed: float) -> None:
    subnet = cluster.meta.get("subnet")
    print(f"cluster {cluster.cluster_id}: {cluster.provider}, {len(cluster.nodes)} node(s)"
          + (f", subnet {subnet}" if subnet else "")
          + (f", control node {cluster.control_address}" if cluster.control_address else ""))
    width = max(len(n.name) for n in cluster.nodes)
    for n in cluster.nodes:
        print(f"  {n.name:<{width}}  {n.address:<15}  {cluster.kind.login(n)}")
    if zk:
        leaders = zk.quorum_leaders()
        print(f"zookeeper: {zk.connect_string()}" + (f" (leader {', '.join(leaders)})" if leaders else ""))
    print(f"up in {elapsed:.1f} s; `harness cluster down --cluster {cluster.cluster_id}` removes it")


def _status(args) -> int:
    ids = sorted(find_cluster_ids(), key=st.slot_of)
    if args.cluster_id:
        ids = [c for c in ids if c == args.cluster_id]
        if not ids:
            raise UserError(f"no cluster {args.cluster_id} on this machine")
    if not ids:
        print("no clusters on this machine")
        return 0
    for cid in ids:
        _status_one(cid)
    return 0


def _status_one(cid: str) -> None:
    state = st.read_state(cid) or {}
    if state.get("phase") != "ready" or "nodes" not in state:
        owner = state.get("owner_pid")
        alive = owner is not None and is_alive(int(owner))
        print(f"cluster {cid}: incomplete (phase {state.get('phase', 'unknown')}, "
              f"owner pid {owner} {'running' if alive else 'gone'}); "
              f"`harness clean --cluster {cid}` removes it")
        return
    cluster = load_cluster(cid, connect_timeout=3.0)
    print(f"cluster {cid}: {cluster.provider}, {len(cluster.nodes)} node(s)"
          + (f", control node {cluster.control_address}" if cluster.control_address else ""))
    zk = ZooKeeper.from_cluster(cluster)
    modes = zk.modes() if zk else {}
    for node in cluster.nodes:
        try:
            daemons = node.remote.daemons()
            rules = len(net.rules_in_force_node(node))
            parts = [f"{name} {'pid ' + str(pid) if pid else 'stopped'}" for name, pid in sorted(daemons.items())]
            line = f"{node.remote.transport} ok; daemons: {', '.join(parts) or 'none'}; partition rules: {rules}"
        except RemoteError as e:
            line = f"UNREACHABLE ({e.detail})"
        if node.name in modes:
            line += f"; zookeeper {modes[node.name] or 'not serving'}"
        print(f"  {node.name}  {node.address}  {line}")
    cluster.close()


def _down(args) -> int:
    cluster = load_cluster(args.cluster_id)
    removed = cluster.teardown()
    for line in removed:
        print(f"removed {line}")
    print(f"cluster {cluster.cluster_id} is down")
    return 0

