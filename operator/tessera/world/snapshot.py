"""The World: one consistent copy of the caches and what follows from it (which nodes form
each pool, devices in use, promised and coming back, the quotas, the placement snapshot).
Where each workload is placed it inherits from tessera.world.placements; the nodes as
placement sees them are built by tessera.world.node_states. Pure."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import InitVar, dataclass, field
from datetime import datetime

from pydantic import ValidationError

from tessera import api, placement
from tessera.catalog import REFERENCE_MODEL, Accelerator
from tessera.dra import ClaimFacts, SliceFacts
from tessera.placement.sharing import Holding, QuotaState
from tessera.placement.snapshot import NAME_LABEL, NodeState, PoolState, Release, Taint
from tessera.world.caches import Edits, PodIndex, WorkloadIndex, WorldCache, add_devices
from tessera.world.dra import fold
from tessera.world.exclusions import active
from tessera.world.facts import (
    TERMINAL,
    NodeFacts,
    ObjectFacts,
    Placed,
    PodFacts,
    validation_message,
)
from tessera.world.membership import membership, unfit_nodes
from tessera.world.node_states import free_devices, node_state
from tessera.world.placements import Placements


def devices_per_replica(facts: ObjectFacts | None) -> int:
    """spec.accelerator.count, read from the raw spec: the World reads it for every placed
    workload each time its facts change, where parsing the whole spec would cost more."""
    return int(((facts.spec if facts else {}).get("accelerator") or {}).get("count", 1))


def _holds(facts: ObjectFacts) -> bool:
    """Whether a placed workload holds its devices: not being deleted, not finished."""
    return not facts.deleting and facts.status.get("phase") not in TERMINAL


def _promised(
    facts: ObjectFacts | None, placed: Placed, pods: Iterable[PodFacts]
) -> tuple[tuple[str, int], ...]:
    """(node, devices) for each replica placed but whose pod is not bound (nor finished)."""
    count = devices_per_replica(facts)
    bound = {p.replica for p in pods if p.pool == placed.pool and (p.node or p.terminal)}
    return tuple(
        (node, count) for replica, node in placed.assignments.items() if replica not in bound
    )


@dataclass
class PoolLayout:
    """The pools of one moment: each spec parsed (or why it is not; a pool being deleted is
    draining), the nodes each selects (a node two pools select counts for one:
    tessera.world.membership; the other reports the overlap), the nodes that take no new pods,
    the accelerator each resolves to (without nodes), and which were resolved anew."""

    specs: dict[str, api.AcceleratorPoolSpec] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    members: dict[str, list[str]] = field(default_factory=dict)
    overlaps: dict[str, dict[str, str]] = field(default_factory=dict)
    base: dict[str, PoolState] = field(default_factory=dict)
    rebuilt: set[str] = field(default_factory=set)  # spec or nodes changed since the cache
    # Per pool, its nodes that take no new pods, with why (facts.unfit_reason): placement
    # leaves them out, and their devices are not available.
    unfit: dict[str, dict[str, str]] = field(default_factory=dict)
    # Of those, the ones unfit only because of taints the pool does not tolerate, with the
    # taints: a workload whose template tolerates them may still use them (placement).
    gated: dict[str, dict[str, tuple[Taint, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Devices:
    """Devices by node: in use by bound pods, promised to placed replicas whose pods are not
    bound, and when devices in use come back (from placement's expected finish)."""

    used: dict[str, Mapping[str, int]]
    reserved: dict[str, Mapping[str, int]]
    releases: dict[str, list[Release]]


@dataclass
class World(Placements):
    """One consistent copy of the caches, taken at one moment, and what follows from it: the
    pools' layout, the devices in use, each workload's placement and pods."""

    nodes: dict[str, NodeFacts]
    pods: InitVar[list[PodFacts]]
    pools: dict[str, ObjectFacts]
    workloads: dict[str, ObjectFacts]  # key: namespace/name
    namespaces: dict[str, Mapping[str, str]]
    quotas: dict[str, ObjectFacts] = field(default_factory=dict)
    slices: dict[str, SliceFacts] = field(default_factory=dict)  # DRA drivers' devices
    claims: dict[tuple[str, str], ClaimFacts] = field(default_factory=dict)  # allocated ones
    # Placements decided by this process but maybe not yet visible in the workloads cache.
    recent: dict[str, Placed] = field(default_factory=dict)
    # The keys of each cache changed since the copy before (Informers.copy), where known.
    edits: Edits | None = field(default=None, repr=False, compare=False)
    cache: WorldCache = field(default_factory=WorldCache, repr=False, compare=False)
    # The model one normalised unit stands for (tessera.catalog.units_per_device).
    unit_reference: str = REFERENCE_MODEL
    # This World's number among those built over its cache, and the workloads whose facts,
    # decision or pods changed since the one before it (None: all, the index was rebuilt):
    # what a reader that saw the World before can skip (tessera.controller.visits).
    serial: int = field(init=False, default=0, repr=False, compare=False)
    changes: frozenset[str] | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self, pods: list[PodFacts]) -> None:
        # Counted first: a World that fails half-built leaves a gap, not a wrong `changes`.
        self.cache.worlds += 1
        self.serial = self.cache.worlds
        self.dra = fold(self.nodes, self.slices, self.claims, self.cache.dra_nodes)
        self.nodes = self.dra.nodes  # DRA nodes with their devices as allocatable
        self.layout = layout = PoolLayout()
        for name, facts in sorted(self.pools.items()):
            try:
                spec = api.AcceleratorPoolSpec.model_validate(facts.spec)
            except ValidationError as err:
                layout.errors[name] = validation_message(err)
                continue
            # A pool being deleted drains: nothing new lands there, services move away and
            # batch work runs to its end; its finalizer then lets it go (controller.pools).
            if facts.deleting:
                spec = spec.model_copy(update={"draining": True})
            layout.specs[name] = spec
        layout.members, layout.overlaps = membership(
            self.pools, layout.specs, self.nodes, self.cache
        )
        layout.unfit, layout.gated = unfit_nodes(
            layout.members, layout.specs, self.nodes, self.cache
        )
        self.nodes_epoch = self.cache.nodes_epoch
        try:
            pods_changed = self.cache.index.update(pods)
        except Exception:
            self.cache.index = PodIndex()  # built whole again next time
            raise
        self.pods_by_workload = dict(self.cache.index.by_workload)
        self._placed: dict[str, Placed | None] = {}
        self._with_free: dict[str, PoolState] = {}
        layout.base = {name: self._base(name, spec) for name, spec in layout.specs.items()}
        if self.cache.pool_states.keys() - layout.base.keys():  # pools gone
            self.cache.pool_states = {
                p: s for p, s in self.cache.pool_states.items() if p in layout.base
            }
        try:
            self._index_workloads(pods_changed)
        except Exception:
            self.cache.workloads = WorkloadIndex()  # built whole again next time
            raise
        index = self.cache.workloads
        self._placed = dict(index.placed)
        self.unplaced = set(index.unplaced)  # not deleting, not finished, not placed
        used, reserved = dict(self.cache.index.used), dict(index.totals)
        for node, held in self.dra.used.items():  # devices claims hold, beside pods' requests
            used[node] = {**used.get(node, {}), **held}
        self.devices = Devices(used, reserved, self._releases(index.timed))

    @property
    def pool_specs(self) -> dict[str, api.AcceleratorPoolSpec]:
        """The pools whose spec parses, by name (the ones placement and status look at)."""
        return self.layout.specs

    def _base(self, name: str, spec: api.AcceleratorPoolSpec) -> PoolState:
        """Accelerator resolution (catalog + labels + spec), redone only when the pool's spec
        or one of its nodes changed since the cached World (not its status: the device counts
        Tessera writes there every few seconds in a burst made every World resolve again)."""
        members = self.layout.members[name]
        # A DRA pool's devices say what they are (their attributes) as labels would.
        found = (
            tuple(tuple(sorted(self.dra.labels.get(n, {}).items())) for n in members)
            if spec.accelerator.dra
            else ()
        )
        spec_of = (self.pools[name].spec, spec.draining, found)
        facts = tuple(self.nodes[n] for n in members)
        cached = self.cache.base.get(name)
        if cached is not None and cached[0] == spec_of and cached[1] == facts:
            return cached[2]
        if spec.accelerator.dra:
            seen = [
                dataclasses.replace(f, labels={**f.labels, **self.dra.labels.get(f.name, {})})
                for f in facts
            ]
        else:
            seen = list(facts)
        nodes = [node_state(f, 0, 0, (), True) for f in seen]
        state = placement.pool_state(name, spec, nodes, self.unit_reference)
        # Kept without its nodes: pool_state() adds them, with their free devices, when asked
        # (5,000 idle NodeStates held between cycles were 2 MB at that scale).
        state = state.model_copy(update={"nodes": ()})
        self.cache.base[name] = (spec_of, facts, state)
        self.layout.rebuilt.add(name)
        return state

    def capacity(self, pool: str) -> tuple[int, int]:
        """A pool's nodes that take new pods, and the devices free on them now."""
        resource = self.resource_of(pool)
        unfit = self.layout.unfit.get(pool, {})
        usable = [n for n in self.layout.members.get(pool, []) if n not in unfit]
        return len(usable), sum(self.free(n, resource) for n in usable)

    def seen(self, pool: str, returning: int = 0) -> tuple[int, int, int] | None:
        """A pool as an exclusion records it (tessera.world.exclusions): its generation, its
        nodes that take new pods and the devices free on them, `returning` more (those of
        the pods being withdrawn); None when the pool is gone or its spec does not parse."""
        if pool not in self.pool_specs:
            return None
        nodes, available = self.capacity(pool)
        return self.pools[pool].generation, nodes, available + returning

    @functools.cached_property
    def terminating(self) -> set[str]:
        """Namespaces being deleted: their workloads get no new placements or pods (read by
        every visit: computed once per World)."""
        return {name for name, ns in self.namespaces.items() if getattr(ns, "terminating", False)}

    def waiting(self) -> dict[str, ObjectFacts]:
        """The unplaced workloads to plan now, by key: not those whose pods of an earlier
        spec are still going (placed again once they are gone: same names), nor those of a
        namespace being deleted."""
        terminating = self.terminating
        return {
            key: facts
            for key in self.unplaced
            if not self.stale_pods(key)
            and (facts := self.workloads[key]).namespace not in terminating
        }

    def excluded(self, facts: ObjectFacts, now: datetime) -> dict[str, str]:
        """The workload's exclusions in force now, pool -> why (tessera.world.exclusions)."""
        entries = facts.status.get("excludedPools") or ()
        return active(entries, now, self.seen) if entries else {}

    def pending(
        self, facts: ObjectFacts, spec: api.WorkloadSpec, now: datetime
    ) -> placement.PendingWorkload:
        """A workload as placement plans it: its spec, its age, the pools it is kept off."""
        return placement.PendingWorkload(
            namespace=facts.namespace or "",
            name=facts.name,
            spec=spec,
            created_at=facts.created,
            excluded_pools=self.excluded(facts, now),
        )

    def device_attributes(self, pool: str) -> Mapping[str, str]:
        """What the DRA driver of a pool publishes of its devices (the first slice of its
        nodes that lists any; a driver serves one kind of device per pool), or nothing."""
        spec = self.pool_specs.get(pool)
        driver = spec.accelerator.dra.driver if spec and spec.accelerator.dra else None
        members = set(self.layout.members.get(pool, ()))
        for facts in sorted(self.slices.values(), key=lambda f: (f.node, f.pool)):
            if facts.driver == driver and facts.node in members and facts.devices:
                return facts.attributes
        return {}

    def accelerator(self, pool: str) -> Accelerator:
        """A pool's accelerator, resolved from the catalog, its nodes' labels and its spec."""
        return self.layout.base[pool].accelerator

    def resource_of(self, pool: str) -> str:
        """The device-plugin resource a pool's devices are requested by."""
        return self.accelerator(pool).resource_name

    def _index_workloads(self, pods_changed: set[str]) -> None:
        """Brings the WorkloadIndex up to date: redone for the workloads whose facts,
        decision (this process's, not yet in the cache) or pods changed since the last
        World; for all when a pool's spec or nodes changed."""
        r = self.cache.workloads
        edited = r.edited(self.workloads, self.recent, self.edits)
        if edited is None or r.pools_key is not self.cache.pools_key or self.layout.rebuilt:
            r = self.cache.workloads = r.emptied(self.cache.pools_key)
            keys = self.workloads.keys() | self.recent.keys()
            self.cache.placed = {k: v for k, v in self.cache.placed.items() if k in keys}
        else:
            keys = edited | pods_changed
            self.changes = frozenset(keys)
        for key in keys:
            resource, promised = r.promised.pop(key, ("", ()))
            for node, count in promised:
                add_devices(r.totals, node, ((resource, count),), -1)
            facts = self.workloads.get(key)
            if facts is None:
                self.cache.placed.pop(key, None)
            placed = self.placement_of(key)
            if facts is None and key not in self.recent:
                r.placed.pop(key, None)
            else:
                r.placed[key] = placed
            if (
                facts is not None
                and placed is None
                and not facts.deleting
                and facts.status.get("phase") not in TERMINAL
            ):
                r.unplaced.add(key)
            else:
                r.unplaced.discard(key)
            if placed is not None and placed.ends_at is not None:
                r.timed.add(key)
            else:
                r.timed.discard(key)
            resource, promised = self._promised(key)
            if promised:
                r.promised[key] = (resource, promised)
            for node, count in promised:
                add_devices(r.totals, node, ((resource, count),), 1)

    def _promised(self, key: str) -> tuple[str, tuple[tuple[str, int], ...]]:
        """The device-plugin resource and (node, devices) a workload's unbound replicas hold."""
        facts = self.workloads.get(key)
        if facts is not None and (facts.deleting or facts.status.get("phase") in TERMINAL):
            return "", ()
        placed = self.placement_of(key)
        if placed is None or placed.pool not in self.pool_specs:
            return "", ()
        resource = self.resource_of(placed.pool)
        if not resource:
            return "", ()
        return resource, _promised(facts, placed, self.pods_by_workload.get(key, ()))

    def free(self, node: str, resource: str) -> int:
        """Devices of `resource` on `node` neither used by bound pods nor promised."""
        return free_devices(self.nodes[node], resource, self.devices.used, self.devices.reserved)

    def pool_state(self, pool: str) -> PoolState:
        """The pool as placement sees it: its nodes with their free devices now. Built from
        the last World's where it can: while the pool's resolution is the same object (it
        changes with the spec or a node's facts) and the same nodes take no new pods, only
        the NodeStates of nodes whose devices used, promised or coming back changed are
        built again (the World replaces a node's mappings when they change, so identity
        tells). A burst's cycle changes a few dozen nodes, but in most pools: going over all
        5,000 nodes of 20 pools to find them unchanged was 30 % of a cycle (cProfile)."""
        if pool in self._with_free:
            return self._with_free[pool]
        first = self.layout.base[pool]
        members = self.layout.members.get(pool, [])
        devices = self.devices
        unfit, gated = self.layout.unfit.get(pool, {}), self.layout.gated.get(pool, {})
        inputs = (
            tuple(map(devices.used.get, members)),
            tuple(map(devices.reserved.get, members)),
            tuple(map(devices.releases.get, members)),
        )
        last = self.cache.pool_states.get(pool)
        if last is not None and last[0] is first and last[2] == unfit and last[3] == gated:
            old, states = last[1], list(last[4].nodes)
            # Releases are new lists each World: compared by value.
            todo = [
                i
                for i, (u, r, g, u2, r2, g2) in enumerate(zip(*old, *inputs, strict=True))
                if u is not u2 or r is not r2 or (g is not g2 and g != g2)
            ]
            if not todo:
                state = last[4]
            else:
                for i in todo:
                    states[i] = self._node_state(members[i], first, unfit, gated)
                update = {"nodes": tuple(states), "gated": frozenset(gated)}
                state = first.model_copy(update=update)
        else:
            states = [self._node_state(name, first, unfit, gated) for name in members]
            update = {"nodes": tuple(states), "gated": frozenset(gated)}
            state = first.model_copy(update=update)
        self.cache.pool_states[pool] = (first, inputs, unfit, gated, state)
        self._with_free[pool] = state
        return state

    def _node_state(
        self,
        name: str,
        pool: PoolState,
        unfit: Mapping[str, str],
        gated: Mapping[str, tuple[Taint, ...]],
    ) -> NodeState:
        """One node of `pool` as placement sees it now."""
        node, devices = self.nodes[name], self.devices
        resource = pool.accelerator.resource_name
        have = node.allocatable.get(resource, 0)
        free = min(have, free_devices(node, resource, devices.used, devices.reserved))
        releases = tuple(devices.releases.get(name, ()))
        if unfit and name in unfit:  # the taints that alone keep it out, or none
            return node_state(node, have, free, releases, False, gated.get(name, ()))
        return node_state(node, have, free, releases, True)

    def _releases(self, timed: Iterable[str]) -> dict[str, list[Release]]:
        """When devices in use come back, by node: the placed workloads whose run has an
        expected end (`timed`), at the time placement expected when it chose their pool."""
        out: dict[str, list[Release]] = defaultdict(list)
        for key in sorted(timed):
            facts = self.workloads.get(key)
            placed = self.placement_of(key)
            if placed is None or placed.ends_at is None:
                continue
            if facts is not None and facts.status.get("phase") in TERMINAL:
                continue
            count = devices_per_replica(facts)
            per_node: dict[str, int] = defaultdict(int)
            for node in placed.assignments.values():
                per_node[node] += count
            for node, n in per_node.items():
                out[node].append(Release(at=placed.ends_at, devices=n))
        return out

    def snapshot(self) -> placement.Snapshot:
        quotas = self.quota_states
        return placement.Snapshot(
            pools=tuple(self.pool_state(p) for p in self.pool_specs),
            namespaces={k: dict(v) for k, v in self.namespaces.items()},
            quotas=tuple(quotas.values()),
            holdings=self.holdings() if quotas else (),
        )

    @functools.cached_property
    def quota_specs(self) -> dict[str, api.AcceleratorQuotaSpec | str]:
        """Each AcceleratorQuota's parsed spec, or why it does not parse."""
        out: dict[str, api.AcceleratorQuotaSpec | str] = {}
        for name, facts in sorted(self.quotas.items()):
            try:
                out[name] = api.AcceleratorQuotaSpec.model_validate(facts.spec)
            except ValidationError as err:
                out[name] = validation_message(err)
        return out

    @functools.cached_property
    def quota_states(self) -> dict[str, QuotaState]:
        """The quotas placement applies (those that parse), with the namespaces each selects."""
        out = {}
        for name, spec in self.quota_specs.items():
            if isinstance(spec, str) or self.quotas[name].deleting:
                continue
            selector = spec.namespace_selector
            chosen = frozenset(
                ns
                for ns, labels in self.namespaces.items()
                if selector.matches({**labels, NAME_LABEL: ns})
            )
            out[name] = QuotaState(name, spec, chosen)
        return out

    def holdings(self) -> tuple[Holding, ...]:
        """The devices each placed workload of a quota's namespace holds, replica by
        replica, from its placement (its status, this process's decision, or its pods):
        what quota usage counts and preemption may take."""
        governed = {ns for q in self.quota_states.values() for ns in q.namespaces}
        out = []
        for key, placed in sorted(self._placed.items()):
            facts = self.workloads.get(key)
            if placed is None or facts is None or facts.namespace not in governed:
                continue
            if not _holds(facts):
                continue
            count = devices_per_replica(facts)
            nodes = tuple((node, count) for _, node in sorted(placed.assignments.items()))
            priority = int(facts.spec.get("priority") or 0)
            out.append(
                Holding(
                    facts.namespace or "",
                    facts.name,
                    placed.pool,
                    nodes,
                    priority,
                    placed.placed_at,
                )
            )
        return tuple(out)

    def devices_held(self) -> Counter[tuple[str, str]]:
        """Devices each namespace's placed workloads hold on each pool, as `holdings` counts
        them but for every namespace: what accounting charges every few seconds, summed in
        one pass (a Holding per workload, sorted, was most of that step at 10,000)."""
        held: Counter[tuple[str, str]] = Counter()
        workloads = self.workloads
        for key, placed in self._placed.items():
            facts = workloads.get(key)
            if placed is not None and facts is not None and _holds(facts):
                devices = devices_per_replica(facts) * len(placed.assignments)
                held[facts.namespace or "", placed.pool] += devices
        return held
