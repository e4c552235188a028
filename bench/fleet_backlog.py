"""The fleet benchmark's Tessera backlog: Workloads created while the operator is stopped, then
the operator started with all of them pending. Imports fleet_context; no other phase."""

from __future__ import annotations

import time
from typing import Any

from fleet_context import WORKLOADS, Bench, Phase
from fleet_kube import burst


def tessera(
    bench: Bench, workloads: list[dict[str, Any]], name: str = "backlog"
) -> tuple[dict[str, Any], Phase]:
    """The operator's own pace: the one-pod Workloads created while it is stopped, then
    it is started with all of them pending. A burst's pods are created no faster than
    its Workloads arrive (the client's pace); from a backlog, the operator's pods come
    as fast as it makes them. Measured from its first pod to its last, and from its
    start (its caches filled first) to its first pod; and its peak RSS (VmHWM of the process
    started with the whole backlog pending, read once every Workload is Running: the peak
    of holding and placing all of them). The phase is left for the clean-up."""
    phase, pods = bench.workload_phase(name, workloads)
    ns = phase.namespace
    bench.say(f"tessera backlog: stopping the operator, creating {len(workloads)} Workloads")
    bench.operator.stop()
    phase.starts, first, last_post = burst(
        bench.api, WORKLOADS.format(ns=ns), workloads, bench.args.threads
    )
    bench.say(
        f"  {len(workloads)} Workloads created in {last_post - first:.2f} s; starting "
        "the operator with all of them pending"
    )
    before = bench.scrape()
    began = time.monotonic()
    bench.operator.start()
    bench.cpu.sample()  # its CPU is read from here: the backlog may be shorter than a tick
    bench.wait_workloads(phase, pods, running=True)
    result = bench.backlog_figures(phase, began, first, last_post, "operator")
    result["operatorPeakRssMB"] = round(bench.operator.figures()["peakRssMB"], 1)
    bench.say(f"  the operator's peak RSS with the backlog: {result['operatorPeakRssMB']} MB")
    result["apiWrites"] = bench.api_cost(before, bench.scrape(), len(workloads))
    result["integrity"] = bench.integrity(phase)
    return result, phase
