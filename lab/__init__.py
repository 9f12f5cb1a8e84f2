"""The lab: what only tests and benchmarks use, on a floor of its own beside
bench/. The history simulator (synthetic.py, also `harness gen-history`), a
loopback ZooKeeper and own-broker cluster (loopback_broker.py), a loopback
Apache Kafka (loopback_kafka.py) and a standalone Spark cluster on 127.0.0.1
(spark_cluster.py). The lab imports the stages; no stage imports the lab.
"""
