"""Which workloads a cycle visits: those whose facts changed since their last visit, those
that depend on time or on writes in flight, and every one each FULL_PASS. No I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from tessera.controller.ledger import Ledger, Pass, Unwritten
from tessera.world.caches import WorldCache, by_id, changed
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


@dataclass(frozen=True)
class Looked:
    """What one choice of visits looked at beyond each workload's own facts, so the next can
    tell which workloads' signatures may have changed since (Visits.due)."""

    cache: WorldCache  # the World's cache, and the World's number in it
    serial: int
    nodes_epoch: object
    bursts: tuple[bool, float, float] | tuple[bool]  # Bursts.state
    in_flight: Set[str]  # the ledger's set then (replaced, not changed, when settled)
    # The ledger's unwritten decisions then: a copy (sends change them from other threads;
    # a dict's copy is one C call), held so that no id() in `unwritten_ids` is reused.
    unwritten: dict[str, Unwritten]
    unwritten_ids: dict[int, str]
    due: frozenset[str]  # the workloads chosen: compared with their visit again next time

    @staticmethod
    def at(world: World, seen: Pass, bursts: Bursts) -> Looked:
        """What a choice looks at now; the workloads it chooses are added once chosen."""
        unwritten = dict(seen.unwritten)
        return Looked(
            world.cache,
            world.serial,
            world.nodes_epoch,
            bursts.state,
            seen.in_flight,
            unwritten,
            by_id(unwritten),
            frozenset(),
        )

    def same_beyond_workloads(self, now: Looked) -> bool:
        """Whether what every workload's signature reads beyond its own facts, decision and
        pods is unchanged: the nodes, and (the World one after this, its `changes` known)
        the pools: a pool added, gone, changed or draining rebuilds the World's index."""
        return (
            now.cache is self.cache
            and now.serial == self.serial + 1
            and now.nodes_epoch is self.nodes_epoch
        )


class Visits:
    """When the last full pass was, the workloads a cycle left unvisited (first in line
    next cycle), and what the last choice of visits looked at."""

    def __init__(self) -> None:
        self.full_pass_at = -FULL_PASS
        self.skipped: set[str] = set()
        self.looked: Looked | None = None

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
        first, then by name. A workload not chosen last time whose signature cannot have
        changed since is not due (its visit recorded that signature), so only the others'
        are made again: at 10,000 Workloads, making every one each cycle was a third of a
        burst's cycle over a stub API (bench/cycles.py)."""
        seen = ledger.for_pass()
        signature = signatures(world, at, seen, bursts)
        last, self.looked = self.looked, None  # a choice that fails tells the next nothing
        now = Looked.at(world, seen, bursts)
        keys: Iterable[str] = world.workloads
        changes = world.changes
        if (
            changes is not None
            and last is not None
            and not full
            and last.same_beyond_workloads(now)
        ):
            keys = self._may_have_changed(changes, at, seen, bursts, last, now)
        workloads, visited = world.workloads, seen.visited
        out = []
        for key in keys:
            if key not in workloads:
                continue  # gone
            sig = signature(key)
            if full or sig is None or visited.get(key) != sig:
                out.append((key, sig))
        out.sort(key=lambda item: (item[0] not in self.skipped, item[0]))
        self.looked = dataclasses.replace(now, due=frozenset(key for key, _ in out))
        return out

    @staticmethod
    def _may_have_changed(
        changes: frozenset[str], at: float, seen: Pass, bursts: Bursts, last: Looked, now: Looked
    ) -> set[str]:
        """The workloads whose signature may differ from the one their last visit recorded:
        those chosen last time (visited, left or failed since), those whose facts, decision
        or pods changed (World.changes), and those whose part of the ledger changed. A
        decision's first write comes due with time, the oldest first
        (tessera.world.pacing): while the oldest is not due and the burst's state is the
        same, none came due. Set operations run in C."""
        keys = set(changes)
        keys |= last.due
        keys |= seen.writing.keys() | seen.deferred | seen.refused.keys()
        keys |= now.in_flight ^ last.in_flight
        keys |= changed(last.unwritten_ids, now.unwritten_ids)
        unwritten = now.unwritten
        if unwritten:
            oldest = min(map(itemgetter(1), unwritten.values()))
            if now.bursts != last.bursts or bursts.first_write_due(at, oldest):
                keys |= unwritten.keys()
        return keys
