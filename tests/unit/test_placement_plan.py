"""The planning cycle: order, folding usage, decisions, waiting and explanations."""

from __future__ import annotations

import json
from typing import Any

from builders import NOW, pool, snapshot, workload

from tessera import api
from tessera.placement import MAX_CANDIDATES, Decision, plan, table


def by_name(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.name: d for d in decisions}


def test_placed_decision_has_pool_nodes_score_and_explanation() -> None:
    snap = snapshot(pool("h100", 2, 8), pool("a100", 2, 8))
    [d] = plan([workload("train", count=8, replicas=2, objective="performance")], snap, NOW)
    assert d.placed and d.pool == "h100" and d.accelerator == "H100-SXM5-80GB"
    assert d.vendor == api.Vendor.NVIDIA and d.score == 100.0
    assert [(a.replica, a.node) for a in d.assignments] == [(0, "h100-0"), (1, "h100-1")]
    assert [c.pool for c in d.candidates] == ["h100", "a100"]
    assert d.candidates[0].breakdown is not None and d.candidates[0].fits_now
    assert d.message == "placed on h100 (H100-SXM5-80GB), score 100.0, 2 x 8 nvidia.com/gpu"


def test_best_feasible_pool_that_fits_now_wins() -> None:
    snap = snapshot(pool("h100", 1, 8, free=[4]), pool("a100", 1, 8))
    [d] = plan([workload(count=8, objective="performance")], snap, NOW)
    assert d.pool == "a100"
    h100 = d.candidates[0]
    assert (h100.pool, h100.fits_now) == ("h100", False)
    assert h100.reasons == ["no node has 8 free nvidia.com/gpu (largest free: 4)"]


def test_priority_then_age_order() -> None:
    snap = snapshot(pool("h100", 1, 8))
    old = workload("old", count=8, age=3600)
    young = workload("young", count=8, age=60)
    urgent = workload("urgent", count=8, priority=10)
    decisions = plan([young, old, urgent], snap, NOW)
    assert [d.name for d in decisions] == ["urgent", "old", "young"]
    assert [d.placed for d in decisions] == [True, False, False]
    assert by_name(plan([young, old], snap, NOW))["old"].placed


def test_each_placement_is_folded_into_the_snapshot() -> None:
    snap = snapshot(pool("h100", 1, 8), pool("a100", 1, 8))
    first = workload("first", count=8, age=2, objective="performance")
    second = workload("second", count=8, age=1, objective="performance")
    third = workload("third", count=4, objective="performance")
    d = by_name(plan([first, second, third], snap, NOW))
    assert (d["first"].pool, d["second"].pool) == ("h100", "a100")
    assert not d["third"].placed
    assert d["third"].message == (
        "waiting: no feasible pool has room for 1 pods of 4 devices now (2 feasible; best "
        "h100: no node has 4 free nvidia.com/gpu (largest free: 0))"
    ), "the message says what the pool it would take lacks"
    # both pools are still feasible for it, and neither has room once the first two are in
    shown = [(c.pool, c.feasible, c.fits_now) for c in d["third"].candidates]
    assert shown == [("h100", True, False), ("a100", True, False)]


def test_waiting_decision_lists_candidates_with_scores_and_reasons() -> None:
    snap = snapshot(pool("h100", 1, 8, free=[0]), pool("a100-40", 1, 8), pool("l4", 1, 8))
    [d] = plan([workload(count=8, minMemoryGiB=48, objective="performance")], snap, NOW)
    assert not d.placed and d.pool is None and d.assignments == ()
    assert [(c.pool, c.feasible) for c in d.candidates] == [
        ("h100", True),
        ("a100-40", False),
        ("l4", False),
    ]
    assert d.candidates[0].score == 100.0
    assert d.candidates[1].reasons == ["40 GiB per device < 48 GiB required"]


