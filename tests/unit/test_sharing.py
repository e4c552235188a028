"""Quotas in the plan (tessera.placement.sharing): units across generations, admission
within nominal plus borrowing, the fair order, preemption's victims; then Hypothesis
properties over random fleets, holdings and queues."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from builders import NOW, pool, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera import api, catalog
from tessera.placement import Decision, PendingWorkload, PoolState, Snapshot, plan
from tessera.placement.sharing import Holding, QuotaState

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def quota(name: str, nominal: float, *namespaces: str, **spec: object) -> QuotaState:
    body = {"namespaceSelector": {"matchLabels": {"team": name}}, "nominal": nominal, **spec}
    return QuotaState(name, api.AcceleratorQuotaSpec.model_validate(body), frozenset(namespaces))


def held(
    ns: str,
    name: str,
    where: PoolState,
    node: int,
    devices: int,
    priority: int = 0,
    age: float = 3600,
) -> Holding:
    return Holding(
        ns,
        name,
        where.name,
        ((f"{where.name}-{node}", devices),),
        priority,
        NOW - timedelta(seconds=age),
    )


def fleet(
    pools: Sequence[PoolState], quotas: Sequence[QuotaState], holdings: Sequence[Holding] = ()
) -> Snapshot:
    """The pools with the holdings' devices taken from their nodes."""
    used: dict[str, int] = {}
    for h in holdings:
        for node, d in h.nodes:
            used[node] = used.get(node, 0) + d
    fixed = []
    for p in pools:
        nodes = tuple(
            n.model_copy(update={"free": max(0, n.free - used.get(n.name, 0))}) for n in p.nodes
        )
        fixed.append(p.model_copy(update={"nodes": nodes}))
    return Snapshot(pools=tuple(fixed), quotas=tuple(quotas), holdings=tuple(holdings))


def by_name(decisions: Sequence[Decision]) -> dict[str, Decision]:
    return {d.name: d for d in decisions}


def test_units_count_the_reference_devices_throughput() -> None:
    h100, a100 = pool("h100", 1, 8), pool("a100", 1, 8)
    assert h100.accelerator.units_per_device == 1.0
    assert a100.accelerator.units_per_device == round(312 / 989.4, 4)
    assert pool("b200", 1, 8).accelerator.units_per_device == round(2250 / 989.4, 4)
    own = pool("h100", 1, 8, accelerator={"unitsPerDevice": 0.5})
    assert own.accelerator.units_per_device == 0.5
    assert catalog.units_per_device(a100.accelerator, reference="A100-SXM4-80GB") == 1.0


def test_a_quota_across_generations_counts_units_not_devices() -> None:
    """Nominal 4 units: four H100s, or the A100s that make four H100s' throughput (12.68);
    a raw-device quota of 4 would allow only four A100s."""
    h100, a100 = pool("h100", 1, 8), pool("a100", 2, 8)
    team = quota("team", 4.0, "team", borrowingLimit=0)
    queue = [
        workload("big", "team", count=8, pools=["a100"], age=30),
        workload("more", "team", count=4, pools=["a100"], age=20),
        workload("h", "team", count=1, pools=["h100"], age=10),
    ]
    got = by_name(plan(queue, fleet([h100, a100], [team]), NOW))
    assert got["big"].placed and got["more"].placed  # 12 A100s = 3.78 units
    assert not got["h"].placed and got["h"].for_quota  # 3.78 + 1 > 4
    assert got["h"].message.startswith("waiting for quota: quota team has 3.78 of 4 units")
    assert got["big"].quota == "team"


def test_borrowing_takes_idle_capacity_only_up_to_the_limit() -> None:
    h100 = pool("h100", 2, 8)
    a = quota("a", 4.0, "a", borrowingLimit=4)
    b = quota("b", 8.0, "b")
    queue = [workload(f"a{i}", "a", count=4, pools=["h100"], age=10 - i) for i in range(3)]
    got = by_name(plan(queue, fleet([h100], [a, b]), NOW))
    assert [got[f"a{i}"].placed for i in range(3)] == [True, True, False]
    assert "8 of 8 units" in got["a2"].message


