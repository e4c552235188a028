"""Team fairness under AcceleratorQuotas: replays one multi-team trace on a mixed fleet (H100,
A100, L4) under three policies and compares each team's share of the work done with its
entitlement (Jain's fairness index), the average completion time and how often preemption
fired. Policies: `units` (quotas in normalised units, the product as is), `devices` (the same
quotas counting raw devices, as Kueue does: every pool's unitsPerDevice overridden to 1 and
the nominals re-expressed as the same fractions of the fleet's devices) and `none` (no
quotas: priority then age order).

Work is measured in H100-seconds: a device runs a job at its pool's units per device (an A100
at 0.32 of an H100), so a team's work is the integral of the units its running jobs hold.
Each team offers the same multiple of its entitlement; fairness is measured over the time in
which every team has work waiting (at the saturated load; at the lower load it is reported
but reflects demand). Completion times are those of the middle half of the jobs by arrival,
the trace run to its end. Bench only: tessera.catalog, tessera.placement and the pieces of
the quality benchmark (bench/quality_trace.py, bench/quality_policies.py).

Run: .venv/bin/python bench/sharing.py [--jobs N] [--seeds K] [--loads 0.7,1.4]
[--workers 2]; writes bench/results/sharing.json.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from quality_policies import EPOCH, TEMPLATE
from quality_trace import mean_pow10
from tessera import api, catalog
from tessera.placement import NodeState, PendingWorkload, PoolState, Snapshot, plan, pool_state
from tessera.placement.sharing import Holding, QuotaState

HERE = Path(__file__).resolve().parent

Policy = Literal["units", "devices", "none"]
POLICIES: tuple[Policy, ...] = ("units", "devices", "none")

# The fleet: pool name, catalog model, nodes, devices per node. One new generation and two
# old ones: 16 of the 80 devices, but more than half of the units.
FLEET: list[tuple[str, str, int, int]] = [
    ("h100", "H100-SXM5-80GB", 2, 8),
    ("a100", "A100-SXM4-80GB", 4, 8),
    ("l4", "L4", 4, 8),
]
H100, A100 = "H100-SXM5-80GB", "A100-SXM4-80GB"


@dataclass(frozen=True)
class Team:
    """A team: its namespace and quota (both named after it), the fraction of the fleet it is
    entitled to, the models its jobs run on (empty: any) and how its jobs are drawn."""

    name: str
    share: float
    models: tuple[str, ...]
    sizes: Mapping[int, float]  # devices -> probability
    minutes: tuple[float, float]  # log10 bounds of a job's length on an H100, in minutes

    def mean_work(self) -> float:
        """Mean work of one job, in H100-seconds (devices x seconds on an H100)."""
        devices = sum(d * p for d, p in self.sizes.items())
        return devices * 60 * mean_pow10(*self.minutes)


# Three equal entitlements; the teams differ in what their jobs run on: llm's only on H100s,
# train's on A100s or H100s, infer's (short, small jobs) on the old generations, L4s or A100s.
# Counting devices, a third of the fleet is 26.7 devices: more than llm can use (16 H100s)
# and little work on L4s. Counting units, a third is 10 units, which each team can hold.
TEAMS: tuple[Team, ...] = (
    Team("llm", 1 / 3, (H100,), {4: 0.5, 8: 0.5}, (1.5, 2.5)),
    Team("train", 1 / 3, (A100, H100), {1: 0.4, 2: 0.2, 4: 0.2, 8: 0.2}, (1.5, 2.5)),
    Team("infer", 1 / 3, ("L4", A100), {1: 0.7, 2: 0.3}, (0.5, 1.5)),
)


def units_per_device() -> dict[str, float]:
    """Pool -> normalised units of one of its devices, as the catalog resolves them (an H100
    is 1): the devices' true throughput, whatever the quotas count."""
    return {
        name: pool.accelerator.units_per_device for name, pool in pool_templates("units").items()
    }


