"""The controller's fence on a real ZooKeeper: a controller deposed in the
middle of a pass writes nothing, even through a new session of its own."""

from __future__ import annotations

import json

from kazoo.client import KazooClient

from broker import zk as Z
from broker.controller import Controller
from broker.zk import PartitionState


def _client(zookeeper) -> KazooClient:
    c = KazooClient(hosts=zookeeper.connect, timeout=5)
    c.start(timeout=15)
    return c


def test_a_controller_deposed_mid_pass_writes_nothing(zookeeper):
    registry = _client(zookeeper)  # the brokers' registrations and the topic
    first = _client(zookeeper)
    clients = [registry, first]
    try:
        for broker in (1, 2):
            registry.create(f"{Z.BROKERS}/{broker}", json.dumps({"host": "h", "port": 1}).encode(),
                            ephemeral=True, makepath=True)
        registry.create(Z.topic_path("t"), Z.encode_assignment({0: [1, 2]}), makepath=True)
        deposed = Controller(first, 1, unclean=False, elect_any_bug=False)
        assert deposed.try_elect() and deposed.reconcile() == 1  # the partition's first state: leader 1
        live = deposed.live_brokers()

        # Its session ends (its /controller node goes), and kazoo gives it a new one.
        first.stop()
        first.close()
        deposed.zk = _client(zookeeper)
        clients.append(deposed.zk)
        successor = Controller(_client(zookeeper), 2, unclean=False, elect_any_bug=False)
        clients.append(successor.zk)
        assert successor.try_elect() and successor.epoch == deposed.epoch + 1

        # Broker 1 dies. The deposed controller, past its pass's start, elects on what it read:
        # its write must fail on the fence, leaving the state to the successor.
        registry.delete(f"{Z.BROKERS}/1")
        before = registry.get(Z.state_path("t", 0))
        assert deposed._reconcile_partition("t", 0, [1, 2], {2: live[2]}) == 0
        assert registry.get(Z.state_path("t", 0))[1].version == before[1].version, "the deposed controller wrote"
        assert successor.reconcile() == 1
        state = PartitionState.from_json(*registry.get(Z.state_path("t", 0))[:1])
        assert (state.leader, state.controller_epoch) == (2, successor.epoch)
    finally:
        for c in clients:
            if c.connected:
                c.stop()
            c.close()
