"""Explanations: the candidate list of a decision (best first, capped), its one-line message,
and a plain-text table for the CLI. Pure functions; imports tessera.api only."""

from __future__ import annotations

from collections.abc import Sequence

from tessera import api

MAX_CANDIDATES = 8  # status.candidates is documented as capped at 8
MAX_REASONS = 4  # per candidate, so one status stays small whatever the fleet


def candidate(
    pool: str,
    accelerator: str,
    *,
    feasible: bool,
    fits_now: bool = False,
    score: float = 0.0,
    breakdown: api.ScoreBreakdown | None = None,
    reasons: Sequence[str] = (),
) -> api.Candidate:
    """One row of the explanation (built without re-validation: the inputs are ours)."""
    shown = list(reasons[:MAX_REASONS])
    if len(reasons) > MAX_REASONS:
        shown.append(f"and {len(reasons) - MAX_REASONS} more")
    return api.Candidate.model_construct(
        pool=pool,
        accelerator=accelerator,
        feasible=feasible,
        fits_now=fits_now,
        score=score,
        breakdown=breakdown,
        reasons=shown,
    )


def cap(
    feasible: Sequence[api.Candidate], infeasible: Sequence[api.Candidate]
) -> list[api.Candidate]:
    """Feasible candidates by score (as given), then the nearest misses, at most MAX_CANDIDATES."""
    out = list(feasible[:MAX_CANDIDATES])
    out.extend(infeasible[: MAX_CANDIDATES - len(out)])
    return out


def hours(seconds: float) -> str:
    """A duration for people: 45m, 3.2h, 2.5d."""
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def table(candidates: Sequence[api.Candidate]) -> str:
    """The candidates as a fixed-width table, one pool per line, reasons joined by `; `."""
    head = ("POOL", "ACCELERATOR", "FEASIBLE", "FITS", "SCORE", "PERF", "COST", "ENERGY", "WHY")
    rows = [head]
    for c in candidates:
        b = c.breakdown
        rows.append(
            (
                c.pool,
                c.accelerator,
                "yes" if c.feasible else "no",
                "yes" if c.fits_now else "no",
                f"{c.score:.1f}" if c.feasible else "-",
                f"{b.performance:.2f}" if b else "-",
                f"{b.cost:.2f}" if b else "-",
                f"{b.energy:.2f}" if b else "-",
                "; ".join(c.reasons),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    return "\n".join(
        (
            "  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        ).rstrip()
        for r in rows
    )
