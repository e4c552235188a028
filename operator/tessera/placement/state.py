"""The planning cycle's working state: each kind of workload's feasible pools and orders,
each pool's free devices and releases as the cycle places. Pure; no clocks or I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from tessera import api
from tessera.placement.explain import MAX_CANDIDATES
from tessera.placement.feasibility import capacity_reason
from tessera.placement.fit import NodeFit, earliest_fit
from tessera.placement.scoring import Scored, breakdown, maker
from tessera.placement.snapshot import PendingWorkload, PoolView


class Ranked(NamedTuple):
    """A feasible pool for one kind of workload, with its contention this cycle (a named
    tuple, as Scored is: a cycle makes one for every feasible pair)."""

    scored: Scored
    contention: float  # points: devices x the pool's shadow price x 100
    score: float  # the objective's score less the contention

    @property
    def breakdown(self) -> api.ScoreBreakdown:
        """Made when read: a cycle ranks every feasible pool, an explanation shows a few."""
        return breakdown(self.scored, self.contention)


_ranked = maker(Ranked)


@dataclass(slots=True)
class Scan:
    """Which pools fit one kind of workload: valid until the pass places anything."""

    key: tuple[int, int, int]  # pass, placements so far in it, the order looked at
    ranked: list[Ranked]  # the order looked at
    pools: dict[str, PoolWork]
    shape: tuple[int, int]  # devices per pod, replicas
    unlocked: Mapping[str, frozenset[str]]  # Static.unlocked
    known: dict[int, bool] = field(default_factory=dict)  # by index into ranked: fits now
    rows: tuple[Row, ...] | None = None  # the explanation, less any decision's notes

    def fits(self, i: int) -> bool:
        """Whether the gang fits now on the pool at `i` in the order looked at."""
        known = self.known.get(i)
        if known is None:
            count, replicas = self.shape
            name = self.ranked[i].scored.pool.name
            extra = self.unlocked.get(name, ())
            known = self.known[i] = self.pools[name].fit.fits_with(count, replicas, extra)
        return known


@dataclass(slots=True)
class Pass:
    """One pass over the queue: the pools' working state and the prices it ranks with."""

    serial: int
    pools: dict[str, PoolWork]
    prices: dict[str, float]
    placements: int = 0
    shown: int | None = MAX_CANDIDATES  # candidates a decision lists; None: every pool


@dataclass(frozen=True, slots=True)
class Speeds:
    throughput: tuple[float, ...]
    total: tuple[float, ...]
    fastest_first: tuple[int, ...]


@dataclass(slots=True)
class Static:
    """What does not change while the cycle runs, for one kind of workload."""

    scored: list[Scored]
    # the pools ruled out that an explanation lists, in name order (ruled_out: nearest first)
    misses: tuple[PoolView, ...]
    ruled_out_count: int  # with the pools the workload's selection chose away
    chosen_away: int  # of those, the pools its own pools, vendors or models chose away
    best_throughput: float
    shape: tuple[int, int]  # replicas, devices per pod
    cost_only: bool = False  # the objective weighs cost alone: bounded by completion time
    # per pool, the tainted nodes this kind's own tolerations let it use (PoolView.unlocked)
    unlocked: dict[str, frozenset[str]] = field(default_factory=dict)
    count: int = 0  # workloads of this kind the first pass placed
    quota: dict[str, int] = field(default_factory=dict)  # the auction's share per pool
    ranked: dict[bool, list[Ranked]] = field(default_factory=dict)  # by: contention priced
    orders: dict[frozenset[str], list[Ranked]] = field(default_factory=dict)  # by: quota open
    scan: Scan | None = None  # the last look at which pools fit this kind
    by_speed: dict[int, Speeds] = field(default_factory=dict)  # by id(order)
    # ruled_out[:n], by n
    cuts: dict[int | None, tuple[PoolView, ...]] = field(default_factory=dict)
    no_pool: dict[str, str] = field(default_factory=dict)  # "no pool can run" by namespace
    # the explanation's row of each pool shown, by (id(order), index), with the pool's fit
    # and its version when made: reused while that pool is unchanged
    rows: dict[tuple[int, int], tuple[NodeFit, int, Row]] = field(default_factory=dict)
    # how many reasons rule a pool out, for this kind (feasibility.static_reasons): the
    # misses are put in order when first listed; most kinds list none (enough pools pass)
    reasons: Callable[[PoolView], int] | None = None
    _ruled_out: tuple[PoolView, ...] | None = None

    @property
    def ruled_out(self) -> tuple[PoolView, ...]:
        """The misses, nearest first: fewest reasons, then name."""
        if self._ruled_out is None:
            count = self.reasons
            key = (lambda v: (count(v), v.name)) if count else (lambda v: (0, v.name))
            self._ruled_out = tuple(sorted(self.misses, key=key))
        return self._ruled_out

    def nearest_misses(self, n: int | None) -> tuple[PoolView, ...]:
        """The first n of ruled_out (all of them for None), one tuple per n for the cycle."""
        if n == 0:
            return ()
        cut = self.cuts.get(n)
        if cut is None:
            cut = self.cuts[n] = self.ruled_out[:n]
        return cut

    def speeds(self, ranked: list[Ranked]) -> Speeds:
        """Throughputs and totals of `ranked` (one of this kind's orders, kept for the
        cycle) in its order, and its indices fastest first."""
        key = id(ranked)
        if key not in self.by_speed:
            tp = [r.scored.throughput for r in ranked]
            self.by_speed[key] = Speeds(
                tuple(tp),
                tuple(r.scored.total for r in ranked),
                tuple(sorted(range(len(ranked)), key=lambda i: -tp[i])),
            )
        return self.by_speed[key]

    def rank(self, devices: int, prices: dict[str, float]) -> list[Ranked]:
        """Feasible pools by score less contention, best first; equal to a hundredth of a
        point, the better objective score first (the marginal workload is indifferent, and
        the oldest should not get the slower pool), then the pool name."""
        key = bool(prices)
        if key not in self.ranked and not prices:
            # no contention: each score is the objective's, and `scored` is in this order
            self.ranked[key] = [_ranked((s, 0.0, s.total)) for s in self.scored]
        if key not in self.ranked:
            rows = []
            for s in self.scored:
                price = prices.get(s.pool.name)
                if not price:  # an uncontended pool: the score is the objective's
                    rows.append(_ranked((s, 0.0, s.total)))
                    continue
                contention = round(100.0 * devices * price, 4)
                rows.append(_ranked((s, contention, round(s.total - contention, 4))))
            # `scored` is in (objective score, name) order, and the sort is stable
            rows.sort(key=_rounded_score, reverse=True)
            self.ranked[key] = rows
        return self.ranked[key]

    def order(self, devices: int, prices: dict[str, float]) -> list[Ranked]:
        """The order a workload of this kind tries pools in: with prices, the pools the
        auction assigned this kind to and that have quota left come first, the objective's
        best of them to the oldest; then the rest by score less contention."""
        ranked = self.rank(devices, prices)
        quota = frozenset(p for p, k in self.quota.items() if k > 0) if prices else frozenset()
        if not quota:
            return ranked
        if quota not in self.orders:
            # Two lists, not one sort on a key of two terms: the quota's pools are one or two
            # of some thirty, and a key made for each was most of this method's time.
            first = [r for r in ranked if r.scored.pool.name in quota]
            first.sort(key=_objective_score, reverse=True)  # stable: equal ones keep order
            self.orders[quota] = first + [r for r in ranked if r.scored.pool.name not in quota]
        return self.orders[quota]


