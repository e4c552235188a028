"""The fleet benchmark's warm-up: an unmeasured burst of one-pod Workloads made into pods by the
floor operator, before the operator starts. Imports fleet_context, fleet_floor and hack/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "hack"))

import fleet  # hack/fleet.py: the simulated fleet
import fleet_specs as specs
from fleet_context import Bench, Phase
from fleet_floor import floor_burst

KEEP = ("workloads", "clientCreatesPerSecond", "createdToPodsCreated", "createdToBound")


def warm_up(bench: Bench, n: int) -> tuple[dict[str, Any], Phase]:
    """A burst before any measured one, not measured: n one-pod Workloads turned into pods
    by the floor operator (no Tessera). The first burst on a fresh control plane is slow
    whoever makes the pods (the floor's creation to all bound p50 about four times its
    next burst's), so without it the first measured burst, Tessera's singles, alone would
    pay for the cold start. Returns the figures kept (as `warmUp`) and the phase, left for
    the clean-up."""
    workloads = specs.singles(n, bench.pools, "")
    resources = {g["name"]: fleet.device_resource(g) or "" for g in bench.groups}

    def made(ns: str) -> dict[str, list[dict[str, Any]]]:
        return specs.warm_up_pods(workloads, bench.pools, resources, ns)

    result, phase = floor_burst(bench, "warm-up", "warm-up (not measured)", workloads, made)
    figures = {k: result[k] for k in KEEP} | {"podsBoundPerSecond": result["podsBoundPerSecond"]}
    return figures, phase
