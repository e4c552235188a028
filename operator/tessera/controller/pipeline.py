"""One cycle of the controller, read top to bottom: settle what came back, place, report the
pools, visit the workloads, report. Each step is a phase module; I/O only through tessera.k8s."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from tessera.catalog import REFERENCE_MODEL
from tessera.controller.clock import Clock, SystemClock
from tessera.controller.events import Events
from tessera.controller.ledger import Ledger
from tessera.controller.lifecycle import Lifecycle
from tessera.controller.placing import Placing
from tessera.controller.pools import PoolStatuses
from tessera.controller.quotas import QuotaStatuses
from tessera.controller.reporting import Reporter
from tessera.controller.threads import SENDERS, Workers, guard
from tessera.controller.visits import Visits
from tessera.controller.writes import Writes
from tessera.k8s import Kube
from tessera.k8s_aio import AsyncKube
from tessera.world.caches import WorldCache
from tessera.world.pacing import Bursts
from tessera.world.snapshot import World

log = logging.getLogger("tessera.controller")

# Workloads are visited for at most this long per cycle; the rest wait for the next cycle,
# which follows at once. A burst's status writes then never hold back its new placements.
VISIT_BUDGET = 1.0


class Controller:
    """What one operator process remembers between cycles (never the source of truth): the
    ledger, the World's caches, burst pacing, and the phases that act on a World."""

    def __init__(
        self,
        kube: Kube,
        clock: Clock | None = None,
        unit_reference: str = REFERENCE_MODEL,
        loop: AsyncKube | None = None,
    ) -> None:
        self.clock = clock or SystemClock()
        self.unit_reference = unit_reference
        self.ledger = Ledger()
        self.cache = WorldCache()  # membership and accelerator resolution between cycles
        self.bursts = Bursts()
        self.visits = Visits()
        self.reporter = Reporter()
        self.loop = loop or AsyncKube(kube, SENDERS)  # pods are sent on its event loop
        self.workers = Workers(self.clock, self.loop)
        events = Events(kube, self.clock)
        writes = Writes(kube, self.loop, self.ledger, events, self.clock)
        self.quotas = QuotaStatuses(kube, self.clock)
        self.placing = Placing(
            writes, self.ledger, events, self.workers, self.bursts, self.clock,
            self.quotas.preemptions,
        )  # fmt: skip
        self.lifecycle = Lifecycle(writes, self.ledger, events, self.bursts, self.clock)
        self.pools = PoolStatuses(kube, events, self.clock)
        self.events = events
        self.heartbeat: float | None = None  # monotonic time the loop last went round

    def close(self) -> None:
        """Stops the event loop pods are sent on (at the process's clean-up)."""
        self.loop.close()

    @property
    def behind(self) -> bool:
        """The last cycle left workloads unvisited: the next runs at once."""
        return bool(self.visits.skipped)

    def world(self, copied: dict[str, Any]) -> World:
        """A World over one copy of the caches (Informers.copy), with this process's
        decisions the cache may not show yet."""
        edits = copied.get("edits")
        recent = self.ledger.decided(copied["workloads"], edits)
        if edits is not None:
            edits = edits.adding("recent", self.ledger.decisions_edited())
        return World(
            **{**copied, "edits": edits},
            recent=recent,
            cache=self.cache,
            unit_reference=self.unit_reference,
        )

    def cycle(self, world: World, now: datetime | None = None) -> None:
        """One pass over one World, copied just before: its pods are what the watch showed
        then, so a pod claim's age counts to then (Ledger.settle_pods)."""
        now = now or self.clock.now()
        started = self.clock.monotonic()
        ledger = self.ledger

        # 1. Settle: what the cache now shows is no longer in flight.
        self.events.forget_gone(world)
        ledger.settle_writes(world)

        # 2. Place: pending workloads and moves off draining pools, one plan; pods first.
        guard("Workload", self.placing.run, world, now)

        # 3. Pools: statuses computed when they can have changed, written on their threads;
        # finalizers on every pool, taken off a deleted one once nothing holds it.
        self.pools.write(world, self.pools.compute(world, now))
        self.pools.protect(world)
        guard("AcceleratorQuota", self.quotas.run, world, now)
        placed = self.clock.monotonic()

        # 4. Visit: the workloads whose facts changed (all each FULL_PASS), concurrently,
        # for at most VISIT_BUDGET; the rest first in line next cycle.
        for name, age in ledger.settle_pods(world, started):
            log.info("pod %s not seen %.0fs after it was sent; sending it again", name, age)
        at = self.clock.monotonic()
        full = self.visits.full(at)
        ledger.settle_workloads(world, at, full)
        due = self.visits.due(world, at, full, ledger, self.bursts)

        def visit(item: tuple[str, Any]) -> None:
            key, signature = item
            ledger.visited(key, None)
            if guard("Workload", self.lifecycle.visit, world, key, now):
                ledger.visited(key, signature)

        left = self.workers.each(visit, due, self.clock.monotonic() + VISIT_BUDGET)
        self.visits.skipped = {key for key, _ in left}
        for key in self.lifecycle.written():  # the visits' status writes, sent on the loop
            ledger.visited(key, None)

        # 5. Report: the gauges, at most every METRICS_EVERY.
        self.reporter.report(world, self.pools.statuses, now, self.clock.monotonic())
        log.debug(
            "cycle: %d workloads (%d visited, %d left), %d pools, %d nodes; pools and placement "
            "%.2fs, workloads %.2fs",
            len(world.workloads), len(due) - len(left), len(left), len(world.pools),
            len(world.nodes), placed - started, self.clock.monotonic() - placed,
        )  # fmt: skip

    def run(self, copied: dict[str, Any]) -> None:
        """Builds the World over a copy of the caches and runs one cycle."""
        self.cycle(self.world(copied))

    def stand_by(self) -> None:
        """A standby replica: no figures of its own."""
        self.reporter.stand_by()
