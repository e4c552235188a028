"""What one World hands the next so a cycle costs what changed: the pods by workload and the
devices in use by node, each workload's placement and promises, pool membership. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera.placement.cycle import Prepared
from tessera.placement.snapshot import PoolState
from tessera.world.facts import NodeFacts, ObjectFacts, Placed, PodFacts


def by_id(objects: Mapping[Any, Any]) -> dict[int, Any]:
    """id() of each value -> its key, built in C (zip and map, no Python loop)."""
    return dict(zip(map(id, objects.values()), objects, strict=True))


def changed(before: dict[int, Any], after: dict[int, Any]) -> set[Any]:
    """The keys whose object is not the same in two `by_id` maps: new, replaced or gone."""
    return {after[i] for i in after.keys() - before.keys()} | {
        before[i] for i in before.keys() - after.keys()
    }


@dataclass(frozen=True)
class Edits:
    """The keys of each cache set or deleted since the copy before this one, by World field
    (None: read whole since, compare everything), from the caches themselves
    (tessera.controller.informers.Informers.copy numbers its copies). A reader that saw copy
    `serial - 1` takes these in place of comparing two copies object by object (`changed`):
    at 10,000 Workloads each such comparison cost 1-2 ms, several times a cycle."""

    serial: int
    keys: Mapping[str, frozenset[Any] | None]

    def since(self, serial: int | None, field: str) -> frozenset[Any] | None:
        """The field's keys changed since copy `serial`; None unless that is the one before."""
        if serial is None or serial != self.serial - 1:
            return None
        return self.keys.get(field)

    def adding(self, field: str, keys: frozenset[Any] | None) -> Edits:
        """These edits with another field's (the ledger's decisions: `recent`)."""
        return Edits(self.serial, {**self.keys, field: keys})


def add_devices(
    totals: dict[str, Mapping[str, int]], node: str, counts: Iterable[tuple[str, int]], sign: int
) -> None:
    """Adds (sign 1) or takes away (-1) devices on a node, replacing its mapping."""
    now = dict(totals.get(node, {}))
    for resource, n in counts:
        left = now.get(resource, 0) + sign * n
        if left:
            now[resource] = left
        else:
            now.pop(resource, None)
    if now:
        totals[node] = now
    else:
        totals.pop(node, None)


def _uses(pod: PodFacts) -> bool:
    return bool(pod.node) and not pod.terminal


@dataclass
class PodIndex:
    """The pods of each workload and the devices bound pods use on each node, updated from
    the pods new to, or gone from, the last World's (see WorldCache)."""

    pods: dict[int, PodFacts] = field(default_factory=dict)  # held: no id() is reused
    by_workload: dict[str, tuple[PodFacts, ...]] = field(default_factory=dict)
    used: dict[str, Mapping[str, int]] = field(default_factory=dict)

    def update(self, pods: list[PodFacts]) -> set[str]:
        """Takes in the World's pods; returns the workloads whose pods changed."""
        now = dict(zip(map(id, pods), pods, strict=True))
        gone = [self.pods[i] for i in self.pods.keys() - now.keys()]
        new = [now[i] for i in now.keys() - self.pods.keys()]
        self.pods = now
        for pod in gone:
            if pod.workload_key:
                left = tuple(p for p in self.by_workload.get(pod.workload_key, ()) if p is not pod)
                if left:
                    self.by_workload[pod.workload_key] = left
                else:
                    self.by_workload.pop(pod.workload_key, None)
            if _uses(pod):
                add_devices(self.used, pod.node, pod.requests.items(), -1)
        for pod in new:
            if pod.workload_key:
                self.by_workload[pod.workload_key] = (
                    *self.by_workload.get(pod.workload_key, ()),
                    pod,
                )
            if _uses(pod):
                add_devices(self.used, pod.node, pod.requests.items(), 1)
        return {p.workload_key for p in (*gone, *new) if p.workload_key}


