"""The APIs of the log itself (Kafka's KafkaApis, the data half): Produce,
Fetch (from consumers and from follower replicas), ListOffsets,
OffsetForLeaderEpoch, and WriteTxnMarkers (a transaction coordinator's
COMMIT and ABORT markers).

Each handler asks the replica manager which replica serves a partition
and whether the request's leader epoch is current, then works on that
Partition.  A produce appends every batch before its first await, so the
network layer's in-order dispatch keeps batches in request order.

The exception is a producer's first transactional batch on a partition in
a transaction: the leader first checks with the transaction's state in
ZooKeeper that the coordinator added the partition to that transaction
(as Kafka's KIP-890 verification; INVALID_TXN_STATE if not).  That batch,
and every batch after it on the same partition until it is appended,
waits in a per-partition queue, so the partition still appends in
request order.

read_committed fetches (isolation level 1) are served below the last
stable offset and carry the aborted transactions of the fetched range,
which the client uses to drop aborted records; ListOffsets' latest offset
is the LSO for them.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker import protocol as P
from broker import records
from broker.config import BrokerConfig, coin_heads
from broker.metadata import Metadata
from broker.partition import ProduceError
from broker.replica_manager import ReplicaManager
from broker.transactions import ONGOING, read_txn_state

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
        # Planted bug txn-serve-aborted: read_committed fetches served as read_uncommitted ones.
        self.serve_aborted = cfg.bug("txn-serve-aborted")
        self.serve_aborted_logged: dict[tuple[str, int], float] = {}

    def handlers(self) -> dict:
        return {P.PRODUCE: self.handle_produce, P.FETCH: self.handle_fetch,
                P.LIST_OFFSETS: self.handle_list_offsets,
                P.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
                P.WRITE_TXN_MARKERS: self.handle_write_txn_markers}

    async def handle_produce(self, req, version, client_id):
        # Everything up to the first await runs at once, so batches are appended in request order.
        R = P.ProduceResponse
        acks = req.acks
        if self.stalled:
            return await self._stalled_produce(req)
        waits = []  # (topic response list, index, partition, last offset, future)
        deferred = []  # (topic response list, index, partition, bytes, header, queued append)
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
                        if p.append_gate is not None or self._needs_verification(p, h):
                            # Behind a batch still being verified, or one to verify: queued in order.
                            deferred.append((len(responses), len(parts), p, pd.records, h,
                                             self._queue(p, req.transactional_id, pd.records, h, check_sequences)))
                            parts.append(R.TopicProduceResponse.PartitionProduceResponse(
                                index=pd.index, error_code=P.NONE, base_offset=-1, log_append_time_ms=-1,
                                log_start_offset=0, record_errors=[], error_message=None))
                            continue
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
        for ti, pi, p, _data, _h, queued in deferred:
            pr = responses[ti].partition_responses[pi]
            err, msg, base, last = await queued
            pr.error_code, pr.error_message, pr.base_offset = err, msg, base
            if err == P.NONE and acks == -1 and not bug_ack_early:
                waits.append((ti, pi, p, last + 1))
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

    @staticmethod
    def _needs_verification(p, h) -> bool:
        """A producer's first transactional batch in this partition's current transaction."""
        if not h.is_transactional:
            return False
        entry = p.producers.get(h.producer_id)
        return p.txns.open_transaction(h.producer_id) is None or entry is None or entry.epoch != h.producer_epoch

    def _queue(self, p, transactional_id, data, h, check_sequences: bool) -> asyncio.Task:
        """Appends the batch after every batch queued before it on this partition, verifying
        it first if it opens a transaction; the task's result is (error, message, base, last)."""
        prev = p.append_gate
        done = asyncio.get_running_loop().create_future()
        p.append_gate = done

        async def run():
            try:
                if prev is not None:
                    await prev
                err, msg = P.NONE, None
                if self._needs_verification(p, h):
                    err, msg = await self._verify(p, transactional_id, h)
                if err != P.NONE:
                    return err, msg, -1, -1
                if p.role != "leader" or p.fenced_by >= 0:
                    return P.NOT_LEADER_OR_FOLLOWER, "no longer the leader", -1, -1
                try:
                    base, last, _dup = p.append_as_leader(data, h, check_sequences)
                except ProduceError as e:
                    return e.code, str(e), -1, -1
                except OSError as e:
                    log.error("append to %s failed: %s", p.name, e)
                    return P.KAFKA_STORAGE_ERROR, str(e), -1, -1
                return P.NONE, None, base, last
            finally:
                done.set_result(None)
                if p.append_gate is done:
                    p.append_gate = None
        return asyncio.get_running_loop().create_task(run())

    async def _verify(self, p, transactional_id, h) -> tuple[int, str | None]:
        """Whether the coordinator added this partition to the producer's ongoing transaction."""
        if transactional_id is None:
            return P.INVALID_TXN_STATE, "a transactional batch without a transactional id"
        try:
            st = await self.metadata.zk_call(read_txn_state, transactional_id)
        except Exception as e:
            return P.NOT_ENOUGH_REPLICAS, f"the transaction's state cannot be read: {e}"
        if st is None or st.producer_id != h.producer_id:
            return P.INVALID_TXN_STATE, f"producer {h.producer_id} is not {transactional_id!r}'s"
        if h.producer_epoch < st.producer_epoch:
            return P.INVALID_PRODUCER_EPOCH, f"producer epoch {h.producer_epoch} < {st.producer_epoch}"
        if st.producer_epoch != h.producer_epoch or st.state != ONGOING or (p.topic, p.index) not in st.partitions:
            return P.INVALID_TXN_STATE, f"{p.name} is not in an ongoing transaction of {transactional_id!r} " \
                                        f"at epoch {h.producer_epoch} ({st.state}, epoch {st.producer_epoch})"
        return P.NONE, None

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
        read_committed = not is_follower and req.isolation_level == 1
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
                        limit = p.leo if above_hw else p.lso if read_committed and not self.serve_aborted else p.hw
                        if budget > 0:
                            data = p.log.read(offset, min(pmax, budget), limit)
                            budget -= len(data)
                            total += len(data)
                if err != P.NONE:
                    any_error = True
                results[(topic, index)] = (err, hw, data, p, offset)
            first = False
            remaining = deadline - time.monotonic()
            if total >= req.min_bytes or any_error or remaining <= 0:
                break
            fut = asyncio.get_running_loop().create_future()
            for (_, _, _, p, _) in results.values():
                p.fetch_waiters.add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                for (_, _, _, p, _) in results.values():
                    p.fetch_waiters.discard(fut)
        topics = {}
        for topic, index, *_ in wanted:
            err, hw, data, p, offset = results[(topic, index)]
            lso, aborted = hw, None
            if p is not None and err == P.NONE:
                lso = p.lso
                if read_committed:
                    aborted = self._aborted_in(p, offset, data, lso)
            topics.setdefault(topic, []).append(R.FetchableTopicResponse.PartitionData(
                partition_index=index, error_code=err, high_watermark=hw, last_stable_offset=lso,
                log_start_offset=p.log.start_offset if p is not None else -1, aborted_transactions=aborted,
                preferred_read_replica=-1, records=data))
        return R(throttle_time_ms=0, error_code=P.NONE, session_id=0,
                 responses=[R.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in topics.items()])

    def _aborted_in(self, p, offset: int, data: bytes, lso: int):
        """The aborted transactions a read_committed reader of `data` (read from `offset`) must drop."""
        batches = list(records.iter_batches(data))
        end = batches[-1][1].next_offset if batches else offset
        found = p.txns.aborted_between(offset, end)
        if self.serve_aborted:
            # Planted bug txn-serve-aborted: data was read up to the HW, and nothing is said aborted.
            if found or end > lso:
                now = time.monotonic()
                if now - self.serve_aborted_logged.get((p.topic, p.index), 0.0) >= 1.0:
                    self.serve_aborted_logged[(p.topic, p.index)] = now
                    log.warning("planted bug txn-serve-aborted: read_committed fetch of %s served offsets %d-%d "
                                "past the last stable offset %d, %d aborted transaction(s) not named", p.name,
                                offset, end - 1, lso, len(found))
            return None
        R = P.FetchResponse.FetchableTopicResponse.PartitionData
        return [R.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in found]

    async def handle_write_txn_markers(self, req, version, client_id):
        """A transaction coordinator's markers: one control batch per partition, answered once
        the HW passes it. A marker already written (a retry) is not written again."""
        R = P.WriteTxnMarkersResponse
        results = []
        for m in req.markers or []:
            topics = []
            for t in m.topics or []:
                parts = []
                waits = []
                for index in t.partition_indexes or []:
                    code, need = self._write_marker(t.name, index, m)
                    parts.append(R.WritableTxnMarkerResult.WritableTxnMarkerTopicResult
                                 .WritableTxnMarkerPartitionResult(partition_index=index, error_code=code))
                    if code == P.NONE and need is not None:
                        waits.append((parts[-1], need))
                for pr, (p, need) in waits:
                    fut = p.wait_for_hw(need)
                    try:
                        pr.error_code = await asyncio.wait_for(fut, 5.0)
                    except asyncio.TimeoutError:
                        pr.error_code = P.REQUEST_TIMED_OUT
                        try:
                            p.ack_waiters.remove((need, fut))
                        except ValueError:
                            pass
                topics.append(R.WritableTxnMarkerResult.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
            results.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
        return R(markers=results)

    def _write_marker(self, topic: str, index: int, m):
        """(error, (partition, offset the HW must reach) or None) for one partition's marker."""
        p, err = self.replicas.partition_error(topic, index)
        if err == P.NONE and p.fenced_by >= 0:
            err = P.NOT_LEADER_OR_FOLLOWER
        if err != P.NONE:
            return err, None
        if len(p.isr) < self.cfg.min_insync_replicas:
            return P.NOT_ENOUGH_REPLICAS, None
        kind = records.COMMIT_MARKER if m.transaction_result else records.ABORT_MARKER
        entry = p.producers.get(m.producer_id)
        if entry is not None and m.producer_epoch < entry.epoch:
            log.info("%s: marker of producer %d at epoch %d is older than its epoch %d here: not written", p.name,
                     m.producer_id, m.producer_epoch, entry.epoch)
            return P.NONE, None
        last = p.txns.markers.get(m.producer_id)
        if p.txns.open_transaction(m.producer_id) is None and last is not None \
                and last[:2] == (m.producer_epoch, kind):
            return P.NONE, (p, last[2] + 1)  # written already: wait until it is replicated
        data = records.control_batch(kind, m.producer_id, m.producer_epoch, m.coordinator_epoch,
                                     int(time.time() * 1000))
        h = records.parse_header(data)
        h.control_type = kind
        try:
            base, _last, _dup = p.append_as_leader(data, h, check_sequences=False)
        except OSError as e:
            log.error("marker append to %s failed: %s", p.name, e)
            return P.KAFKA_STORAGE_ERROR, None
        log.info("TXN MARKER %s: %s of producer %d epoch %d at offset %d", p.name,
                 "COMMIT" if kind == records.COMMIT_MARKER else "ABORT", m.producer_id, m.producer_epoch, base)
        return P.NONE, (p, base + 1)

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
                    committed = version >= 2 and req.isolation_level == 1 and replica < 0
                    visible = p.leo if replica >= 0 else p.lso if committed else p.hw
                    if lp.timestamp == -1:
                        offset = visible
                        epoch = p.leader_epoch
                    elif lp.timestamp == -2:
                        offset = p.log.start_offset
                        epoch = p.epoch_at(offset)
                    else:
                        found = p.log.offset_for_timestamp(lp.timestamp)
                        if found is not None and found < visible:
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


def _who(replica: int, client_id: str, api: str) -> str:
    return f"{api} by replica {replica}" if replica >= 0 else f"{api} by client {client_id!r}"
