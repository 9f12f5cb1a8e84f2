"""The controller: one broker, elected through the ephemeral /controller
znode, that elects partition leaders and keeps ISRs free of dead replicas.

Every reconciliation reads the live brokers (with their incarnations, the
czxid of their registration), the topics and every partition state from
ZooKeeper, and writes what must change with a conditional multi-op that
also checks /controller_epoch is still at the version this controller
wrote when it won (as Kafka's controller checks the epoch node's version).
Each new controller bumps that node, so a deposed one cannot overwrite a
newer one's work, even with a new session of its own. (/controller's own
version would not do: a new controller's node starts at version 0 again.)

Rules (docs/design.md, "The own broker"):
- a leader that is gone, or came back as a new incarnation, is replaced by
  the first live ISR member (in replica order) that is the same incarnation
  the ISR recorded; the leader epoch goes up by one;
- ISR members that are gone or restarted are dropped (epoch + 1), as Kafka's
  controller does when a broker fails;
- no eligible ISR member: with unclean.leader.election.enable the first
  live replica becomes leader (ISR = itself), otherwise the partition goes
  offline (leader -1) and keeps its last ISR, whose first member to return
  is elected;
- planted bug `elect-any-replica`: the first live replica is elected,
  whether in the ISR or not.
"""

from __future__ import annotations

import json
import logging

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker import zk as Z
from broker.zk import PartitionState

log = logging.getLogger("broker.controller")


