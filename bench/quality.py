"""Placement quality: replays a Philly/Gavel-style trace over a mixed fleet and compares
Tessera's objectives with a heterogeneity-blind baseline, greedy-fastest and the LP bound.
Bench only: numpy/scipy (the `bench` extra) plus tessera.catalog and tessera.placement.

Run: .venv/bin/python bench/quality.py [--jobs N] [--seeds K]; writes bench/results/quality.json.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import linprog  # type: ignore[import-untyped]

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

HERE = Path(__file__).resolve().parent
GAVEL = HERE / "data" / "gavel-throughputs.csv"  # Gavel (OSDI 2020, MIT licence)
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)

# The simulated fleet: pool name, catalog model, nodes, devices per node.
FLEET: list[tuple[str, str, int, int]] = [
    ("k80", "K80", 2, 8),
    ("p100", "P100", 4, 4),
    ("v100", "V100-SXM2-32GB", 4, 8),
    ("t4", "T4", 4, 4),
    ("a10g", "A10G", 2, 8),
    ("l4", "L4", 2, 8),
    ("a100-40", "A100-SXM4-40GB", 4, 8),
    ("a100-80", "A100-SXM4-80GB", 2, 8),
    ("h100", "H100-SXM5-80GB", 2, 8),
    ("h200", "H200-SXM-141GB", 1, 8),
    ("mi300x", "MI300X", 2, 8),
    ("gaudi2", "Gaudi2", 1, 8),
    ("trainium", "Trainium", 1, 16),
]
MEASURED = {"K80": "k80", "P100": "p100", "V100-SXM2-32GB": "v100"}
REFERENCE = "V100-SXM2-32GB"  # job lengths are drawn as time on a V100


def train_peak(model: str) -> float:
    """The peak a training job can use: bf16 or fp16 tensor FLOPS, else fp32."""
    entry = catalog.get(model)
    assert entry is not None, model
    t = entry.peak_tflops
    return t.get(api.Precision.BF16) or t.get(api.Precision.FP16) or t[api.Precision.FP32]


# --- Job types: Gavel's measured matrix, extended to modern generations -------------------


def job_types() -> dict[tuple[str, int], dict[str, float]]:
    """(job, workers) -> throughput (steps/s, all workers) on every model of the fleet.

    K80, P100 and V100 are measured. Newer models scale the V100 figure by the ratio of
    training peaks raised to the job's own elasticity: the exponent that turns the peak ratio
    V100/K80 into the job's measured V100/K80 speed-up, clipped to [0, 1]. CycleGAN (8.8x
    measured) gets about 0.65; a recommendation model that runs slower on a V100 gets 0.
    """
    k80, v100 = train_peak("K80"), train_peak(REFERENCE)
    with GAVEL.open() as f:
        rows = {(r["job"], int(r["workers"])): r for r in csv.DictReader(f)}
    out: dict[tuple[str, int], dict[str, float]] = {}
    for (job, workers), row in rows.items():
        measured = {m: float(row[f"{col}_steps_per_s"]) for m, col in MEASURED.items()}
        # a zero is a configuration that does not run there (out of memory on the K80)
        speeds = {m: v for m, v in measured.items() if v > 0}
        ref = (
            measured
            if measured["K80"] > 0
            else {m: float(rows[(job, 1)][f"{col}_steps_per_s"]) for m, col in MEASURED.items()}
        )
        ratio = ref[REFERENCE] / ref["K80"]
        alpha = min(max(math.log(ratio) / math.log(v100 / k80), 0.0), 1.0)
        for _, model, _, _ in FLEET:
            if model not in measured:
                speeds[model] = measured[REFERENCE] * (train_peak(model) / v100) ** alpha
        out[(job, workers)] = speeds
    return out


@dataclass
class Job:
    """One job of the trace."""

    id: int
    arrival: float
    devices: int
    work: float  # seconds on `devices` V100s
    speeds: dict[str, float]
    estimate: float = 0.0  # estimated duration on its best pool (what estimatedDuration says)
    start: float = -1.0
    end: float = -1.0
    pool: str = ""

    def runtime(self, model: str) -> float:
        return self.work * self.speeds[REFERENCE] / self.speeds[model]

    def best_runtime(self) -> float:
        return self.work * self.speeds[REFERENCE] / max(self.speeds.values())


def _mean_pow10(lo: float, hi: float) -> float:
    """E[10^U(lo, hi)]."""
    return (10**hi - 10**lo) / ((hi - lo) * math.log(10))


def draw_jobs(
    n: int, rng: random.Random, types: dict[tuple[str, int], dict[str, float]]
) -> list[Job]:
    """Sizes 1/2/4/8 devices with 70/10/15/5 %; lengths 10^U(1.5,3) minutes for 80 % of jobs
    and 10^U(3,4) for the rest (Gavel's Philly-derived generator); job type uniform."""
    names = sorted({name for name, _ in types})
    jobs = []
    for i in range(n):
        devices = rng.choices(list(SIZES), weights=list(SIZES.values()))[0]
        name = rng.choice(names)
        if (name, devices) in types:
            speeds = dict(types[(name, devices)])
        else:  # no multi-worker measurement: assume linear scaling of the 1-worker figure
            speeds = {m: s * devices for m, s in types[(name, 1)].items()}
        exponent = rng.uniform(1.5, 3) if rng.random() < 0.8 else rng.uniform(3, 4)
        jobs.append(Job(i, 0.0, devices, 60 * 10**exponent, speeds))
    return jobs


SIZES = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}


