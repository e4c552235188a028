"""One workload's decision within a pass: the first pool in its kind's order that fits now
(or waiting, where timing says so), with the explanation its status keeps.
Pure; imports tessera.api and the placement modules only."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from tessera.placement.decision import Decision
from tessera.placement.feasibility import static_reasons
from tessera.placement.scoring import Scored
from tessera.placement.sharing import Sharing
from tessera.placement.snapshot import PendingWorkload, PoolView
from tessera.placement.state import Pass, Row, Scan, Static, new_row
from tessera.placement.timing import (
    Late,
    better_by_waiting,
    cheapest_in_time,
    duration_of,
    run_seconds,
)

_NO_NOTES: Mapping[str, str] = MappingProxyType({})


def placed_message(pool: PoolView, score: float, replicas: int, count: int) -> str:
    """What a placement's status and event say, preempting or not."""
    where = f"placed on {pool.name} ({pool.model}), score {score:.1f}"
    return f"{where}, {replicas} x {count} {pool.resource}"


def decide(
    w: PendingWorkload,
    st: Static,
    ns_labels: Mapping[str, str],
    state: Pass,
    sharing: Sharing | None,
) -> Decision:
    count, replicas = w.spec.accelerator.count, w.spec.replicas
    pools, prices = state.pools, state.prices
    ranked = st.order(count * replicas, prices)
    key = (state.serial, state.placements, id(ranked))
    if st.scan is None or st.scan.key != key:  # something was placed since: look again
        st.scan = Scan(key, ranked, pools, (count, replicas), st.unlocked)
    scan = st.scan
    fits = scan.fits
    quota = refused = None
    if sharing is not None:
        quota = sharing.quota_of(w.namespace)
        room = scan.fits
        refusals: dict[int, str | None] = {}

        def refusal(i: int) -> str | None:
            if i not in refusals:
                pool = ranked[i].scored.pool.name
                refusals[i] = sharing.refusal(w.namespace, pool, count * replicas)
            return refusals[i]

        def fits(i: int) -> bool:
            return room(i) and refusal(i) is None

        def refused() -> str | None:
            """Why it waits for quota: the first pool with room that the quota refuses."""
            return next((r for i in range(len(ranked)) if room(i) and (r := refusal(i))), None)

    estimate = w.spec.estimated_duration
    duration = duration_of(estimate) if estimate else None
    notes: dict[str, str] = {}
    late: Late | None = None
    wait: Scored | None = None
    if duration is not None and ranked and st.cost_only:
        first, wait, late = cheapest_in_time(w, st, pools, ranked, fits, duration, notes)
    else:
        first = next(filter(fits, range(len(ranked))), None)  # the first pool that fits now
        if duration is not None and ranked:
            wait = better_by_waiting(w, st, pools, ranked, fits, first, duration, notes)
    chosen = ranked[first] if first is not None and wait is None else None

    shown = scan.rows
    if shown is None:  # a decision's notes are added when its explanation is read
        rows = []
        for i, r in enumerate(ranked[: state.shown]):
            pool_work = pools[r.scored.pool.name]
            fit = pool_work.fit
            seen = st.rows.get((id(ranked), i))
            if seen is not None and seen[0] is fit and seen[1] == fit.version:
                row = seen[2]  # the pool has not changed since: the same row
                scan.known[i] = row.fits_now
            else:
                now = fits(i)
                reasons = () if now else (pool_work.capacity_reason(w) or "",)
                row = new_row((r, now, reasons))
                st.rows[id(ranked), i] = (fit, fit.version, row)
            rows.append(row)
        shown = scan.rows = tuple(rows)
    ruled_out = st.nearest_misses(None if state.shown is None else state.shown - len(shown))
    omitted = len(ranked) - len(shown) + len(st.misses) - len(ruled_out)
    late_shown: tuple[str | float, ...] = ()
    if late is not None:
        for i, row in enumerate(shown):
            t = late.runs[i] if row.fits_now else late.done.get(i, math.inf)
            if i != late.pick and late.bound < t < math.inf:
                late_shown += (row.ranked.scored.pool.name, t)
        if late_shown:
            late_shown = (late.soonest, *late_shown)

    if chosen is not None:
        pool = chosen.scored.pool
        if sharing is not None:
            sharing.take(w.namespace, pool.name, count * replicas)
        if prices and st.quota.get(pool.name, 0) > 0:
            st.quota[pool.name] -= 1
        target = pools[pool.name]
        nodes = target.fit.take_with(count, replicas, st.unlocked.get(pool.name, ())) or []
        state.placements += 1
        runtime = None
        if duration is not None:
            runtime = run_seconds(duration, st.best_throughput, chosen.scored.throughput)
            for node in nodes:  # kept in time order: a few into hundreds, so not sorted again
                bisect.insort(target.releases, (runtime, node, count))
        return Decision(
            namespace=w.namespace,
            name=w.name,
            placed=True,
            pool=pool.name,
            accelerator=pool.model,
            vendor=pool.vendor,
            score=chosen.score,
            nodes=tuple(nodes),
            runtime=runtime,
            message=placed_message(pool, chosen.score, replicas, count),
            quota=quota,
            _rows=shown,
            _ruled_out=ruled_out,
            omitted=omitted,
            _notes=notes or _NO_NOTES,
            _late=late_shown,
            _workload=w,
            _namespace_labels=ns_labels,
        )

    if wait is not None and duration is not None:
        pools[wait.pool.name].backlog += (
            replicas * count * run_seconds(duration, st.best_throughput, wait.throughput)
        )
    message = waiting_message(w, st, wait, notes, ns_labels, shown)
    for_quota = False
    if refused is not None and sharing is not None:
        why = refused() if wait is None else None
        if why is not None:
            message, for_quota = f"waiting for quota: {why}", True
        elif st.scored and quota is None and w.namespace in sharing.contested:
            message = f"waiting: {sharing.refusal(w.namespace, ranked[0].scored.pool.name, 0)}"
        sharing.waits(w.namespace, [r.scored.pool.name for r in ranked], count * replicas)
    return Decision(
        namespace=w.namespace,
        name=w.name,
        placed=False,
        waiting_for=wait.pool.name if wait else None,
        quota=quota,
        for_quota=for_quota,
        message=message,
        _rows=shown,
        _ruled_out=ruled_out,
        omitted=omitted,
        _notes=notes or _NO_NOTES,
        _late=late_shown,
        _workload=w,
        _namespace_labels=ns_labels,
    )


