"""The AcceleratorQuota kind: a share of the fleet for the namespaces of one team, counted in
normalised units (one unit: one reference device's dense bf16 throughput, an H100 by
default), so that a quota means the same work on any generation. Pure data; imports only
tessera.api.common."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict

from tessera.api.common import (
    API_VERSION,
    CONDITIONS_LIST,
    Condition,
    LabelSelector,
    Model,
    PoolName,
    cel,
    described,
    validations,
)


class WithinQuota(StrEnum):
    """Whether a workload may evict lower-priority workloads of its own quota."""

    LOWER_PRIORITY = "LowerPriority"
    NEVER = "Never"


class Reclaim(StrEnum):
    """Whether a quota below its nominal takes back what other quotas borrowed."""

    ANY = "Any"
    NEVER = "Never"


class PoolCap(Model):
    """At most this many devices of one pool for the quota's workloads."""

    pool: PoolName = described("The AcceleratorPool.")
    max_devices: int = described("Devices of the pool the quota may hold at once.", ge=0)


class Preemption(Model):
    """When the quota's waiting workloads may evict running ones (whole workloads, only when
    the waiting one then fits)."""

    within_quota: WithinQuota = described(
        "LowerPriority: a workload may evict lower-priority workloads of the same quota. "
        "Never: priority only orders the queue.",
        WithinQuota.LOWER_PRIORITY,
    )
    reclaim: Reclaim = described(
        "Any: while below its nominal, the quota takes back capacity other quotas borrowed, "
        "from their most recently placed borrowing workloads first. Never: it waits.",
        Reclaim.ANY,
    )
    min_runtime_seconds: int = described(
        "A workload placed less than this long ago is not evicted (for either rule): "
        "just-placed work is protected, and two quotas cannot trade a pool back and forth.",
        60,
        ge=0,
        le=86400,
    )


class AcceleratorQuotaSpec(Model):
    """Desired state of an AcceleratorQuota: whose, how much, and how it shares."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.pools) || self.pools.all(p, self.pools.exists_one(q, q.pool == p.pool))",
                "each pool may be capped only once",
                field_path=".pools",
                reason="FieldValueDuplicate",
            ),
        )
    )

    namespace_selector: LabelSelector = described(
        "The namespaces whose Workloads this quota governs; select by name with the "
        "kubernetes.io/metadata.name label. The Workloads of a namespace two quotas select "
        "wait until the overlap is resolved (both quotas report it in their Ready condition).",
    )
    nominal: float = described(
        "Normalised units the quota is entitled to: a Workload counts replicas x devices x "
        "the unitsPerDevice of the pool it runs on (AcceleratorPool status.accelerator).",
        ge=0,
    )
    borrowing_limit: float | None = described(
        "How many units above nominal the quota may use while other quotas leave capacity "
        "idle; unset: no limit, 0: no borrowing. Borrowed capacity can be reclaimed.",
        None,
        ge=0,
    )
    weight: float = described(
        "Fair-sharing weight: when several quotas wait, the one with the lowest usage over "
        "(nominal x weight) goes first.",
        1.0,
        gt=0,
    )
    pools: list[PoolCap] = described(
        "Optional caps in devices on single pools, e.g. at most 8 H100s whatever the units allow.",
        default_factory=list,
        max_length=64,
    )
    preemption: Preemption = described(
        "When waiting workloads of this quota evict running ones.", default_factory=Preemption
    )


class PoolUsage(Model):
    """The quota's devices and units on one pool."""

    pool: str = described("The AcceleratorPool.")
    devices: int = described("Devices held by the quota's workloads on the pool.", 0, ge=0)
    units: float = described("The same in normalised units.", 0.0, ge=0)


class AcceleratorQuotaStatus(Model):
    """Observed state of an AcceleratorQuota."""

    observed_generation: int | None = described("The generation this status describes.", None)
    namespaces: list[str] = described(
        "The namespaces the quota governs now, sorted.", default_factory=list
    )
    nominal: float = described("Units the quota is entitled to (spec.nominal).", 0.0)
    used: float = described("Units held by the quota's placed workloads.", 0.0)
    borrowed: float = described("Units used above nominal (borrowed from idle capacity).", 0.0)
    pools: list[PoolUsage] = described(
        "Devices and units held, per pool.", default_factory=list, max_length=256
    )
    waiting: int = described("The quota's workloads waiting for a placement.", 0, ge=0)
    waiting_for_quota: int = described(
        "Of those, the ones that would fit the fleet now but not the quota.", 0, ge=0
    )
    preemptions: int = described(
        "Workloads this quota's workloads have evicted since the operator started.", 0, ge=0
    )
    conditions: list[Condition] = described(
        "Ready (the quota governs its namespaces; False with reason NamespacesOverlap when "
        "another quota selects one of them).",
        default_factory=list,
        json_schema_extra=CONDITIONS_LIST,
    )


class AcceleratorQuota(Model):
    """A team's share of the fleet in normalised units (cluster-scoped)."""

    api_version: Literal["tessera.dev/v1alpha1"] = described("API version.", API_VERSION)
    kind: Literal["AcceleratorQuota"] = described("Kind.", "AcceleratorQuota")
    metadata: dict[str, Any] = described("Standard object metadata.", default_factory=dict)
    spec: AcceleratorQuotaSpec = described("Desired state.")
    status: AcceleratorQuotaStatus | None = described("Observed state.", None)