def max_job_rate(types: dict[tuple[str, int], dict[str, float]], mean_work: float) -> float:
    """The fleet's capacity for this job mix: the most jobs per second it can complete when
    every pool's devices are split among job kinds optimally (an LP), the kinds completing
    in the proportions the generator draws them. Load is offered jobs over this."""
    names = sorted({name for name, _ in types})
    kinds = []  # (share of jobs, devices, speed ratio to a V100 per model)
    for name in names:
        for n, share in SIZES.items():
            speeds = types.get((name, n)) or {m: s * n for m, s in types[(name, 1)].items()}
            kinds.append(
                (share / len(names), n, {m: v / speeds[REFERENCE] for m, v in speeds.items()})
            )
    pools = [(model, nodes * per) for _, model, nodes, per in FLEET]
    nk, npl = len(kinds), len(pools)
    # variables: x[k, p] devices of pool p given to kind k, then theta (jobs per second)
    c = np.zeros(nk * npl + 1)
    c[-1] = -1.0
    a_ub, b_ub = [], []
    for k, (share, n, ratio) in enumerate(kinds):  # theta * share <= completions of kind k
        row = np.zeros(nk * npl + 1)
        for p, (model, _) in enumerate(pools):
            row[k * npl + p] = -ratio.get(model, 0.0) / (n * mean_work)
        row[-1] = share
        a_ub.append(row)
        b_ub.append(0.0)
    for p, (_, devices) in enumerate(pools):
        row = np.zeros(nk * npl + 1)
        row[[k * npl + p for k in range(nk)]] = 1.0
        a_ub.append(row)
        b_ub.append(devices)
    res = linprog(c, A_ub=np.array(a_ub), b_ub=np.array(b_ub), bounds=(0, None), method="highs")
    assert res.success, res.message
    return float(res.x[-1])


def trace(
    n: int, load: float, seed: int, noise: float, types: dict[tuple[str, int], dict[str, float]]
) -> list[Job]:
    """n jobs arriving as a Poisson process at `load` times the fleet's capacity for the mix."""
    rng = random.Random(seed)
    jobs = draw_jobs(n, rng, types)
    mean_work = 60 * (0.8 * _mean_pow10(1.5, 3) + 0.2 * _mean_pow10(3, 4))
    rate = load * max_job_rate(types, mean_work)
    t = 0.0
    for j in jobs:
        t += rng.expovariate(rate)
        j.arrival = t
        j.estimate = j.best_runtime() * math.exp(rng.gauss(0, noise)) if noise else j.best_runtime()
    return jobs


# --- Policies --------------------------------------------------------------------------------


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


Placement = tuple[Job, str, list[str]]
Policy = Callable[[float, list[Job], Fleet], list[Placement]]


def blind(seed: int) -> Policy:
    """Heterogeneity-blind: any node with enough free devices, as the default scheduler does
    when every accelerator is one generic resource (picked at random among those that fit)."""
    rng = random.Random(seed)

    def place(now: float, pending: list[Job], fleet: Fleet) -> list[Placement]:
        out = []
        for job in pending:
            nodes = [
                (p, n)
                for p, ns in fleet.free.items()
                if fleet.model[p] in job.speeds  # a job never lands where it cannot run at all
                for n, f in ns.items()
                if f >= job.devices
            ]
            if nodes:
                pool, node = rng.choice(nodes)
                fleet.free[pool][node] -= job.devices
                out.append((job, pool, [node]))
        return out

    return place


def greedy_fastest(now: float, pending: list[Job], fleet: Fleet) -> list[Placement]:
    """Each job, in arrival order, on the fastest pool for it with room now."""
    out = []
    for job in pending:
        usable = [p for p in fleet.free if fleet.model[p] in job.speeds]
        for pool in sorted(usable, key=lambda p: (-job.speeds[fleet.model[p]], p)):
            node = fleet.best_fit(pool, job.devices)
            if node:
                fleet.free[pool][node] -= job.devices
                out.append((job, pool, [node]))
                break
    return out


