"""The planning cycle: plan(pending, snapshot, now) -> one Decision per workload, in queue order.
Imports tessera.api and the placement modules only; no clocks, randomness, environment or I/O."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
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


@dataclass(frozen=True, slots=True)
class _Ranked:
    """A feasible pool for one kind of workload, with its contention this cycle."""

    scored: Scored
    contention: float  # points: devices x the pool's shadow price x 100
    score: float  # the objective's score less the contention
    breakdown: api.ScoreBreakdown


@dataclass(slots=True)
class _Scan:
    """Which pools fit one kind of workload: valid until the pass places anything."""

    key: tuple[int, int, int]  # pass, placements so far in it, the order looked at
    known: dict[int, bool]
    rows: tuple[_Row, ...] | None = None  # the explanation, when no note was added


@dataclass(slots=True)
class _Pass:
    """One pass over the queue: the pools' working state and the prices it ranks with."""

    serial: int
    pools: dict[str, _Pool]
    prices: dict[str, float]
    placements: int = 0


@dataclass(slots=True)
class _Static:
    """What does not change while the cycle runs, for one kind of workload."""

    scored: list[Scored]
    ruled_out: list[PoolView]  # nearest misses first: fewest reasons, then name
    best_throughput: float
    shape: tuple[int, int]  # replicas, devices per pod
    count: int = 0  # workloads of this kind the first pass placed
    quota: dict[str, int] = field(default_factory=dict)  # the auction's share per pool
    ranked: dict[bool, list[_Ranked]] = field(default_factory=dict)  # by: contention priced
    orders: dict[frozenset[str], list[_Ranked]] = field(default_factory=dict)  # by: quota open
    scan: _Scan | None = None  # the last look at which pools fit this kind

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

    def order(self, devices: int, prices: dict[str, float]) -> list[_Ranked]:
        """The order a workload of this kind tries pools in: with prices, the pools the
        auction assigned this kind to and that have quota left come first, the objective's
        best of them to the oldest; then the rest by score less contention."""
        ranked = self.rank(devices, prices)
        quota = frozenset(p for p, k in self.quota.items() if k > 0) if prices else frozenset()
        if not quota:
            return ranked
        if quota not in self.orders:
            self.orders[quota] = sorted(
                ranked,
                key=lambda r: (
                    r.scored.pool.name not in quota,
                    -r.scored.total if r.scored.pool.name in quota else 0.0,
                ),
            )
        return self.orders[quota]