def fleet_units() -> float:
    units = units_per_device()
    return sum(units[name] * nodes * per for name, _, nodes, per in FLEET)


def fleet_devices() -> int:
    return sum(nodes * per for _, _, nodes, per in FLEET)


def nominals(teams: Sequence[Team], policy: Policy) -> dict[str, float]:
    """Each team's nominal: its share of the fleet's units, or of its devices when the quota
    counts devices; the nominals sum to the fleet."""
    total = fleet_devices() if policy == "devices" else fleet_units()
    whole = sum(t.share for t in teams)
    return {t.name: total * t.share / whole for t in teams}


def jain(xs: Sequence[float]) -> float:
    """Jain's fairness index, (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one
    has everything."""
    squares = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * squares) if squares else 1.0


def shares(work: Mapping[str, float], entitled: Mapping[str, float]) -> dict[str, float]:
    """Each team's share of the work over its share of the entitlements (0 without work)."""
    total, whole = sum(work.values()), sum(entitled.values())
    return {t: (work[t] / total) / (e / whole) if total > 0 else 0.0 for t, e in entitled.items()}


def fairness(work: Mapping[str, float], entitled: Mapping[str, float]) -> float:
    """Jain's index of each team's share of the work over its share of the entitlements."""
    return jain(list(shares(work, entitled).values()))


# --- The trace --------------------------------------------------------------------------------


@dataclass
class Job:
    """One job: a single pod of `devices` devices running `length` seconds on an H100."""

    id: int
    team: str
    arrival: float
    devices: int
    length: float
    models: tuple[str, ...]
    start: float = -1.0
    end: float = -1.0
    pool: str = ""
    node: str = ""
    preempted: int = 0

    @property
    def work(self) -> float:
        return self.devices * self.length


def trace(n: int, load: float, seed: int, teams: Sequence[Team] = TEAMS) -> list[Job]:
    """n jobs: each team a Poisson process offering `load` times its entitlement's units
    (so every team is short of room at once when load > 1), merged by arrival."""
    rng = random.Random(seed)
    units, whole = fleet_units(), sum(t.share for t in teams)
    rates = [load * units * (t.share / whole) / t.mean_work() for t in teams]
    total = sum(rates)
    jobs, now = [], 0.0
    for i in range(n):
        now += rng.expovariate(total)
        team = rng.choices(teams, weights=rates)[0]
        devices = rng.choices(list(team.sizes), weights=list(team.sizes.values()))[0]
        minutes = 10 ** rng.uniform(*team.minutes)
        jobs.append(Job(i, team.name, now, devices, 60 * minutes, team.models))
    return jobs


# --- The placement ----------------------------------------------------------------------------


def pool_templates(policy: Policy) -> dict[str, PoolState]:
    """The pools without nodes; counting devices, every pool's unitsPerDevice is 1."""
    out = {}
    for name, model, _, _ in FLEET:
        entry = catalog.get(model)
        assert entry is not None
        accelerator: dict[str, Any] = {"vendor": entry.vendor, "model": model}
        if policy == "devices":
            accelerator["unitsPerDevice"] = 1.0
        spec = api.AcceleratorPoolSpec.model_validate(
            {"accelerator": accelerator, "nodeSelector": {"matchLabels": {"pool": name}}}
        )
        out[name] = pool_state(name, spec, [])
    return out


def quotas(teams: Sequence[Team], policy: Policy) -> tuple[QuotaState, ...]:
    """One quota per team over its namespace: nominal its share, borrowing unlimited, the
    default preemption (reclaim from borrowers; at least 60 s of runtime first)."""
    if policy == "none":
        return ()
    out = []
    for team, nominal in nominals(teams, policy).items():
        spec = api.AcceleratorQuotaSpec.model_validate(
            {"namespaceSelector": {"matchLabels": {"team": team}}, "nominal": nominal}
        )
        out.append(QuotaState(team, spec, frozenset({team})))
    return tuple(out)


