"""Waiting against running now, for workloads with an estimatedDuration: how long a run
takes on each pool, the pool worth waiting for, and the cost objective's bound on time. Pure."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from tessera import api
from tessera.placement import explain
from tessera.placement.scoring import Scored
from tessera.placement.snapshot import PendingWorkload
from tessera.placement.state import PoolWork, Ranked, Static

# Waiting for a faster pool must save at least this share of the time to finish by running
# now on the best pool that fits: estimates are rough, and a placement now is certain.
WAIT_MARGIN = 0.1
duration_of = functools.lru_cache(maxsize=4096)(api.parse_duration)  # workloads share a few


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
class Late:
    """What the cost objective's notes on pools that would finish too late are built from."""

    pick: int
    bound: float
    soonest: float
    runs: list[float]
    done: dict[int, float]


def late_notes(late: tuple[str | float, ...]) -> dict[str, str]:
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


def better_by_waiting(
    w: PendingWorkload,
    st: Static,
    pools: dict[str, PoolWork],
    ranked: list[Ranked],
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


def cheapest_in_time(
    w: PendingWorkload,
    st: Static,
    pools: dict[str, PoolWork],
    ranked: list[Ranked],
    fits: Callable[[int], bool],
    duration: float,
    notes: dict[str, str],
) -> tuple[int | None, Scored | None, Late | None]:
    """For the cost objective: the first pool in ranked order (cheapest work first, after
    contention) whose expected completion is within COST_SLACK of the soonest expected
    completion over the feasible pools; pools whose start is unknown are left out, and when
    every one is, the first that fits now. Returns (index to place on now, None) or (None,
    the pool to wait for), and what the notes on the pools that would finish too late are
    built from when the explanation is read."""
    count, replicas = w.spec.accelerator.count, w.spec.replicas
    speeds = st.speeds(ranked)
    runs = [run_seconds(duration, st.best_throughput, t) for t in speeds.throughput]
    done: dict[int, float] = {}  # expected finish, by index into ranked

    def finish(i: int) -> float:
        """When the run would end on the pool at `i`: at once if it fits, else after the
        pool's expected start (never, when the known releases never make room)."""
        if fits(i):
            return runs[i]
        start = pools[ranked[i].scored.pool.name].expected_start(count, replicas)
        return math.inf if start is None else start + runs[i]

    # the soonest finish: fastest pools first; a finish is never before its run time
    soonest = math.inf
    for i in speeds.fastest_first:
        run = runs[i]
        if run >= soonest:
            break
        done[i] = finish(i)
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
            end = done[i] = finish(i)
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
    late = Late(pick, bound, soonest, runs, done)
    if fits(pick):
        return pick, None, late
    notes[ranked[pick].scored.pool.name] = (
        f"expected to finish in {explain.hours(done[pick])} here, the cheapest within "
        f"{COST_SLACK:.0%} of the soonest ({explain.hours(soonest)})"
    )
    return None, ranked[pick].scored, late
