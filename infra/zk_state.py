"""Reading a ZooKeeper-mode Kafka cluster's state from ZooKeeper.

The own broker keeps Kafka's layout (`/controller`, `/brokers/ids`,
`/brokers/topics/<t>/partitions/<p>/state`), so one reader serves both
systems: who leads each partition and who is the controller, for faults
aimed at them. Each call opens a short kazoo session from the control node.
"""

from __future__ import annotations

import contextlib
import json
import logging

from core.errors import UserError

log = logging.getLogger(__name__)


@contextlib.contextmanager
def session(connect: str, chroot: str = "", timeout: float = 10.0):
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=connect + chroot, timeout=timeout,
                         logger=logging.getLogger("kazoo.zk_state"))
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        raise UserError(f"ZooKeeper at {connect} did not answer within {timeout:.0f} s") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


def fresh_chroot(connect: str, chroot: str) -> None:
    """An empty `chroot`, whatever an earlier setup on this ensemble left there:
    a stale broker registration (its session not yet expired after a kill)
    would otherwise pass for a new broker serving."""
    if chroot:
        with session(connect) as zk:
            if zk.exists(chroot):
                zk.delete(chroot, recursive=True)
            zk.ensure_path(chroot)


def registered_brokers(connect: str, chroot: str = "") -> set[int]:
    from kazoo.exceptions import NoNodeError

    with session(connect, chroot) as zk:
        try:
            return {int(x) for x in zk.get_children("/brokers/ids")}
        except NoNodeError:
            return set()


def leaders(connect: str, chroot: str, topic: str) -> dict[int, int]:
    """partition -> leader broker id (partitions without a leader left out)."""
    from kazoo.exceptions import NoNodeError

    out = {}
    with session(connect, chroot) as zk:
        try:
            partitions = zk.get_children(f"/brokers/topics/{topic}/partitions")
        except NoNodeError:
            return {}
        for p in partitions:
            try:
                data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
                leader = int(json.loads(data)["leader"])
            except (NoNodeError, ValueError, KeyError):
                continue
            if leader >= 0:
                out[int(p)] = leader
    return out


def replicas(connect: str, chroot: str, topic: str) -> dict[int, list[int]]:
    """partition -> its replicas' broker ids, from the topic's assignment."""
    from kazoo.exceptions import NoNodeError

    with session(connect, chroot) as zk:
        try:
            data, _ = zk.get(f"/brokers/topics/{topic}")
            assignment = json.loads(data)["partitions"]
        except (NoNodeError, ValueError, KeyError):
            return {}
    return {int(p): [int(b) for b in brokers] for p, brokers in assignment.items()}


def controller(connect: str, chroot: str = "") -> int | None:
    from kazoo.exceptions import NoNodeError

    with session(connect, chroot) as zk:
        try:
            data, _ = zk.get("/controller")
            return int(json.loads(data)["brokerid"])
        except (NoNodeError, ValueError, KeyError):
            return None
