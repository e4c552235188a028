"""The planning cycle: plan(pending, snapshot, now) -> one Decision per workload, in the order
decided: a pass on the objective's score, an auction pricing contended pools, and a priced
pass kept where it admits everyone the first did (tessera.placement.passes runs each pass).
Imports tessera.api and the placement modules only; no clocks, randomness, environment or I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from tessera.placement import explain
from tessera.placement.contention import Demand, shadow_prices
from tessera.placement.decision import Decision
from tessera.placement.fit import NodeFit
from tessera.placement.kinds import Feasibility, feasibility, feasibility_key
from tessera.placement.kinds import signature as _signature
from tessera.placement.kinds import static as _static
from tessera.placement.passes import Misses, preempt, run_pass
from tessera.placement.sharing import Sharing
from tessera.placement.snapshot import PendingWorkload, PoolState, PoolView, Snapshot
from tessera.placement.state import PoolWork, Static

# The priced pass is tried once more, the admitted largest first, when it missed at most
# this many of them: a few gangs short of whole nodes. In the quality batches (up to 137
# admitted) a first try missed at most 5, and 136 of 774 retries were kept. In the planning
# fleet (500 to 10,000 pending over 1,000 and 5,000 nodes, 40 queues) no priced pass was
# kept: first tries missed 5 to 78, each retry missed at once. Allowing 2 % (98 misses at
# 10,000 pending) decided 1,337 more workloads of a pass thrown away.
RETRY_MISSES = 8


def _order_key(w: PendingWorkload) -> tuple[int, datetime, str, str]:
    return (-w.spec.priority, w.created_at, w.namespace, w.name)


class _Begun(NamedTuple):
    """A pool's working state as a plan begins it, and the PoolState it was made from."""

    state: PoolState
    view: PoolView
    fit: NodeFit  # never changed once made: each plan takes a copy
    releases: tuple[tuple[datetime, str, int], ...]  # (when, node, devices) on ready nodes


@dataclass
class Prepared:
    """Each pool's working state as the last plan began it, so that the next begins from it:
    where the pool is the same but for some nodes' free devices (a burst's cycle changes a
    few dozen of 5,000), only those nodes move in the index; anything else about a node or
    the pool indexes the pool again. Indexing every node of every pool was 3-4 ms of each
    cycle at 5,000 nodes (bench/cycles.py). Kept by the caller between plans (the World's
    cache holds one); a plan decides the same with or without it."""

    pools: dict[str, _Begun] = field(default_factory=dict)

    def clear(self) -> None:
        self.pools.clear()


def _begin(pool: PoolState, last: _Begun | None) -> _Begun:
    """The pool's working state: from `last` where only free devices moved, else anew."""
    if last is not None and last.state is pool:
        return last
    if last is not None and _same_but_free(last.state, pool):
        fit = last.fit.copy()
        releases_moved = False
        for old, new in zip(last.state.nodes, pool.nodes, strict=True):
            if old is new:
                continue
            if (old.name, old.ready, old.allocatable, old.taints) != (
                new.name, new.ready, new.allocatable, new.taints,
            ):  # fmt: skip
                break
            fit.set_free(new.name, new.free)
            releases_moved = releases_moved or old.releases != new.releases
        else:
            releases = _releases(pool) if releases_moved else last.releases
            return _Begun(pool, last.view, fit, releases)
    view = PoolView.of(pool)
    gated = [(n.name, n.free) for n in pool.nodes if n.name in view.gated] if view.gated else ()
    fit = NodeFit(((n.name, n.free) for n in pool.nodes if n.ready), gated)
    return _Begun(pool, view, fit, _releases(pool))


def _same_but_free(a: PoolState, b: PoolState) -> bool:
    """Whether two states of a pool differ at most in their nodes' free devices and releases
    (the nodes themselves are compared as they are gone over)."""
    return (
        a.name == b.name
        and a.spec is b.spec
        and a.accelerator is b.accelerator
        and a.software == b.software
        and a.problems == b.problems
        and a.gated == b.gated
        and len(a.nodes) == len(b.nodes)
    )


def _releases(pool: PoolState) -> tuple[tuple[datetime, str, int], ...]:
    return tuple((r.at, n.name, r.devices) for n in pool.nodes if n.ready for r in n.releases)


