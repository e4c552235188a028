"""Contention: shadow prices of scarce pools, found by an ascending auction among all pending
work, so each workload weighs what its choice costs the others. Pure; imports nothing of Tessera."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Each price rise is at least this much value per device: the auction's precision (values
# are scores / 100, so 1e-3 is a tenth of a score point for a one-device workload).
EPSILON = 1e-3
# Holders whose attachments are this close may rank otherwise by margin (rounding): far
# above the rounding of values near 1, far below EPSILON.
TIE = 1e-9


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
    by_name = [sorted(i) for i in items]  # where each bids, in pool name order
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

    # Each pool's holders, least attached first: by value per device over the next option,
    # the margin before the pool's own price (a price rise moves every holder's margin by the
    # same amount). A holder's attachment only grows (its next option only gets worse), so a
    # heap entry is a lower bound: the least, looked at again, is the least if unchanged.
    # (Re-sorting every holder at each rise was a quarter of an all-distinct cycle.)
    heaps: dict[str, list[tuple[float, int]]] = {p: [] for p in pools}  # every holder, once

    def attachment(i: int, pool: str) -> float:
        d = demands[i]
        return (d.values[pool] - max(runner_up(i, pool), 0.0)) / d.size

    def margin(i: int, pool: str) -> float:
        """Value per device over the next option at the pool's price: the eviction order."""
        return (net(i, pool) - max(runner_up(i, pool), 0.0)) / demands[i].size

    def least(pool: str) -> list[tuple[float, int, float]]:
        """The least attached holders (attachment, holder, margin) in eviction order: each
        within TIE of the one before, so the next holder left in the heap is more attached
        than all of them by more than TIE. Margin and attachment differ by the price, in
        rounding too, so their orders can differ only within such a run: ranked by margin,
        the runs give the order ranking every holder by margin would."""
        heap = heaps[pool]
        run: list[tuple[float, int, float]] = []
        while heap and (not run or heap[0][0] <= run[-1][0] + TIE):
            known, h = heapq.heappop(heap)
            if (now := attachment(h, pool)) != known:
                heapq.heappush(heap, (now, h))  # more attached than it was: look again
            else:
                run.append((known, h, margin(h, pool)))
        return sorted(run, key=lambda r: (r[2], r[1]))

    while queue and budget > 0:
        budget -= 1
        i = queue.popleft()
        queued[i] = False
        d = demands[i]
        best, target, size = 0.0, "", d.size
        for pool, v in by_name[i]:
            if pool in price and (value := v - size * price[pool]) > best:
                best, target = value, pool
        if not target:
            left[i] = 0  # priced out everywhere: waiting is worth more than any pool
            continue
        heap, held = heaps[target], holders[target]
        if i not in held:  # a holder already is in the heap
            heapq.heappush(heap, (attachment(i, target), i))
        held[i] = held.get(i, 0) + left[i]
        used[target] += left[i] * d.size
        left[i] = 0
        excess = used[target] - capacity[target]
        if excess <= 0:
            continue
        threshold = 0.0
        while excess > 0 and heap:
            for known, h, least_margin in least(target):
                if excess > 0:
                    size = demands[h].size
                    k = min(held[h], math.ceil(excess / size))
                    held[h] -= k
                    used[target] -= k * size
                    excess -= k * size
                    left[h] += k
                    threshold = least_margin
                    if not queued[h]:
                        queue.append(h)
                        queued[h] = True
                if held[h]:
                    heapq.heappush(heap, (known, h))
                else:
                    del held[h]
        price[target] += max(threshold, 0.0) + epsilon
        raises[target] += 1
    shares: list[dict[str, int]] = [{} for _ in demands]
    for pool, held in holders.items():
        for i, k in held.items():
            shares[i][pool] = k
    return Auction({p: max(price[p] - epsilon * raises[p], 0.0) for p in pools}, shares)
