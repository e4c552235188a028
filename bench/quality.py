"""Placement quality: does Tessera place a mixed fleet better than simpler policies given the
same information, and how much of its gap to the LP optimum is the planner rather than what
it is told? Snapshot placement of pending batches against the LP bound decides the targets;
a replay of Philly/Gavel-style traces reports completion time, cost and energy as context.

Run: .venv/bin/python bench/quality.py [--seeds K] [--sim-jobs N] [--sim-seeds K];
writes bench/results/quality.json. The inputs are in quality_trace.py, the policies in
quality_policies.py, the two measurements in quality_measure.py; this file drives them and
turns per-seed figures into means, 95 % t-intervals over seeds and verdicts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scipy import stats  # type: ignore[import-untyped]

from quality_measure import lp_bound, lp_informed, simulate, snapshot
from quality_policies import Policy, blind, greedy_fastest, random_pool, tessera
from quality_trace import CATALOG, EXACT, FLEET, NOISY, Types, batch, inform, job_types, trace

HERE = Path(__file__).resolve().parent
SCENARIOS = (EXACT, CATALOG, f"{NOISY}0.25", f"{NOISY}0.5")
# Policies whose choice depends on what they are told (run once per scenario), and those
# that look at no throughput at all (run once, the same figures in every scenario).
INFORMED: dict[str, Callable[[int], Policy]] = {
    "tessera-performance": lambda s: tessera("performance", durations=False),
    "greedy-fastest": lambda s: greedy_fastest,
}
UNINFORMED: dict[str, Callable[[int], Policy]] = {"blind": blind, "random": random_pool}
SIM_INFORMED: dict[str, Callable[[int], Policy]] = {
    "tessera-performance": lambda s: tessera("performance"),
    "tessera-cost": lambda s: tessera("cost"),
    "greedy-fastest": lambda s: greedy_fastest,
}
FLOOR = 0.97  # target 1: share of the LP optimum with exact throughputs, demand <= 100 %
CI = "95 % t-interval of the mean over seeds (of the paired per-seed difference for gaps)"


def interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean, 95 % t-interval of the mean, worst and best of per-seed figures."""
    mean = statistics.fmean(values)
    half = 0.0
    if len(values) > 1:
        half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return {
        "mean": round(mean, 4),
        "ci95": [round(mean - half, 4), round(mean + half, 4)],
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def minus(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True)]


def snapshot_runs(demands: Sequence[float], seeds: int, types: Types) -> dict[str, Any]:
    """Per demand, scenario and policy, each seed's normalised throughput over the LP bound
    (a batch asking `demand` times the fleet's devices, placed once on an empty fleet)."""
    raw: dict[str, list[float]] = {}
    for demand in demands:
        for seed in range(seeds):
            jobs = batch(demand, seed, types)
            bound = lp_bound(jobs)
            plain = inform(jobs, EXACT, seed)
            for name, make in UNINFORMED.items():
                ratio = snapshot(plain, make(seed)) / bound
                for sc in SCENARIOS:
                    raw.setdefault(f"{demand}/{sc}/{name}", []).append(ratio)
            for sc in SCENARIOS:
                told = inform(jobs, sc, seed)
                raw.setdefault(f"{demand}/{sc}/lp-informed", []).append(lp_informed(told) / bound)
                for name, make in INFORMED.items():
                    ratio = snapshot(told, make(seed)) / bound
                    raw.setdefault(f"{demand}/{sc}/{name}", []).append(ratio)
        print(f"snapshot demand {demand}: done", flush=True)
    return raw


def simulation_runs(
    loads: Sequence[float], seeds: int, n: int, types: Types
) -> dict[str, list[dict[str, float]]]:
    """Per load, scenario and policy, each seed's replay figures."""
    raw: dict[str, list[dict[str, float]]] = {}
    for load in loads:
        for seed in range(seeds):
            jobs = trace(n, load, seed, types)
            plain = inform(jobs, EXACT, seed)
            for name, make in UNINFORMED.items():
                figures = simulate(plain, make(seed))
                for sc in SCENARIOS:
                    raw.setdefault(f"{load}/{sc}/{name}", []).append(figures)
            for sc in SCENARIOS:
                told = inform(jobs, sc, seed)
                for name, make in SIM_INFORMED.items():
                    raw.setdefault(f"{load}/{sc}/{name}", []).append(simulate(told, make(seed)))
        print(f"simulation load {load}: done", flush=True)
    return raw