def waiting_message(
    w: PendingWorkload,
    st: Static,
    wait: Scored | None,
    notes: dict[str, str],
    ns_labels: Mapping[str, str],
    shown: Sequence[Row] = (),
) -> str:
    """One line on why a workload waits: the nearest pool's reasons when none can run it,
    else what the best feasible pool (the one it would take) lacks now."""
    if not st.scored:
        # The nearest miss's reasons in the message itself, so the Event and `kubectl get -o
        # wide` say why; every pool's are in status.candidates. Once per kind and namespace
        # (a reason may name the namespace), not per workload.
        message = st.no_pool.get(w.namespace)
        if message is None:
            message = f"no pool can run this workload ({st.ruled_out_count} ruled out"
            if 0 < st.chosen_away < st.ruled_out_count:
                message += f", {st.chosen_away} by its own selection"
            if st.ruled_out:
                nearest = st.ruled_out[0]
                why = "; ".join(static_reasons(w, nearest, ns_labels))
                message += f"; nearest {nearest.name}: {why}"
            message = st.no_pool[w.namespace] = message + ")"
        return message
    if wait is not None:
        return f"waiting for {wait.pool.name}: {notes[wait.pool.name]}"
    need = w.spec.accelerator
    best = next((row for row in shown if row.reasons and row.reasons[0]), None)
    lacks = f"; best {best.ranked.scored.pool.name}: {best.reasons[0]}" if best else ""
    return (
        f"waiting: no feasible pool has room for {w.spec.replicas} pods of {need.count} "
        f"devices now ({len(st.scored)} feasible{lacks})"
    )
