"""The broker process: one asyncio event loop serving the Kafka protocol,
with ZooKeeper (kazoo, in its own threads) feeding it cluster state.

Per connection, requests are read as they come, handled as tasks (a
produce appends before its first await, so appends happen in request
order) and answered strictly in order by one writer task; at most
MAX_IN_FLIGHT requests wait per connection, so memory stays bounded.
A frame that cannot be parsed, an unknown API key or an unsupported
version closes the connection (ApiVersions answers UNSUPPORTED_VERSION
instead, as the protocol asks).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import os
import signal
import socket
import struct
import threading
import time
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker import protocol as P
from broker import records
from broker import zk as Z
from broker.config import BrokerConfig
from broker.controller import Controller
from broker.fetcher import Fetcher
from broker.groups import GroupCoordinator, coordinator_for
from broker.partition import Partition, ProduceError
from broker.storage import Log, parse_partition_dir, partition_dir_name, read_checkpoint, write_checkpoint
from broker.zk import PartitionState

log = logging.getLogger("broker")

MAX_IN_FLIGHT = 32
_INT32 = struct.Struct(">i")


@dataclass
class BrokerInfo:
    host: str
    port: int
    czxid: int


class Broker:
    def __init__(self, cfg: BrokerConfig):
        self.cfg = cfg
        self.id = cfg.broker_id
        self.loop: asyncio.AbstractEventLoop | None = None
        self.zk: KazooClient | None = None
        self.czxid = 0  # this incarnation's registration
        self.live: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[int, list[int]]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.controller_id = -1
        self.fetchers: dict[int, Fetcher] = {}
        self.checkpoint = read_checkpoint(cfg.data_dir)
        self.zk_pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="zk")
        self.controller_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctrl")
        self.controller: Controller | None = None
        self.controller_wakeup: asyncio.Event | None = None
        self.groups: GroupCoordinator | None = None
        self.stopping: asyncio.Event | None = None
        self.cluster_id = "own-broker"
        self.watched_topics: set[str] = set()
        self.topics_loaded = False  # the first /brokers/topics listing has been applied
        self.connections: set = set()
        self.tasks: list[asyncio.Task] = []

    # ------------------------------------------------------------------------------
    # start-up and shut-down
    # ------------------------------------------------------------------------------

    async def zk_call(self, fn, *args):
        return await self.loop.run_in_executor(self.zk_pool, functools.partial(fn, self.zk, *args))

    def post(self, fn, *args) -> None:
        """Runs fn(*args) on the event loop (from a kazoo thread)."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # loop closed during shutdown

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        self.controller_wakeup = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.stopping.set)
        self._load_logs()
        server = await asyncio.start_server(self._serve_connection, self.cfg.host, self.cfg.port,
                                            reuse_address=True, backlog=256)
        log.info("broker %d listening on %s:%d (advertised %s:%d), data dir %s, planted bugs: %s",
                 self.id, self.cfg.host, self.cfg.port, self.cfg.advertised_host, self.cfg.advertised_port,
                 self.cfg.data_dir, sorted(self.cfg.debug_bugs) or "none")
        self.groups = GroupCoordinator(self.id, self.zk_call, self.cfg.group_min_session_timeout_ms,
                                       self.cfg.group_max_session_timeout_ms,
                                       self.cfg.group_initial_rebalance_delay_ms)
        await self._start_zookeeper()
        self.tasks = [self.loop.create_task(c) for c in (
            self._controller_loop(), self._isr_loop(), self._checkpoint_loop(), self._flush_loop(),
            self._group_loop())]
        try:
            await self.stopping.wait()
        finally:
            log.info("broker %d shutting down", self.id)
            server.close()
            for t in self.tasks:
                t.cancel()
            for f in self.fetchers.values():
                f.stop()
            for w in list(self.connections):
                w.close()
            self._write_checkpoint()
            for p in self.partitions.values():
                try:
                    p.log.flush()
                except OSError:
                    pass
            if self.zk is not None:
                await self.loop.run_in_executor(None, self._stop_zk)
            self.zk_pool.shutdown(wait=False, cancel_futures=True)
            self.controller_pool.shutdown(wait=False, cancel_futures=True)
            log.info("broker %d stopped", self.id)

    def _stop_zk(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass

    def _load_logs(self) -> None:
        os.makedirs(self.cfg.data_dir, exist_ok=True)
        for name in sorted(os.listdir(self.cfg.data_dir)):
            tp = parse_partition_dir(name)
            if tp is None or not os.path.isdir(os.path.join(self.cfg.data_dir, name)):
                continue
            self._open_partition(tp)

    def _open_partition(self, tp) -> Partition:
        p = self.partitions.get(tp)
        if p is not None:
            return p
        lg = Log(os.path.join(self.cfg.data_dir, partition_dir_name(*tp)), self.cfg.log_segment_bytes,
                 self.cfg.log_index_interval_bytes, self.cfg.log_flush_interval_messages)
        p = Partition(tp[0], tp[1], lg, self.id)
        lg.open(on_batch=p.note_batch)
        p.hw = min(self.checkpoint.get(tp, 0), lg.end_offset)
        log.info("opened log %s: log end %d, checkpointed hw %d%s", p.name, lg.end_offset, p.hw,
                 f", recovery cut {lg.recovered_cut_bytes} bytes" if lg.recovered_cut_bytes else "")
        self.partitions[tp] = p
        return p

    async def _start_zookeeper(self) -> None:
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
        for path in (Z.BROKERS, Z.TOPICS, Z.CONSUMERS):
            await self.zk_call(lambda c, p=path: c.ensure_path(p))
        self.cluster_id = await self.zk_call(_ensure_cluster_id)
        await self._register()
        self.controller = Controller(self.zk, self.id, self.cfg.unclean_leader_election,
                                     self.cfg.bug("elect-any-replica"))
        ChildrenWatch(self.zk, Z.BROKERS, self._watch_brokers)
        ChildrenWatch(self.zk, Z.TOPICS, self._watch_topics)
        DataWatch(self.zk, Z.CONTROLLER, self._watch_controller)

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
                _, stat = await self.zk_call(lambda c: c.get(path))
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
        for tp, st in list(self.states.items()):
            self._apply_state(tp, st)

    def _zk_state_listener(self, state) -> None:
        if state == KazooState.LOST:
            self.post(self._session_lost)
        elif state == KazooState.CONNECTED:
            self.post(self._session_connected)

    def _session_lost(self) -> None:
        log.warning("ZooKeeper session lost: stepping down from every leadership")
        self.czxid = -1
        if self.controller is not None:
            self.controller.resign()
        for tp, p in self.partitions.items():
            if p.role == "leader":
                p.become_offline(p.state, "ZooKeeper session lost")

    def _session_connected(self) -> None:
        if self.czxid == -1 and not self.stopping.is_set():
            self.loop.create_task(self._register())
            self.controller_wakeup.set()

    # ------------------------------------------------------------------------------
    # ZooKeeper watches -> metadata cache and partition roles
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
        if self.groups is not None:
            ids = list(live)
            self.groups.drop_groups(lambda g: coordinator_for(g, ids) == self.id)
        # A follower of a leader that re-registered must reconnect.
        for lid, f in self.fetchers.items():
            if lid in live and f.conn is not None and f.conn.host != live[lid].host:
                f.conn.close()
                f.conn = None

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
        for p, replicas in assignment.items():
            if self.id in replicas:
                part = self._open_partition((topic, p))
                part.replicas = list(replicas)
            elif (topic, p) in self.partitions:
                self.partitions[(topic, p)].replicas = list(replicas)

    def _watch_state(self, topic, p, data, stat, event=None):
        if data is None:
            return True
        try:
            st = PartitionState.from_json(data, stat.version, stat.mzxid)
        except (ValueError, KeyError):
            log.warning("unreadable partition state for %s-%d", topic, p)
            return True
        self.post(self._apply_state, (topic, p), st)
        return True

    def _apply_state(self, tp, st: PartitionState) -> None:
        old = self.states.get(tp)
        if old is not None and old.version > st.version and old.leader_epoch >= st.leader_epoch:
            return  # an older notification arriving late
        self.states[tp] = st
        p = self.partitions.get(tp)
        if p is None:
            return
        if not p.replicas and tp[0] in self.topics:
            p.replicas = list(self.topics[tp[0]].get(tp[1], []))
        if self.id not in p.replicas:
            return
        if st.leader == self.id and self.czxid > 0 and st.incarnations.get(self.id) == self.czxid:
            if p.role == "leader" and p.leader_epoch == st.leader_epoch:
                p.state = st
                p.isr = list(st.isr)
                if p.isr_inflight is not None and p.isr_inflight == st.isr:
                    p.isr_inflight = None
                p.maybe_advance_hw()
                return
            self._stop_following(tp)
            p.become_leader(st)
        elif st.leader >= 0 and st.leader != self.id:
            if p.role == "follower" and p.leader_id == st.leader and p.leader_epoch == st.leader_epoch:
                p.state = st
                p.isr = list(st.isr)
                return
            # Truncate to the HW only when the leader changed (another broker,
            # or a restarted one): following the same incarnation under a new
            # epoch (the controller shrank the ISR), the log is a prefix of the
            # leader's, and cutting it to a stale HW can drop acknowledged
            # records that this replica may soon lead with (as Kafka, which
            # skips followers whose leader is unchanged).
            same_leader = (p.role == "follower" and p.leader_id == st.leader and p.state is not None
                           and st.leader in st.incarnations
                           and p.state.incarnations.get(st.leader) == st.incarnations.get(st.leader))
            self._stop_following(tp)
            bug = self.cfg.bug("skip-truncation")
            note = (" [planted bug skip-truncation: kept records above the HW]" if bug and not same_leader else
                    " (same leader: no truncation)" if same_leader else "")
            p.become_follower(st, truncate=not same_leader and not bug, note=note)
            f = self.fetchers.get(st.leader)
            if f is None:
                f = self.fetchers[st.leader] = Fetcher(self, st.leader)
            f.add(tp, st.leader_epoch)
        else:
            self._stop_following(tp)
            why = "no leader" if st.leader < 0 else "leader state names an earlier incarnation of this broker"
            p.become_offline(st, why)

    def _stop_following(self, tp) -> None:
        for f in self.fetchers.values():
            f.remove(tp)

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
    # background loops
    # ------------------------------------------------------------------------------

    async def _controller_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.controller_wakeup.wait(), 2.0)
            except asyncio.TimeoutError:
                pass
            self.controller_wakeup.clear()
            if self.czxid <= 0:
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

    async def _isr_loop(self) -> None:
        lag = self.cfg.replica_lag_time_max_ms / 1000.0
        tick = max(0.05, min(lag / 4, 0.5))
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            live = {b: info.czxid for b, info in self.live.items()}
            for tp, p in self.partitions.items():
                if p.role != "leader" or p.state is None:
                    continue
                new = p.isr_change_wanted(now, lag, live)
                if new is not None:
                    p.isr_inflight = new
                    self.loop.create_task(self._write_isr(tp, p, new, live))

    async def _write_isr(self, tp, p: Partition, new_isr: list[int], live: dict[int, int]) -> None:
        st = p.state
        old = list(p.isr)
        incarnations = {}
        for r in new_isr:
            if r == self.id:
                incarnations[r] = self.czxid
            elif r in old and r in st.incarnations:
                incarnations[r] = st.incarnations[r]
            else:
                incarnations[r] = live.get(r, -1)
        new_state = PartitionState(leader=st.leader, leader_epoch=st.leader_epoch, isr=list(new_isr),
                                   controller_epoch=st.controller_epoch, incarnations=incarnations)
        path = Z.state_path(*tp)
        try:
            stat = await self.zk_call(lambda c: c.set(path, new_state.to_json(), version=st.version))
        except BadVersionError:
            p.isr_inflight = None
            log.info("ISR %s: conditional write lost (state version %d changed); re-reading", p.name, st.version)
            try:
                data, stat = await self.zk_call(lambda c: c.get(path))
                self._apply_state(tp, PartitionState.from_json(data, stat.version, stat.mzxid))
            except Exception:
                pass
            return
        except Exception as e:
            p.isr_inflight = None
            log.warning("ISR %s: write failed: %s", p.name, e)
            return
        if p.role != "leader" or p.leader_epoch != st.leader_epoch:
            return
        new_state.version = stat.version
        new_state.mzxid = stat.mzxid
        p.state = new_state
        self.states[tp] = new_state
        p.isr = list(new_isr)
        p.isr_inflight = None
        kind = "shrink" if len(new_isr) < len(old) else "expand" if len(new_isr) > len(old) else "change"
        log.info("ISR %s: %s %s -> %s (leader %d, epoch %d, hw %d, log end %d)",
                 p.name, kind, old, new_isr, self.id, st.leader_epoch, p.hw, p.leo)
        p.maybe_advance_hw()

    def _write_checkpoint(self) -> None:
        hws = {tp: p.hw for tp, p in self.partitions.items()}
        try:
            write_checkpoint(self.cfg.data_dir, hws)
        except OSError as e:
            log.warning("could not write the HW checkpoint: %s", e)

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.hw_checkpoint_interval_ms / 1000.0)
            self._write_checkpoint()

    async def _flush_loop(self) -> None:
        interval = self.cfg.log_flush_interval_ms
        if interval is None:
            return
        while True:
            await asyncio.sleep(interval / 1000.0)
            now = time.monotonic()
            for p in self.partitions.values():
                if p.log.dirty and now - p.log.last_flush >= interval / 1000.0:
                    p.log.flush()

    async def _group_loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            self.groups.expire_sessions()

    # ------------------------------------------------------------------------------
    # connections
    # ------------------------------------------------------------------------------

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        self.connections.add(writer)
        queue: asyncio.Queue = asyncio.Queue(maxsize=MAX_IN_FLIGHT)
        inflight: set[asyncio.Task] = set()
        writer_task = self.loop.create_task(self._write_responses(queue, writer, peer))
        idle = self.cfg.connections_max_idle_ms / 1000.0
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(4), idle)
                size = _INT32.unpack(head)[0]
                if size < 8 or size > self.cfg.socket_request_max_bytes:
                    log.debug("closing %s: request size %d out of bounds", peer, size)
                    break
                frame = await asyncio.wait_for(reader.readexactly(size), idle)
                try:
                    api_key, version, corr, client_id, pos = P.parse_request_header(frame)
                except P.BadRequest as e:
                    log.debug("closing %s: %s", peer, e)
                    break
                api = P.APIS.get(api_key)
                if api is None:
                    log.debug("closing %s: unknown api key %d", peer, api_key)
                    break
                req_cls, _, lo, hi = api
                if not lo <= version <= hi:
                    if api_key == P.API_VERSIONS:
                        fut = self.loop.create_future()
                        fut.set_result(P.api_versions_response(0, P.UNSUPPORTED_VERSION))
                        await queue.put((fut, api_key, 0, corr))
                        continue
                    log.debug("closing %s: api %d version %d not supported", peer, api_key, version)
                    break
                try:
                    req = req_cls.decode(memoryview(frame)[pos:], version=version)
                except Exception as e:
                    log.debug("closing %s: undecodable api %d v%d body: %s", peer, api_key, version, e)
                    break
                task = self.loop.create_task(self._dispatch(api_key, version, req, client_id or ""))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                await queue.put((task, api_key, version, corr))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError, OSError):
            pass
        finally:
            # The client is gone or misbehaved: drop what it still waits for (as Kafka does).
            for task in list(inflight):
                task.cancel()
            writer_task.cancel()
            self.connections.discard(writer)
            writer.close()

    async def _write_responses(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, peer) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            fut, api_key, version, corr = item
            try:
                resp = await fut
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("error handling api %d v%d from %s; closing the connection", api_key, version, peer)
                writer.close()
                return
            if resp is None:
                continue  # acks=0 produce: no response
            if writer.is_closing():
                continue
            try:
                frame = P.encode_response(resp, api_key, version, corr)
            except Exception:
                log.exception("cannot encode the api %d v%d response to %s; closing the connection",
                              api_key, version, peer)
                writer.close()
                return
            try:
                writer.write(frame)
                await writer.drain()
            except (ConnectionError, OSError):
                writer.close()

    async def _dispatch(self, api_key: int, version: int, req, client_id: str):
        handler = self.HANDLERS[api_key]
        return await handler(self, req, version, client_id)

    # ------------------------------------------------------------------------------
    # request handlers
    # ------------------------------------------------------------------------------

    async def handle_api_versions(self, req, version, client_id):
        return P.api_versions_response(version)

    def _advertised_brokers(self, resp_cls):
        return [resp_cls.MetadataResponseBroker(node_id=b, host=i.host, port=i.port, rack=None)
                for b, i in sorted(self.live.items())]

    async def handle_metadata(self, req, version, client_id):
        R = P.MetadataResponse
        if req.topics is None or (version == 0 and not req.topics):
            names = sorted(self.topics)
        else:
            names = [t.name for t in req.topics]
        allow_create = self.cfg.auto_create_topics and (version < 4 or req.allow_auto_topic_creation)
        topics = []
        for name in names:
            if name not in self.topics:
                if not Z.valid_topic_name(name or ""):
                    err = P.INVALID_TOPIC_EXCEPTION
                elif allow_create:
                    err = await self._create_topic(name, self.cfg.num_partitions,
                                                   self.cfg.default_replication_factor)
                    err = P.LEADER_NOT_AVAILABLE if err in (P.NONE, P.TOPIC_ALREADY_EXISTS) else err
                else:
                    err = P.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(R.MetadataResponseTopic(error_code=err, name=name, is_internal=False, partitions=[]))
                continue
            parts = []
            for p, replicas in sorted(self.topics[name].items()):
                st = self.states.get((name, p))
                leader = st.leader if st is not None and st.leader in self.live else -1
                parts.append(R.MetadataResponseTopic.MetadataResponsePartition(
                    error_code=P.NONE if leader >= 0 else P.LEADER_NOT_AVAILABLE, partition_index=p,
                    leader_id=leader, leader_epoch=st.leader_epoch if st else -1, replica_nodes=replicas,
                    isr_nodes=st.isr if st else [], offline_replicas=[r for r in replicas if r not in self.live]))
            topics.append(R.MetadataResponseTopic(error_code=P.NONE, name=name, is_internal=False, partitions=parts))
        return R(throttle_time_ms=0, brokers=self._advertised_brokers(R), cluster_id=self.cluster_id,
                 controller_id=self.controller_id, topics=topics)

    async def _create_topic(self, name: str, partitions: int, rf: int, assignment=None,
                            validate_only: bool = False) -> int:
        if name in self.topics:
            return P.TOPIC_ALREADY_EXISTS
        if not Z.valid_topic_name(name):
            return P.INVALID_TOPIC_EXCEPTION
        if assignment is None:
            if partitions < 1:
                return P.INVALID_PARTITIONS
            if rf < 1 or rf > len(self.live):
                return P.INVALID_REPLICATION_FACTOR
            assignment = Z.place_replicas(list(self.live), partitions, rf)
        if validate_only:
            return P.NONE
        try:
            await self.zk_call(lambda c: c.create(Z.topic_path(name), Z.encode_assignment(assignment),
                                                  makepath=True))
        except NodeExistsError:
            return P.TOPIC_ALREADY_EXISTS
        log.info("created topic %s: %d partitions, replicas %s", name, len(assignment), assignment)
        return P.NONE

    async def handle_create_topics(self, req, version, client_id):
        R = P.CreateTopicsResponse
        results = []
        created = []
        for t in req.topics:
            assignment = None
            if t.assignments:
                assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
                if any(not r or any(b not in self.live for b in r) for r in assignment.values()):
                    results.append(R.CreatableTopicResult(name=t.name, error_code=P.INVALID_REPLICATION_FACTOR,
                                                          error_message="assignment names brokers that are not live"))
                    continue
            n = t.num_partitions if t.num_partitions > 0 else self.cfg.num_partitions
            rf = t.replication_factor if t.replication_factor > 0 else self.cfg.default_replication_factor
            err = await self._create_topic(t.name, n, rf, assignment, req.validate_only)
            msg = None if err == P.NONE else {
                P.TOPIC_ALREADY_EXISTS: f"topic {t.name} already exists",
                P.INVALID_REPLICATION_FACTOR: f"replication factor {rf} with {len(self.live)} live brokers",
                P.INVALID_PARTITIONS: f"{n} partitions", P.INVALID_TOPIC_EXCEPTION: "invalid topic name"}.get(err)
            results.append(R.CreatableTopicResult(name=t.name, error_code=err, error_message=msg))
            if err == P.NONE and not req.validate_only:
                created.append(t.name)
        deadline = time.monotonic() + max(0, req.timeout_ms) / 1000.0
        while created and time.monotonic() < deadline:
            if all(t in self.topics and all((t, p) in self.states for p in self.topics[t]) for t in created):
                break
            await asyncio.sleep(0.05)
        return R(throttle_time_ms=0, topics=results)

    def _partition_error(self, topic: str, index: int) -> tuple[Partition | None, int]:
        p = self.partitions.get((topic, index))
        if p is None or topic not in self.topics:
            if (topic in self.topics and index in self.topics[topic]) or p is not None or not self.topics_loaded:
                # Known, or not loaded from ZooKeeper yet: the client should retry elsewhere or later.
                return None, P.NOT_LEADER_OR_FOLLOWER
            return None, P.UNKNOWN_TOPIC_OR_PARTITION
        if p.role != "leader":
            return p, P.NOT_LEADER_OR_FOLLOWER
        return p, P.NONE

    @staticmethod
    def _epoch_error(p: Partition, requested: int) -> int:
        if requested is None or requested < 0:
            return P.NONE
        if requested < p.leader_epoch:
            return P.FENCED_LEADER_EPOCH
        if requested > p.leader_epoch:
            return P.UNKNOWN_LEADER_EPOCH
        return P.NONE

    async def handle_produce(self, req, version, client_id):
        # Everything up to the first await runs at once, so batches are appended in request order.
        R = P.ProduceResponse
        acks = req.acks
        waits = []  # (topic response list, index, partition, last offset, future)
        responses = []
        bug_ack_early = self.cfg.bug("ack-before-replication")
        check_sequences = not self.cfg.bug("no-dedup")
        for td in req.topic_data:
            parts = []
            for pd in td.partition_data:
                base, err, msg = -1, P.NONE, None
                p, err = self._partition_error(td.name, pd.index)
                if acks not in (0, 1, -1):
                    err = P.INVALID_REQUIRED_ACKS
                if err == P.NONE:
                    try:
                        if pd.records is not None and len(pd.records) > self.cfg.message_max_bytes:
                            raise ProduceError(P.MESSAGE_TOO_LARGE, "batch larger than message.max.bytes")
                        try:
                            h = records.validate_produce_batch(pd.records)
                        except records.InvalidBatch as e:
                            raise ProduceError(P.CORRUPT_MESSAGE if "CRC" in str(e) else P.INVALID_RECORD,
                                               str(e)) from None
                        if acks == -1 and len(p.isr) < self.cfg.min_insync_replicas:
                            raise ProduceError(P.NOT_ENOUGH_REPLICAS,
                                               f"isr {p.isr} is smaller than min.insync.replicas "
                                               f"{self.cfg.min_insync_replicas}")
                        base, last, dup = p.append_as_leader(pd.records, h, check_sequences)
                        if acks == -1 and not bug_ack_early:
                            waits.append((len(responses), len(parts), p, last + 1))
                    except ProduceError as e:
                        err, msg = e.code, str(e)
                    except OSError as e:
                        log.error("append to %s failed: %s", p.name, e)
                        err, msg = P.KAFKA_STORAGE_ERROR, str(e)
                parts.append(R.TopicProduceResponse.PartitionProduceResponse(
                    index=pd.index, error_code=err, base_offset=base, log_append_time_ms=-1, log_start_offset=0,
                    record_errors=[], error_message=msg))
            responses.append(R.TopicProduceResponse(name=td.name, partition_responses=parts))
        if acks == 0:
            return None
        if waits:
            futs = [p.wait_for_hw(need) for (_, _, p, need) in waits]
            done, pending = await asyncio.wait(futs, timeout=max(req.timeout_ms, 0) / 1000.0)
            for (ti, pi, p, need), fut in zip(waits, futs):
                pr = responses[ti].partition_responses[pi]
                if fut in done:
                    code = fut.result()
                    if code == P.NONE and len(p.isr) < self.cfg.min_insync_replicas:
                        code = P.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                        pr.error_message = f"isr {p.isr} shrank below min.insync.replicas after the append"
                    pr.error_code = code
                else:
                    pr.error_code = P.REQUEST_TIMED_OUT
                    pr.error_message = "the ISR did not replicate the batch in time"
                    try:
                        p.ack_waiters.remove((need, fut))
                    except ValueError:
                        pass
                    fut.cancel()
                if pr.error_code != P.NONE:
                    pr.base_offset = -1
        return R(responses=responses, throttle_time_ms=0)

    async def handle_fetch(self, req, version, client_id):
        R = P.FetchResponse
        replica = req.replica_id if req.replica_id is not None else -1
        is_follower = replica >= 0
        now = time.monotonic()
        deadline = now + max(req.max_wait_ms, 0) / 1000.0
        wanted = []
        for t in req.topics:
            for fp in t.partitions:
                wanted.append((t.topic, fp.partition, fp.fetch_offset, fp.partition_max_bytes,
                               fp.current_leader_epoch if version >= 9 else -1))
        first = True
        while True:
            results = {}
            total = 0
            any_error = False
            budget = req.max_bytes if req.max_bytes and req.max_bytes > 0 else 50 << 20
            for topic, index, offset, pmax, cur_epoch in wanted:
                p, err = self._partition_error(topic, index)
                data = b""
                hw = -1
                if err == P.NONE:
                    err = self._epoch_error(p, cur_epoch)
                if err == P.NONE:
                    hw = p.hw
                    if is_follower and replica not in p.replicas:
                        err = P.NOT_LEADER_OR_FOLLOWER
                    elif offset > p.leo or offset < p.log.start_offset:
                        err = P.OFFSET_OUT_OF_RANGE
                    else:
                        if is_follower and first:
                            p.record_follower_fetch(replica, offset, now)
                            p.maybe_advance_hw()
                            hw = p.hw
                        limit = p.leo if is_follower else p.hw
                        if budget > 0:
                            data = p.log.read(offset, min(pmax, budget), limit)
                            budget -= len(data)
                            total += len(data)
                if err != P.NONE:
                    any_error = True
                results[(topic, index)] = (err, hw, data, p)
            first = False
            remaining = deadline - time.monotonic()
            if total >= req.min_bytes or any_error or remaining <= 0:
                break
            fut = self.loop.create_future()
            for (_, _, _, p) in results.values():
                p.fetch_waiters.add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                for (_, _, _, p) in results.values():
                    p.fetch_waiters.discard(fut)
        topics = {}
        for topic, index, *_ in wanted:
            err, hw, data, p = results[(topic, index)]
            topics.setdefault(topic, []).append(R.FetchableTopicResponse.PartitionData(
                partition_index=index, error_code=err, high_watermark=hw, last_stable_offset=hw,
                log_start_offset=p.log.start_offset if p is not None else -1, aborted_transactions=None,
                preferred_read_replica=-1, records=data))
        return R(throttle_time_ms=0, error_code=P.NONE, session_id=0,
                 responses=[R.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in topics.items()])

    async def handle_list_offsets(self, req, version, client_id):
        R = P.ListOffsetsResponse
        replica = req.replica_id if req.replica_id is not None else -1
        topics = []
        for t in req.topics:
            parts = []
            for lp in t.partitions:
                p, err = self._partition_error(t.name, lp.partition_index)
                offset, epoch = -1, -1
                if err == P.NONE and version >= 4:
                    err = self._epoch_error(p, lp.current_leader_epoch)
                if err == P.NONE:
                    if lp.timestamp == -1:
                        offset = p.leo if replica >= 0 else p.hw
                        epoch = p.leader_epoch
                    elif lp.timestamp == -2:
                        offset = p.log.start_offset
                        epoch = p.epoch_at(offset)
                    else:
                        found = p.log.offset_for_timestamp(lp.timestamp)
                        if found is not None and (replica >= 0 or found < p.hw):
                            offset = found
                            epoch = p.epoch_at(found)
                parts.append(R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                    partition_index=lp.partition_index, error_code=err, timestamp=-1, offset=offset,
                    leader_epoch=epoch))
            topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return R(throttle_time_ms=0, topics=topics)

    async def handle_offset_for_leader_epoch(self, req, version, client_id):
        R = P.OffsetForLeaderEpochResponse
        topics = []
        for t in req.topics:
            parts = []
            for op in t.partitions:
                p, err = self._partition_error(t.topic, op.partition)
                epoch, end = -1, -1
                if err == P.NONE:
                    err = self._epoch_error(p, op.current_leader_epoch)
                if err == P.NONE:
                    epoch, end = p.end_offset_for_epoch(op.leader_epoch)
                parts.append(R.OffsetForLeaderTopicResult.EpochEndOffset(
                    error_code=err, partition=op.partition, leader_epoch=epoch, end_offset=end))
            topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        return R(throttle_time_ms=0, topics=topics)

    async def handle_init_producer_id(self, req, version, client_id):
        R = P.InitProducerIdResponse
        if req.transactional_id is not None:
            return R(throttle_time_ms=0, error_code=P.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
        try:
            pid = await self.zk_call(_allocate_producer_id)
        except Exception as e:
            log.warning("producer id allocation failed: %s", e)
            return R(throttle_time_ms=0, error_code=P.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1)
        return R(throttle_time_ms=0, error_code=P.NONE, producer_id=pid, producer_epoch=0)

    # -- groups --------------------------------------------------------------------------------

    def _is_coordinator(self, group: str) -> bool:
        return coordinator_for(group, list(self.live)) == self.id

    async def handle_find_coordinator(self, req, version, client_id):
        R = P.FindCoordinatorResponse
        key_type = req.key_type if version >= 1 else 0
        if key_type != 0:
            return R(throttle_time_ms=0, error_code=P.COORDINATOR_NOT_AVAILABLE,
                     error_message="transactions are not supported", node_id=-1, host="", port=-1)
        cid = coordinator_for(req.key or "", list(self.live))
        info = self.live.get(cid)
        if info is None:
            return R(throttle_time_ms=0, error_code=P.COORDINATOR_NOT_AVAILABLE, error_message="no live broker",
                     node_id=-1, host="", port=-1)
        return R(throttle_time_ms=0, error_code=P.NONE, error_message=None, node_id=cid, host=info.host,
                 port=info.port)

    async def handle_join_group(self, req, version, client_id):
        R = P.JoinGroupResponse
        if not self._is_coordinator(req.group_id):
            return R(throttle_time_ms=0, error_code=P.NOT_COORDINATOR, generation_id=-1, protocol_name="",
                     leader="", member_id=req.member_id, members=[])
        res = await self.groups.join(req.group_id, req.member_id, client_id, req.session_timeout_ms,
                                     req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms,
                                     req.protocol_type, [(pr.name, pr.metadata) for pr in req.protocols],
                                     req.group_instance_id if version >= 5 else None, version)
        return R(throttle_time_ms=0, error_code=res.error, generation_id=res.generation,
                 protocol_name=res.protocol_name or "", leader=res.leader or "", member_id=res.member_id,
                 members=[R.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                          for m, i, md in res.members])

    async def handle_sync_group(self, req, version, client_id):
        R = P.SyncGroupResponse
        if not self._is_coordinator(req.group_id):
            return R(throttle_time_ms=0, error_code=P.NOT_COORDINATOR, assignment=b"")
        err, assignment = await self.groups.sync(req.group_id, req.member_id, req.generation_id,
                                                 [(a.member_id, a.assignment) for a in req.assignments])
        return R(throttle_time_ms=0, error_code=err, assignment=assignment)

    async def handle_heartbeat(self, req, version, client_id):
        R = P.HeartbeatResponse
        if not self._is_coordinator(req.group_id):
            return R(throttle_time_ms=0, error_code=P.NOT_COORDINATOR)
        return R(throttle_time_ms=0, error_code=self.groups.heartbeat(req.group_id, req.member_id,
                                                                     req.generation_id))

    async def handle_leave_group(self, req, version, client_id):
        R = P.LeaveGroupResponse
        if not self._is_coordinator(req.group_id):
            return R(throttle_time_ms=0, error_code=P.NOT_COORDINATOR, members=[])
        if version >= 3:
            ids = [m.member_id for m in req.members]
            res = self.groups.leave(req.group_id, ids)
            return R(throttle_time_ms=0, error_code=P.NONE, members=[
                R.MemberResponse(member_id=m, group_instance_id=None, error_code=e) for m, e in res])
        res = self.groups.leave(req.group_id, [req.member_id])
        return R(throttle_time_ms=0, error_code=res[0][1], members=[])

    async def handle_offset_commit(self, req, version, client_id):
        R = P.OffsetCommitResponse
        TR = R.OffsetCommitResponseTopic
        PR = TR.OffsetCommitResponsePartition
        if not self._is_coordinator(req.group_id):
            err = P.NOT_COORDINATOR
        else:
            err = self.groups.commit_allowed(req.group_id, req.member_id or "", req.generation_id_or_member_epoch)
        if err != P.NONE:
            return R(throttle_time_ms=0, topics=[
                TR(name=t.name, partitions=[PR(partition_index=p.partition_index, error_code=err)
                                            for p in t.partitions]) for t in req.topics])
        offsets = [(t.name, p.partition_index, p.committed_offset,
                    p.committed_leader_epoch if version >= 6 else -1, p.committed_metadata)
                   for t in req.topics for p in t.partitions]
        errors = await self.groups.store_offsets(req.group_id, offsets)
        return R(throttle_time_ms=0, topics=[
            TR(name=t.name, partitions=[PR(partition_index=p.partition_index,
                                           error_code=errors.get((t.name, p.partition_index), P.NONE))
                                        for p in t.partitions]) for t in req.topics])

    async def handle_offset_fetch(self, req, version, client_id):
        R = P.OffsetFetchResponse
        TR = R.OffsetFetchResponseTopic
        PR = TR.OffsetFetchResponsePartition
        if not self._is_coordinator(req.group_id):
            return R(throttle_time_ms=0, topics=[], error_code=P.NOT_COORDINATOR)
        wanted = None if req.topics is None else {t.name: list(t.partition_indexes) for t in req.topics}
        try:
            found = await self.groups.fetch_offsets(req.group_id, wanted)
        except Exception as e:
            log.warning("offset fetch for %s failed: %s", req.group_id, e)
            return R(throttle_time_ms=0, topics=[], error_code=P.COORDINATOR_NOT_AVAILABLE)
        by_topic: dict[str, list] = {}
        for (topic, p), (off, epoch, meta) in sorted(found.items()):
            by_topic.setdefault(topic, []).append(PR(partition_index=p, committed_offset=off,
                                                     committed_leader_epoch=epoch, metadata=meta or "",
                                                     error_code=P.NONE))
        return R(throttle_time_ms=0, topics=[TR(name=t, partitions=ps) for t, ps in by_topic.items()],
                 error_code=P.NONE)

    HANDLERS = {
        0: handle_produce, 1: handle_fetch, 2: handle_list_offsets, 3: handle_metadata, 8: handle_offset_commit,
        9: handle_offset_fetch, 10: handle_find_coordinator, 11: handle_join_group, 12: handle_heartbeat,
        13: handle_leave_group, 14: handle_sync_group, 18: handle_api_versions, 19: handle_create_topics,
        22: handle_init_producer_id, 23: handle_offset_for_leader_epoch,
    }


def _ensure_cluster_id(client) -> str:
    import uuid
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


def _allocate_producer_id(client) -> int:
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