@dataclass
class WorkloadIndex:
    """What each workload's facts, decision and pods imply, kept between Worlds: where it is
    placed, whether it waits for placement, whether it has an estimated duration, and the
    devices promised to its placed replicas whose pods are not bound (resource, (node,
    devices) pairs), with their sum by node; and what they were last computed from: the
    workloads (the copy of the caches, or by id(), held) and decisions by id() (held), the
    pools' specs."""

    placed: dict[str, Placed | None] = field(default_factory=dict)
    unplaced: set[str] = field(default_factory=set)
    timed: set[str] = field(default_factory=set)
    promised: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = field(default_factory=dict)
    totals: dict[str, Mapping[str, int]] = field(default_factory=dict)
    workloads: dict[int, str] = field(default_factory=dict)  # when not from Edits (`copy`)
    recent: dict[int, str] = field(default_factory=dict)
    held: tuple[Any, ...] = ()
    copy: int | None = None  # the copy of the caches (Edits.serial) last indexed, if known
    pools_key: Any = None  # WorldCache.pools_key when computed (the same object, or all again)

    def edited(
        self, workloads: dict[str, ObjectFacts], recent: dict[str, Placed], edits: Edits | None
    ) -> set[str] | None:
        """The workloads whose facts or decision changed since the index was last brought up
        to date (None: not known, index them all), noting what the next call compares with:
        this copy's number where the caches and the ledger say what changed (Edits), else
        the workloads and decisions by id() (held, so no id() is reused)."""
        if edits is not None:
            facts = edits.since(self.copy, "workloads")
            decisions = edits.since(self.copy, "recent")
            self.copy, self.workloads, self.recent, self.held = edits.serial, {}, {}, ()
            return None if facts is None or decisions is None else set(facts | decisions)
        ids, decided = by_id(workloads), by_id(recent)
        keys = None
        if self.copy is None:  # else the index followed copies: no ids to compare with
            keys = changed(self.workloads, ids) | changed(self.recent, decided)
        self.copy, self.workloads, self.recent = None, ids, decided
        self.held = (list(workloads.values()), list(recent.values()))
        return keys

    def emptied(self, pools_key: Any) -> WorkloadIndex:
        """An empty index (all to be redone) that compares with what this one would next."""
        return WorkloadIndex(
            pools_key=pools_key,
            workloads=self.workloads,
            recent=self.recent,
            held=self.held,
            copy=self.copy,
        )


@dataclass
class WorldCache:
    """What one World can hand the next: pool membership and accelerator resolution, redone
    only for pools and nodes whose facts changed. Tuples compare by identity first, and the
    caches keep an unchanged node's facts object, so a steady fleet costs a few lookups."""

    pools_key: tuple[tuple[str, Mapping[str, Any], Any], ...] = ()  # (name, spec, created)
    owners: dict[str, tuple[NodeFacts, list[str]]] = field(default_factory=dict)
    # Per node: the pool that counts it, kept across changes of the pools: of two pools that
    # select a node, the one that counted it first keeps it (tessera.world.membership).
    claims: dict[str, str] = field(default_factory=dict)
    base: dict[str, tuple[Any, tuple[NodeFacts, ...], PoolState]] = field(default_factory=dict)
    # Per workload: its status's placement, parsed once per status.
    placed: dict[str, tuple[ObjectFacts, Placed | None]] = field(default_factory=dict)
    # The pods by workload and the devices bound pods use by node, kept up to date from the
    # pods that changed since the last World; and what each workload's facts, decision and
    # pods imply (WorkloadIndex), redone only for the workloads where one of them changed.
    # Changes are found by identity (the caches keep an unchanged object's facts, the loop
    # an unchanged decision), by set operations on id()s that run in C. At 10,000
    # Workloads, going over every workload for these each cycle was a third of the loop's
    # time in a large singles burst (py-spy). The mappings by node are replaced, never
    # changed in place: each World holds a shallow copy.
    index: PodIndex = field(default_factory=PodIndex)
    workloads: WorkloadIndex = field(default_factory=WorkloadIndex)
    # Per DRA node: its facts, its devices, and the facts with them as allocatable, kept
    # while both stay the same (identity is how the caches above see a node unchanged).
    dra_nodes: dict[str, tuple[NodeFacts, tuple[tuple[str, int], ...], NodeFacts]] = field(
        default_factory=dict
    )
    # The last membership, and the nodes (by id(), held by `owners`) it was computed over.
    membership: tuple[dict[int, str], Any] = ({}, None)
    # Per pool: the PoolState placement last saw, with what it was built from (its
    # resolution, its nodes' devices used, promised and coming back, its unfit and gated
    # nodes), from which World.pool_state builds the next. Emptied when placement has
    # nothing to do (`forget_node_states`): 5,000 NodeStates hold about 2 MB.
    pool_states: dict[str, tuple[PoolState, Any, Any, Any, PoolState]] = field(default_factory=dict)
    # Each pool's working state as the last plan began it, from which the next begins
    # (tessera.placement.cycle.Prepared): emptied with the NodeStates it holds.
    prepared: Prepared = field(default_factory=Prepared)
    # Each pool's nodes that take no new pods (and those only tainted), with the membership
    # they were computed over.
    unfit: tuple[Any, dict[str, dict[str, str]], dict[str, dict[str, Any]]] | None = None
    # The nodes there are, and those that take no new pods: one object while neither
    # changes (World.nodes_epoch).
    nodes_epoch: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
    worlds: int = 0  # Worlds built over this cache (World.serial)

    def forget_node_states(self) -> None:
        self.pool_states = {}
        self.prepared.clear()
