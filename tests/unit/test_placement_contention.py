"""Contention: shadow prices from an auction among pending work, and how plan uses them."""

from __future__ import annotations

import pytest
from builders import NOW, pool, snapshot, workload

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
