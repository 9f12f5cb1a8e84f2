"""The project's own Kafka-compatible broker: a replicated log under test.

Speaks enough of the Kafka wire protocol for unmodified confluent-kafka
clients and replicates the way docs/design.md ("The own broker")
describes: leader and followers per partition, ISR, high watermark,
acks, min.insync.replicas, a ZooKeeper-elected controller, and followers
that truncate to their divergence point with the leader, found by leader
epoch (KIP-101; `replica.truncation = high-watermark` keeps the seeds'
known-unsafe truncation to the HW).  Run it with `python -m broker --help`;
docs/broker.md has the design, the settings and the known limits.
"""
