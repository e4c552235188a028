"""Contention: shadow prices from an auction among pending work, and how plan uses them."""

from __future__ import annotations

import math
from collections import deque

import pytest
from builders import NOW, pool, snapshot, workload
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.placement import plan
from tessera.placement.contention import Demand, shadow_prices
from tessera.placement.decision import Decision
from tessera.placement.passes import Misses


def test_no_contention_no_price() -> None:
    auction = shadow_prices([Demand(1, 3, {"fast": 1.0, "slow": 0.5})], {"fast": 8, "slow": 8})
    assert auction.prices == {"fast": 0.0, "slow": 0.0}
    assert auction.shares == [{"fast": 3}]


def test_the_price_is_what_the_marginal_workload_gives_up() -> None:
    # 3 one-device workloads, one fast device: the two left out would lose 1.0 - 0.5 each
    auction = shadow_prices([Demand(1, 3, {"fast": 1.0, "slow": 0.5})], {"fast": 1, "slow": 8})
    assert auction.prices["fast"] == pytest.approx(0.5, abs=1e-6)
    assert auction.prices["slow"] == 0.0
    assert auction.shares == [{"fast": 1, "slow": 2}]


def test_the_fast_pool_goes_to_whoever_gains_most_from_it() -> None:
    demands = [
        Demand(1, 1, {"fast": 1.0, "slow": 0.9}),  # barely faster on the fast pool
        Demand(1, 1, {"fast": 1.0, "slow": 0.2}),  # five times faster there
    ]
    auction = shadow_prices(demands, {"fast": 1, "slow": 1})
    assert auction.shares == [{"slow": 1}, {"fast": 1}]
    assert 0.1 - 1e-9 <= auction.prices["fast"] <= 0.8  # any price in between clears it


def test_plan_gives_the_contended_pool_to_the_workload_that_gains_most() -> None:
    snap = snapshot(pool("h100", 1, 8), pool("a100", 1, 8))
    # the older one runs almost as fast on an A100; the younger is 3x faster on an H100
    indifferent = workload(
        "indifferent", count=8, objective="performance", age=60,
        throughput={"H100-SXM5-80GB": 1.1, "A100-SXM4-80GB": 1.0},
    )  # fmt: skip
    eager = workload(
        "eager", count=8, objective="performance",
        throughput={"H100-SXM5-80GB": 3.0, "A100-SXM4-80GB": 1.0},
    )  # fmt: skip
    d = {x.name: x for x in plan([indifferent, eager], snap, NOW)}
    assert (d["indifferent"].pool, d["eager"].pool) == ("a100", "h100")
    h100 = next(c for c in d["indifferent"].candidates if c.pool == "h100")
    assert h100.breakdown is not None and h100.breakdown.contention > 0
    assert h100.score == pytest.approx(100 - h100.breakdown.contention, abs=0.01)
    # alone, each takes the faster pool
    assert plan([indifferent], snap, NOW)[0].pool == "h100"


def test_contention_never_changes_who_is_placed() -> None:
    snap = snapshot(pool("h100", 1, 8, free=[4]), pool("a100", 1, 8, free=[4]))
    queue = [
        workload("a", count=4, objective="performance", age=3),
        workload("b", count=4, objective="performance", age=2,
                 throughput={"H100-SXM5-80GB": 5.0, "A100-SXM4-80GB": 1.0}),
        workload("c", count=2, objective="performance", age=1),
    ]  # fmt: skip
    d = {x.name: x for x in plan(queue, snap, NOW)}
    assert {n for n, x in d.items() if x.placed} == {"a", "b"}
    assert (d["a"].pool, d["b"].pool) == ("a100", "h100")


def test_a_priced_pass_is_given_up_once_it_leaves_more_admitted_waiting_than_allowed() -> None:
    admitted = {("team", "a"), ("team", "b")}
    misses = Misses(admitted, allowed=1)
    waiting = [Decision(namespace="team", name=n, placed=False) for n in ("a", "b", "c")]
    assert not misses.exceeded(waiting[2])  # not admitted by the first pass: no miss
    assert not misses.exceeded(waiting[0])  # one admitted waits: allowed
    assert misses.exceeded(waiting[1])  # two: given up


