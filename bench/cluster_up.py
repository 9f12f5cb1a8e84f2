"""Benchmark: how long a local cluster with ZooKeeper takes to come up and go.

    harness bench cluster [--repeats 5] [--nodes 5] [--zk-nodes 3] [--no-cli] [--json]
    python -m bench.cluster_up [the same flags]

Each repeat, in this process: provision N local nodes (namespaces, bridge,
keys, sshds, SSH connections), set up the ZooKeeper ensemble (until every
member serves and a kazoo write succeeded), tear everything down. Then the
same through the CLI as a user runs it (`harness cluster up` / `down` in a
fresh interpreter, so Python start-up and imports count). Reports median,
min and max seconds of each phase, recorded (bench/record.py) against
TARGETS. `bench_cluster_up()` returns the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import record
from core.errors import UserError
from infra.cluster import ProvisionOptions, provision
from infra.zookeeper import ZooKeeper, ZooKeeperOptions

REPO = Path(__file__).resolve().parents[1]
TARGETS = (
    record.Target("5n3zk.cli_up_s", "<=", 10.0, "a 5-node local cluster with a 3-node ZooKeeper up in 10 s or less "
                  "(`harness cluster up`, the median)"),
)


def measure_once(nodes: int, zk_nodes: int) -> dict[str, float]:
    """One bring-up and teardown in this process: seconds of each phase."""
    t0 = time.monotonic()
    cluster = provision("local", ProvisionOptions(nodes=nodes))
    try:
        t1 = time.monotonic()
        if zk_nodes:
            ZooKeeper(ZooKeeperOptions(nodes=zk_nodes)).setup(cluster)
        t2 = time.monotonic()
    finally:
        t_down = time.monotonic()
        cluster.teardown()
        t3 = time.monotonic()
    return {"nodes_up": t1 - t0, "zookeeper_up": t2 - t1, "up": t2 - t0, "down": t3 - t_down}


def measure_cli_once(nodes: int, zk_nodes: int) -> dict[str, float]:
    """One `harness cluster up` and `down`, each in a fresh interpreter: wall seconds."""
    def harness(*args: str) -> subprocess.CompletedProcess:
        res = subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, capture_output=True,
                             text=True, timeout=120, env=os.environ.copy())
        if res.returncode != 0:
            raise RuntimeError(f"harness {' '.join(args)} failed: {res.stderr.strip()}")
        return res

    t0 = time.monotonic()
    up = harness("cluster", "up", "--nodes", str(nodes), "--zk-nodes", str(zk_nodes), "--json")
    t1 = time.monotonic()
    cid = json.loads(up.stdout)["cluster_id"]
    harness("cluster", "down", "--cluster", cid)
    t2 = time.monotonic()
    return {"cli_up": t1 - t0, "cli_down": t2 - t1}


def bench_cluster_up(repeats: int = 5, nodes: int = 5, zk_nodes: int = 3, cli: bool = True) -> dict:
    """Runs the benchmark; returns {"params", "runs", "summary": {phase: {median,min,max}}}."""
    runs = []
    for _ in range(repeats):
        run = measure_once(nodes, zk_nodes)
        if cli:
            run.update(measure_cli_once(nodes, zk_nodes))
        runs.append(run)
    summary = {}
    for phase in runs[0]:
        values = [r[phase] for r in runs]
        summary[phase] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return {"params": {"repeats": repeats, "nodes": nodes, "zk_nodes": zk_nodes, "cpus": os.cpu_count()},
            "runs": runs, "summary": summary}


LABELS = {
    "nodes_up": "nodes up (namespaces, bridge, keys, sshd, SSH)",
    "zookeeper_up": "ZooKeeper up (all members serve, kazoo write ok)",
    "up": "total up, in process",
    "down": "teardown, in process",
    "cli_up": "`harness cluster up` wall time",
    "cli_down": "`harness cluster down` wall time",
}


def configure(parser) -> None:
    """Flags, for `harness bench cluster` and main()."""
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--zk-nodes", type=int, default=3)
    parser.add_argument("--no-cli", action="store_true", help="skip the CLI (subprocess) measurements")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    """Measure and print (a table, or the JSON with --json); record the medians."""
    begun = record.start()
    if args.repeats < 1 or args.nodes < 1 or not 0 <= args.zk_nodes <= args.nodes:
        raise UserError("need --repeats >= 1, --nodes >= 1 and 0 <= --zk-nodes <= --nodes")
    result = bench_cluster_up(args.repeats, args.nodes, args.zk_nodes, cli=not args.no_cli)
    shape = f"{args.nodes}n{args.zk_nodes}zk."  # nodes and ZooKeeper members: 5n3zk.up_s
    record.write(args, "cluster", begun, {f"{shape}{phase}_s": round(s["median"], 2)
                                            for phase, s in result["summary"].items()}, TARGETS, details=result)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    p = result["params"]
    print(f"{p['nodes']} local nodes, {p['zk_nodes']}-node ZooKeeper, {p['repeats']} repeats, {p['cpus']} CPUs")
    print(f"{'phase':<52} {'median':>8} {'min':>8} {'max':>8}")
    for phase, s in result["summary"].items():
        print(f"{LABELS.get(phase, phase):<52} {s['median']:>7.2f}s {s['min']:>7.2f}s {s['max']:>7.2f}s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    configure(parser)
    record.add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except UserError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