def verdict(intervals: Sequence[tuple[float, float]], floor: float, strict: bool = False) -> str:
    """met: every interval at or above `floor` (above, if `strict`); not met: one entirely
    below; else undecided."""
    if all(lo > floor or (lo == floor and not strict) for lo, _ in intervals):
        return "met"
    if any(hi < floor for _, hi in intervals):
        return "not met"
    return "undecided"


def targets(raw: dict[str, list[float]], demands: Sequence[float]) -> list[dict[str, Any]]:
    """Target 1: the LP share with exact throughputs, on the lower CI bound up to 100 %.
    Target 2: the lead over each baseline told the same, on the CI of the paired difference,
    at every demand (a tie is not a lead)."""
    out = []
    exact = {d: interval(raw[f"{d}/{EXACT}/tessera-performance"]) for d in demands}
    decided = [d for d in demands if d <= 1.0]
    out.append(
        {
            "target": f"performance >= {FLOOR} of the LP optimum, exact throughputs, "
            "demand <= 100 % (lower CI bound)",
            "scenario": EXACT,
            "figure": {str(d): exact[d] for d in demands},
            "decidedOn": [str(d) for d in decided],
            "verdict": verdict([tuple(exact[d]["ci95"]) for d in decided], FLOOR),
        }
    )
    for sc in SCENARIOS[1:]:
        ours = f"{sc}/tessera-performance"
        for base in ("greedy-fastest", "blind"):
            gaps = {
                d: interval(minus(raw[f"{d}/{ours}"], raw[f"{d}/{sc}/{base}"])) for d in demands
            }
            worst = min(demands, key=lambda d: gaps[d]["ci95"][0])
            out.append(
                {
                    "target": f"performance ahead of {base}, {sc} information, "
                    "demand 50-150 % (CI of the difference in LP share)",
                    "scenario": sc,
                    "baseline": base,
                    "figure": {str(d): gaps[d] for d in demands},
                    "worstDemand": str(worst),
                    "tesseraToLp": {str(d): interval(raw[f"{d}/{ours}"]) for d in demands},
                    "baselineToLp": {str(d): interval(raw[f"{d}/{sc}/{base}"]) for d in demands},
                    "verdict": verdict([tuple(gaps[d]["ci95"]) for d in demands], 0.0, strict=True),
                }
            )
    return out


def decomposition(raw: dict[str, list[float]], demands: Sequence[float]) -> list[dict[str, Any]]:
    """The gap to the LP optimum in the scenario = planner (LP - tessera with exact
    throughputs) + information (tessera exact - tessera in the scenario). `lpInformed` is the
    LP's own assignment by the scenario's information, scored by the truth: what missing
    information costs a planner that is otherwise optimal."""
    out = []
    for sc in SCENARIOS[1:]:
        for d in demands:
            exact, told = (
                raw[f"{d}/{EXACT}/tessera-performance"],
                raw[f"{d}/{sc}/tessera-performance"],
            )
            out.append(
                {
                    "scenario": sc,
                    "demand": d,
                    "gap": interval([1 - x for x in told]),
                    "planner": interval([1 - x for x in exact]),
                    "information": interval(minus(exact, told)),
                    "lpInformed": interval(raw[f"{d}/{sc}/lp-informed"]),
                }
            )
    return out


SIM_KEYS = ("avg_jct_h", "p99_jct_h", "makespan_h", "cost_per_job", "kwh_per_job")


def context(raw: dict[str, list[dict[str, float]]], loads: Sequence[float]) -> list[dict[str, Any]]:
    """Replay figures against greedy-fastest told the same: average completion time of
    `performance` (greedy's over Tessera's, > 1 is faster) and cost per job of `cost`."""
    out = []
    for load in loads:
        for sc in SCENARIOS:
            greedy = raw[f"{load}/{sc}/greedy-fastest"]
            perf, cost = raw[f"{load}/{sc}/tessera-performance"], raw[f"{load}/{sc}/tessera-cost"]
            blind_ = raw[f"{load}/{sc}/blind"]
            out.append(
                {
                    "load": load,
                    "scenario": sc,
                    "jctSpeedupVsGreedy": interval(
                        [g["avg_jct_h"] / p["avg_jct_h"] for g, p in zip(greedy, perf, strict=True)]
                    ),
                    "jctSpeedupVsBlind": interval(
                        [b["avg_jct_h"] / p["avg_jct_h"] for b, p in zip(blind_, perf, strict=True)]
                    ),
                    "costSavingVsGreedy": interval(
                        [
                            1 - c["cost_per_job"] / g["cost_per_job"]
                            for g, c in zip(greedy, cost, strict=True)
                        ]
                    ),
                    "costJctChangeVsGreedy": interval(
                        [
                            c["avg_jct_h"] / g["avg_jct_h"] - 1
                            for g, c in zip(greedy, cost, strict=True)
                        ]
                    ),
                }
            )
    return out


