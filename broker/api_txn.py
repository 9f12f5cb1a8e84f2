"""The transaction APIs a producer calls (KIP-98): InitProducerId (also the
idempotent producer's, without a transactional id), AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn, answered by the transaction coordinator
(broker/transactions.py), and TxnOffsetCommit, answered by the group's
coordinator (broker/groups.py), which keeps the offsets pending until the
transaction ends; and DescribeTransactions, what an operator's `kafka-transactions
describe` and an admin client ask (the state, the partitions, which broker
coordinates).

The markers the coordinator writes arrive at partition leaders as
WriteTxnMarkers, a log API (broker/api_log.py).
"""

from __future__ import annotations

import logging

from broker import protocol as P
from broker.groups import GroupCoordinator, coordinator_for
from broker.metadata import Metadata, allocate_producer_id
from broker.transactions import TransactionCoordinator

log = logging.getLogger("broker")


class TxnApis:
    def __init__(self, broker_id: int, metadata: Metadata, txns: TransactionCoordinator, groups: GroupCoordinator):
        self.id = broker_id
        self.metadata = metadata
        self.txns = txns
        self.groups = groups

    def handlers(self) -> dict:
        return {P.INIT_PRODUCER_ID: self.handle_init_producer_id,
                P.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
                P.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn, P.END_TXN: self.handle_end_txn,
                P.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
                P.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions}

    async def handle_init_producer_id(self, req, version, client_id):
        R = P.InitProducerIdResponse
        if req.transactional_id is None:
            # An idempotent producer: a fresh producer id, epoch 0.
            try:
                pid = await self.metadata.zk_call(allocate_producer_id)
            except Exception as e:
                log.warning("producer id allocation failed: %s", e)
                return R(throttle_time_ms=0, error_code=P.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                         producer_epoch=-1)
            return R(throttle_time_ms=0, error_code=P.NONE, producer_id=pid, producer_epoch=0)
        pid, epoch = (req.producer_id, req.producer_epoch) if version >= 3 else (-1, -1)
        err, pid, epoch = await self.txns.init_producer_id(req.transactional_id, req.transaction_timeout_ms,
                                                           pid, epoch, version)
        return R(throttle_time_ms=0, error_code=err, producer_id=pid, producer_epoch=epoch)

    async def handle_add_partitions_to_txn(self, req, version, client_id):
        R = P.AddPartitionsToTxnResponse
        TR = R.AddPartitionsToTxnTopicResult
        PR = TR.AddPartitionsToTxnPartitionResult
        wanted = [(t.name, p) for t in req.v3_and_below_topics or [] for p in t.partitions or []]
        unknown = {tp for tp in wanted if tp[1] not in self.metadata.topics.get(tp[0], {})}
        if unknown:
            codes = {tp: P.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else P.OPERATION_NOT_ATTEMPTED
                     for tp in wanted}
        else:
            err = await self.txns.add_to_txn(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                              req.v3_and_below_producer_epoch, version, partitions=wanted)
            codes = {tp: err for tp in wanted}
        by_topic: dict[str, list] = {}
        for (topic, p), code in codes.items():
            by_topic.setdefault(topic, []).append(PR(partition_index=p, partition_error_code=code))
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=[
            TR(name=t, results_by_partition=ps) for t, ps in by_topic.items()])

    async def handle_add_offsets_to_txn(self, req, version, client_id):
        R = P.AddOffsetsToTxnResponse
        err = await self.txns.add_to_txn(req.transactional_id, req.producer_id, req.producer_epoch, version,
                                          group=req.group_id)
        return R(throttle_time_ms=0, error_code=err)

    async def handle_end_txn(self, req, version, client_id):
        R = P.EndTxnResponse
        err = await self.txns.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed,
                                      version)
        return R(throttle_time_ms=0, error_code=err)

    async def handle_describe_transactions(self, req, version, client_id):
        R = P.DescribeTransactionsResponse
        TS = R.TransactionState
        described = []
        for tid in req.transactional_ids or []:
            st = await self.txns.describe(tid) if self.txns.is_coordinator(tid) else None
            err = (P.NOT_COORDINATOR if not self.txns.is_coordinator(tid) else
                   P.TRANSACTIONAL_ID_NOT_FOUND if st is None else P.NONE)
            if err != P.NONE:
                described.append(TS(error_code=err, transactional_id=tid, transaction_state="",
                                    transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                    producer_epoch=-1, topics=[]))
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, p in st.partitions:
                by_topic.setdefault(topic, []).append(p)
            described.append(TS(error_code=P.NONE, transactional_id=tid, transaction_state=st.state,
                                transaction_timeout_ms=st.timeout_ms,
                                transaction_start_time_ms=st.started_ms if st.started_ms else -1,
                                producer_id=st.producer_id, producer_epoch=st.producer_epoch,
                                topics=[TS.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
        return R(throttle_time_ms=0, transaction_states=described)

    async def handle_txn_offset_commit(self, req, version, client_id):
        R = P.TxnOffsetCommitResponse
        TR = R.TxnOffsetCommitResponseTopic
        PR = TR.TxnOffsetCommitResponsePartition
        if not req.group_id:
            err = P.INVALID_GROUP_ID
        elif coordinator_for(req.group_id, list(self.metadata.live)) != self.id:
            err = P.NOT_COORDINATOR
        elif version >= 3 and (req.member_id or req.generation_id >= 0):
            # v3: the member's generation fences a zombie consumer, as an OffsetCommit's does (KIP-447).
            err = self.groups.commit_allowed(req.group_id, req.member_id or "", req.generation_id)
        else:
            err = P.NONE
        if err == P.NONE:
            offsets = [(t.name, p.partition_index, p.committed_offset,
                        p.committed_leader_epoch if version >= 2 else -1, p.committed_metadata)
                       for t in req.topics or [] for p in t.partitions or []]
            err = await self.groups.store_txn_offsets(req.group_id, req.producer_id, req.producer_epoch, offsets)
        return R(throttle_time_ms=0, topics=[
            TR(name=t.name, partitions=[PR(partition_index=p.partition_index, error_code=err)
                                        for p in t.partitions or []]) for t in req.topics or []])
