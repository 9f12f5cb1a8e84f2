"""Consumer group coordinator (Kafka's classic protocol) with offsets kept in ZooKeeper.

Offsets committed inside a transaction (TxnOffsetCommit) wait in ZooKeeper
beside the committed ones until the transaction coordinator ends the
transaction (`finish_txn_offsets`): only a commit makes them visible.

A group lives on one broker, chosen from the sorted live brokers by a
stable hash of its name; the others answer NOT_COORDINATOR.  Membership
is in memory (a coordinator move makes members rejoin); committed offsets
are durable, one znode per group/topic/partition as early Kafka kept them.

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable.
A JoinGroup from a new member (v4+) first gets MEMBER_ID_REQUIRED with its
id; joins wait until every known member rejoined (or the rebalance timeout
drops the laggards); SyncGroup hands out the leader's assignment;
heartbeats answer REBALANCE_IN_PROGRESS during a rebalance and
ILLEGAL_GENERATION to a stale generation; a member silent for its session
timeout is removed and the group rebalances.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
import zlib
from dataclasses import dataclass, field

from kazoo.exceptions import NoNodeError

from broker import protocol as P
from broker import zk as Z

log = logging.getLogger("broker.groups")


def coordinator_for(group: str, live: list[int]) -> int:
    ids = sorted(live)
    if not ids:
        return -1
    return ids[zlib.crc32(group.encode()) % len(ids)]


@dataclass
class Member:
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list  # [(name, metadata bytes)]
    group_instance_id: str | None = None
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    assignment: bytes = b""
    last_heartbeat: float = field(default_factory=time.monotonic)

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class JoinResult:
    error: int
    generation: int = -1
    protocol_name: str | None = ""
    leader: str = ""
    member_id: str = ""
    members: list = field(default_factory=list)  # [(member_id, instance_id, metadata)]


class Group:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.state = "Empty"
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.pending: set[str] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.initial_delay_until = 0.0

    def __repr__(self):
        return f"group {self.group_id!r} ({self.state}, generation {self.generation}, members {list(self.members)})"


class GroupCoordinator:
    def __init__(self, broker_id: int, zk_call, min_session_ms: int, max_session_ms: int, initial_delay_ms: int,
                 offsets_in_memory: bool = False, stale_cache: bool = False):
        self.broker_id = broker_id
        self.zk_call = zk_call  # async fn(callable, *args) running a kazoo call in a thread
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.initial_delay_ms = initial_delay_ms
        self.groups: dict[str, Group] = {}
        # Planted bug commit-in-memory: committed offsets kept here, where no other broker finds them.
        self.offsets_in_memory = offsets_in_memory
        self.memory: dict[tuple[str, str, int], tuple[int, int, str]] = {}
        # Planted bug stale-offset-cache: what this coordinator committed, answered from
        # here ever after, though another coordinator may have committed since.
        self.stale_cache = stale_cache
        self.cache: dict[tuple[str, str, int], tuple[int, int, str]] = {}

    def group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        return g

    # -- JoinGroup ---------------------------------------------------------------------

    async def join(self, group_id, member_id, client_id, session_timeout_ms, rebalance_timeout_ms,
                   protocol_type, protocols, instance_id, version) -> JoinResult:
        if not group_id:
            return JoinResult(P.INVALID_GROUP_ID, member_id=member_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return JoinResult(P.INVALID_SESSION_TIMEOUT, member_id=member_id)
        if not protocols:
            return JoinResult(P.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        g = self.group(group_id)
        if g.members and (protocol_type != g.protocol_type
                          or not self._common_protocols(g, [n for n, _ in protocols])):
            return JoinResult(P.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if not member_id:
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if version >= 4:
                g.pending.add(new_id)
                return JoinResult(P.MEMBER_ID_REQUIRED, member_id=new_id)
            member_id = new_id
        elif member_id not in g.members and member_id not in g.pending:
            return JoinResult(P.UNKNOWN_MEMBER_ID, member_id=member_id)
        g.pending.discard(member_id)
        loop = asyncio.get_running_loop()
        m = g.members.get(member_id)
        unchanged = m is not None and m.protocols == list(protocols)
        if m is None:
            m = Member(member_id, client_id, session_timeout_ms, rebalance_timeout_ms or session_timeout_ms,
                       protocol_type, list(protocols), instance_id)
            g.members[member_id] = m
            log.info("GROUP %s: member %s joined", g.group_id, member_id)
        else:
            m.protocols = list(protocols)
            m.session_timeout_ms = session_timeout_ms
            m.rebalance_timeout_ms = rebalance_timeout_ms or session_timeout_ms
        m.last_heartbeat = time.monotonic()
        if g.protocol_type is None:
            g.protocol_type = protocol_type
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(P.REBALANCE_IN_PROGRESS, member_id=member_id))
        m.join_future = loop.create_future()
        if g.state in ("Stable", "CompletingRebalance") and unchanged and member_id != g.leader_id:
            # Nothing changed for this member: hand back the current generation.
            fut, m.join_future = m.join_future, None
            return self._join_result(g, m)
        fut = m.join_future  # may be completed (and cleared from m) right below
        if g.state != "PreparingRebalance":
            self._prepare_rebalance(g, f"member {member_id} joined")
        else:
            self._maybe_complete_join(g)
        return await fut

    def _common_protocols(self, g: Group, names) -> list[str]:
        common = list(names)
        for m in g.members.values():
            have = {n for n, _ in m.protocols}
            common = [n for n in common if n in have]
        return common

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.state == "CompletingRebalance":
            for m in g.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result((P.REBALANCE_IN_PROGRESS, b""))
                m.sync_future = None
        was_empty = g.state == "Empty"
        g.state = "PreparingRebalance"
        log.info("GROUP %s: rebalancing (generation %d): %s", g.group_id, g.generation, reason)
        loop = asyncio.get_running_loop()
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000.0
        if g.timer is not None:
            g.timer.cancel()
        if was_empty and self.initial_delay_ms > 0:
            g.initial_delay_until = time.monotonic() + min(self.initial_delay_ms / 1000.0, timeout or 1e9)
            g.timer = loop.call_later(g.initial_delay_until - time.monotonic(), self._initial_delay_over, g)
        else:
            g.initial_delay_until = 0.0
            g.timer = loop.call_later(timeout, self._rebalance_timeout, g)
            self._maybe_complete_join(g)

    def _initial_delay_over(self, g: Group) -> None:
        g.initial_delay_until = 0.0
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000.0
        g.timer = asyncio.get_running_loop().call_later(timeout, self._rebalance_timeout, g)
        self._maybe_complete_join(g)

    def _rebalance_timeout(self, g: Group) -> None:
        if g.state != "PreparingRebalance":
            return
        for mid in [mid for mid, m in g.members.items() if m.join_future is None]:
            log.info("GROUP %s: member %s did not rejoin in time; removed", g.group_id, mid)
            del g.members[mid]
        self._complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != "PreparingRebalance" or time.monotonic() < g.initial_delay_until:
            return
        if all(m.join_future is not None for m in g.members.values()):
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.timer is not None:
            g.timer.cancel()
            g.timer = None
        g.generation += 1
        if not g.members:
            g.state = "Empty"
            g.protocol_type = g.protocol_name = g.leader_id = None
            log.info("GROUP %s: empty at generation %d", g.group_id, g.generation)
            return
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        leader = g.members[g.leader_id]
        common = self._common_protocols(g, [n for n, _ in leader.protocols])
        g.protocol_name = common[0] if common else leader.protocols[0][0]
        g.state = "CompletingRebalance"
        log.info("GROUP %s: generation %d, leader %s, members %s, protocol %s",
                 g.group_id, g.generation, g.leader_id, list(g.members), g.protocol_name)
        now = time.monotonic()
        for m in g.members.values():
            m.last_heartbeat = now
            fut, m.join_future = m.join_future, None
            if fut is not None and not fut.done():
                fut.set_result(self._join_result(g, m))

    def _join_result(self, g: Group, m: Member) -> JoinResult:
        members = []
        if m.member_id == g.leader_id:
            members = [(x.member_id, x.group_instance_id, x.metadata_for(g.protocol_name))
                       for x in g.members.values()]
        return JoinResult(P.NONE, g.generation, g.protocol_name, g.leader_id, m.member_id, members)

    # -- SyncGroup / Heartbeat / LeaveGroup ------------------------------------------------

    def _check_member(self, group_id, member_id, generation) -> tuple[int, Group | None, Member | None]:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return P.UNKNOWN_MEMBER_ID, g, None
        if generation != g.generation:
            return P.ILLEGAL_GENERATION, g, g.members[member_id]
        return P.NONE, g, g.members[member_id]

    async def sync(self, group_id, member_id, generation, assignments) -> tuple[int, bytes]:
        err, g, m = self._check_member(group_id, member_id, generation)
        if err:
            return err, b""
        m.last_heartbeat = time.monotonic()
        if g.state == "PreparingRebalance":
            return P.REBALANCE_IN_PROGRESS, b""
        if g.state == "Stable":
            return P.NONE, m.assignment
        m.sync_future = asyncio.get_running_loop().create_future()
        if member_id == g.leader_id:
            given = dict(assignments)
            for x in g.members.values():
                x.assignment = given.get(x.member_id, b"")
            g.state = "Stable"
            log.info("GROUP %s: stable at generation %d", g.group_id, g.generation)
            for x in g.members.values():
                if x.sync_future is not None and not x.sync_future.done():
                    x.sync_future.set_result((P.NONE, x.assignment))
                x.sync_future = None
        fut = m.sync_future
        if fut is None:
            return P.NONE, m.assignment
        return await fut

    def heartbeat(self, group_id, member_id, generation) -> int:
        err, g, m = self._check_member(group_id, member_id, generation)
        if m is not None:
            m.last_heartbeat = time.monotonic()
        if err:
            return err
        if g.state == "PreparingRebalance":
            return P.REBALANCE_IN_PROGRESS
        return P.NONE

    def leave(self, group_id, member_ids) -> list[tuple[str, int]]:
        g = self.groups.get(group_id)
        out = []
        for mid in member_ids:
            if g is None or mid not in g.members:
                out.append((mid, P.UNKNOWN_MEMBER_ID))
                continue
            self._remove_member(g, mid, "left the group")
            out.append((mid, P.NONE))
        return out

    def _remove_member(self, g: Group, mid: str, why: str) -> None:
        m = g.members.pop(mid)
        log.info("GROUP %s: member %s %s", g.group_id, mid, why)
        for fut in (m.join_future, m.sync_future):
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(P.UNKNOWN_MEMBER_ID, member_id=mid) if fut is m.join_future
                               else (P.UNKNOWN_MEMBER_ID, b""))
        if g.state == "PreparingRebalance":
            self._maybe_complete_join(g)
        elif g.state in ("Stable", "CompletingRebalance"):
            if g.members:
                self._prepare_rebalance(g, f"member {mid} {why}")
            else:
                g.generation += 1
                g.state = "Empty"
                g.protocol_type = g.protocol_name = g.leader_id = None

    def expire_sessions(self) -> None:
        now = time.monotonic()
        for g in list(self.groups.values()):
            for mid, m in list(g.members.items()):
                waiting = m.join_future is not None or (m.sync_future is not None and not m.sync_future.done())
                if not waiting and now - m.last_heartbeat > m.session_timeout_ms / 1000.0:
                    self._remove_member(g, mid, f"session timed out ({m.session_timeout_ms} ms)")

    def drop_groups(self, keep) -> None:
        """Forgets groups this broker no longer coordinates (`keep(group_id)` is False)."""
        for gid in [gid for gid in self.groups if not keep(gid)]:
            g = self.groups.pop(gid)
            if g.timer is not None:
                g.timer.cancel()
            for m in g.members.values():
                if m.join_future is not None and not m.join_future.done():
                    m.join_future.set_result(JoinResult(P.NOT_COORDINATOR, member_id=m.member_id))
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result((P.NOT_COORDINATOR, b""))
            log.info("GROUP %s: no longer coordinated by broker %d", gid, self.broker_id)

    # -- offsets ----------------------------------------------------------------------------

    def commit_allowed(self, group_id, member_id, generation) -> int:
        g = self.groups.get(group_id)
        if generation < 0 and not member_id:
            if g is not None and g.members:
                return P.UNKNOWN_MEMBER_ID if g.state != "Empty" else P.NONE
            return P.NONE
        err, g, m = self._check_member(group_id, member_id, generation)
        if err:
            return err
        m.last_heartbeat = time.monotonic()
        if g.state in ("PreparingRebalance", "CompletingRebalance"):
            return P.REBALANCE_IN_PROGRESS
        return P.NONE

    async def store_offsets(self, group_id: str, offsets) -> dict:
        """offsets: [(topic, partition, offset, leader_epoch, metadata)] -> {(topic, p): error}."""
        if self.offsets_in_memory:
            for topic, p, off, epoch, meta in offsets:
                self.memory[(group_id, topic, p)] = (off, epoch, meta or "")
            return {(topic, p): P.NONE for topic, p, *_ in offsets}

        def write(client):
            errors = {}
            for topic, p, off, epoch, meta in offsets:
                path = Z.offset_path(group_id, topic, p)
                data = json.dumps({"offset": off, "leader_epoch": epoch, "metadata": meta or ""}).encode()
                try:
                    try:
                        client.set(path, data)
                    except NoNodeError:
                        client.create(path, data, makepath=True)
                    errors[(topic, p)] = P.NONE
                    if self.stale_cache:
                        self.cache[(group_id, topic, p)] = (off, epoch, meta or "")
                except Exception as e:  # connection loss: the client retries
                    log.warning("offset commit %s %s-%d failed: %s", group_id, topic, p, e)
                    errors[(topic, p)] = P.COORDINATOR_NOT_AVAILABLE
            return errors
        return await self.zk_call(write)

    async def fetch_offsets(self, group_id: str, wanted) -> dict:
        """wanted: {topic: [partitions]} or None for all -> {(topic, p): (offset, epoch, metadata)}."""
        if self.offsets_in_memory:
            kept = {(t, p): v for (g, t, p), v in self.memory.items() if g == group_id}
            if wanted is None:
                return kept
            return {(t, p): kept.get((t, p), (-1, -1, "")) for t, parts in wanted.items()
                    for p in (parts if parts is not None else sorted(q for s, q in kept if s == t))}

        def read(client):
            out = {}
            base = f"{Z.CONSUMERS}/{group_id}/offsets"
            topics = wanted
            if topics is None:
                try:
                    topics = {t: None for t in client.get_children(base)}
                except NoNodeError:
                    return out
            for topic, parts in topics.items():
                if parts is None:
                    try:
                        parts = [int(x) for x in client.get_children(f"{base}/{topic}")]
                    except NoNodeError:
                        parts = []
                for p in parts:
                    if (group_id, topic, p) in self.cache:
                        out[(topic, p)] = self.cache[(group_id, topic, p)]
                        continue
                    try:
                        d = json.loads(client.get(Z.offset_path(group_id, topic, p))[0])
                        out[(topic, p)] = (int(d["offset"]), int(d.get("leader_epoch", -1)), d.get("metadata", ""))
                    except NoNodeError:
                        out[(topic, p)] = (-1, -1, "")
            return out
        return await self.zk_call(read)

    # -- transactional offsets (TxnOffsetCommit) ---------------------------------------------

    async def unstable_partitions(self, group_id: str) -> set:
        """The (topic, partition)s a transaction holds offsets of in the group, not
        ended yet: an OffsetFetch that requires stable offsets (KIP-447) is told
        UNSTABLE_OFFSET_COMMIT for them, and asks again, rather than read an offset
        a commit already acknowledged is about to replace."""

        def read(client):
            found = set()
            try:
                producers = client.get_children(Z.txn_offsets_dir(group_id))
            except NoNodeError:
                return found
            for pid in producers:
                try:
                    d = json.loads(client.get(f"{Z.txn_offsets_dir(group_id)}/{pid}")[0])
                except NoNodeError:
                    continue
                found.update((t, int(p)) for t, p, *_ in d["offsets"])
            return found
        return await self.zk_call(read)

    async def store_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, offsets) -> int:
        """Keeps a transaction's offsets aside, invisible to offset fetches, until the
        transaction ends (finish_txn_offsets). An older epoch of the producer is fenced."""

        def write(client):
            path = Z.txn_offsets_path(group_id, producer_id)
            try:
                data, stat = client.get(path)
                d = json.loads(data)
            except NoNodeError:
                d, stat = None, None
            if d is not None and int(d["producer_epoch"]) > producer_epoch:
                return P.INVALID_PRODUCER_EPOCH
            kept = {} if d is None or int(d["producer_epoch"]) != producer_epoch else \
                {(t, p): (t, p, off, e, m) for t, p, off, e, m in d["offsets"]}
            for topic, p, off, epoch, meta in offsets:
                kept[(topic, p)] = (topic, p, off, epoch, meta or "")
            new = json.dumps({"producer_epoch": producer_epoch, "offsets": list(kept.values())}).encode()
            if stat is None:
                client.create(path, new, makepath=True)
            else:
                client.set(path, new, version=stat.version)
            return P.NONE
        try:
            return await self.zk_call(write)
        except Exception as e:  # a lost race or a connection loss: the producer retries
            log.warning("transactional offset commit %s (producer %d) failed: %s", group_id, producer_id, e)
            return P.COORDINATOR_NOT_AVAILABLE


def finish_txn_offsets(client, group_id: str, producer_id: int, commit: bool) -> int:
    """Ends a transaction's offsets in a group (kazoo, in a ZooKeeper thread): a commit
    makes them the group's committed offsets, an abort drops them. Idempotent: a
    repeat finds nothing pending. Returns how many offsets were committed."""
    path = Z.txn_offsets_path(group_id, producer_id)
    try:
        d = json.loads(client.get(path)[0])
    except NoNodeError:
        return 0
    n = 0
    if commit:
        for topic, p, off, epoch, meta in d["offsets"]:
            data = json.dumps({"offset": off, "leader_epoch": epoch, "metadata": meta or ""}).encode()
            opath = Z.offset_path(group_id, topic, p)
            try:
                client.set(opath, data)
            except NoNodeError:
                client.create(opath, data, makepath=True)
            n += 1
    try:
        client.delete(path)
    except NoNodeError:
        pass
    return n