def workload_for(job: Job) -> PendingWorkload:
    spec = api.WorkloadSpec.model_validate(
        {
            "objective": "performance",
            "accelerator": {"count": job.devices, "precision": "bf16", "models": list(job.models)},
            "template": TEMPLATE,
        }
    )
    return PendingWorkload(
        namespace=job.team,
        name=f"job-{job.id:05d}",
        spec=spec,
        created_at=EPOCH + timedelta(seconds=job.arrival),
    )


# --- The simulation ---------------------------------------------------------------------------


@dataclass
class Timeline:
    """Per event: its time, each team's work so far (H100-seconds), the rate after it, and
    whether every team had work waiting after it (until the next event)."""

    times: list[float] = field(default_factory=list)
    work: list[dict[str, float]] = field(default_factory=list)
    rates: list[dict[str, float]] = field(default_factory=list)
    saturated: list[bool] = field(default_factory=list)

    def work_at(self, t: float) -> dict[str, float]:
        i = max(bisect.bisect_right(self.times, t) - 1, 0)
        dt = max(t - self.times[i], 0.0)
        return {k: v + self.rates[i][k] * dt for k, v in self.work[i].items()}

    def saturated_work(self, start: float, end: float) -> tuple[dict[str, float], float]:
        """Each team's work over the parts of [start, end] in which every team had work
        waiting, and how long those parts last in all."""
        work = dict.fromkeys(self.work[0], 0.0) if self.work else {}
        seconds = 0.0
        for i, t in enumerate(self.times):
            upto = self.times[i + 1] if i + 1 < len(self.times) else end
            lo, hi = max(t, start), min(upto, end)
            if hi <= lo or not self.saturated[i]:
                continue
            seconds += hi - lo
            for team, rate in self.rates[i].items():
                work[team] += rate * (hi - lo)
        return work, seconds


@dataclass
class Run:
    jobs: list[Job]
    timeline: Timeline
    preemptions: int
    calls: int
    plan_seconds: float


