"""Removes everything harness runs created on this machine, however they ended.

Clusters are found from four independent sources, so a run killed with -9
at any moment (even before it wrote its state) is still found:
state directories, network namespace and link names, host iptables rules
tagged `harness:<id>`, and processes tagged `HARNESS_DAEMON=<id>/...`.

A local cluster is removed from its names alone (infra.local); a docker
cluster's containers and networks from their label `harness.cluster=<id>`
(infra.docker), found even without a state directory. An ssh or
vagrant cluster's hosts are contacted with the cluster's saved SSH settings
to kill the harness's daemons and delete its partition rules; unreachable
hosts are reported, not retried. Mounts under the state root are unmounted
(`fusermount3 -u -z`) before any directory is removed. Running it twice is
harmless: the second run finds nothing.
"""

from __future__ import annotations

import logging
import re
from typing import Callable

from infra import hostops
from infra import state as st
from infra.docker import labelled_cluster_ids, remove_docker_cluster

log = logging.getLogger(__name__)


def find_cluster_ids() -> set[str]:
    ids = set(st.list_cluster_ids())
    for ns in hostops.list_netns():
        m = st.NETNS_RE.match(ns)
        if m:
            ids.add(m.group(1))
    for link in hostops.list_links():
        m = st.BRIDGE_RE.match(link) or st.VETH_RE.match(link.split("@")[0])
        if m:
            ids.add(m.group(1))
    for rule in hostops.iptables_rules("harness:"):
        m = st.HOST_RULE_RE.search(rule)
        if m:
            ids.add(m.group(1))
    for proc in hostops.scan_processes():
        m = re.match(r"^(c\d{1,3})/", proc.daemon_tag or "")
        if m:
            ids.add(m.group(1))
    return ids


def clean(cluster_id: str | None = None, say: Callable[[str], None] | None = None) -> list[str]:
    """Removes cluster `cluster_id`, or every cluster; returns what was removed."""
    from core.errors import UserError

    if cluster_id is not None and not st.CLUSTER_ID_RE.match(cluster_id):
        raise UserError(f"bad cluster id {cluster_id!r}: use c<number>, e.g. c3")
    removed: list[str] = []

    def note(line: str) -> None:
        removed.append(line)
        if say:
            say(line)

    ids = find_cluster_ids() | labelled_cluster_ids()
    if cluster_id is not None:
        ids &= {cluster_id}
    for cid in sorted(ids, key=st.slot_of):
        state = st.read_state(cid) or {}
        if state.get("provider") in ("ssh", "vagrant") and state.get("nodes"):
            _clean_remote_cluster(cid, note)
        else:
            from infra.local import remove_local_cluster

            remove_docker_cluster(cid, say=note)  # first: the containers' daemons go with them
            remove_local_cluster(cid, say=note)

    if cluster_id is None:
        # Mounts under the state root outside any cluster dir (a FUSE layer of a run
        # that kept its data elsewhere under the root).
        root = st.state_root()
        for m in hostops.mounts_under(root):
            if m.fstype.startswith("fuse"):
                hostops.abort_fuse(m)
            if hostops.unmount(m):
                note(f"mount {m.mount_point} ({m.fstype})")
    return removed


def _clean_remote_cluster(cid: str, note: Callable[[str], None]) -> None:
    from core.errors import UserError
    from infra.cluster import load_cluster
    from infra.ssh import teardown_ssh

    try:
        cluster = load_cluster(cid, connect_timeout=5.0)
    except UserError as e:
        log.warning("cluster %s: %s", cid, e)
        hostops.remove_tree(st.cluster_dir(cid))
        note(f"state directory {st.cluster_dir(cid)}")
        return
    teardown_ssh(cluster, say=note)
