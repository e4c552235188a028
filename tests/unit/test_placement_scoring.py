"""Scoring: throughput (measured beats catalog), objectives, weights, preference, ties."""

from __future__ import annotations

import pytest
from builders import pool, workload

from tessera import api
from tessera.placement import PoolView, score, throughputs
from tessera.placement.snapshot import PendingWorkload, PoolState


def ranked(w: PendingWorkload, *pools: PoolState) -> list[str]:
    return [s.pool.name for s in score(w.spec, [PoolView.of(p) for p in pools])]


def test_performance_prefers_the_fastest_at_the_precision() -> None:
    pools = (pool("a100"), pool("h100"), pool("l4"), pool("mi300x"))
    assert ranked(workload(objective="performance"), *pools) == ["mi300x", "h100", "a100", "l4"]
    # at fp32 (no tensor cores) the L4's 30.3 TFLOPS beat the A100's 19.5
    assert ranked(
        workload(objective="performance", precision="fp32"), pool("a100"), pool("l4")
    ) == [
        "l4",
        "a100",
    ]


def test_measured_throughput_beats_the_catalog() -> None:
    w = workload(objective="performance", throughput={"A100-SXM4-80GB": 3.0, "H100-SXM5-80GB": 1.0})
    assert ranked(w, pool("a100"), pool("h100")) == ["a100", "h100"]


def test_unmeasured_pools_are_estimated_in_the_measured_unit() -> None:
    need = workload(throughput={"A100-SXM4-80GB": 10.0}).spec.accelerator
    views = [PoolView.of(pool("a100")), PoolView.of(pool("h100"))]
    a100, h100 = throughputs(need, views)
    assert a100 == 10.0
    assert h100 == pytest.approx(10.0 * 989.4 / 312)


def test_memory_profile_uses_bandwidth() -> None:
    pools = (pool("h100"), pool("h200"))  # same peak FLOPS, H200 has 4.8 vs 3.35 TB/s
    assert ranked(workload(objective="performance", profile="memory"), *pools) == ["h200", "h100"]
    compute = score(workload(objective="performance").spec, [PoolView.of(p) for p in pools])
    assert compute[0].total == compute[1].total  # a tie at compute...
    assert [s.pool.name for s in compute] == ["h100", "h200"]  # ...broken by name


def test_cost_is_price_per_unit_of_work() -> None:
    cheap_slow = pool("l4", costPerDeviceHour=0.5)  # 121 TFLOPS for $0.5
    dear_fast = pool("h100", costPerDeviceHour=6.0)  # 989 TFLOPS for $6
    assert ranked(workload(objective="cost"), cheap_slow, dear_fast) == ["l4", "h100"]
    bargain = pool("h100", costPerDeviceHour=3.0)  # now cheaper per TFLOP than the L4
    assert ranked(workload(objective="cost"), cheap_slow, bargain) == ["h100", "l4"]


def test_energy_is_watts_per_unit_of_work() -> None:
    pools = (pool("l4"), pool("a100"))  # 72 W / 121 vs 400 W / 312
    assert ranked(workload(objective="energy"), *pools) == ["l4", "a100"]
    assert ranked(workload(objective="energy"), pool("l4", powerWatts=500), pool("a100")) == [
        "a100",
        "l4",
    ]


def test_custom_weights_override_the_objective() -> None:
    pools = (pool("l4"), pool("h100"))
    perf = workload(objective="cost", weights={"performance": 1.0})
    assert ranked(perf, *pools) == ["h100", "l4"]
    zero = workload(objective="cost", weights={"performance": 0.0, "cost": 0.0})
    assert ranked(zero, *pools) == ranked(workload(objective="cost"), *pools)


def test_admin_preference_is_added_to_the_score() -> None:
    w = workload(objective="performance")
    # the A100 scores 31.5 on speed against the H100's 100: the bias must bridge the gap
    assert ranked(w, pool("a100", preference=70), pool("h100")) == ["a100", "h100"]
    assert ranked(w, pool("a100", preference=60), pool("h100")) == ["h100", "a100"]
    assert ranked(w, pool("a100"), pool("h100", preference=-100)) == ["a100", "h100"]


def test_ties_break_by_pool_name() -> None:
    pools = [pool(name, model="H100-SXM5-80GB") for name in ("zeta", "alpha", "mid")]
    assert ranked(workload(), *pools) == ["alpha", "mid", "zeta"]


def test_each_score_carries_its_breakdown() -> None:
    views = [PoolView.of(pool("l4")), PoolView.of(pool("h100", preference=5))]
    result = {s.pool.name: s for s in score(workload(objective="balanced").spec, views)}
    h100, l4 = result["h100"].breakdown, result["l4"].breakdown
    for b in (h100, l4):  # built without validation: each is still a valid ScoreBreakdown
        assert api.ScoreBreakdown.model_validate(b.model_dump()).model_dump() == b.model_dump()
    assert h100.performance == 1.0 and l4.performance == pytest.approx(121 / 989.4, abs=1e-4)
    assert max(h100.cost, l4.cost) == 1.0 and max(h100.energy, l4.energy) == 1.0
    assert h100.preference == 5 and h100.throughput == 989.4
    for s in result.values():
        b = s.breakdown
        expect = 100 * (b.performance + b.cost + b.energy) / 3 + b.preference
        assert s.total == pytest.approx(expect, abs=0.01)  # terms are shown rounded
