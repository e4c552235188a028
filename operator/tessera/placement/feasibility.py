"""Feasibility: every reason that rules a pool out for a workload, as sentences users read.
Pure functions over snapshot views; imports tessera.api and placement.snapshot/fit only."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tessera.placement.fit import NodeFit
from tessera.placement.snapshot import PendingWorkload, PoolView, parse_version

_CONSTRAINT = re.compile(r"^(>=|<=|==|>|<|=|~)?\s*([0-9]+(?:\.[0-9]+){0,3})$")


def satisfies(have: tuple[int, ...], constraint: str) -> bool:
    """Whether a version meets a constraint such as `>=12.1`, `<13`, `==6.0` or `~12.1`
    (same major, at least that minor). A bare version means `>=`."""
    m = _CONSTRAINT.match(constraint.strip())
    if not m:
        return False
    op, want = m.group(1) or ">=", parse_version(m.group(2))
    if op == "~":
        return have[0] == want[0] and have >= want
    return {
        ">=": have >= want,
        ">": have > want,
        "<=": have <= want,
        "<": have < want,
        "==": have == want,
        "=": have == want,
    }[op]


def _pretty(constraint: str) -> str:
    m = _CONSTRAINT.match(constraint.strip())
    return f"{m.group(1) or '>='} {m.group(2)}" if m else constraint


def software_reasons(needs: Mapping[str, str], pool: PoolView) -> list[str]:
    """A constraint applies to a pool whose stack is that software (cuda on NVIDIA, rocm on
    AMD, ...) or whose spec lists it; other pools ignore it (a rocm rule never blocks CUDA)."""
    reasons = []
    for key in sorted(needs):
        constraint = needs[key]
        have = pool.software.get(key)
        if have is None:
            if pool.stack == key:
                reasons.append(
                    f"needs {key} {_pretty(constraint)}, pool does not say which {key} it has "
                    f"(set spec.software.{key})"
                )
        elif not satisfies(have, constraint):
            reasons.append(f"needs {key} {_pretty(constraint)}, pool has {pool.software_text[key]}")
    return reasons


def _pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def _fmt(x: float) -> str:
    return f"{x:g}"


def selection_reasons(workload: PendingWorkload, pool: PoolView) -> list[str]:
    """Why the workload's own selection (pools, vendors, models, excludeModels) rules the
    pool out: a pool so ruled out is not a near miss worth listing while others pass it."""
    need = workload.spec.accelerator
    reasons: list[str] = []
    if need.pools and pool.name not in need.pools:
        reasons.append(f"pool {pool.name} is not among the workload's pools")
    if need.vendors and pool.vendor not in need.vendors:
        allowed = ", ".join(v.value for v in need.vendors)
        reasons.append(f"vendor {pool.vendor.value} is not allowed (allowed: {allowed})")
    if need.models and pool.model not in need.models:
        reasons.append(f"model {pool.model} is not among the workload's models")
    if pool.model in need.exclude_models:
        reasons.append(f"model {pool.model} is excluded by the workload")
    return reasons


def chosen_away(workload: PendingWorkload, pool: PoolView) -> bool:
    """Whether selection_reasons finds a reason, without writing any: a cycle asks it of
    every pool each kind of workload cannot use (writing the reasons to tell which was a
    third of the pools' tests' time at 10,000 pending, cProfile)."""
    need = workload.spec.accelerator
    return bool(
        (need.pools and pool.name not in need.pools)
        or (need.vendors and pool.vendor not in need.vendors)
        or (need.models and pool.model not in need.models)
        or pool.model in need.exclude_models
    )


def static_reasons(
    workload: PendingWorkload, pool: PoolView, namespace_labels: Mapping[str, str]
) -> list[str]:
    """Reasons that hold whatever the pool's load: filters, hardware, software, policy."""
    need = workload.spec.accelerator
    reasons: list[str] = []
    excluded = workload.excluded_pools.get(pool.name)
    if excluded is not None:
        reasons.append(excluded)
    reasons.extend(selection_reasons(workload, pool))
    reasons.extend(f"accelerator unusable: {p}" for p in pool.problems)
    if need.min_memory_gib is not None and pool.memory_gib < need.min_memory_gib:
        reasons.append(
            f"{_fmt(pool.memory_gib)} GiB per device < {_fmt(need.min_memory_gib)} GiB required"
        )
    if need.precision not in pool.tflops:
        reasons.append(f"{pool.model} has no {need.precision.value}")
    missing = [f for f in need.features if f not in pool.features]
    reasons.extend(f"{pool.model} has no {f}" for f in missing)
    reasons.extend(software_reasons(need.software, pool))
    if not pool.allows_namespace(workload.namespace, namespace_labels):
        reasons.append(f"namespace {workload.namespace} is not allowed by this pool")
    if pool.draining:
        reasons.append("pool is draining")
    allocatable = pool.ready_allocatable
    capacity = pool.pods_capacity(need.count) if allocatable else 0
    unlocked = pool.unlocked(workload.tolerations) if pool.gated else None
    if unlocked:  # tainted nodes its own tolerations let it use
        extra = [pool.gated_allocatable[n] for n in unlocked]
        allocatable = tuple(sorted((*allocatable, *extra), reverse=True))
        capacity += sum(a // need.count for a in extra)
    if not allocatable:
        reasons.append("pool has no node that takes new pods")
    else:
        largest = allocatable[0]
        if largest < need.count:
            reasons.append(
                f"no node has {need.count} {pool.resource} (largest: {largest}); "
                "a pod's devices must be on one node"
            )
        elif capacity < workload.spec.replicas:
            reasons.append(
                f"the nodes hold at most {_pods(capacity)} of "
                f"{need.count} {pool.resource}, {workload.spec.replicas} required"
            )
    return reasons


def feasible(
    workload: PendingWorkload, pool: PoolView, namespace_labels: Mapping[str, str]
) -> bool:
    """Whether static_reasons finds no reason, without writing any: the cycle's hot loop
    asks it of every pool for every kind of workload, and writes the reasons of the pools
    it rules out only. The same tests, in the same terms, as static_reasons."""
    need = workload.spec.accelerator
    if pool.name in workload.excluded_pools or pool.problems or pool.draining:
        return False
    if need.pools and pool.name not in need.pools:
        return False
    if need.vendors and pool.vendor not in need.vendors:
        return False
    if need.models and pool.model not in need.models:
        return False
    if pool.model in need.exclude_models:
        return False
    if need.min_memory_gib is not None and pool.memory_gib < need.min_memory_gib:
        return False
    if need.precision not in pool.tflops:
        return False
    for f in need.features:
        if f not in pool.features:
            return False
    for key, constraint in need.software.items():
        have = pool.software.get(key)
        if (pool.stack == key) if have is None else not satisfies(have, constraint):
            return False
    allocatable = pool.ready_allocatable
    unlocked = pool.unlocked(workload.tolerations) if pool.gated else None
    if not allocatable and not unlocked:
        return False
    count = need.count
    capacity = pool.pods_capacity(count) if allocatable else 0
    largest = allocatable[0] if allocatable else 0
    if unlocked:
        extra = [pool.gated_allocatable[n] for n in unlocked]
        largest = max(largest, *extra)
        capacity += sum(a // count for a in extra)
    if largest < count or capacity < workload.spec.replicas:
        return False
    return pool.allows_namespace(workload.namespace, namespace_labels)


def capacity_reason(workload: PendingWorkload, pool: PoolView, fit: NodeFit) -> str | None:
    """Why a feasible pool cannot take the whole gang now, or None when it can."""
    count, replicas = workload.spec.accelerator.count, workload.spec.replicas
    unlocked = pool.unlocked(workload.tolerations) if pool.gated else frozenset()
    room = fit.room_with(count, unlocked)
    if room >= replicas:
        return None
    largest = fit.largest_with(unlocked)
    if largest < count:
        return f"no node has {count} free {pool.resource} (largest free: {largest})"
    return f"room for {room} of {replicas} pods of {count} {pool.resource} now"
