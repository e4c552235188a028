"""Fallback and migration: a gang withdrawn from a pool that cannot run it, and a running
service moved off a draining pool. Re-plans go through the cycle's one plan (tessera.controller
.placing), never a plan of their own: pods are pinned to nodes, and two plans double-book."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tessera import api, metrics, placement
from tessera.controller.events import Events
from tessera.controller.ledger import Ledger
from tessera.controller.writes import Writes
from tessera.errors import Conflict
from tessera.world.facts import TERMINAL, ObjectFacts, Placed, PodFacts
from tessera.world.snapshot import World
from tessera.world.status import (
    migrating_status,
    migration_waiting,
    placed_from,
    withdrawn_status,
)

log = logging.getLogger("tessera.controller")


def withdraw(
    facts: ObjectFacts,
    placed: Placed,
    pods: list[PodFacts],
    why: str,
    now: datetime,
    writes: Writes,
    ledger: Ledger,
    events: Events,
    excluded: list[dict[str, Any]] | None = None,
) -> None:
    """Deletes the gang's pods on the pool and re-queues the workload, with `excluded` as
    its excludedPools (tessera.world.exclusions; None: the pool is not to blame, and they
    stay as they were): the next cycle's plan places it again."""
    for pod in pods:
        if not pod.terminal:
            writes.delete_pod(pod)
    status = withdrawn_status(facts, placed.pool, why, now, excluded)
    writes.status(facts, status, guard=False)
    ledger.forget(facts.key)
    metrics.FALLBACKS.labels(placed.pool).inc()
    message = status["message"]
    events.post(facts, "Workload", "FallbackTriggered", message, warning=True)
    log.warning("workload %s/%s %s", facts.namespace, facts.name, message)


@dataclass(frozen=True)
class Move:
    """A running service to be planned elsewhere: its pool is draining, or has no room for
    the replicas a scale up added (`outgrown`)."""

    facts: ObjectFacts
    placed: Placed
    pending: placement.PendingWorkload
    outgrown: bool = False


def moves(
    world: World,
    ledger: Ledger,
    spec_of: Callable[[ObjectFacts], api.WorkloadSpec | None],
    excluded_of: Callable[[ObjectFacts], dict[str, str]],
) -> list[Move]:
    """The services to move this cycle: off draining pools, and those whose scale up found
    no room on their pool last cycle (Ledger.outgrown: placed as any placement, whole, on a
    pool with room for every replica). Each placed there, every replica Ready (but those
    lost or added) and none still running elsewhere (one move at a time), no write of this
    process's in flight. Costs a look at every placement only while some pool is draining."""
    draining = {name for name, spec in world.pool_specs.items() if spec.draining}
    outgrown = ledger.outgrown()
    if not draining and not outgrown:
        return []
    lost = ledger.losses()
    candidates = world.placed_on(draining) if draining else []
    for key in sorted(outgrown):
        placed = world.placement_of(key)
        if placed is not None and placed.pool not in draining:
            candidates.append((key, placed))
    out = []
    for key, placed in candidates:
        facts = world.workloads.get(key)
        if facts is None or facts.deleting or facts.status.get("phase") in TERMINAL:
            continue
        if facts.status.get("pool") != placed.pool:
            continue  # not yet recorded: its decision is written first
        if ledger.writing(key) or ledger.unwritten(key) is not None:
            continue
        spec = spec_of(facts)
        if spec is None or not spec.is_service:
            continue
        pods = [p for p in world.pods_by_workload.get(key, ()) if p.owner_uid == facts.uid]
        ready = {p.replica for p in pods if p.pool == placed.pool and p.ready and not p.deleting}
        elsewhere = [p for p in pods if p.pool != placed.pool and not p.terminal]
        # A service that lost replicas with their node moves as it is: the drained pool
        # takes no replacement for them.
        if elsewhere or (len(ready) < spec.replicas and key not in lost):
            continue
        excluded = excluded_of(facts)  # a draining pool is ruled out as draining
        grown = placed.pool not in draining
        if grown:
            excluded = {**excluded, placed.pool: f"no room for the {spec.replicas} replicas"}
        pending = placement.PendingWorkload(
            namespace=facts.namespace or "",
            name=facts.name,
            spec=spec,
            created_at=facts.created,
            excluded_pools=excluded,
            holds=True,
        )
        out.append(Move(facts, placed, pending, grown))
    return out


def record_move(
    move: Move,
    decision: placement.Decision,
    now: datetime,
    writes: Writes,
    ledger: Ledger,
    events: Events,
) -> None:
    """Writes a move's decision; the visits then move one replica at a time, the new pod
    Ready before the old is deleted. Without room elsewhere, a drained service says so and
    stays; an outgrown one goes back to waiting for room on its pool."""
    facts, pool = move.facts, move.placed.pool
    if not decision.placed:
        if move.outgrown:
            return  # its pool again next cycle (a repair), which says why it waits
        message = migration_waiting(pool, decision.message)
        if facts.status.get("message") != message:
            writes.status(facts, {"message": message}, guard=False)
            events.post(facts, "Workload", "MigrationWaiting", message, warning=True)
        return
    replicas = move.pending.spec.replicas
    message = (
        f"pool {pool} has no room for all {replicas} replicas: migrating to {decision.pool}, "
        "one pod at a time"
        if move.outgrown
        else f"pool {pool} is draining: migrating to {decision.pool}, one pod at a time"
    )
    status = migrating_status(facts, decision, now, message)
    try:
        writes.status(facts, status)
    except Conflict:
        return
    ledger.assume(facts, placed_from(status))
    events.post(facts, "Workload", "Migrating", message)
