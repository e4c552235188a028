"""Status rendering: the Workload statuses (and their conditions) that the world and a
decision imply, and the metav1.Condition every status is written with (the pool's, in
tessera.world.pool_status, and the quota's too). Pure: same inputs, same status; the shell
writes them."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from tessera import api, placement
from tessera.catalog import Accelerator
from tessera.world.exclusions import lifted
from tessera.world.facts import ObjectFacts, Placed, PodFacts, placed_of


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


def migration_waiting(pool: str, why: str) -> str:
    """A running service's message while its draining pool has nowhere to send it."""
    return f"pool {pool} is draining; no other pool has room yet: {why}"


def settled_message(status: Mapping[str, Any], pool: str, draining: bool) -> str | None:
    """The placement's message again when the status still says the service waits to leave
    a pool that drains no more (undrained, or gone): None when there is nothing to put right."""
    message = str(status.get("message", ""))
    if draining or not message.startswith(migration_waiting(pool, "")):
        return None
    placed = next((c for c in status.get("conditions") or [] if c.get("type") == "Placed"), None)
    return str(placed.get("message", "")) if placed else f"placed on {pool}"


# The reason a replica added by a scale up waits for a node, as the repairs carry it.
SCALED_UP = "added by a scale to"


def replica_list(replicas: Iterable[int]) -> str:
    """`replica 3`, `replicas 3-39` (a run), `replicas 1, 4`: short however many."""
    ordered = sorted(replicas)
    if len(ordered) == 1:
        return f"replica {ordered[0]}"
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"replicas {ordered[0]}-{ordered[-1]}"
    return "replicas " + ", ".join(map(str, ordered))


def lost_message(lost: Mapping[int, str]) -> str:
    """`replica 1 lost: node n-3 was deleted`, for each replica lost with its node, and
    `replicas 3-39 added by a scale to 40` for those a scale up added (one phrase)."""
    scaled = [r for r, why in lost.items() if why.startswith(SCALED_UP)]
    parts = [f"replica {r} lost: {why}" for r, why in sorted(lost.items()) if r not in scaled]
    if scaled:
        parts.append(f"{replica_list(scaled)} {lost[scaled[0]]}")
    return "; ".join(parts)


# Ready reasons whose message replaced the placement's for a while (a refusal, a loss, a
# scale up, a restart): once over, the message is the placement's again.
_PASSING = ("PodsRefused", "ReplicasLost", "ScalingUp", "GangRestarting")


def restarting_status(
    facts: ObjectFacts, restarts: int, limit: int, failure: Mapping[str, Any], now: datetime
) -> dict[str, Any]:
    """A batch gang restarted whole after `failure` (tessera.controller.restarts): Placed
    again on its pool, the restart counted, the failure kept."""
    conds = facts.status.get("conditions") or []
    gen = facts.generation
    message = (
        f"restarting the gang ({restarts} of {limit} restarts): pod {failure['pod']} "
        f"failed: {failure['reason']}"
    )
    kept = [c for c in conds if c.get("type") not in ("Ready", "Complete", "Failed")]
    return {
        "phase": api.Phase.PLACED.value,
        "restarts": restarts,
        "lastFailure": dict(failure),
        "readyReplicas": 0,
        "message": message,
        "observedGeneration": gen,
        "conditions": [
            *kept,
            condition("Ready", False, "GangRestarting", message, gen, conds, now),
        ],
    }