def test_no_pool_can_run_it() -> None:
    [d] = plan([workload(precision="fp8")], snapshot(pool("a100")), NOW)
    assert not d.placed
    assert d.message.startswith("no pool can run this workload")
    assert plan([], snapshot(pool("a100")), NOW) == []
    [alone] = plan([workload()], snapshot(), NOW)
    assert not alone.placed and alone.candidates == ()


def test_never_uses_not_ready_nodes_or_goes_over_free_devices() -> None:
    snap = snapshot(pool("h100", 3, 8, free=[8, 3, 8], ready=[False, True, True]))
    ws = [workload(f"w{i}", count=2, age=i) for i in range(6)]
    used: dict[str, int] = {}
    for d in plan(ws, snap, NOW):
        for a in d.assignments:
            used[a.node] = used.get(a.node, 0) + 2
    assert "h100-0" not in used
    assert used == {"h100-1": 2, "h100-2": 8}


def test_waits_for_a_faster_pool_that_frees_up_soon() -> None:
    # the H100s free up in one hour; the job takes 10 hours on an H100, ~32 on an A100
    h100 = pool("h100", 1, 8, free=[0], releases={0: [(1.0, 8)]})
    snap = snapshot(h100, pool("a100", 1, 8))
    w = workload(count=8, objective="performance", duration="10h")
    [d] = plan([w], snap, NOW)
    assert not d.placed and d.waiting_for == "h100"
    assert (
        d.message == "waiting for h100: expected to finish in 11.0h here, against 31.7h on a100 now"
    )
    a100 = next(c for c in d.candidates if c.pool == "a100")
    assert a100.fits_now and a100.reasons == ["fits now, but would finish later (31.7h)"]


def test_runs_now_when_waiting_would_finish_later() -> None:
    h100 = pool("h100", 1, 8, free=[0], releases={0: [(30.0, 8)]})
    snap = snapshot(h100, pool("a100", 1, 8))
    [d] = plan([workload(count=8, objective="performance", duration="10h")], snap, NOW)
    assert d.placed and d.pool == "a100"
    # without releases the wait is unknown: run now
    snap = snapshot(pool("h100", 1, 8, free=[0]), pool("a100", 1, 8))
    [d] = plan([workload(count=8, objective="performance", duration="10h")], snap, NOW)
    assert d.pool == "a100"
    # without a duration there is nothing to weigh: run now
    h100 = pool("h100", 1, 8, free=[0], releases={0: [(0.1, 8)]})
    [d] = plan([workload(count=8, objective="performance")], snapshot(h100, pool("a100")), NOW)
    assert d.pool == "a100"


def test_work_waiting_for_a_pool_delays_the_next_in_line() -> None:
    h100 = pool("h100", 1, 8, free=[0], releases={0: [(1.0, 8)]})
    snap = snapshot(h100, pool("a100", 2, 8))
    first = workload("first", count=8, objective="performance", duration="10h", age=2)
    second = workload("second", count=8, objective="performance", duration="10h", age=1)
    d = by_name(plan([first, second], snap, NOW))
    assert d["first"].waiting_for == "h100"
    # behind first's 10 hours the H100 would finish second at ~21h: the A100 (~31.7h) is
    # still slower, so second waits too; a third in line would not
    assert d["second"].waiting_for == "h100"
    third = workload("third", count=8, objective="performance", duration="10h")
    assert by_name(plan([first, second, third], snap, NOW))["third"].pool == "a100"


def test_placements_with_durations_become_releases_for_later_workloads() -> None:
    snap = snapshot(pool("h100", 1, 8), pool("a100", 1, 8))
    long = workload("long", count=8, objective="performance", duration="1h", age=1)
    nxt = workload("next", count=8, objective="performance", duration="10h")
    d = by_name(plan([long, nxt], snap, NOW))
    assert d["long"].pool == "h100"
    assert d["next"].waiting_for == "h100"  # 1h + 10h on the H100 beats 31.7h on the A100


def test_excluded_pools_are_not_tried_again() -> None:
    snap = snapshot(pool("h100"), pool("a100"))
    [d] = plan([workload(objective="performance", excluded=["h100"])], snap, NOW)
    assert d.pool == "a100"


