"""Status rendering: the AcceleratorPool and Workload statuses (and their conditions) that
the world and a decision imply. Pure: same inputs, same status; the shell writes them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from tessera import api, placement
from tessera.catalog import Accelerator
from tessera.world.facts import ObjectFacts, Placed, PodFacts, placed_of
from tessera.world.snapshot import World


def iso(now: datetime) -> str:
    """A time as status writes it: UTC to the second (metav1.Time)."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int,
    previous: Iterable[Mapping[str, Any]],
    now: datetime,
) -> dict[str, Any]:
    """A metav1.Condition; lastTransitionTime moves only when the status changes."""
    status = "True" if ok else "False"
    old = next((c for c in previous if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else None
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since or iso(now),
    }


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
    ready = [n for n in nodes if n.ready]
    resource = acc.resource_name
    capacity = sum(n.capacity.get(resource, 0) for n in nodes)
    allocatable = sum(n.allocatable.get(resource, 0) for n in nodes)
    allocated = sum(
        world.devices.used.get(n.name, {}).get(resource, 0)
        + world.devices.reserved.get(n.name, {}).get(resource, 0)
        for n in nodes
    )
    available = sum(world.free(n.name, resource) for n in ready)
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
    not_ready = [n.name for n in nodes if not n.ready]
    conditions.append(
        condition(
            "Degraded",
            bool(not_ready),
            "NodesNotReady" if not_ready else "AllNodesReady",
            f"{len(not_ready)} of {len(nodes)} nodes not Ready: {', '.join(not_ready[:10])}"
            if not_ready
            else "all nodes Ready",
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
            "nodes also selected by another pool (counted once, for the first pool by "
            "name): " + ", ".join(f"{n} ({p})" for n, p in sorted(overlap.items())[:10])
            if overlap
            else "no node is selected by another pool",
            gen,
            old,
            now,
        )
    )
    if not resolved_ok:
        ready_cond = ("AcceleratorUnresolved", "; ".join(problems))
    elif not nodes:
        ready_cond = ("NoNodes", "the node selector matches no node")
    elif not ready:
        ready_cond = ("NoReadyNodes", "no node of the pool is Ready")
    else:
        # No device count here: it moves with every pod, and a condition that moved would be
        # written at once, where the counts in status.devices are written every few seconds.
        ready_cond = ("PoolReady", f"{len(ready)}/{len(nodes)} nodes Ready")
    is_ready = ready_cond[0] == "PoolReady"
    if is_ready and world.pool_specs[name].draining:
        ready_cond = ("Draining", "pool is draining: no new placements")
    conditions.insert(0, condition("Ready", is_ready, ready_cond[0], ready_cond[1], gen, old, now))
    return {
        "observedGeneration": gen,
        "accelerator": acc.to_api().model_dump(by_alias=True, mode="json"),
        "nodes": len(nodes),
        "readyNodes": len(ready),
        "nodeNames": [n.name for n in nodes],
        "devices": {
            "capacity": capacity,
            "allocatable": allocatable,
            "allocated": allocated,
            "available": available,
        },
        "summary": {"nodes": f"{len(ready)}/{len(nodes)}", "devices": f"{available}/{allocatable}"},
        "conditions": conditions,
    }


def lifecycle_status(
    spec: api.WorkloadSpec,
    pool: str,
    status: Mapping[str, Any],
    generation: int,
    current: Mapping[int, PodFacts],
    old: Iterable[PodFacts],
    created: int,
    now: datetime,
    refused: str | None = None,
) -> dict[str, Any]:
    """Phase, replica counts and conditions of a placed workload, from its pods: `current` on
    its pool (by replica), `old` still running elsewhere (a migration), `created` this cycle,
    `refused` what the API server said when it last refused one of its pods (a quota, an
    admission policy): while a replica is missing, that is the message and Ready's reason."""
    want = spec.replicas
    old = list(old)
    live = [p for p in current.values() if not p.deleting]
    ready_replicas = {p.replica for p in live if p.ready and not p.terminal}
    ready_replicas |= {p.replica for p in old if p.ready}
    succeeded = [p for p in live if p.phase == "Succeeded"]
    failed = [p for p in live if p.phase == "Failed"]
    ready = len(ready_replicas) + len(succeeded)
    was = status.get("phase") or api.Phase.PLACED.value
    previous = status.get("conditions") or []
    kept = [c for c in previous if c.get("type") not in ("Ready", "Complete", "Failed")]
    message = str(status.get("message", ""))
    if any(c.get("type") == "Ready" and c.get("reason") == "PodsRefused" for c in previous):
        # The refusal is over: the message is the placement's again.
        message = next((c["message"] for c in previous if c.get("type") == "Placed"), message)
    batch = not spec.is_service

    def cond(type_: str, ok: bool, reason: str, text: str) -> dict[str, Any]:
        return condition(type_, ok, reason, text, generation, previous, now)

    if batch and failed:
        phase, message = api.Phase.FAILED, f"pod {failed[0].name} failed"
        new = [
            cond("Failed", True, "PodFailed", message),
            cond("Ready", False, "PodFailed", message),
        ]
    elif batch and len(succeeded) == want:
        phase, message = api.Phase.SUCCEEDED, f"all {want} pods succeeded"
        new = [
            cond("Complete", True, "Succeeded", message),
            cond("Ready", True, "Succeeded", message),
        ]
    elif batch and was == api.Phase.RUNNING.value and len(live) + created < want:
        phase, message = api.Phase.FAILED, f"{want - len(live)} pods vanished before completing"
        new = [cond("Failed", True, "PodLost", message), cond("Ready", False, "PodLost", message)]
    elif ready >= want:
        phase = api.Phase.RUNNING
        new = [cond("Ready", True, "AllReplicasReady", f"{want}/{want} replicas ready on {pool}")]
    else:
        healing = spec.is_service and was == api.Phase.RUNNING.value
        # Running once every replica's pod is seen running; pods only just created do not
        # count, so a status written before its pods exist never claims Running (a restart
        # then still creates whatever is missing).
        started = len(live) >= want and all(p.phase == "Running" for p in live)
        phase = api.Phase.RUNNING if healing or started else api.Phase.PLACED
        if refused and len(live) + created < want:
            message = refused
            new = [cond("Ready", False, "PodsRefused", refused)]
        else:
            text = f"{ready}/{want} replicas ready on {pool}"
            new = [cond("Ready", False, "ReplicasNotReady", text)]
    shown = min(ready, want)
    return {
        "phase": phase.value,
        "replicas": len([p for p in live if not p.terminal]) + created + len(old),
        "readyReplicas": shown,
        "summary": {"ready": f"{shown}/{want}"},
        "message": message,
        "conditions": kept + new,
        "observedGeneration": generation,
    }


def dump(models: Iterable[Any]) -> list[dict[str, Any]]:
    return [m.model_dump(by_alias=True, mode="json", exclude_none=True) for m in models]


def placement_status(
    facts: ObjectFacts, decision: placement.Decision, now: datetime, message: str
) -> dict[str, Any]:
    """A decision as status: where, why, on which nodes, until when (phase Placed)."""
    conds = facts.status.get("conditions") or []
    gen = facts.generation
    runtime = decision.runtime
    finish = None
    if runtime is not None and math.isfinite(runtime):
        finish = iso(now + timedelta(seconds=runtime))
    return {
        "phase": api.Phase.PLACED.value,
        "pool": decision.pool,
        "accelerator": decision.accelerator,
        "vendor": decision.vendor.value if decision.vendor else None,
        "score": decision.score,
        "assignments": dump(decision.assignments),
        "candidates": dump(decision.candidates),
        "message": message,
        "placedAt": iso(now),
        "expectedFinish": finish,
        "observedGeneration": gen,
        "conditions": [
            condition("Placed", True, "Placed", message, gen, conds, now),
            condition("Ready", False, "PodsStarting", "pods are being created", gen, conds, now),
        ],
    }


def placed_from(status: Mapping[str, Any]) -> Placed:
    """The placement a status built by placement_status records."""
    placed = placed_of(status)
    assert placed is not None, "a placement status names its pool"
    return placed


def migrating_status(
    facts: ObjectFacts, decision: placement.Decision, now: datetime, message: str
) -> dict[str, Any]:
    """A running service's move to another pool: the new placement, the phase kept, the
    Placed condition saying Migrating."""
    status = placement_status(facts, decision, now, message)
    status["phase"] = facts.status.get("phase", api.Phase.RUNNING.value)
    conds = facts.status.get("conditions") or []
    migrating = condition("Placed", True, "Migrating", message, facts.generation, conds, now)
    status["conditions"] = [c for c in conds if c.get("type") != "Placed"] + [migrating]
    return status


def waiting_status(
    facts: ObjectFacts,
    message: str,
    candidates: list[dict[str, Any]],
    replicas: int,
    now: datetime,
) -> tuple[dict[str, Any], str]:
    """A workload left waiting, with the candidates (dumped) and why; and the Placed
    condition's reason: waiting for room, or no pool can ever run it."""
    conds = facts.status.get("conditions") or []
    gen = facts.generation
    feasible = any(c.get("feasible") for c in candidates)
    reason = "WaitingForCapacity" if feasible else "NoFeasiblePool"
    status = {
        "phase": api.Phase.PENDING.value,
        "candidates": candidates,
        "message": message,
        "observedGeneration": gen,
        "summary": {"ready": f"0/{replicas}"},
        "conditions": [
            condition("Placed", False, reason, message, gen, conds, now),
            condition("Ready", False, "NotPlaced", message, gen, conds, now),
        ],
    }
    return status, reason


def withdrawn_status(facts: ObjectFacts, pool: str, why: str, now: datetime) -> dict[str, Any]:
    """A gang withdrawn from its pool: Pending again, the pool excluded, the reason said."""
    excluded = list(facts.status.get("excludedPools") or [])
    if pool not in {e.get("pool") for e in excluded}:
        excluded.append({"pool": pool, "reason": why[:1000]})
    conds = facts.status.get("conditions") or []
    gen = facts.generation
    message = f"withdrawn from {pool}: {why}"
    return {
        "phase": api.Phase.PENDING.value,
        "pool": None,
        "accelerator": None,
        "vendor": None,
        "score": None,
        "assignments": [],
        "placedAt": None,
        "expectedFinish": None,
        "excludedPools": excluded,
        "message": message,
        "observedGeneration": gen,
        "conditions": [
            condition("Placed", False, "FallbackTriggered", message, gen, conds, now),
            condition("Ready", False, "NotPlaced", message, gen, conds, now),
        ],
    }


def invalid_spec_status(facts: ObjectFacts, message: str, now: datetime) -> dict[str, Any]:
    """A spec the models refuse (admission let it through): which field, in status."""
    conds = facts.status.get("conditions") or []
    cond = condition("Ready", False, "InvalidSpec", message, facts.generation, conds, now)
    return {"message": message, "conditions": [cond], "observedGeneration": facts.generation}


def recovered_status(accelerator: Accelerator, pool: str) -> dict[str, Any]:
    """What status says of a placement read back from its pods (the operator stopped
    between creating them and writing the decision): where, not why."""
    return {"pool": pool, "accelerator": accelerator.model, "vendor": accelerator.vendor.value}