def sorted_auction(
    demands: list[Demand], capacity: dict[str, float], epsilon: float = 1e-3
) -> tuple[dict[str, float], list[dict[str, int]]]:
    """The auction as it was before its heaps, the oracle for shadow_prices: at every price
    rise it works out the margin of every holder of the pool (per device, over its next
    option found as shadow_prices finds it), sorts them all, and evicts the least attached
    until the pool fits."""
    price = dict.fromkeys(capacity, 0.0)
    holders: dict[str, dict[int, int]] = {p: {} for p in capacity}
    used = dict.fromkeys(capacity, 0.0)
    left = [d.count for d in demands]
    queue = deque(i for i, d in enumerate(demands) if d.count and d.values)
    queued = [True] * len(demands)
    raises = dict.fromkeys(capacity, 0)

    def net(i: int, pool: str) -> float:
        return demands[i].values[pool] - demands[i].size * price[pool]

    seen: dict[tuple[int, str], tuple[str, int, float]] = {}

    def runner_up(i: int, pool: str) -> float:  # as shadow_prices finds it
        known = seen.get((i, pool))
        if known is not None and (not known[0] or raises[known[0]] == known[1]):
            return known[2]
        best, at = -math.inf, ""
        for q in demands[i].values:
            if q != pool and (value := net(i, q)) > best:
                best, at = value, q
        if not at:
            best = 0.0
        seen[i, pool] = (at, raises[at] if at else 0, best)
        return best

    budget = 50 * len(demands) + 1000
    while queue and budget > 0:
        budget -= 1
        i = queue.popleft()
        queued[i] = False
        best, target = 0.0, ""
        for name in sorted(demands[i].values):
            if (value := net(i, name)) > best:
                best, target = value, name
        if not target:
            left[i] = 0
            continue
        holders[target][i] = holders[target].get(i, 0) + left[i]
        used[target] += left[i] * demands[i].size
        left[i] = 0
        excess = used[target] - capacity[target]
        if excess <= 0:
            continue
        ranked = sorted(
            ((net(h, target) - max(runner_up(h, target), 0.0)) / demands[h].size, h)
            for h in holders[target]
        )
        threshold = 0.0
        for margin, h in ranked:
            if excess <= 0:
                break
            size = demands[h].size
            k = min(holders[target][h], math.ceil(excess / size))
            holders[target][h] -= k
            if not holders[target][h]:
                del holders[target][h]
            used[target] -= k * size
            excess -= k * size
            left[h] += k
            threshold = margin
            if not queued[h]:
                queue.append(h)
                queued[h] = True
        price[target] += max(threshold, 0.0) + epsilon
        raises[target] += 1
    shares: list[dict[str, int]] = [{} for _ in demands]
    for name, held in holders.items():
        for i, k in held.items():
            shares[i][name] = k
    prices = {p: max(price[p] - epsilon * raises[p], 0.0) for p in capacity}
    return prices, shares


POOLS = ["a", "b", "c", "d", "e"]
demand = st.builds(
    Demand,
    size=st.sampled_from([1, 2, 4, 8]),
    count=st.integers(1, 6),
    # values as plan() makes them: scores to a tenth of a point, over 100
    values=st.dictionaries(
        st.sampled_from(POOLS), st.integers(0, 1000).map(lambda v: v / 1000), min_size=1
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(demand, max_size=30),
    st.dictionaries(st.sampled_from(POOLS), st.integers(0, 24).map(float), min_size=5),
)
def test_the_auction_evicts_and_prices_as_ranking_every_holder_afresh_would(
    demands: list[Demand], capacity: dict[str, float]
) -> None:
    """Keeping each pool's holders in a heap keyed by their attachment (margin before the
    pool's own price), looked at again only when it may have grown, gives the same prices
    and the same assignment as sorting them all at every rise."""
    auction = shadow_prices(demands, capacity)
    assert (auction.prices, auction.shares) == sorted_auction(demands, capacity)
