"""The fleet benchmark's Tessera bursts: a mix of Workloads through the operator, measured until
every one is Running, every replica ready and every pool counts it. Imports fleet_context."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import fleet_measure as m
import fleet_specs as specs
from fleet_context import WORKLOADS, Bench, Phase, Sample
from fleet_kube import burst, wait_until


def tessera(
    bench: Bench, name: str, workloads: list[dict[str, Any]]
) -> tuple[dict[str, Any], Phase, Sample]:
    """A burst of Workloads through the operator, measured until every one is Running and
    then until every replica is ready and every pool's status counts them. Returns its
    figures, the phase (left for the idle window, the restart, the integrity check and the
    clean-up) and the scrape taken at its end (where an idle window starts)."""
    phase, pods = bench.workload_phase(name, workloads)
    ns = phase.namespace
    bench.say(
        f"tessera {name}: creating {len(workloads)} Workloads ({pods} pods) in {ns}" + bench.pace
    )
    due = bench.due(list(phase.sizes), list(phase.sizes.values()))
    before, cpu0 = bench.scrape(), bench.operator.figures()
    phase.starts, first, last_post = burst(
        bench.api, WORKLOADS.format(ns=ns), workloads, bench.args.threads, due
    )
    bench.say(
        f"  {len(workloads)} Workloads created in {last_post - first:.2f} s; "
        "waiting until every pod is bound and every Workload Running"
    )
    bench.wait_workloads(phase, pods, running=True)
    running, cpu1 = bench.scrape(), bench.operator.figures()
    bench.wait_workloads(phase, pods, running=False)
    counted = wait_pools_counted(bench, phase, m.devices_by_pool(workloads))
    ready = bench.scrape()
    result = bench.figures(phase, first, last_post)
    result["poolsCountedSeconds"] = counted
    result["apiWrites"] = bench.api_cost(before, running, len(workloads))
    result["apiWritesRunningToReady"] = bench.api_cost(running, ready, len(workloads))
    result["operatorCpuSeconds"] = round(cpu1["cpuSeconds"] - cpu0["cpuSeconds"], 2)
    result["operatorPeakRssMB"] = round(cpu1["peakRssMB"], 1)
    bench.report_phase(f"tessera {name}", result)
    later = result["apiWritesRunningToReady"]["operator"]
    bench.say(
        f"  from Running until every replica ready: {later['total']} operator writes "
        f"{later['byCategory'] or ''}"
    )
    return result, phase, ready


def wait_pools_counted(bench: Bench, phase: Phase, want: Mapping[str, int]) -> float:
    """Until every pool's status counts the burst's devices as allocated: the operator
    writes device counts at most every few seconds, so the last of a burst's may come
    after every replica is ready; the idle window starts once nothing is left to write.
    Returns the seconds from the burst's last pod created to the first poll that saw
    every pool counted. The polls start once every replica is ready, so this bounds
    how stale `kubectl get acp` was from above; it is not that staleness itself."""
    path = f"/apis/{specs.API_VERSION}/acceleratorpools"
    uncounted: dict[str, tuple[int | None, int]] = {}

    def done() -> bool:
        nonlocal uncounted
        uncounted = m.pools_uncounted(bench.api.get(path)["items"], want)
        return not uncounted

    def progress() -> str:
        return ", ".join(f"{n} shows {s} of {w}" for n, (s, w) in sorted(uncounted.items()))

    checks = [phase.check, bench.operator.check]
    what = "every pool's status to count the burst's devices"
    wait_until(what, done, 60, progress, bench.say, checks=checks, poll=0.25)
    with phase.pods.lock:
        last = max(phase.pods.created.values(), default=time.monotonic())
    seconds = round(time.monotonic() - last, 2)
    bench.say(f"  every pool's status counts the burst's devices, {seconds} s after its last pod")
    return seconds
