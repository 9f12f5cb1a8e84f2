"""The project's own Kafka-compatible broker: a replicated log under test.

Speaks enough of the Kafka wire protocol for unmodified confluent-kafka
clients and replicates the way docs/design.md ("The own broker")
describes: leader and followers per partition, ISR, high watermark,
acks, min.insync.replicas, a ZooKeeper-elected controller, truncation to
the HW checkpoint on restart.  Run it with `python -m broker --help`;
docs/broker.md has the design, the settings and the known limits.
"""
