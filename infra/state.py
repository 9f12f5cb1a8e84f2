"""What the harness created on this machine, and the names it gives things.

Every cluster gets an id `c<slot>` (c0, c1, ...) and a state directory
`<state root>/clusters/<id>/` holding `state.json` (what was created, kept up
to date while it is being created), the run's SSH keys and, for the local
provider, each node's data/log/run directories.

`harness clean` must work after a `kill -9` at any moment, even before
`state.json` says anything, so every kernel object also carries the cluster id
in its name, and clean can find it from the name alone:

    network namespace   harness-<id>-<node>      e.g. harness-c0-n1
    bridge              hbr-<id>                 e.g. hbr-c0
    veth (host end)     hv-<id>-<index>          e.g. hv-c0-1
    host iptables rule  comment "harness:<id>"
    node iptables rule  comment "harness-partition"  (inside a node)
    daemon process      environment HARNESS_DAEMON=<id>/<node>/<name>

The state root is /var/lib/harness (root) or $HARNESS_STATE_DIR.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from pathlib import Path
from typing import Iterator

from core.errors import UserError
from core.files import write_whole

NETNS_PREFIX = "harness-"
NODE_RULE_TAG = "harness-partition"
DAEMON_ENV = "HARNESS_DAEMON"
MAX_SLOTS = 250

CLUSTER_ID_RE = re.compile(r"^c(\d{1,3})$")
NETNS_RE = re.compile(r"^harness-(c\d{1,3})-(.+)$")
BRIDGE_RE = re.compile(r"^hbr-(c\d{1,3})$")
VETH_RE = re.compile(r"^hv-(c\d{1,3})-\d+$")
HOST_RULE_RE = re.compile(r"harness:(c\d{1,3})\b")
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def state_root() -> Path:
    """The directory under which everything of every run lives."""
    env = os.environ.get("HARNESS_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/harness")
    return Path.home() / ".local" / "state" / "harness"


def clusters_dir() -> Path:
    return state_root() / "clusters"


def cluster_dir(cluster_id: str) -> Path:
    return clusters_dir() / cluster_id


def slot_of(cluster_id: str) -> int:
    m = CLUSTER_ID_RE.match(cluster_id)
    if not m:
        raise ValueError(f"not a cluster id: {cluster_id!r}")
    return int(m.group(1))


def netns_name(cluster_id: str, node: str) -> str:
    return f"{NETNS_PREFIX}{cluster_id}-{node}"


def bridge_name(cluster_id: str) -> str:
    return f"hbr-{cluster_id}"


def veth_name(cluster_id: str, index: int) -> str:
    # Interface names are at most 15 bytes, so the node's index, not its name.
    return f"hv-{cluster_id}-{index}"


def host_rule_tag(cluster_id: str) -> str:
    return f"harness:{cluster_id}"


def daemon_tag(cluster_id: str, node: str, name: str) -> str:
    return f"{cluster_id}/{node}/{name}"


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Serialises cluster-id allocation between harness processes."""
    root = state_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def list_cluster_ids() -> list[str]:
    d = clusters_dir()
    if not d.is_dir():
        return []
    ids = [p.name for p in d.iterdir() if p.is_dir() and CLUSTER_ID_RE.match(p.name)]
    return sorted(ids, key=slot_of)


def read_state(cluster_id: str) -> dict | None:
    """The cluster's state.json, or None when missing or cut short by a crash."""
    path = cluster_dir(cluster_id) / "state.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_state(cluster_id: str, state: dict) -> None:
    """Atomically replaces state.json, so a kill -9 leaves the old or the new one."""
    d = cluster_dir(cluster_id)
    d.mkdir(parents=True, exist_ok=True)
    write_whole(d / "state.json", json.dumps(state, indent=1, sort_keys=True))


def reserve_cluster_id(slot_is_free, wanted: str | None = None) -> str:
    """Picks (or checks) a cluster id and creates its state directory.

    `slot_is_free(slot)` tells whether the provider sees anything left of that
    slot on the machine (namespaces, bridge, routes). Creating the directory
    under the lock is the reservation.
    """
    with locked():
        clusters_dir().mkdir(parents=True, exist_ok=True)
        if wanted is not None:
            slots = [slot_of(wanted)]
        else:
            slots = range(MAX_SLOTS)
        for slot in slots:
            cid = f"c{slot}"
            if cluster_dir(cid).exists() or not slot_is_free(slot):
                continue
            cluster_dir(cid).mkdir(mode=0o700)
            write_state(cid, {"cluster_id": cid, "phase": "reserved", "owner_pid": os.getpid(),
                              "created": time.time()})
            return cid
    if wanted is not None:
        raise UserError(f"cluster {wanted} already exists on this machine "
                        f"(`harness cluster down --cluster {wanted}` or `harness clean` removes it)")
    raise UserError(f"no free cluster slot left under {clusters_dir()}; `harness clean` removes old clusters")


def maybe_stall(phase: str) -> None:
    """Test hook: HARNESS_INFRA_STALL_AT=<phase> parks bring-up at that phase
    (after printing `stalled at <phase>`), so tests can kill -9 it there.
    Phases: network, sshd (local provider), network, containers (docker
    provider), zookeeper (after the servers started)."""
    if os.environ.get("HARNESS_INFRA_STALL_AT") == phase:
        print(f"stalled at {phase}", flush=True)
        time.sleep(3600)

