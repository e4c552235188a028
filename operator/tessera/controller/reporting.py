"""The report phase: the workload and pool gauges, set from the World and the pool statuses;
a standby replica reports none. Writes only Prometheus metrics (tessera.metrics)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tessera import api, metrics
from tessera.world.snapshot import World

# The workload and pool gauges are set at most this often (scrapes come every 15-30 s): each
# setting counts every Workload's phase, and at a cycle every 0.2 s that was 7 % of the
# operator's CPU in a large singles burst (py-spy).
METRICS_EVERY = 1.0


class Reporter:
    """When the gauges were last set, and the pools that have series (to drop deleted ones)."""

    def __init__(self) -> None:
        self.reported_at = -math.inf
        self.pools: set[str] = set()

    def report(
        self, world: World, statuses: Mapping[str, dict[str, Any]], now: datetime, at: float
    ) -> None:
        """Sets the gauges if METRICS_EVERY has passed since they were last set (at `at`)."""
        if at - self.reported_at < METRICS_EVERY:
            return
        self.reported_at = at
        phases = dict.fromkeys((p.value for p in api.Phase), 0)
        oldest = 0.0
        for key, facts in world.workloads.items():
            phase = facts.status.get("phase") or api.Phase.PENDING.value
            if world.placement_of(key) is not None and phase == api.Phase.PENDING.value:
                phase = api.Phase.PLACED.value
            phases[phase] = phases.get(phase, 0) + 1
            if phase == api.Phase.PENDING.value and not facts.deleting:
                oldest = max(oldest, (now - facts.created).total_seconds())
        for phase, n in phases.items():
            metrics.WORKLOADS.labels(phase).set(n)
        metrics.OLDEST_PENDING.set(oldest)
        for name in world.pool_specs:
            status = statuses[name]
            model = (status.get("accelerator") or {}).get("model", "Unknown")
            degraded = any(
                c["type"] == "Degraded" and c["status"] == "True" for c in status["conditions"]
            )
            metrics.set_pool(name, model, status.get("devices", {}), degraded)
        for name in self.pools - set(world.pools):
            metrics.forget_pool(name)
        self.pools = set(world.pools)

    def stand_by(self) -> None:
        """A standby replica reports no workload or pool figures: only the leader's count."""
        metrics.WORKLOADS.clear()
        metrics.OLDEST_PENDING.set(0)
        for name in self.pools:
            metrics.forget_pool(name)
        self.pools = set()
        self.reported_at = -math.inf
