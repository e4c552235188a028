"""The fleet benchmark's floor: the Workloads made into Tessera's pods by an operator that costs
next to nothing (floor_operator.py), burst or backlog. Imports fleet_context; no other phase."""

from __future__ import annotations

import copy
import functools
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import fleet_specs as specs
from fleet_context import WORKLOADS, Bench, Phase
from fleet_kube import BenchError, burst

Made = Callable[[str], dict[str, list[dict[str, Any]]]]


def floor(
    bench: Bench,
    name: str,
    workloads: list[dict[str, Any]],
    tessera_pods: list[dict[str, Any]],
    backlog: bool = False,
) -> tuple[dict[str, Any], Phase]:
    """The same Workloads in another namespace, turned into the pods Tessera made of
    them by an operator that costs next to nothing (bench/floor_operator.py): what any
    operator could do at best on this machine; with backlog, all of them created before
    it starts. The phase is left for the clean-up."""

    def made(ns: str) -> dict[str, list[dict[str, Any]]]:
        pods: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in tessera_pods:
            body = specs.baseline_pod(pod, ns, floor=True)
            pods[body["metadata"]["labels"][specs.GROUP_LABEL]].append(body)
        return pods

    return floor_burst(bench, f"floor-{name}", f"floor {name}", workloads, made, backlog)


def floor_burst(
    bench: Bench,
    name: str,
    title: str,
    workloads: list[dict[str, Any]],
    made: Made,
    backlog: bool = False,
) -> tuple[dict[str, Any], Phase]:
    """Workloads created in namespace bench-<name>, each turned at once into the pods
    `made(namespace)` holds for it by the floor operator."""
    phase = bench.phase(name, "floor")
    ns = phase.namespace
    bodies = copy.deepcopy(workloads)
    for body in bodies:
        body["metadata"]["namespace"] = ns
    pods = made(ns)
    phase.sizes = {w["metadata"]["name"]: w["spec"]["replicas"] for w in bodies}
    phase.batches = specs.batches(bodies)
    total = sum(phase.sizes.values())
    bench.say(
        f"{title}: creating {len(bodies)} Workloads ({total} pods) in {ns}, their "
        "pods created by the floor operator" + bench.pace
    )
    # A backlog's Workloads are all created first; the floor operator then lists them
    # (no resourceVersion: a watch from before them can be too old for the API server,
    # 410 Gone after 10,000 creates) and is handed all of them at once.
    rv = "" if backlog else phase.resource_version
    start = functools.partial(bench.floor_operator.start, name, ns, rv, dict(pods))
    if not backlog:
        start()
        bench.cpu.sample()  # its CPU is read from here: the burst may be shorter than a tick
    try:
        due = bench.due(list(phase.sizes), list(phase.sizes.values()))
        phase.starts, first, last_post = burst(
            bench.api, WORKLOADS.format(ns=ns), bodies, bench.args.threads, due
        )
        began = time.monotonic()
        if backlog:
            start()
            bench.cpu.sample()

        def alive() -> None:
            if bench.floor_operator.pid is None:
                raise BenchError("the floor operator exited (its log is in the state dir)")

        bench.wait_bound(phase, f"the {title}", total, alive)
        if backlog:
            result = bench.backlog_figures(phase, began, first, last_post, "floor operator")
        else:
            result = bench.figures(phase, first, last_post)  # its CPU, while it runs
    finally:
        bench.floor_operator.stop()
    if not backlog:
        bench.report_phase(title, result)
        bench.say(f"  floor operator: {result['podsCreatedPerSecond']} pods created/s")
    return result, phase
