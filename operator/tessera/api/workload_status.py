"""A Workload's status: where it was placed and why (the candidates and their scores), how its
pods are doing, what it was withdrawn from, and its last failure. Pure data; imports
tessera.api.common."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from tessera.api.common import (
    CONDITIONS_LIST,
    Condition,
    Model,
    Phase,
    Vendor,
    described,
)


class ScoreBreakdown(Model):
    """How a pool's score was made: each normalised term in [0, 1] and the total."""

    performance: float = described("Normalised speed (1 = fastest feasible pool).", 0.0)
    cost: float = described("Normalised cheapness per unit of work (1 = cheapest).", 0.0)
    energy: float = described("Normalised frugality per unit of work (1 = least energy).", 0.0)
    preference: float = described("Admin preference contribution.", 0.0)
    throughput: float = described("Estimated throughput per device the terms were made from.", 0.0)
    contention: float = described(
        "Points subtracted because other pending work values this pool's free devices more "
        "(their shadow price); 0 when the pool is not contended.",
        0.0,
    )


class Candidate(Model):
    """One pool as the scorer saw it for this workload."""

    pool: str = described("Pool name.")
    accelerator: str = described("Model key of the pool's accelerator.", "")
    feasible: bool = described("Whether the pool can run the workload at all.")
    fits_now: bool = described("Whether the pool has room for every replica now.", False)
    score: float = described("Total score, 0-100 plus preference; higher is better.", 0.0)
    breakdown: ScoreBreakdown | None = described("The terms of the score.", None)
    reasons: list[str] = described("Why the pool is ruled out or waits.", default_factory=list)


class Assignment(Model):
    """Where one replica of the workload goes."""

    replica: int = described("Replica index, from 0.", ge=0)
    node: str = described("Node the replica's devices were reserved on.")


class PoolSeen(Model):
    """A pool as it was when a workload was withdrawn from it: a change lifts the exclusion."""

    generation: int = described("The pool's metadata.generation.", 0, ge=0)
    nodes: int = described("Its nodes that took new pods.", 0, ge=0)
    available: int = described(
        "Devices free on them once the withdrawn pods' devices came back.", 0, ge=0
    )


class ExcludedPool(Model):
    """A pool withdrawn from after its pods could not be bound or created there. Not tried
    again until the pool changes (spec, nodes, more free devices) or retryAt passes."""

    pool: str = described("Pool name.")
    reason: str = described("Why it was withdrawn from.")
    since: datetime | None = described("When it was withdrawn from.", None)
    retry_at: datetime | None = described(
        "When it is tried again at the latest; the wait doubles with each withdrawal from "
        "the same pool, up to an hour. Unset once the workload was placed there again: the "
        "entry then only counts the withdrawals.",
        None,
    )
    withdrawals: int = described("Withdrawals from this pool in a row.", 1, ge=1)
    seen: PoolSeen | None = described("The pool when it was withdrawn from.", None)
    refused: bool = described(
        "The API server refused its pods there (a quota, an admission policy): more free "
        "devices do not lift it, a change of the pool or retryAt does.",
        False,
    )


class PodFailure(Model):
    """The pod failure (or node loss) that last restarted a batch gang, or failed it."""

    pod: str = described("The pod that failed, or the lost replica's pod.")
    uid: str = described("Its UID: a failure is counted once.", "")
    replica: int = described("Its replica index.", 0, ge=0)
    reason: str = described("Why, in words: its container's exit, or the node lost.")
    at: datetime | None = described("When the operator saw it.", None)


class WorkloadSummary(Model):
    """Pre-formatted figures for `kubectl get` columns."""

    ready: str = described("Ready/desired replicas, e.g. 2/4.", "0/0")
    reason: str | None = described(
        "A waiting workload's first reason, at most 60 characters (e.g. `h100: room for 1 "
        "of 2 pods`): the best feasible pool and what it lacks now, or the nearest pool and "
        "what rules it out. Written with the candidates it is taken from, never on its own; "
        "taken off once placed.",
        None,
        max_length=60,
    )