def _past_limit(spec: api.WorkloadSpec, status: Mapping[str, Any]) -> str:
    """What a batch gang's Failed message adds when it had restarts to spend."""
    limit = spec.failure_policy.backoff_limit
    if not limit:
        return ""
    return f" (backoffLimit {limit} reached after {int(status.get('restarts') or 0)} restarts)"


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
    lost: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """Phase, replica counts and conditions of a placed workload, from its pods: `current` on
    its pool (by replica), `old` still running elsewhere (a migration), `created` this cycle,
    `refused` what the API server said when it last refused one of its pods (a quota, an
    admission policy): while a replica is missing, that is the message and Ready's reason;
    `lost` the replicas lost with their node (replica -> why): the same, before a refusal."""
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
    if any(c.get("type") == "Ready" and c.get("reason") in _PASSING for c in previous):
        # The refusal (or the loss) is over: the message is the placement's again.
        message = next((c["message"] for c in previous if c.get("type") == "Placed"), message)
    batch = not spec.is_service

    def cond(type_: str, ok: bool, reason: str, text: str) -> dict[str, Any]:
        return condition(type_, ok, reason, text, generation, previous, now)

    extra: dict[str, Any] = {}
    if batch and failed:
        first = min(failed, key=lambda p: (p.replica is None, p.replica, p.name))
        why = first.failure or "it failed"
        phase = api.Phase.FAILED
        message = f"pod {first.name} failed: {why}{_past_limit(spec, status)}"
        extra["lastFailure"] = {
            "pod": first.name,
            "uid": first.uid,
            "replica": first.replica or 0,
            "reason": why[:500],
            "at": iso(now),
        }
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
        reason = "PodLost"
        if lost:
            message, reason = f"{lost_message(lost)}: the gang cannot complete", "NodeLost"
        message += _past_limit(spec, status)
        new = [cond("Failed", True, reason, message), cond("Ready", False, reason, message)]
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
        if lost:
            message = f"{lost_message(lost)}; waiting for room on {pool}"
            scaling = all(why.startswith(SCALED_UP) for why in lost.values())
            new = [cond("Ready", False, "ScalingUp" if scaling else "ReplicasLost", message)]
        elif refused and len(live) + created < want:
            message = refused
            new = [cond("Ready", False, "PodsRefused", refused)]
        else:
            text = f"{ready}/{want} replicas ready on {pool}"
            new = [cond("Ready", False, "ReplicasNotReady", text)]
    shown = min(ready, want)
    summary: dict[str, Any] = {"ready": f"{shown}/{want}"}
    if "reason" in (status.get("summary") or {}):
        summary["reason"] = None  # the waiting reason, taken off by the merge patch
    return {
        "phase": phase.value,
        "replicas": len([p for p in live if not p.terminal]) + created + len(old),
        "readyReplicas": shown,
        "summary": summary,
        "message": message,
        "conditions": kept + new,
        "observedGeneration": generation,
        **extra,
    }


# status.summary.reason, the waiting workload's `kubectl get` column: at most this long.
REASON_CHARS = 60

# The capacity reasons (tessera.placement.feasibility.capacity_reason), said shorter.
_NO_NODE = re.compile(r"no node has (\d+) free \S+ \(largest free: (\d+)\)")
_ROOM = re.compile(r"room for (\d+) of (\d+) pods of \d+ \S+ now")


def short_reason(candidates: Sequence[Mapping[str, Any]], waiting_for: str | None = None) -> str:
    """The first reason a workload waits, for a narrow column (status.summary.reason): the
    pool it waits for, else the first candidate with a reason (the best feasible pool, or
    the nearest miss), as `POOL: reason`, at most REASON_CHARS characters."""
    if waiting_for is not None:
        return _clip(f"waiting for {waiting_for}: expected to finish sooner")
    first = next((c for c in candidates if c.get("reasons")), None)
    if first is None:
        return "no pool" if not candidates else "waiting for capacity"
    why = str(first["reasons"][0])
    if m := _NO_NODE.fullmatch(why):
        why = f"no node has {m.group(1)} free (largest {m.group(2)})"
    elif m := _ROOM.fullmatch(why):
        why = f"room for {m.group(1)} of {m.group(2)} pods"
    return _clip(f"{first.get('pool')}: {why}")