def _pools(snapshot: Snapshot, now: datetime, prepared: Prepared | None = None) -> list[PoolWork]:
    """Every pool's working state, fresh from the snapshot (begun from `prepared`'s, where
    given): its ready nodes indexed, the tainted ones apart (NodeFit.gated)."""
    out = []
    last = prepared.pools if prepared is not None else {}
    begun: dict[str, _Begun] = {}
    for p in sorted(snapshot.pools, key=lambda p: p.name):
        b = begun[p.name] = _begin(p, last.get(p.name))
        releases = sorted(
            (max((at - now).total_seconds(), 0.0), node, devices)
            for at, node, devices in b.releases
        )
        fit = b.fit.copy() if prepared is not None else b.fit
        out.append(PoolWork(view=b.view, fit=fit, releases=releases))
    if prepared is not None:
        prepared.pools = begun
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
    prepared: Prepared | None = None,
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
    considered, as `tessera plan` and `tessera explain` show them. `prepared`: the pools'
    working state as the last plan began it, which this one begins from (and keeps)."""
    untouched = _pools(snapshot, now, prepared)  # the auction reads it, the second pass takes it
    pools = _copies(untouched)
    statics: dict[tuple[object, ...], Static] = {}
    tests: dict[tuple[object, ...], Feasibility] = {}  # the pools' tests, shared by kinds
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
            key = feasibility_key(w, closed[w.namespace])
            tested = tests.get(key)
            if tested is None:
                tested = tests[key] = feasibility(w, pools, ns_labels)
            st = statics[sig] = _static(w, pools, ns_labels, tested)
        queue.append((w, st, ns_labels))
    sharing = None
    if snapshot.quotas:
        units = {p.view.name: p.view.units for p in pools}
        sharing = Sharing(snapshot.quotas, units, snapshot.holdings)
    plain = run_pass(queue, pools, {}, shown, sharing)
    assert plain is not None  # given no misses to count, a pass is never given up
    admitted = _placed(plain.decisions)
    if len(admitted) < 2:
        return preempt(queue, plain, now)  # nothing to share
    for i, d in zip(plain.order, plain.decisions, strict=True):
        queue[i][1].count += d.placed
    prices = _auction(statics, untouched)
    if not any(prices.values()):
        return preempt(queue, plain, now)
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
        pools_now = untouched if serial == 2 else _pools(snapshot, now, prepared)
        order = [*first, *rest]
        # The first try may miss a few admitted (then the retry); the retry none. Prices
        # that scatter more are no packing detail: another pass won't do.
        may_miss = RETRY_MISSES if serial == 2 else 0
        priced = run_pass(
            queue, pools_now, prices, shown, sharing, order, serial, Misses(admitted, may_miss)
        )
        if priced is None:
            break
        if admitted <= _placed(priced.decisions):
            return preempt(queue, priced, now)
    return preempt(queue, plain, now)


def _devices(w: PendingWorkload) -> tuple[int, int]:
    """A workload's size for the priced pass's order: devices in all, then per pod."""
    need = w.spec.accelerator.count
    return (need * w.spec.replicas, need)


def _placed(decisions: list[Decision]) -> set[tuple[str, str]]:
    return {(d.namespace, d.name) for d in decisions if d.placed}


def _by_repr(item: tuple[tuple[object, ...], Static]) -> str:
    """The auction's order of kinds: by signature, whatever order they came in."""
    return repr(item[0])


def _auction(
    statics: dict[tuple[object, ...], Static], pools: Sequence[PoolWork]
) -> dict[str, float]:
    """Shadow prices of the pools' free devices under all pending work (see contention); sets
    each kind of workload's quota per pool from the auction's assignment. A workload bids only
    where its gang fits now: a pool it cannot use now is not contended by it, and one with no
    room left has no price (waiting for it is weighed elsewhere)."""
    by_name = {p.view.name: p for p in pools}
    # The pools a gang of each shape fits on now, on their ready nodes: kinds are many
    # (10,000 all distinct), shapes few, and testing each kind's every pool again was half
    # the auction's time. A kind's tainted nodes it may use can only add room.
    fitting: dict[tuple[int, int], frozenset[str]] = {}
    demands = []
    bidders = []
    # Only the kinds the first pass placed bid (Static.count): the others demand nothing,
    # and at 10,000 pending, half of them were made a bid of values that went unread.
    for _, st in sorted(((k, st) for k, st in statics.items() if st.count), key=_by_repr):
        replicas, count = st.shape
        fits = fitting.get(st.shape)
        if fits is None:
            fits = fitting[st.shape] = frozenset(
                p.view.name for p in pools if p.fit.fits(count, replicas)
            )
        unlocked = st.unlocked
        values = {
            s.pool.name: s.total / 100.0
            for s in st.scored
            if s.pool.name in fits
            or (
                s.pool.name in unlocked
                and by_name[s.pool.name].fit.fits_with(count, replicas, unlocked[s.pool.name])
            )
        }
        if values:
            demands.append(Demand(size=replicas * count, count=st.count, values=values))
            bidders.append(st)
    capacity = {p.view.name: float(sum(p.fit.free.values())) for p in pools}
    auction = shadow_prices(demands, capacity)
    for st, share in zip(bidders, auction.shares, strict=True):
        st.quota = dict(share)
    return auction.prices
