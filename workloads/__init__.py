"""Workload clients: producers and consumers that record every operation.

- `workloads.config.WorkloadConfig`: the knobs (docs/workloads.md).
- `workloads.runner.Workload`: start / stop / final_reads / stats.
- `workloads.topic.create_topic`: the topic, with a leader for every partition.
- `workloads.errors`: which client errors prove an operation did not happen.

Imports of confluent-kafka happen in the submodules, not here, so that
importing the package stays cheap.
"""
