"""Placement quality, the inputs: the simulated fleet, Gavel's job types extended to modern
models, traces and snapshot batches, and what each information scenario lets the schedulers
see. Kept apart from the policies so that every policy reads one `Job.view`, never the truth.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import linprog  # type: ignore[import-untyped]

from tessera import api, catalog

HERE = Path(__file__).resolve().parent
GAVEL = HERE / "data" / "gavel-throughputs.csv"  # Gavel (OSDI 2020, MIT licence)

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
DEVICES = sum(nodes * per for _, _, nodes, per in FLEET)
MEASURED = {"K80": "k80", "P100": "p100", "V100-SXM2-32GB": "v100"}
REFERENCE = "V100-SXM2-32GB"  # job lengths are drawn as time on a V100
SIZES = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}

# What the schedulers know of each job's speed per model: the information scenarios.
EXACT, CATALOG = "exact", "catalog"
NOISY = "noisy-"  # + sigma: "noisy-0.25"

Types = dict[tuple[str, int], dict[str, float]]


def train_peak(model: str) -> float:
    """The peak a training job can use: bf16 or fp16 tensor FLOPS, else fp32."""
    entry = catalog.get(model)
    assert entry is not None, model
    t = entry.peak_tflops
    return t.get(api.Precision.BF16) or t.get(api.Precision.FP16) or t[api.Precision.FP32]


def catalog_speed(model: str) -> float:
    """What plan() estimates for a workload with no measured throughput (precision fp32, the
    one every pool of the fleet has): the catalog's fp32 peak per device."""
    entry = catalog.get(model)
    assert entry is not None, model
    return entry.peak_tflops[api.Precision.FP32]


def job_types() -> Types:
    """(job, workers) -> throughput (steps/s, all workers) on every model of the fleet.

    K80, P100 and V100 are measured. Newer models scale the V100 figure by the ratio of
    training peaks raised to the job's own elasticity: the exponent that turns the peak ratio
    V100/K80 into the job's measured V100/K80 speed-up, clipped to [0, 1]. CycleGAN (8.8x
    measured) gets about 0.65; a recommendation model that runs slower on a V100 gets 0.
    """
    k80, v100 = train_peak("K80"), train_peak(REFERENCE)
    with GAVEL.open() as f:
        rows = {(r["job"], int(r["workers"])): r for r in csv.DictReader(f)}
    out: Types = {}
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
    """One job of a trace. `speeds` is the truth (what the simulation runs at and the LP
    uses); `view` and `estimate` are what the schedulers are told in the scenario."""

    id: int
    arrival: float
    devices: int
    work: float  # seconds on `devices` V100s
    speeds: dict[str, float]
    view: dict[str, float] = field(default_factory=dict)  # believed speed per model
    estimate: float = 0.0  # believed run time on its believed best pool (estimatedDuration)
    measured: bool = True  # the workload carries `view` as its `throughput`
    start: float = -1.0
    end: float = -1.0
    pool: str = ""

    def runtime(self, model: str) -> float:
        return self.work * self.speeds[REFERENCE] / self.speeds[model]

    def best_runtime(self) -> float:
        return self.work * self.speeds[REFERENCE] / max(self.speeds.values())

    def value(self, model: str) -> float:
        """Normalised throughput where it runs: its speed there over its best speed."""
        return self.speeds.get(model, 0.0) / max(self.speeds.values())

    def fresh(self) -> Job:
        """A copy not yet run, for another policy over the same trace."""
        return Job(
            self.id, self.arrival, self.devices, self.work, self.speeds, self.view,
            self.estimate, self.measured,
        )  # fmt: skip


def mean_pow10(lo: float, hi: float) -> float:
    """E[10^U(lo, hi)]."""
    return (10**hi - 10**lo) / ((hi - lo) * math.log(10))


def draw_jobs(n: int, rng: random.Random, types: Types) -> list[Job]:
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


def max_job_rate(types: Types, mean_work: float) -> float:
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


def trace(n: int, load: float, seed: int, types: Types) -> list[Job]:
    """n jobs arriving as a Poisson process at `load` times the fleet's capacity for the mix."""
    rng = random.Random(seed)
    jobs = draw_jobs(n, rng, types)
    mean_work = 60 * (0.8 * mean_pow10(1.5, 3) + 0.2 * mean_pow10(3, 4))
    rate = load * max_job_rate(types, mean_work)
    t = 0.0
    for j in jobs:
        t += rng.expovariate(rate)
        j.arrival = t
    return jobs


def batch(demand: float, seed: int, types: Types) -> list[Job]:
    """Jobs pending at once, asking for `demand` times the fleet's devices (the first job
    over it included), for snapshot placement."""
    rng = random.Random(1000 + seed)
    jobs: list[Job] = []
    while sum(j.devices for j in jobs) < demand * DEVICES:
        jobs.extend(draw_jobs(1, rng, types))
    for k, j in enumerate(jobs):
        j.id, j.arrival = k, float(k)
    return jobs


def sigma_of(scenario: str) -> float:
    return float(scenario.removeprefix(NOISY)) if scenario.startswith(NOISY) else 0.0


def inform(jobs: list[Job], scenario: str, seed: int) -> list[Job]:
    """Fresh copies of the jobs with what the schedulers are told in `scenario`.

    exact: the true per-model throughput and the true run time on the best pool.
    catalog: no throughput; the catalog's fp32 peak per device stands in for every model (as
    plan() does); estimatedDuration stays the true run time on the best pool.
    noisy-S: each per-model throughput and the estimated duration times exp(N(0, S)),
    independently. The set of models a job can run on is known in every scenario."""
    rng = random.Random(f"{scenario}/{seed}")
    sigma = sigma_of(scenario)
    out = []
    for j in jobs:
        c = j.fresh()
        if scenario == CATALOG:
            c.view = {m: catalog_speed(m) * j.devices for m in j.speeds}
            c.measured = False
        else:
            c.view = {m: s * math.exp(rng.gauss(0, sigma)) for m, s in j.speeds.items()}
        c.estimate = j.best_runtime() * math.exp(rng.gauss(0, sigma))
        out.append(c)
    return out
