"""The fleet benchmark's baseline: the pods Tessera made, created directly and bound by the
same kube-scheduler, with no operator running. Imports fleet_context; no other phase."""

from __future__ import annotations

from collections import Counter
from typing import Any

import fleet_measure as m
import fleet_specs as specs
from fleet_context import PODS, Bench, Phase
from fleet_kube import burst


def baseline(
    bench: Bench, name: str, tessera_pods: list[dict[str, Any]]
) -> tuple[dict[str, Any], Phase]:
    """The same pods, created directly and bound by the same kube-scheduler. The phase
    is left for the clean-up."""
    phase = bench.phase(f"baseline-{name}", "baseline")
    ns = phase.namespace
    bodies = [specs.baseline_pod(p, ns) for p in tessera_pods]
    groups = [b["metadata"]["labels"][specs.GROUP_LABEL] for b in bodies]
    phase.sizes = dict(Counter(groups))
    phase.batches = specs.batches(bodies)
    bench.say(f"baseline {name}: creating {len(bodies)} pods directly in {ns}" + bench.pace)
    due = bench.due(groups, [1] * len(bodies))
    before = bench.scrape()
    starts, first, last_post = burst(bench.api, PODS.format(ns=ns), bodies, bench.args.threads, due)
    for pod, group in zip(bodies, groups, strict=True):
        t = starts[pod["metadata"]["name"]]
        phase.starts[group] = min(t, phase.starts.get(group, t))
    total = len(bodies)
    bench.wait_bound(phase, "the baseline burst", total)
    after = bench.scrape()
    result = bench.figures(phase, first, last_post)
    result["clientCreatesPerSecond"] = m.rate(total, first, last_post)
    cost = bench.api_cost(before, after, len(phase.sizes))
    result["apiWrites"] = {
        "all": cost["others"],
        "lists": cost["lists"],
        "listsByClient": cost["listsByClient"],
    }
    bench.report_phase(f"baseline {name}", result)
    return result, phase