def test_pools_the_workloads_own_selection_chose_away_are_listed_only_if_none_passes() -> None:
    snap = snapshot(pool("h100"), pool("a100"), pool("mi300x"), pool("gaudi2"))
    [d] = plan([workload(vendors=["nvidia"], precision="fp8")], snap, NOW)
    assert d.pool == "h100"
    # a100 passes the selection and misses on fp8: a near miss worth reading. The AMD and
    # Intel pools were chosen away by `vendors`: listing them says nothing the spec does not.
    assert [(c.pool, c.feasible) for c in d.candidates] == [("h100", True), ("a100", False)]
    assert d.candidates[1].reasons == ["A100-SXM4-80GB has no fp8"]
    # Nothing passes the selection: every pool is listed with why, so the user sees it.
    [none] = plan([workload(vendors=["aws"])], snap, NOW)
    assert none.pool is None and len(none.candidates) == 4
    assert all(any("vendor" in r for r in c.reasons) for c in none.candidates)
    assert "4 ruled out" in (none.message or "")
    # Some pass the selection but none is feasible: the near misses only, the count of all.
    [near] = plan([workload(vendors=["nvidia"], minMemoryGiB=100)], snap, NOW)
    assert [c.pool for c in near.candidates] == ["a100", "h100"]
    assert "4 ruled out" in (near.message or "")
    # The message names the nearest miss and why, so an Event alone says what to change, and
    # how many pools the workload's own selection chose away (they are not listed).
    assert near.message == (
        "no pool can run this workload (4 ruled out, 2 by its own selection; nearest a100: "
        "80 GiB per device < 100 GiB required)"
    )
    assert (none.message or "").startswith("no pool can run this workload (4 ruled out; nearest")


def test_explanation_is_capped_best_first() -> None:
    pools = [pool(f"p{i:02d}", model="L4", costPerDeviceHour=1 + i) for i in range(12)]
    pools += [pool("fp8-less", model="A100-SXM4-80GB")]
    [d] = plan([workload(objective="cost", precision="fp8")], snapshot(*pools), NOW)
    assert len(d.candidates) == MAX_CANDIDATES
    assert [c.pool for c in d.candidates] == [f"p{i:02d}" for i in range(8)]
    scores = [c.score for c in d.candidates]
    assert scores == sorted(scores, reverse=True)
    [w] = plan([workload(precision="fp8", minMemoryGiB=500, namespace="x", vendors=["amd"],
                         count=16)], snapshot(pool("a100", draining=True)), NOW)  # fmt: skip
    assert w.candidates[0].reasons[-1] == "and 1 more"  # five reasons: four shown, then a count


def test_decision_explanation_round_trips_through_the_workload_status() -> None:
    """The controller writes a decision's assignments and candidates into status.* as JSON;
    read back by the Workload model, they are what was decided."""
    [d] = plan([workload(count=8, replicas=2)], snapshot(pool("h100")), NOW)
    assert d.placed and d.pool == "h100"

    def dump(models: tuple[Any, ...]) -> list[dict[str, Any]]:
        return [m.model_dump(by_alias=True, mode="json", exclude_none=True) for m in models]

    body = {"assignments": dump(d.assignments), "candidates": dump(d.candidates)}
    again = api.WorkloadStatus.model_validate(json.loads(json.dumps(body)))
    assert [(a.replica, a.node) for a in again.assignments] == [(0, "h100-0"), (1, "h100-1")]
    assert again.candidates == list(d.candidates)
    assert again.candidates[0].breakdown is not None
    [w] = plan([workload(count=8, replicas=3)], snapshot(pool("h100")), NOW)
    assert not w.placed and w.assignments == ()


