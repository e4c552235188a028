"""A pass of the planning cycle over its queue (in order, or in quotas' fair order), and the
preemption that follows for what still waits. Pure; imports tessera.api and the placement
modules only."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime

from tessera.placement.decide import decide, placed_message
from tessera.placement.decision import Decision
from tessera.placement.sharing import Gang, Sharing, fair_order, protected, victims
from tessera.placement.snapshot import PendingWorkload
from tessera.placement.state import Pass, PoolWork, Static

# Waiting workloads a cycle looks for victims for, in the fair order: each look goes over
# the holdings of every feasible pool, and a backlog of thousands would make every cycle
# pay it; the rest look in later cycles (one every two seconds at least).
PREEMPTION_TRIES = 32

Queue = Sequence[tuple[PendingWorkload, Static, Mapping[str, str]]]


@dataclasses.dataclass(slots=True)
class Misses:
    """The admitted workloads a priced pass may leave waiting before it is given up (it
    would be thrown away): at 10,000 pending it missed 9 %, and deciding the other 91 % of
    a pass that could not be kept cost about a quarter of the cycle."""

    admitted: set[tuple[str, str]]
    allowed: int
    missed: int = 0

    def exceeded(self, decision: Decision) -> bool:
        """Counts a decision; True once more than `allowed` admitted ones wait."""
        if not decision.placed and (decision.namespace, decision.name) in self.admitted:
            self.missed += 1
        return self.missed > self.allowed


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    """A pass's decisions, the queue index of each (the order it decided them in), and
    the working state it left: where preemption looks for room."""

    decisions: list[Decision]
    order: list[int]
    state: Pass
    sharing: Sharing | None


def run_pass(
    queue: Queue,
    pools: list[PoolWork],
    prices: dict[str, float],
    shown: int | None,
    sharing: Sharing | None,
    order: Sequence[int] | None = None,
    serial: int = 1,
    misses: Misses | None = None,
) -> Done | None:
    """Decides the queue in order: with quotas, the fair order (tessera.placement.sharing)
    unless `order` is given. `serial` tells the pass's cached scans from another pass's.
    None once `misses` are exceeded (the pass is given up where it stands)."""
    state = Pass(
        serial=serial,
        pools={p.view.name: p for p in pools},
        prices=prices,
        shown=shown,
    )
    if sharing is None:
        if order is None:
            decisions = [decide(w, st, ns, state, None) for w, st, ns in queue]
            return Done(decisions, list(range(len(queue))), state, None)
        decisions = []
        for i in order:
            decisions.append(d := decide(*queue[i], state, None))
            if misses is not None and misses.exceeded(d):
                return None
        return Done(decisions, list(order), state, None)
    sharing = sharing.fresh()
    items: Iterator[tuple[int, Callable[[], None]]]
    if order is None:
        groups: dict[str | None, list[int]] = {}
        for i, (w, _, _) in enumerate(queue):
            groups.setdefault(None if w.holds else sharing.quota_of(w.namespace), []).append(i)
        items = fair_order(groups, sharing)
    else:
        items = ((i, _nothing) for i in order)
    decisions, decided = [], []
    for i, done in items:
        w, st, ns = queue[i]
        decisions.append(d := decide(w, st, ns, state, None if w.holds else sharing))
        if misses is not None and misses.exceeded(d):
            return None
        decided.append(i)
        done()
    return Done(decisions, decided, state, sharing)


def _nothing() -> None:
    return None


def preempt(queue: Queue, done: Done, now: datetime) -> list[Decision]:
    """For each workload of a quota still waiting, in the order decided: the victims whose
    eviction lets it fit (tessera.placement.sharing.victims), if its quota's policy allows.
    It is placed at once on the nodes their eviction frees (its pods wait for the devices
    there, which no one else can take meanwhile: they are promised to it), so no two
    preemptors count the same devices and no workload is chosen as a victim twice."""
    sharing = done.sharing
    if sharing is None:
        return done.decisions
    pools, taken = done.state.pools, set[str]()
    held = {h.key: h for h in sharing.holdings}
    out, tries = [], 0
    for i, d in zip(done.order, done.decisions, strict=True):
        w, st, _ = queue[i]
        quota = sharing.quota_of(w.namespace)
        if d.placed or w.holds or not st.scored or quota is None or tries >= PREEMPTION_TRIES:
            out.append(d)
            continue
        policy = sharing.quotas[quota].spec.preemption
        if policy.within_quota == "Never" and policy.reclaim == "Never":
            out.append(d)
            continue
        tries += 1
        count, replicas = w.spec.accelerator.count, w.spec.replicas

        ranked = st.rank(count * replicas, {})
        names = [r.scored.pool.name for r in ranked]
        gang = Gang(count, replicas, lambda name: pools[name].fit)
        found = victims(
            w.namespace, w.spec.priority, count * replicas, names, gang, sharing, now, taken
        )
        if found is None:
            young = protected(w.namespace, w.spec.priority, count * replicas, names, sharing, now)
            if young is not None:
                key, at = young
                when = at.strftime("%Y-%m-%dT%H:%M:%SZ")
                message = (
                    f"{d.message}; it may preempt {key} from {when} (minRuntimeSeconds "
                    "protects just-placed work)"
                )
                out.append(dataclasses.replace(d, message=message))
            else:
                out.append(d)
            continue
        fit = pools[found.pool].fit
        for v in found.victims:
            taken.add(v.key)
            for node, devices in held[v.key].nodes:
                if node in fit.free:
                    fit.give(node, devices)
            sharing.release(v)
        nodes = fit.take(count, replicas) or []
        sharing.take(w.namespace, found.pool, count * replicas)
        chosen = next(r for r in ranked if r.scored.pool.name == found.pool)
        pool = chosen.scored.pool
        evicted = ", ".join(v.key for v in found.victims)
        rules = " and ".join(sorted({v.rule for v in found.victims}))
        message = (
            f"{placed_message(pool, chosen.score, replicas, count)}, preempting {evicted} "
            f"({rules}): its pods start as their devices are freed"
        )
        out.append(
            dataclasses.replace(
                d,
                placed=True,
                pool=pool.name,
                accelerator=pool.model,
                vendor=pool.vendor,
                score=chosen.score,
                nodes=tuple(nodes),
                waiting_for=None,
                for_quota=False,
                preemption=found,
                message=message,
            )
        )
    return out