def _rounded_score(r: Ranked) -> float:
    return round(r.score, 2)


def _objective_score(r: Ranked) -> float:
    return r.scored.total


class Row(NamedTuple):
    """A feasible pool as one workload saw it when it was decided (a named tuple, as Ranked
    is: a cycle makes one for each pool each decision shows)."""

    ranked: Ranked
    fits_now: bool
    reasons: tuple[str, ...]


new_row = maker(Row)


@dataclass(slots=True)
class PoolWork:
    """One pool's working state during the cycle."""

    view: PoolView
    fit: NodeFit
    releases: list[tuple[float, str, int]]  # seconds from now, node, devices
    backlog: float = 0.0  # device-seconds of workloads that chose to wait for this pool
    # by gang shape, while the pool is unchanged (`_version`, the fit's version when made)
    _starts: dict[tuple[int, int], float | None] = field(default_factory=dict)
    _reasons: dict[tuple[int, int], str | None] = field(default_factory=dict)
    _version: int = 0

    def _unchanged(self) -> None:
        """Forgets what was worked out per shape when the pool has changed since."""
        if self._version != self.fit.version:
            self._starts, self._reasons, self._version = {}, {}, self.fit.version

    def capacity_reason(self, workload: PendingWorkload) -> str | None:
        """feasibility.capacity_reason: the same for every workload of one shape while the
        pool is unchanged, unless tainted nodes are in it (the workload's tolerations decide
        which of them count). Every decision explains its first pools, and the pools that
        cannot take a gang now are most of them in a full fleet (making their reasons again
        for each kind was a seventh of the decisions' time at 10,000 pending)."""
        if self.view.gated:
            return capacity_reason(workload, self.view, self.fit)
        self._unchanged()
        key = (workload.spec.accelerator.count, workload.spec.replicas)
        if key not in self._reasons:
            self._reasons[key] = capacity_reason(workload, self.view, self.fit)
        return self._reasons[key]

    def expected_start(self, count: int, replicas: int) -> float | None:
        """Seconds from now until the gang could start here, from known releases and the work
        already waiting for this pool; None when the known releases never make room. The
        release it waits for is the same for every workload of one shape while the pool is
        unchanged (a planning cycle asks for every pool a waiting workload would rather have)."""
        self._unchanged()
        key = (count, replicas)
        if key in self._starts:
            at = self._starts[key]
        else:
            fit = self.fit
            at = self._starts[key] = earliest_fit(
                fit.free, self.releases, count, replicas, presorted=True, pods_now=fit.room(count)
            )
        if at is None:
            return None
        return at + self.backlog / max(self.view.devices, 1)
