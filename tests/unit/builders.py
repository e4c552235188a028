"""Builders for the pure core's test objects: pools, nodes, workloads and snapshots.
Test helpers only; import tessera.api, tessera.catalog and tessera.placement."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tessera import api, catalog
from tessera.placement import NodeState, PendingWorkload, PoolState, Release, Snapshot, pool_state

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

# Short pool names the tests use, mapped to catalog keys.
MODELS = {
    "t4": "T4",
    "l4": "L4",
    "l40s": "L40S",
    "a10g": "A10G",
    "v100": "V100-SXM2-32GB",
    "a100": "A100-SXM4-80GB",
    "a100-40": "A100-SXM4-40GB",
    "h100": "H100-SXM5-80GB",
    "h100-pcie": "H100-PCIe-80GB",
    "h200": "H200-SXM-141GB",
    "b200": "B200",
    "mi250x": "MI250X",
    "mi300x": "MI300X",
    "gaudi2": "Gaudi2",
    "gaudi3": "Gaudi3",
    "tpu-v5e": "TPU-v5e",
    "trainium": "Trainium",
    "k80": "K80",
    "p100": "P100",
}


def pool(
    name: str,
    nodes: int = 2,
    devices: int = 8,
    *,
    model: str | None = None,
    free: Sequence[int] | None = None,
    ready: Sequence[bool] | None = None,
    releases: dict[int, Sequence[tuple[float, int]]] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> PoolState:
    """A pool of `nodes` nodes with `devices` each, all free unless `free` says otherwise.
    The model comes from `model`, else from the name (`h100-east` -> H100-SXM5-80GB).
    `releases` maps a node index to (hours from NOW, devices) pairs. Other keyword arguments
    go to the AcceleratorPoolSpec (costPerDeviceHour, preference, draining, software...)."""
    key = model or MODELS.get(name) or MODELS.get(name.split("-", maxsplit=1)[0]) or name
    entry = catalog.get(key)
    vendor = entry.vendor if entry else api.Vendor.OTHER
    accel = {"vendor": vendor, "model": key, **spec.pop("accelerator", {})}
    body = {"accelerator": accel, "nodeSelector": {"matchLabels": {"pool": name}}, **spec}
    pool_spec = api.AcceleratorPoolSpec.model_validate(body)
    node_states = []
    for i in range(nodes):
        node_free = devices if free is None else free[i]
        node_releases = tuple(
            Release(at=NOW + timedelta(hours=h), devices=d) for h, d in (releases or {}).get(i, ())
        )
        node_states.append(
            NodeState(
                name=f"{name}-{i}",
                labels={"pool": name, **(labels or {})},
                ready=True if ready is None else ready[i],
                allocatable=devices,
                free=node_free,
                releases=node_releases,
            )
        )
    return pool_state(name, pool_spec, node_states)


def workload(
    name: str = "w",
    namespace: str = "default",
    *,
    count: int = 1,
    replicas: int = 1,
    priority: int = 0,
    age: float = 0.0,
    objective: str = "balanced",
    weights: dict[str, float] | None = None,
    duration: str | None = None,
    excluded: Sequence[str] = (),
    **needs: Any,
) -> PendingWorkload:
    """A pending workload created `age` seconds before NOW. Other keyword arguments go to
    spec.accelerator (precision, minMemoryGiB, vendors, software, throughput...)."""
    spec = api.WorkloadSpec.model_validate(
        {
            "replicas": replicas,
            "priority": priority,
            "objective": objective,
            "weights": weights,
            "estimatedDuration": duration,
            "accelerator": {"count": count, **needs},
            "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        }
    )
    return PendingWorkload(
        namespace=namespace,
        name=name,
        spec=spec,
        created_at=NOW - timedelta(seconds=age),
        excluded_pools={p: f"withdrawn from {p}" for p in excluded},
    )


def snapshot(*pools: PoolState, namespaces: dict[str, dict[str, str]] | None = None) -> Snapshot:
    return Snapshot(pools=pools, namespaces=namespaces or {})
