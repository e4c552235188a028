"""The AcceleratorPool status the World implies: its nodes and devices, its conditions (Ready,
AcceleratorResolved, Degraded, NodesOverlap), and what a pool being deleted waits for.
Pure: same World, same status; written by tessera.controller.pools."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tessera.world.facts import TERMINAL
from tessera.world.snapshot import World
from tessera.world.status import condition


def pool_status(world: World, name: str, now: datetime) -> dict[str, Any]:
    """The AcceleratorPool status the world implies (level-based: same world, same status)."""
    facts = world.pools[name]
    old = facts.status.get("conditions") or []
    gen = facts.generation
    if name in world.layout.errors:
        cond = condition("Ready", False, "InvalidSpec", world.layout.errors[name], gen, old, now)
        return {"observedGeneration": gen, "conditions": [cond]}
    state = world.layout.base[name]  # the resolution: the counts below need no NodeStates
    acc = state.accelerator
    nodes = [world.nodes[n] for n in world.layout.members[name]]
    unfit = world.layout.unfit.get(name, {})
    usable = [n for n in nodes if n.name not in unfit]
    ready = [n for n in nodes if n.ready]
    resource = acc.resource_name
    capacity = sum(n.capacity.get(resource, 0) for n in nodes)
    allocatable = sum(n.allocatable.get(resource, 0) for n in nodes)
    allocated = sum(
        world.devices.used.get(n.name, {}).get(resource, 0)
        + world.devices.reserved.get(n.name, {}).get(resource, 0)
        for n in nodes
    )
    available = sum(world.free(n.name, resource) for n in usable)
    conditions = []
    problems = list(state.problems)
    resolved_ok = not problems
    reason = (
        "Resolved"
        if resolved_ok
        else ("ModelConflict" if state.resolution == "conflict" else "UnknownModel")
    )
    conditions.append(
        condition(
            "AcceleratorResolved",
            resolved_ok,
            reason,
            "; ".join(problems) or f"{acc.model} from {acc.source}",
            gen,
            old,
            now,
        )
    )
    shown = sorted(unfit.items())[:10]
    conditions.append(
        condition(
            "Degraded",
            bool(unfit),
            "NodesUnavailable" if unfit else "AllNodesAvailable",
            f"{len(unfit)} of {len(nodes)} nodes take no new pods (their devices are not "
            "available): " + ", ".join(f"{n} ({why})" for n, why in shown)
            if unfit
            else "every node takes new pods",
            gen,
            old,
            now,
        )
    )
    overlap = world.layout.overlaps.get(name, {})
    conditions.append(
        condition(
            "NodesOverlap",
            bool(overlap),
            "SelectorsOverlap" if overlap else "NoOverlap",
            "nodes this pool selects are counted for a pool that selected them first: "
            + ", ".join(f"{n} ({p})" for n, p in sorted(overlap.items())[:10])
            if overlap
            else "no node this pool selects is counted for another pool",
            gen,
            old,
            now,
        )
    )
    if not resolved_ok:
        ready_cond = ("AcceleratorUnresolved", "; ".join(problems))
    elif not nodes:
        ready_cond = (
            "NoNodes",
            "the node selector matches no node (or only nodes counted for another pool)"
            if overlap
            else "the node selector matches no node",
        )
    elif not ready:
        ready_cond = ("NoReadyNodes", "no node of the pool is Ready")
    elif not usable:
        ready_cond = ("NoSchedulableNodes", "no node of the pool takes new pods: see Degraded")
    else:
        # No device count here: it moves with every pod, and a condition that moved would be
        # written at once, where the counts in status.devices are written every few seconds.
        ready_cond = ("PoolReady", f"{len(usable)}/{len(nodes)} nodes take new pods")
    is_ready = ready_cond[0] == "PoolReady"
    if facts.deleting:
        is_ready, ready_cond = False, ("Deleting", deletion_message(world, name))
    elif is_ready and world.pool_specs[name].draining:
        ready_cond = ("Draining", "pool is draining: no new placements")
    conditions.insert(0, condition("Ready", is_ready, ready_cond[0], ready_cond[1], gen, old, now))
    return {
        "observedGeneration": gen,
        "accelerator": acc.to_api().model_dump(by_alias=True, mode="json"),
        "nodes": len(nodes),
        "readyNodes": len(ready),
        "nodeNames": [n.name for n in nodes],
        "unavailableNodes": [{"node": n, "reason": why} for n, why in sorted(unfit.items())],
        "devices": {
            "capacity": capacity,
            "allocatable": allocatable,
            "allocated": allocated,
            "available": available,
        },
        "summary": {
            "nodes": f"{len(usable)}/{len(nodes)}",
            "devices": f"{available}/{allocatable}",
        },
        "conditions": conditions,
    }


def holding(world: World, pool: str) -> tuple[list[str], list[str]]:
    """The batch workloads and the services placed on a pool that still hold it (not
    finished, not being deleted), by key: a pool being deleted waits for them."""
    batch: list[str] = []
    services: list[str] = []
    for key, _ in world.placed_on({pool}):
        facts = world.workloads.get(key)
        if facts is None or facts.deleting or facts.status.get("phase") in TERMINAL:
            continue
        template = (facts.spec.get("template") or {}).get("spec") or {}
        service = template.get("restartPolicy", "Always") == "Always"
        (services if service else batch).append(key)
    return batch, services


def deletion_message(world: World, pool: str) -> str:
    """What a pool being deleted waits for, as its Ready condition says."""
    batch, services = holding(world, pool)
    waits = []
    if batch:
        waits.append(f"{len(batch)} batch workload(s) to finish ({', '.join(batch[:5])})")
    if services:
        waits.append(f"{len(services)} service(s) to move away ({', '.join(services[:5])})")
    if not waits:
        return "deleting: no workload holds the pool"
    return "deleting: waits for " + " and ".join(waits)
