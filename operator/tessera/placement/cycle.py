"""The planning cycle: pending workloads in priority then age order, each placed on the best
feasible pool that fits now (or left waiting, with reasons). No clocks, randomness or I/O;
imports tessera.api and the placement modules only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tessera import api
from tessera.placement import explain
from tessera.placement.contention import Demand, shadow_prices
from tessera.placement.feasibility import capacity_reason, static_reasons
from tessera.placement.fit import NodeFit, earliest_fit
from tessera.placement.scoring import Scored, score
from tessera.placement.snapshot import PendingWorkload, PoolView, Snapshot

# Waiting for a faster pool must save at least this share of the time to finish by running
# now on the best pool that fits: estimates are rough, and a placement now is certain.
WAIT_MARGIN = 0.1


class Decision(api._Model):
    """What the cycle decided for one workload: placed (where, on which nodes) or waiting."""

    namespace: str
    name: str
    placed: bool
    pool: str | None = None
    accelerator: str | None = None
    vendor: api.Vendor | None = None
    score: float | None = None
    assignments: tuple[api.Assignment, ...] = ()
    candidates: tuple[api.Candidate, ...] = ()
    waiting_for: str | None = None
    message: str = ""

    def to_status(
        self, now: datetime, status: api.WorkloadStatus | None = None
    ) -> api.WorkloadStatus:
        """The Workload status fields this decision sets, on top of `status`."""
        base = status or api.WorkloadStatus()
        return base.model_copy(
            update={
                "phase": api.Phase.PLACED if self.placed else api.Phase.PENDING,
                "pool": self.pool,
                "accelerator": self.accelerator,
                "vendor": self.vendor,
                "score": self.score,
                "assignments": list(self.assignments),
                "candidates": list(self.candidates),
                "message": self.message,
                "placed_at": now if self.placed else None,
            }
        )


@dataclass(frozen=True, slots=True)
class _Ranked:
    """A feasible pool for one kind of workload, with its contention this cycle."""

    scored: Scored
    contention: float  # points: devices x the pool's shadow price x 100
    score: float  # the objective's score less the contention
    breakdown: api.ScoreBreakdown


@dataclass(slots=True)
class _Static:
    """What does not change while the cycle runs, for one kind of workload."""

    scored: list[Scored]
    infeasible: list[api.Candidate]
    best_throughput: float
    shape: tuple[int, int]  # replicas, devices per pod
    count: int = 0  # workloads of this kind the first pass placed
    quota: dict[str, int] = field(default_factory=dict)  # the auction's share per pool
    ranked: dict[bool, list[_Ranked]] = field(default_factory=dict)  # by: contention priced

    def rank(self, devices: int, prices: dict[str, float]) -> list[_Ranked]:
        """Feasible pools by score less contention, best first; equal to a hundredth of a
        point, the better objective score first (the marginal workload is indifferent, and
        the oldest should not get the slower pool), then the pool name."""
        key = bool(prices)
        if key not in self.ranked:
            rows = []
            for s in self.scored:
                contention = round(100.0 * devices * prices.get(s.pool.name, 0.0), 4)
                breakdown = (
                    s.breakdown.model_copy(update={"contention": contention})
                    if contention
                    else s.breakdown
                )
                rows.append(_Ranked(s, contention, round(s.total - contention, 4), breakdown))
            rows.sort(key=lambda r: (-round(r.score, 2), -r.scored.total, r.scored.pool.name))
            self.ranked[key] = rows
        return self.ranked[key]


@dataclass(slots=True)
class _Pool:
    """One pool's working state during the cycle."""

    view: PoolView
    fit: NodeFit
    releases: list[tuple[float, str, int]]  # seconds from now, node, devices
    backlog: float = 0.0  # device-seconds of workloads that chose to wait for this pool
    _starts: dict[tuple[int, int], float | None] | None = None
    _version: int = -1

    def earliest_fit(self, count: int, replicas: int) -> float | None:
        if self._starts is None or self._version != self.fit.version:
            self._starts, self._version = {}, self.fit.version
        key = (count, replicas)
        if key not in self._starts:
            self._starts[key] = earliest_fit(self.fit.free, self.releases, count, replicas)
        return self._starts[key]

    def expected_start(self, count: int, replicas: int) -> float | None:
        """Seconds from now until the gang could start here, from known releases and the work
        already waiting for this pool; None when the known releases never make room."""
        at = self.earliest_fit(count, replicas)
        if at is None:
            return None
        return at + self.backlog / max(self.view.devices, 1)


