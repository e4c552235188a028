"""Where each workload of a World is placed: its status says, else this process's own
decision, else its pods (created, and then the operator stopped before it wrote the decision);
and its pods built from an earlier spec. A part of the World (tessera.world.snapshot), kept
apart: it reads only the workloads, the recent decisions, the pods and the cache. Pure."""

from __future__ import annotations

from collections import Counter

from tessera.world.caches import WorldCache
from tessera.world.exclusions import in_force
from tessera.world.facts import ObjectFacts, Placed, PodFacts, placed_of


def _evicted_from(facts: ObjectFacts) -> str | None:
    """The pool a workload was preempted from, while it is not placed again (status.preempted
    is cleared by the next placement)."""
    record = facts.status.get("preempted")
    return str(record.get("pool")) if record and not facts.status.get("pool") else None


class Placements:
    """The World's placements: where each workload is, parsed once per status and cached in
    `_placed` (the World fills it from its WorkloadIndex). World inherits it; the fields are
    the World's."""

    workloads: dict[str, ObjectFacts]
    recent: dict[str, Placed]
    cache: WorldCache
    pods_by_workload: dict[str, tuple[PodFacts, ...]]
    _placed: dict[str, Placed | None]

    def placement_of(self, key: str) -> Placed | None:
        """Where a workload is: its status says, else this process's own decision, else its
        pods (created, and then the operator stopped before it wrote the decision)."""
        if key not in self._placed:
            facts = self.workloads.get(key)
            if facts is None:
                self._placed[key] = self.recent.get(key)
            else:
                placed = self._recorded(key, facts) or self.recent.get(key)
                self._placed[key] = placed or self._placed_by_pods(facts)
        return self._placed[key]

    def placed_on(self, pools: set[str]) -> list[tuple[str, Placed]]:
        """The workloads placed on these pools (as placement_of says), by key."""
        return sorted(
            (key, placed)
            for key, placed in self._placed.items()
            if placed is not None and placed.pool in pools
        )

    def _recorded(self, key: str, facts: ObjectFacts) -> Placed | None:
        """The placement a workload's status records, parsed once per status."""
        hit = self.cache.placed.get(key)
        placed = hit[1] if hit is not None and hit[0] is facts else placed_of(facts.status)
        self.cache.placed[key] = (facts, placed)
        return placed

    def _own_pods(self, facts: ObjectFacts) -> list[PodFacts]:
        """The workload's pods (by owner uid) on pools it was not withdrawn from, nor
        preempted from since it was last placed."""
        pods = self.pods_by_workload.get(facts.key)
        if not pods:
            return []
        excluded = in_force(facts.status.get("excludedPools") or ())
        evicted = _evicted_from(facts)
        return [
            p
            for p in pods
            if p.owner_uid == facts.uid and p.pool not in excluded and p.pool != evicted
        ]

    def _placed_by_pods(self, facts: ObjectFacts) -> Placed | None:
        pods = [
            p
            for p in self._own_pods(facts)
            if p.pool and not p.deleting and p.generation in (None, facts.generation)
        ]
        if not pods:
            return None
        counts = Counter(p.pool or "" for p in pods)
        pool = min(counts, key=lambda name: (-counts[name], name))  # most pods, then by name
        # Bound or only pinned (a gang's pods in a burst wait for all of them to exist).
        nodes = {
            p.replica: p.node or p.pinned
            for p in pods
            if p.pool == pool and (p.node or p.pinned) and p.replica is not None
        }
        return Placed(pool, nodes, None)

    def stale_pods(self, key: str) -> list[PodFacts]:
        """A workload's pods built from an earlier spec while its status records no pool:
        the spec was edited after the pods were created and before the decision was written
        (the CRD freezes the spec only once status.pool is set). They are not its placement:
        they are deleted and the workload is placed again from the spec it has now."""
        facts = self.workloads.get(key)
        if facts is None or facts.status.get("pool"):
            return []
        stale = [
            p
            for p in self._own_pods(facts)
            if p.generation is not None and p.generation != facts.generation
        ]
        evicted = _evicted_from(facts)
        if evicted and key not in self.recent:
            # Evicted, and the operator stopped before deleting them: they go now. (Placed
            # again by this process, they are its new pods, not these.)
            own = self.pods_by_workload.get(key) or ()
            stale += [p for p in own if p.pool == evicted and not p.deleting and not p.terminal]
        return stale
