"""The fleet benchmark's idle phases: the warm operator at rest before any Workload, and the
window after a burst with everything Running. Imports fleet_context; no other phase."""

from __future__ import annotations

import time
from typing import Any

from fleet_context import Bench, Sample


def at_rest(bench: Bench) -> dict[str, Any]:
    """The warm operator's memory, and its CPU over a quiet period, before any workload;
    and every process's CPU in that period: what the fleet costs the machine at rest
    (the test bed's own load, which every side of the run shares)."""
    seconds = bench.args.warm_seconds
    before, start = bench.operator.figures(), time.monotonic()
    time.sleep(seconds)
    after, machine = bench.operator.figures(), bench.cpu_in(start, time.monotonic())
    cpu = after["cpuSeconds"] - before["cpuSeconds"]
    by_process = ", ".join(f"{k} {v:.2f}" for k, v in machine["byProcess"].items())
    bench.say(
        f"operator idle: RSS {after['rssMB']:.1f} MB, {cpu:.2f} CPU s "
        f"in {seconds:g} s; the machine at rest: {machine['busyCpus']:.2f} "
        f"CPUs busy ({by_process} CPU s)"
    )
    return {
        "rssMB": round(after["rssMB"], 1),
        "peakRssMB": round(after["peakRssMB"], 1),
        "cpuSeconds": round(cpu, 2),
        "seconds": seconds,
        "machineCpuSeconds": machine,
    }


def window(bench: Bench, start: Sample, workloads: int) -> dict[str, Any]:
    """Everything Running and nothing changing: the operator should neither write nor list.
    `start` is the scrape taken once every pool's status counted the burst."""
    seconds = bench.args.idle_seconds
    bench.say(f"  idle window: {seconds:g} s with {workloads} Workloads Running")
    cpu0 = bench.operator.figures()
    time.sleep(seconds)
    bench.operator.check()
    cost = bench.api_cost(start, bench.scrape(), workloads)
    cpu1 = bench.operator.figures()
    result = {
        "seconds": seconds,
        "operatorWrites": cost["operator"]["total"],
        "operatorWritesByCategory": cost["operator"]["byCategory"],
        "othersWrites": cost["others"]["total"],
        "lists": cost["lists"],
        "watchedLists": cost["watchedLists"],
        "listsByClient": cost["listsByClient"],
        "operatorLists": cost["operatorLists"],
        "operatorCpuSeconds": round(cpu1["cpuSeconds"] - cpu0["cpuSeconds"], 2),
        "operatorRssMB": round(cpu1["rssMB"], 1),
        "operatorPeakRssMB": round(cpu1["peakRssMB"], 1),
    }
    bench.say(
        f"  idle: operator writes {result['operatorWrites']} "
        f"{result['operatorWritesByCategory'] or ''}, LISTs {result['operatorLists']} "
        f"(all clients: {result['lists'] or 0}), "
        f"{result['operatorCpuSeconds']} CPU s, RSS {result['operatorRssMB']} MB"
    )
    return result
