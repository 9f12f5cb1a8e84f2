"""Reading a ZooKeeper-mode Kafka cluster's state from ZooKeeper.

The own broker keeps Kafka's layout (`/controller`, `/brokers/ids`,
`/brokers/topics/<t>/partitions/<p>/state`), so one reader serves both
systems: who leads each partition and who is the controller, for faults
aimed at them. Each module function opens a short kazoo session from the
control node; a `Reader` keeps one session open for readers that ask many
times a second (the cluster-state observer). Both read through the same
functions of an open session (`read_partition_states`, `read_controller`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading

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


def read_partition_states(zk, topic: str) -> dict[int, tuple[int, int, list[int]]]:
    """partition -> (leader broker id or -1, leader epoch, ISR broker ids), on an open session.

    Partitions whose state node is missing or unreadable are left out."""
    from kazoo.exceptions import NoNodeError

    try:
        partitions = zk.get_children(f"/brokers/topics/{topic}/partitions")
    except NoNodeError:
        return {}
    out = {}
    for p in partitions:
        try:
            data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
            state = json.loads(data)
            out[int(p)] = (int(state["leader"]), int(state["leader_epoch"]), [int(b) for b in state["isr"]])
        except (NoNodeError, ValueError, KeyError, TypeError):
            continue
    return out


def read_controller(zk) -> int | None:
    """The controller's broker id, on an open session (None when there is none)."""
    from kazoo.exceptions import NoNodeError

    try:
        data, _ = zk.get("/controller")
        return int(json.loads(data)["brokerid"])
    except (NoNodeError, ValueError, KeyError, TypeError):
        return None


def leaders(connect: str, chroot: str, topic: str) -> dict[int, int]:
    """partition -> leader broker id (partitions without a leader left out)."""
    with session(connect, chroot) as zk:
        states = read_partition_states(zk, topic)
    return {p: leader for p, (leader, _, _) in states.items() if leader >= 0}


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
    with session(connect, chroot) as zk:
        return read_controller(zk)


class Reader:
    """One kazoo session kept open for frequent reads (kazoo reconnects it
    across the ensemble on its own); opened on first use, `close()` ends it.
    Safe to share between threads. A read while ZooKeeper cannot answer
    raises kazoo's error or a UserError: the caller decides what a failed
    read means."""

    def __init__(self, connect: str, chroot: str = "", timeout: float = 5.0):
        self.hosts = connect + chroot
        self.timeout = timeout
        self._client = None
        self._lock = threading.Lock()

    def _zk(self):
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        with self._lock:
            if self._client is None:
                client = KazooClient(hosts=self.hosts, timeout=self.timeout,
                                     logger=logging.getLogger("kazoo.zk_state"))
                try:
                    client.start(timeout=self.timeout)
                except KazooTimeoutError:
                    client.close()
                    raise UserError(f"ZooKeeper at {self.hosts} did not answer within {self.timeout:.0f} s") from None
                self._client = client
            return self._client

    def partition_states(self, topic: str) -> dict[int, tuple[int, int, list[int]]]:
        return read_partition_states(self._zk(), topic)

    def controller(self) -> int | None:
        return read_controller(self._zk())

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.stop()
                client.close()
            except Exception as e:  # closing a session of a torn-down ensemble
                log.debug("closing the ZooKeeper reader: %s", e)
