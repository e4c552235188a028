"""The planning cycle: pending workloads in priority then age order, each placed on the best
feasible pool that fits now (or left waiting, with reasons). No clocks, randomness or I/O;
imports tessera.api and the placement modules only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from tessera import api
from tessera.placement import explain
from tessera.placement.feasibility import capacity_reason, static_reasons
from tessera.placement.fit import NodeFit, earliest_fit
from tessera.placement.scoring import Scored, score
from tessera.placement.snapshot import PendingWorkload, PoolView, Snapshot

# Waiting for a faster pool must save at least this share of the time to finish by running
# now on the best pool that fits: estimates are rough, and a placement now is certain.
WAIT_MARGIN = 0.1


class Decision(api._Model):
    """What the cycle decided for one workload: placed (where, on which nodes) or waiting."""

    namespace: str
    name: str
    placed: bool
    pool: str | None = None
    accelerator: str | None = None
    vendor: api.Vendor | None = None
    score: float | None = None
    assignments: tuple[api.Assignment, ...] = ()
    candidates: tuple[api.Candidate, ...] = ()
    waiting_for: str | None = None
    message: str = ""

    def to_status(
        self, now: datetime, status: api.WorkloadStatus | None = None
    ) -> api.WorkloadStatus:
        """The Workload status fields this decision sets, on top of `status`."""
        base = status or api.WorkloadStatus()
        return base.model_copy(
            update={
                "phase": api.Phase.PLACED if self.placed else api.Phase.PENDING,
                "pool": self.pool,
                "accelerator": self.accelerator,
                "vendor": self.vendor,
                "score": self.score,
                "assignments": list(self.assignments),
                "candidates": list(self.candidates),
                "message": self.message,
                "placed_at": now if self.placed else None,
            }
        )


@dataclass(slots=True)
class _Static:
    """What does not change while the cycle runs, for one kind of workload."""

    scored: list[Scored]
    infeasible: list[api.Candidate]
    best_throughput: float


@dataclass(slots=True)
class _Pool:
    """One pool's working state during the cycle."""

    view: PoolView
    fit: NodeFit
    releases: list[tuple[float, str, int]]  # seconds from now, node, devices
    backlog: float = 0.0  # device-seconds of workloads that chose to wait for this pool
    _starts: dict[tuple[int, int], float | None] | None = None
    _version: int = -1

    def earliest_fit(self, count: int, replicas: int) -> float | None:
        if self._starts is None or self._version != self.fit.version:
            self._starts, self._version = {}, self.fit.version
        key = (count, replicas)
        if key not in self._starts:
            self._starts[key] = earliest_fit(self.fit.free, self.releases, count, replicas)
        return self._starts[key]

    def expected_start(self, count: int, replicas: int) -> float | None:
        """Seconds from now until the gang could start here, from known releases and the work
        already waiting for this pool; None when the known releases never make room."""
        at = self.earliest_fit(count, replicas)
        if at is None:
            return None
        return at + self.backlog / max(self.view.devices, 1)


def _signature(w: PendingWorkload) -> tuple[object, ...]:
    need, spec = w.spec.accelerator, w.spec
    weights = spec.weights
    return (
        w.namespace,
        w.excluded_pools,
        spec.replicas,
        spec.objective,
        (weights.performance, weights.cost, weights.energy) if weights else None,
        need.count,
        need.min_memory_gib,
        need.precision,
        need.profile,
        tuple(need.vendors),
        tuple(need.models),
        tuple(need.exclude_models),
        tuple(need.pools),
        tuple(need.features),
        tuple(sorted(need.software.items())),
        tuple(sorted(need.throughput.items())),
    )


def _order_key(w: PendingWorkload) -> tuple[int, datetime, str, str]:
    return (-w.spec.priority, w.created_at, w.namespace, w.name)


def _static(w: PendingWorkload, pools: Sequence[_Pool], snapshot: Snapshot) -> _Static:
    ns_labels = snapshot.namespaces.get(w.namespace, {})
    feasible: list[PoolView] = []
    infeasible: list[tuple[int, str, api.Candidate]] = []
    for p in pools:
        reasons = static_reasons(w, p.view, ns_labels)
        if reasons:
            row = explain.candidate(p.view.name, p.view.model, feasible=False, reasons=reasons)
            infeasible.append((len(reasons), p.view.name, row))
        else:
            feasible.append(p.view)
    scored = score(w.spec, feasible)
    infeasible.sort(key=lambda t: (t[0], t[1]))
    best = max((s.throughput for s in scored), default=0.0)
    return _Static(scored, [row for _, _, row in infeasible], best)


