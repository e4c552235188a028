"""Evictions a plan decided (tessera.placement.sharing.victims): each victim's status written
first (Pending, its placement cleared, the eviction recorded), then its pods on that pool
deleted with their grace period. The preemptor is placed by a later cycle's plan once the
devices are free. A restart between the two finds the record and deletes the pods
(World.stale_pods); the same eviction is never made twice."""

from __future__ import annotations

import logging
from datetime import datetime

from tessera import metrics, placement
from tessera.controller.events import Events
from tessera.controller.ledger import Ledger
from tessera.controller.writes import Writes
from tessera.world.quota_status import preempted_status
from tessera.world.snapshot import World

log = logging.getLogger("tessera.controller")


def evict(
    world: World,
    decision: placement.Decision,
    now: datetime,
    writes: Writes,
    ledger: Ledger,
    events: Events,
) -> list[str]:
    """Evicts the decision's victims; returns the keys evicted (a victim whose own status
    write is still in flight is left for the next cycle, which decides again)."""
    preemption = decision.preemption
    if preemption is None:
        return []
    by = f"{decision.namespace}/{decision.name}"
    evicted = []
    for victim in preemption.victims:
        facts = world.workloads.get(victim.key)
        if facts is None or facts.deleting or ledger.writing(victim.key):
            continue
        status = preempted_status(facts, victim, by, now)
        writes.status(facts, status, guard=False)
        ledger.forget(victim.key)
        for pod in world.pods_by_workload.get(victim.key, ()):
            mine = pod.owner_uid == facts.uid and pod.pool == victim.pool
            if mine and not pod.terminal and not pod.deleting:
                writes.delete_pod(pod)
        metrics.PREEMPTIONS.labels(decision.quota or "", victim.rule).inc()
        events.post(facts, "Workload", "Preempted", status["message"], warning=True)
        log.warning("workload %s %s", victim.key, status["message"])
        evicted.append(victim.key)
    preemptor = world.workloads.get(by)
    if evicted and preemptor is not None:
        events.post(preemptor, "Workload", "Preempting", decision.message)
    return evicted