class PreemptionRecord(Model):
    """The last time the workload was evicted to make room for another."""

    by: str = described("The workload it made room for, namespace/name.")
    rule: Literal["WithinQuota", "Reclaim"] = described(
        "WithinQuota: a higher-priority workload of the same quota. Reclaim: a quota below "
        "its nominal took back capacity this workload's quota had borrowed."
    )
    pool: str = described("The pool it was evicted from.")
    at: datetime = described("When.")


class WorkloadStatus(Model):
    """Observed state of a Workload: where it was placed, why, and how its pods are doing."""

    observed_generation: int | None = described("The generation this status describes.", None)
    phase: Phase = described("Pending, Placed, Running, Succeeded or Failed.", Phase.PENDING)
    pool: str | None = described(
        "Pool the workload is placed on. While set, accelerator is immutable, and so are a "
        "batch workload's replicas, template, variants and distributed settings.",
        None,
    )
    accelerator: str | None = described("Model key of the accelerator it is placed on.", None)
    vendor: Vendor | None = described("Vendor of that accelerator.", None)
    score: float | None = described("Score of the chosen pool.", None)
    assignments: list[Assignment] = described(
        "Node reserved for each replica by the placement decision.", default_factory=list
    )
    candidates: list[Candidate] = described(
        "Pools considered, best first, capped at 8: the feasible ones, then the near misses "
        "(pools the workload's own pools, vendors and models let through; every pool when "
        "none passes them). Capped so that a status, written again whenever a waiting "
        "workload's reasons change, stays small whatever the fleet: eight covers every pool "
        "of most fleets and the real choices of the rest. `tessera explain` and `tessera "
        "plan` list every pool.",
        default_factory=list,
    )
    candidates_omitted: int = described(
        "Pools considered but left out of candidates by the cap: feasible pools and near "
        "misses past the first 8.",
        0,
        ge=0,
    )
    excluded_pools: list[ExcludedPool] = described(
        "Pools withdrawn from after a fallback; tried again when they change or their "
        "retryAt passes.",
        default_factory=list,
    )
    quota: str | None = described("The AcceleratorQuota that governs its namespace, if any.", None)
    preempted: PreemptionRecord | None = described(
        "Its last eviction: by whom, by which rule, from which pool. Pods of that pool are "
        "not its placement any more until it is placed again.",
        None,
    )
    restarts: int = described(
        "Whole-gang restarts of a batch workload so far (spec.failurePolicy.backoffLimit).",
        0,
        ge=0,
    )
    last_failure: PodFailure | None = described(
        "The failure that caused the last restart, or the Failed phase.", None
    )
    template_hash: str | None = described(
        "Hash of the template, variants and distributed settings the pods are made from. A "
        "service whose spec hashes otherwise is rolling its pods to the new spec.",
        None,
    )
    service: str | None = described(
        "The headless Service the replicas find each other through (more than one "
        "replica): replica i is <workload>-<i>.<service>.<namespace>.svc.",
        None,
    )
    selector: str | None = described(
        "Label selector of the workload's pods, for the scale subresource (a "
        "HorizontalPodAutoscaler reads it).",
        None,
    )
    replicas: int = described("Pods that exist.", 0, ge=0)
    ready_replicas: int = described("Pods that are Ready (or Succeeded, for batch).", 0, ge=0)
    summary: WorkloadSummary = described(
        "Figures for kubectl columns.", default_factory=WorkloadSummary
    )
    message: str = described("One line on the current state.", "")
    placed_at: datetime | None = described("When the placement decision was made.", None)
    expected_finish: datetime | None = described(
        "When the run is expected to end, given an estimatedDuration: placedAt plus the "
        "estimate scaled to the chosen pool's speed (the estimate is for the fastest pool). "
        "Placement counts the devices free from then on.",
        None,
    )
    conditions: list[Condition] = described(
        "Placed (a pool was chosen), Ready (every replica is ready) and others.",
        default_factory=list,
        json_schema_extra=CONDITIONS_LIST,
    )