def report(
    snap: dict[str, list[float]],
    sim: dict[str, list[dict[str, float]]],
    demands: Sequence[float],
    loads: Sequence[float],
) -> dict[str, Any]:
    policies = ["lp-informed", *INFORMED, *UNINFORMED]
    sim_policies = [*SIM_INFORMED, *UNINFORMED]
    return {
        "confidence": CI,
        "snapshot": [
            {"demand": d, "scenario": sc, "policy": p, **interval(snap[f"{d}/{sc}/{p}"])}
            for d in demands
            for sc in SCENARIOS
            for p in policies
        ],
        "simulation": [
            {
                "load": x,
                "scenario": sc,
                "policy": p,
                **{k: interval([r[k] for r in sim[f"{x}/{sc}/{p}"]]) for k in SIM_KEYS},
                "policy_ms_per_call": round(
                    statistics.fmean(r["policy_ms_per_call"] for r in sim[f"{x}/{sc}/{p}"]), 3
                ),
            }
            for x in loads
            for sc in SCENARIOS
            for p in sim_policies
        ],
        "context": context(sim, loads) if sim else [],
        "decomposition": decomposition(snap, demands),
        "targets": targets(snap, demands),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demands", default="0.5,0.75,1.0,1.25,1.5", help="snapshot demands")
    parser.add_argument("--seeds", type=int, default=20, help="snapshot batches per demand")
    parser.add_argument("--loads", default="0.5,0.75,1.0,1.25,1.5", help="simulated loads")
    parser.add_argument("--sim-jobs", type=int, default=400, help="jobs per simulated trace")
    parser.add_argument("--sim-seeds", type=int, default=10, help="traces per load; 0: none")
    parser.add_argument("--out", default=str(HERE / "results" / "quality.json"))
    parser.add_argument("--rescore", action="store_true", help="redo --out's summary only")
    args = parser.parse_args(argv)
    if args.rescore:  # the per-seed figures are kept: summaries and verdicts can be redone
        r = json.loads(Path(args.out).read_text())
        raw = r["perSeed"]
        r.update(report(raw["snapshot"], raw["simulation"], r["demands"], r["loads"]))
        Path(args.out).write_text(dump(r) + "\n")
        return 0
    demands = [float(x) for x in args.demands.split(",")]
    loads = [float(x) for x in args.loads.split(",")] if args.sim_seeds else []
    types = job_types()
    started = time.perf_counter()
    # kept rounded, and summarised as kept: --rescore redoes the very same summary
    snap = {
        k: [round(x, 5) for x in v] for k, v in snapshot_runs(demands, args.seeds, types).items()
    }
    sim = {
        k: [{f: round(x, 4) for f, x in r.items()} for r in v]
        for k, v in simulation_runs(loads, args.sim_seeds, args.sim_jobs, types).items()
    }
    result = {
        "fleet": [{"pool": p, "model": m, "nodes": n, "devicesPerNode": d} for p, m, n, d in FLEET],
        "scenarios": list(SCENARIOS),
        "snapshotSeeds": args.seeds,
        "demands": demands,
        "simulationJobsPerTrace": args.sim_jobs,
        "simulationSeeds": args.sim_seeds,
        "loads": loads,
        **report(snap, sim, demands, loads),
        "perSeed": {"snapshot": snap, "simulation": sim},
        "seconds": round(time.perf_counter() - started, 1),
    }
    for t in result["targets"]:
        print(f"{t['verdict']:>10}: {t['target']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(dump(result) + "\n")
    return 0


def dump(value: Any, indent: str = "") -> str:
    """JSON with every object that fits in 100 characters, and every object or list of plain
    numbers, on one line: the per-seed figures stay readable without a line per number."""
    flat = json.dumps(value)
    leaves = value.values() if isinstance(value, dict) else value
    numbers = isinstance(value, dict | list) and all(isinstance(v, int | float) for v in leaves)
    if len(indent) + len(flat) <= 100 or numbers or not isinstance(value, dict | list) or not value:
        return flat
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {dump(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    return "[\n" + ",\n".join(inner + dump(v, inner) for v in value) + "\n" + indent + "]"


if __name__ == "__main__":
    sys.exit(main())
