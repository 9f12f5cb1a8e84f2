"""The metadata side of a broker: its ZooKeeper session and registration,
the watches on brokers, topics, partition states and the controller, the
cache of what they say, and the loop that runs the controller
(broker/controller.py) when this broker holds /controller.

kazoo runs its own threads; every watch hands its result to the event
loop (`post`), so the cache and everything the listener does on a change
happen on the loop, in the order ZooKeeper delivered them.  What a change
means for this broker's replicas is the listener's business (the broker
wires it to the replica manager and the group coordinator).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker import zk as Z
from broker.config import BrokerConfig
from broker.controller import Controller
from broker.zk import PartitionState

log = logging.getLogger("broker")


@dataclass
class BrokerInfo:
    host: str
    port: int
    czxid: int


class MetadataListener:
    """What the metadata side tells the rest of the broker (all calls on the event loop)."""

    def on_topic(self, topic: str, assignment: dict[int, list[int]]) -> None: ...

    def on_partition_state(self, tp: tuple[str, int], st: PartitionState) -> None: ...

    def on_live_brokers(self, live: dict[int, BrokerInfo]) -> None: ...

    def on_session_lost(self) -> None: ...


class Metadata:
    def __init__(self, cfg: BrokerConfig, listener: MetadataListener):
        self.cfg = cfg
        self.id = cfg.broker_id
        self.listener = listener
        self.loop: asyncio.AbstractEventLoop | None = None
        self.zk: KazooClient | None = None
        self.czxid = 0  # this incarnation's registration; -1 while the session is lost
        self.live: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[int, list[int]]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.controller_id = -1
        self.cluster_id = "own-broker"
        self.watched_topics: set[str] = set()
        self.topics_loaded = False  # the first /brokers/topics listing has been applied
        self.zk_pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="zk")
        self.controller_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctrl")
        self.controller: Controller | None = None
        self.controller_wakeup: asyncio.Event | None = None
        self.stopping = False
        # Set when ZooKeeper has been unreachable for longer than the session timeout: by
        # then the session has expired on the servers and another broker may lead, so this
        # one leads nothing until it is connected again (see _suspended_too_long).
        self.zk_fenced = False
        self._suspended_timer: asyncio.TimerHandle | None = None

    @property
    def session_ok(self) -> bool:
        """Whether this broker may lead: registered, and not cut off from ZooKeeper for too long."""
        return self.czxid > 0 and not self.zk_fenced

    # ------------------------------------------------------------------------------
    # session
    # ------------------------------------------------------------------------------

    async def zk_call(self, fn, *args):
        """Runs fn(kazoo client, *args) in the ZooKeeper thread pool."""
        return await self.loop.run_in_executor(self.zk_pool, functools.partial(fn, self.zk, *args))

    def post(self, fn, *args) -> None:
        """Runs fn(*args) on the event loop (from a kazoo thread)."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # loop closed during shutdown

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.controller_wakeup = asyncio.Event()
        hosts = self.cfg.zookeeper
        chroot = ""
        if "/" in hosts:
            hosts, chroot = hosts.split("/", 1)
            chroot = "/" + chroot.strip("/")
        if chroot and chroot != "/":
            boot = KazooClient(hosts=hosts, timeout=self.cfg.zk_session_timeout_ms / 1000)
            await self.loop.run_in_executor(None, functools.partial(boot.start, timeout=30))
            await self.loop.run_in_executor(None, boot.ensure_path, chroot)
            await self.loop.run_in_executor(None, boot.stop)
            boot.close()
        self.zk = KazooClient(hosts=hosts + chroot, timeout=self.cfg.zk_session_timeout_ms / 1000)
        self.zk.add_listener(self._zk_state_listener)
        await self.loop.run_in_executor(None, functools.partial(self.zk.start, timeout=30))
        for path in (Z.BROKERS, Z.TOPICS, Z.CONSUMERS, Z.TRANSACTIONS):
            await self.zk_call(lambda c, p=path: c.ensure_path(p))
        self.cluster_id = await self.zk_call(ensure_cluster_id)
        log.info("cluster id %s", self.cluster_id)
        await self._register()
        self.controller = Controller(self.zk, self.id, self.cfg.unclean_leader_election,
                                     self.cfg.bug("elect-any-replica"))
        ChildrenWatch(self.zk, Z.BROKERS, self._watch_brokers)
        ChildrenWatch(self.zk, Z.TOPICS, self._watch_topics)
        DataWatch(self.zk, Z.CONTROLLER, self._watch_controller)

    async def stop(self) -> None:
        self.stopping = True
        if self.zk is not None:
            await self.loop.run_in_executor(None, self._stop_zk)
        self.zk_pool.shutdown(wait=False, cancel_futures=True)
        self.controller_pool.shutdown(wait=False, cancel_futures=True)

    def _stop_zk(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass

    async def _register(self) -> None:
        """Registers this broker ephemerally, waiting out a previous incarnation's node."""
        path = f"{Z.BROKERS}/{self.id}"
        data = json.dumps({"version": 1, "host": self.cfg.advertised_host, "port": self.cfg.advertised_port,
                           "pid": os.getpid()}).encode()
        deadline = time.monotonic() + 3 * self.cfg.zk_session_timeout_ms / 1000 + 10
        while True:
            try:
                await self.zk_call(lambda c: c.create(path, data, ephemeral=True))
                break
            except NodeExistsError:
                try:
                    _, stat = await self.zk_call(lambda c: c.get(path))
                except NoNodeError:
                    continue  # the previous registration expired just now: create again
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker id {self.id} is registered by another live process")
                log.info("waiting for a previous registration of broker %d to expire", self.id)
                await asyncio.sleep(0.5)
        _, stat = await self.zk_call(lambda c: c.get(path))
        old = self.czxid
        self.czxid = stat.czxid
        log.info("REGISTERED broker %d in ZooKeeper (incarnation %d%s)", self.id, self.czxid,
                 f", was {old}" if old else "")
        # Roles depend on the incarnation: re-decide every partition under the new one.
        for tp, st in list(self.states.items()):
            self.listener.on_partition_state(tp, st)

    def _zk_state_listener(self, state) -> None:
        if state == KazooState.LOST:
            self.post(self._session_lost)
        elif state == KazooState.SUSPENDED:
            self.post(self._session_suspended)
        elif state == KazooState.CONNECTED:
            self.post(self._session_connected)

    def _session_lost(self) -> None:
        log.warning("ZooKeeper session lost: stepping down from every leadership")
        self._cancel_suspended_timer()
        self.czxid = -1
        if self.controller is not None:
            self.controller.resign()
        self.listener.on_session_lost()

    def _session_suspended(self) -> None:
        # kazoo reports LOST only once it reaches a server again; cut off for good, it never
        # would.  The servers expire the session after the timeout, so wait that long at most.
        log.warning("ZooKeeper connection suspended; leaderships end if it is not back within %d ms",
                    self.cfg.zk_session_timeout_ms)
        self._cancel_suspended_timer()
        self._suspended_timer = self.loop.call_later(self.cfg.zk_session_timeout_ms / 1000,
                                                     self._suspended_too_long)

    def _suspended_too_long(self) -> None:
        self._suspended_timer = None
        if self.zk_fenced or self.czxid <= 0:
            return
        log.warning("ZooKeeper unreachable for longer than the session timeout (%d ms): stepping down from "
                    "every leadership (the session has expired for the other brokers)",
                    self.cfg.zk_session_timeout_ms)
        self.zk_fenced = True
        # The controller role stays: its writes are conditional on /controller, so they fail
        # while the session is gone, and with the session back it is still the controller.
        self.listener.on_session_lost()

    def _cancel_suspended_timer(self) -> None:
        if self._suspended_timer is not None:
            self._suspended_timer.cancel()
            self._suspended_timer = None

    def _session_connected(self) -> None:
        self._cancel_suspended_timer()
        if self.stopping:
            return
        if self.czxid == -1:
            self.zk_fenced = False
            self.loop.create_task(self._register())
            self.controller_wakeup.set()
        elif self.zk_fenced:
            # The session survived after all: roles come back from the cached states (the
            # watches deliver whatever changed meanwhile).
            log.info("ZooKeeper connection back with the same session: re-reading roles")
            self.zk_fenced = False
            for tp, st in list(self.states.items()):
                self.listener.on_partition_state(tp, st)
            self.controller_wakeup.set()

    # ------------------------------------------------------------------------------
    # watches -> the cache
    # ------------------------------------------------------------------------------

    def _watch_brokers(self, children) -> None:
        live = {}
        for child in children:
            try:
                data, stat = self.zk.get(f"{Z.BROKERS}/{child}")
                d = json.loads(data)
                live[int(child)] = BrokerInfo(d["host"], int(d["port"]), stat.czxid)
            except (NoNodeError, ValueError, KeyError):
                continue
        self.post(self._set_live, live)

    def _set_live(self, live: dict[int, BrokerInfo]) -> None:
        gone = set(self.live) - set(live)
        new = set(live) - set(self.live)
        self.live = live
        if gone or new:
            log.info("live brokers now %s (gone %s, new %s)", sorted(live), sorted(gone), sorted(new))
        if self.controller_wakeup is not None:
            self.controller_wakeup.set()
        self.listener.on_live_brokers(live)

    def _watch_topics(self, children) -> None:
        for topic in children:
            if topic in self.watched_topics:
                continue
            try:
                assignment = Z.decode_assignment(self.zk.get(Z.topic_path(topic))[0])
            except (NoNodeError, ValueError, KeyError):
                continue
            self.watched_topics.add(topic)
            self.post(self._add_topic, topic, assignment)
            for p in assignment:
                DataWatch(self.zk, Z.state_path(topic, p), functools.partial(self._watch_state, topic, p))
        self.post(self._topics_listed)

    def _topics_listed(self) -> None:
        self.topics_loaded = True
        if self.controller_wakeup is not None:
            self.controller_wakeup.set()

    def _add_topic(self, topic: str, assignment: dict[int, list[int]]) -> None:
        self.topics[topic] = assignment
        self.listener.on_topic(topic, assignment)

    def _watch_state(self, topic, p, data, stat, event=None):
        if data is None:
            return True
        try:
            st = PartitionState.from_json(data, stat.version, stat.mzxid)
        except (ValueError, KeyError):
            log.warning("unreadable partition state for %s-%d", topic, p)
            return True
        self.post(self.apply_state, (topic, p), st)
        return True

    def apply_state(self, tp, st: PartitionState) -> None:
        """Caches a partition state read from ZooKeeper and passes it on, unless it is older than the cached one."""
        old = self.states.get(tp)
        if old is not None and old.version > st.version and old.leader_epoch >= st.leader_epoch:
            return  # an older notification arriving late
        self.states[tp] = st
        self.listener.on_partition_state(tp, st)

    def set_state_written(self, tp, st: PartitionState) -> None:
        """Caches a state this broker wrote itself (its znode version already known)."""
        self.states[tp] = st

    def _watch_controller(self, data, stat, event=None):
        cid = -1
        if data:
            try:
                cid = int(json.loads(data)["brokerid"])
            except (ValueError, KeyError):
                pass
        self.post(self._set_controller, cid)
        return True

    def _set_controller(self, cid: int) -> None:
        if cid != self.controller_id:
            log.info("CONTROLLER is now broker %d (was %d)", cid, self.controller_id)
        self.controller_id = cid
        if cid != self.id and self.controller is not None and self.controller.active:
            self.controller.resign()
        self.controller_wakeup.set()

    # ------------------------------------------------------------------------------
    # the controller's passes
    # ------------------------------------------------------------------------------

    async def controller_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.controller_wakeup.wait(), 2.0)
            except asyncio.TimeoutError:
                pass
            self.controller_wakeup.clear()
            if not self.session_ok:
                continue
            try:
                if self.controller_id in (-1, self.id):
                    await self.loop.run_in_executor(self.controller_pool, self.controller.try_elect)
                if self.controller.active:
                    await self.loop.run_in_executor(self.controller_pool, self.controller.reconcile)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("controller pass failed: %s: %s", type(e).__name__, e)
                await asyncio.sleep(0.5)


