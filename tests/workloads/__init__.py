"""Tests of the workload clients, the error table and the Kafka jar cache (real Kafka, no mocks)."""