TEMPLATE = {
    "spec": {"containers": [{"name": "main", "image": "trainer"}], "restartPolicy": "Never"}
}


def workload_for(
    job: Job, objective: str, durations: bool, measured: bool = True
) -> PendingWorkload:
    spec = api.WorkloadSpec.model_validate(
        {
            "objective": objective,
            "estimatedDuration": f"{max(int(job.estimate), 1)}s" if durations else None,
            "accelerator": {
                "count": job.devices,
                "precision": "fp32",
                "throughput": job.speeds if measured else {},
                "excludeModels": sorted(m for _, m, _, _ in FLEET if m not in job.speeds),
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


def tessera(objective: str, durations: bool = True) -> Policy:
    """Tessera's plan() over a snapshot built from the simulation, as the operator would."""
    templates = pool_templates()
    cache: dict[int, PendingWorkload] = {}
    per_device = {name: per for name, _, _, per in FLEET}

    def place(now: float, pending: list[Job], fleet: Fleet) -> list[Placement]:
        pools = []
        for name, template in templates.items():
            model = fleet.model[name]
            states = []
            for node, free in fleet.free[name].items():
                releases = tuple(
                    Release.model_construct(
                        at=EPOCH
                        + timedelta(
                            seconds=j.start + j.estimate * max(j.speeds.values()) / j.speeds[model]
                        ),
                        devices=j.devices,
                    )
                    for j in fleet.running[name][node]
                )
                states.append(
                    NodeState.model_construct(
                        name=node,
                        labels={},
                        ready=True,
                        allocatable=per_device[name],
                        free=free,
                        releases=releases,
                    )
                )
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


# --- Simulation ------------------------------------------------------------------------------


def simulate(jobs: Sequence[Job], policy: Policy) -> dict[str, float]:
    """Event-driven replay: arrivals and completions; the policy runs after each batch of
    events at one instant. Returns completion-time, cost and energy figures."""
    jobs = [Job(j.id, j.arrival, j.devices, j.work, j.speeds, j.estimate) for j in jobs]
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
        "avg_wait_h": statistics.mean(j.start - j.arrival for j in window) / 3600,
        "policy_ms_per_call": 1000 * spent / max(calls, 1),
    }


# --- Snapshot placement against the LP bound ------------------------------------------------


def lp_bound(jobs: Sequence[Job]) -> float:
    """Max total normalised throughput (each job's speed where it runs over its best speed)
    with fractional assignment and pool-total capacity: an upper bound on any placement."""
    pools = [(name, model, nodes * per) for name, model, nodes, per in FLEET]
    n_j, n_p = len(jobs), len(pools)
    value = np.array(
        [[j.speeds.get(m, 0.0) / max(j.speeds.values()) for _, m, _ in pools] for j in jobs]
    ).ravel()
    upper = [(0.0, 1.0 if v > 0 else 0.0) for v in value]
    a_job = np.zeros((n_j, n_j * n_p))
    for i in range(n_j):
        a_job[i, i * n_p : (i + 1) * n_p] = 1
    a_pool = np.zeros((n_p, n_j * n_p))
    for i, j in enumerate(jobs):
        for k in range(n_p):
            a_pool[k, i * n_p + k] = j.devices
    res = linprog(
        -value,
        A_ub=np.vstack([a_job, a_pool]),
        b_ub=np.concatenate([np.ones(n_j), [c for _, _, c in pools]]),
        bounds=upper,
        method="highs",
    )
    assert res.success, res.message
    return float(-res.fun)


def normalised(placed: Sequence[Placement], fleet: Fleet) -> float:
    return sum(j.speeds[fleet.model[p]] / max(j.speeds.values()) for j, p, _ in placed)


def snapshot_quality(
    seeds: int, types: dict[tuple[str, int], dict[str, float]]
) -> list[dict[str, Any]]:
    """Place a batch of pending jobs on an empty fleet once; compare with the LP bound."""
    devices = sum(nodes * per for _, _, nodes, per in FLEET)
    policies: dict[str, Callable[[int], Policy]] = {
        "tessera-performance": lambda s: tessera("performance", durations=False),
        "greedy-fastest": lambda s: greedy_fastest,
        "blind": blind,
        "tessera-balanced": lambda s: tessera("balanced", durations=False),
    }
    rows = []
    for demand in (0.5, 0.75, 1.0, 1.5):
        ratios: dict[str, list[float]] = {k: [] for k in policies}
        for seed in range(seeds):
            rng = random.Random(1000 + seed)
            jobs: list[Job] = []
            while sum(j.devices for j in jobs) < demand * devices:
                jobs.extend(draw_jobs(1, rng, types))
            for k, j in enumerate(jobs):
                j.id, j.arrival = k, float(k)
            bound = lp_bound(jobs)
            for name, make in policies.items():
                fleet = Fleet.build()
                placed = make(seed)(0.0, list(jobs), fleet)
                ratios[name].append(normalised(placed, fleet) / bound)
        rows.append(
            {"demand": demand, **{k: round(statistics.mean(v), 4) for k, v in ratios.items()}}
        )
    return rows


# --- Main -------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600, help="jobs per simulated trace")
    parser.add_argument("--seeds", type=int, default=3, help="traces per load")
    parser.add_argument("--loads", default="0.5,0.65,0.8", help="offered loads to simulate")
    parser.add_argument(
        "--noise", type=float, default=0.0, help="sigma of log-normal noise on estimates"
    )
    parser.add_argument("--out", default=str(HERE / "results" / "quality.json"))
    args = parser.parse_args(argv)
    types = job_types()
    started = time.perf_counter()

    print("snapshot placement, total normalised throughput / LP bound")
    snap_rows = snapshot_quality(args.seeds, types)
    keys = [k for k in snap_rows[0] if k != "demand"]
    print(f"{'demand':>8}  " + "  ".join(f"{k:>20}" for k in keys))
    for r in snap_rows:
        print(f"{r['demand']:>8.2f}  " + "  ".join(f"{r[k]:>20.3f}" for k in keys))

    policies: dict[str, Callable[[int], Policy]] = {
        "blind": blind,
        "greedy-fastest": lambda s: greedy_fastest,
        "tessera-performance": lambda s: tessera("performance"),
        "tessera-cost": lambda s: tessera("cost"),
        "tessera-energy": lambda s: tessera("energy"),
        "tessera-balanced": lambda s: tessera("balanced"),
    }
    sim_rows = []
    for load in (float(x) for x in args.loads.split(",")):
        for name, make in policies.items():
            runs = [
                simulate(trace(args.jobs, load, seed, args.noise, types), make(seed))
                for seed in range(args.seeds)
            ]
            row = {"load": load, "policy": name}
            row.update({k: round(statistics.mean(r[k] for r in runs), 3) for k in runs[0]})
            sim_rows.append(row)
            print(
                f"load {load:.2f} {name:>20}: avg JCT {row['avg_jct_h']:8.2f} h  p99 "
                f"{row['p99_jct_h']:8.1f} h  makespan {row['makespan_h']:7.1f} h  "
                f"${row['cost_per_job']:7.2f}/job  {row['kwh_per_job']:6.2f} kWh/job",
                flush=True,
            )
    targets = check_targets(snap_rows, sim_rows)
    for line in targets["lines"]:
        print(line)
    result = {
        "fleet": [{"pool": p, "model": m, "nodes": n, "devicesPerNode": d} for p, m, n, d in FLEET],
        "jobsPerTrace": args.jobs,
        "seeds": args.seeds,
        "estimateNoiseSigma": args.noise,
        "snapshot": snap_rows,
        "simulation": sim_rows,
        "targets": targets["met"],
        "seconds": round(time.perf_counter() - started, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def check_targets(snap: list[dict[str, Any]], sim: list[dict[str, Any]]) -> dict[str, Any]:
    lines, met = [], {}
    worst = min(r["tessera-performance"] for r in snap if r["demand"] <= 1.0)
    met["snapshot>=0.97*LP (demand<=1)"] = worst >= 0.97
    lines.append(f"snapshot placement vs LP (demand <= 100%): worst {worst:.3f} (target >= 0.97)")
    by = {(r["load"], r["policy"]): r for r in sim}
    for load in sorted({r["load"] for r in sim}):
        perf, base = by[(load, "tessera-performance")], by[(load, "blind")]
        speedup = base["avg_jct_h"] / perf["avg_jct_h"]
        met[f"performance 2x blind @{load}"] = speedup >= 2
        lines.append(f"load {load}: blind/performance avg JCT = {speedup:.2f}x (target >= 2x)")
        cost, fast = by[(load, "tessera-cost")], by[(load, "greedy-fastest")]
        saving = 1 - cost["cost_per_job"] / fast["cost_per_job"]
        slower = cost["avg_jct_h"] / fast["avg_jct_h"] - 1
        met[f"cost -20% vs greedy @{load}"] = saving >= 0.2 and slower <= 0.1
        lines.append(
            f"load {load}: cost vs greedy-fastest: {saving:+.1%} cheaper per job, "
            f"{slower:+.1%} avg JCT (target >= 20% cheaper, <= +10% JCT)"
        )
    return {"lines": lines, "met": met}


if __name__ == "__main__":
    sys.exit(main())
