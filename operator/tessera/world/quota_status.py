"""The statuses quotas bring: an AcceleratorQuota's (usage in units and devices per pool,
what waits, whether it governs its namespaces) and an evicted Workload's. Pure: built from
the World, written by tessera.controller.quotas and tessera.controller.preemption."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tessera.placement.sharing import Sharing, Victim
from tessera.world.facts import ObjectFacts
from tessera.world.snapshot import World
from tessera.world.status import WAITING_FOR_QUOTA, condition, iso, unplaced


def round_units(units: float) -> float:
    return round(units, 2)


def sharing(world: World) -> Sharing:
    """The quotas over what every placed workload holds now: usage as placement counts it."""
    units = {name: world.accelerator(name).units_per_device for name in world.pool_specs}
    return Sharing(tuple(world.quota_states.values()), units, world.holdings())


def quota_status(
    world: World, name: str, shared: Sharing, preemptions: int, now: datetime
) -> dict[str, Any]:
    """An AcceleratorQuota's status: what it governs, holds, borrows and has waiting."""
    facts = world.quotas[name]
    conds = facts.status.get("conditions") or []
    gen = facts.generation
    spec = world.quota_specs.get(name)
    if isinstance(spec, str) or spec is None:
        message = spec or "not parsed"
        return {
            "observedGeneration": gen,
            "conditions": [condition("Ready", False, "InvalidSpec", message, gen, conds, now)],
        }
    quota = world.quota_states[name]
    contested = {
        ns: shared.contested[ns] for ns in sorted(quota.namespaces) if ns in shared.contested
    }
    governed = sorted(ns for ns in quota.namespaces if ns not in contested)
    used = shared.base.units.get(name, 0.0)
    held = shared.base.devices.get(name, {})
    waiting = [
        f for key in world.unplaced if (f := world.workloads[key]).namespace in quota.namespaces
    ]
    for_quota = sum(1 for f in waiting if _placed_reason(f) == WAITING_FOR_QUOTA)
    if contested:
        listed = "; ".join(
            f"{ns} (also {', '.join(q for q in qs if q != name)})" for ns, qs in contested.items()
        )
        ready = condition(
            "Ready",
            False,
            "NamespacesOverlap",
            f"namespaces selected by other quotas too, their workloads wait: {listed}",
            gen,
            conds,
            now,
        )
    else:
        ready = condition(
            "Ready", True, "Governing", f"governs {len(governed)} namespaces", gen, conds, now
        )
    return {
        "observedGeneration": gen,
        "namespaces": governed,
        "nominal": spec.nominal,
        "used": round_units(used),
        "borrowed": round_units(max(0.0, used - spec.nominal)),
        "pools": [
            {"pool": pool, "devices": devices, "units": round_units(shared.cost(pool, devices))}
            for pool, devices in sorted(held.items())
            if devices
        ],
        "waiting": len(waiting),
        "waitingForQuota": for_quota,
        "preemptions": preemptions,
        "conditions": [ready],
    }


def _placed_reason(facts: ObjectFacts) -> str | None:
    for c in facts.status.get("conditions") or ():
        if c.get("type") == "Placed":
            return str(c.get("reason"))
    return None


def preempted_status(facts: ObjectFacts, victim: Victim, by: str, now: datetime) -> dict[str, Any]:
    """An evicted workload: Pending again (keeping its age: the queue orders by creation),
    its placement cleared, and the eviction recorded: status.preempted and a Preempted
    condition naming the workload it made room for and the rule."""
    conds = facts.status.get("conditions") or []
    gen = facts.generation
    rule = (
        "a higher-priority workload of the same quota"
        if victim.rule == "WithinQuota"
        else "its quota had borrowed capacity another quota reclaims"
    )
    message = (
        f"preempted from {victim.pool} by {by} ({victim.rule}: {rule}); waiting to be placed again"
    )
    return {
        **unplaced(),
        "message": message,
        "preempted": {"by": by, "rule": victim.rule, "pool": victim.pool, "at": iso(now)},
        "observedGeneration": gen,
        "conditions": [
            condition("Placed", False, "Preempted", message, gen, conds, now),
            condition("Ready", False, "NotPlaced", message, gen, conds, now),
            condition("Preempted", True, victim.rule, message, gen, conds, now),
        ],
    }
