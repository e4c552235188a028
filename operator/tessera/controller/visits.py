"""Which workloads a cycle visits: those whose facts changed since their last visit, those
that depend on time or on writes in flight, and every one each FULL_PASS. No I/O."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tessera.controller.ledger import Ledger, Pass
from tessera.world.pacing import Bursts
from tessera.world.snapshot import World

FULL_PASS = 30.0  # seconds between passes over every workload, changed or not (a safety net)
REFUSED_RETRY = 5.0  # seconds between sends of a pod the API server refused (quota, admission)

Signature = tuple[Any, ...] | None


def signatures(world: World, at: float, seen: Pass, bursts: Bursts) -> Callable[[str], Signature]:
    """What visiting a workload depends on, for each workload of this World: None when it
    depends on more (time, other pools' room, pods still in flight), so it is always
    visited. A decision not written yet (a burst's) depends on its pods, whether they are in
    flight, and whether its first write is due: at 10,000 Workloads, visiting each of them
    every cycle to find nothing to do was most of the loop's work. `seen`: the ledger's
    views for this pass. Built once a pass, with what it reads bound, since it runs for
    every workload every cycle."""
    writing, deferred, unwritten_of = seen.writing, seen.deferred, seen.unwritten
    refused_of, in_flight = seen.refused, seen.in_flight
    recent, pools, pods_of, workloads, nodes_epoch = (
        world.recent,
        world.pools,
        world.pods_by_workload,
        world.workloads,
        world.nodes_epoch,
    )
    draining = {name for name, spec in world.pool_specs.items() if spec.draining}
    active, due_at = bursts.active, bursts.first_write_due

    def signature(key: str) -> Signature:
        placed = world.placement_of(key)
        if placed is None or key in writing or key in deferred:
            return None
        unwritten = unwritten_of.get(key)
        if unwritten is None and key in recent:
            return None  # a decision written, not yet in the cache
        if placed.pool in draining:
            return None  # a migration moves one replica a visit
        pool = pools.get(placed.pool)
        pool_spec = pool.spec if pool is not None else None  # the same object while unchanged
        pods = pods_of.get(key, ())
        for pod in pods:
            if pod.unschedulable_since:
                return None  # the fallback deadline moves with time
        refused = refused_of.get(key)
        if refused and at - refused.last >= REFUSED_RETRY:
            return None  # a refused pod is due to be sent again
        inflight = key in in_flight
        if inflight and unwritten is None:
            return None  # our own pods, not yet in the cache
        # A burst's end makes the held first writes due: Running ones at once, the others
        # once QUIET_AFTER_BURST passes with none of the burst's pods seen starting
        # (tessera.world.pacing).
        due = unwritten is not None and (active, due_at(at, unwritten[1]))
        # A node deleted, tainted or cordoned (any: its replicas may be lost) or back.
        on = nodes_epoch
        # The pool's spec, not its resourceVersion: the device counts written to its status
        # every few seconds in a burst made every Workload on it a visit (10,000 at a time).
        return (workloads[key].resource_version, pool_spec, pods, inflight, due, on)

    return signature


class Visits:
    """When the last full pass was, and the workloads a cycle left unvisited (first in line
    next cycle)."""

    def __init__(self) -> None:
        self.full_pass_at = -FULL_PASS
        self.skipped: set[str] = set()

    def full(self, at: float) -> bool:
        """Whether this cycle visits every workload."""
        if at - self.full_pass_at >= FULL_PASS:
            self.full_pass_at = at
            return True
        return False

    def due(
        self, world: World, at: float, full: bool, ledger: Ledger, bursts: Bursts
    ) -> list[tuple[str, Signature]]:
        """The workloads to visit, with their signatures: those left unvisited last cycle
        first, then by name."""
        keys = []
        seen = ledger.for_pass()
        visited = seen.visited
        signature = signatures(world, at, seen, bursts)
        for key in world.workloads:
            sig = signature(key)
            if full or sig is None or visited.get(key) != sig:
                keys.append((key, sig))
        keys.sort(key=lambda item: (item[0] not in self.skipped, item[0]))
        return keys
