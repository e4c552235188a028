"""A planning cycle's Decision for one workload: placed (where, on which nodes, for how
long) or waiting, with the explanation built only when read. Pure."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from tessera import api
from tessera.placement import explain
from tessera.placement.feasibility import static_reasons
from tessera.placement.sharing import Preemption
from tessera.placement.snapshot import PendingWorkload, PoolView
from tessera.placement.state import Row
from tessera.placement.timing import late_notes


@dataclass(frozen=True)
class Decision:
    """What the cycle decided for one workload: placed (where, on which nodes) or waiting.

    A plain frozen dataclass rather than a pydantic model: a cycle makes thousands, and the
    api models of its explanation (`candidates`, `assignments`) are built only when read."""

    namespace: str
    name: str
    placed: bool
    pool: str | None = None
    accelerator: str | None = None
    vendor: api.Vendor | None = None
    score: float | None = None
    nodes: tuple[str, ...] = ()  # the node of each replica, in replica order
    waiting_for: str | None = None
    message: str = ""
    # Seconds the run is expected to take on the chosen pool (run_seconds), None without an
    # estimatedDuration: its devices come back that long after the decision, in this plan
    # and, through status.expectedFinish, in every later one.
    runtime: float | None = None
    # Feasible pools and near misses considered but not among the candidates (the plan's
    # `shown` cap): status.candidatesOmitted.
    omitted: int = 0
    quota: str | None = None  # the AcceleratorQuota governing it, if any
    # Waiting: whether it would fit the fleet now but not its quota (it waits for quota, not
    # for room). Placed: the workloads to evict first, whose devices its nodes count on.
    for_quota: bool = False
    preemption: Preemption | None = None
    _rows: tuple[Row, ...] = field(default=(), repr=False, compare=False)
    _ruled_out: tuple[PoolView, ...] = field(default=(), repr=False, compare=False)
    _notes: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # the cost objective's pools shown that would finish too late: the soonest finish, then
    # each such pool's name and finish; their notes are written when the explanation is read
    _late: tuple[str | float, ...] = field(default=(), repr=False, compare=False)
    _workload: PendingWorkload | None = field(default=None, repr=False, compare=False)
    _namespace_labels: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def assignments(self) -> tuple[api.Assignment, ...]:
        return tuple(api.Assignment(replica=i, node=n) for i, n in enumerate(self.nodes))

    @functools.cached_property
    def candidates(self) -> tuple[api.Candidate, ...]:
        """The pools considered, best first, at most the plan's `shown`: feasible ones in the
        order the workload took them, then the nearest misses with every reason."""
        notes = late_notes(self._late)
        notes.update(self._notes)
        rows = [
            explain.candidate(
                r.ranked.scored.pool.name,
                r.ranked.scored.pool.model,
                feasible=True,
                fits_now=r.fits_now,
                score=r.ranked.score,
                breakdown=r.ranked.breakdown,
                reasons=(*r.reasons, notes[name]) if name in notes else r.reasons,
            )
            for r in self._rows
            for name in (r.ranked.scored.pool.name,)
        ]
        if self._workload is not None:
            rows.extend(
                explain.candidate(
                    view.name,
                    view.model,
                    feasible=False,
                    reasons=static_reasons(self._workload, view, self._namespace_labels),
                )
                for view in self._ruled_out
            )
        return tuple(rows)

    def as_dict(self) -> dict[str, object]:
        """Everything the decision says, as plain data (for comparisons and output)."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "placed": self.placed,
            "pool": self.pool,
            "accelerator": self.accelerator,
            "vendor": self.vendor,
            "score": self.score,
            "nodes": self.nodes,
            "waitingFor": self.waiting_for,
            "message": self.message,
            "candidates": [c.model_dump(by_alias=True) for c in self.candidates],
            "candidatesOmitted": self.omitted,
        }