def simulate(
    jobs: Sequence[Job], policy: Policy, teams: Sequence[Team] = TEAMS, drain: bool = True
) -> Run:
    """Event-driven replay: arrivals and completions; plan() runs after each batch of events
    at one instant, over a snapshot of the fleet with each running job as a Holding. A
    preemption's victims go back to the queue (their creation time kept, their progress
    lost) and the preemptor starts on the devices they free. Without `drain`, it stops at
    the last arrival."""
    jobs = [Job(j.id, j.team, j.arrival, j.devices, j.length, j.models) for j in jobs]
    by_id = {j.id: j for j in jobs}
    by_name = {f"job-{j.id:05d}": j for j in jobs}
    templates, quota_states = pool_templates(policy), quotas(teams, policy)
    units = units_per_device()  # the true throughput, whatever the quotas count
    per_node = {name: per for name, _, _, per in FLEET}
    free = {name: {f"{name}-{i}": per for i in range(nodes)} for name, _, nodes, per in FLEET}
    running: dict[int, Job] = {}
    cache: dict[int, PendingWorkload] = {}
    events = [(j.arrival, 1, j.id, 0) for j in jobs]  # (time, kind, job, its start count)
    heapq.heapify(events)
    starts: dict[int, int] = {}
    last_arrival = max(j.arrival for j in jobs)
    pending: list[Job] = []
    timeline = Timeline()
    work = {t.name: 0.0 for t in teams}
    rate = {t.name: 0.0 for t in teams}
    last, preemptions, calls, spent = 0.0, 0, 0, 0.0

    def stop(job: Job) -> None:
        del running[job.id]
        free[job.pool][job.node] += job.devices
        rate[job.team] -= job.devices * units[job.pool]

    while events:
        now = events[0][0]
        if not drain and now > last_arrival:
            break
        for team in work:
            work[team] += rate[team] * (now - last)
        last = now
        while events and events[0][0] == now:
            _, kind, jid, serial = heapq.heappop(events)
            job = by_id[jid]
            if kind == 1:
                pending.append(job)
            elif starts.get(jid) == serial and jid in running:  # not a preempted run's end
                stop(job)
                job.end = now
        if pending:
            t0 = time.perf_counter()
            holdings = tuple(
                Holding(
                    j.team,
                    f"job-{j.id:05d}",
                    j.pool,
                    ((j.node, j.devices),),
                    0,
                    EPOCH + timedelta(seconds=j.start),
                )
                for j in running.values()
            )
            pools = []
            for name, template in templates.items():
                nodes = tuple(
                    NodeState.model_construct(
                        name=node,
                        labels={},
                        ready=True,
                        allocatable=per_node[name],
                        free=f,
                        releases=(),
                        taints=(),
                    )
                    for node, f in free[name].items()
                )
                pools.append(template.model_copy(update={"nodes": nodes}))
            snap = Snapshot.model_construct(
                pools=tuple(pools), namespaces={}, quotas=quota_states, holdings=holdings
            )
            for j in pending:
                if j.id not in cache:
                    cache[j.id] = workload_for(j)
            decisions = plan([cache[j.id] for j in pending], snap, EPOCH + timedelta(seconds=now))
            spent += time.perf_counter() - t0
            calls += 1
            requeued: list[Job] = []
            placed: set[int] = set()
            for d in decisions:
                if not d.placed or d.pool is None:
                    continue
                job = by_name[d.name]
                if d.preemption is not None:
                    for v in d.preemption.victims:
                        victim = by_name[v.name]
                        stop(victim)
                        victim.preempted += 1
                        requeued.append(victim)
                        preemptions += 1
                (node,) = d.nodes
                assert free[d.pool][node] >= job.devices, (d.pool, node, d.message)
                free[d.pool][node] -= job.devices
                job.start, job.pool, job.node = now, d.pool, node
                starts[job.id] = starts.get(job.id, 0) + 1
                running[job.id] = job
                rate[job.team] += job.devices * units[d.pool]
                heapq.heappush(
                    events, (now + job.length / units[d.pool], 0, job.id, starts[job.id])
                )
                placed.add(job.id)
            pending = [j for j in pending if j.id not in placed] + requeued
            pending.sort(key=lambda j: j.arrival)
        waiting = {j.team for j in pending}
        timeline.times.append(now)
        timeline.work.append(dict(work))
        timeline.rates.append(dict(rate))
        timeline.saturated.append(len(waiting) == len(work))
    return Run(jobs, timeline, preemptions, calls, spent)


