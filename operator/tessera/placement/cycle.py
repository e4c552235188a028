"""The planning cycle: plan(pending, snapshot, now) -> one Decision per workload, in the order
decided.
Imports tessera.api and the placement modules only; no clocks, randomness, environment or I/O."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType

from tessera.placement import explain
from tessera.placement.contention import Demand, shadow_prices
from tessera.placement.decision import Decision
from tessera.placement.feasibility import capacity_reason, static_reasons
from tessera.placement.fit import NodeFit
from tessera.placement.kinds import signature as _signature
from tessera.placement.kinds import static as _static
from tessera.placement.scoring import Scored
from tessera.placement.sharing import Gang, Sharing, fair_order, protected, victims
from tessera.placement.snapshot import PendingWorkload, PoolView, Snapshot
from tessera.placement.state import Pass, PoolWork, Row, Scan, Static
from tessera.placement.timing import (
    Late,
    better_by_waiting,
    cheapest_in_time,
    duration_of,
    run_seconds,
)

_NO_NOTES: Mapping[str, str] = MappingProxyType({})
# Waiting workloads a cycle looks for victims for, in the fair order: each look goes over
# the holdings of every feasible pool, and a backlog of thousands would make every cycle
# pay it; the rest look in later cycles (one every two seconds at least).
PREEMPTION_TRIES = 32
# The priced pass is tried once more, the admitted largest first, when it missed at most
# this many of them (or 2 %): a few gangs short of whole nodes. At 10,000 pending it missed
# 9 % (452 of 4,923), where a second try fared worse (851) at the cost of a whole pass.
RETRY_MISSES = 8


def _order_key(w: PendingWorkload) -> tuple[int, datetime, str, str]:
    return (-w.spec.priority, w.created_at, w.namespace, w.name)


def _pools(snapshot: Snapshot, now: datetime) -> list[PoolWork]:
    """Every pool's working state, fresh from the snapshot: its ready nodes indexed, the
    tainted ones apart (NodeFit.gated)."""
    out = []
    for p in sorted(snapshot.pools, key=lambda p: p.name):
        view = PoolView.of(p)
        gated = [(n.name, n.free) for n in p.nodes if n.name in view.gated] if view.gated else ()
        fit = NodeFit(((n.name, n.free) for n in p.nodes if n.ready), gated)
        releases = sorted(
            (max((r.at - now).total_seconds(), 0.0), n.name, r.devices)
            for n in p.nodes
            if n.ready
            for r in n.releases
        )
        out.append(PoolWork(view=view, fit=fit, releases=releases))
    return out


def _copies(pools: Sequence[PoolWork]) -> list[PoolWork]:
    """Fresh working states with the same starting point: the views are shared (they do
    not change within a plan), the free devices and releases copied. Building them from
    the snapshot again for each pass was a fifth of a large burst's cycle (cProfile)."""
    return [PoolWork(view=p.view, fit=p.fit.copy(), releases=list(p.releases)) for p in pools]