def _signature(w: PendingWorkload) -> tuple[object, ...]:
    need, spec = w.spec.accelerator, w.spec
    weights = spec.weights
    return (
        w.namespace,
        w.excluded_pools,
        spec.replicas,
        spec.objective,
        (weights.performance, weights.cost, weights.energy) if weights else None,
        need.count,
        need.min_memory_gib,
        need.precision,
        need.profile,
        tuple(need.vendors),
        tuple(need.models),
        tuple(need.exclude_models),
        tuple(need.pools),
        tuple(need.features),
        tuple(sorted(need.software.items())),
        tuple(sorted(need.throughput.items())),
    )


def _order_key(w: PendingWorkload) -> tuple[int, datetime, str, str]:
    return (-w.spec.priority, w.created_at, w.namespace, w.name)


def _static(w: PendingWorkload, pools: Sequence[_Pool], snapshot: Snapshot) -> _Static:
    ns_labels = snapshot.namespaces.get(w.namespace, {})
    feasible: list[PoolView] = []
    infeasible: list[tuple[int, str, api.Candidate]] = []
    for p in pools:
        reasons = static_reasons(w, p.view, ns_labels)
        if reasons:
            row = explain.candidate(p.view.name, p.view.model, feasible=False, reasons=reasons)
            infeasible.append((len(reasons), p.view.name, row))
        else:
            feasible.append(p.view)
    scored = score(w.spec, feasible)
    infeasible.sort(key=lambda t: (t[0], t[1]))
    best = max((s.throughput for s in scored), default=0.0)
    shape = (w.spec.replicas, w.spec.accelerator.count)
    return _Static(scored, [row for _, _, row in infeasible], best, shape)


def _pools(snapshot: Snapshot, now: datetime) -> list[_Pool]:
    return [
        _Pool(
            view=PoolView.of(p),
            fit=NodeFit((n.name, n.free) for n in p.nodes if n.ready),
            releases=sorted(
                (max((r.at - now).total_seconds(), 0.0), n.name, r.devices)
                for n in p.nodes
                if n.ready
                for r in n.releases
            ),
        )
        for p in sorted(snapshot.pools, key=lambda p: p.name)
    ]


def plan(pending: Sequence[PendingWorkload], snapshot: Snapshot, now: datetime) -> list[Decision]:
    """Decide placements for the pending workloads over one snapshot, in priority then age
    order (ties by namespace and name); each placement is folded into the snapshot before the
    next workload is considered. Returns one decision per workload, in that order.

    Who is placed is decided by a pass on the objective's score alone. Where they go is then
    improved: an auction among the workloads so placed prices each pool's free devices (see
    contention), and a second pass takes, for each workload, the pools the auction gave its
    kind first (the objective's best of them to the oldest), then the rest by score less
    contention. The second pass is kept only if it places exactly the same workloads, so
    contention moves workloads between pools but never changes who runs."""
    pools = _pools(snapshot, now)
    statics: dict[tuple[object, ...], _Static] = {}
    queue = []
    for w in sorted(pending, key=_order_key):
        sig = _signature(w)
        st = statics.get(sig)
        if st is None:
            st = statics[sig] = _static(w, pools, snapshot)
        queue.append((w, st))
    plain = _pass(queue, pools, {})
    admitted = _placed(plain)
    if len(admitted) < 2:
        return plain  # nothing to share
    for (_, st), d in zip(queue, plain, strict=True):
        st.count += d.placed
    prices = _auction(statics, _pools(snapshot, now))
    if not any(prices.values()):
        return plain
    priced = _pass(queue, _pools(snapshot, now), prices)
    return priced if _placed(priced) == admitted else plain


def _placed(decisions: list[Decision]) -> set[tuple[str, str]]:
    return {(d.namespace, d.name) for d in decisions if d.placed}


def _pass(
    queue: list[tuple[PendingWorkload, _Static]], pools: list[_Pool], prices: dict[str, float]
) -> list[Decision]:
    by_name = {p.view.name: p for p in pools}
    return [_decide(w, st, by_name, prices) for w, st in queue]


