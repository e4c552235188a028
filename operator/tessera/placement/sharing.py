"""Sharing the fleet between AcceleratorQuotas within one plan: usage in normalised units,
admission within nominal plus borrowing, the fair-share order of the queue, and the victims
of a preemption. Pure; imports tessera.api and the placement snapshot only.

A quota's usage is replicas x devices x the unitsPerDevice of the pool each workload holds,
counted from the placed workloads the snapshot lists (Holding), so it stays true after a
restart. A workload is admitted on a pool when its quota's usage plus its own stays within
nominal plus what the quota may borrow, within the quota's device cap on that pool, and,
when that means borrowing, while no other quota is owed capacity on that pool: a quota is
owed a pool's capacity when a workload of it waits that would fit its nominal and could run
there (fair order puts it first, so capacity it cannot use this cycle stays idle for it
rather than lent; pools it cannot use at all stay open to borrowers)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, TypeVar

from tessera import api
from tessera.placement.fit import NodeFit

Rule = Literal["WithinQuota", "Reclaim"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class QuotaState:
    """One AcceleratorQuota as the plan sees it: its spec and the namespaces it governs."""

    name: str
    spec: api.AcceleratorQuotaSpec
    namespaces: frozenset[str]

    @property
    def limit(self) -> float:
        """Units the quota may use at most: nominal plus its borrowing limit (unset: any)."""
        borrow = self.spec.borrowing_limit
        return self.spec.nominal + (borrow if borrow is not None else float("inf"))


@dataclass(frozen=True, slots=True)
class Holding:
    """A placed workload's devices: (node, devices) per replica, with what preemption weighs."""

    namespace: str
    name: str
    pool: str
    nodes: tuple[tuple[str, int], ...]
    priority: int = 0
    placed_at: datetime | None = None  # None: not known, treated as long ago

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def devices(self) -> int:
        return sum(d for _, d in self.nodes)


@dataclass(frozen=True, slots=True)
class Victim:
    """A workload to evict so that a waiting one fits, and by which rule."""

    namespace: str
    name: str
    rule: Rule
    pool: str
    devices: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Preemption:
    """Victims on one pool after whose eviction the waiting workload fits there."""

    pool: str
    victims: tuple[Victim, ...]


@dataclass(slots=True)
class Usage:
    """Units and devices per pool held by each quota, as a pass places workloads."""

    units: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    devices: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, quota: str, pool: str, devices: int, units: float) -> None:
        self.units[quota] += units
        by_pool = self.devices[quota]
        by_pool[pool] = by_pool.get(pool, 0) + devices

    def copy(self) -> Usage:
        other = Usage()
        other.units.update(self.units)
        for quota, by_pool in self.devices.items():
            other.devices[quota] = dict(by_pool)
        return other


