"""The quota phase: every AcceleratorQuota's status (usage, borrowing, what waits) written when
it changed, the quota gauges, and the accounting counters of what placed workloads hold
(device-, unit-seconds, cost, energy). API calls through tessera.k8s."""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from typing import Any

from tessera import metrics
from tessera.controller.clock import Clock
from tessera.controller.threads import guard
from tessera.k8s import Kube
from tessera.world.quota_status import quota_status, sharing
from tessera.world.snapshot import World

QUOTAS_EVERY = 2.0  # seconds between quota statuses and accounting steps


class QuotaStatuses:
    """The statuses last written, the evictions counted per quota since the start, and when
    usage was last accounted for."""

    def __init__(self, kube: Kube, clock: Clock) -> None:
        self.kube, self.clock = kube, clock
        self.preemptions: Counter[str] = Counter()
        self._written: dict[str, dict[str, Any]] = {}
        self._at = -math.inf

    def run(self, world: World, now: datetime) -> None:
        """At most every QUOTAS_EVERY: accounts for the time since the last step, then
        writes each quota's status where it differs from the one last written."""
        at = self.clock.monotonic()
        if at - self._at < QUOTAS_EVERY:
            return
        elapsed = at - self._at if math.isfinite(self._at) else 0.0
        self._at = at
        self._account(world, elapsed)
        if not world.quotas:
            return
        shared = sharing(world)
        for name in sorted(world.quotas):
            status = quota_status(world, name, shared, self.preemptions[name], now)
            spec = world.quota_specs.get(name)
            if not isinstance(spec, str) and spec is not None:
                for rule in ("WithinQuota", "Reclaim"):  # 0 until the first, not "no data"
                    metrics.PREEMPTIONS.labels(name, rule)
                used = shared.base.units.get(name, 0.0)
                metrics.QUOTA_UNITS.labels(name, "nominal").set(spec.nominal)
                metrics.QUOTA_UNITS.labels(name, "used").set(used)
                metrics.QUOTA_UNITS.labels(name, "borrowed").set(max(0.0, used - spec.nominal))
            changed = self._written.get(name) != status
            if changed and guard("AcceleratorQuota", self.kube.patch_quota_status, name, status):
                self._written[name] = status
        for name in set(self._written) - set(world.quotas):
            del self._written[name]
            for state in ("nominal", "used", "borrowed"):
                metrics.QUOTA_UNITS.remove(name, state)
            for rule in ("WithinQuota", "Reclaim"):
                metrics.PREEMPTIONS.remove(name, rule)

    def _account(self, world: World, seconds: float) -> None:
        """Adds `seconds` of what every placed workload holds to the accounting counters,
        summed per namespace, quota and pool first (one increment per series, not per
        workload: at 10,000 Workloads the difference is most of this step's CPU)."""
        if seconds <= 0:
            return
        owner = {ns: q for q, state in world.quota_states.items() for ns in state.namespaces}
        devices: Counter[tuple[str, str, str]] = Counter()
        for (namespace, pool), held in world.devices_held().items():
            if pool in world.pool_specs:
                devices[namespace, owner.get(namespace, ""), pool] += held
        for labels, held in devices.items():
            acc = world.accelerator(labels[2])
            device_seconds = held * seconds
            metrics.DEVICE_SECONDS.labels(*labels).inc(device_seconds)
            metrics.UNIT_SECONDS.labels(*labels).inc(device_seconds * acc.units_per_device)
            metrics.COST.labels(*labels).inc(device_seconds / 3600 * acc.cost_per_device_hour)
            metrics.ENERGY.labels(*labels).inc(device_seconds * acc.power_watts)
