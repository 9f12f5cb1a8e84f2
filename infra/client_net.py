"""One client process cut off the network, on the control host where the clients run.

Each client the workload runs as a process of its own
(workloads/process_slot.py) runs, when the harness runs as root, with a
group id of its own (`client_gid`), which its successors keep: as the
nemesis sees it, a client slot is a client host. A cut is one iptables rule
in the control host's OUTPUT chain that drops every packet the processes
of that group id send (`-m owner --gid-owner`), tagged with the comment
CUT_TAG. The client then sends nothing, no request, heartbeat or TCP
acknowledgement: its connections stall and the brokers and its group's
coordinator see it fall silent, as they would a client host the network
cut off. Packets to it still arrive, unanswered. The rule matches the
group id only, so nothing else on the host (other runs' clients, the
brokers of a loopback cluster) is touched.

`restore` deletes one cut; `restore_all` (the nemesis's heal, and
`harness clean` after a run killed mid-cut) every rule with the tag.
`can_connect` probes a TCP connection as a client of a group id would.
"""

from __future__ import annotations

import os
import subprocess
import sys

from infra import hostops

CUT_TAG = "harness-client-cut"
GID_BASE = 1_500_000_000  # far above any group a system defines
SLOTS = 256  # client slots a run may have group ids for


def client_gid(slot: int) -> int | None:
    """The group id the client in `slot` runs with: unique to this harness
    process and slot; None where the harness is not root (no cut then)."""
    if os.geteuid() != 0:
        return None
    return GID_BASE + (os.getpid() % 1_000_000) * SLOTS + slot % SLOTS


def cut(gid: int) -> None:
    """Drop every packet the processes of `gid` send."""
    hostops.sh(["iptables", "-w", "-I", "OUTPUT", "1", "-m", "owner", "--gid-owner", str(gid),
                "-m", "comment", "--comment", CUT_TAG, "-j", "DROP"])


def restore(gid: int) -> int:
    """Delete the cuts of `gid`; how many there were."""
    return _delete(f"--gid-owner {gid} ")


def restore_all() -> int:
    """Delete every client cut on this host; how many there were."""
    return _delete("")


def cut_gids() -> list[int]:
    """The group ids cut now."""
    gids = []
    for rule in hostops.iptables_rules(f"--comment {CUT_TAG}"):
        words = rule.split()
        if "--gid-owner" in words:
            gids.append(int(words[words.index("--gid-owner") + 1]))
    return gids


def _delete(fragment: str) -> int:
    rules = [r for r in hostops.iptables_rules(f"--comment {CUT_TAG}") if fragment in r]
    for rule in rules:
        hostops.delete_iptables_rule(rule)
    return len(rules)


_PROBE = """
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
except OSError:
    sys.exit(1)
"""


def can_connect(gid: int, host: str, port: int, timeout: float = 1.5) -> bool:
    """Whether a process of group id `gid` opens a TCP connection to host:port within `timeout`."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, host, str(port), str(timeout)], group=gid,
                              capture_output=True, timeout=timeout + 10)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0