class Sharing:
    """The quotas of one plan and their usage as it places; one per pass (`fresh`)."""

    def __init__(
        self,
        quotas: Sequence[QuotaState],
        units: Mapping[str, float],
        holdings: Iterable[Holding],
    ) -> None:
        self.quotas = {q.name: q for q in quotas}
        self.units = dict(units)  # pool -> units per device
        self._quota_of: dict[str, str] = {}
        selected: dict[str, list[str]] = defaultdict(list)
        for q in sorted(quotas, key=lambda q: q.name):
            for ns in q.namespaces:
                selected[ns].append(q.name)
        # A namespace two quotas select is governed by neither, and its workloads wait: no
        # silent choice between them (both quotas report it).
        self.contested = {ns: tuple(qs) for ns, qs in selected.items() if len(qs) > 1}
        self._quota_of = {ns: qs[0] for ns, qs in selected.items() if len(qs) == 1}
        self.holdings = tuple(holdings)
        self.by_pool: dict[str, list[Holding]] = defaultdict(list)  # preemption looks by pool
        for h in self.holdings:
            self.by_pool[h.pool].append(h)
        self.base = Usage()
        for h in self.holdings:
            quota = self.quota_of(h.namespace)
            if quota is not None:
                self.base.add(quota, h.pool, h.devices, self.cost(h.pool, h.devices))
        self.usage = self.base.copy()
        # per quota, the pools where a waiting workload of it within its nominal could run
        self.owed: dict[str, set[str]] = defaultdict(set)

    def fresh(self) -> Sharing:
        """The same quotas and holdings with nothing placed yet: for another pass."""
        other = Sharing.__new__(Sharing)
        other.quotas, other.units, other._quota_of = self.quotas, self.units, self._quota_of
        other.contested = self.contested
        other.holdings, other.base, other.by_pool = self.holdings, self.base, self.by_pool
        other.usage, other.owed = self.base.copy(), defaultdict(set)
        return other

    def quota_of(self, namespace: str) -> str | None:
        return self._quota_of.get(namespace)

    def cost(self, pool: str, devices: int) -> float:
        return devices * self.units.get(pool, 0.0)

    def share(self, quota: str) -> float:
        """Usage over weighted nominal: the fair order serves the lowest first."""
        q = self.quotas[quota]
        entitled = q.spec.nominal * q.spec.weight
        used = self.usage.units[quota]
        return used / entitled if entitled > 0 else (float("inf") if used else 0.0)

    def refusal(self, namespace: str, pool: str, devices: int) -> str | None:
        """Why the namespace's quota does not admit `devices` more on `pool`, or None."""
        quota = self.quota_of(namespace)
        if quota is None:
            both = self.contested.get(namespace)
            if both:
                return f"namespace {namespace} is selected by quotas {' and '.join(both)}"
            return None
        q, used = self.quotas[quota], self.usage.units[quota]
        units = self.cost(pool, devices)
        cap = next((c.max_devices for c in q.spec.pools if c.pool == pool), None)
        held = self.usage.devices[quota].get(pool, 0)
        if cap is not None and held + devices > cap:
            return f"quota {quota} caps pool {pool} at {cap} devices ({held} held)"
        if used + units > q.limit + 1e-9:
            return (
                f"quota {quota} has {_fmt(used)} of {_fmt(q.limit)} units in use "
                f"(nominal {_fmt(q.spec.nominal)}); this needs {_fmt(units)}"
            )
        if used + units > q.spec.nominal + 1e-9:
            lenders = sorted(q for q, pools in self.owed.items() if q != quota and pool in pools)
            if lenders:
                return (
                    f"quota {quota} would borrow {_fmt(used + units - q.spec.nominal)} units "
                    f"above nominal while quota {lenders[0]} is owed capacity"
                )
        return None

    def take(self, namespace: str, pool: str, devices: int) -> None:
        quota = self.quota_of(namespace)
        if quota is not None:
            self.usage.add(quota, pool, devices, self.cost(pool, devices))

    def release(self, victim: Victim) -> None:
        """An evicted workload's devices and units no longer count for its quota."""
        quota = self.quota_of(victim.namespace)
        if quota is not None:
            units = self.cost(victim.pool, victim.devices)
            self.usage.add(quota, victim.pool, -victim.devices, -units)

    def waits(self, namespace: str, pools: Sequence[str], devices: int) -> None:
        """A workload of the namespace waits for one of `pools` (its feasible pools, best
        first); if it would fit its quota's nominal on the best, the quota is owed their
        capacity: others may not borrow there for the rest of the pass."""
        quota = self.quota_of(namespace)
        if quota is None or not pools:
            return
        if (
            self.usage.units[quota] + self.cost(pools[0], devices)
            <= self.quotas[quota].spec.nominal
        ):
            self.owed[quota].update(pools)


def fair_order(
    groups: Mapping[str | None, Sequence[T]], sharing: Sharing
) -> Iterator[tuple[T, Callable[[], None]]]:
    """The queue in fair-share order: each time, the next workload of the quota with the
    lowest share now (ties: quota name); within a quota, the order given (priority, then
    age). Workloads of no quota (None) go first, as without quotas. Each item comes with a
    callback to call once it is decided, which re-ranks its quota by its share then."""
    yield from ((w, _noop) for w in groups.get(None, ()))
    heads = [(sharing.share(q), q, 0) for q, items in groups.items() if q is not None and items]
    heapq.heapify(heads)
    while heads:
        _, quota, i = heapq.heappop(heads)
        assert quota is not None
        items = groups[quota]

        def decided(quota: str = quota, i: int = i) -> None:
            if i + 1 < len(groups[quota]):
                heapq.heappush(heads, (sharing.share(quota), quota, i + 1))

        yield items[i], decided


