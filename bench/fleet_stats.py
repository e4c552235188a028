"""The fleet benchmark's repeats: the order of the sides in each repeat, and a figure measured
once a repeat summed up as its median, min and max, with a verdict only where the whole spread
lies on one side of its target. Pure: no I/O."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

# The sides of every repeat: Tessera, the floor operator (same pods, same pins, no decisions)
# and the bare kube-scheduler (the same pods, unpinned, no operator).
SIDES = ("tessera", "floor", "baseline")
MET, NOT_MET, UNDECIDED = "met", "not met", "undecided"


def rotation(repeat: int, sides: Sequence[str] = SIDES) -> list[str]:
    """The sides in the order repeat `repeat` (from 0) runs them: rotated one place a
    repeat, so each runs first, second and last in turn and none always inherits the
    machine the others left."""
    k = repeat % len(sides)
    return list(sides[k:]) + list(sides[:k])


def sides_of(repeat: int, bare_repeats: int) -> list[str]:
    """The sides repeat `repeat` (from 0) runs, in order: all three in the first
    `bare_repeats` repeats, then Tessera and the floor alone, in the order `rotation` gives
    them. The bare scheduler is context, not a target's baseline, and at 5,000 nodes its
    unpinned pods take ten minutes of each repeat's thirty-five."""
    order = rotation(repeat)
    return order if repeat < bare_repeats else [s for s in order if s != "baseline"]


def spread(values: Iterable[float | None]) -> dict[str, Any] | None:
    """n, median, min and max of the values measured (None: not measured in that repeat,
    left out); None where none was measured."""
    data = [v for v in values if v is not None]
    if not data:
        return None
    return {
        "n": len(data),
        "median": round(statistics.median(data), 4),
        "min": round(min(data), 4),
        "max": round(max(data), 4),
        "values": [round(v, 4) for v in data],
    }


def verdict(figure: dict[str, Any] | None, op: str, limit: float) -> str | None:
    """met where the whole spread meets the target, not met where none of it does,
    undecided where it straddles the limit; None where nothing was measured."""
    if figure is None:
        return None
    low, high = figure["min"], figure["max"]
    if op == ">=":
        return MET if low >= limit else NOT_MET if high < limit else UNDECIDED
    if op == "<=":
        return MET if high <= limit else NOT_MET if low > limit else UNDECIDED
    if op == "==":
        return (
            MET if low == high == limit else NOT_MET if limit < low or limit > high else UNDECIDED
        )
    raise ValueError(f"unknown comparison {op!r}")


def met(verdict_: str | None) -> bool | None:
    """The verdict as the table's met column: True, False, or None (undecided, unmeasured)."""
    return {MET: True, NOT_MET: False}.get(verdict_ or "")
