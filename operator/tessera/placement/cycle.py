"""The planning cycle: plan(pending, snapshot, now) -> one Decision per workload, in queue order.
Imports tessera.api and the placement modules only; no clocks, randomness, environment or I/O."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from tessera import api
from tessera.placement import explain
from tessera.placement.contention import Demand, shadow_prices
from tessera.placement.feasibility import capacity_reason, selection_reasons, static_reasons
from tessera.placement.fit import NodeFit, earliest_fit
from tessera.placement.scoring import Scored, score, weights_for
from tessera.placement.snapshot import PendingWorkload, PoolView, Snapshot

# Waiting for a faster pool must save at least this share of the time to finish by running
# now on the best pool that fits: estimates are rough, and a placement now is certain.
WAIT_MARGIN = 0.1

_NO_NOTES: Mapping[str, str] = MappingProxyType({})
_duration = functools.lru_cache(maxsize=4096)(api.parse_duration)  # workloads share a few


def run_seconds(duration: float, best_throughput: float, throughput: float) -> float:
    """How long a run takes on a pool: estimatedDuration is for the fastest feasible pool
    (`best_throughput`), so a pool of `throughput` takes proportionally longer. The one rule
    for when placed devices come back, within a plan and in every later one."""
    return duration * best_throughput / throughput if throughput > 0 else math.inf


# The `cost` objective (weights on cost alone), given an estimated duration, takes the pool
# with the lowest price per unit of work among those expected to finish within this share
# of the soonest expected finish (known releases, work waiting, the run at the pool's speed),
# waiting for it if it has no room now. Measured in bench/quality.py: 0.25 saves too little,
# 0.6 and up costs more than 10 % in completion time at half load.
COST_SLACK = 0.5


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
    ranked: list[_Ranked]  # the order looked at
    pools: dict[str, _Pool]
    shape: tuple[int, int]  # devices per pod, replicas
    known: dict[int, bool] = field(default_factory=dict)  # by index into ranked: fits now
    rows: tuple[_Row, ...] | None = None  # the explanation, less any decision's notes

    def fits(self, i: int) -> bool:
        """Whether the gang fits now on the pool at `i` in the order looked at."""
        known = self.known.get(i)
        if known is None:
            count, replicas = self.shape
            pool = self.pools[self.ranked[i].scored.pool.name]
            known = self.known[i] = pool.fit.fits(count, replicas)
        return known


@dataclass(slots=True)
class _Pass:
    """One pass over the queue: the pools' working state and the prices it ranks with."""

    serial: int
    pools: dict[str, _Pool]
    prices: dict[str, float]
    placements: int = 0


@dataclass(frozen=True, slots=True)
class _Speeds:
    throughput: tuple[float, ...]
    total: tuple[float, ...]
    fastest_first: tuple[int, ...]