def _clip(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3].rstrip() + "..."


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
    status: dict[str, Any] = {}
    excluded = facts.status.get("excludedPools") or []
    if any(e.get("pool") == decision.pool and e.get("retryAt") for e in excluded):
        status["excludedPools"] = lifted(excluded, decision.pool or "")
    return status | {
        "phase": api.Phase.PLACED.value,
        "pool": decision.pool,
        "accelerator": decision.accelerator,
        "vendor": decision.vendor.value if decision.vendor else None,
        "score": decision.score,
        "assignments": dump(decision.assignments),
        "candidates": dump(decision.candidates),
        "candidatesOmitted": decision.omitted,
        "summary": {"reason": None},  # no longer waiting (a merge patch: `ready` is kept)
        "message": message,
        "quota": decision.quota,
        "preempted": None,  # placed again: its pods are its placement once more
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


# The Placed condition's reason while a workload fits the fleet but not its quota.
WAITING_FOR_QUOTA = "WaitingForQuota"


def waiting_status(
    facts: ObjectFacts,
    message: str,
    candidates: list[dict[str, Any]],
    replicas: int,
    now: datetime,
    omitted: int = 0,
    waiting_for: str | None = None,
    quota: str | None = None,
    for_quota: bool = False,
) -> tuple[dict[str, Any], str]:
    """A workload left waiting, with the candidates (dumped), how many more pools were
    considered (`omitted`), and why, at length and in short (summary.reason, from the same
    candidates: written with them, never on its own); and the Placed condition's reason:
    waiting for room, for its quota (`for_quota`: it would fit the fleet now), or no pool
    can ever run it."""
    conds = facts.status.get("conditions") or []
    gen = facts.generation
    feasible = any(c.get("feasible") for c in candidates)
    reason = "WaitingForCapacity" if feasible else "NoFeasiblePool"
    short = short_reason(candidates, waiting_for)
    if for_quota:
        reason, short = WAITING_FOR_QUOTA, _clip(f"quota {quota}: over its share now")
    status = {
        "phase": api.Phase.PENDING.value,
        "candidates": candidates,
        "candidatesOmitted": omitted,
        "message": message,
        "quota": quota,
        "observedGeneration": gen,
        "summary": {"ready": f"0/{replicas}", "reason": short},
        "conditions": [
            condition("Placed", False, reason, message, gen, conds, now),
            condition("Ready", False, "NotPlaced", message, gen, conds, now),
            # An evicted workload says so until it is placed again (world.quota_status).
            *(c for c in conds if c.get("type") == "Preempted" and facts.status.get("preempted")),
        ],
    }
    return status, reason


def unplaced() -> dict[str, Any]:
    """What a placement set, cleared: a workload sent back to the queue (its age kept)."""
    return {
        "phase": api.Phase.PENDING.value,
        "pool": None,
        "accelerator": None,
        "vendor": None,
        "score": None,
        "assignments": [],
        "placedAt": None,
        "expectedFinish": None,
    }


def withdrawn_status(
    facts: ObjectFacts,
    pool: str,
    why: str,
    now: datetime,
    excluded: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A gang withdrawn from its pool: Pending again, the reason said, and `excluded` its
    excludedPools from now on (tessera.world.exclusions; None: as they were, for a pool
    that is not to blame: deleted, or a node lost)."""
    conds = facts.status.get("conditions") or []
    gen = facts.generation
    message = f"withdrawn from {pool}: {why}"
    status: dict[str, Any] = {
        **unplaced(),
        "message": message,
        "observedGeneration": gen,
        "conditions": [
            condition("Placed", False, "FallbackTriggered", message, gen, conds, now),
            condition("Ready", False, "NotPlaced", message, gen, conds, now),
        ],
    }
    if excluded is not None:
        status["excludedPools"] = excluded
    return status


def invalid_spec_status(facts: ObjectFacts, message: str, now: datetime) -> dict[str, Any]:
    """A spec the models refuse (admission let it through): which field, in status."""
    conds = facts.status.get("conditions") or []
    cond = condition("Ready", False, "InvalidSpec", message, facts.generation, conds, now)
    return {"message": message, "conditions": [cond], "observedGeneration": facts.generation}


def recovered_status(accelerator: Accelerator, placed: Placed) -> dict[str, Any]:
    """What status says of a placement read back from its pods (the operator stopped
    between creating them and writing the decision): where, not why; the nodes its pods are
    pinned to too. Without them the placement read back from this status would have no
    nodes, and the pods of the replicas never made would be created with none."""
    return {
        "pool": placed.pool,
        "accelerator": accelerator.model,
        "vendor": accelerator.vendor.value,
        "assignments": [{"replica": r, "node": n} for r, n in sorted(placed.assignments.items())],
    }
