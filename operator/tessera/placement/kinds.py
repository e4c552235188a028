"""Kinds of workload: what makes pending workloads alike for the planning cycle (their
signature: the key of its per-kind cache), and one kind's static evaluation (feasible pools,
scores, nearest misses). Pure; imports tessera.api and the placement modules only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tessera.placement.feasibility import chosen_away, static_reasons
from tessera.placement.feasibility import feasible as is_feasible
from tessera.placement.scoring import score, weights_for
from tessera.placement.snapshot import PendingWorkload, PoolView
from tessera.placement.state import PoolWork, Static


def signature(w: PendingWorkload, closed: tuple[str, ...]) -> tuple[object, ...]:
    """What decides a workload's feasibility and scores: workloads alike share one static
    evaluation per cycle. `closed` are the pools (sorted: the signature's repr orders the
    auction, so it must not depend on set order) whose namespace rule shuts its namespace
    out, so namespaces that no rule tells apart share too."""
    need, spec = w.spec.accelerator, w.spec
    weights = spec.weights
    return (
        closed,
        tuple(sorted(w.excluded_pools.items())),
        spec.replicas,
        spec.objective,
        (weights.performance, weights.cost, weights.energy) if weights else None,
        need.count,
        need.min_memory_gib,
        need.precision,
        need.profile,
        tuple(need.vendors),
        tuple(need.models),
        tuple(need.exclude_models),
        tuple(need.pools),
        tuple(need.features),
        tuple(sorted(need.software.items())),
        tuple(sorted(need.throughput.items())),
        tolerations_key(w),
    )


def feasibility_key(w: PendingWorkload, closed: tuple[str, ...]) -> tuple[object, ...]:
    """The part of the signature that decides which pools are feasible, near misses or
    chosen away (feasibility.feasible, selection_reasons): kinds that differ only in how
    they score (objective, weights, profile, measured throughput) share it. With every
    spec its own kind (measured throughputs per team), the pools' tests were a third of
    a 10,000-workload cycle; the distinct keys are a few hundred to two thousand. Its
    fields are the signature's less those; the signature keeps them in its own order,
    which orders the auction."""
    need, spec = w.spec.accelerator, w.spec
    return (
        closed,
        tuple(sorted(w.excluded_pools.items())),
        spec.replicas,
        need.count,
        need.min_memory_gib,
        need.precision,
        tuple(need.vendors),
        tuple(need.models),
        tuple(need.exclude_models),
        tuple(need.pools),
        tuple(need.features),
        tuple(sorted(need.software.items())),
        tolerations_key(w),
    )


def tolerations_key(w: PendingWorkload) -> tuple[object, ...]:
    """The template's tolerations, comparable: they decide which tainted nodes it may use."""
    tolerations = w.tolerations
    if not tolerations:
        return ()
    return tuple(sorted(tuple(sorted((k, str(v)) for k, v in t.items())) for t in tolerations))


@dataclass(frozen=True, slots=True)
class Feasibility:
    """Which pools one feasibility key may use, and why the others are out (in pool order)."""

    feasible: tuple[PoolView, ...]
    near: tuple[PoolView, ...]  # infeasible, though the workload's own selection allows them
    away: tuple[PoolView, ...]  # chosen away by its own pools, vendors, models
    unlocked: dict[str, frozenset[str]]  # per pool, the tainted nodes its tolerations unlock


def feasibility(
    w: PendingWorkload, pools: Sequence[PoolWork], ns_labels: Mapping[str, str]
) -> Feasibility:
    """Every pool tested for a workload: what is shared by its feasibility_key."""
    feasible: list[PoolView] = []
    near: list[PoolView] = []
    away: list[PoolView] = []
    for p in pools:
        if is_feasible(w, p.view, ns_labels):
            feasible.append(p.view)
        else:
            (away if chosen_away(w, p.view) else near).append(p.view)
    gated = [p.view for p in pools if p.view.gated]
    tolerations = w.tolerations if gated else ()
    unlocked = {view.name: u for view in gated if (u := view.unlocked(tolerations))}
    return Feasibility(tuple(feasible), tuple(near), tuple(away), unlocked)


def static(
    w: PendingWorkload,
    pools: Sequence[PoolWork],
    ns_labels: Mapping[str, str],
    tested: Feasibility | None = None,
) -> Static:
    """The near misses are the infeasible pools the workload's own selection lets through
    (a pool short of memory or fp8 says something); pools it chose away are listed only
    when no pool passes that selection. "vendor amd is not allowed" for every AMD pool
    would say nothing the spec does not, and make every status write larger.
    `tested`: the pools' tests for its feasibility key, when another kind made them."""
    if tested is None:
        tested = feasibility(w, pools, ns_labels)
    feasible, near, away = tested.feasible, tested.near, tested.away
    scored = score(w.spec, feasible)
    best = max((s.throughput for s in scored), default=0.0)
    shape = (w.spec.replicas, w.spec.accelerator.count)
    wp, wc, we = weights_for(w.spec)
    cost_only = wc > 0 and wp == 0 and we == 0

    def reasons(view: PoolView) -> int:
        return len(static_reasons(w, view, ns_labels))

    return Static(
        scored,
        near if feasible or near else away,
        len(near) + len(away),
        len(away),
        best,
        shape,
        cost_only,
        unlocked=dict(tested.unlocked),
        reasons=reasons,
    )
