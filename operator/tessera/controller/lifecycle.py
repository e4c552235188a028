"""The lifecycle phase: a placed workload's pods kept as its decision says (a batch gang made
once, a service's replicas kept running and moved one at a time), its status kept true."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from tessera import api, runtime
from tessera.controller.clock import Clock
from tessera.controller.events import Events
from tessera.controller.fallback import withdraw
from tessera.controller.ledger import Ledger
from tessera.controller.specs import parse_spec
from tessera.controller.writes import Writes
from tessera.errors import ApiError, Conflict, NotFound
from tessera.world.facts import TERMINAL, ObjectFacts, Placed, PodFacts
from tessera.world.pacing import Bursts, CountsWrite, counts_write, fallback_reason
from tessera.world.snapshot import World
from tessera.world.status import lifecycle_status, recovered_status

log = logging.getLogger("tessera.controller")


class Lifecycle:
    """Visits one placed workload: creates what is missing, withdraws a gang that cannot
    run where it is, deletes pods built from a stale spec, writes the status its pods imply."""

    def __init__(
        self, writes: Writes, ledger: Ledger, events: Events, bursts: Bursts, clock: Clock
    ) -> None:
        self.writes, self.ledger, self.events = writes, ledger, events
        self.bursts, self.clock = bursts, clock

    def visit(self, world: World, key: str, now: datetime) -> None:
        facts = world.workloads[key]
        if facts.deleting or facts.status.get("phase") in TERMINAL:
            return
        stale = world.stale_pods(key)
        if stale:
            self._discard(facts, stale)
            return
        ledger = self.ledger
        placed = world.placement_of(key)
        if placed is None or ledger.writing(key):
            return  # not placed, or the cache does not show this process's last write yet
        if key in world.recent and ledger.unwritten(key) is None:
            return  # a decision written, not yet in the cache
        spec = parse_spec(facts, now, self.writes, self.events)
        if spec is None:
            return
        pods = [p for p in world.pods_by_workload.get(key, []) if p.owner_uid == facts.uid]
        current = {p.replica: p for p in pods if p.pool == placed.pool and p.replica is not None}
        old = [p for p in pods if p.pool != placed.pool and not p.terminal and not p.deleting]
        if placed.pool not in world.pool_specs:
            gone = f"pool {placed.pool} was deleted"
            self._withdraw(facts, placed, list(current.values()), gone, now)
            return
        why = None
        if ledger.unwritten(key) is None:  # a decision not yet written is never withdrawn
            known = ledger.refusal(key)
            refusal = (self.clock.monotonic() - known.since, known.message) if known else None
            limit = spec.placement.fallback_after_seconds
            why = fallback_reason(limit, current.values(), now, refusal)
        if why:
            ledger.accept(key)
            self._withdraw(facts, placed, list(current.values()), why, now)
            return
        claim = self.writes.pods(world, facts, spec, placed)
        refused: list[ApiError] = []  # this visit's refusal, if any

        def create(replica: int) -> bool:
            if refused:
                return False  # a refused pod stops the gang's later ones (sent next visit)
            claimed = claim(replica)
            if not claimed:
                return False
            try:
                return claimed[1]()
            except ApiError as err:
                if not err.refusal:
                    raise
                refused.append(err)  # recorded by Writes for the status below
                return False

        ns = facts.namespace or ""
        in_flight = sum(
            ledger.claimed(f"{ns}/{runtime.pod_name(facts.name, placed.pool, r)}")
            for r in range(spec.replicas)
            if r not in current
        )
        created = 0
        phase = facts.status.get("phase")
        if spec.is_service:
            created = self._service(facts, spec, placed, create, current, old)
        elif phase in (None, api.Phase.PENDING.value, api.Phase.PLACED.value):
            created = sum(create(r) for r in range(spec.replicas) if r not in current)
        if not refused and len(current) + created + in_flight >= spec.replicas:
            ledger.accept(key)  # every replica's pod exists, or is on its way
        self._write(world, facts, spec, placed, current, old, created + in_flight, now)

    def _withdraw(
        self, facts: ObjectFacts, placed: Placed, pods: list[PodFacts], why: str, now: datetime
    ) -> None:
        withdraw(facts, placed, pods, why, now, self.writes, self.ledger, self.events)

    def _service(
        self,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        placed: Placed,
        create: Callable[[int], bool],
        current: dict[int, PodFacts],
        old: list[PodFacts],
    ) -> int:
        """Keeps every replica running on the placed pool. While old pods run elsewhere (a
        migration), moves one replica at a time: the new pod Ready before the old is deleted."""
        old_by_replica: dict[int | None, list[PodFacts]] = {}
        for p in old:
            old_by_replica.setdefault(p.replica, []).append(p)
        created = 0
        in_flight = any(
            r in old_by_replica and (p.deleting or not p.ready) for r, p in current.items()
        )
        for replica in range(spec.replicas):
            pod = current.get(replica)
            if pod is not None and (pod.terminal or pod.deleting):
                if pod.terminal and not pod.deleting:
                    self.writes.delete_pod(pod)  # recreated next cycle
                continue
            if pod is None:
                if replica in old_by_replica and in_flight:
                    continue  # one replica at a time
                created += create(replica)
                if replica in old_by_replica:
                    in_flight = True
                continue
            if pod.ready:
                for stale in old_by_replica.get(replica, []):
                    self.writes.delete_pod(stale)
                    message = f"replica {replica} moved from {stale.pool} to {placed.pool}"
                    self.events.post(facts, "Workload", "Migrated", message)
        # Old pods for replicas beyond the desired count have nowhere to go.
        for extra, stale_pods in old_by_replica.items():
            if extra is None or extra >= spec.replicas:
                for stale in stale_pods:
                    self.writes.delete_pod(stale)
        return created

    def _discard(self, facts: ObjectFacts, stale: list[PodFacts]) -> None:
        """Deletes pods built from an earlier spec than the workload's (World.stale_pods) and
        forgets this process's decision for them: the spec was edited between the pods'
        creation and the decision's write, and the pods must not run the old one. The
        workload is placed again, from the spec it has now, once they are gone."""
        for pod in stale:
            if not pod.deleting:
                self.writes.delete_pod(pod)
        self.ledger.forget(facts.key)
        built = ", ".join(sorted({str(p.generation) for p in stale}))
        message = (
            f"spec changed (generation {facts.generation}) before the placement was recorded: "
            f"deleting {len(stale)} pod(s) built from generation {built}; placing again"
        )
        self.events.post(facts, "Workload", "SpecChanged", message)
        log.info("workload %s: %s", facts.key, message)

    def _write(
        self,
        world: World,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        placed: Placed,
        current: Mapping[int, PodFacts],
        old: list[PodFacts],
        created: int,
        now: datetime,
    ) -> None:
        """Writes the lifecycle status the pods imply, only when it changed; the first one
        carries the decision (or, after a restart, the pool the pods are on)."""
        ledger, key = self.ledger, facts.key
        unwritten = ledger.unwritten(key)
        base = unwritten[0] if unwritten else facts.status
        refused = ledger.refusal(key)
        status = lifecycle_status(
            spec, placed.pool, base, facts.generation, current, old, created, now,
            refused.message if refused else None,
        )  # fmt: skip
        at = self.clock.monotonic()
        if unwritten is not None:
            # Nothing to tell but that the pods start or run: the write waits for the pods
            # to run, and in a burst for the burst's end (tessera.world.pacing).
            news = refused is not None or any(p.unschedulable_since for p in current.values())
            if not self.bursts.first_write_due(at, unwritten[1], status["phase"], news):
                return
            status = {**unwritten[0], **status}
        elif facts.status.get("pool") != placed.pool:
            status.update(recovered_status(world.accelerator(placed.pool), placed.pool))
        if {k: facts.status.get(k) for k in status} == status:
            ledger.undefer(key)
            return
        when = counts_write(
            facts.status, status, placed.placed_at, now, ledger.since_written(key, at)
        )
        if when is CountsWrite.LATER:
            ledger.defer(key)  # visited again until written
            return
        ledger.undefer(key)
        if when is CountsWrite.WITH_RUNNING:
            return  # revisited when its pods change, and on every full pass
        try:
            self.writes.status(facts, status)
        except (Conflict, NotFound):
            return
        phase = status["phase"]
        if phase != facts.status.get("phase") and phase in TERMINAL:
            warning = phase == api.Phase.FAILED.value
            self.events.post(facts, "Workload", phase, status["message"], warning=warning)
