"""The placing phase: every workload waiting for a pool, every service leaving a draining one
and every replica lost with its node, planned together over one snapshot; placements' pods
created, decisions recorded."""

from __future__ import annotations

import logging
import math
from collections import Counter
from datetime import datetime

from tessera import api, metrics, placement
from tessera.controller import collector
from tessera.controller.clock import Clock
from tessera.controller.events import Events
from tessera.controller.fallback import moves, record_move
from tessera.controller.ledger import Hold, Ledger
from tessera.controller.preemption import evict
from tessera.controller.repairs import record_repair, repairs
from tessera.controller.specs import parse_spec
from tessera.controller.threads import Workers, drain, guard, guarded
from tessera.controller.writes import Writes
from tessera.errors import Conflict
from tessera.world.facts import ObjectFacts, fingerprint
from tessera.world.pacing import Bursts
from tessera.world.snapshot import World
from tessera.world.status import (
    WAITING_FOR_QUOTA,
    dump,
    placed_from,
    placement_status,
    waiting_status,
)

log = logging.getLogger("tessera.controller")


class Placing:
    """Plans, then acts on each decision: a placement's pods are created first (in a burst,
    on the event loop while the cycles go on), then its status written; a waiting workload's
    status says why it waits. Remembers when each unplaced workload was first seen."""

    def __init__(
        self,
        writes: Writes,
        ledger: Ledger,
        events: Events,
        workers: Workers,
        bursts: Bursts,
        clock: Clock,
        preemptions: Counter[str] | None = None,
    ) -> None:
        self.writes, self.ledger, self.events = writes, ledger, events
        self.workers, self.bursts, self.clock = workers, bursts, clock
        self.pending_since: dict[str, float] = {}  # unplaced workload -> monotonic first seen
        # evictions made for each quota's workloads (read by the quota phase)
        self.preemptions: Counter[str] = Counter() if preemptions is None else preemptions

    def run(self, world: World, now: datetime) -> None:
        self._place(world, now)
        self._release_holds(world, self.clock.monotonic())

    def _release_holds(self, world: World, at: float) -> None:
        """The held decisions (made outside a burst) that joined a burst since are the
        burst's: no Event, written as its decisions are. Those held LONE_HOLD post their
        Placed Event (unless the workload is gone) and are due at once: this cycle's visits
        write them, with what their pods show (Running if they run), unless one did on bad
        news."""
        for key, (decided, facts, message) in self.ledger.holds():
            fate = self.bursts.lone_fate(decided, at)
            if fate is None or not self.ledger.release(key, due=fate):
                continue  # held, or its pods not yet sent
            current = world.workloads.get(key)
            if not fate:
                metrics.EVENTS_SKIPPED.labels("Placed").inc()
            elif current is not None and current.uid == facts.uid:
                self.events.post(facts, "Workload", "Placed", message)

    def _place(self, world: World, now: datetime) -> None:
        def spec_of(facts: ObjectFacts) -> api.WorkloadSpec | None:
            return parse_spec(facts, now, self.writes, self.events)

        def excluded_of(facts: ObjectFacts) -> dict[str, str]:
            return world.excluded(facts, now)

        unplaced = world.waiting()
        at = self.clock.monotonic()
        self.pending_since = {key: self.pending_since.get(key, at) for key in unplaced}
        pending: list[placement.PendingWorkload] = []
        specs: dict[str, api.WorkloadSpec] = {}
        for key, facts in sorted(unplaced.items()):
            spec = spec_of(facts)
            if spec is None:
                continue
            specs[key] = spec
            pending.append(world.pending(facts, spec, now))
        moving = {m.facts.key: m for m in moves(world, self.ledger, spec_of, excluded_of)}
        fixing = {
            r.facts.key: r
            for r in repairs(world, self.ledger, spec_of)
            if r.facts.key not in moving
        }
        if not pending and not moving and not fixing:
            world.cache.forget_node_states()  # kept for placement only
            # A cycle with nothing to place ends a burst only once the last second's cycles
            # placed fewer than BURST_LASTS pods: a burst's first writes wait for its end.
            self.bursts.placed(at, 0)
            return
        with metrics.CYCLE_SECONDS.time():
            everything = [
                *pending,
                *(m.pending for m in moving.values()),
                *(r.pending for r in fixing.values()),
            ]
            with collector.paused():  # a plan leaves no garbage cycles, only live objects
                decisions = placement.plan(
                    everything, world.snapshot(), now, prepared=world.cache.prepared
                )
        del pending, everything  # each decision holds its own, released as it is recorded
        moved = [(moving[k], d) for d in decisions if (k := f"{d.namespace}/{d.name}") in moving]
        fixed = [(fixing[k], d) for d in decisions if (k := f"{d.namespace}/{d.name}") in fixing]
        planned_apart = moving.keys() | fixing.keys()
        decisions = [d for d in decisions if f"{d.namespace}/{d.name}" not in planned_apart]
        # Evictions first: a preemptor's pods go to nodes its victims' devices are freed on.
        for decision in decisions:
            if decision.preemption is not None:
                guard("Workload", self._evict, world, decision, now)
        self._act(world, decisions, specs, now)
        writes, ledger, events = self.writes, self.ledger, self.events
        for move, decision in moved:
            guard("Workload", record_move, move, decision, now, writes, ledger, events)
        for repair, decision in fixed:
            guard("Workload", record_repair, repair, decision, now, writes, ledger, events)

    def _act(
        self,
        world: World,
        decisions: list[placement.Decision],
        specs: dict[str, api.WorkloadSpec],
        now: datetime,
    ) -> None:
        """Records each decision. Decided together over one snapshot; written concurrently
        (each to its own object). A placement's pods go out in its cycle, its decision later
        with its first lifecycle status (`_placed`): no pod waits for a status write. In a
        burst the cycle does not wait for the pods: the event loop creates them while the cycle
        decides the next arrivals. There a placement only builds its pods and queues them,
        CPU work done on this thread: on the writer threads it fought the senders for the
        GIL (over a stub API, 290 us of CPU a pod against 214). The waiting workloads'
        status writes go out after them.

        Takes the decisions out of `decisions` (and their specs out of `specs`) as it records
        them: a backlog of 10,000 is one cycle that sends its pods for over a minute, and
        every decision held to its end (with its spec, its workload as planned and its
        explanation) put the operator's peak RSS at 291 MB against 203 MB for the same
        Workloads arriving in a burst."""
        pods = sum(len(d.nodes) for d in decisions if d.placed)
        at = self.clock.monotonic()
        since = min(
            (self.pending_since.get(f"{d.namespace}/{d.name}", at) for d in decisions if d.placed),
            default=at,
        )
        burst = self.bursts.placed(at, pods, since)
        recorded: list[tuple[str, str]] = []  # (workload, pool) placed

        def record(decision: placement.Decision) -> None:
            facts = world.workloads[f"{decision.namespace}/{decision.name}"]
            spec = specs.pop(facts.key)
            if self.ledger.writing(facts.key):
                # Its last status write is not in the cache yet: it was planned (so its
                # priority holds its room against the rest) but is decided next cycle.
                return
            if decision.placed:
                recorded.append((facts.key, decision.pool or ""))
                self._placed(world, facts, spec, decision, now, burst)
            else:
                self._waiting(facts, spec, decision, now)

        taken = decisions.copy()
        decisions.clear()
        if burst:
            placed = [d for d in taken if d.placed]
            taken = [d for d in taken if not d.placed]
            for decision in drain(placed):
                guard("Workload", record, decision)
        self.workers.each(lambda d: guard("Workload", record, d), drain(taken))
        if burst:
            pools = sorted(Counter(pool for _, pool in recorded).items())
            summary = ", ".join(f"{n} on {pool}" for pool, n in pools)
            log.info("placed %d workloads in one cycle: %s", len(recorded), summary)

    def _placed(
        self,
        world: World,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        decision: placement.Decision,
        now: datetime,
        burst: bool,
    ) -> None:
        """Creates the pods and records the decision's status as not yet written. The write
        waits: the decision goes out with the workload's first lifecycle status, when the pods
        run, one write per placement; outside a burst once LONE_HOLD has passed since the
        decision (ledger.Hold), in a burst later (tessera.world.pacing.first_write_due);
        sooner only on bad news. The pods are the record meanwhile: their names and labels
        say the pool, so a restarted operator reads the placement from them
        (World.placement_of)."""
        message = decision.message or f"placed on {decision.pool}"
        status = placement_status(facts, decision, now, message)
        pool = decision.pool or ""
        placed = placed_from(status)
        objective = "custom" if spec.weights else spec.objective.value
        metrics.PLACEMENTS.labels(pool, objective).inc()
        hold = None
        if burst:  # thousands of routine Events would be a write each, read by no one
            metrics.EVENTS_SKIPPED.labels("Placed").inc()
        else:
            hold = Hold(self.clock.monotonic(), facts, message)
        level = logging.DEBUG if burst else logging.INFO  # a burst is summed up in one line
        log.log(level, "placed %s on %s (score %.1f)", facts.key, pool, decision.score or 0)
        # Every replica is claimed now, so no visit sends it too (Writes.send_all).
        claim = self.writes.pods(world, facts, spec, placed)
        sends = [sending for sending in map(claim, range(spec.replicas)) if sending]
        # Kept even when a send fails (the visit retries it). The first write's clock starts
        # once the pods were sent (infinity until then), not at the decision: in a burst of
        # thousands they wait their turn at the API server first.
        entry = self.ledger.decide(facts, placed, status, math.inf, hold)

        async def deliver() -> None:
            try:
                if await self.writes.send_all(sends):
                    latency = (now - facts.created).total_seconds()
                    metrics.PLACEMENT_LATENCY.observe(max(0.0, latency))
            finally:
                self.ledger.sent(facts.key, entry, self.clock.monotonic())

        if burst:
            self.workers.send(lambda: guarded("Workload", deliver()))
        else:  # this writer waits: a lone workload's pods go out in its cycle
            self.writes.run(deliver())

    def _evict(self, world: World, decision: placement.Decision, now: datetime) -> None:
        evicted = evict(world, decision, now, self.writes, self.ledger, self.events)
        self.preemptions[decision.quota or ""] += len(evicted)

    def _waiting(
        self,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        decision: placement.Decision,
        now: datetime,
    ) -> None:
        """Says why the workload waits, unless its status says so already (every waiting
        workload is planned again each cycle: the check comes before the status is built)."""
        message = decision.message or "waiting for capacity"
        candidates = dump(decision.candidates)
        if (
            facts.status.get("message") == message
            and facts.candidates == fingerprint(candidates)
            and (facts.status.get("candidatesOmitted") or 0) == decision.omitted
            and "reason" in (facts.status.get("summary") or {})
        ):
            return
        status, reason = waiting_status(
            facts,
            message,
            candidates,
            spec.replicas,
            now,
            decision.omitted,
            decision.waiting_for,
            decision.quota,
            decision.for_quota,
        )
        try:
            self.writes.status(facts, status)
        except Conflict:
            return
        feasible = reason in ("WaitingForCapacity", WAITING_FOR_QUOTA)
        self.events.post(facts, "Workload", reason, message, warning=not feasible)