class Controller:
    def __init__(self, client, broker_id: int, unclean: bool, elect_any_bug: bool):
        self.zk = client
        self.broker_id = broker_id
        self.unclean = unclean
        self.elect_any_bug = elect_any_bug
        self.active = False
        self.epoch = 0
        self.epoch_version = -1  # /controller_epoch's version as this controller wrote it: the fence
        self.node_czxid = 0

    # -- election ------------------------------------------------------------------

    def try_elect(self) -> bool:
        """Tries to become controller; True if this broker is it now."""
        if self.active:
            return True
        try:
            self.zk.create(Z.CONTROLLER, json.dumps({"version": 1, "brokerid": self.broker_id}).encode(),
                           ephemeral=True, makepath=True)
        except NodeExistsError:
            # Ours, if this broker resigned while its session lived on (cut off from ZooKeeper
            # for a while): nobody else can take the node, so take the role up again.
            try:
                data, stat = self.zk.get(Z.CONTROLLER)
            except NoNodeError:
                return False
            if stat.ephemeralOwner != self.zk.client_id[0] or json.loads(data).get("brokerid") != self.broker_id:
                return False
            log.info("CONTROLLER: broker %d still holds /controller from this session: taking the role up again",
                     self.broker_id)
        _, stat = self.zk.get(Z.CONTROLLER)
        self.node_czxid = stat.czxid
        self.epoch, self.epoch_version = self._bump_epoch()
        self.active = True
        log.info("CONTROLLER: broker %d is now the controller (controller epoch %d)", self.broker_id, self.epoch)
        return True

    def _bump_epoch(self) -> tuple[int, int]:
        """The new controller epoch, and the version of /controller_epoch that holds it."""
        while True:
            try:
                data, stat = self.zk.get(Z.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.zk.create(Z.CONTROLLER_EPOCH, b"1", makepath=True)
                    return 1, 0
                except NodeExistsError:
                    continue
            new = int(data or b"0") + 1
            try:
                written = self.zk.set(Z.CONTROLLER_EPOCH, str(new).encode(), version=stat.version)
                return new, written.version
            except BadVersionError:
                continue

    def still_controller(self) -> bool:
        try:
            data, stat = self.zk.get(Z.CONTROLLER)
        except NoNodeError:
            stat = None
        ok = (stat is not None and stat.czxid == self.node_czxid
              and stat.ephemeralOwner == self.zk.client_id[0]
              and json.loads(data).get("brokerid") == self.broker_id)
        if not ok and self.active:
            log.info("CONTROLLER: broker %d is no longer the controller", self.broker_id)
            self.active = False
        return ok

    def resign(self) -> None:
        if self.active:
            log.info("CONTROLLER: broker %d resigns as controller", self.broker_id)
        self.active = False

    # -- reconciliation --------------------------------------------------------------

    def live_brokers(self) -> dict[int, int]:
        live = {}
        for child in self.zk.get_children(Z.BROKERS):
            try:
                _, stat = self.zk.get(f"{Z.BROKERS}/{child}")
            except NoNodeError:
                continue
            live[int(child)] = stat.czxid
        return live

    def reconcile(self) -> int:
        """One full pass; returns how many partition states it wrote."""
        if not self.active or not self.still_controller():
            return 0
        self.zk.ensure_path(Z.BROKERS)
        self.zk.ensure_path(Z.TOPICS)
        live = self.live_brokers()
        writes = 0
        for topic in sorted(self.zk.get_children(Z.TOPICS)):
            try:
                assignment = Z.decode_assignment(self.zk.get(Z.topic_path(topic))[0])
            except (NoNodeError, ValueError, KeyError):
                continue
            for p, replicas in sorted(assignment.items()):
                writes += self._reconcile_partition(topic, p, replicas, live)
        return writes

    def _reconcile_partition(self, topic: str, p: int, replicas: list[int], live: dict[int, int]) -> int:
        path = Z.state_path(topic, p)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return self._create_state(topic, p, replicas, live)
        st = PartitionState.from_json(data, stat.version, stat.mzxid)
        valid_isr = [r for r in st.isr if r in live and st.incarnations.get(r) == live[r]]
        leader_ok = (st.leader >= 0 and st.leader in live
                     and st.incarnations.get(st.leader) == live[st.leader])
        if leader_ok and valid_isr == st.isr:
            return 0
        new = PartitionState(leader=st.leader, leader_epoch=st.leader_epoch + 1, isr=list(st.isr),
                             controller_epoch=self.epoch, incarnations=dict(st.incarnations))
        if leader_ok:
            new.isr = valid_isr
            dropped = [r for r in st.isr if r not in valid_isr]
            reason = f"replicas {dropped} are gone or restarted"
        else:
            if self.elect_any_bug:
                candidates = [r for r in replicas if r in live]
                kind = "ANY-REPLICA election [planted bug elect-any-replica]"
            elif st.leader < 0:
                # Offline: the first ISR member to come back leads, whatever survived on its disk.
                candidates = [r for r in replicas if r in st.isr and r in live]
                kind = "election of a returning ISR member"
            else:
                candidates = [r for r in replicas if r in valid_isr]
                kind = "clean election"
            if not candidates and self.unclean:
                candidates = [r for r in replicas if r in live]
                kind = "UNCLEAN election (no live ISR member)"
            if candidates:
                leader = candidates[0]
                new.leader = leader
                if leader in valid_isr:
                    new.isr = [leader] + [r for r in valid_isr if r != leader]
                else:
                    new.isr = [leader]
                new.incarnations = {r: live[r] for r in new.isr}
                reason = f"{kind}; old leader {st.leader} " + ("lost" if st.leader >= 0 else "was offline")
            else:
                if st.leader < 0:
                    return 0  # still offline, nothing to write
                new.leader = -1
                new.isr = list(st.isr)
                reason = f"no live in-sync replica; partition offline (old leader {st.leader} lost)"
        try:
            tx = self.zk.transaction()
            tx.check(Z.CONTROLLER_EPOCH, self.epoch_version)
            tx.set_data(path, new.to_json(), version=st.version)
            results = tx.commit()
        except Exception as e:  # connection loss: the next pass retries
            log.warning("CONTROLLER: writing %s failed: %s", path, e)
            return 0
        if any(isinstance(r, Exception) for r in results):
            log.info("CONTROLLER: conditional write of %s-%d lost a race (%s); will retry", topic, p, results)
            return 0
        log.info("CONTROLLER: partition %s-%d leader %d -> %d, epoch %d -> %d, isr %s -> %s (%s)",
                 topic, p, st.leader, new.leader, st.leader_epoch, new.leader_epoch, st.isr, new.isr, reason)
        return 1

    def _create_state(self, topic: str, p: int, replicas: list[int], live: dict[int, int]) -> int:
        alive = [r for r in replicas if r in live]
        if not alive:
            return 0
        st = PartitionState(leader=alive[0], leader_epoch=0, isr=alive, controller_epoch=self.epoch,
                            incarnations={r: live[r] for r in alive})
        try:
            self.zk.ensure_path(f"{Z.topic_path(topic)}/partitions/{p}")
            tx = self.zk.transaction()
            tx.check(Z.CONTROLLER_EPOCH, self.epoch_version)
            tx.create(Z.state_path(topic, p), st.to_json())
            results = tx.commit()
        except Exception as e:
            log.warning("CONTROLLER: creating state of %s-%d failed: %s", topic, p, e)
            return 0
        if any(isinstance(r, Exception) for r in results):
            return 0
        log.info("CONTROLLER: new partition %s-%d leader %d, epoch 0, isr %s", topic, p, st.leader, st.isr)
        return 1