def _noop() -> None:
    return None


def _fmt(units: float) -> str:
    return f"{units:.2f}".rstrip("0").rstrip(".")


# --- Preemption ----------------------------------------------------------------------------


def victims(
    namespace: str,
    priority: int,
    devices: int,
    pools: Sequence[str],
    gang: Gang,
    sharing: Sharing,
    now: datetime,
    taken: set[str],
) -> Preemption | None:
    """The fewest, lowest-priority whole workloads to evict so that a waiting workload of
    `namespace` (its gang `devices` in all) fits on one of `pools` (its feasible pools, best
    first), or None. `gang` says the pods' devices and how many, and each pool's nodes.
    `taken` are victims already chosen this cycle, never chosen twice. Rules, from the
    preemptor's quota's policy:
    - WithinQuota: lower-priority workloads of its own quota;
    - Reclaim: while the quota stays within its nominal, workloads of quotas using more
      than their nominal (borrowers), most recently placed first, only while their quota
      still borrows.
    Workloads placed less than their quota's minRuntimeSeconds ago are never victims."""
    quota = sharing.quota_of(namespace)
    if quota is None:
        return None
    best: tuple[tuple[int, int, int], Preemption] | None = None
    for rank, pool in enumerate(pools):
        need = sharing.cost(pool, devices)
        candidates = _candidates(quota, priority, pool, need, sharing, taken)
        ordered = [
            (order, h, rule) for order, h, rule in candidates if _old_enough(h, sharing, now)
        ]
        chosen = _enough(sorted(ordered, key=lambda c: c[0]), pool, gang, sharing, quota, need)
        if chosen is None:
            continue
        picked = Preemption(
            pool,
            tuple(Victim(h.namespace, h.name, rule, pool, h.devices) for h, rule in chosen),
        )
        key = (sum(h.devices for h, _ in chosen), max(h.priority for h, _ in chosen), rank)
        if best is None or key < best[0]:
            best = (key, picked)
    return best[1] if best else None


def protected(
    namespace: str,
    priority: int,
    devices: int,
    pools: Sequence[str],
    sharing: Sharing,
    now: datetime,
) -> tuple[str, datetime] | None:
    """When no preemption was found: the workload the rules would let this one evict but
    for its quota's minRuntimeSeconds, and when it may be (the soonest), or None. What a
    waiting workload's message says it waits for (a time, not a countdown: the message is
    written only when it changes)."""
    quota = sharing.quota_of(namespace)
    if quota is None:
        return None
    soonest: tuple[datetime, str] | None = None
    for pool in pools:
        need = sharing.cost(pool, devices)
        for _, h, _ in _candidates(quota, priority, pool, need, sharing, set()):
            if h.placed_at is None or _runtime_left(h, sharing, now) <= 0:
                continue
            owner = sharing.quota_of(h.namespace)
            assert owner is not None
            floor = sharing.quotas[owner].spec.preemption.min_runtime_seconds
            at = h.placed_at + timedelta(seconds=floor)
            if soonest is None or (at, h.key) < soonest:
                soonest = (at, h.key)
    return (soonest[1], soonest[0]) if soonest else None


def _candidates(
    quota: str, priority: int, pool: str, need: float, sharing: Sharing, taken: set[str]
) -> list[tuple[tuple[object, ...], Holding, Rule]]:
    """The holdings on `pool` the quota's policy lets a waiting workload of `priority` and
    `need` units evict (their minimum run time aside), each with its sort key."""
    policy = sharing.quotas[quota].spec.preemption
    within = sharing.usage.units[quota] + need <= sharing.quotas[quota].spec.nominal + 1e-9
    out: list[tuple[tuple[object, ...], Holding, Rule]] = []
    for h in sharing.by_pool.get(pool, ()):
        if h.key in taken:
            continue
        owner = sharing.quota_of(h.namespace)
        if owner == quota and policy.within_quota == "LowerPriority" and h.priority < priority:
            out.append(((0, h.priority, h.devices, _newest(h), h.key), h, "WithinQuota"))
        elif (
            owner is not None
            and owner != quota
            and within
            and policy.reclaim == "Any"
            and sharing.usage.units[owner] > sharing.quotas[owner].spec.nominal + 1e-9
        ):
            out.append(((1, _newest(h), h.priority, h.devices, h.key), h, "Reclaim"))
    return out


