"""The replica manager (Kafka's ReplicaManager): every partition replica
this broker holds, their logs on disk, their roles, and the work that
keeps them replicated.

It opens the logs at start-up (recovery happens in broker/storage.py),
turns partition states from ZooKeeper into leader or follower roles, runs
one fetcher per leader (broker/fetcher.py), shrinks and expands the ISR
of the partitions it leads (writing the new ISR to ZooKeeper first),
checkpoints every HW, and flushes logs per the flush policy.  The request
handlers ask it which replica serves a partition (`partition_error`) and
whether a request's leader epoch is current (`epoch_error`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from kazoo.exceptions import BadVersionError

from broker import protocol as P
from broker import zk as Z
from broker.config import BrokerConfig
from broker.fetcher import Fetcher
from broker.metadata import BrokerInfo, Metadata
from broker.partition import Partition
from broker.storage import Log, parse_partition_dir, partition_dir_name, read_checkpoint, write_checkpoint
from broker.zk import PartitionState

log = logging.getLogger("broker")


class ReplicaManager:
    def __init__(self, cfg: BrokerConfig, metadata: Metadata):
        self.cfg = cfg
        self.id = cfg.broker_id
        self.metadata = metadata
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetchers: dict[int, Fetcher] = {}
        self.checkpoint = read_checkpoint(cfg.data_dir)

    @property
    def live(self) -> dict[int, BrokerInfo]:
        return self.metadata.live

    # ------------------------------------------------------------------------------
    # logs
    # ------------------------------------------------------------------------------

    def load_logs(self) -> None:
        os.makedirs(self.cfg.data_dir, exist_ok=True)
        for name in sorted(os.listdir(self.cfg.data_dir)):
            tp = parse_partition_dir(name)
            if tp is None or not os.path.isdir(os.path.join(self.cfg.data_dir, name)):
                continue
            self.open_partition(tp)

    def open_partition(self, tp) -> Partition:
        p = self.partitions.get(tp)
        if p is not None:
            return p
        lg = Log(os.path.join(self.cfg.data_dir, partition_dir_name(*tp)), self.cfg.log_segment_bytes,
                 self.cfg.log_index_interval_bytes, self.cfg.log_flush_interval_messages)
        p = Partition(tp[0], tp[1], lg, self.id)
        lg.open(on_batch=p.note_batch)
        p.recover_epochs()
        p.hw = min(self.checkpoint.get(tp, 0), lg.end_offset)
        log.info("opened log %s: log end %d, checkpointed hw %d, leader epochs %s%s", p.name, lg.end_offset, p.hw,
                 p.epochs[-3:], f", recovery cut {lg.recovered_cut_bytes} bytes" if lg.recovered_cut_bytes else "")
        self.partitions[tp] = p
        return p

    def shutdown(self) -> None:
        for f in self.fetchers.values():
            f.stop()
        self.write_checkpoint()
        for p in self.partitions.values():
            try:
                p.log.flush()
            except OSError:
                pass

    # ------------------------------------------------------------------------------
    # metadata changes -> replicas and roles
    # ------------------------------------------------------------------------------

    def add_topic(self, topic: str, assignment: dict[int, list[int]]) -> None:
        for p, replicas in assignment.items():
            if self.id in replicas:
                part = self.open_partition((topic, p))
                part.replicas = list(replicas)
            elif (topic, p) in self.partitions:
                self.partitions[(topic, p)].replicas = list(replicas)

    def live_changed(self, live: dict[int, BrokerInfo]) -> None:
        # A follower of a leader that re-registered must reconnect.
        for lid, f in self.fetchers.items():
            if lid in live and f.conn is not None and f.conn.host != live[lid].host:
                f.conn.close()
                f.conn = None

    def step_down_all(self, why: str) -> None:
        for p in self.partitions.values():
            if p.role == "leader":
                p.become_offline(p.state, why)

    def apply_state(self, tp, st: PartitionState) -> None:
        """Makes this broker's replica of `tp` leader, follower or neither, as `st` says."""
        p = self.partitions.get(tp)
        if p is None:
            return
        topics = self.metadata.topics
        if not p.replicas and tp[0] in topics:
            p.replicas = list(topics[tp[0]].get(tp[1], []))
        if self.id not in p.replicas:
            return
        czxid = self.metadata.czxid
        if st.leader == self.id and self.metadata.session_ok and st.incarnations.get(self.id) == czxid:
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
            self._stop_following(tp)
            bug = self.cfg.bug("skip-truncation")
            if self.cfg.replica_truncation == "leader-epoch":
                # Every new leader or epoch: ask the leader where our latest epoch ends
                # and cut exactly there (the fetcher does it before its first fetch).
                # No shortcut for an unchanged leader: between two states ZooKeeper may
                # have coalesced a leadership elsewhere (leader A, B, A again).
                by_epoch = not bug
                note = (" [planted bug skip-truncation: no truncation]" if bug else
                        f" (truncation: asking leader {st.leader} where epoch {p.epochs[-1][0]} ends)" if p.epochs
                        else " (empty leader-epoch cache: nothing to truncate)")
                p.become_follower(st, truncate=False, note=note)
            else:
                # replica.truncation = high-watermark, the seeds' scheme (known to lose
                # committed records, docs/broker.md).  Truncate to the HW only when the
                # leader changed (another broker, or a restarted one): following the same
                # incarnation under a new epoch (the controller shrank the ISR), the log is
                # a prefix of the leader's, and cutting it to a stale HW can drop
                # acknowledged records that this replica may soon lead with (as Kafka
                # before KIP-101, which skipped followers whose leader is unchanged).
                by_epoch = False
                same_leader = (p.role == "follower" and p.leader_id == st.leader and p.state is not None
                               and st.leader in st.incarnations
                               and p.state.incarnations.get(st.leader) == st.incarnations.get(st.leader))
                note = (" [planted bug skip-truncation: kept records above the HW]" if bug and not same_leader else
                        " (same leader: no truncation)" if same_leader else
                        f" (truncated to the hw {p.hw}: replica.truncation = high-watermark)")
                if not same_leader and not bug and p.leo > p.hw:
                    p.note_truncation(p.hw, st.leader, st.leader_epoch, "high watermark",
                                      "replica.truncation = high-watermark; on a new leader")
                p.become_follower(st, truncate=not same_leader and not bug, note=note)
            f = self.fetchers.get(st.leader)
            if f is None:
                f = self.fetchers[st.leader] = Fetcher(self, st.leader)
            f.add(tp, st.leader_epoch, truncate_by_epoch=by_epoch)
        else:
            self._stop_following(tp)
            why = "no leader" if st.leader < 0 else "leader state names an earlier incarnation of this broker"
            p.become_offline(st, why)

    def _stop_following(self, tp) -> None:
        for f in self.fetchers.values():
            f.remove(tp)

    # ------------------------------------------------------------------------------
    # serving: which replica answers, and is the request's epoch current
    # ------------------------------------------------------------------------------

    def partition_error(self, topic: str, index: int) -> tuple[Partition | None, int]:
        p = self.partitions.get((topic, index))
        topics = self.metadata.topics
        if p is None or topic not in topics:
            if (topic in topics and index in topics[topic]) or p is not None or not self.metadata.topics_loaded:
                # Known, or not loaded from ZooKeeper yet: the client should retry elsewhere or later.
                return None, P.NOT_LEADER_OR_FOLLOWER
            return None, P.UNKNOWN_TOPIC_OR_PARTITION
        if p.role != "leader":
            return p, P.NOT_LEADER_OR_FOLLOWER
        return p, P.NONE

    def epoch_error(self, p: Partition, requested: int, who: str = "a client") -> int:
        """KIP-320: a request names the leader epoch it believes current; the leader checks it.

        Older than ours: the requester is behind (FENCED_LEADER_EPOCH).  Newer:
        this leader is behind (UNKNOWN_LEADER_EPOCH), and since a newer epoch
        may mean that another replica leads already, this one is fenced (no
        acks, no HW advance) until ZooKeeper says which it is.
        """
        if requested is None or requested < 0:
            return P.NONE
        if requested < p.leader_epoch:
            return P.FENCED_LEADER_EPOCH
        if requested > p.leader_epoch:
            if p.fence(requested, who):
                asyncio.get_running_loop().create_task(self._settle_fence((p.topic, p.index), p))
            return P.UNKNOWN_LEADER_EPOCH
        return P.NONE

    async def _settle_fence(self, tp, p: Partition) -> None:
        """Reads the partition's state from ZooKeeper until it settles a fenced leader's role.

        A newer state is applied (this broker follows, or leads under the new
        epoch); a state that still names this broker at its epoch means the
        newer epoch was never written (a confused client), and the fence is
        lifted.  While ZooKeeper cannot be read the fence stays: the session
        timeout then ends the leadership anyway.
        """
        path = Z.state_path(*tp)
        while p.role == "leader" and p.fenced_by >= 0:
            try:
                data, stat = await self.metadata.zk_call(lambda c: c.get(path))
                st = PartitionState.from_json(data, stat.version, stat.mzxid)
            except Exception as e:
                log.info("%s: fenced, and ZooKeeper cannot be read (%s); retrying", p.name, e)
                await asyncio.sleep(1.0)
                continue
            if p.role != "leader" or p.fenced_by < 0:
                return
            if st.leader_epoch > p.leader_epoch:
                self.metadata.apply_state(tp, st)
                return
            if st.leader == self.id and st.leader_epoch == p.leader_epoch:
                p.unfence(f"ZooKeeper still names broker {self.id} leader at epoch {st.leader_epoch}")
                return
            await asyncio.sleep(0.5)

    # ------------------------------------------------------------------------------
    # ISR, checkpoints, flushing
    # ------------------------------------------------------------------------------

    async def isr_loop(self) -> None:
        lag = self.cfg.replica_lag_time_max_ms / 1000.0
        tick = max(0.05, min(lag / 4, 0.5))
        join_early = self.cfg.bug("early-isr-join")
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            live = {b: info.czxid for b, info in self.live.items()}
            for tp, p in self.partitions.items():
                if p.role != "leader" or p.state is None:
                    continue
                new = p.isr_change_wanted(now, lag, live, join_early)
                if new is not None:
                    p.isr_inflight = new
                    # Where each joining follower stood when the leader let it in (the log shows it).
                    joined = "".join(f"; {r} joined at log end {p.replica_leo(r)} with the hw at {p.hw}"
                                     for r in new if r not in p.isr)
                    asyncio.get_running_loop().create_task(self._write_isr(tp, p, new, live, joined))

    async def _write_isr(self, tp, p: Partition, new_isr: list[int], live: dict[int, int], joined: str = "") -> None:
        st = p.state
        old = list(p.isr)
        incarnations = {}
        for r in new_isr:
            if r == self.id:
                incarnations[r] = self.metadata.czxid
            elif r in old and r in st.incarnations:
                incarnations[r] = st.incarnations[r]
            else:
                incarnations[r] = live.get(r, -1)
        new_state = PartitionState(leader=st.leader, leader_epoch=st.leader_epoch, isr=list(new_isr),
                                   controller_epoch=st.controller_epoch, incarnations=incarnations)
        path = Z.state_path(*tp)
        try:
            stat = await self.metadata.zk_call(lambda c: c.set(path, new_state.to_json(), version=st.version))
        except BadVersionError:
            p.isr_inflight = None
            log.info("ISR %s: conditional write lost (state version %d changed); re-reading", p.name, st.version)
            try:
                data, stat = await self.metadata.zk_call(lambda c: c.get(path))
                self.metadata.apply_state(tp, PartitionState.from_json(data, stat.version, stat.mzxid))
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
        self.metadata.set_state_written(tp, new_state)
        p.isr = list(new_isr)
        p.isr_inflight = None
        kind = "shrink" if len(new_isr) < len(old) else "expand" if len(new_isr) > len(old) else "change"
        log.info("ISR %s: %s %s -> %s (leader %d, epoch %d, hw %d, log end %d%s)",
                 p.name, kind, old, new_isr, self.id, st.leader_epoch, p.hw, p.leo, joined)
        p.maybe_advance_hw()

    def write_checkpoint(self) -> None:
        hws = {tp: p.hw for tp, p in self.partitions.items()}
        try:
            write_checkpoint(self.cfg.data_dir, hws)
        except OSError as e:
            log.warning("could not write the HW checkpoint: %s", e)

    async def checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.hw_checkpoint_interval_ms / 1000.0)
            self.write_checkpoint()

    async def flush_loop(self) -> None:
        interval = self.cfg.log_flush_interval_ms
        if interval is None:
            return
        while True:
            await asyncio.sleep(interval / 1000.0)
            now = time.monotonic()
            for p in self.partitions.values():
                if p.log.dirty and now - p.log.last_flush >= interval / 1000.0:
                    p.log.flush()