def _auction(
    statics: dict[tuple[object, ...], _Static], pools: Sequence[_Pool]
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
            if by_name[s.pool.name].fit.fits(count, replicas)
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
    w: PendingWorkload, st: _Static, pools: dict[str, _Pool], prices: dict[str, float]
) -> Decision:
    count, replicas = w.spec.accelerator.count, w.spec.replicas
    ranked = st.rank(count * replicas, prices)
    if prices and st.quota:
        # the pools the auction assigned this kind of workload to come first, the objective's
        # best of them to the oldest; then the rest by score less contention
        ranked = sorted(
            ranked,
            key=lambda r: (
                st.quota.get(r.scored.pool.name, 0) <= 0,
                -r.scored.total if st.quota.get(r.scored.pool.name, 0) > 0 else 0.0,
            ),
        )
    fits = [pools[r.scored.pool.name].fit.fits(count, replicas) for r in ranked]
    first = next((i for i, ok in enumerate(fits) if ok), None)
    duration = w.spec.duration_seconds()
    notes: dict[str, str] = {}
    wait: Scored | None = None
    if duration is not None and ranked:
        wait = _better_by_waiting(w, st, pools, ranked, fits, duration=duration, notes=notes)
    chosen = ranked[first].scored if first is not None and wait is None else None

    rows = []
    for r, ok in zip(ranked, fits, strict=True):
        pool = r.scored.pool
        reasons = []
        if not ok:
            reasons.append(capacity_reason(w, pool, pools[pool.name].fit) or "")
        if pool.name in notes:
            reasons.append(notes[pool.name])
        rows.append(
            explain.candidate(
                pool.name,
                pool.model,
                feasible=True,
                fits_now=ok,
                score=r.score,
                breakdown=r.breakdown,
                reasons=reasons,
            )
        )
    candidates = tuple(explain.cap(rows, st.infeasible))

    if chosen is not None:
        if prices and st.quota.get(chosen.pool.name, 0) > 0:
            st.quota[chosen.pool.name] -= 1
        target = pools[chosen.pool.name]
        nodes = target.fit.take(count, replicas) or []
        if duration is not None:
            runtime = duration * st.best_throughput / chosen.throughput
            for node in nodes:
                target.releases.append((runtime, node, count))
            target.releases.sort()
        return Decision(
            namespace=w.namespace,
            name=w.name,
            placed=True,
            pool=chosen.pool.name,
            accelerator=chosen.pool.model,
            vendor=chosen.pool.vendor,
            score=ranked[first].score if first is not None else None,
            assignments=tuple(
                api.Assignment.model_construct(replica=i, node=n) for i, n in enumerate(nodes)
            ),
            candidates=candidates,
            message=f"placed on {chosen.pool.name} ({chosen.pool.model}), score "
            f"{ranked[first].score if first is not None else 0:.1f}, "
            f"{replicas} x {count} {chosen.pool.resource}",
        )

    if wait is not None and duration is not None:
        pools[wait.pool.name].backlog += (
            replicas * count * duration * st.best_throughput / wait.throughput
        )
    return Decision(
        namespace=w.namespace,
        name=w.name,
        placed=False,
        waiting_for=wait.pool.name if wait else None,
        candidates=candidates,
        message=_waiting_message(w, st, wait, notes),
    )


def _better_by_waiting(
    w: PendingWorkload,
    st: _Static,
    pools: dict[str, _Pool],
    ranked: list[_Ranked],
    fits: list[bool],
    *,
    duration: float,
    notes: dict[str, str],
) -> Scored | None:
    """The pool worth waiting for: one that scores better on the objective than the best
    pool that fits now, and whose expected completion (known releases, plus work already
    waiting for it, plus the run at its speed) beats running now by WAIT_MARGIN; None when
    running now is as good. Contention does not enter: it prices free devices, not waiting."""
    count, replicas = w.spec.accelerator.count, w.spec.replicas

    def runtime(s: Scored) -> float:
        return duration * st.best_throughput / s.throughput if s.throughput > 0 else math.inf

    first = next((i for i, ok in enumerate(fits) if ok), None)
    here = ranked[first].scored if first is not None else None
    now_done = runtime(here) if here is not None else math.inf
    best: tuple[float, Scored] | None = None
    for r, ok in zip(ranked, fits, strict=True):
        s = r.scored
        if ok or (here is not None and s.total <= here.total):
            continue
        start = pools[s.pool.name].expected_start(count, replicas)
        if start is None:
            continue
        done = start + runtime(s)
        if done < now_done * (1 - WAIT_MARGIN) and (best is None or done < best[0]):
            best = (done, s)
    if best is None:
        return None
    done, s = best
    if here is not None:
        notes[s.pool.name] = (
            f"expected to finish in {explain.hours(done)} here, against "
            f"{explain.hours(now_done)} on {here.pool.name} now"
        )
        notes[here.pool.name] = f"fits now, but would finish later ({explain.hours(now_done)})"
    else:
        notes[s.pool.name] = f"expected to finish soonest here: in {explain.hours(done)}"
    return s


def _waiting_message(
    w: PendingWorkload, st: _Static, wait: Scored | None, notes: dict[str, str]
) -> str:
    if not st.scored:
        return f"no pool can run this workload ({len(st.infeasible)} ruled out, reasons below)"
    if wait is not None:
        return f"waiting for {wait.pool.name}: {notes[wait.pool.name]}"
    need = w.spec.accelerator
    return (
        f"waiting: no feasible pool has room for {w.spec.replicas} pods of {need.count} "
        f"devices now ({len(st.scored)} feasible)"
    )