def plan(
    pending: Sequence[PendingWorkload],
    snapshot: Snapshot,
    now: datetime,
    *,
    shown: int | None = explain.MAX_CANDIDATES,
) -> list[Decision]:
    """Decide placements for the pending workloads over one snapshot, in priority then age
    order (ties by namespace and name; with quotas, their fair order); each placement is
    folded into the snapshot before the next workload is considered. Returns one decision
    per workload, in the order they were decided.

    Who is placed is decided by a pass on the objective's score alone. Where they go is then
    improved: an auction among the workloads so placed prices each pool's free devices (see
    contention), and a second pass takes, for each workload, the pools the auction gave its
    kind first (the objective's best of them to the oldest), then the rest by score less
    contention. The second pass decides the workloads the first placed, then the others in
    the room left; it is kept only if it places every workload the first placed (tried
    once more with those largest first), so contention moves workloads between pools and
    may fit more of them (packed better), but never takes a place from one the first pass
    admitted.

    Each decision lists `shown` candidates (what a status keeps); None lists every pool
    considered, as `tessera plan` and `tessera explain` show them."""
    untouched = _pools(snapshot, now)  # the auction reads it, then the second pass takes it
    pools = _copies(untouched)
    statics: dict[tuple[object, ...], Static] = {}
    closed: dict[str, tuple[str, ...]] = {}
    queue = []
    for w in sorted(pending, key=_order_key):
        ns_labels = snapshot.namespaces.get(w.namespace, {})
        if w.namespace not in closed:
            closed[w.namespace] = tuple(
                p.view.name for p in pools if not p.view.allows_namespace(w.namespace, ns_labels)
            )
        sig = _signature(w, closed[w.namespace])
        st = statics.get(sig)
        if st is None:
            st = statics[sig] = _static(w, pools, ns_labels)
        queue.append((w, st, ns_labels))
    sharing = None
    if snapshot.quotas:
        units = {p.view.name: p.view.units for p in pools}
        sharing = Sharing(snapshot.quotas, units, snapshot.holdings)
    plain = _pass(queue, pools, {}, shown, sharing)
    assert plain is not None  # given no misses to count, a pass is never given up
    admitted = _placed(plain.decisions)
    if len(admitted) < 2:
        return _preempt(queue, plain, now)  # nothing to share
    for i, d in zip(plain.order, plain.decisions, strict=True):
        queue[i][1].count += d.placed
    prices = _auction(statics, untouched)
    if not any(prices.values()):
        return _preempt(queue, plain, now)
    # The priced pass decides the admitted first, then the rest in the room left (better
    # packed, it may fit more): no one takes the place of one the first pass admitted. If
    # contention scattered small ones over the whole nodes a gang needed, once more with
    # the admitted largest first.
    admitted_at = [i for i, d in zip(plain.order, plain.decisions, strict=True) if d.placed]
    rest = [i for i, d in zip(plain.order, plain.decisions, strict=True) if not d.placed]
    largest = sorted(admitted_at, key=lambda i: _devices(queue[i][0]), reverse=True)
    shares = {id(st): dict(st.quota) for st in statics.values()}  # the auction's, used up
    for serial, first in enumerate((admitted_at, largest), start=2):
        if serial > 2:
            for st in statics.values():
                st.quota = dict(shares[id(st)])
        pools_now = untouched if serial == 2 else _pools(snapshot, now)
        order = [*first, *rest]
        # The first try may miss a few admitted (then the retry); the retry none. Prices
        # that scatter more are no packing detail: another pass won't do.
        may_miss = max(RETRY_MISSES, len(admitted) // 50) if serial == 2 else 0
        priced = _pass(
            queue, pools_now, prices, shown, sharing, order, serial, Misses(admitted, may_miss)
        )
        if priced is None:
            break
        if admitted <= _placed(priced.decisions):
            return _preempt(queue, priced, now)
    return _preempt(queue, plain, now)


def _devices(w: PendingWorkload) -> tuple[int, int]:
    """A workload's size for the priced pass's order: devices in all, then per pod."""
    need = w.spec.accelerator.count
    return (need * w.spec.replicas, need)


def _placed(decisions: list[Decision]) -> set[tuple[str, str]]:
    return {(d.namespace, d.name) for d in decisions if d.placed}


_Queue = Sequence[tuple[PendingWorkload, Static, Mapping[str, str]]]


@dataclasses.dataclass(slots=True)
class Misses:
    """The admitted workloads a priced pass may leave waiting before it is given up (it
    would be thrown away): at 10,000 pending it missed 9 %, and deciding the other 91 % of
    a pass that could not be kept cost about a quarter of the cycle."""

    admitted: set[tuple[str, str]]
    allowed: int
    missed: int = 0

    def exceeded(self, decision: Decision) -> bool:
        """Counts a decision; True once more than `allowed` admitted ones wait."""
        if not decision.placed and (decision.namespace, decision.name) in self.admitted:
            self.missed += 1
        return self.missed > self.allowed


@dataclasses.dataclass(frozen=True, slots=True)
class _Done:
    """A pass's decisions, the queue index of each (the order it decided them in), and
    the working state it left: where preemption looks for room."""

    decisions: list[Decision]
    order: list[int]
    state: Pass
    sharing: Sharing | None


def _pass(
    queue: _Queue,
    pools: list[PoolWork],
    prices: dict[str, float],
    shown: int | None,
    sharing: Sharing | None,
    order: Sequence[int] | None = None,
    serial: int = 1,
    misses: Misses | None = None,
) -> _Done | None:
    """Decides the queue in order: with quotas, the fair order (tessera.placement.sharing)
    unless `order` is given. `serial` tells the pass's cached scans from another pass's.
    None once `misses` are exceeded (the pass is given up where it stands)."""
    state = Pass(
        serial=serial,
        pools={p.view.name: p for p in pools},
        prices=prices,
        shown=shown,
    )
    if sharing is None:
        if order is None:
            decisions = [_decide(w, st, ns, state, None) for w, st, ns in queue]
            return _Done(decisions, list(range(len(queue))), state, None)
        decisions = []
        for i in order:
            decisions.append(d := _decide(*queue[i], state, None))
            if misses is not None and misses.exceeded(d):
                return None
        return _Done(decisions, list(order), state, None)
    sharing = sharing.fresh()
    items: Iterator[tuple[int, Callable[[], None]]]
    if order is None:
        groups: dict[str | None, list[int]] = {}
        for i, (w, _, _) in enumerate(queue):
            groups.setdefault(None if w.holds else sharing.quota_of(w.namespace), []).append(i)
        items = fair_order(groups, sharing)
    else:
        items = ((i, _nothing) for i in order)
    decisions, decided = [], []
    for i, done in items:
        w, st, ns = queue[i]
        decisions.append(d := _decide(w, st, ns, state, None if w.holds else sharing))
        if misses is not None and misses.exceeded(d):
            return None
        decided.append(i)
        done()
    return _Done(decisions, decided, state, sharing)


def _nothing() -> None:
    return None


def _preempt(queue: _Queue, done: _Done, now: datetime) -> list[Decision]:
    """For each workload of a quota still waiting, in the order decided: the victims whose
    eviction lets it fit (tessera.placement.sharing.victims), if its quota's policy allows.
    It is placed at once on the nodes their eviction frees (its pods wait for the devices
    there, which no one else can take meanwhile: they are promised to it), so no two
    preemptors count the same devices and no workload is chosen as a victim twice."""
    sharing = done.sharing
    if sharing is None:
        return done.decisions
    pools, taken = done.state.pools, set[str]()
    held = {h.key: h for h in sharing.holdings}
    out, tries = [], 0
    for i, d in zip(done.order, done.decisions, strict=True):
        w, st, _ = queue[i]
        quota = sharing.quota_of(w.namespace)
        if d.placed or w.holds or not st.scored or quota is None or tries >= PREEMPTION_TRIES:
            out.append(d)
            continue
        policy = sharing.quotas[quota].spec.preemption
        if policy.within_quota == "Never" and policy.reclaim == "Never":
            out.append(d)
            continue
        tries += 1
        count, replicas = w.spec.accelerator.count, w.spec.replicas

        ranked = st.rank(count * replicas, {})
        names = [r.scored.pool.name for r in ranked]
        gang = Gang(count, replicas, lambda name: pools[name].fit)
        found = victims(
            w.namespace, w.spec.priority, count * replicas, names, gang, sharing, now, taken
        )
        if found is None:
            young = protected(w.namespace, w.spec.priority, count * replicas, names, sharing, now)
            if young is not None:
                key, at = young
                when = at.strftime("%Y-%m-%dT%H:%M:%SZ")
                message = (
                    f"{d.message}; it may preempt {key} from {when} (minRuntimeSeconds "
                    "protects just-placed work)"
                )
                out.append(dataclasses.replace(d, message=message))
            else:
                out.append(d)
            continue
        fit = pools[found.pool].fit
        for v in found.victims:
            taken.add(v.key)
            for node, devices in held[v.key].nodes:
                if node in fit.free:
                    fit.give(node, devices)
            sharing.release(v)
        nodes = fit.take(count, replicas) or []
        sharing.take(w.namespace, found.pool, count * replicas)
        chosen = next(r for r in ranked if r.scored.pool.name == found.pool)
        pool = chosen.scored.pool
        evicted = ", ".join(v.key for v in found.victims)
        rules = " and ".join(sorted({v.rule for v in found.victims}))
        message = (
            f"{_placed_message(pool, chosen.score, replicas, count)}, preempting {evicted} "
            f"({rules}): its pods start as their devices are freed"
        )
        out.append(
            dataclasses.replace(
                d,
                placed=True,
                pool=pool.name,
                accelerator=pool.model,
                vendor=pool.vendor,
                score=chosen.score,
                nodes=tuple(nodes),
                waiting_for=None,
                for_quota=False,
                preemption=found,
                message=message,
            )
        )
    return out


def _placed_message(pool: PoolView, score: float, replicas: int, count: int) -> str:
    """What a placement's status and event say, preempting or not."""
    where = f"placed on {pool.name} ({pool.model}), score {score:.1f}"
    return f"{where}, {replicas} x {count} {pool.resource}"


def _auction(
    statics: dict[tuple[object, ...], Static], pools: Sequence[PoolWork]
) -> dict[str, float]:
    """Shadow prices of the pools' free devices under all pending work (see contention); sets
    each kind of workload's quota per pool from the auction's assignment. A workload bids only
    where its gang fits now: a pool it cannot use now is not contended by it, and one with no
    room left has no price (waiting for it is weighed elsewhere)."""
    by_name = {p.view.name: p for p in pools}
    demands = []
    bidders = []
    for _, st in sorted(statics.items(), key=lambda kv: repr(kv[0])):
        replicas, count = st.shape
        values = {
            s.pool.name: s.total / 100.0
            for s in st.scored
            if by_name[s.pool.name].fit.fits_with(count, replicas, st.unlocked.get(s.pool.name, ()))
        }
        if values:
            demands.append(Demand(size=replicas * count, count=st.count, values=values))
            bidders.append(st)
    capacity = {p.view.name: float(sum(p.fit.free.values())) for p in pools}
    auction = shadow_prices(demands, capacity)
    for st, share in zip(bidders, auction.shares, strict=True):
        st.quota = dict(share)
    return auction.prices


def _decide(
    w: PendingWorkload,
    st: Static,
    ns_labels: Mapping[str, str],
    state: Pass,
    sharing: Sharing | None,
) -> Decision:
    count, replicas = w.spec.accelerator.count, w.spec.replicas
    pools, prices = state.pools, state.prices
    ranked = st.order(count * replicas, prices)
    key = (state.serial, state.placements, id(ranked))
    if st.scan is None or st.scan.key != key:  # something was placed since: look again
        st.scan = Scan(key, ranked, pools, (count, replicas), st.unlocked)
    scan = st.scan
    fits = scan.fits
    quota = refused = None
    if sharing is not None:
        quota = sharing.quota_of(w.namespace)
        room = scan.fits
        refusals: dict[int, str | None] = {}

        def refusal(i: int) -> str | None:
            if i not in refusals:
                pool = ranked[i].scored.pool.name
                refusals[i] = sharing.refusal(w.namespace, pool, count * replicas)
            return refusals[i]

        def fits(i: int) -> bool:
            return room(i) and refusal(i) is None

        def refused() -> str | None:
            """Why it waits for quota: the first pool with room that the quota refuses."""
            return next((r for i in range(len(ranked)) if room(i) and (r := refusal(i))), None)

    estimate = w.spec.estimated_duration
    duration = duration_of(estimate) if estimate else None
    notes: dict[str, str] = {}
    late: Late | None = None
    wait: Scored | None = None
    if duration is not None and ranked and st.cost_only:
        first, wait, late = cheapest_in_time(w, st, pools, ranked, fits, duration, notes)
    else:
        first = None
        for i in range(len(ranked)):
            if fits(i):
                first = i
                break
        if duration is not None and ranked:
            wait = better_by_waiting(w, st, pools, ranked, fits, first, duration, notes)
    chosen = ranked[first] if first is not None and wait is None else None

    shown = scan.rows
    if shown is None:  # a decision's notes are added when its explanation is read
        rows = []
        for i, r in enumerate(ranked[: state.shown]):
            fit = pools[r.scored.pool.name].fit
            seen = st.rows.get((id(ranked), i))
            if seen is not None and seen[0] is fit and seen[1] == fit.version:
                row = seen[2]  # the pool has not changed since: the same row
                scan.known[i] = row.fits_now
            else:
                now = fits(i)
                reasons = () if now else (capacity_reason(w, r.scored.pool, fit) or "",)
                row = Row(r, now, reasons)
                st.rows[id(ranked), i] = (fit, fit.version, row)
            rows.append(row)
        shown = scan.rows = tuple(rows)
    ruled_out = st.nearest_misses(None if state.shown is None else state.shown - len(shown))
    omitted = len(ranked) - len(shown) + len(st.misses) - len(ruled_out)
    late_shown: tuple[str | float, ...] = ()
    if late is not None:
        for i, row in enumerate(shown):
            t = late.runs[i] if row.fits_now else late.done.get(i, math.inf)
            if i != late.pick and late.bound < t < math.inf:
                late_shown += (row.ranked.scored.pool.name, t)
        if late_shown:
            late_shown = (late.soonest, *late_shown)

    if chosen is not None:
        pool = chosen.scored.pool
        if sharing is not None:
            sharing.take(w.namespace, pool.name, count * replicas)
        if prices and st.quota.get(pool.name, 0) > 0:
            st.quota[pool.name] -= 1
        target = pools[pool.name]
        nodes = target.fit.take_with(count, replicas, st.unlocked.get(pool.name, ())) or []
        state.placements += 1
        runtime = None
        if duration is not None:
            runtime = run_seconds(duration, st.best_throughput, chosen.scored.throughput)
            for node in nodes:
                target.releases.append((runtime, node, count))
            target.releases.sort()
        return Decision(
            namespace=w.namespace,
            name=w.name,
            placed=True,
            pool=pool.name,
            accelerator=pool.model,
            vendor=pool.vendor,
            score=chosen.score,
            nodes=tuple(nodes),
            runtime=runtime,
            message=_placed_message(pool, chosen.score, replicas, count),
            quota=quota,
            _rows=shown,
            _ruled_out=ruled_out,
            omitted=omitted,
            _notes=notes or _NO_NOTES,
            _late=late_shown,
            _workload=w,
            _namespace_labels=ns_labels,
        )

    if wait is not None and duration is not None:
        pools[wait.pool.name].backlog += (
            replicas * count * run_seconds(duration, st.best_throughput, wait.throughput)
        )
    message = _waiting_message(w, st, wait, notes, ns_labels, shown)
    for_quota = False
    if refused is not None and sharing is not None:
        why = refused() if wait is None else None
        if why is not None:
            message, for_quota = f"waiting for quota: {why}", True
        elif st.scored and quota is None and w.namespace in sharing.contested:
            message = f"waiting: {sharing.refusal(w.namespace, ranked[0].scored.pool.name, 0)}"
        sharing.waits(w.namespace, [r.scored.pool.name for r in ranked], count * replicas)
    return Decision(
        namespace=w.namespace,
        name=w.name,
        placed=False,
        waiting_for=wait.pool.name if wait else None,
        quota=quota,
        for_quota=for_quota,
        message=message,
        _rows=shown,
        _ruled_out=ruled_out,
        omitted=omitted,
        _notes=notes or _NO_NOTES,
        _late=late_shown,
        _workload=w,
        _namespace_labels=ns_labels,
    )


def _waiting_message(
    w: PendingWorkload,
    st: Static,
    wait: Scored | None,
    notes: dict[str, str],
    ns_labels: Mapping[str, str],
    shown: Sequence[Row] = (),
) -> str:
    """One line on why a workload waits: the nearest pool's reasons when none can run it,
    else what the best feasible pool (the one it would take) lacks now."""
    if not st.scored:
        # The nearest miss's reasons in the message itself, so the Event and `kubectl get -o
        # wide` say why; every pool's are in status.candidates. Once per kind and namespace
        # (a reason may name the namespace), not per workload.
        message = st.no_pool.get(w.namespace)
        if message is None:
            message = f"no pool can run this workload ({st.ruled_out_count} ruled out"
            if 0 < st.chosen_away < st.ruled_out_count:
                message += f", {st.chosen_away} by its own selection"
            if st.ruled_out:
                nearest = st.ruled_out[0]
                why = "; ".join(static_reasons(w, nearest, ns_labels))
                message += f"; nearest {nearest.name}: {why}"
            message = st.no_pool[w.namespace] = message + ")"
        return message
    if wait is not None:
        return f"waiting for {wait.pool.name}: {notes[wait.pool.name]}"
    need = w.spec.accelerator
    best = next((row for row in shown if row.reasons and row.reasons[0]), None)
    lacks = f"; best {best.ranked.scored.pool.name}: {best.reasons[0]}" if best else ""
    return (
        f"waiting: no feasible pool has room for {w.spec.replicas} pods of {need.count} "
        f"devices now ({len(st.scored)} feasible{lacks})"
    )
