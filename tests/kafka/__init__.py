"""Tests of Apache Kafka as the system under test (infra/kafka.py) and the named scenarios."""
