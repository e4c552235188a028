"""Placement quality, the two measurements: one snapshot placement against the LP bound
(how much normalised throughput a policy gets from a batch of pending jobs on an empty fleet)
and an event-driven replay of a trace (completion time, cost, energy). Both score a policy by
the jobs' true speeds, whatever the policy was told."""

from __future__ import annotations

import heapq
import math
import statistics
import time
from collections.abc import Sequence

import numpy as np
from scipy.optimize import linprog  # type: ignore[import-untyped]

from quality_policies import Fleet, Placement, Policy
from quality_trace import FLEET, Job
from tessera import catalog


def lp_assignment(jobs: Sequence[Job], values: np.ndarray) -> np.ndarray:
    """The fractional assignment (jobs x pools) that maximises the sum of `values` (normalised
    throughput per job and pool) with each job placed at most once and pool-total capacity."""
    caps = [nodes * per for _, _, nodes, per in FLEET]
    n_j, n_p = values.shape
    a_job = np.zeros((n_j, n_j * n_p))
    for i in range(n_j):
        a_job[i, i * n_p : (i + 1) * n_p] = 1
    a_pool = np.zeros((n_p, n_j * n_p))
    for i, j in enumerate(jobs):
        a_pool[np.arange(n_p), i * n_p + np.arange(n_p)] = j.devices
    res = linprog(
        -values.ravel(),
        A_ub=np.vstack([a_job, a_pool]),
        b_ub=np.concatenate([np.ones(n_j), caps]),
        bounds=[(0.0, 1.0 if v > 0 else 0.0) for v in values.ravel()],
        method="highs",
    )
    assert res.success, res.message
    return np.asarray(res.x).reshape(n_j, n_p)


def true_values(jobs: Sequence[Job]) -> np.ndarray:
    return np.array([[j.value(m) for _, m, _, _ in FLEET] for j in jobs])


def believed_values(jobs: Sequence[Job]) -> np.ndarray:
    return np.array(
        [[j.view.get(m, 0.0) / max(j.view.values()) for _, m, _, _ in FLEET] for j in jobs]
    )


def lp_bound(jobs: Sequence[Job]) -> float:
    """Max total normalised throughput with fractional assignment and pool-total capacity:
    an upper bound on any placement of the batch."""
    values = true_values(jobs)
    return float((lp_assignment(jobs, values) * values).sum())


def lp_informed(jobs: Sequence[Job]) -> float:
    """The LP's assignment by what the jobs' `view` says, scored by their true speeds: the
    most an optimal planner could get from the scenario's information (the oracle-free bound).
    """
    return float((lp_assignment(jobs, believed_values(jobs)) * true_values(jobs)).sum())


def normalised(placed: Sequence[Placement], fleet: Fleet) -> float:
    """Total normalised throughput of a placement, by the jobs' true speeds."""
    return sum(j.value(fleet.model[p]) for j, p, _ in placed)


def snapshot(jobs: list[Job], policy: Policy) -> float:
    """One policy's placement of a pending batch on an empty fleet, scored by true speeds."""
    fleet = Fleet.build()
    return normalised(policy(0.0, list(jobs), fleet), fleet)


def simulate(jobs: Sequence[Job], policy: Policy) -> dict[str, float]:
    """Event-driven replay: arrivals and completions; the policy runs after each batch of
    events at one instant. Returns completion-time, cost and energy figures."""
    jobs = [j.fresh() for j in jobs]
    fleet = Fleet.build()
    prices = {n: catalog.get(m).price_per_device_hour for n, m, _, _ in FLEET}  # type: ignore[union-attr]
    watts = {n: catalog.get(m).tdp_watts for n, m, _, _ in FLEET}  # type: ignore[union-attr]
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.id) for j in jobs]
    heapq.heapify(events)
    by_id = {j.id: j for j in jobs}
    pending: list[Job] = []
    job_nodes: dict[int, list[str]] = {}
    calls, spent = 0, 0.0
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, jid = heapq.heappop(events)
            job = by_id[jid]
            if kind == 1:
                pending.append(job)
            else:
                for node in job_nodes[jid]:
                    fleet.free[job.pool][node] += job.devices
                    fleet.running[job.pool][node].remove(job)
        if not pending:
            continue
        t0 = time.perf_counter()
        placed = policy(now, pending, fleet)
        spent += time.perf_counter() - t0
        calls += 1
        started = set()
        for job, pool, nodes in placed:
            job.start, job.pool = now, pool
            job.end = now + job.runtime(fleet.model[pool])
            job_nodes[job.id] = nodes
            for node in nodes:
                fleet.running[pool][node].append(job)
            heapq.heappush(events, (job.end, 0, job.id))
            started.add(job.id)
        pending = [j for j in pending if j.id not in started]
    # completion times over the steady state: the middle half of the jobs by arrival
    window = jobs[len(jobs) // 4 : 3 * len(jobs) // 4]
    jct = sorted(j.end - j.arrival for j in window)
    cost = [j.devices * (j.end - j.start) / 3600 * prices[j.pool] for j in jobs]
    kwh = [j.devices * (j.end - j.start) / 3600 * watts[j.pool] / 1000 for j in jobs]
    return {
        "avg_jct_h": statistics.mean(jct) / 3600,
        "p99_jct_h": jct[min(len(jct) - 1, math.ceil(0.99 * len(jct)) - 1)] / 3600,
        "makespan_h": (max(j.end for j in jobs) - min(j.arrival for j in jobs)) / 3600,
        "cost_per_job": statistics.mean(cost),
        "kwh_per_job": statistics.mean(kwh),
        "policy_ms_per_call": 1000 * spent / max(calls, 1),
    }