# ------------------------------------------------------------------------------
# cluster-wide values kept in ZooKeeper (run in the ZooKeeper thread pool)
# ------------------------------------------------------------------------------

def ensure_cluster_id(client) -> str:
    path = "/cluster/id"
    try:
        return json.loads(client.get(path)[0])["id"]
    except NoNodeError:
        cid = str(uuid.uuid4())
        try:
            client.create(path, json.dumps({"version": "1", "id": cid}).encode(), makepath=True)
            return cid
        except NodeExistsError:
            return json.loads(client.get(path)[0])["id"]


_pid_block: list[int] = []
_pid_lock = threading.Lock()


def allocate_producer_id(client) -> int:
    """Hands out producer ids from blocks reserved in ZooKeeper with conditional writes."""
    with _pid_lock:
        return _allocate_locked(client)


def _allocate_locked(client) -> int:
    if _pid_block and _pid_block[0] < _pid_block[1]:
        pid = _pid_block[0]
        _pid_block[0] += 1
        return pid
    while True:
        try:
            data, stat = client.get(Z.PRODUCER_ID_BLOCK)
            start = int(json.loads(data)["next"])
            client.set(Z.PRODUCER_ID_BLOCK, json.dumps({"next": start + Z.PRODUCER_ID_BLOCK_SIZE}).encode(),
                       version=stat.version)
        except NoNodeError:
            start = 0
            try:
                client.create(Z.PRODUCER_ID_BLOCK, json.dumps({"next": Z.PRODUCER_ID_BLOCK_SIZE}).encode(),
                              makepath=True)
            except NodeExistsError:
                continue
        except BadVersionError:
            continue
        _pid_block[:] = [start + 1, start + Z.PRODUCER_ID_BLOCK_SIZE]
        return start
