"""Exclusions: the pools a workload was withdrawn from, and when each is tried again. An
exclusion is never permanent: it lifts when the pool changes (its spec, its nodes that take
pods, more free devices than the workload left behind) or when its backoff ends. Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from tessera.world.facts import parse_time

# The first retry waits the workload's fallbackAfterSeconds (at least this long); each
# withdrawal from the same pool in a row doubles the wait, up to MAX_BACKOFF.
MIN_BACKOFF = 60.0
MAX_BACKOFF = 3600.0
# A gang whose pods the API server refused (a quota, an admission policy) is withdrawn at
# once and its pool tried again after this long, doubling in a row: the refusal is often
# namespace-wide, and lifts when an admin raises the quota.
REFUSAL_BACKOFF = 10.0

# (generation, nodes that take pods, devices free on them) of a pool, or None when gone.
PoolSeen = tuple[int, int, int]


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def backoff(base: float, withdrawals: int, floor: float = MIN_BACKOFF) -> float:
    """Seconds until a pool withdrawn from `withdrawals` times in a row is tried again."""
    first = max(floor, base)
    return float(min(first * 2 ** max(0, withdrawals - 1), MAX_BACKOFF))


def exclude(
    entries: Iterable[Mapping[str, Any]],
    pool: str,
    why: str,
    now: datetime,
    seen: PoolSeen,
    base: float,
    floor: float = MIN_BACKOFF,
    refused: bool = False,
) -> list[dict[str, Any]]:
    """The workload's excludedPools with `pool` withdrawn from now (a withdrawal in a row
    from the same pool, if it was there already, doubles the wait). `refused`: the API
    server refused its pods, which more free devices do not change (tessera.world.
    exclusions.active)."""
    kept = [dict(e) for e in entries if e.get("pool") != pool]
    before = next((e for e in entries if e.get("pool") == pool), None)
    withdrawals = int(before.get("withdrawals") or 1) + 1 if before else 1
    retry = now + timedelta(seconds=backoff(base, withdrawals, floor))
    generation, nodes, available = seen
    entry = {
        "pool": pool,
        "reason": why[:1000],
        "since": _iso(now),
        "retryAt": _iso(retry),
        "withdrawals": withdrawals,
        "seen": {"generation": generation, "nodes": nodes, "available": available},
    }
    if refused:
        entry["refused"] = True
    return [*kept, entry]


def active(
    entries: Iterable[Mapping[str, Any]],
    now: datetime,
    pool_now: Callable[[str], PoolSeen | None],
) -> dict[str, str]:
    """The exclusions in force, pool -> why, as placement reads them: those whose backoff
    has not ended, on a pool that is still as it was (same generation, same nodes that take
    pods, no more free devices). An entry written before exclusions carried times (no
    retryAt) lifts at once."""
    out: dict[str, str] = {}
    for e in entries:
        pool = str(e.get("pool") or "")
        retry = parse_time(e.get("retryAt"))
        if not pool or retry is None or now >= retry:
            continue
        was = e.get("seen") or {}
        current = pool_now(pool)
        if current is None:
            continue  # gone: not a candidate; back under that name, the same pool anew
        generation, nodes, available = current
        if generation != was.get("generation") or nodes != was.get("nodes"):
            continue
        if available > int(was.get("available") or 0) and not e.get("refused"):
            continue  # room came back (a refusal is not for want of room)
        reason = str(e.get("reason") or "")
        out[pool] = (
            f"withdrawn from at {e.get('since')}: {reason} (tried again at {_iso(retry)}, "
            "or sooner when the pool changes)"
        )
    return out


def lifted(entries: Iterable[Mapping[str, Any]], pool: str) -> list[dict[str, Any]]:
    """excludedPools once the workload is placed on `pool`: that entry stays, without its
    retryAt and seen (in force no more), so a withdrawal from it again counts as one more
    in a row and waits twice as long."""
    return [
        {k: v for k, v in e.items() if k not in ("retryAt", "seen")}
        if e.get("pool") == pool
        else dict(e)
        for e in entries
    ]


def in_force(entries: Iterable[Mapping[str, Any]]) -> set[str]:
    """The pools of the entries not lifted by a placement there (whatever their time): the
    pods a workload has on those were withdrawn, never its placement."""
    return {str(e.get("pool")) for e in entries if e.get("retryAt") or not e.get("since")}