def _enough(
    candidates: Sequence[tuple[tuple[object, ...], Holding, Rule]],
    pool: str,
    gang: Gang,
    sharing: Sharing,
    quota: str,
    need: float,
) -> list[tuple[Holding, Rule]] | None:
    """Candidates in order until the gang fits and the quota admits it, then each dropped
    again (last first) if the rest still do; None when all of them are not enough. The room
    made and the units given back are kept as running sums while adding: a pool of
    thousands of small workloads made them from scratch most of a cycle's time."""
    chosen: list[tuple[Holding, Rule]] = []
    evicted = _Evicted(sharing, gang, pool)
    for _, h, rule in candidates:
        if rule == "Reclaim" and not evicted.still_borrows(h):
            continue
        chosen.append((h, rule))
        evicted.add(h, rule)
        if evicted.works(quota, need):
            break
    else:
        return None
    for item in reversed(list(chosen)):
        rest = [c for c in chosen if c is not item]
        if rest and _Evicted(sharing, gang, pool, rest).works(quota, need):
            chosen = rest
    return chosen


@dataclass(frozen=True, slots=True)
class Gang:
    """A waiting workload's pods (devices each, how many) and each pool's nodes as the plan
    leaves them (tessera.placement.fit.NodeFit)."""

    count: int
    replicas: int
    fit_of: Callable[[str], NodeFit]


class _Evicted:
    """Victims chosen so far on one pool: the pods of the gang's size its nodes then hold,
    the units each quota gives back, and the preemptor's own quota's among them."""

    def __init__(
        self,
        sharing: Sharing,
        gang: Gang,
        pool: str,
        chosen: Sequence[tuple[Holding, Rule]] = (),
    ) -> None:
        self.sharing, self.gang = sharing, gang
        self.fit = gang.fit_of(pool)
        self.room = self.fit.room(gang.count)
        self.freed: dict[str, int] = defaultdict(int)
        self.gone: dict[str, float] = defaultdict(float)
        self.own = 0.0
        for h, rule in chosen:
            self.add(h, rule)

    def add(self, h: Holding, rule: Rule) -> None:
        count = self.gang.count
        for node, d in h.nodes:
            free = self.fit.free.get(node)
            if free is not None:  # a node not ready gives nothing back to new pods
                before = free + self.freed[node]
                self.room += (before + d) // count - before // count
            self.freed[node] += d
        units = self.sharing.cost(h.pool, h.devices)
        owner = self.sharing.quota_of(h.namespace)
        if owner is not None:
            self.gone[owner] += units
        if rule == "WithinQuota":
            self.own += units

    def works(self, quota: str, need: float) -> bool:
        limit = self.sharing.quotas[quota].limit
        within = self.sharing.usage.units[quota] - self.own + need <= limit + 1e-9
        return within and self.room >= self.gang.replicas

    def still_borrows(self, h: Holding) -> bool:
        """Whether h's quota still uses more than its nominal after the victims so far."""
        owner = self.sharing.quota_of(h.namespace)
        assert owner is not None
        left = self.sharing.usage.units[owner] - self.gone[owner]
        return left > self.sharing.quotas[owner].spec.nominal + 1e-9


def _old_enough(h: Holding, sharing: Sharing, now: datetime) -> bool:
    return sharing.quota_of(h.namespace) is not None and _runtime_left(h, sharing, now) <= 0


def _runtime_left(h: Holding, sharing: Sharing, now: datetime) -> float:
    """Seconds until h may be evicted: its quota's minRuntimeSeconds less its run so far."""
    quota = sharing.quota_of(h.namespace)
    if quota is None or h.placed_at is None:
        return 0.0
    floor = sharing.quotas[quota].spec.preemption.min_runtime_seconds
    return floor - (now - h.placed_at).total_seconds()


def _newest(h: Holding) -> float:
    """Sorts the most recently placed first."""
    return -h.placed_at.timestamp() if h.placed_at else 0.0
