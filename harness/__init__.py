"""harness: a Jepsen-style chaos testing harness for Kafka-like replicated logs.

The top-level packages follow the flow of a run (see docs/ and DESIGN.md):
harness (CLI, spec, runner, history, store, report) -> infra (providers,
remotes, systems) -> workloads -> nemesis -> checkers.
"""

__version__ = "0.1.0"
