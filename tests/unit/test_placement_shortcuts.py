"""The planning cycle's shortcuts give what the plain computation gives: releases replayed
from the nodes they touch, capacity reasons kept per gang shape while a pool is unchanged,
a kind's quota-first order built from two lists, and a pool chosen away told without
writing why."""

from __future__ import annotations

import dataclasses
import random

from builders import pool, workload
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.placement import NodeFit, PoolView, earliest_fit
from tessera.placement.feasibility import capacity_reason, chosen_away, selection_reasons
from tessera.placement.scoring import Scored
from tessera.placement.state import PoolWork, Ranked, Static

NODES = ["a", "b", "c", "d"]


def replayed(
    free: dict[str, int], releases: list[tuple[float, str, int]], count: int, replicas: int
) -> float | None:
    """earliest_fit as its definition reads: the whole pool counted again after each release."""
    now = dict(free)
    if sum(f // count for f in now.values()) >= replicas:
        return 0.0
    for at, node, devices in sorted(releases):
        if node in now:
            now[node] += devices
            if sum(f // count for f in now.values()) >= replicas:
                return at
    return None


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(NODES), st.integers(0, 8), min_size=1),
    st.lists(
        st.tuples(
            st.sampled_from([60.0, 600.0, 3600.0]),
            st.sampled_from([*NODES, "gone"]),
            st.integers(1, 8),
        ),
        max_size=8,
    ),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 6),
)
def test_earliest_fit_follows_only_the_nodes_released_to(
    free: dict[str, int], releases: list[tuple[float, str, int]], count: int, replicas: int
) -> None:
    expected = replayed(free, releases, count, replicas)
    assert earliest_fit(free, releases, count, replicas) == expected
    room = NodeFit(free.items()).room(count)
    in_order = sorted(releases)
    assert earliest_fit(free, in_order, count, replicas, presorted=True, pods_now=room) == expected


def _pool_work(free: list[int]) -> PoolWork:
    state = pool("h100", len(free), 8, free=free)
    view = PoolView.of(state)
    fit = NodeFit((n.name, n.free) for n in state.nodes)
    return PoolWork(view=view, fit=fit, releases=[])


def test_a_capacity_reason_is_made_again_once_the_pool_changes() -> None:
    work = _pool_work([8, 4])
    gang = workload("w", count=4, replicas=3)
    assert work.capacity_reason(gang) is None  # 8 + 4 hold three pods of 4
    work.fit.take(4, 1)
    assert work.capacity_reason(gang) == capacity_reason(gang, work.view, work.fit)
    assert work.capacity_reason(gang) == "room for 2 of 3 pods of 4 nvidia.com/gpu now"
    work.fit.take(4, 2)
    big = workload("big", count=8, replicas=1)
    assert work.capacity_reason(big) == "no node has 8 free nvidia.com/gpu (largest free: 0)"
    work.fit.give("h100-0", 8)
    assert work.capacity_reason(big) is None


def test_the_same_shape_shares_a_reason_while_the_pool_is_unchanged() -> None:
    work = _pool_work([2, 2])
    one, other = workload("one", count=4, replicas=1), workload("other", count=4, replicas=1)
    assert work.capacity_reason(one) is work.capacity_reason(other)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([10.0, 20.0, 20.0, 35.5, 50.0]), min_size=1, max_size=8),
    st.sets(st.integers(0, 7)),
    st.integers(0, 2**16),
)
def test_the_quota_order_is_the_key_sort_it_replaced(
    totals: list[float], quota_at: set[int], seed: int
) -> None:
    views = [dataclasses.replace(_pool_work([8]).view, name=f"p{i}") for i in range(8)]
    scored = [Scored(views[i], t, 1.0, 0.0, 0.0, 0.0) for i, t in enumerate(totals)]
    random.Random(seed).shuffle(scored)
    scored.sort(key=lambda s: s.total, reverse=True)
    kind = Static(scored, (), 0, 0, 1.0, (1, 1))
    kind.quota = {f"p{i}": random.Random(seed + i).randint(0, 2) for i in quota_at}
    prices = {"p0": 0.01}
    ranked = kind.rank(1, prices)
    quota = {p for p, k in kind.quota.items() if k > 0}
    expected = sorted(
        ranked,
        key=lambda r: (
            r.scored.pool.name not in quota,
            -r.scored.total if r.scored.pool.name in quota else 0.0,
        ),
    )
    assert kind.order(1, prices) == expected
    assert all(isinstance(r, Ranked) for r in kind.order(1, prices))


POOLS = ["h100", "a100", "mi300x", "gaudi3", "t4"]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(POOLS),
    st.lists(st.sampled_from(POOLS), max_size=2, unique=True),
    st.lists(st.sampled_from(["nvidia", "amd", "intel"]), max_size=2, unique=True),
    st.lists(st.sampled_from(["H100-SXM5-80GB", "MI300X", "T4"]), max_size=2, unique=True),
    st.lists(st.sampled_from(["A100-SXM4-80GB", "Gaudi3"]), max_size=1),
)
def test_chosen_away_is_whether_the_selection_gives_a_reason(
    name: str, pools: list[str], vendors: list[str], models: list[str], excluded: list[str]
) -> None:
    view = PoolView.of(pool(name))
    w = workload(pools=pools, vendors=vendors, models=models, excludeModels=excluded)
    assert chosen_away(w, view) == bool(selection_reasons(w, view))