def test_borrowing_stops_while_another_quota_is_owed() -> None:
    """b waits within its nominal for room it cannot get now: a may not borrow it."""
    h100 = pool("h100", 2, 8)
    a = quota("a", 4.0, "a")
    b = quota("b", 24.0, "b")
    holdings = [held("b", "run", h100, 0, 8)]
    queue = [
        workload("b-next", "b", count=8, replicas=2, pools=["h100"], age=5),  # no room now
        workload("a-in", "a", count=4, pools=["h100"], age=4),
        workload("a-borrow", "a", count=4, pools=["h100"], age=3),
    ]
    got = by_name(plan(queue, fleet([h100], [a, b], holdings), NOW))
    assert got["a-in"].placed
    assert not got["a-borrow"].placed
    assert "while quota b is owed capacity" in got["a-borrow"].message


def test_fair_order_serves_the_quota_furthest_below_its_share() -> None:
    """Room for one: b uses nothing of its nominal, a half of its; b goes first even though
    a's workload is older and of higher priority."""
    h100 = pool("h100", 1, 8)
    a = quota("a", 8.0, "a", preemption={"withinQuota": "Never"})
    b = quota("b", 8.0, "b")
    holdings = [held("a", "run", h100, 0, 4)]
    queue = [
        workload("a-old", "a", count=4, priority=9, age=100),
        workload("b-new", "b", count=4, age=1),
    ]
    got = by_name(plan(queue, fleet([h100], [a, b], holdings), NOW))
    assert got["b-new"].placed and not got["a-old"].placed


def test_reclaim_evicts_the_most_recent_borrower_only() -> None:
    h100 = pool("h100", 2, 8)
    a, b = quota("a", 8.0, "a"), quota("b", 8.0, "b")
    holdings = [
        held("a", "first", h100, 0, 8, age=7200),
        held("a", "borrow-old", h100, 1, 4, age=3600),
        held("a", "borrow-new", h100, 1, 4, age=600),
    ]
    queue = [workload("claim", "b", count=4, pools=["h100"])]
    (d,) = plan(queue, fleet([h100], [a, b], holdings), NOW)
    assert d.placed and d.preemption is not None and d.nodes == ("h100-1",)
    assert [(v.name, v.rule) for v in d.preemption.victims] == [("borrow-new", "Reclaim")]
    assert "preempting a/borrow-new (Reclaim)" in d.message


def test_no_reclaim_from_a_quota_within_its_nominal_or_when_the_policy_says_never() -> None:
    h100 = pool("h100", 1, 8)
    a = quota("a", 8.0, "a")
    queue = [workload("claim", "b", count=4, pools=["h100"])]
    holdings = [held("a", "mine", h100, 0, 8)]
    (d,) = plan(queue, fleet([h100], [a, quota("b", 8.0, "b")], holdings), NOW)
    assert d.preemption is None  # a uses exactly its nominal: nothing borrowed
    a_small = quota("a", 4.0, "a")
    never = quota("b", 8.0, "b", preemption={"reclaim": "Never"})
    (d,) = plan(queue, fleet([h100], [a_small, never], holdings), NOW)
    assert d.preemption is None


def test_priority_preemption_within_a_quota_takes_the_fewest_lowest() -> None:
    h100 = pool("h100", 1, 8)
    team = quota("team", 16.0, "team")
    holdings = [
        held("team", "low-big", h100, 0, 4, priority=1),
        held("team", "low-small", h100, 0, 2, priority=1),
        held("team", "lowest", h100, 0, 2, priority=0),
    ]
    queue = [workload("urgent", "team", count=2, priority=10)]
    (d,) = plan(queue, fleet([h100], [team], holdings), NOW)
    assert d.preemption is not None
    assert [(v.name, v.rule) for v in d.preemption.victims] == [("lowest", "WithinQuota")]
    never = quota("team", 16.0, "team", preemption={"withinQuota": "Never"})
    (d,) = plan(queue, fleet([h100], [never], holdings), NOW)
    assert d.preemption is None


def test_just_placed_work_is_protected() -> None:
    h100 = pool("h100", 1, 8)
    team = quota("team", 16.0, "team", preemption={"minRuntimeSeconds": 300})
    holdings = [held("team", "fresh", h100, 0, 8, age=60)]
    (d,) = plan(
        [workload("urgent", "team", count=2, priority=10)], fleet([h100], [team], holdings), NOW
    )
    assert d.preemption is None


def test_a_namespace_two_quotas_select_waits_with_both_named() -> None:
    h100 = pool("h100", 1, 8)
    (d,) = plan(
        [workload("w", "shared")],
        fleet([h100], [quota("a", 8, "shared"), quota("b", 8, "shared")]),
        NOW,
    )
    assert not d.placed and "namespace shared is selected by quotas a and b" in d.message