def measure(run: Run, teams: Sequence[Team]) -> dict[str, Any]:
    """A run's figures over the window from the arrival of the first quarter's last job to
    the last arrival: fairness over the time in it when every team had work waiting (and
    over all of it), completion times of the middle half of the jobs by arrival (None when
    the run stopped before they all ended), preemptions."""
    jobs = sorted(run.jobs, key=lambda j: j.arrival)
    start, end = jobs[len(jobs) // 4].arrival, jobs[-1].arrival
    entitled = {t.name: t.share for t in teams}
    work, seconds = run.timeline.saturated_work(start, end)
    before, after = run.timeline.work_at(start), run.timeline.work_at(end)
    whole = {t.name: after[t.name] - before[t.name] for t in teams}
    total = sum(work.values())
    middle = jobs[len(jobs) // 4 : 3 * len(jobs) // 4]
    done = [j.end - j.arrival for j in middle if j.end >= 0]
    by_team = {
        t.name: [j.end - j.arrival for j in middle if j.team == t.name and j.end >= 0]
        for t in teams
    }
    complete = len(done) == len(middle)
    return {
        "fairness": fairness(work, entitled) if total > 0 else None,
        "fairnessWholeWindow": fairness(whole, entitled),
        "shareOverEntitlement": shares(work, entitled),
        "shareOverEntitlementWholeWindow": shares(whole, entitled),
        "windowH": (end - start) / 3600,
        "saturatedFraction": seconds / (end - start) if end > start else 0.0,
        "utilisation": sum(whole.values()) / (fleet_units() * (end - start)),
        "avgJctH": statistics.mean(done) / 3600 if complete else None,
        "avgJctHByTeam": {
            t: statistics.mean(v) / 3600 if complete and v else None for t, v in by_team.items()
        },
        "preemptions": run.preemptions,
        "preemptionsPer100Jobs": 100 * run.preemptions / len(jobs),
        "planMsPerCall": 1000 * run.plan_seconds / max(run.calls, 1),
    }


# --- Targets and output -----------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def verdict(values: Sequence[float], meets: float, higher_is_better: bool = True) -> str:
    """met when every seed meets the target, not met when none does, else (the spread
    straddles it, or no seed has the figure) undecided."""
    ok = [(v >= meets) if higher_is_better else (v <= meets) for v in values]
    return "met" if ok and all(ok) else "not met" if ok and not any(ok) else "undecided"


def check_targets(
    runs: Mapping[tuple[float, Policy], Sequence[dict[str, Any]]], low: float, high: float
) -> list[dict[str, Any]]:
    """The issue's targets, each with its figure over the seeds and a verdict."""

    def paired(a: Policy, b: Policy, load: float, key: str) -> list[tuple[float, float]]:
        """The figure under two policies on the same traces, where both have it."""
        return [
            (x[key], y[key])
            for x, y in zip(runs[(load, a)], runs[(load, b)], strict=True)
            if x[key] is not None and y[key] is not None
        ]

    def target(text: str, values: Sequence[float], verdict_: str) -> dict[str, Any]:
        return {
            "target": text,
            "figure": spread(values) if values else None,
            "seeds": len(values),
            "verdict": verdict_,
        }

    units = [r["fairness"] for r in runs[(high, "units")] if r["fairness"] is not None]
    gain = [u - d for u, d in paired("units", "devices", high, "fairness")]
    slower = [u / n - 1 for u, n in paired("units", "none", low, "avgJctH")]
    return [
        target(
            f"fairness index >= 0.95 with normalised units (load {high})",
            units,
            verdict(units, 0.95),
        ),
        target(
            f"fairness with normalised units minus with raw-device quotas > 0 (load {high}, "
            "same traces)",
            gain,
            verdict(gain, 1e-9),
        ),
        target(
            f"average completion with normalised units over no quotas - 1 <= +10% (load {low})",
            slower,
            verdict(slower, 0.10, higher_is_better=False),
        ),
    ]


def summary(load: float, policy: Policy, figures: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One policy at one load over the seeds: each figure's median, min and max."""

    def over(key: str) -> dict[str, float] | None:
        values = [f[key] for f in figures if f[key] is not None]
        return spread(values) if values else None

    return {
        "load": load,
        "policy": policy,
        "fairness": over("fairness"),
        "fairnessWholeWindow": over("fairnessWholeWindow"),
        "saturatedFraction": over("saturatedFraction"),
        **{
            key: {t.name: spread([f[key][t.name] for f in figures]) for t in TEAMS}
            for key in ("shareOverEntitlement", "shareOverEntitlementWholeWindow")
        },
        "avgJctH": over("avgJctH"),
        "avgJctHByTeam": {
            t.name: spread(v)
            for t in TEAMS
            if (v := [f["avgJctHByTeam"][t.name] for f in figures if f["avgJctHByTeam"][t.name]])
        },
        "preemptionsPer100Jobs": over("preemptionsPer100Jobs"),
        "utilisation": over("utilisation"),
        "windowH": over("windowH"),
        "planMsPerCall": round(statistics.mean(f["planMsPerCall"] for f in figures), 2),
    }


def _text(figure: dict[str, float] | None, digits: int = 3) -> str:
    if figure is None:
        return "-"
    return f"{figure['median']:.{digits}f} [{figure['min']:.{digits}f}, {figure['max']:.{digits}f}]"


def one(task: tuple[int, float, int, Policy, bool]) -> dict[str, Any]:
    """One trace under one policy (a worker's task). The saturated runs stop at the last
    arrival: their queues only grow."""
    jobs, load, seed, policy, drain = task
    return measure(simulate(trace(jobs, load, seed), policy, drain=drain), TEAMS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1200, help="jobs per simulated trace")
    parser.add_argument("--seeds", type=int, default=5, help="traces per load")
    parser.add_argument(
        "--loads",
        default="0.7,1.4",
        help="two offered loads: the completion-time one, then the saturated one (fairness)",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes running traces")
    parser.add_argument("--out", default=str(HERE / "results" / "sharing.json"))
    args = parser.parse_args(argv)
    low, high = (float(x) for x in args.loads.split(","))
    started = time.perf_counter()
    tasks = [
        (args.jobs, load, seed, policy, load == low)
        for load in (low, high)
        for seed in range(args.seeds)
        for policy in POLICIES
    ]
    runs: dict[tuple[float, Policy], list[dict[str, Any]]] = {}
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for (_, load, _, policy, _), figures in zip(tasks, pool.map(one, tasks), strict=True):
            runs.setdefault((load, policy), []).append(figures)
    rows = [summary(load, policy, figures) for (load, policy), figures in runs.items()]
    for row in rows:
        # at the lower load, the whole window's figures (they reflect demand)
        saturated = row["load"] == high
        key = "shareOverEntitlement" if saturated else "shareOverEntitlementWholeWindow"
        jain_key = "fairness" if saturated else "fairnessWholeWindow"
        split = " ".join(f"{t}={s['median']:.2f}" for t, s in row[key].items())
        print(
            f"load {row['load']:.2f} {row['policy']:>7}: Jain {_text(row[jain_key])}  "
            f"avg JCT {_text(row['avgJctH'], 2)} h  preemptions/100 jobs "
            f"{_text(row['preemptionsPer100Jobs'], 1)}  share/entitlement {split}  "
            f"saturated {_text(row['saturatedFraction'], 2)}",
            flush=True,
        )
    targets = check_targets(runs, low, high)
    for t in targets:
        print(f"{t['target']}: {_text(t['figure'])} {t['verdict']}")
    units = units_per_device()
    whole = sum(t.share for t in TEAMS)
    result = {
        "fleet": [
            {"pool": p, "model": m, "nodes": n, "devicesPerNode": d, "unitsPerDevice": units[p]}
            for p, m, n, d in FLEET
        ],
        "fleetUnits": round(fleet_units(), 3),
        "fleetDevices": fleet_devices(),
        "teams": [
            {
                "team": t.name,
                "entitlement": round(t.share / whole, 4),
                "models": list(t.models) or "any",
                "jobDevices": {str(d): p for d, p in t.sizes.items()},
                "jobMinutesOnH100": [round(10**x, 1) for x in t.minutes],
                "nominalUnits": round(nominals(TEAMS, "units")[t.name], 3),
                "nominalDevices": round(nominals(TEAMS, "devices")[t.name], 3),
            }
            for t in TEAMS
        ],
        "jobsPerTrace": args.jobs,
        "seeds": args.seeds,
        "loads": {"completionTime": low, "saturated": high},
        "method": (
            "Every team offers the load times its entitlement in H100-seconds. Work is "
            "measured in H100-seconds (units x seconds held). The window runs from the "
            "arrival of the first quarter's last job to the last arrival. fairness: Jain's "
            "index of each team's share of the work over its share of the entitlements, over "
            "the time in the window when every team had work waiting (saturatedFraction of "
            "it); fairnessWholeWindow over all of it (at the lower load it reflects demand). "
            "Completion times: the middle half of the jobs by arrival, the trace run to its "
            "end (the saturated runs stop at the last arrival, so they have none). Preempted "
            "jobs restart from the beginning. Figures: median, min and max over the seeds."
        ),
        "results": rows,
        "targets": targets,
        "seconds": round(time.perf_counter() - started, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