@dataclass(slots=True)
class _Static:
    """What does not change while the cycle runs, for one kind of workload."""

    scored: list[Scored]
    ruled_out: tuple[PoolView, ...]  # nearest misses first: fewest reasons, then name
    ruled_out_count: int  # with the pools the workload's selection chose away
    chosen_away: int  # of those, the pools its own pools, vendors or models chose away
    best_throughput: float
    shape: tuple[int, int]  # replicas, devices per pod
    cost_only: bool = False  # the objective weighs cost alone: bounded by completion time
    count: int = 0  # workloads of this kind the first pass placed
    quota: dict[str, int] = field(default_factory=dict)  # the auction's share per pool
    ranked: dict[bool, list[_Ranked]] = field(default_factory=dict)  # by: contention priced
    orders: dict[frozenset[str], list[_Ranked]] = field(default_factory=dict)  # by: quota open
    scan: _Scan | None = None  # the last look at which pools fit this kind
    by_speed: dict[int, _Speeds] = field(default_factory=dict)  # by id(order)
    cuts: dict[int, tuple[PoolView, ...]] = field(default_factory=dict)  # ruled_out[:n], by n
    no_pool: dict[str, str] = field(default_factory=dict)  # "no pool can run" by namespace
    # the explanation's row of each pool shown, by (id(order), index), with the pool's fit
    # and its version when made: reused while that pool is unchanged
    rows: dict[tuple[int, int], tuple[NodeFit, int, _Row]] = field(default_factory=dict)

    def nearest_misses(self, n: int) -> tuple[PoolView, ...]:
        """The first n of ruled_out, one tuple per n for the cycle."""
        cut = self.cuts.get(n)
        if cut is None:
            cut = self.cuts[n] = self.ruled_out[:n]
        return cut

    def speeds(self, ranked: list[_Ranked]) -> _Speeds:
        """Throughputs and totals of `ranked` (one of this kind's orders, kept for the
        cycle) in its order, and its indices fastest first."""
        key = id(ranked)
        if key not in self.by_speed:
            tp = [r.scored.throughput for r in ranked]
            self.by_speed[key] = _Speeds(
                tuple(tp),
                tuple(r.scored.total for r in ranked),
                tuple(sorted(range(len(ranked)), key=lambda i: -tp[i])),
            )
        return self.by_speed[key]

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
    # Seconds the run is expected to take on the chosen pool (run_seconds), None without an
    # estimatedDuration: its devices come back that long after the decision, in this plan
    # and, through status.expectedFinish, in every later one.
    runtime: float | None = None
    _rows: tuple[_Row, ...] = field(default=(), repr=False, compare=False)
    _ruled_out: tuple[PoolView, ...] = field(default=(), repr=False, compare=False)
    _notes: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # the cost objective's pools shown that would finish too late: the soonest finish, then
    # each such pool's name and finish; their notes are written when the explanation is read
    _late: tuple[str | float, ...] = field(default=(), repr=False, compare=False)
    _workload: PendingWorkload | None = field(default=None, repr=False, compare=False)
    _namespace_labels: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def assignments(self) -> tuple[api.Assignment, ...]:
        return tuple(api.Assignment(replica=i, node=n) for i, n in enumerate(self.nodes))

    @functools.cached_property
    def candidates(self) -> tuple[api.Candidate, ...]:
        """The pools considered, best first, at most MAX_CANDIDATES: feasible ones in the
        order the workload took them, then the nearest misses with every reason."""
        notes = _late_notes(self._late)
        notes.update(self._notes)
        rows = [
            explain.candidate(
                r.ranked.scored.pool.name,
                r.ranked.scored.pool.model,
                feasible=True,
                fits_now=r.fits_now,
                score=r.ranked.score,
                breakdown=r.ranked.breakdown,
                reasons=(*r.reasons, notes[name]) if name in notes else r.reasons,
            )
            for r in self._rows
            for name in (r.ranked.scored.pool.name,)
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
    """The near misses are the infeasible pools the workload's own selection lets through
    (a pool short of memory or fp8 says something); pools it chose away are listed only
    when no pool passes that selection. "vendor amd is not allowed" for every AMD pool
    would say nothing the spec does not, and make every status write larger."""
    feasible: list[PoolView] = []
    near: list[tuple[int, str, PoolView]] = []
    away: list[tuple[int, str, PoolView]] = []
    for p in pools:
        reasons = static_reasons(w, p.view, ns_labels)
        if not reasons:
            feasible.append(p.view)
        else:
            chosen_away = bool(selection_reasons(w, p.view))
            (away if chosen_away else near).append((len(reasons), p.view.name, p.view))
    scored = score(w.spec, feasible)
    misses = sorted(near if feasible or near else away, key=lambda t: (t[0], t[1]))
    best = max((s.throughput for s in scored), default=0.0)
    shape = (w.spec.replicas, w.spec.accelerator.count)
    wp, wc, we = weights_for(w.spec)
    cost_only = wc > 0 and wp == 0 and we == 0
    ruled_out = tuple(view for _, _, view in misses)
    return _Static(scored, ruled_out, len(near) + len(away), len(away), best, shape, cost_only)


def _pools(snapshot: Snapshot, now: datetime) -> list[_Pool]:
    """Every pool's working state, fresh from the snapshot."""
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


def _copies(pools: Sequence[_Pool]) -> list[_Pool]:
    """Fresh working states with the same starting point: the views are shared (they do
    not change within a plan), the free devices and releases copied. Building them from
    the snapshot again for each pass was a fifth of a large burst's cycle (cProfile)."""
    return [_Pool(view=p.view, fit=p.fit.copy(), releases=list(p.releases)) for p in pools]


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
    untouched = _pools(snapshot, now)  # the auction reads it, then the second pass takes it
    pools = _copies(untouched)
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
    prices = _auction(statics, untouched)
    if not any(prices.values()):
        return plain
    priced = _pass(queue, untouched, prices)
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
        st.scan = _Scan(key, ranked, pools, (count, replicas))
    scan = st.scan
    fits = scan.fits

    estimate = w.spec.estimated_duration
    duration = _duration(estimate) if estimate else None
    notes: dict[str, str] = {}
    late: _Late | None = None
    wait: Scored | None = None
    if duration is not None and ranked and st.cost_only:
        first, wait, late = _cheapest_in_time(w, st, pools, ranked, fits, duration, notes)
    else:
        first = None
        for i in range(len(ranked)):
            if fits(i):
                first = i
                break
        if duration is not None and ranked:
            wait = _better_by_waiting(w, st, pools, ranked, fits, first, duration, notes)
    chosen = ranked[first] if first is not None and wait is None else None

    shown = scan.rows
    if shown is None:  # a decision's notes are added when its explanation is read
        rows = []
        for i, r in enumerate(ranked[: explain.MAX_CANDIDATES]):
            fit = pools[r.scored.pool.name].fit
            seen = st.rows.get((id(ranked), i))
            if seen is not None and seen[0] is fit and seen[1] == fit.version:
                row = seen[2]  # the pool has not changed since: the same row
                scan.known[i] = row.fits_now
            else:
                now = fits(i)
                reasons = () if now else (capacity_reason(w, r.scored.pool, fit) or "",)
                row = _Row(r, now, reasons)
                st.rows[id(ranked), i] = (fit, fit.version, row)
            rows.append(row)
        shown = scan.rows = tuple(rows)
    ruled_out = st.nearest_misses(explain.MAX_CANDIDATES - len(shown))
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
        if prices and st.quota.get(pool.name, 0) > 0:
            st.quota[pool.name] -= 1
        target = pools[pool.name]
        nodes = target.fit.take(count, replicas) or []
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
            message=f"placed on {pool.name} ({pool.model}), score {chosen.score:.1f}, "
            f"{replicas} x {count} {pool.resource}",
            _rows=shown,
            _ruled_out=ruled_out,
            _notes=notes or _NO_NOTES,
            _late=late_shown,
            _workload=w,
            _namespace_labels=ns_labels,
        )

    if wait is not None and duration is not None:
        pools[wait.pool.name].backlog += (
            replicas * count * run_seconds(duration, st.best_throughput, wait.throughput)
        )
    return Decision(
        namespace=w.namespace,
        name=w.name,
        placed=False,
        waiting_for=wait.pool.name if wait else None,
        message=_waiting_message(w, st, wait, notes, ns_labels),
        _rows=shown,
        _ruled_out=ruled_out,
        _notes=notes or _NO_NOTES,
        _late=late_shown,
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
        return run_seconds(duration, st.best_throughput, s.throughput)

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


@dataclass(frozen=True, slots=True)
class _Late:
    """What the cost objective's notes on pools that would finish too late are built from."""

    pick: int
    bound: float
    soonest: float
    runs: list[float]
    done: dict[int, float]


def _late_notes(late: tuple[str | float, ...]) -> dict[str, str]:
    """The notes on the pools shown that would finish more than COST_SLACK after the soonest,
    from a decision's `_late`."""
    if not late:
        return {}
    soonest = explain.hours(float(late[0]))
    return {
        str(name): f"expected to finish in {explain.hours(float(t))}, more than "
        f"{COST_SLACK:.0%} after the soonest ({soonest})"
        for name, t in zip(late[1::2], late[2::2], strict=True)
    }


def _cheapest_in_time(
    w: PendingWorkload,
    st: _Static,
    pools: dict[str, _Pool],
    ranked: list[_Ranked],
    fits: Callable[[int], bool],
    duration: float,
    notes: dict[str, str],
) -> tuple[int | None, Scored | None, _Late | None]:
    """For the cost objective: the first pool in ranked order (cheapest work first, after
    contention) whose expected completion is within COST_SLACK of the soonest expected
    completion over the feasible pools; pools whose start is unknown are left out, and when
    every one is, the first that fits now. Returns (index to place on now, None) or (None,
    the pool to wait for), and what the notes on the pools that would finish too late are
    built from when the explanation is read."""
    count, replicas = w.spec.accelerator.count, w.spec.replicas
    speeds = st.speeds(ranked)
    work = duration * st.best_throughput
    runs = [work / t if t > 0 else math.inf for t in speeds.throughput]
    done: dict[int, float] = {}  # expected finish, by index into ranked

    # the soonest finish: fastest pools first; a finish is never before its run time
    soonest = math.inf
    for i in speeds.fastest_first:
        run = runs[i]
        if run >= soonest:
            break
        if fits(i):
            done[i] = run
        else:
            start = pools[ranked[i].scored.pool.name].expected_start(count, replicas)
            done[i] = math.inf if start is None else start + run
        soonest = min(soonest, done[i])
    if math.isinf(soonest):
        for i in range(len(ranked)):
            if fits(i):
                return i, None, None
        return None, None, None
    bound = soonest * (1 + COST_SLACK)
    pick = -1
    for i, run in enumerate(runs):
        if run > bound:
            continue
        end = done.get(i)
        if end is None:
            if fits(i):
                end = run
            else:
                start = pools[ranked[i].scored.pool.name].expected_start(count, replicas)
                end = math.inf if start is None else start + run
            done[i] = end
        if end <= bound:
            pick = i
            break
    if not fits(pick):  # wait only for a pool cheaper than every one in time that fits now
        totals = speeds.total
        total = totals[pick]
        for i, run in enumerate(runs):
            if run <= bound and totals[i] >= total and fits(i):
                pick = i
                break
    late = _Late(pick, bound, soonest, runs, done)
    if fits(pick):
        return pick, None, late
    notes[ranked[pick].scored.pool.name] = (
        f"expected to finish in {explain.hours(done[pick])} here, the cheapest within "
        f"{COST_SLACK:.0%} of the soonest ({explain.hours(soonest)})"
    )
    return None, ranked[pick].scored, late


def _waiting_message(
    w: PendingWorkload,
    st: _Static,
    wait: Scored | None,
    notes: dict[str, str],
    ns_labels: Mapping[str, str],
) -> str:
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
    return (
        f"waiting: no feasible pool has room for {w.spec.replicas} pods of {need.count} "
        f"devices now ({len(st.scored)} feasible)"
    )
