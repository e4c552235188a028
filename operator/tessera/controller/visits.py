"""Which workloads a cycle visits: those whose facts changed since their last visit, those
that depend on time or on writes in flight, and every one each FULL_PASS. No I/O."""

from __future__ import annotations

from typing import Any

from tessera.controller.ledger import Ledger
from tessera.world.pacing import Bursts
from tessera.world.snapshot import World

FULL_PASS = 30.0  # seconds between passes over every workload, changed or not (a safety net)
REFUSED_RETRY = 5.0  # seconds between sends of a pod the API server refused (quota, admission)

Signature = tuple[Any, ...] | None


def signature(world: World, key: str, at: float, ledger: Ledger, bursts: Bursts) -> Signature:
    """What visiting a workload depends on; None when it depends on more (time, other pools'
    room, pods still in flight), so it is always visited. A decision not written yet (a
    burst's) depends on its pods, whether they are in flight, and whether its first write
    is due: at 10,000 Workloads, visiting each of them every cycle to find nothing to do was
    most of the loop's work."""
    placed = world.placement_of(key)
    if placed is None or ledger.writing(key) or ledger.deferred(key):
        return None
    unwritten = ledger.unwritten(key)
    if unwritten is None and key in world.recent:
        return None  # a decision written, not yet in the cache
    parsed = world.pool_specs.get(placed.pool)
    if parsed is not None and parsed.draining:
        return None  # a migration moves one replica a visit
    pool = world.pools.get(placed.pool)
    pool_spec = pool.spec if pool is not None else None  # the same object while unchanged
    pods = world.pods_by_workload.get(key, ())
    for pod in pods:
        if pod.unschedulable_since:
            return None  # the fallback deadline moves with time
    refused = ledger.refusal(key)
    if refused and at - refused.last >= REFUSED_RETRY:
        return None  # a refused pod is due to be sent again
    inflight = ledger.pods_in_flight(key)
    if inflight and unwritten is None:
        return None  # our own pods, not yet in the cache
    # A burst's end makes the held first writes due: Running ones at once, the others
    # once the burst has been over for QUIET_AFTER_BURST (tessera.world.pacing).
    due = unwritten is not None and (bursts.active, bursts.first_write_due(at, unwritten[1]))
    # The pool's spec, not its resourceVersion: the device counts written to its status
    # every few seconds in a burst made every Workload on it a visit (10,000 at a time).
    return (world.workloads[key].resource_version, pool_spec, pods, inflight, due)


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
        for key in world.workloads:
            sig = signature(world, key, at, ledger, bursts)
            if full or not ledger.unchanged(key, sig):
                keys.append((key, sig))
        keys.sort(key=lambda item: (item[0] not in self.skipped, item[0]))
        return keys
