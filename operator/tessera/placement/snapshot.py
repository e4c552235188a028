"""Placement's inputs: a snapshot of pools, nodes and namespaces, and the pending workloads.
Pure data (frozen pydantic); imports tessera.api and tessera.catalog, never kopf or kubernetes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from pydantic import Field

from tessera import api
from tessera.catalog import REFERENCE_MODEL, Accelerator, resolve_accelerator
from tessera.placement.sharing import Holding, QuotaState

NAME_LABEL = "kubernetes.io/metadata.name"


class Taint(NamedTuple):
    """A node's NoSchedule or NoExecute taint."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """Whether one of the tolerations (core/v1 dicts) tolerates the taint, as the scheduler
    decides it: an empty key with Exists tolerates everything; an empty effect every effect."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = tol.get("key") or ""
        if tol.get("operator", "Equal") == "Exists":
            if not key or key == taint.key:
                return True
        elif key == taint.key and (tol.get("value") or "") == taint.value:
            return True
    return False


class Release(api.Model):
    """Devices on a node expected to become free at a time (a running workload's end)."""

    at: datetime
    devices: int = Field(ge=1)


class NodeState(api.Model):
    """One node of a pool: its labels, whether it takes the pool's pods (ready), and devices of
    the pool's resource.
    0 <= free <= allocatable is its builder's to keep: the World builds NodeStates without
    validation (model_construct), once per node per cycle, and the World's tests check it."""

    name: str
    labels: Mapping[str, str] = Field(default_factory=dict)
    ready: bool = True
    allocatable: int = Field(ge=0, description="Devices of the pool's resource the node offers.")
    free: int = Field(ge=0, description="Allocatable minus devices requested by its pods.")
    releases: tuple[Release, ...] = Field(
        (), description="When devices in use are expected back (from estimated durations)."
    )
    taints: tuple[Taint, ...] = Field(
        (),
        description="Set on a node that is not ready only because of these taints (the pool's "
        "tolerations do not tolerate them): a workload whose own tolerations do may use it.",
    )


class PoolState(api.Model):
    """One AcceleratorPool as placement sees it: spec, resolved accelerator and nodes."""

    name: str
    spec: api.AcceleratorPoolSpec
    accelerator: Accelerator
    nodes: tuple[NodeState, ...] = ()
    software: dict[str, str] = Field(
        default_factory=dict,
        description="Software versions on the nodes: the spec's, plus what labels tell.",
    )
    problems: tuple[str, ...] = Field(
        (), description="Why the accelerator cannot be used (unknown model, conflict)."
    )
    resolution: Literal["resolved", "unknown", "conflict"] = Field(
        "resolved", description="How resolving the accelerator went (catalog.Resolution)."
    )
    gated: frozenset[str] = Field(
        frozenset(),
        description="The nodes with taints (NodeState.taints), named so that a plan finds "
        "them without a pass over every node: most pools have none.",
    )


class PendingWorkload(api.Model):
    """A Workload waiting for a placement decision."""

    namespace: str
    name: str
    spec: api.WorkloadSpec
    created_at: datetime
    excluded_pools: dict[str, str] = Field(
        default_factory=dict,
        description="Pools not to try now, with why (withdrawn from after a fallback, and "
        "neither changed nor backed off since: tessera.world.exclusions).",
    )
    holds: bool = Field(
        False,
        description="It holds devices already (a move off a draining pool, a lost replica "
        "placed again): its quota counted them, so it is not admitted again or a preemptor.",
    )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def tolerations(self) -> Sequence[Mapping[str, Any]]:
        """The pod template's own tolerations (the pool's are added to every pod)."""
        spec = self.spec.template.get("spec")
        return (spec.get("tolerations") if spec else None) or ()


class Snapshot(api.Model):
    """The world one planning cycle decides over."""

    pools: tuple[PoolState, ...] = ()
    namespaces: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Namespace name -> its labels."
    )
    quotas: tuple[QuotaState, ...] = Field(
        (), description="The AcceleratorQuotas, with the namespaces each selects."
    )
    holdings: tuple[Holding, ...] = Field(
        (), description="Placed workloads' devices: quota usage and preemption's candidates."
    )


def cuda_from_labels(labels: Mapping[str, str]) -> str | None:
    """The CUDA runtime version GPU Feature Discovery reports on a node, e.g. `12.4`."""
    major = labels.get("nvidia.com/cuda.runtime.major") or labels.get(
        "nvidia.com/cuda.runtime-version.major"
    )
    minor = labels.get("nvidia.com/cuda.runtime.minor") or labels.get(
        "nvidia.com/cuda.runtime-version.minor", "0"
    )
    if not major or not major.isdigit() or not minor.isdigit():
        return None
    return f"{major}.{minor}"


