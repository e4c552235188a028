"""Placement quality, the policies: Tessera's plan() over a snapshot built as the operator
builds it, and the baselines it is measured against. Each policy sees only a job's `view`
and `estimate` (the scenario's information), never its true speeds, so that a baseline and
Tessera given the same information are compared like with like."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from quality_trace import FLEET, Job
from tessera import api, catalog
from tessera.placement import (
    NodeState,
    PendingWorkload,
    PoolState,
    Release,
    Snapshot,
    plan,
    pool_state,
)

EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass
class Fleet:
    """Free devices per node, per pool, during a simulation."""

    free: dict[str, dict[str, int]] = field(default_factory=dict)
    model: dict[str, str] = field(default_factory=dict)
    running: dict[str, dict[str, list[Job]]] = field(default_factory=dict)

    @staticmethod
    def build() -> Fleet:
        f = Fleet()
        for name, model, nodes, per in FLEET:
            f.model[name] = model
            f.free[name] = {f"{name}-{i:02d}": per for i in range(nodes)}
            f.running[name] = {n: [] for n in f.free[name]}
        return f

    def best_fit(self, pool: str, devices: int) -> str | None:
        fitting = [(f, n) for n, f in self.free[pool].items() if f >= devices]
        return min(fitting)[1] if fitting else None

    def usable(self, job: Job) -> list[str]:
        """Pools the job can run on at all (the models it is known to run on)."""
        return [p for p in self.free if self.model[p] in job.view]


Placement = tuple[Job, str, list[str]]
Policy = Callable[[float, list[Job], Fleet], list[Placement]]


def _at_random(seed: int, spots: Callable[[Job, Fleet], list[tuple[str, str]]]) -> Policy:
    """Each job in arrival order on one of the (pool, node) spots `spots` offers it, chosen
    at random; a job with none waits."""
    rng = random.Random(seed)

    def place(now: float, pending: list[Job], fleet: Fleet) -> list[Placement]:
        out = []
        for job in pending:
            found = spots(job, fleet)
            if found:
                pool, node = rng.choice(found)
                fleet.free[pool][node] -= job.devices
                out.append((job, pool, [node]))
        return out

    return place


def blind(seed: int) -> Policy:
    """Heterogeneity-blind: any node with enough free devices, as the default scheduler does
    when every accelerator is one generic resource (picked at random among those that fit).
    A job never lands where it cannot run at all."""
    return _at_random(
        seed,
        lambda job, fleet: [
            (p, n) for p in fleet.usable(job) for n, f in fleet.free[p].items() if f >= job.devices
        ],
    )


def random_pool(seed: int) -> Policy:
    """Random: a pool chosen uniformly among the feasible ones with room, best-fit inside it
    (unlike `blind`, a small pool is as likely as a large one)."""
    return _at_random(
        seed,
        lambda job, fleet: [
            (p, n) for p in fleet.usable(job) if (n := fleet.best_fit(p, job.devices))
        ],
    )


def greedy_fastest(now: float, pending: list[Job], fleet: Fleet) -> list[Placement]:
    """Each job, in arrival order, on the pool it is believed fastest on with room now."""
    out = []
    for job in pending:
        for pool in sorted(fleet.usable(job), key=lambda p: (-job.view[fleet.model[p]], p)):
            node = fleet.best_fit(pool, job.devices)
            if node:
                fleet.free[pool][node] -= job.devices
                out.append((job, pool, [node]))
                break
    return out


TEMPLATE = {
    "spec": {"containers": [{"name": "main", "image": "trainer"}], "restartPolicy": "Never"}
}


def workload_for(job: Job, objective: str, durations: bool) -> PendingWorkload:
    """The Workload a user would submit: `throughput` only where the scenario measures it."""
    spec = api.WorkloadSpec.model_validate(
        {
            "objective": objective,
            "estimatedDuration": f"{max(int(job.estimate), 1)}s" if durations else None,
            "accelerator": {
                "count": job.devices,
                "precision": "fp32",
                "throughput": job.view if job.measured else {},
                "excludeModels": sorted(m for _, m, _, _ in FLEET if m not in job.view),
            },
            "template": TEMPLATE,
        }
    )
    return PendingWorkload(
        namespace="default",
        name=f"job-{job.id:05d}",
        spec=spec,
        created_at=EPOCH + timedelta(seconds=job.arrival),
    )


def pool_templates() -> dict[str, PoolState]:
    out = {}
    for name, model, _, _ in FLEET:
        entry = catalog.get(model)
        assert entry is not None
        spec = api.AcceleratorPoolSpec.model_validate(
            {
                "accelerator": {"vendor": entry.vendor, "model": model},
                "nodeSelector": {"matchLabels": {"pool": name}},
            }
        )
        out[name] = pool_state(name, spec, [])
    return out


def release_at(job: Job, model: str) -> datetime:
    """When the operator expects a running job's devices back: its estimatedDuration scaled
    by its believed speed there against its believed best (placement.timing.run_seconds)."""
    return EPOCH + timedelta(
        seconds=job.start + job.estimate * max(job.view.values()) / job.view[model]
    )


def tessera(objective: str, durations: bool = True) -> Policy:
    """Tessera's plan() over a snapshot built from the simulation, as the operator would."""
    templates = pool_templates()
    cache: dict[int, PendingWorkload] = {}
    per_device = {name: per for name, _, _, per in FLEET}

    def place(now: float, pending: list[Job], fleet: Fleet) -> list[Placement]:
        pools = []
        for name, template in templates.items():
            model = fleet.model[name]
            states = [
                NodeState.model_construct(
                    name=node,
                    labels={},
                    ready=True,
                    allocatable=per_device[name],
                    free=free,
                    releases=tuple(
                        Release.model_construct(at=release_at(j, model), devices=j.devices)
                        for j in fleet.running[name][node]
                    ),
                )
                for node, free in fleet.free[name].items()
            ]
            pools.append(template.model_copy(update={"nodes": tuple(states)}))
        snap = Snapshot.model_construct(pools=tuple(pools), namespaces={})
        by_name = {}
        for job in pending:
            if job.id not in cache:
                cache[job.id] = workload_for(job, objective, durations)
            by_name[cache[job.id].name] = job
        decisions = plan([cache[j.id] for j in pending], snap, EPOCH + timedelta(seconds=now))
        out = []
        for d in decisions:
            if d.placed and d.pool:
                job = by_name[d.name]
                for n in d.nodes:
                    fleet.free[d.pool][n] -= job.devices
                out.append((job, d.pool, list(d.nodes)))
                del cache[job.id]
        return out

    return place
