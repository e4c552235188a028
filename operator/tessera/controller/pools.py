"""The pool status phase: every AcceleratorPool's status computed from the World when it can
have changed, written on threads of its own when it differs. API calls through tessera.k8s."""

from __future__ import annotations

import math
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

from tessera import api
from tessera.controller.clock import Clock
from tessera.controller.events import Events
from tessera.controller.threads import guard
from tessera.errors import Conflict, NotFound
from tessera.k8s import Kube
from tessera.world.facts import ObjectFacts
from tessera.world.pool_status import holding, pool_status
from tessera.world.snapshot import World

POOL_WRITERS = 4  # pool status patches sent at once
POOL_DEVICES_EVERY = 5.0  # a pool's device counts are rewritten at most this often
DEVICE_KEYS = frozenset({"devices", "summary"})  # the pool status fields that hold them
# Pool conditions where True is good news; for the others (Degraded, NodesOverlap) True is bad.
POSITIVE_CONDITIONS = frozenset({"Ready", "AcceleratorResolved"})

PoolsKey = tuple[tuple[str, str, int, bool], ...]


class PoolStatuses:
    """The statuses last computed (and when, over which pools), and the writes in flight."""

    def __init__(self, kube: Kube, events: Events, clock: Clock) -> None:
        self.kube, self.events, self.clock = kube, events, clock
        self.statuses: dict[str, dict[str, Any]] = {}
        self.computed_at = -math.inf
        self._of: PoolsKey = ()
        self._written: dict[str, float] = {}  # pool -> when the status written was computed
        self._writes: dict[str, Future[Any]] = {}  # pool -> its status write in flight
        self._finalized: dict[str, str] = {}  # pool -> resourceVersion its finalizers were set over
        self._writers = ThreadPoolExecutor(POOL_WRITERS, thread_name_prefix="tessera-pool")

    def compute(self, world: World, now: datetime) -> dict[str, dict[str, Any]]:
        """Every pool's status, or {} when nothing but device counts can have moved since the
        last ones were computed (less than POOL_DEVICES_EVERY ago): in a burst this
        arithmetic over every node was a third of the operator's CPU. A pool changes with its
        spec (generation) or its deletion, not with its resourceVersion: that moves with the
        operator's own status writes too, which land a few at a time. A status someone else
        wrote is put right within POOL_DEVICES_EVERY."""
        pools = tuple(
            (name, facts.uid, facts.generation, facts.deleting)
            for name, facts in sorted(world.pools.items())
        )
        at = self.clock.monotonic()
        fresh = pools == self._of and not world.layout.rebuilt
        if fresh and at - self.computed_at < POOL_DEVICES_EVERY:
            return {}
        self.statuses = {name: pool_status(world, name, now) for name, *_ in pools}
        self.computed_at, self._of = at, pools
        return self.statuses

    def write(self, world: World, statuses: Mapping[str, dict[str, Any]]) -> None:
        """Hands the statuses to POOL_WRITERS threads of their own and returns: in a burst,
        waiting for them held the cycle (and every Workload arriving meanwhile) 0.2-0.4 s
        each POOL_DEVICES_EVERY over 8 pools. POOL_WRITERS at a time: each request in flight
        opens a connection that stays open (20 at once cost an idle operator over 5,000
        nodes 1.4-2.5 MB). A pool whose last write is still in flight is left out: its
        status goes out with the next statuses computed, within POOL_DEVICES_EVERY."""
        self._writes = {n: f for n, f in self._writes.items() if not f.done()}
        computed = self.computed_at
        for name, status in statuses.items():
            if name not in self._writes:
                self._writes[name] = self._writers.submit(
                    guard, "AcceleratorPool", self._update, world, name, status, computed
                )

    def protect(self, world: World) -> None:
        """Keeps the pools' finalizer (api.POOL_FINALIZER): on every pool, and taken off a
        pool being deleted once no workload holds it (a pool being deleted drains: World).
        Written on the pool writers, guarded by the resourceVersion read; a pool whose
        write is in flight is left for the next cycle."""
        for name, facts in world.pools.items():
            has = api.POOL_FINALIZER in facts.finalizers
            if facts.deleting:
                if not has or any(holding(world, name)):
                    continue
                finalizers = [f for f in facts.finalizers if f != api.POOL_FINALIZER]
            elif has:
                continue
            else:
                finalizers = [*facts.finalizers, api.POOL_FINALIZER]
            if self._finalized.get(name) == facts.resource_version:
                continue  # written over this version: the cache does not show it yet
            self._finalized[name] = facts.resource_version
            self._writers.submit(guard, "AcceleratorPool", self._finalize, facts, finalizers)

    def _finalize(self, facts: ObjectFacts, finalizers: list[str]) -> None:
        try:
            self.kube.set_pool_finalizers(facts.name, finalizers, facts.resource_version)
        except (Conflict, NotFound):
            self._finalized.pop(facts.name, None)  # changed or gone: read again next cycle

    def _update(self, world: World, name: str, status: dict[str, Any], computed: float) -> None:
        """Writes a pool's status computed at `computed` (monotonic) if it differs from what
        the pool shows, and posts an Event for each condition that turned bad (or good)."""
        facts = world.pools[name]
        current = {k: facts.status.get(k) for k in status}
        if current != status:
            # Device counts (and the summary column that shows them) move with every pod, so
            # they are written at most every POOL_DEVICES_EVERY seconds (else a burst would
            # patch every pool each cycle). Anything else (nodes, conditions) at once. The
            # interval is counted between the statuses' computations, not between the
            # writer threads' clocks: a write that waited for a writer thread otherwise
            # counted as newer, and the pool's next statuses, computed POOL_DEVICES_EVERY
            # later, could be dropped as too soon (its counts then stayed stale 5 s longer).
            only_devices = all(current[k] == status[k] for k in status if k not in DEVICE_KEYS)
            last = self._written.get(name, -math.inf)
            if not only_devices or computed - last >= POOL_DEVICES_EVERY:
                self.kube.patch_pool_status(name, status)
                self._written[name] = computed
        old = {c.get("type"): c for c in facts.status.get("conditions") or []}
        for cond in status["conditions"]:
            prev = old.get(cond["type"])
            if prev is not None and prev.get("status") == cond["status"]:
                continue
            bad = (cond["status"] == "True") != (cond["type"] in POSITIVE_CONDITIONS)
            if prev is None and not bad:
                continue  # a healthy first status is not news
            self.events.post(facts, "AcceleratorPool", cond["reason"], cond["message"], bad)
