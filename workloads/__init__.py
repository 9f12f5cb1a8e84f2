"""Workload clients: producers and consumers that record every operation.

- `workloads.config.WorkloadConfig`: the knobs (docs/workloads.md), and the
  acks and consumer-mode vocabularies (`ACKS`, `CONSUMER_MODES`).
- `workloads.workload.Workload`: start / stop / final_reads / stats.
- `workloads.topic.create_topic`: the topic, with a leader for every partition.
- `workloads.client_errors`: which client errors prove an operation did not happen.
- `workloads.producer`, `workloads.consumer`: the client threads, which get
  a `workloads.clients.ClientContext` (settings, history, counters, stop
  event), never the `Workload`.

Imports of confluent-kafka happen in the submodules, not here, so that
importing the package stays cheap.
"""
