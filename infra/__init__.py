"""Real clusters: providers that make nodes, the Remote that reaches them, systems that run on them.

- `infra.cluster`: `provision()`, `Node`, `Cluster`, `ProvisionOptions`, `load_cluster()`
- `infra.local` / `infra.ssh`: the local (namespaces), ssh and vagrant providers
- `infra.remote`: `Remote`, one SSH connection per node (commands, files, daemons)
- `infra.system`: the System seam and `collect_logs`; `infra.zookeeper`: the ensemble
- `infra.net`: partitions, healing, reachability probes
- `infra.clean` / `infra.state`: what runs created, and removing it (`harness clean`)

See docs/clusters.md.
"""
