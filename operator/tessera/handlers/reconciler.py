"""The serialized reconcile loop: one cycle over one World copy places pending workloads,
materialises pods, keeps status true, falls back and migrates. I/O only through tessera.k8s."""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from pydantic import ValidationError

from tessera import api, metrics, placement, runtime
from tessera.errors import ApiError, Conflict, NotFound, TesseraError
from tessera.k8s import Kube
from tessera.world import (
    PROGRESS_EVERY,
    TERMINAL,
    CountsWrite,
    ObjectFacts,
    Placed,
    PodFacts,
    RecentPlacements,
    World,
    WorldCache,
    bursting,
    by_id,
    changed,
    condition,
    counts_write,
    fallback_reason,
    fingerprint,
    first_write_due,
    lifecycle_status,
    pool_status,
    settle_claims,
    validation_message,
)

log = logging.getLogger("tessera.reconciler")
T = TypeVar("T")
_DONE = object()  # the end of the items _each hands out

WRITERS = 32  # concurrent API writes within one cycle (the client's pool is sized to match)
# A burst's placements are sent by SENDERS threads of their own while the loop goes on to
# its next cycle, at most SEND_QUEUE placements at a time (beyond that the cycle waits).
SENDERS = 32
SEND_QUEUE = 2 * SENDERS
EVENT_WRITERS = 4  # Events are posted beside the work, never in its critical path
POOL_WRITERS = 4  # pool status patches sent at once
FULL_PASS = 30.0  # seconds between passes over every workload, changed or not (a safety net)
# Workloads are visited for at most this long per cycle; the rest wait for the next cycle,
# which follows at once. A burst's status writes then never hold back its new placements.
VISIT_BUDGET = 1.0
POOL_DEVICES_EVERY = 5.0  # a pool's device counts are rewritten at most this often
# The workload and pool gauges are set at most this often (scrapes come every 15-30 s): each
# setting counts every Workload's phase, and at a cycle every 0.2 s that was 7 % of the
# operator's CPU in a large singles burst (py-spy).
METRICS_EVERY = 1.0
DEVICE_KEYS = frozenset({"devices", "summary"})  # the pool status fields that hold them
REFUSED_RETRY = 5.0  # seconds between sends of a pod the API server refused (quota, admission)
# Normal Events are best effort (as in client-go's recorder): beyond a burst of EVENT_BURST
# they are posted at EVENTS_PER_SECOND, so a burst of placements is not also a burst of
# Events; a placement made in a burst posts none. The status says the same, always.
# Warnings are never held back.
EVENT_BURST = 50
EVENTS_PER_SECOND = 2.0

# Pool conditions where True is good news; for the others (Degraded, NodesOverlap) True is bad.
POSITIVE_CONDITIONS = frozenset({"Ready", "AcceleratorResolved"})


class Refusal(NamedTuple):
    """The API server's last refusal of one of a workload's pods (a quota, an admission
    policy), with when the refusals began and when the last was answered (monotonic)."""

    since: float
    last: float
    message: str


class TokenBucket:
    """Allows `burst` at once, then `rate` per second; thread-safe."""

    def __init__(self, burst: float, rate: float, clock: Callable[[], float] = time.monotonic):
        self.burst, self.rate, self.clock = burst, rate, clock
        self.tokens, self.at = burst, clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self.clock()
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens < 1:
                return False
            self.tokens -= 1
            return True


