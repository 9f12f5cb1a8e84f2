"""Every benchmark of the project. Each records its result as a JSON file
under results/bench/ (bench/record.py: the command, commit, machine,
figures, and its targets, declared beside its code as TARGETS);
`harness bench latest` prints the newest figures of each, and
docs/benchmarks.md has one section per benchmark: what it measures, the
command that reproduces it, its targets and its latest result.

`harness bench TARGET` (bench/targets.py) runs these, each exposing
configure(parser) and run(args) -> int:

- `cluster_up` (cluster): bring-up and teardown of a local cluster with ZooKeeper.
- `checker_cost` (check): the checker's wall time and peak memory on 1M, 10M (and 100M) events,
  through Spark or in process (`--engine`), on `local[*]` and (`--standalone`) on a two-worker
  standalone Spark cluster beside it; a cold check of the largest against a bare cold scan.
- `cold_check` (cold): a cold `harness check` from the shell against a bare cold Spark scan of the
  same history, alternated.
- `own_broker_throughput` (broker): acks=all produce throughput and latency of the own broker.
- `own_broker_failover` (failover): seconds from a leader's kill -9 to a new leader and to writes again.
- `broker_vs_kafka` (kafka): the own broker against Apache Kafka, and Kafka's bring-up.
- `report_cost` (report): building the report of a 10M-event run; page sizes and browser load time.

Run as `python -m bench.NAME`:

- `faultfs_overhead`: what the faultfs in passthrough costs the brokers' throughput.
- `workload_overhead`: the history recorder's overhead and the highest op rate sustained.
- `scenario_tally`: one scenario run several times, what the checker found each time.

Shared: `produce_loop`, the timed produce loop the throughput benchmarks use;
`record`, the results as files and `harness bench latest`.

A floor beside the product, with lab/: benchmarks import the stages and the
lab's fixtures; no stage imports them, and they import no tests. The command
line's table names bench/targets.py for `harness bench`, loaded only when a
command line names it.
"""
