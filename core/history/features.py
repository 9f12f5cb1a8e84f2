"""The feature levels a KRaft controller finalized, from its records in
states.jsonl (`kraft-feature` lines, docs/history.md): what a run on Kafka
4 ran with (transactions v2 of KIP-890, the group protocol of KIP-848,
KIP-966's eligible leader replicas), read from the controller's own
FeatureLevelRecords rather than inferred from the version or the format's
flags. The report and the differential view both show them.
"""

from __future__ import annotations

FEATURE = "kraft-feature"  # the controller's feature lines' kind


def finalized(states: list[dict] | None) -> dict[str, int]:
    """Each feature's last finalized level, by name (sorted); {} for a run
    without such records (ZooKeeper mode, the own broker)."""
    levels: dict[str, int] = {}
    for line in sorted((s for s in states or [] if s.get("kind") == FEATURE), key=lambda s: s["time"]):
        if isinstance(line.get("name"), str) and isinstance(line.get("level"), int):
            levels[line["name"]] = line["level"]
    return dict(sorted(levels.items()))


def features_words(levels: dict[str, int]) -> str:
    """`eligible.leader.replicas.version 1, transaction.version 2`, or "" for none."""
    return ", ".join(f"{name} {level}" for name, level in levels.items())