@dataclass(frozen=True, slots=True)
class _Row:
    """A feasible pool as one workload saw it when it was decided."""

    ranked: _Ranked
    fits_now: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Decision:
    """What the cycle decided for one workload: placed (where, on which nodes) or waiting.

    A plain frozen dataclass rather than a pydantic model: a cycle makes thousands, and the
    api models of its explanation (`candidates`, `assignments`) are built only when read."""

    namespace: str
    name: str
    placed: bool
    pool: str | None = None
    accelerator: str | None = None
    vendor: api.Vendor | None = None
    score: float | None = None
    nodes: tuple[str, ...] = ()  # the node of each replica, in replica order
    waiting_for: str | None = None
    message: str = ""
    _rows: tuple[_Row, ...] = field(default=(), repr=False, compare=False)
    _ruled_out: tuple[PoolView, ...] = field(default=(), repr=False, compare=False)
    _workload: PendingWorkload | None = field(default=None, repr=False, compare=False)
    _namespace_labels: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def assignments(self) -> tuple[api.Assignment, ...]:
        return tuple(api.Assignment(replica=i, node=n) for i, n in enumerate(self.nodes))

    @functools.cached_property
    def candidates(self) -> tuple[api.Candidate, ...]:
        """The pools considered, best first, at most MAX_CANDIDATES: feasible ones in the
        order the workload took them, then the nearest misses with every reason."""
        rows = [
            explain.candidate(
                r.ranked.scored.pool.name,
                r.ranked.scored.pool.model,
                feasible=True,
                fits_now=r.fits_now,
                score=r.ranked.score,
                breakdown=r.ranked.breakdown,
                reasons=r.reasons,
            )
            for r in self._rows
        ]
        if self._workload is not None:
            rows.extend(
                explain.candidate(
                    view.name,
                    view.model,
                    feasible=False,
                    reasons=static_reasons(self._workload, view, self._namespace_labels),
                )
                for view in self._ruled_out
            )
        return tuple(rows)

    def as_dict(self) -> dict[str, object]:
        """Everything the decision says, as plain data (for comparisons and output)."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "placed": self.placed,
            "pool": self.pool,
            "accelerator": self.accelerator,
            "vendor": self.vendor,
            "score": self.score,
            "nodes": self.nodes,
            "waitingFor": self.waiting_for,
            "message": self.message,
            "candidates": [c.model_dump(by_alias=True) for c in self.candidates],
        }

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
            self._starts[key] = earliest_fit(
                self.fit.free, self.releases, count, replicas, presorted=True
            )
        return self._starts[key]

    def expected_start(self, count: int, replicas: int) -> float | None:
        """Seconds from now until the gang could start here, from known releases and the work
        already waiting for this pool; None when the known releases never make room."""
        at = self.earliest_fit(count, replicas)
        if at is None:
            return None
        return at + self.backlog / max(self.view.devices, 1)


def _signature(w: PendingWorkload, closed: tuple[str, ...]) -> tuple[object, ...]:
    """What decides a workload's feasibility and scores: workloads alike share one static
    evaluation per cycle. `closed` are the pools (sorted: the signature's repr orders the
    auction, so it must not depend on set order) whose namespace rule shuts its namespace
    out, so namespaces that no rule tells apart share too."""
    need, spec = w.spec.accelerator, w.spec
    weights = spec.weights
    return (
        closed,
        tuple(sorted(w.excluded_pools)),
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


def _static(w: PendingWorkload, pools: Sequence[_Pool], ns_labels: Mapping[str, str]) -> _Static:
    feasible: list[PoolView] = []
    infeasible: list[tuple[int, str, PoolView]] = []
    for p in pools:
        reasons = static_reasons(w, p.view, ns_labels)
        if reasons:
            infeasible.append((len(reasons), p.view.name, p.view))
        else:
            feasible.append(p.view)
    scored = score(w.spec, feasible)
    infeasible.sort(key=lambda t: (t[0], t[1]))
    best = max((s.throughput for s in scored), default=0.0)
    shape = (w.spec.replicas, w.spec.accelerator.count)
    return _Static(scored, [view for _, _, view in infeasible], best, shape)


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
    plain = _pass(queue, pools, {})
    admitted = _placed(plain)
    if len(admitted) < 2:
        return plain  # nothing to share
    for (_, st, _), d in zip(queue, plain, strict=True):
        st.count += d.placed
    prices = _auction(statics, _pools(snapshot, now))
    if not any(prices.values()):
        return plain
    priced = _pass(queue, _pools(snapshot, now), prices)
    return priced if _placed(priced) == admitted else plain


def _placed(decisions: list[Decision]) -> set[tuple[str, str]]:
    return {(d.namespace, d.name) for d in decisions if d.placed}


_Queue = Sequence[tuple[PendingWorkload, _Static, Mapping[str, str]]]


def _pass(queue: _Queue, pools: list[_Pool], prices: dict[str, float]) -> list[Decision]:
    state = _Pass(serial=2 if prices else 1, pools={p.view.name: p for p in pools}, prices=prices)
    return [_decide(w, st, ns, state) for w, st, ns in queue]


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
    w: PendingWorkload, st: _Static, ns_labels: Mapping[str, str], state: _Pass
) -> Decision:
    count, replicas = w.spec.accelerator.count, w.spec.replicas
    pools, prices = state.pools, state.prices
    ranked = st.order(count * replicas, prices)
    key = (state.serial, state.placements, id(ranked))
    if st.scan is None or st.scan.key != key:  # something was placed since: look again
        st.scan = _Scan(key, {})
    scan = st.scan

    def fits(i: int) -> bool:
        if i not in scan.known:
            scan.known[i] = pools[ranked[i].scored.pool.name].fit.fits(count, replicas)
        return scan.known[i]

    first = next((i for i in range(len(ranked)) if fits(i)), None)
    duration = w.spec.duration_seconds()
    notes: dict[str, str] = {}
    wait: Scored | None = None
    if duration is not None and ranked:
        wait = _better_by_waiting(w, st, pools, ranked, fits, first, duration, notes)
    chosen = ranked[first] if first is not None and wait is None else None

    shown = scan.rows if not notes else None
    if shown is None:
        rows = []
        for i, r in enumerate(ranked[: explain.MAX_CANDIDATES]):
            pool = r.scored.pool
            reasons = [] if fits(i) else [capacity_reason(w, pool, pools[pool.name].fit) or ""]
            if pool.name in notes:
                reasons.append(notes[pool.name])
            rows.append(_Row(r, fits(i), tuple(reasons)))
        shown = tuple(rows)
        if not notes:
            scan.rows = shown
    ruled_out = tuple(st.ruled_out[: explain.MAX_CANDIDATES - len(shown)])

    if chosen is not None:
        pool = chosen.scored.pool
        if prices and st.quota.get(pool.name, 0) > 0:
            st.quota[pool.name] -= 1
        target = pools[pool.name]
        nodes = target.fit.take(count, replicas) or []
        state.placements += 1
        if duration is not None:
            runtime = duration * st.best_throughput / chosen.scored.throughput
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
            message=f"placed on {pool.name} ({pool.model}), score {chosen.score:.1f}, "
            f"{replicas} x {count} {pool.resource}",
            _rows=shown,
            _ruled_out=ruled_out,
            _workload=w,
            _namespace_labels=ns_labels,
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
        message=_waiting_message(w, st, wait, notes),
        _rows=shown,
        _ruled_out=ruled_out,
        _workload=w,
        _namespace_labels=ns_labels,
    )


def _better_by_waiting(
    w: PendingWorkload,
    st: _Static,
    pools: dict[str, _Pool],
    ranked: list[_Ranked],
    fits: Callable[[int], bool],
    first: int | None,
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

    here = ranked[first].scored if first is not None else None
    now_done = runtime(here) if here is not None else math.inf
    best: tuple[float, Scored] | None = None
    for i, r in enumerate(ranked):
        s = r.scored
        if (here is not None and s.total <= here.total) or fits(i):
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
        return f"no pool can run this workload ({len(st.ruled_out)} ruled out, reasons below)"
    if wait is not None:
        return f"waiting for {wait.pool.name}: {notes[wait.pool.name]}"
    need = w.spec.accelerator
    return (
        f"waiting: no feasible pool has room for {w.spec.replicas} pods of {need.count} "
        f"devices now ({len(st.scored)} feasible)"
    )