def pool_state(
    name: str,
    spec: api.AcceleratorPoolSpec,
    nodes: Iterable[NodeState],
    reference: str = REFERENCE_MODEL,
) -> PoolState:
    """Build a PoolState: resolve the accelerator from the catalog, the nodes' labels and the
    spec (its units against the `reference` model), and take the CUDA version from GPU
    Feature Discovery labels when the spec has none."""
    nodes = tuple(nodes)
    resolution = resolve_accelerator(spec, {n.name: n.labels for n in nodes}, reference)
    software = dict(spec.software)
    if "cuda" not in software:
        versions = [v for n in nodes if (v := cuda_from_labels(n.labels))]
        if versions:
            software["cuda"] = min(versions, key=parse_version)
    return PoolState(
        name=name,
        spec=spec,
        accelerator=resolution.accelerator,
        nodes=nodes,
        gated=frozenset(n.name for n in nodes if not n.ready and n.taints),
        software=software,
        problems=resolution.problems,
        resolution=resolution.status,
    )


def parse_version(text: str) -> tuple[int, ...]:
    """`12.4` -> (12, 4, 0, 0): versions compare as tuples padded to four parts."""
    parts = [int(p) for p in re.findall(r"[0-9]+", text)[:4]]
    return tuple(parts + [0] * (4 - len(parts)))


@dataclass(frozen=True, slots=True, eq=False)
class PoolView:
    """A pool's facts flattened for the hot loop (built once per plan)."""

    name: str
    model: str
    vendor: api.Vendor
    resource: str
    memory_gib: float
    bandwidth_tbps: float
    tflops: Mapping[api.Precision, float]
    price: float
    watts: float
    units: float  # normalised units per device (quotas)
    stack: str | None
    features: frozenset[str]
    software: Mapping[str, tuple[int, ...]]
    software_text: Mapping[str, str]
    preference: float
    draining: bool
    namespace_selector: api.LabelSelector | None
    problems: tuple[str, ...]
    ready_allocatable: tuple[int, ...]
    devices: int
    # Nodes not ready only for taints the pool does not tolerate: their taints and devices.
    gated: Mapping[str, tuple[Taint, ...]] = field(default_factory=dict)
    gated_allocatable: Mapping[str, int] = field(default_factory=dict)
    _pods: dict[int, int] = field(default_factory=dict)

    @staticmethod
    def of(pool: PoolState) -> PoolView:
        acc = pool.accelerator
        ready = tuple(sorted((n.allocatable for n in pool.nodes if n.ready), reverse=True))
        gated = [n for n in pool.nodes if n.name in pool.gated] if pool.gated else []
        return PoolView(
            name=pool.name,
            model=acc.model,
            vendor=acc.vendor,
            resource=acc.resource_name,
            memory_gib=acc.memory_gib,
            bandwidth_tbps=acc.memory_bandwidth_tbps,
            tflops=acc.peak_tflops,
            price=acc.cost_per_device_hour,
            watts=acc.power_watts,
            units=acc.units_per_device,
            stack=acc.software,
            features=acc.features | {p.value for p in acc.peak_tflops},
            software={k: parse_version(v) for k, v in pool.software.items()},
            software_text=dict(pool.software),
            preference=float(pool.spec.preference),
            draining=pool.spec.draining,
            namespace_selector=pool.spec.namespace_selector,
            problems=pool.problems,
            ready_allocatable=ready,
            devices=sum(ready),
            gated={n.name: n.taints for n in gated},
            gated_allocatable={n.name: n.allocatable for n in gated},
        )

    def unlocked(self, tolerations: Sequence[Mapping[str, Any]]) -> frozenset[str]:
        """The gated nodes a workload with these (template) tolerations may use: every taint
        the pool leaves untolerated is tolerated by them. Callers check `gated` first: most
        pools have no such node, and reading a workload's tolerations is the dearer part."""
        if not self.gated or not tolerations:
            return frozenset()
        return frozenset(
            n for n, taints in self.gated.items() if all(tolerates(tolerations, t) for t in taints)
        )

    def pods_capacity(self, count: int) -> int:
        """Pods of `count` devices the ready nodes could hold if they were empty."""
        pods = self._pods.get(count)
        if pods is None:
            pods = self._pods[count] = sum(a // count for a in self.ready_allocatable)
        return pods

    def allows_namespace(self, namespace: str, labels: Mapping[str, str]) -> bool:
        sel = self.namespace_selector
        if sel is None or sel.is_empty():
            return True
        return sel.matches({**labels, NAME_LABEL: namespace})