def test_table_renders_every_candidate() -> None:
    snap = snapshot(pool("h100", 1, 8, free=[4]), pool("a100"), pool("a100-40"))
    [d] = plan([workload(count=8, minMemoryGiB=80)], snap, NOW)
    lines = table(d.candidates).splitlines()
    assert lines[0].split() == ["POOL", "ACCELERATOR", "FEASIBLE", "FITS", "SCORE", "PERF",
                                "COST", "ENERGY", "WHY"]  # fmt: skip
    assert len(lines) == 4
    assert lines[1].startswith("h100") and "largest free: 4" in lines[1]
    assert lines[2].startswith("a100 ") and lines[2].endswith("0.55")
    assert lines[3].startswith("a100-40") and lines[3].endswith(
        "40 GiB per device < 80 GiB required"
    )


def test_more_capacity_no_longer_leaves_the_h100_only_job_waiting() -> None:
    """The anomaly that makes a literal "more capacity never makes anyone wait" impossible
    for a planner that gives each workload the best pool with room: one more free H100
    lets w2 (older) take the H100 room big-memory (H100 only) needed, in the first pass.
    The priced pass decides the admitted largest first and the rest in the room left, so
    big-memory fits after all, with w2 on the L4 as before."""
    l4 = pool("l4", 4, 8, free=[0, 0, 0, 5])
    queue = [
        workload("gang", replicas=2, objective="performance", age=60),
        workload("w1", objective="performance", age=50),
        workload("w2", count=4, objective="performance", age=40),
        workload("w3", objective="performance", age=30),
        workload("w4", objective="performance", age=20),
        workload("big-memory", minMemoryGiB=80, objective="performance", age=10),
    ]
    before = by_name(plan(queue, snapshot(l4, pool("h100", 2, 8, free=[0, 6])), NOW))
    after = by_name(plan(queue, snapshot(l4, pool("h100", 3, 8, free=[0, 6, 1])), NOW))
    for decisions in (before, after):
        assert all(d.placed for d in decisions.values())
        assert decisions["w2"].pool == "l4" and decisions["big-memory"].pool == "h100"


def test_cost_takes_the_cheapest_pool_expected_to_finish_in_time() -> None:
    # per unit of work the L4 is cheaper than the H100, but ~3.5x slower (bf16)
    snap = snapshot(pool("h100", 1, 8), pool("l4", 1, 8))
    [d] = plan([workload(count=8, objective="cost", precision="bf16")], snap, NOW)
    assert d.pool == "l4"  # no duration: price per unit of work alone
    [d] = plan([workload(count=8, objective="cost", precision="bf16", duration="10h")], snap, NOW)
    assert d.pool == "h100"  # the L4 would finish far more than 50 % later
    l4 = next(c for c in d.candidates if c.pool == "l4")
    assert l4.reasons and "more than 50% after the soonest (10.0h)" in l4.reasons[-1]
    # a cheap pool within the slack wins over a faster, dearer one
    near = pool("near", 1, 8, model="H100-SXM5-80GB", costPerDeviceHour=1.0)
    snap = snapshot(pool("h200", 1, 8), near)
    [d] = plan([workload(count=8, objective="cost", precision="bf16", duration="10h")], snap, NOW)
    assert d.pool == "near"


def test_cost_waits_for_a_cheap_pool_that_frees_up_in_time() -> None:
    cheap = pool("cheap", 1, 8, model="H100-SXM5-80GB", costPerDeviceHour=1.0, free=[0],
                 releases={0: [(2.0, 8)]})  # fmt: skip
    snap = snapshot(cheap, pool("h100", 1, 8))
    w = workload(count=8, objective="cost", precision="bf16", duration="10h")
    [d] = plan([w], snap, NOW)
    assert not d.placed and d.waiting_for == "cheap"
    assert d.message == (
        "waiting for cheap: expected to finish in 12.0h here, the cheapest within 50% of the "
        "soonest (10.0h)"
    )
    # too long a wait: run now on the dearer pool
    late = pool("cheap", 1, 8, model="H100-SXM5-80GB", costPerDeviceHour=1.0, free=[0],
                releases={0: [(6.0, 8)]})  # fmt: skip
    [d] = plan([w], snapshot(late, pool("h100", 1, 8)), NOW)
    assert d.placed and d.pool == "h100"