def test_without_quotas_nothing_changes() -> None:
    h100 = pool("h100", 1, 8)
    queue = [workload("a", count=4), workload("b", count=4)]
    assert [d.placed for d in plan(queue, Snapshot(pools=(h100,)), NOW)] == [True, True]


# --- properties -----------------------------------------------------------------------------

TEAMS = ["a", "b", "c"]


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Snapshot, list[PendingWorkload]]:
    pools = [pool("h100", draw(st.integers(1, 3)), 8), pool("a100", draw(st.integers(1, 3)), 8)]
    quotas = [
        quota(
            t,
            draw(st.sampled_from([2.0, 8.0, 16.0])),
            t,
            borrowingLimit=draw(st.sampled_from([None, 0, 2.0])),
            preemption={
                "withinQuota": draw(st.sampled_from(["LowerPriority", "Never"])),
                "reclaim": draw(st.sampled_from(["Any", "Never"])),
                "minRuntimeSeconds": 0,
            },
        )
        for t in TEAMS
    ]
    holdings: list[Holding] = []
    room = {(p.name, i): 8 for p in pools for i in range(len(p.nodes))}
    for i in range(draw(st.integers(0, 12))):  # mostly a full fleet: preemption's case
        (pname, node) = draw(st.sampled_from(sorted(room)))
        devices = draw(st.sampled_from([2, 4, 8]))
        if room[pname, node] < devices:
            continue
        room[pname, node] -= devices
        where = next(p for p in pools if p.name == pname)
        holdings.append(
            held(draw(st.sampled_from(TEAMS)), f"h{i}", where, node, devices,
                 priority=draw(st.sampled_from([0, 5])), age=draw(st.integers(0, 7200)))
        )  # fmt: skip
    queue = [
        workload(
            f"w{i}",
            draw(st.sampled_from(TEAMS)),
            count=draw(st.sampled_from([1, 2, 4, 8])),
            replicas=draw(st.integers(1, 2)),
            priority=draw(st.sampled_from([0, 5, 10])),
            age=draw(st.integers(0, 100)),
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    return fleet(pools, quotas, holdings), queue


def usage(
    snap: Snapshot,
    decisions: Sequence[Decision],
    queue: Sequence[PendingWorkload],
    evictions: bool = True,
) -> dict[str, float]:
    """Units per quota: the holdings, plus the decisions' placements, less their victims
    (with `evictions`)."""
    units = {p.name: p.accelerator.units_per_device for p in snap.pools}
    out = dict.fromkeys(TEAMS, 0.0)
    for h in snap.holdings:
        out[h.namespace] += h.devices * units[h.pool]
    sizes = {w.name: w.spec.replicas * w.spec.accelerator.count for w in queue}
    for d in decisions:
        if d.placed and d.pool:
            out[d.namespace] += sizes[d.name] * units[d.pool]
        for v in d.preemption.victims if d.preemption and evictions else ():
            out[v.namespace] -= v.devices * units[v.pool]
    return out


@PROPS
@given(worlds())
def test_placements_never_take_a_quota_past_nominal_plus_borrowing(
    world: tuple[Snapshot, list[PendingWorkload]],
) -> None:
    snap, queue = world
    decisions = plan(queue, snap, NOW)
    before = usage(snap, [], queue)
    after = usage(snap, decisions, queue)
    for q in snap.quotas:
        if after[q.name] > before[q.name]:  # it placed something: within its limit
            assert after[q.name] <= q.limit + 1e-6


@PROPS
@given(worlds())
def test_preemption_is_deterministic_reclaims_only_borrowers_places_and_never_cycles(
    world: tuple[Snapshot, list[PendingWorkload]],
) -> None:
    snap, queue = world
    decisions = plan(queue, snap, NOW)
    assert plan(queue, snap, NOW) == decisions  # the same victims for the same input
    nominal = {q.name: q.spec.nominal for q in snap.quotas}
    # What each quota held when the victims were chosen: before any eviction.
    used = usage(snap, [d for d in decisions if not d.preemption], queue, evictions=False)
    holdings = {h.key: h for h in snap.holdings}
    victims = [v for d in decisions if d.preemption for v in d.preemption.victims]
    assert len({v.key for v in victims}) == len(victims)  # none chosen twice
    for d in decisions:
        if d.preemption is None:
            continue
        for v in d.preemption.victims:
            if v.rule == "Reclaim":
                assert v.namespace != d.namespace
                assert used[v.namespace] > nominal[v.namespace]  # it was borrowing
            else:
                assert v.namespace == d.namespace
                assert (
                    holdings[v.key].priority
                    < next(w for w in queue if w.name == d.name).spec.priority
                )
    if not victims:
        return
    # Evicted, they leave room for every preemptor on the nodes it was placed on: no node
    # holds more than it has, counting what stays and everything placed.
    gone = {v.key for v in victims}
    allocatable = {n.name: n.allocatable for p in snap.pools for n in p.nodes}
    load = dict.fromkeys(allocatable, 0)
    for h in snap.holdings:
        if h.key not in gone:
            for node, d in h.nodes:
                load[node] += d
    placed = {w.name: w for w in queue}
    for d in decisions:
        if d.placed:
            assert d.preemption is None or d.pool == d.preemption.pool
            for node in d.nodes:
                load[node] += placed[d.name].spec.accelerator.count
    assert all(load[n] <= allocatable[n] for n in load), load
    # No cycle: a victim, waiting again, never evicts the workload that evicted it (even
    # with no minimum run time: a reclaimer is within its nominal, and a within-quota
    # preemptor outranks its victims).
    left = [h for h in snap.holdings if h.key not in gone]
    pinned = [_holding(placed[d.name], d) for d in decisions if d.placed]
    after = fleet([_full(p) for p in snap.pools], snap.quotas, left + pinned)
    back = [
        workload(
            v.name, v.namespace, count=holdings[v.key].devices, priority=holdings[v.key].priority
        )
        for v in victims
    ]
    evicted_by = {
        v.key: f"{d.namespace}/{d.name}"
        for d in decisions
        if d.preemption
        for v in d.preemption.victims
    }
    for d in plan(back, after, NOW):
        for v in d.preemption.victims if d.preemption else ():
            assert v.key != evicted_by[f"{d.namespace}/{d.name}"]


def _full(p: PoolState) -> PoolState:
    nodes = tuple(n.model_copy(update={"free": n.allocatable}) for n in p.nodes)
    return p.model_copy(update={"nodes": nodes})


def _holding(w: PendingWorkload, d: Decision) -> Holding:
    count = w.spec.accelerator.count
    return Holding(
        w.namespace, w.name, d.pool or "", tuple((n, count) for n in d.nodes), w.spec.priority, NOW
    )


def test_a_wait_on_a_protected_workload_says_until_when() -> None:
    h100 = pool("h100", 1, 8)
    team = quota("team", 16.0, "team", preemption={"minRuntimeSeconds": 300})
    holdings = [held("team", "fresh", h100, 0, 8, age=60)]
    queue = [workload("urgent", "team", count=2, priority=10)]
    (d,) = plan(queue, fleet([h100], [team], holdings), NOW)
    assert not d.placed and d.preemption is None
    assert d.message.endswith(
        "it may preempt team/fresh from 2025-06-01T12:04:00Z (minRuntimeSeconds protects "
        "just-placed work)"
    )
    later = plan(queue, fleet([h100], [team], holdings), NOW + timedelta(seconds=30))
    assert later[0].message == d.message  # a time, not a countdown: written once


def test_a_quota_is_owed_only_the_pools_its_waiting_work_can_use() -> None:
    """b waits for H100s only: a may borrow the L4s b could never use."""
    h100, l4 = pool("h100", 1, 8), pool("l4", 2, 8)
    a, b = quota("a", 0.5, "a"), quota("b", 24.0, "b")
    holdings = [held("a", "small", l4, 0, 4), held("b", "big", h100, 0, 8)]
    queue = [
        workload("b-next", "b", count=8, pools=["h100"], age=5),
        workload("a-l4", "a", count=8, pools=["l4"], age=4),
    ]
    got = by_name(plan(queue, fleet([h100, l4], [a, b], holdings), NOW))
    assert not got["b-next"].placed
    assert got["a-l4"].placed and got["a-l4"].pool == "l4"


def test_a_cycle_looks_for_victims_for_a_bounded_number_of_waiting_workloads() -> None:
    """A backlog of thousands would make every cycle go over every pool's holdings for each;
    the rest look in later cycles."""
    from tessera.placement.passes import PREEMPTION_TRIES

    h100 = pool("h100", 40, 2)
    team = quota("team", 100.0, "team", preemption={"minRuntimeSeconds": 0})
    holdings = [held("team", f"low{i}", h100, i, 2, priority=0) for i in range(40)]
    queue = [workload(f"urgent{i}", "team", count=2, priority=9, age=40 - i) for i in range(40)]
    decisions = plan(queue, fleet([h100], [team], holdings), NOW)
    assert sum(1 for d in decisions if d.preemption) == PREEMPTION_TRIES < 40
