"""The consumer-group APIs: FindCoordinator (also for transactional ids), JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, and DescribeGroups and
ListGroups (what `kafka-consumer-groups --describe` and an admin client's
describe ask, such as which broker coordinates a group).

Each checks that this broker coordinates the group (a stable hash over
the live brokers, broker/groups.py) and hands the request to the group
coordinator; the others answer NOT_COORDINATOR.
"""

from __future__ import annotations

import logging

from broker import protocol as P
from broker.groups import GroupCoordinator, coordinator_for
from broker.metadata import Metadata

log = logging.getLogger("broker")


class GroupApis:
    def __init__(self, broker_id: int, metadata: Metadata, groups: GroupCoordinator):
        self.id = broker_id
        self.metadata = metadata
        self.groups = groups

    def handlers(self) -> dict:
        return {P.FIND_COORDINATOR: self.handle_find_coordinator, P.JOIN_GROUP: self.handle_join_group,
                P.SYNC_GROUP: self.handle_sync_group, P.HEARTBEAT: self.handle_heartbeat,
                P.LEAVE_GROUP: self.handle_leave_group, P.OFFSET_COMMIT: self.handle_offset_commit,
                P.OFFSET_FETCH: self.handle_offset_fetch, P.DESCRIBE_GROUPS: self.handle_describe_groups,
                P.LIST_GROUPS: self.handle_list_groups}

    def _is_coordinator(self, group: str) -> bool:
        return coordinator_for(group, list(self.metadata.live)) == self.id

    async def handle_describe_groups(self, req, version, client_id):
        R = P.DescribeGroupsResponse
        G = R.DescribedGroup
        M = G.DescribedGroupMember
        described = []
        for group_id in req.groups:
            if not self._is_coordinator(group_id):
                described.append(G(error_code=P.NOT_COORDINATOR, group_id=group_id, group_state="",
                                   protocol_type="", protocol_data="", members=[]))
                continue
            g = self.groups.groups.get(group_id)
            if g is None:  # a group this coordinator holds no members of (its offsets may still exist)
                described.append(G(error_code=P.NONE, group_id=group_id, group_state="Dead", protocol_type="",
                                   protocol_data="", members=[]))
                continue
            stable = g.state == "Stable"
            described.append(G(
                error_code=P.NONE, group_id=group_id, group_state=g.state, protocol_type=g.protocol_type or "",
                protocol_data=g.protocol_name or "",
                members=[M(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                           client_host="", member_metadata=m.metadata_for(g.protocol_name or "") if stable else b"",
                           member_assignment=m.assignment if stable else b"") for m in g.members.values()]))
        return R(throttle_time_ms=0, groups=described)

    async def handle_list_groups(self, req, version, client_id):
        R = P.ListGroupsResponse
        mine = [g for gid, g in self.groups.groups.items() if self._is_coordinator(gid)]
        return R(throttle_time_ms=0, error_code=P.NONE,
                 groups=[R.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "") for g in mine])

    async def handle_find_coordinator(self, req, version, client_id):
        R = P.FindCoordinatorResponse
        key_type = req.key_type if version >= 1 else 0
        if key_type not in (0, 1):
            return R(throttle_time_ms=0, error_code=P.INVALID_REQUEST, error_message=f"key type {key_type}",
                     node_id=-1, host="", port=-1)
        # Groups (0) and transactional ids (1) are placed by the same hash over the live brokers.
        cid = coordinator_for(req.key or "", list(self.metadata.live))
        info = self.metadata.live.get(cid)
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
        # v7: a partition whose offset a transaction has yet to settle is unstable (KIP-447).
        unstable = await self.groups.unstable_partitions(req.group_id) if version >= 7 and req.require_stable \
            else set()
        by_topic: dict[str, list] = {}
        for (topic, p), (off, epoch, meta) in sorted(found.items()):
            err = P.UNSTABLE_OFFSET_COMMIT if (topic, p) in unstable else P.NONE
            by_topic.setdefault(topic, []).append(PR(partition_index=p, committed_offset=-1 if err else off,
                                                     committed_leader_epoch=-1 if err else epoch,
                                                     metadata="" if err else meta or "", error_code=err))
        return R(throttle_time_ms=0, topics=[TR(name=t, partitions=ps) for t, ps in by_topic.items()],
                 error_code=P.NONE)
