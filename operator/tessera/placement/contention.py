"""Contention: shadow prices of scarce pools, found by an ascending auction among all pending
work, so each workload weighs what its choice costs the others. Pure; imports nothing of Tessera."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Each price rise is at least this much value per device: the auction's precision (values
# are scores / 100, so 1e-3 is a tenth of a score point for a one-device workload).
EPSILON = 1e-3


@dataclass(frozen=True, slots=True)
class Auction:
    """The auction's outcome: a price per device of each pool, and how many workloads of
    each demand it assigned to each pool (the fractional optimum, rounded to workloads)."""

    prices: dict[str, float]
    shares: list[dict[str, int]]


@dataclass(frozen=True, slots=True)
class Demand:
    """Alike pending workloads: devices each, how many, and the value of one on each pool."""

    size: int
    count: int
    values: Mapping[str, float]


def shadow_prices(
    demands: Sequence[Demand],
    capacity: Mapping[str, float],
    epsilon: float = EPSILON,
    max_steps: int | None = None,
) -> Auction:
    """Price per device of each pool's free capacity: the dual of the linear program that
    assigns the demands to pools to maximise their total value (each workload at most once,
    no pool over its free devices), found by an ascending auction.

    Unplaced workloads bid for the pool where value minus price is highest (never below 0,
    the value of not running); a pool over capacity raises its price just past the point
    where its least attached holders prefer their next option, and they bid again. Prices
    only rise, so it ends; `max_steps` (default 50 per demand plus 1000) bounds the work
    on pathological inputs, returning the prices reached. Deterministic for the order given.
    The prices returned leave out the epsilon steps: the marginal holder is indifferent.
    """
    price = dict.fromkeys(capacity, 0.0)
    raises = dict.fromkeys(capacity, 0)
    pools = sorted(capacity)
    holders: dict[str, dict[int, int]] = {p: {} for p in pools}
    used = dict.fromkeys(pools, 0.0)
    left = [d.count for d in demands]
    queue = deque(i for i, d in enumerate(demands) if d.count and d.values)
    queued = [True] * len(demands)
    budget = max_steps if max_steps is not None else 50 * len(demands) + 1000

    items = [tuple(d.values.items()) for d in demands]
    # runner_up(i, pool): the best other pool and its price rises when it was found. Prices
    # only rise, so every other option only got worse since: the best holds while its own
    # price has not risen. (Kept while no other pool's price rose, it was found again for
    # every holder at nearly every step: a third of an all-distinct cycle, cProfile.)
    seen: dict[tuple[int, str], tuple[str, int, float]] = {}

    def net(i: int, pool: str) -> float:
        d = demands[i]
        return d.values[pool] - d.size * price[pool]

    def runner_up(i: int, pool: str) -> float:
        known = seen.get((i, pool))
        if known is not None and (not known[0] or raises[known[0]] == known[1]):
            return known[2]
        size = demands[i].size
        best, at = -math.inf, ""
        for q, v in items[i]:
            if q != pool and (value := v - size * price[q]) > best:
                best, at = value, q
        if not at:
            best = 0.0  # no other pool: not running is the next option
        seen[i, pool] = (at, raises[at] if at else 0, best)
        return best

    while queue and budget > 0:
        budget -= 1
        i = queue.popleft()
        queued[i] = False
        d = demands[i]
        best, target = 0.0, ""
        for pool in sorted(d.values):
            if pool in price and (value := net(i, pool)) > best:
                best, target = value, pool
        if not target:
            left[i] = 0  # priced out everywhere: waiting is worth more than any pool
            continue
        holders[target][i] = holders[target].get(i, 0) + left[i]
        used[target] += left[i] * d.size
        left[i] = 0
        excess = used[target] - capacity[target]
        if excess <= 0:
            continue
        # margin per device of each holder over its next option, least attached first
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
    for pool, held in holders.items():
        for i, k in held.items():
            shares[i][pool] = k
    return Auction({p: max(price[p] - epsilon * raises[p], 0.0) for p in pools}, shares)
