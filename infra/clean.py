"""Removes everything harness runs created on this machine, however they ended.

Clusters are found from their state directories and from what each provider
finds by name (`Provider.find_clusters`; for local clusters: network
namespace and link names, host iptables rules tagged `harness:<id>`, and
processes tagged `HARNESS_DAEMON=<id>/...`), so a run killed with -9 at any
moment (even before it wrote its state) is still found.

A provider that can remove a cluster from its id alone (`Provider.remove`:
the local one; docker, from its label `harness.cluster=<id>`) does so. Otherwise (ssh, vagrant) the cluster's hosts are
contacted with its saved SSH settings and torn down: the harness's daemons
killed, its partition rules deleted; unreachable hosts are reported, not
retried. Client processes' network cuts on this host (tagged
`harness-client-cut`, infra/client_net.py) are deleted too. Mounts under
the state root are unmounted (`fusermount3 -u -z`) before any directory is
removed. Running it twice is harmless: the second
run finds nothing.
"""

from __future__ import annotations

import logging
from typing import Callable

from core.errors import UserError
from infra import client_net, hostops
from infra import state as st
from infra.cluster import PROVIDERS, load_cluster
from infra.nodes import Provider

log = logging.getLogger(__name__)


def find_cluster_ids() -> set[str]:
    """Every cluster id on this machine: state dirs, and what each provider
    finds from the names of the things it made."""
    ids = set(st.list_cluster_ids())
    for provider in PROVIDERS.values():
        ids |= provider.find_clusters()
    return ids


def clean(cluster_id: str | None = None, say: Callable[[str], None] | None = None) -> list[str]:
    """Removes cluster `cluster_id`, or every cluster; returns what was removed."""
    if cluster_id is not None and not st.CLUSTER_ID_RE.match(cluster_id):
        raise UserError(f"bad cluster id {cluster_id!r}: use c<number>, e.g. c3")
    removed: list[str] = []

    def note(line: str) -> None:
        removed.append(line)
        if say:
            say(line)

    ids = find_cluster_ids()
    if cluster_id is not None:
        ids &= {cluster_id}
    for cid in sorted(ids, key=st.slot_of):
        state = st.read_state(cid) or {}
        provider = PROVIDERS.get(state.get("provider"))
        if provider is not None and provider.remove is None and state.get("nodes"):
            _clean_saved_cluster(cid, provider, note)
        elif provider is not None and provider.remove is not None:
            provider.remove(cid, note)
        else:
            # No state says whose it is (a bring-up killed early): every provider
            # that can remove a cluster from its id alone tries.
            for p in PROVIDERS.values():
                if p.remove is not None:
                    p.remove(cid, note)
            if st.cluster_dir(cid).exists():
                hostops.remove_tree(st.cluster_dir(cid))
                note(f"state directory {st.cluster_dir(cid)}")

    if cluster_id is None:
        # Client processes' network cuts on this host (infra/client_net.py) of a run killed mid-cut.
        cuts = client_net.restore_all()
        if cuts:
            note(f"client network cuts ({cuts} iptables rules tagged {client_net.CUT_TAG})")
        # Mounts under the state root outside any cluster dir (a FUSE layer of a run
        # that kept its data elsewhere under the root).
        root = st.state_root()
        for m in hostops.mounts_under(root):
            if m.fstype.startswith("fuse"):
                hostops.abort_fuse(m)
            if hostops.unmount(m):
                note(f"mount {m.mount_point} ({m.fstype})")
    return removed


def _clean_saved_cluster(cid: str, provider: Provider, note: Callable[[str], None]) -> None:
    """A cluster of hosts: reach them with its saved settings and tear it down."""
    try:
        cluster = load_cluster(cid, connect_timeout=5.0)
    except UserError as e:
        log.warning("cluster %s: %s", cid, e)
        hostops.remove_tree(st.cluster_dir(cid))
        note(f"state directory {st.cluster_dir(cid)}")
        return
    provider.teardown(cluster, note)
