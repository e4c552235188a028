"""The lifecycle phase: a placed workload's pods kept as its decision says (a batch gang made
once, a service's replicas kept running and moved one at a time), its status kept true."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from tessera import api, runtime
from tessera.controller.clock import Clock
from tessera.controller.events import Events
from tessera.controller.fallback import withdraw
from tessera.controller.ledger import Ledger
from tessera.controller.repairs import lost_replicas
from tessera.controller.restarts import gang_failure, restart, restarts_left
from tessera.controller.rollouts import ROLLING, Hashes, next_to_replace, progress
from tessera.controller.specs import parse_spec
from tessera.controller.threads import guarded
from tessera.controller.writes import Writes
from tessera.errors import ApiError
from tessera.world import exclusions
from tessera.world.facts import TERMINAL, ObjectFacts, Placed, PodFacts
from tessera.world.pacing import Bursts, CountsWrite, counts_write, fallback_reason
from tessera.world.snapshot import World, devices_per_replica
from tessera.world.status import (
    condition,
    lifecycle_status,
    recovered_status,
    settled_message,
)

log = logging.getLogger("tessera.controller")


class Lifecycle:
    """Visits one placed workload: creates what is missing, withdraws a gang that cannot
    run where it is, deletes pods built from a stale spec, writes the status its pods imply."""

    def __init__(
        self, writes: Writes, ledger: Ledger, events: Events, bursts: Bursts, clock: Clock
    ) -> None:
        self.writes, self.ledger, self.events = writes, ledger, events
        self.bursts, self.clock = bursts, clock
        self.hashes = Hashes()
        # This cycle's status writes on the event loop, by workload: a visit does not wait
        # for its write (its thread goes on to the next visit); the cycle waits for them all.
        self._sent: list[tuple[str, concurrent.futures.Future[bool]]] = []

    def written(self) -> list[str]:
        """Waits for the status writes this cycle's visits sent; returns the workloads whose
        write failed (logged and counted, as a failed visit is): to be visited again."""
        sent, self._sent = self._sent, []
        return [key for key, future in sent if not future.result()]

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
            self._orphaned(world, facts, spec, placed, current, old, now)
            return
        lost, doomed = lost_replicas(world, placed, spec, current)
        for pod in doomed:
            # A pod bound to a deleted node has no kubelet to confirm its end: deleted at
            # once (as the pod garbage collector would, later), its name free for the new one.
            self.writes.delete_pod(pod, force=pod.node not in world.nodes)
            if pod.replica is not None:
                current.pop(pod.replica, None)
        why, refused_now = None, False
        unwritten = ledger.unwritten(key)
        if (
            unwritten is not None
            and restarts_left(facts, spec)
            and gang_failure(facts, spec, placed, current, lost)
        ):
            # A pod failed before the decision was written (in a burst, or in a lone
            # decision's hold): the decision goes out first, as placed, and the restart
            # follows from it next visit. Written with the failure, the gang was Failed at
            # once, its backoffLimit unspent.
            self._send(facts, dict(unwritten[0]))
            return
        if unwritten is None:  # a decision not yet written is placed as it is
            ledger.lose(key, placed, lost)
            failure = gang_failure(facts, spec, placed, current, lost)
            if failure and restart(facts, spec, current, failure, now, self.writes, self.events):
                return
            # Past fallbackAfterSeconds a placement is withdrawn; a gang (batch, or a service
            # with nothing Ready) with a pod the API server refused at once: half a gang must
            # not hold its pool (and its pods wait at their rendezvous for peers that never
            # come).
            known = ledger.refusal(key)
            if known and (not spec.is_service or not any(p.ready for p in current.values())):
                why, refused_now = known.message, True
            else:
                refusal = (self.clock.monotonic() - known.since, known.message) if known else None
                limit = spec.placement.fallback_after_seconds
                why = fallback_reason(limit, current.values(), now, refusal)
        if why and self._fall_back(
            world, facts, spec, placed, current, lost, why, now, refused_now
        ):
            return
        if facts.namespace in world.terminating:
            return  # its namespace is being deleted: no new pods, no status (refused)
        claim = self.writes.pods(world, facts, spec, placed)
        refused: list[ApiError] = []  # this visit's refusal, if any

        def create(replica: int) -> bool:
            if refused:
                return False  # a refused pod stops the gang's later ones (sent next visit)
            claimed = claim(replica)
            if not claimed:
                return False
            try:
                return self.writes.run(claimed[1]())
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
            desired = self.hashes.of(facts, spec)
            created = self._service(facts, spec, placed, create, current, old, lost, desired)
        elif phase in (None, api.Phase.PENDING.value, api.Phase.PLACED.value):
            missing = [r for r in range(spec.replicas) if r not in current and r not in lost]
            created = sum(create(r) for r in missing)
        if not refused and len(current) + created + in_flight >= spec.replicas:
            ledger.accept(key)  # every replica's pod exists, or is on its way
        self._write(world, facts, spec, placed, current, old, created + in_flight, now, lost)

    def _fall_back(
        self,
        world: World,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        placed: Placed,
        current: dict[int, PodFacts],
        lost: dict[int, str],
        why: str,
        now: datetime,
        refused: bool = False,
    ) -> bool:
        """Past fallbackAfterSeconds (or at once, `refused`: the API server refused one of its
        pods), a gang is withdrawn whole, its pool excluded until it changes or its backoff
        ends (True; a refusal's backoff starts shorter). A service with Ready replicas keeps
        them: only its pods that cannot bind go (out of `current`, into `lost`), placed again on the
        pool (tessera.controller.repairs); a refused pod is sent again, as before the
        limit, until the API server takes it (False: the visit goes on)."""
        if spec.is_service and any(p.ready for p in current.values()):
            stuck = {
                r: p
                for r, p in current.items()
                if not p.node and not p.deleting and p.unschedulable_since
            }
            for replica, pod in stuck.items():
                self.writes.delete_pod(pod)
                current.pop(replica)
                lost[replica] = f"{why} (on node {placed.assignments.get(replica, '?')})"
            if stuck:
                self.ledger.lose(facts.key, placed, lost)
                self.events.post(facts, "Workload", "ReplicaUnschedulable", why, warning=True)
            return False
        self.ledger.accept(facts.key)
        entries = facts.status.get("excludedPools") or []
        returning = devices_per_replica(facts) * spec.replicas
        seen = world.seen(placed.pool, returning) or (0, 0, 0)
        limit = spec.placement.fallback_after_seconds
        if refused:
            floor = exclusions.REFUSAL_BACKOFF
            excluded = exclusions.exclude(
                entries, placed.pool, why, now, seen, floor, floor, refused=True
            )
        else:
            excluded = exclusions.exclude(entries, placed.pool, why, now, seen, limit)
        pods = list(current.values())
        withdraw(facts, placed, pods, why, now, self.writes, self.ledger, self.events, excluded)
        return True

    def _orphaned(
        self,
        world: World,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        placed: Placed,
        current: dict[int, PodFacts],
        old: list[PodFacts],
        now: datetime,
    ) -> None:
        """A workload placed on a pool that no longer exists (its finalizer was taken off by
        hand, or the pool deleted while no operator ran): its pods run on, as they are. A
        gang that has not started is placed again; a service's missing replicas come back
        once a pool of that name does (the same pool to the workloads that were on it)."""
        gone = f"its pool {placed.pool} was deleted"
        started = facts.status.get("phase") == api.Phase.RUNNING.value
        if not spec.is_service and not started:
            pods = list(current.values())
            why = f"{gone} before the gang started"
            withdraw(facts, placed, pods, why, now, self.writes, self.ledger, self.events)
            return
        lost = {
            r: f"{gone}; replaced once a pool of that name is back"
            for r in range(spec.replicas)
            if r not in current or current[r].deleting or current[r].terminal
        }
        self._write(world, facts, spec, placed, current, old, 0, now, lost)

    def _service(
        self,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        placed: Placed,
        create: Callable[[int], bool],
        current: dict[int, PodFacts],
        old: list[PodFacts],
        lost: Mapping[int, str],
        desired: str,
    ) -> int:
        """Keeps every replica running on the placed pool (but those lost with their node,
        or added by a scale up: placed first, tessera.controller.repairs). While old pods run
        elsewhere (a migration), moves one replica at a time: the new pod Ready before the old
        is deleted. A scale down deletes the highest replicas; a changed template replaces
        one pod at a time (tessera.controller.rollouts)."""
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
                if replica in lost:
                    continue
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
        # Pods of replicas beyond the desired count (a scale down; old pods of a migration)
        # have nowhere to go.
        for extra, stale_pods in old_by_replica.items():
            if extra is None or extra >= spec.replicas:
                for stale in stale_pods:
                    self.writes.delete_pod(stale)
        for replica, pod in sorted(current.items()):
            if replica >= spec.replicas and not pod.deleting:
                self.writes.delete_pod(pod)
        replace = next_to_replace(desired, spec.replicas, current, bool(old), lost)
        if replace is not None and not created:
            self.writes.delete_pod(replace)
            message = (
                f"replica {replace.replica}: replacing pod {replace.name} with one of the new "
                f"template ({desired})"
            )
            self.events.post(facts, "Workload", "RollingOut", message)
        return created

    def _made_from(
        self,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        placed: Placed,
        current: Mapping[int, PodFacts],
        status: dict[str, Any],
        now: datetime,
    ) -> None:
        """What the pods are made from, into `status`: a service's templateHash once every
        pod has the spec's (its rollout's progress until then), and its assignments without
        the replicas a scale down removed; a batch gang's hash, and a TemplateChanged
        condition when its template changed all the same (tessera.controller.rollouts)."""
        desired = self.hashes.of(facts, spec)
        conds: list[dict[str, Any]] = status["conditions"]
        if spec.is_service:
            rolling = progress(desired, spec.replicas, current)
            if rolling is None:
                status["templateHash"] = desired
                if str(status.get("message", "")).startswith(ROLLING):  # the rollout is over
                    placed_cond = next((c for c in conds if c.get("type") == "Placed"), {})
                    status["message"] = placed_cond.get("message") or f"placed on {placed.pool}"
            else:
                ready = next((c for c in conds if c["type"] == "Ready"), {})
                if ready.get("reason") in ("AllReplicasReady", "ReplicasNotReady"):
                    status["message"] = rolling  # a loss or a refusal says more
            if any(r >= spec.replicas for r in placed.assignments):
                status["assignments"] = [
                    {"replica": r, "node": n}
                    for r, n in sorted(placed.assignments.items())
                    if r < spec.replicas
                ]
            return
        made = next(
            (p.template_hash for p in current.values() if p.template_hash and not p.deleting),
            facts.status.get("templateHash"),
        )
        if not made:
            return
        status["templateHash"] = made
        others = [c for c in conds if c.get("type") != "TemplateCurrent"]
        status["conditions"] = others
        if made != desired:
            message = (
                f"spec.template changed while the gang is placed (pods from {made}, spec now "
                f"{desired}): its pods keep what they were made from; delete and recreate the "
                "Workload to run the new template"
            )
            previous = facts.status.get("conditions") or []
            drift = condition("TemplateCurrent", False, "TemplateChanged", message,
                              facts.generation, previous, now)  # fmt: skip
            status["conditions"] = [*others, drift]
            if not any(c.get("type") == "TemplateCurrent" for c in previous):
                self.events.post(facts, "Workload", "TemplateChanged", message, warning=True)

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
        lost: Mapping[int, str] | None = None,
    ) -> None:
        """Writes the lifecycle status the pods imply, only when it changed; the first one
        carries the decision (or, after a restart, the pool the pods are on)."""
        ledger, key = self.ledger, facts.key
        unwritten = ledger.unwritten(key)
        base = unwritten[0] if unwritten else facts.status
        refused = ledger.refusal(key)
        status = lifecycle_status(
            spec, placed.pool, base, facts.generation, current, old, created, now,
            refused.message if refused else None, lost,
        )  # fmt: skip
        draining = placed.pool in world.pool_specs and world.pool_specs[placed.pool].draining
        settled = settled_message(status, placed.pool, draining)
        if settled is not None:
            status["message"] = settled
        status["selector"] = f"{api.WORKLOAD_LABEL}={facts.name}"  # for the scale subresource
        if spec.replicas > 1 and facts.namespace not in world.terminating:
            status["service"] = self.writes.service(facts, spec)
        self._made_from(facts, spec, placed, current, status, now)
        at = self.clock.monotonic()
        if unwritten is not None:
            # Nothing to tell but that the pods start or run: the write waits for the pods
            # to run, in a burst for the burst's end, outside one for its hold to end
            # (tessera.world.pacing).
            news = refused is not None or any(p.unschedulable_since for p in current.values())
            if status["phase"] == api.Phase.RUNNING.value:
                self.bursts.ran(at)  # the burst's pods still come up: the rest are starting
            held = ledger.held(key)
            if not self.bursts.first_write_due(at, unwritten[1], status["phase"], news, held):
                return
            status = {**unwritten[0], **status}
        elif facts.status.get("pool") != placed.pool and placed.pool in world.pool_specs:
            status.update(recovered_status(world.accelerator(placed.pool), placed))
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
        self._send(facts, status)

    def _send(self, facts: ObjectFacts, status: dict[str, Any]) -> None:
        """Sends a status write on the event loop (the cycle waits for it: `written`), and
        says a terminal phase in an Event once it is written."""
        events = self.events

        async def write() -> None:
            if not await self.writes.status_sent(facts, status):
                return  # changed since it was read, or gone: visited again over the cache
            phase = status["phase"]
            if phase != facts.status.get("phase") and phase in TERMINAL:
                warning = phase == api.Phase.FAILED.value
                events.post(facts, "Workload", phase, status["message"], warning=warning)

        self._sent.append((facts.key, self.writes.loop.submit(guarded("Workload", write()))))
