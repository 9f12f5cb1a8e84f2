"""The APIs of the log itself (Kafka's KafkaApis, the data half): Produce,
Fetch (from consumers and from follower replicas), ListOffsets,
OffsetForLeaderEpoch and InitProducerId.

Each handler asks the replica manager which replica serves a partition
and whether the request's leader epoch is current, then works on that
Partition.  A produce appends every batch before its first await, so the
network layer's in-order dispatch keeps batches in request order.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker import protocol as P
from broker import records
from broker.config import BrokerConfig, coin_heads
from broker.metadata import Metadata, allocate_producer_id
from broker.partition import ProduceError
from broker.replica_manager import ReplicaManager

log = logging.getLogger("broker")


class LogApis:
    def __init__(self, cfg: BrokerConfig, metadata: Metadata, replicas: ReplicaManager):
        self.cfg = cfg
        self.metadata = metadata
        self.replicas = replicas
        # Planted bug: started on logs already on disk (a restart, not the first start),
        # this broker holds every produce until its timeout and appends nothing.
        self.stalled = cfg.bug("stall-after-restart") and bool(replicas.partitions)
        if self.stalled:
            log.warning("planted bug stall-after-restart: this restarted broker acknowledges no produce")
        # Planted bug forget-acked-sometimes: whether this broker still has its one batch to forget.
        self.forget_pending = cfg.bug("forget-acked-sometimes")

    def handlers(self) -> dict:
        return {P.PRODUCE: self.handle_produce, P.FETCH: self.handle_fetch,
                P.LIST_OFFSETS: self.handle_list_offsets,
                P.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
                P.INIT_PRODUCER_ID: self.handle_init_producer_id}

    async def handle_produce(self, req, version, client_id):
        # Everything up to the first await runs at once, so batches are appended in request order.
        R = P.ProduceResponse
        acks = req.acks
        if self.stalled:
            return await self._stalled_produce(req)
        waits = []  # (topic response list, index, partition, last offset, future)
        responses = []
        bug_ack_early = self.cfg.bug("ack-before-replication")
        check_sequences = not self.cfg.bug("no-dedup")
        min_isr = 0 if self.cfg.bug("ignore-min-isr") else self.cfg.min_insync_replicas
        for td in req.topic_data:
            parts = []
            for pd in td.partition_data:
                base, err, msg = -1, P.NONE, None
                p, err = self.replicas.partition_error(td.name, pd.index)
                if err == P.NONE and p.fenced_by >= 0:
                    # This leader heard of a newer epoch: the producer should find the new leader.
                    err = P.NOT_LEADER_OR_FOLLOWER
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
                        if acks == -1 and len(p.isr) < min_isr:
                            raise ProduceError(P.NOT_ENOUGH_REPLICAS,
                                               f"isr {p.isr} is smaller than min.insync.replicas {min_isr}")
                        if self._forget(h):
                            # Acknowledged at the log end without being written: the next batch takes its offset.
                            log.warning("planted bug forget-acked-sometimes: acknowledging %d record(s) of %s "
                                        "at offset %d without appending them", h.last_offset_delta + 1, p.name,
                                        p.leo)
                            parts.append(R.TopicProduceResponse.PartitionProduceResponse(
                                index=pd.index, error_code=P.NONE, base_offset=p.leo, log_append_time_ms=-1,
                                log_start_offset=0, record_errors=[], error_message=None))
                            continue
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
                    if code == P.NONE and len(p.isr) < min_isr:
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

    def _forget(self, h) -> bool:
        """Whether the planted forget-acked-sometimes bug swallows this batch: the
        first plain batch (no producer id: its loss leaves no sequence gap) this
        broker leads, in a cluster whose coin came up heads."""
        if not self.forget_pending or h.producer_id >= 0:
            return False
        self.forget_pending = False
        return coin_heads(self.metadata.cluster_id)

    async def _stalled_produce(self, req):
        """The planted stall: wait out the request's timeout, then REQUEST_TIMED_OUT everywhere."""
        R = P.ProduceResponse
        await asyncio.sleep(max(req.timeout_ms, 0) / 1000.0)
        if req.acks == 0:
            return None
        return R(responses=[R.TopicProduceResponse(name=td.name, partition_responses=[
            R.TopicProduceResponse.PartitionProduceResponse(
                index=pd.index, error_code=P.REQUEST_TIMED_OUT, base_offset=-1, log_append_time_ms=-1,
                log_start_offset=0, record_errors=[], error_message="planted bug stall-after-restart")
            for pd in td.partition_data]) for td in req.topic_data], throttle_time_ms=0)

    async def handle_fetch(self, req, version, client_id):
        R = P.FetchResponse
        replica = req.replica_id if req.replica_id is not None else -1
        is_follower = replica >= 0
        # Planted bug serve-above-hw: a consumer reads up to the log end, as a follower does.
        above_hw = is_follower or self.cfg.bug("serve-above-hw")
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
                p, err = self.replicas.partition_error(topic, index)
                data = b""
                hw = -1
                if err == P.NONE:
                    err = self.replicas.epoch_error(p, cur_epoch, _who(replica, client_id, "fetch"))
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
                        limit = p.leo if above_hw else p.hw
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
            fut = asyncio.get_running_loop().create_future()
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
                p, err = self.replicas.partition_error(t.name, lp.partition_index)
                offset, epoch = -1, -1
                if err == P.NONE and version >= 4:
                    err = self.replicas.epoch_error(p, lp.current_leader_epoch,
                                                   _who(replica, client_id, "ListOffsets"))
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
        replica = req.replica_id if version >= 3 and req.replica_id is not None else -1
        topics = []
        for t in req.topics:
            parts = []
            for op in t.partitions:
                p, err = self.replicas.partition_error(t.topic, op.partition)
                epoch, end = -1, -1
                if err == P.NONE:
                    err = self.replicas.epoch_error(p, op.current_leader_epoch,
                                                   _who(replica, client_id, "OffsetForLeaderEpoch"))
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
            pid = await self.metadata.zk_call(allocate_producer_id)
        except Exception as e:
            log.warning("producer id allocation failed: %s", e)
            return R(throttle_time_ms=0, error_code=P.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1)
        return R(throttle_time_ms=0, error_code=P.NONE, producer_id=pid, producer_epoch=0)


def _who(replica: int, client_id: str, api: str) -> str:
    return f"{api} by replica {replica}" if replica >= 0 else f"{api} by client {client_id!r}"
