"""Placement's inputs: a snapshot of pools, nodes and namespaces, and the pending workloads.
Pure data (frozen pydantic); imports tessera.api and tessera.catalog, never kopf or kubernetes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import Field

from tessera import api
from tessera.catalog import Accelerator, resolve_accelerator

NAME_LABEL = "kubernetes.io/metadata.name"


class Release(api.Model):
    """Devices on a node expected to become free at a time (a running workload's end)."""

    at: datetime
    devices: int = Field(ge=1)


class NodeState(api.Model):
    """One node of a pool: its labels, readiness and devices of the pool's resource.
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


class PendingWorkload(api.Model):
    """A Workload waiting for a placement decision."""

    namespace: str
    name: str
    spec: api.WorkloadSpec
    created_at: datetime
    excluded_pools: tuple[str, ...] = Field(
        (), description="Pools withdrawn from after a fallback; never tried again."
    )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Snapshot(api.Model):
    """The world one planning cycle decides over."""

    pools: tuple[PoolState, ...] = ()
    namespaces: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Namespace name -> its labels."
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


def pool_state(name: str, spec: api.AcceleratorPoolSpec, nodes: Iterable[NodeState]) -> PoolState:
    """Build a PoolState: resolve the accelerator from the catalog, the nodes' labels and the
    spec, and take the CUDA version from GPU Feature Discovery labels when the spec has none."""
    nodes = tuple(nodes)
    resolution = resolve_accelerator(spec, {n.name: n.labels for n in nodes})
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
    _pods: dict[int, int] = field(default_factory=dict)

    @staticmethod
    def of(pool: PoolState) -> PoolView:
        acc = pool.accelerator
        ready = tuple(sorted((n.allocatable for n in pool.nodes if n.ready), reverse=True))
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
