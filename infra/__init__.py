"""Real clusters: providers that make nodes, the Remote that reaches them, systems that run on them.

- `infra.nodes`: `Node`, `Cluster`, `ProvisionOptions`, `parallel`, and the `Provider` seam
- `infra.cluster`: the table of providers, `provision()`, `load_cluster()`, the provider flags
- `infra.local` / `infra.ssh` / `infra.docker`: the local (namespaces), ssh, vagrant and docker providers
- `infra.remote`: `NodeShell` (commands, files, daemons) and `Remote`, its SSH transport, one
  connection per node; infra.docker's `DockerRemote` is the same over the Docker API
- `infra.system`: the system protocols and `collect_logs`; `infra.zookeeper`: the ensemble;
  `infra.brokers`: what the own broker (`infra.own_broker`) and Kafka (`infra.kafka`) share
- `infra.net`: partitions, healing, reachability probes
- `infra.clean` / `infra.state`: what runs created, and removing it (`harness clean`)

See docs/clusters.md.
"""