def _iso(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _prune(d: dict[str, Any], keep: Callable[[str], bool]) -> None:
    """Deletes the keys `keep` refuses, in place: safe while other threads set keys."""
    for key in list(d):
        if not keep(key):
            d.pop(key, None)


def _said_of_live(world: World, key: str) -> bool:
    """Whether an event key (`kind/namespace/name/reason`) is of an object the World has."""
    kind, _, name = key.rpartition("/")[0].partition("/")
    if kind == "Workload":
        return name in world.workloads
    return name.removeprefix("None/") in world.pools


def _dump(models: Any) -> Any:
    return [m.model_dump(by_alias=True, mode="json", exclude_none=True) for m in models]


class Reconciler:
    """Holds what one operator process remembers between cycles (never the source of truth)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.recent: dict[str, tuple[str, Placed]] = {}  # key -> (workload uid, placement)
        # What recent_for last saw: the workloads by id() (their facts held) and the keys of
        # the decisions then.
        self._checked: tuple[dict[int, str], list[ObjectFacts], set[str]] | None = None
        # Decisions whose pods exist but whose status is not written yet: key -> (the
        # decision's status, monotonic time its pods were created, or minus infinity when it
        # is due at once). Written with the first lifecycle status.
        self.unwritten: dict[str, tuple[dict[str, Any], float]] = {}
        self.said: dict[str, str] = {}  # last event message per object, to avoid repeating
        self.heartbeat: float | None = None  # monotonic time the loop last went round
        self.behind = False  # the last cycle left workloads unvisited: run the next at once
        self.bursting = False  # the last cycle that placed was in a burst
        self.burst_ended = -math.inf  # monotonic time the last burst ended
        self.placements = RecentPlacements()  # the pods placed within the burst window
        self.pending_since: dict[str, float] = {}  # unplaced workload -> monotonic first seen
        self.skipped: set[str] = set()  # those workloads, first in line next cycle
        self._known_pools: set[str] = set()  # pools with metric series, to drop deleted ones
        # Pods created but not yet in the cache (namespace/name -> monotonic time, workload
        # key): not created twice; `inflight` holds the workloads they belong to.
        self.created: dict[str, tuple[float, str]] = {}
        self.inflight: set[str] = set()
        # Workloads a pod create of which the API server refused (a quota, an admission
        # policy), with when the refusals began and the last one's answer. Their status says
        # so, the create is retried every REFUSED_RETRY, and a refusal that lasts the
        # placement's fallbackAfterSeconds withdraws the gang from the pool.
        self.refused: dict[str, Refusal] = {}
        # What each workload looked like when last reconciled: unchanged ones are skipped.
        self.seen: dict[str, tuple[Any, ...]] = {}
        self.full_pass_at = 0.0
        self.metrics_at = -math.inf  # monotonic time the gauges were last set
        self.cache = WorldCache()  # membership and accelerator resolution between cycles
        # Workloads whose status this process wrote but the cache does not show yet (key ->
        # the resourceVersion written over): nothing more is written on top of a stale copy.
        self.writing: dict[str, str] = {}
        self.status_written: dict[str, float] = {}  # key -> monotonic time of the last write
        self.deferred: set[str] = set()  # progress-only status changes not yet written
        # pool -> when the status last written to it was computed (monotonic)
        self.pool_written: dict[str, float] = {}
        # The pool statuses last computed, when, and over which pools: recomputed when a pool
        # or its nodes change, else at most every POOL_DEVICES_EVERY (only counts moved).
        self.statuses: dict[str, dict[str, Any]] = {}
        self.statuses_at = 0.0
        self.statuses_of: tuple[tuple[str, str, int, bool], ...] = ()
        self._pool = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="tessera-write")
        self._senders = ThreadPoolExecutor(max_workers=SENDERS, thread_name_prefix="tessera-send")
        self._pool_writers = ThreadPoolExecutor(POOL_WRITERS, thread_name_prefix="tessera-pool")
        self._pool_writes: dict[str, Future[Any]] = {}  # pool -> its status write in flight
        self._send_slots = threading.BoundedSemaphore(SEND_QUEUE)
        self._events = ThreadPoolExecutor(EVENT_WRITERS, thread_name_prefix="tessera-event")
        self._event_budget = TokenBucket(EVENT_BURST, EVENTS_PER_SECOND)

    # --- one cycle ------------------------------------------------------------------------

    def recent_for(self, workloads: dict[str, ObjectFacts]) -> dict[str, Placed]:
        """Decisions this process made that the cache may not show yet, for the next World.
        A decision is forgotten once the cache shows it (or the workload is gone). Only the
        decisions made since the last call, and those whose workload's facts changed, are
        looked at: in a burst the decisions are written at its end, and going over all
        10,000 each cycle took 11 ms of it."""
        ids = by_id(workloads)
        last, self._checked = self._checked, (ids, list(workloads.values()), set(self.recent))
        if last is None:
            keys: Iterable[str] = list(self.recent)
        else:
            keys = (changed(last[0], ids) & self.recent.keys()) | (self.recent.keys() - last[2])
        for key in keys:
            uid, placed = self.recent[key]
            facts = workloads.get(key)
            if facts is None or facts.uid != uid or facts.status.get("pool") == placed.pool:
                del self.recent[key]
        return {k: p for k, (_, p) in self.recent.items()}

    def cycle(self, world: World, now: datetime) -> None:
        """One pass over one World (built with `recent_for`): placement, pools, workloads."""
        started = time.monotonic()
        # Pruned in place, over a copy of the keys: a burst's senders (FailedCreate Events,
        # a refusal, a first write's clock) write to these while the cycle runs.
        _prune(self.said, functools.partial(_said_of_live, world))
        _prune(self.unwritten, lambda k: k in self.recent)
        # Status writes the cache now shows are no longer in flight: before placement, so a
        # workload whose waiting status was written in the last cycle is placed in this one
        # (left in flight, it was decided a cycle later, outside its burst).
        self.writing = {
            k: rv
            for k, rv in self.writing.items()
            if k in world.workloads and world.workloads[k].resource_version == rv
        }
        # Placement first: pending workloads wait for no other write. Then the pools' status
        # (sent on threads of their own: this cycle and the next wait for none of it), then
        # the placed workloads.
        self._guard("Workload", self._place, world, now)
        self._write_pools(world, self._pool_statuses(world, now))
        placed = time.monotonic()
        # Workloads are independent of each other once placement is decided: materialise
        # them concurrently, so a burst is bounded by the API server, not by round trips.
        # Only workloads whose facts changed since they were last reconciled are visited,
        # plus every workload each FULL_PASS seconds: a cycle costs what changed.
        # The World was copied just before the cycle started: its pods are what the watch
        # showed then, so a claim's age counts to then (settle_claims).
        visible = {  # of the workloads with pods in flight: not a set of every pod a cycle
            p.key
            for w in {w for _, w in list(self.created.values())}
            for p in world.pods_by_workload.get(w, ())
        }
        for name, age in settle_claims(self.created, visible, started):
            log.info("pod %s not seen %.0fs after it was sent; sending it again", name, age)
        clock = time.monotonic()
        self.inflight = {w for _, w in list(self.created.values())}
        full = clock - self.full_pass_at >= FULL_PASS
        if full:
            self.full_pass_at = clock
        if full or len(self.seen) > len(world.workloads):  # deleted workloads' go
            self.seen = {k: v for k, v in self.seen.items() if k in world.workloads}
        self.status_written = {
            k: t for k, t in self.status_written.items() if clock - t < PROGRESS_EVERY
        }
        self.deferred &= world.workloads.keys()
        _prune(self.refused, lambda k: k in world.workloads)
        keys = []
        for key in world.workloads:
            signature = self._signature(world, key, clock)
            if full or signature is None or self.seen.get(key) != signature:
                keys.append((key, signature))
        # Those left unvisited last cycle first, then by name (the few chosen, not all).
        keys.sort(key=lambda item: (item[0] not in self.skipped, item[0]))

        def reconcile(item: tuple[str, tuple[Any, ...] | None]) -> None:
            key, signature = item
            self.seen.pop(key, None)
            if self._guard("Workload", self._reconcile_workload, world, key, now) and signature:
                self.seen[key] = signature

        left = self._each(reconcile, keys, time.monotonic() + VISIT_BUDGET)
        skipped = [key for key, _ in left]  # not seen: visited next cycle
        self.behind, self.skipped = bool(skipped), set(skipped)
        if time.monotonic() - self.metrics_at >= METRICS_EVERY:
            self.metrics_at = time.monotonic()
            self._metrics(world, self.statuses, now)
        log.debug(
            "cycle: %d workloads (%d visited, %d left), %d pools, %d nodes; pools and placement "
            "%.2fs, workloads %.2fs",
            len(world.workloads), len(keys) - len(skipped), len(skipped), len(world.pools),
            len(world.nodes), placed - started,
            time.monotonic() - placed,
        )  # fmt: skip

    def _each(
        self,
        fn: Callable[[T], object],
        items: Iterable[T],
        deadline: float = float("inf"),
    ) -> list[T]:
        """Runs fn over items on the WRITERS writers, each taking the next item until none
        is left or the deadline passes; returns the items not started. One task per
        writer, not per item: at 10,000 Workloads, submitting a future per item was nearly
        half of the loop's time (py-spy)."""
        pending = iter(items)
        lock = threading.Lock()

        def work() -> None:
            while time.monotonic() <= deadline:
                with lock:
                    item = next(pending, _DONE)
                if item is _DONE:
                    return
                fn(item)  # type: ignore[arg-type]

        for future in [self._pool.submit(work) for _ in range(WRITERS)]:
            future.result()
        return list(pending)

    def _signature(self, world: World, key: str, clock: float) -> tuple[Any, ...] | None:
        """What reconciling a workload depends on; None when it depends on more (time, other
        pools' room, pods still in flight), so it is always visited. A decision not written
        yet (a burst's) depends on its pods, whether they are in flight, and whether its
        first write is due: at 10,000 Workloads, visiting each of them every cycle to find
        nothing to do was most of the loop's work."""
        placed = world.placement_of(key)
        if placed is None or key in self.writing or key in self.deferred:
            return None
        unwritten = self.unwritten.get(key)
        if unwritten is None and key in world.recent:
            return None  # a decision written, not yet in the cache
        pool = world.pools.get(placed.pool)
        spec = pool.spec if pool is not None else None
        if spec is not None and spec.get("draining"):
            return None  # a migration waits for room elsewhere
        pods = world.pods_by_workload.get(key, ())
        for pod in pods:
            if pod.unschedulable_since:
                return None  # the fallback deadline moves with time
        refused = self.refused.get(key)
        if refused and clock - refused.last >= REFUSED_RETRY:
            return None  # a refused pod is due to be sent again
        inflight = key in self.inflight
        if inflight and unwritten is None:
            return None  # our own pods, not yet in the cache
        # A burst's end makes the held first writes due: Running ones at once, the others
        # once the burst has been over for QUIET_AFTER_BURST (tessera.world.first_write_due).
        due = unwritten is not None and (
            self.bursting,
            first_write_due(clock - unwritten[1], self.bursting, quiet=clock - self.burst_ended),
        )
        # The pool's spec, not its resourceVersion: the device counts written to its status
        # every few seconds in a burst made every Workload on it a visit (10,000 at a time).
        return (world.workloads[key].resource_version, spec, pods, inflight, due)

    def _first_write_due(
        self, sent: float, phase: str = api.Phase.PLACED.value, news: bool = False
    ) -> bool:
        """Whether an unwritten decision whose pods were sent at monotonic `sent` is due."""
        now = time.monotonic()
        return first_write_due(now - sent, self.bursting, phase, news, now - self.burst_ended)

    def _burst(self, burst: bool) -> bool:
        """Keeps whether placement is in a burst, and when the last one ended."""
        if self.bursting and not burst:
            self.burst_ended = time.monotonic()
        self.bursting = burst
        return burst

    def _guard(self, kind: str, fn: Any, *args: Any) -> bool:
        """One object's failure is logged and counted, never stops the loop; False on failure."""
        try:
            fn(*args)
        except TesseraError as err:
            metrics.RECONCILE_ERRORS.labels(kind).inc()
            log.warning("reconciling %s failed: %s", kind, err)
        except Exception:
            metrics.RECONCILE_ERRORS.labels(kind).inc()
            log.exception("reconciling %s failed unexpectedly", kind)
        else:
            return True
        return False

    def _event(
        self, obj: ObjectFacts, kind: str, reason: str, message: str, warning: bool = False
    ) -> None:
        key = f"{kind}/{obj.namespace}/{obj.name}/{reason}"
        if self.said.get(key) == message:
            return
        self.said[key] = message
        if not warning and not self._event_budget.take():
            metrics.EVENTS_SKIPPED.labels(reason).inc()
            return

        def post() -> None:
            try:
                self.kube.post_event(obj.reference, kind, reason, message, warning)
            except TesseraError as err:
                log.warning("could not post event %s on %s: %s", reason, obj.name, err)

        self._events.submit(post)

    def _patch_status(self, facts: ObjectFacts, status: dict[str, Any], guard: bool = True) -> None:
        """Merge-patches a Workload's status (guarded: only over the resourceVersion read) and
        remembers it is in flight until the cache shows it."""
        ns = facts.namespace or ""
        rv = facts.resource_version if guard else None
        self.kube.patch_workload_status(ns, facts.name, status, rv)
        self.writing[facts.key] = facts.resource_version
        self.status_written[facts.key] = time.monotonic()

    # --- pools ----------------------------------------------------------------------------

    def _pool_statuses(self, world: World, now: datetime) -> dict[str, dict[str, Any]]:
        """Every pool's status, or {} when nothing but device counts can have moved since
        the last ones were computed (less than POOL_DEVICES_EVERY ago): in a burst this
        arithmetic over every node was a third of the operator's CPU. A pool changes with its
        spec (generation) or its deletion, not with its resourceVersion: that moves with the
        operator's own status writes too, which land a few at a time. Over 20 pools and
        5,000 nodes (33 ms each time) a singles burst computed them 138 times keyed on
        resourceVersions, 64 times keyed so. A status someone else wrote is put right
        within POOL_DEVICES_EVERY."""
        pools = tuple(
            (name, facts.uid, facts.generation, facts.deleting)
            for name, facts in sorted(world.pools.items())
        )
        clock = time.monotonic()
        fresh = pools == self.statuses_of and not world.rebuilt
        if fresh and clock - self.statuses_at < POOL_DEVICES_EVERY:
            return {}
        self.statuses = {name: pool_status(world, name, now) for name, *_ in pools}
        self.statuses_at, self.statuses_of = clock, pools
        return self.statuses

    def _write_pools(self, world: World, statuses: Mapping[str, dict[str, Any]]) -> None:
        """Hands the pools' statuses to POOL_WRITERS threads of their own and returns: in a
        burst, waiting for them held the cycle (and every Workload arriving meanwhile) 0.2-0.4
        s each POOL_DEVICES_EVERY over 8 pools, longer over 20. POOL_WRITERS at a time: each
        request in flight opens a connection that stays open, and 20 at once cost an idle
        operator over 5,000 nodes 1.4-2.5 MB. A pool whose last write is still in flight is
        left out: its status goes out with the next statuses computed, within
        POOL_DEVICES_EVERY (`_pool_statuses`)."""
        self._pool_writes = {n: f for n, f in self._pool_writes.items() if not f.done()}
        computed = self.statuses_at
        for name, status in statuses.items():
            if name not in self._pool_writes:
                self._pool_writes[name] = self._pool_writers.submit(
                    self._guard, "AcceleratorPool", self._update_pool, world, name, status,
                    computed,
                )  # fmt: skip

    def _update_pool(
        self, world: World, name: str, status: dict[str, Any], computed: float
    ) -> None:
        """Writes a pool's status computed at `computed` (monotonic) if it differs from what
        the pool shows."""
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
            last = self.pool_written.get(name, -math.inf)
            if not only_devices or computed - last >= POOL_DEVICES_EVERY:
                self.kube.patch_pool_status(name, status)
                self.pool_written[name] = computed
        old = {c.get("type"): c for c in facts.status.get("conditions") or []}
        for cond in status["conditions"]:
            prev = old.get(cond["type"])
            if prev is not None and prev.get("status") == cond["status"]:
                continue
            bad = (cond["status"] == "True") != (cond["type"] in POSITIVE_CONDITIONS)
            if prev is None and not bad:
                continue  # a healthy first status is not news
            self._event(facts, "AcceleratorPool", cond["reason"], cond["message"], warning=bad)

    # --- placement ------------------------------------------------------------------------

    def _spec(self, facts: ObjectFacts, now: datetime) -> api.WorkloadSpec | None:
        """The parsed spec, or None after saying in status and an event which field is wrong."""
        try:
            return api.WorkloadSpec.model_validate(facts.spec)
        except ValidationError as err:
            message = validation_message(err)
            conds = facts.status.get("conditions") or []
            cond = condition("Ready", False, "InvalidSpec", message, facts.generation, conds, now)
            if facts.status.get("message") != message:
                status = {
                    "message": message,
                    "conditions": [cond],
                    "observedGeneration": facts.generation,
                }
                self._patch_status(facts, status, guard=False)
                self._event(facts, "Workload", "InvalidSpec", message, warning=True)
            return None

    def _place(self, world: World, now: datetime) -> None:
        pending: list[placement.PendingWorkload] = []
        unplaced = {
            key: world.workloads[key]
            for key in world.unplaced
            if not world.stale_pods(key)  # placed again once they are gone (same names)
        }
        clock = time.monotonic()
        self.pending_since = {key: self.pending_since.get(key, clock) for key in unplaced}
        for _, facts in sorted(unplaced.items()):
            spec = self._spec(facts, now)
            if spec is None:
                continue
            excluded = tuple(e.get("pool", "") for e in facts.status.get("excludedPools") or [])
            pending.append(
                placement.PendingWorkload(
                    namespace=facts.namespace or "",
                    name=facts.name,
                    spec=spec,
                    created_at=facts.created,
                    excluded_pools=excluded,
                )
            )
        if not pending:
            self.cache.forget_node_states()  # kept for placement only
            # A cycle with nothing to place ends a burst only once the last second's cycles
            # placed fewer than BURST_LASTS pods: a burst's first writes wait for its end.
            before = self.placements.place(clock, 0)
            self._burst(bursting(self.bursting, 0, before, self.placements.span(clock)))
            return
        with metrics.CYCLE_SECONDS.time():
            decisions = placement.plan(pending, world.snapshot(), now)
        specs = {(p.namespace, p.name): p.spec for p in pending}
        pods = sum(len(d.nodes) for d in decisions if d.placed)
        clock = time.monotonic()
        since = min(
            (
                self.pending_since.get(f"{d.namespace}/{d.name}", clock)
                for d in decisions
                if d.placed
            ),
            default=clock,
        )
        before = self.placements.place(clock, pods, since)
        burst = self._burst(bursting(self.bursting, pods, before, self.placements.span(clock)))
        recorded: list[tuple[str, str]] = []  # (workload, pool) placed (from the writers)

        def record(decision: placement.Decision) -> None:
            facts = world.workloads[f"{decision.namespace}/{decision.name}"]
            if facts.key in self.writing:
                # Its last status write is not in the cache yet: it was planned (so its
                # priority holds its room against the rest) but is decided next cycle.
                return
            if decision.placed:
                spec = specs[(decision.namespace, decision.name)]
                recorded.append((facts.key, decision.pool or ""))
                self._record_placement(world, facts, spec, decision, now, burst)
            else:
                self._record_waiting(facts, decision, now)

        # Decided together over one snapshot; written concurrently (each to its own object).
        # Every placement's pods go out first, then (outside a burst) the decisions: no pod
        # waits for another workload's status write. In a burst the cycle does not wait for
        # the pods: the senders create them while the loop decides the next arrivals. There
        # a placement only builds its pods and queues them, CPU work done on this thread:
        # on the WRITERS threads it fought the senders for the GIL: over a stub API, a
        # 10,000-Workload backlog's cycle took 290 us of CPU a pod against 214 (bench/README.md,
        # the twenty-sixth round). The waiting workloads' status writes go out after them.
        if burst:
            for decision in decisions:
                if decision.placed:
                    self._guard("Workload", record, decision)
            decisions = [d for d in decisions if not d.placed]
        self._each(lambda d: self._guard("Workload", record, d), decisions)
        if not burst:
            keys = [key for key, _ in recorded]
            self._each(lambda k: self._guard("Workload", self._write_decision, world, k), keys)
        else:
            pools = sorted(Counter(pool for _, pool in recorded).items())
            summary = ", ".join(f"{n} on {pool}" for pool, n in pools)
            log.info("placed %d workloads in one cycle: %s", len(recorded), summary)

    def _placement_status(
        self, facts: ObjectFacts, decision: placement.Decision, now: datetime, message: str
    ) -> dict[str, Any]:
        conds = facts.status.get("conditions") or []
        gen = facts.generation
        return {
            "phase": api.Phase.PLACED.value,
            "pool": decision.pool,
            "accelerator": decision.accelerator,
            "vendor": decision.vendor.value if decision.vendor else None,
            "score": decision.score,
            "assignments": _dump(decision.assignments),
            "candidates": _dump(decision.candidates),
            "message": message,
            "placedAt": _iso(now),
            "observedGeneration": gen,
            "conditions": [
                condition("Placed", True, "Placed", message, gen, conds, now),
                condition(
                    "Ready", False, "PodsStarting", "pods are being created", gen, conds, now
                ),
            ],
        }

    def _record_placement(
        self,
        world: World,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        decision: placement.Decision,
        now: datetime,
        burst: bool,
    ) -> None:
        """Creates the pods and keeps the decision's status as not yet written. Outside a
        burst it is due at once: written once every placement's pods are sent. In a burst the
        write waits: the decision goes out with the workload's first lifecycle status, when
        the pods run (or later: tessera.world.first_write_due), one write per placement.
        The pods are the record meanwhile: their names and labels say the pool, so a
        restarted operator reads the placement from them (World.placement_of)."""
        message = decision.message or f"placed on {decision.pool}"
        status = self._placement_status(facts, decision, now, message)
        pool = decision.pool or ""
        ns = facts.namespace or ""
        if not burst:
            status.update(
                lifecycle_status(spec, pool, status, facts.generation, {}, [], spec.replicas, now)
            )
        assignments = {a.replica: a.node for a in decision.assignments}
        placed = Placed(pool, assignments, now)
        self.recent[facts.key] = (facts.uid, placed)
        objective = (
            "custom" if facts.spec.get("weights") else str(facts.spec.get("objective", "balanced"))
        )
        metrics.PLACEMENTS.labels(decision.pool, objective).inc()
        if burst:  # thousands of routine Events would be a write each, read by no one
            metrics.EVENTS_SKIPPED.labels("Placed").inc()
        else:
            self._event(facts, "Workload", "Placed", message)
        level = logging.DEBUG if burst else logging.INFO  # a burst is summed up in one line
        log.log(level, "placed %s/%s on %s (score %.1f)", ns, facts.name, pool, decision.score or 0)
        # Every replica is claimed now, so no visit sends it too; a refused pod (admission,
        # quota) gives the later ones back unsent, so the visit sends them at once instead
        # of taking them for in flight until CREATED_GRACE.
        sends = [sending for sending in map(self._creator(world, facts, spec, placed),
                                            range(spec.replicas)) if sending]  # fmt: skip
        # Kept even when a send fails (the visit retries it). In a burst the first write's
        # clock starts once the pods were sent (infinity until then), not at the decision:
        # in a burst of thousands they wait their turn at the API server first. Outside a
        # burst it is minus infinity: due at once, whatever the next cycles are
        # (tessera.world.bursting decides).
        entry = (status, math.inf if burst else -math.inf)
        self.unwritten[facts.key] = entry

        def deliver() -> None:
            try:
                created = True
                for i, (_, send) in enumerate(sends):
                    try:
                        created = send() and created
                    except Exception:
                        for key, _ in sends[i + 1 :]:
                            self.created.pop(key, None)
                        raise
                if created:
                    metrics.PLACEMENT_LATENCY.observe(
                        max(0.0, (now - facts.created).total_seconds())
                    )
            finally:
                if burst and self.unwritten.get(facts.key) is entry:
                    self.unwritten[facts.key] = (status, time.monotonic())

        if not burst:
            deliver()  # in this writer: the decision is written once every pod is sent
            return

        def queued() -> None:
            try:
                self._guard("Workload", deliver)
            finally:
                self._send_slots.release()

        self._send_slots.acquire()  # a full queue holds the cycle back, not the API server
        self._senders.submit(queued)

    def _write_decision(self, world: World, key: str) -> None:
        """Writes a decision made outside a burst (guarded by resourceVersion). If it cannot
        be written now (the workload changed since it was read), a visit writes it with the
        first lifecycle status, as in a burst: its pods exist already."""
        facts, unwritten = world.workloads[key], self.unwritten.get(key)
        if unwritten is None:
            return  # the placement failed before its pods were sent (logged)
        try:
            self._patch_status(facts, unwritten[0])
        except Conflict:
            return
        self.unwritten.pop(key, None)

    def _creator(
        self, world: World, facts: ObjectFacts, spec: api.WorkloadSpec, placed: Placed
    ) -> Callable[[int], tuple[str, Callable[[], bool]] | None]:
        """Claims one replica's pod on the placed pool and returns its key and the request
        that creates it; None when it exists or is claimed already (on its way, not yet in
        the cache). A claim is made before its request is sent, so no pod is sent twice."""
        pool_spec = world.pool_specs[placed.pool]
        ns = facts.namespace or ""

        @functools.cache
        def parts() -> tuple[api.Workload, Any]:
            # Built on the first claim only: most visits find every pod there or claimed.
            meta = {
                "name": facts.name,
                "namespace": facts.namespace,
                "generation": facts.generation,
            }
            workload = api.Workload(metadata=meta, spec=spec)
            return workload, world.accelerator(placed.pool).to_api()

        def claim(replica: int) -> tuple[str, Callable[[], bool]] | None:
            key = f"{ns}/{runtime.pod_name(facts.name, placed.pool, replica)}"
            if key in self.created:
                return None
            self.created[key] = (time.monotonic(), facts.key)
            node = placed.assignments.get(replica)
            workload, accelerator = parts()
            pod = runtime.build_pod(
                workload, facts.uid, placed.pool, pool_spec, accelerator, replica, node
            )

            def send() -> bool:
                # CREATED_GRACE counts from the send, not the claim: a burst's claim may wait
                # in the senders' queue first. Counted from the claim, a large gang burst
                # sent 49 pods a second time (answered 409), most likely for that reason.
                self.created[key] = (time.monotonic(), facts.key)
                try:
                    return self._create(facts, pod)
                except Exception:
                    self.created.pop(key, None)  # not created: the next cycle tries again
                    raise

            return key, send

        return claim

    def _record_waiting(
        self, facts: ObjectFacts, decision: placement.Decision, now: datetime
    ) -> None:
        message = decision.message or "waiting for capacity"
        candidates = _dump(decision.candidates)
        if facts.status.get("message") == message and facts.candidates == fingerprint(candidates):
            return
        conds = facts.status.get("conditions") or []
        gen = facts.generation
        feasible = any(c.feasible for c in decision.candidates)
        reason = "WaitingForCapacity" if feasible else "NoFeasiblePool"
        status = {
            "phase": api.Phase.PENDING.value,
            "candidates": candidates,
            "message": message,
            "observedGeneration": gen,
            "summary": {"ready": f"0/{facts.spec.get('replicas', 1)}"},
            "conditions": [
                condition("Placed", False, reason, message, gen, conds, now),
                condition("Ready", False, "NotPlaced", message, gen, conds, now),
            ],
        }
        try:
            self._patch_status(facts, status)
        except Conflict:
            return
        self._event(facts, "Workload", reason, message, warning=not feasible)

    # --- materialisation and lifecycle ------------------------------------------------------

    def _reconcile_workload(self, world: World, key: str, now: datetime) -> None:
        facts = world.workloads[key]
        if facts.deleting or facts.status.get("phase") in TERMINAL:
            return
        stale = world.stale_pods(key)
        if stale:
            self._discard(facts, stale)
            return
        placed = world.placement_of(key)
        if placed is None or key in self.writing:
            return  # not placed, or the cache does not show this process's last write yet
        if key in world.recent and key not in self.unwritten:
            return  # a decision written, not yet in the cache
        spec = self._spec(facts, now)
        if spec is None:
            return
        pods = [p for p in world.pods_by_workload.get(key, []) if p.owner_uid == facts.uid]
        current = {p.replica: p for p in pods if p.pool == placed.pool and p.replica is not None}
        old = [p for p in pods if p.pool != placed.pool and not p.terminal and not p.deleting]
        if placed.pool not in world.pool_specs:
            self._withdraw(
                facts, placed, list(current.values()), f"pool {placed.pool} was deleted", now
            )
            return
        why = None
        if key not in self.unwritten:  # a decision not yet written is never withdrawn
            known = self.refused.get(key)
            refusal = (time.monotonic() - known.since, known.message) if known else None
            limit = spec.placement.fallback_after_seconds
            why = fallback_reason(limit, current.values(), now, refusal)
        if why:
            self.refused.pop(key, None)
            self._withdraw(facts, placed, list(current.values()), why, now)
            return
        pool_spec = world.pool_specs[placed.pool]
        phase = facts.status.get("phase")
        claim = self._creator(world, facts, spec, placed)
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
                refused.append(err)  # remembered by _create for the status below
                return False

        ns = facts.namespace or ""
        in_flight = sum(
            f"{ns}/{runtime.pod_name(facts.name, placed.pool, r)}" in self.created
            for r in range(spec.replicas)
            if r not in current
        )
        created = 0
        if spec.is_service:
            created = self._reconcile_service(facts, spec, placed, create, current, old)
        elif phase in (None, api.Phase.PENDING.value, api.Phase.PLACED.value):
            created = sum(create(r) for r in range(spec.replicas) if r not in current)
        if not refused and len(current) + created + in_flight >= spec.replicas:
            self.refused.pop(key, None)  # every replica's pod exists, or is on its way
        self._write_lifecycle(world, facts, spec, placed, current, old, created + in_flight, now)
        if spec.is_service and pool_spec.draining and not old and self._all_ready(current, spec):
            self._migrate(world, facts, spec, placed, now)

    def _create(self, facts: ObjectFacts, pod: dict[str, Any]) -> bool:
        """Creates one pod. A refusal (a 4xx: quota, admission) is remembered for the
        workload's status and becomes a Warning event, so the user sees it with `kubectl
        get -o wide` and `kubectl describe`; the pod is sent again every REFUSED_RETRY."""
        try:
            return self.kube.create_pod(pod)
        except ApiError as err:
            name = pod["metadata"]["name"]
            message = f"pod {name} {'refused' if err.refusal else 'failed'}: {err.message}"
            if err.refusal:
                clock = time.monotonic()
                known = self.refused.get(facts.key)
                self.refused[facts.key] = Refusal(known.since if known else clock, clock, message)
            self._event(facts, "Workload", "FailedCreate", message, True)
            raise

    def _all_ready(self, current: Mapping[int, PodFacts], spec: api.WorkloadSpec) -> bool:
        return sum(1 for p in current.values() if p.ready and not p.deleting) == spec.replicas

    def _reconcile_service(
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
                    self.kube.delete_pod(pod.namespace, pod.name, pod.uid)  # recreated next cycle
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
                    self.kube.delete_pod(stale.namespace, stale.name, stale.uid)
                    self._event(
                        facts,
                        "Workload",
                        "Migrated",
                        f"replica {replica} moved from {stale.pool} to {placed.pool}",
                    )
        # Old pods for replicas beyond the desired count have nowhere to go.
        for extra, stale_pods in old_by_replica.items():
            if extra is None or extra >= spec.replicas:
                for stale in stale_pods:
                    self.kube.delete_pod(stale.namespace, stale.name, stale.uid)
        return created

    def _discard(self, facts: ObjectFacts, stale: list[PodFacts]) -> None:
        """Deletes pods built from an earlier spec than the workload's (World.stale_pods) and
        forgets this process's decision for them: the spec was edited between the pods'
        creation and the decision's write, and the pods must not run the old one. The
        workload is placed again, from the spec it has now, once they are gone."""
        ns = facts.namespace or ""
        for pod in stale:
            if not pod.deleting:
                self.kube.delete_pod(ns, pod.name, pod.uid)
        self.recent.pop(facts.key, None)
        self.unwritten.pop(facts.key, None)
        built = ", ".join(sorted({str(p.generation) for p in stale}))
        message = (
            f"spec changed (generation {facts.generation}) before the placement was recorded: "
            f"deleting {len(stale)} pod(s) built from generation {built}; placing again"
        )
        self._event(facts, "Workload", "SpecChanged", message)
        log.info("workload %s/%s: %s", ns, facts.name, message)

    def _withdraw(
        self, facts: ObjectFacts, placed: Placed, pods: list[PodFacts], why: str, now: datetime
    ) -> None:
        """Deletes the gang's pods on the pool and re-queues the workload without that pool."""
        ns = facts.namespace or ""
        for pod in pods:
            if not pod.terminal:
                self.kube.delete_pod(ns, pod.name, pod.uid)
        excluded = list(facts.status.get("excludedPools") or [])
        if placed.pool not in {e.get("pool") for e in excluded}:
            excluded.append({"pool": placed.pool, "reason": why[:1000]})
        conds = facts.status.get("conditions") or []
        gen = facts.generation
        message = f"withdrawn from {placed.pool}: {why}"
        status = {
            "phase": api.Phase.PENDING.value,
            "pool": None,
            "accelerator": None,
            "vendor": None,
            "score": None,
            "assignments": [],
            "placedAt": None,
            "excludedPools": excluded,
            "message": message,
            "observedGeneration": gen,
            "conditions": [
                condition("Placed", False, "FallbackTriggered", message, gen, conds, now),
                condition("Ready", False, "NotPlaced", message, gen, conds, now),
            ],
        }
        self._patch_status(facts, status, guard=False)
        self.recent.pop(f"{ns}/{facts.name}", None)
        metrics.FALLBACKS.labels(placed.pool).inc()
        self._event(facts, "Workload", "FallbackTriggered", message, warning=True)
        log.warning("workload %s/%s %s", ns, facts.name, message)

    def _migrate(
        self,
        world: World,
        facts: ObjectFacts,
        spec: api.WorkloadSpec,
        placed: Placed,
        now: datetime,
    ) -> None:
        """A service on a draining pool: choose the next best pool for the whole gang."""
        ns = facts.namespace or ""
        previous = [e.get("pool", "") for e in facts.status.get("excludedPools") or []]
        excluded = (*previous, placed.pool)
        pending = placement.PendingWorkload(
            namespace=ns,
            name=facts.name,
            spec=spec,
            created_at=facts.created,
            excluded_pools=excluded,
        )
        (decision,) = placement.plan([pending], world.snapshot(), now)
        if not decision.placed:
            message = (
                f"pool {placed.pool} is draining; no other pool has room yet: {decision.message}"
            )
            if facts.status.get("message") != message:
                self._patch_status(facts, {"message": message}, guard=False)
                self._event(facts, "Workload", "MigrationWaiting", message, warning=True)
            return
        message = f"pool {placed.pool} is draining: migrating to {decision.pool}, one pod at a time"
        status = self._placement_status(facts, decision, now, message)
        status["phase"] = facts.status.get("phase", api.Phase.RUNNING.value)
        status["conditions"] = [
            c for c in facts.status.get("conditions") or [] if c.get("type") != "Placed"
        ] + [
            condition(
                "Placed",
                True,
                "Migrating",
                message,
                facts.generation,
                facts.status.get("conditions") or [],
                now,
            )
        ]
        try:
            self._patch_status(facts, status)
        except Conflict:
            return
        assignments = {a.replica: a.node for a in decision.assignments}
        self.recent[f"{ns}/{facts.name}"] = (
            facts.uid,
            Placed(decision.pool or "", assignments, now),
        )
        self._event(facts, "Workload", "Migrating", message)

    def _write_lifecycle(
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
        unwritten = self.unwritten.get(facts.key)
        base = unwritten[0] if unwritten else facts.status
        refused = self.refused.get(facts.key)
        status = lifecycle_status(
            spec, placed.pool, base, facts.generation, current, old, created, now,
            refused.message if refused else None,
        )  # fmt: skip
        if unwritten is not None:
            # Nothing to tell but that the pods start or run: the write waits for the pods
            # to run, and in a burst for the burst's end (tessera.world.first_write_due).
            news = refused is not None or any(p.unschedulable_since for p in current.values())
            if not self._first_write_due(unwritten[1], status["phase"], news):
                return
            status = {**unwritten[0], **status}
        elif facts.status.get("pool") != placed.pool:
            status.update(self._recovered(world, placed))
        if {k: facts.status.get(k) for k in status} == status:
            self.deferred.discard(facts.key)
            return
        since = time.monotonic() - self.status_written.get(facts.key, 0.0)
        when = counts_write(facts.status, status, placed.placed_at, now, since)
        if when is CountsWrite.LATER:
            self.deferred.add(facts.key)  # visited again until written
            return
        self.deferred.discard(facts.key)
        if when is CountsWrite.WITH_RUNNING:
            return  # revisited when its pods change, and on every full pass
        try:
            self._patch_status(facts, status)
        except (Conflict, NotFound):
            return
        phase = status["phase"]
        if phase != facts.status.get("phase") and phase in TERMINAL:
            warning = phase == api.Phase.FAILED.value
            self._event(facts, "Workload", phase, status["message"], warning=warning)

    def _recovered(self, world: World, placed: Placed) -> dict[str, Any]:
        """What status says of a placement read back from its pods (the operator stopped
        between creating them and writing the decision): where, not why."""
        accelerator = world.accelerator(placed.pool)
        return {
            "pool": placed.pool,
            "accelerator": accelerator.model,
            "vendor": accelerator.vendor.value,
        }

    # --- metrics ----------------------------------------------------------------------------

    def _metrics(self, world: World, statuses: Mapping[str, dict[str, Any]], now: datetime) -> None:
        phases = dict.fromkeys((p.value for p in api.Phase), 0)
        oldest = 0.0
        for key, facts in world.workloads.items():
            phase = facts.status.get("phase") or api.Phase.PENDING.value
            if world.placement_of(key) is not None and phase == api.Phase.PENDING.value:
                phase = api.Phase.PLACED.value
            phases[phase] = phases.get(phase, 0) + 1
            if phase == api.Phase.PENDING.value and not facts.deleting:
                oldest = max(oldest, (now - facts.created).total_seconds())
        for phase, n in phases.items():
            metrics.WORKLOADS.labels(phase).set(n)
        metrics.OLDEST_PENDING.set(oldest)
        for name in world.pool_specs:
            status = statuses[name]
            model = (status.get("accelerator") or {}).get("model", "Unknown")
            degraded = any(
                c["type"] == "Degraded" and c["status"] == "True" for c in status["conditions"]
            )
            metrics.set_pool(name, model, status.get("devices", {}), degraded)
        for name in set(self._known_pools) - set(world.pools):
            metrics.forget_pool(name)
        self._known_pools = set(world.pools)

    def stand_by(self) -> None:
        """A standby replica reports no workload or pool figures: only the leader's count."""
        metrics.WORKLOADS.clear()
        metrics.OLDEST_PENDING.set(0)
        for name in self._known_pools:
            metrics.forget_pool(name)
        self._known_pools = set()