def plan(pending: Sequence[PendingWorkload], snapshot: Snapshot, now: datetime) -> list[Decision]:
    """Decide placements for the pending workloads over one snapshot, in priority then age
    order (ties by namespace and name); each placement is folded into the snapshot before the
    next workload is considered. Returns one decision per workload, in that order."""
    pools = [
        _Pool(
            view=PoolView.of(p),
            fit=NodeFit((n.name, n.free) for n in p.nodes if n.ready),
            releases=sorted(
                (max((r.at - now).total_seconds(), 0.0), n.name, r.devices)
                for n in p.nodes
                if n.ready
                for r in n.releases
            ),
        )
        for p in sorted(snapshot.pools, key=lambda p: p.name)
    ]
    by_name = {p.view.name: p for p in pools}
    statics: dict[tuple[object, ...], _Static] = {}
    decisions = []
    for w in sorted(pending, key=_order_key):
        sig = _signature(w)
        st = statics.get(sig)
        if st is None:
            st = statics[sig] = _static(w, pools, snapshot)
        decisions.append(_decide(w, st, by_name))
    return decisions


def _decide(w: PendingWorkload, st: _Static, pools: dict[str, _Pool]) -> Decision:
    count, replicas = w.spec.accelerator.count, w.spec.replicas
    fits = [pools[s.pool.name].fit.fits(count, replicas) for s in st.scored]
    first = next((i for i, ok in enumerate(fits) if ok), None)
    duration = w.spec.duration_seconds()
    notes: dict[str, str] = {}
    wait: Scored | None = None
    if duration is not None and st.scored:
        wait = _better_by_waiting(w, st, pools, first, duration=duration, notes=notes)
    chosen = st.scored[first] if first is not None and wait is None else None

    rows = []
    for s, ok in zip(st.scored, fits, strict=True):
        reasons = []
        if not ok:
            reasons.append(capacity_reason(w, s.pool, pools[s.pool.name].fit) or "")
        if s.pool.name in notes:
            reasons.append(notes[s.pool.name])
        rows.append(
            explain.candidate(
                s.pool.name,
                s.pool.model,
                feasible=True,
                fits_now=ok,
                score=s.total,
                breakdown=s.breakdown,
                reasons=reasons,
            )
        )
    candidates = tuple(explain.cap(rows, st.infeasible))

    if chosen is not None:
        target = pools[chosen.pool.name]
        nodes = target.fit.take(count, replicas) or []
        if duration is not None:
            runtime = duration * st.best_throughput / chosen.throughput
            for node in nodes:
                target.releases.append((runtime, node, count))
            target.releases.sort()
        return Decision(
            namespace=w.namespace,
            name=w.name,
            placed=True,
            pool=chosen.pool.name,
            accelerator=chosen.pool.model,
            vendor=chosen.pool.vendor,
            score=chosen.total,
            assignments=tuple(
                api.Assignment.model_construct(replica=i, node=n) for i, n in enumerate(nodes)
            ),
            candidates=candidates,
            message=f"placed on {chosen.pool.name} ({chosen.pool.model}), score "
            f"{chosen.total:.1f}, {replicas} x {count} {chosen.pool.resource}",
        )

    if wait is not None and duration is not None:
        pools[wait.pool.name].backlog += (
            replicas * count * duration * st.best_throughput / wait.throughput
        )
    return Decision(
        namespace=w.namespace,
        name=w.name,
        placed=False,
        waiting_for=wait.pool.name if wait else None,
        candidates=candidates,
        message=_waiting_message(w, st, wait, notes),
    )


def _better_by_waiting(
    w: PendingWorkload,
    st: _Static,
    pools: dict[str, _Pool],
    first: int | None,
    *,
    duration: float,
    notes: dict[str, str],
) -> Scored | None:
    """The better-scored pool worth waiting for: the one whose expected completion (known
    releases, plus work already waiting for it, plus the run at its speed) beats running now
    on the best pool that fits by WAIT_MARGIN; None when running now is as good."""
    count, replicas = w.spec.accelerator.count, w.spec.replicas

    def runtime(s: Scored) -> float:
        return duration * st.best_throughput / s.throughput if s.throughput > 0 else math.inf

    now_done = runtime(st.scored[first]) if first is not None else math.inf
    best: tuple[float, Scored] | None = None
    for s in st.scored[: first if first is not None else len(st.scored)]:
        start = pools[s.pool.name].expected_start(count, replicas)
        if start is None:
            continue
        done = start + runtime(s)
        if done < now_done * (1 - WAIT_MARGIN) and (best is None or done < best[0]):
            best = (done, s)
    if best is None:
        return None
    done, s = best
    if first is not None:
        here = st.scored[first].pool.name
        notes[s.pool.name] = (
            f"expected to finish in {explain.hours(done)} here, against "
            f"{explain.hours(now_done)} on {here} now"
        )
        notes[here] = f"fits now, but would finish later ({explain.hours(now_done)})"
    else:
        notes[s.pool.name] = f"expected to finish soonest here: in {explain.hours(done)}"
    return s


def _waiting_message(
    w: PendingWorkload, st: _Static, wait: Scored | None, notes: dict[str, str]
) -> str:
    if not st.scored:
        return f"no pool can run this workload ({len(st.infeasible)} ruled out, reasons below)"
    if wait is not None:
        return f"waiting for {wait.pool.name}: {notes[wait.pool.name]}"
    need = w.spec.accelerator
    return (
        f"waiting: no feasible pool has room for {w.spec.replicas} pods of {need.count} "
        f"devices now ({len(st.scored)} feasible)"
    )
