"""The cluster as the operator sees it: compact facts about nodes, pods, pools and workloads
(what its caches hold), and the pure arithmetic over them: which nodes form each pool,
devices in use and reserved, pool status, the placement snapshot. No kopf, no kubernetes."""

from __future__ import annotations

import enum
import functools
import math
import weakref
from collections import Counter, defaultdict, deque
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from sys import intern
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from tessera import api, placement
from tessera.catalog import Accelerator
from tessera.placement.snapshot import NodeState, PoolState, Release

TERMINAL = ("Succeeded", "Failed")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _count(quantity: Any) -> int:
    """Device counts are whole numbers; anything else (cpu, memory) is not our business."""
    try:
        return int(str(quantity))
    except ValueError:
        return 0


@functools.lru_cache(maxsize=1024)
def _counts(items: tuple[tuple[str, int], ...]) -> Mapping[str, int]:
    """One read-only mapping per distinct set of device counts: thousands of nodes (and pods)
    repeat a handful, so each holds a shared one rather than a dict of its own."""
    return MappingProxyType(dict(items))


def _extended(resources: Mapping[str, Any] | None) -> Mapping[str, int]:
    return _counts(tuple((intern(k), _count(v)) for k, v in (resources or {}).items() if "/" in k))


HOSTNAME_LABEL = "kubernetes.io/hostname"


class _Shared(dict[str, str]):
    """Labels held once for every node that has them (a dict subclass, to be weakly held)."""


# Shared label sets by the hash of their items, held only while some node holds them.
_SHARED: weakref.WeakValueDictionary[int, _Shared] = weakref.WeakValueDictionary()


class NodeLabels(Mapping[str, str]):
    """A node's labels as one read-only mapping: its hostname label, and the rest held once
    for every node with the same rest. A node pool's nodes differ only in their hostname, so
    5,000 nodes hold a few dozen label dicts instead of 5,000 (1 KB each, a fifth of the
    operator's memory over the imports at that scale)."""

    __slots__ = ("_host", "_shared")

    def __init__(self, labels: Mapping[str, str]) -> None:
        host = labels.get(HOSTNAME_LABEL)
        rest = _Shared((intern(k), intern(v)) for k, v in labels.items() if k != HOSTNAME_LABEL)
        digest = hash(frozenset(rest.items()))
        known = _SHARED.get(digest)
        if known is not None and known == rest:
            rest = known
        elif known is None:
            _SHARED[digest] = rest
        self._host = None if host is None else intern(host)
        self._shared: _Shared = rest

    def __getitem__(self, key: str) -> str:
        if key == HOSTNAME_LABEL and self._host is not None:
            return self._host
        return self._shared[key]

    def __contains__(self, key: object) -> bool:
        return (key == HOSTNAME_LABEL and self._host is not None) or key in self._shared

    def __iter__(self) -> Iterator[str]:
        yield from self._shared
        if self._host is not None:
            yield HOSTNAME_LABEL

    def __len__(self) -> int:
        return len(self._shared) + (self._host is not None)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeLabels):
            return self._host == other._host and (
                self._shared is other._shared or self._shared == other._shared
            )
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]  # a mapping: compared, never hashed

    def __repr__(self) -> str:
        return f"NodeLabels({dict(self.items())!r})"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str]  # never changed once built: NodeStates share it
    ready: bool
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class PodFacts:
    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    deleting: bool
    ready: bool
    requests: Mapping[str, int]
    workload: str | None
    pool: str | None
    replica: int | None
    owner_uid: str | None
    unschedulable_since: datetime | None
    unschedulable_message: str
    generation: int | None = None  # the Workload generation it was built from, if it says
    # namespace/name, and namespace/workload: built once here, not in every cycle's World.
    key: str = field(init=False, repr=False, compare=False)
    workload_key: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")
        workload = f"{self.namespace}/{self.workload}" if self.workload else None
        object.__setattr__(self, "workload_key", workload)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL


@dataclass(frozen=True, slots=True)
class ObjectFacts:
    """A pool or workload: what the loop needs of it, spec and status kept (but candidates)."""

    name: str
    namespace: str | None
    uid: str
    generation: int
    resource_version: str
    created: datetime
    deleting: bool
    labels: Mapping[str, str]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]  # without `candidates`: see `candidates`
    candidates: int = 0  # fingerprint() of status.candidates

    @property
    def key(self) -> str:
        """namespace/name, as the World keys workloads."""
        return f"{self.namespace}/{self.name}"

    @property
    def reference(self) -> dict[str, Any]:
        """What an Event needs to name this object (the full body is not kept: memory)."""
        meta = {"name": self.name, "namespace": self.namespace, "uid": self.uid}
        return {"metadata": meta}


def node_facts(body: Mapping[str, Any]) -> NodeFacts:
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return NodeFacts(
        name=intern(meta["name"]),  # the same string as its hostname label's
        labels=NodeLabels(meta.get("labels") or {}),
        ready=conds.get("Ready") == "True" and not spec.get("unschedulable", False),
        capacity=_extended(status.get("capacity")),
        allocatable=_extended(status.get("allocatable")),
    )


def pod_facts(body: Mapping[str, Any]) -> PodFacts:
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    requests: dict[str, int] = defaultdict(int)
    for container in spec.get("containers") or []:
        for k, v in _extended((container.get("resources") or {}).get("requests")).items():
            requests[k] += v
    for container in spec.get("initContainers") or []:  # init containers run one at a time
        for k, v in _extended((container.get("resources") or {}).get("requests")).items():
            requests[k] = max(requests[k], v)
    labels = meta.get("labels") or {}
    owner = next(
        (
            o.get("uid")
            for o in meta.get("ownerReferences") or []
            if o.get("kind") == "Workload" and o.get("apiVersion", "").startswith(api.GROUP)
        ),
        None,
    )
    since, message = None, ""
    ready = False
    for cond in status.get("conditions") or []:
        unschedulable = cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
        if cond.get("type") == "PodScheduled" and unschedulable:
            since = parse_time(cond.get("lastTransitionTime"))
            message = cond.get("message", "")
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    replica = labels.get(api.REPLICA_LABEL)
    built = (meta.get("annotations") or {}).get(api.GENERATION_ANNOTATION)
    return PodFacts(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        uid=meta.get("uid", ""),
        node=spec.get("nodeName") or "",
        phase=status.get("phase", "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        ready=ready,
        requests=_counts(tuple(requests.items())),
        workload=labels.get(api.WORKLOAD_LABEL),
        pool=labels.get(api.POOL_LABEL),
        replica=int(replica) if replica and replica.isdigit() else None,
        owner_uid=owner,
        unschedulable_since=since,
        unschedulable_message=message,
        generation=int(built) if built and built.isdigit() else None,
    )


def fingerprint(candidates: Iterable[Mapping[str, Any]]) -> int:
    """What a status's candidates say, as one number. A Workload's facts keep this, not the
    list: twenty pools' scores and reasons were three quarters of the operator's memory at
    10,000 Workloads. Scores compare as floats: the API server returns 71.0 as 71."""
    return hash(
        tuple(
            (
                c.get("pool"),
                bool(c.get("feasible")),
                bool(c.get("fitsNow")),
                float(c.get("score") or 0),
                tuple(c.get("reasons") or ()),
            )
            for c in candidates
        )
    )


def _shared(value: Any) -> Any:
    """JSON data with its keys interned: thousands of objects repeat the same few keys."""
    if isinstance(value, dict):
        return {intern(k): _shared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shared(v) for v in value]
    return value


def object_facts(body: Mapping[str, Any]) -> ObjectFacts:
    meta = body.get("metadata", {})
    # The candidates are kept as one number (fingerprint), so they are taken out before
    # the keys are interned: walking twenty pools' candidates was most of the time a
    # restarted operator spent reading 10,000 Workloads.
    status = dict(body.get("status") or {})
    candidates = fingerprint(status.pop("candidates", None) or ())
    status = _shared(status)
    return ObjectFacts(
        name=meta["name"],
        namespace=meta.get("namespace"),
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation", 0)),
        resource_version=meta.get("resourceVersion", ""),
        created=parse_time(meta.get("creationTimestamp")) or datetime.fromtimestamp(0, UTC),
        deleting=bool(meta.get("deletionTimestamp")),
        labels=dict(meta.get("labels") or {}),
        spec=_shared(body.get("spec") or {}),
        status=status,
        candidates=candidates,
    )


def validation_message(err: ValidationError) -> str:
    """`spec.accelerator.count: Input should be greater than 0`, first error first."""
    parts = []
    for e in err.errors()[:3]:
        where = ".".join(str(p) for p in e["loc"])
        parts.append(f"spec.{where}: {e['msg']}")
    return "; ".join(parts)


# --- The world: all facts of one moment, and what follows from them ------------------------


@dataclass
class Placed:
    """A workload's recorded placement: pool, accelerator and the node of each replica."""

    pool: str
    assignments: dict[int, str]
    placed_at: datetime | None


def _promised(
    facts: ObjectFacts | None, placed: Placed, pods: Iterable[PodFacts]
) -> tuple[tuple[str, int], ...]:
    """(node, devices) for each replica placed but whose pod is not bound (nor finished)."""
    count = int(((facts.spec if facts else {}).get("accelerator") or {}).get("count", 1))
    bound = {p.replica for p in pods if p.pool == placed.pool and (p.node or p.terminal)}
    return tuple(
        (node, count) for replica, node in placed.assignments.items() if replica not in bound
    )


def placed_of(status: Mapping[str, Any]) -> Placed | None:
    pool = status.get("pool")
    if not pool:
        return None
    assignments = {int(a["replica"]): str(a["node"]) for a in status.get("assignments") or []}
    return Placed(pool, assignments, parse_time(status.get("placedAt")))


# Every NodeState sets every field: one set of their names serves them all, where each
# instance would otherwise carry its own (about 700 bytes a node, 3.5 MB at 5,000 nodes).
_NODE_FIELDS = frozenset(NodeState.model_fields)


def _node_state(facts: NodeFacts, have: int, free: int, releases: tuple[Release, ...]) -> NodeState:
    """A node as placement sees it, built without validation from facts already checked
    (0 <= free <= have): every cycle builds one per node, and validation would copy each
    node's labels, which are shared here instead (the largest part of a node's facts)."""
    return NodeState.model_construct(
        _NODE_FIELDS,  # type: ignore[arg-type]  # read-only: nothing assigns to a NodeState
        name=facts.name,
        labels=facts.labels,
        ready=facts.ready,
        allocatable=have,
        free=free,
        releases=releases,
    )


def by_id(objects: dict[Any, Any]) -> dict[int, Any]:
    """id() of each value -> its key, built in C (zip and map, no Python loop)."""
    return dict(zip(map(id, objects.values()), objects, strict=True))


def changed(before: dict[int, Any], after: dict[int, Any]) -> set[Any]:
    """The keys whose object is not the same in two `by_id` maps: new, replaced or gone."""
    return {after[i] for i in after.keys() - before.keys()} | {
        before[i] for i in before.keys() - after.keys()
    }


def _add(
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
                _add(self.used, pod.node, pod.requests.items(), -1)
        for pod in new:
            if pod.workload_key:
                self.by_workload[pod.workload_key] = (
                    *self.by_workload.get(pod.workload_key, ()),
                    pod,
                )
            if _uses(pod):
                _add(self.used, pod.node, pod.requests.items(), 1)
        return {p.workload_key for p in (*gone, *new) if p.workload_key}


@dataclass
class WorkloadIndex:
    """What each workload's facts, decision and pods imply, kept between Worlds: where it is
    placed, whether it waits for placement, whether it has an estimated duration, and the
    devices promised to its placed replicas whose pods are not bound (resource, (node,
    devices) pairs), with their sum by node; and what they were last computed from: the
    workloads and decisions by id() (held), the pools' specs."""

    placed: dict[str, Placed | None] = field(default_factory=dict)
    unplaced: set[str] = field(default_factory=set)
    timed: set[str] = field(default_factory=set)
    promised: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = field(default_factory=dict)
    totals: dict[str, Mapping[str, int]] = field(default_factory=dict)
    workloads: dict[int, str] = field(default_factory=dict)
    recent: dict[int, str] = field(default_factory=dict)
    held: tuple[Any, ...] = ()
    pools_key: Any = None  # WorldCache.pools_key when computed (the same object, or all again)


@dataclass
class WorldCache:
    """What one World can hand the next: pool membership and accelerator resolution, redone
    only for pools and nodes whose facts changed. Tuples compare by identity first, and the
    caches keep an unchanged node's facts object, so a steady fleet costs a few lookups."""

    pools_key: tuple[tuple[str, Mapping[str, Any]], ...] = ()  # (name, spec) of each pool
    owners: dict[str, tuple[NodeFacts, list[str]]] = field(default_factory=dict)
    base: dict[str, tuple[Mapping[str, Any], tuple[NodeFacts, ...], PoolState]] = field(
        default_factory=dict
    )
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
    # The last membership, and the nodes (by id(), held by `owners`) it was computed over.
    membership: tuple[dict[int, str], Any] = ({}, None)
    # Per node: the NodeState placement last saw, with what it was built from (facts, devices,
    # free devices, releases), reused while those are the same. A burst's cycle changes a few
    # dozen nodes; building all 5,000 NodeStates each cycle was 14 % of the operator's CPU
    # in a large singles burst (py-spy). Emptied when placement has nothing to do
    # (`forget_node_states`): 5,000 NodeStates hold about 2 MB.
    states: dict[str, tuple[NodeFacts, int, int, tuple[Release, ...], NodeState]] = field(
        default_factory=dict
    )

    def forget_node_states(self) -> None:
        self.states = {}


@dataclass
class World:
    """One consistent copy of the caches, taken at one moment."""

    nodes: dict[str, NodeFacts]
    pods: list[PodFacts]
    pools: dict[str, ObjectFacts]
    workloads: dict[str, ObjectFacts]  # key: namespace/name
    namespaces: dict[str, Mapping[str, str]]
    # Placements decided by this process but maybe not yet visible in the workloads cache.
    recent: dict[str, Placed] = field(default_factory=dict)
    cache: WorldCache = field(default_factory=WorldCache, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.pool_specs: dict[str, api.AcceleratorPoolSpec] = {}
        self.pool_errors: dict[str, str] = {}
        for name, facts in sorted(self.pools.items()):
            try:
                self.pool_specs[name] = api.AcceleratorPoolSpec.model_validate(facts.spec)
            except ValidationError as err:
                self.pool_errors[name] = validation_message(err)
        self.members, self.overlaps = self._membership()
        try:
            pods_changed = self.cache.index.update(self.pods)
        except Exception:
            self.cache.index = PodIndex()  # built whole again next time
            raise
        self.pods_by_workload = dict(self.cache.index.by_workload)
        self.used = dict(self.cache.index.used)
        self._placed: dict[str, Placed | None] = {}
        self._with_free: dict[str, PoolState] = {}
        self.rebuilt: set[str] = set()  # pools whose nodes or spec changed since the cache
        self.base = {name: self._base(name, spec) for name, spec in self.pool_specs.items()}
        if len(self.cache.states) > len(self.nodes):  # nodes deleted
            self.cache.states = {n: s for n, s in self.cache.states.items() if n in self.nodes}
        try:
            self._index_workloads(pods_changed)
        except Exception:
            self.cache.workloads = WorkloadIndex()  # built whole again next time
            raise
        index = self.cache.workloads
        self._placed = dict(index.placed)
        self.unplaced = set(index.unplaced)  # not deleting, not finished, not placed
        self.reserved = dict(index.totals)
        self.releases = self._releases(index.timed)

    def _base(self, name: str, spec: api.AcceleratorPoolSpec) -> PoolState:
        """Accelerator resolution (catalog + labels + spec), redone only when the pool's spec
        or one of its nodes changed since the cached World (not its status: the device counts
        Tessera writes there every few seconds in a burst made every World resolve again)."""
        spec_of = self.pools[name].spec
        facts = tuple(self.nodes[n] for n in self.members[name])
        cached = self.cache.base.get(name)
        if cached is not None and cached[0] == spec_of and cached[1] == facts:
            return cached[2]
        state = placement.pool_state(name, spec, [_node_state(f, 0, 0, ()) for f in facts])
        # Kept without its nodes: pool_state() adds them, with their free devices, when asked
        # (5,000 idle NodeStates held between cycles were 2 MB at that scale).
        state = state.model_copy(update={"nodes": ()})
        self.cache.base[name] = (spec_of, facts, state)
        self.rebuilt.add(name)
        return state

    def placement_of(self, key: str) -> Placed | None:
        """Where a workload is: its status says, else this process's own decision, else its
        pods (created, and then the operator stopped before it wrote the decision)."""
        if key not in self._placed:
            facts = self.workloads.get(key)
            if facts is None:
                self._placed[key] = self.recent.get(key)
            else:
                placed = self._recorded(key, facts) or self.recent.get(key)
                self._placed[key] = placed or self._placed_by_pods(facts)
        return self._placed[key]

    def _recorded(self, key: str, facts: ObjectFacts) -> Placed | None:
        """The placement a workload's status records, parsed once per status."""
        hit = self.cache.placed.get(key)
        placed = hit[1] if hit is not None and hit[0] is facts else placed_of(facts.status)
        self.cache.placed[key] = (facts, placed)
        return placed

    def _own_pods(self, facts: ObjectFacts) -> list[PodFacts]:
        """The workload's pods (by owner uid) on pools it was not withdrawn from."""
        pods = self.pods_by_workload.get(facts.key)
        if not pods:
            return []
        excluded = {e.get("pool") for e in facts.status.get("excludedPools") or []}
        return [p for p in pods if p.owner_uid == facts.uid and p.pool not in excluded]

    def _placed_by_pods(self, facts: ObjectFacts) -> Placed | None:
        pods = [
            p
            for p in self._own_pods(facts)
            if p.pool and not p.deleting and p.generation in (None, facts.generation)
        ]
        if not pods:
            return None
        counts = Counter(p.pool or "" for p in pods)
        pool = min(counts, key=lambda name: (-counts[name], name))  # most pods, then by name
        nodes = {
            p.replica: p.node for p in pods if p.pool == pool and p.node and p.replica is not None
        }
        return Placed(pool, nodes, None)

    def stale_pods(self, key: str) -> list[PodFacts]:
        """A workload's pods built from an earlier spec while its status records no pool:
        the spec was edited after the pods were created and before the decision was written
        (the CRD freezes the spec only once status.pool is set). They are not its placement:
        they are deleted and the workload is placed again from the spec it has now."""
        facts = self.workloads.get(key)
        if facts is None or facts.status.get("pool"):
            return []
        return [
            p
            for p in self._own_pods(facts)
            if p.generation is not None and p.generation != facts.generation
        ]

    def _membership(self) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
        """Nodes of each pool. A node two pools select counts for the first by name only,
        and both pools report the overlap: devices are never counted twice."""
        members: dict[str, list[str]] = {name: [] for name in self.pool_specs}
        overlaps: dict[str, dict[str, str]] = {name: {} for name in self.pool_specs}
        # Membership follows the pools' specs (their selectors), never their status.
        pools_key = tuple((name, facts.spec) for name, facts in sorted(self.pools.items()))
        if self.cache.pools_key != pools_key:
            self.cache.pools_key, self.cache.owners, self.cache.base = pools_key, {}, {}
        nodes = by_id(self.nodes)
        known, same = self.cache.membership
        if same is not None and same[0] is self.cache.pools_key and nodes == known:
            return same[1], same[2]  # the same pools over the same nodes (objects)
        cached = self.cache.owners
        self.cache.owners = {}
        # The selectors read a few label keys; nodes alike in those have the same owners, so
        # each pool's selector runs once per kind of node, not once per node (a cold start
        # over 5,000 nodes spent 0.4 s of its first cycle, under cProfile, matching 20 selectors
        # on each).
        read = sorted({k for s in self.pool_specs.values() for k in s.node_selector.label_keys()})
        by_labels: dict[tuple[str | None, ...], list[str]] = {}
        for node in sorted(self.nodes.values(), key=lambda n: n.name):
            hit = cached.get(node.name)
            if hit is not None and hit[0] == node:
                owners = hit[1]
            else:
                alike = tuple(node.labels.get(k) for k in read)
                if alike not in by_labels:
                    by_labels[alike] = [
                        name
                        for name, spec in self.pool_specs.items()
                        if not spec.node_selector.is_empty()
                        and spec.node_selector.matches(node.labels)
                    ]
                owners = by_labels[alike]
            self.cache.owners[node.name] = (node, owners)
            if owners:
                members[owners[0]].append(node.name)
            for other in owners[1:]:
                overlaps[other][node.name] = owners[0]
                overlaps[owners[0]][node.name] = other
        self.cache.membership = (nodes, (self.cache.pools_key, members, overlaps))
        return members, overlaps

    def accelerator(self, pool: str) -> Accelerator:
        """A pool's accelerator, resolved from the catalog, its nodes' labels and its spec."""
        return self.base[pool].accelerator

    def resource_of(self, pool: str) -> str:
        """The device-plugin resource a pool's devices are requested by."""
        return self.accelerator(pool).resource_name

    def _index_workloads(self, pods_changed: set[str]) -> None:
        """Brings the WorkloadIndex up to date: redone for the workloads whose facts,
        decision (this process's, not yet in the cache) or pods changed since the last
        World; for all when a pool's spec or nodes changed."""
        r = self.cache.workloads
        workloads, recent = by_id(self.workloads), by_id(self.recent)
        if r.pools_key is not self.cache.pools_key or self.rebuilt:
            r = self.cache.workloads = WorkloadIndex(pools_key=self.cache.pools_key)
            keys: set[str] = self.workloads.keys() | self.recent.keys()
            self.cache.placed = {k: v for k, v in self.cache.placed.items() if k in keys}
        else:
            keys = changed(r.workloads, workloads) | changed(r.recent, recent) | pods_changed
        r.workloads, r.recent = workloads, recent
        r.held = (list(self.workloads.values()), list(self.recent.values()))
        for key in keys:
            resource, promised = r.promised.pop(key, ("", ()))
            for node, count in promised:
                _add(r.totals, node, ((resource, count),), -1)
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
            if facts is not None and facts.spec.get("estimatedDuration"):
                r.timed.add(key)
            else:
                r.timed.discard(key)
            resource, promised = self._promised(key)
            if promised:
                r.promised[key] = (resource, promised)
            for node, count in promised:
                _add(r.totals, node, ((resource, count),), 1)

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
        facts = self.nodes[node]
        have = facts.allocatable.get(resource, 0)
        used = self.used.get(node, {}).get(resource, 0)  # .get: no entry made per node
        return max(0, have - used - self.reserved.get(node, {}).get(resource, 0))

    def pool_state(self, pool: str) -> PoolState:
        """The pool as placement sees it: its nodes with their free devices now."""
        first = self.base[pool]
        if pool in self._with_free:
            return self._with_free[pool]
        resource = first.accelerator.resource_name
        states = []
        cache = self.cache.states
        for name in self.members.get(pool, []):
            node = self.nodes[name]
            have = node.allocatable.get(resource, 0)
            free = min(have, self.free(name, resource))
            releases = tuple(self.releases.get(name, ()))
            hit = cache.get(name)
            if hit is not None and hit[0] is node and hit[1:4] == (have, free, releases):
                states.append(hit[4])
                continue
            state = _node_state(node, have, free, releases)
            cache[name] = (node, have, free, releases, state)
            states.append(state)
        self._with_free[pool] = first.model_copy(update={"nodes": tuple(states)})
        return self._with_free[pool]

    def _releases(self, timed: Iterable[str]) -> dict[str, list[Release]]:
        """When devices in use come back, by node: running workloads with an estimate
        (`timed`: the workloads whose spec gives one)."""
        out: dict[str, list[Release]] = defaultdict(list)
        for key in sorted(timed):
            facts = self.workloads[key]
            duration = facts.spec.get("estimatedDuration")
            placed = self.placement_of(key) if duration else None
            if not placed or not placed.placed_at or facts.status.get("phase") in TERMINAL:
                continue
            count = int((facts.spec.get("accelerator") or {}).get("count", 1))
            at = placed.placed_at + timedelta(seconds=api.parse_duration(str(duration)))
            per_node: dict[str, int] = defaultdict(int)
            for node in placed.assignments.values():
                per_node[node] += count
            for node, n in per_node.items():
                out[node].append(Release(at=at, devices=n))
        return out

    def snapshot(self) -> placement.Snapshot:
        return placement.Snapshot(
            pools=tuple(self.pool_state(p) for p in self.pool_specs),
            namespaces={k: dict(v) for k, v in self.namespaces.items()},
        )


def condition(
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int,
    previous: Iterable[Mapping[str, Any]],
    now: datetime,
) -> dict[str, Any]:
    """A metav1.Condition; lastTransitionTime moves only when the status changes."""
    status = "True" if ok else "False"
    old = next((c for c in previous if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else None
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since or now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def pool_status(world: World, name: str, now: datetime) -> dict[str, Any]:
    """The AcceleratorPool status the world implies (level-based: same world, same status)."""
    facts = world.pools[name]
    old = facts.status.get("conditions") or []
    gen = facts.generation
    if name in world.pool_errors:
        cond = condition("Ready", False, "InvalidSpec", world.pool_errors[name], gen, old, now)
        return {"observedGeneration": gen, "conditions": [cond]}
    state = world.base[name]  # the resolution: the counts below need no NodeStates
    acc = state.accelerator
    nodes = [world.nodes[n] for n in world.members[name]]
    ready = [n for n in nodes if n.ready]
    resource = acc.resource_name
    capacity = sum(n.capacity.get(resource, 0) for n in nodes)
    allocatable = sum(n.allocatable.get(resource, 0) for n in nodes)
    allocated = sum(
        world.used.get(n.name, {}).get(resource, 0)
        + world.reserved.get(n.name, {}).get(resource, 0)
        for n in nodes
    )
    available = sum(world.free(n.name, resource) for n in ready)
    conditions = []
    problems = list(state.problems)
    resolved_ok = not problems
    reason = (
        "Resolved"
        if resolved_ok
        else ("ModelConflict" if state.resolution == "conflict" else "UnknownModel")
    )
    conditions.append(
        condition(
            "AcceleratorResolved",
            resolved_ok,
            reason,
            "; ".join(problems) or f"{acc.model} from {acc.source}",
            gen,
            old,
            now,
        )
    )
    not_ready = [n.name for n in nodes if not n.ready]
    conditions.append(
        condition(
            "Degraded",
            bool(not_ready),
            "NodesNotReady" if not_ready else "AllNodesReady",
            f"{len(not_ready)} of {len(nodes)} nodes not Ready: {', '.join(not_ready[:10])}"
            if not_ready
            else "all nodes Ready",
            gen,
            old,
            now,
        )
    )
    overlap = world.overlaps.get(name, {})
    conditions.append(
        condition(
            "NodesOverlap",
            bool(overlap),
            "SelectorsOverlap" if overlap else "NoOverlap",
            "nodes also selected by another pool (counted once, for the first pool by "
            "name): " + ", ".join(f"{n} ({p})" for n, p in sorted(overlap.items())[:10])
            if overlap
            else "no node is selected by another pool",
            gen,
            old,
            now,
        )
    )
    if not resolved_ok:
        ready_cond = ("AcceleratorUnresolved", "; ".join(problems))
    elif not nodes:
        ready_cond = ("NoNodes", "the node selector matches no node")
    elif not ready:
        ready_cond = ("NoReadyNodes", "no node of the pool is Ready")
    else:
        # No device count here: it moves with every pod, and a condition that moved would be
        # written at once, where the counts in status.devices are written every few seconds.
        ready_cond = ("PoolReady", f"{len(ready)}/{len(nodes)} nodes Ready")
    is_ready = ready_cond[0] == "PoolReady"
    if is_ready and world.pool_specs[name].draining:
        ready_cond = ("Draining", "pool is draining: no new placements")
    conditions.insert(0, condition("Ready", is_ready, ready_cond[0], ready_cond[1], gen, old, now))
    return {
        "observedGeneration": gen,
        "accelerator": acc.to_api().model_dump(by_alias=True, mode="json"),
        "nodes": len(nodes),
        "readyNodes": len(ready),
        "nodeNames": [n.name for n in nodes],
        "devices": {
            "capacity": capacity,
            "allocatable": allocatable,
            "allocated": allocated,
            "available": available,
        },
        "summary": {"nodes": f"{len(ready)}/{len(nodes)}", "devices": f"{available}/{allocatable}"},
        "conditions": conditions,
    }


def lifecycle_status(
    spec: api.WorkloadSpec,
    pool: str,
    status: Mapping[str, Any],
    generation: int,
    current: Mapping[int, PodFacts],
    old: Iterable[PodFacts],
    created: int,
    now: datetime,
    refused: str | None = None,
) -> dict[str, Any]:
    """Phase, replica counts and conditions of a placed workload, from its pods: `current` on
    its pool (by replica), `old` still running elsewhere (a migration), `created` this cycle,
    `refused` what the API server said when it last refused one of its pods (a quota, an
    admission policy): while a replica is missing, that is the message and Ready's reason."""
    want = spec.replicas
    old = list(old)
    live = [p for p in current.values() if not p.deleting]
    ready_replicas = {p.replica for p in live if p.ready and not p.terminal}
    ready_replicas |= {p.replica for p in old if p.ready}
    succeeded = [p for p in live if p.phase == "Succeeded"]
    failed = [p for p in live if p.phase == "Failed"]
    ready = len(ready_replicas) + len(succeeded)
    was = status.get("phase") or api.Phase.PLACED.value
    previous = status.get("conditions") or []
    kept = [c for c in previous if c.get("type") not in ("Ready", "Complete", "Failed")]
    message = str(status.get("message", ""))
    if any(c.get("type") == "Ready" and c.get("reason") == "PodsRefused" for c in previous):
        # The refusal is over: the message is the placement's again.
        message = next((c["message"] for c in previous if c.get("type") == "Placed"), message)
    batch = not spec.is_service

    def cond(type_: str, ok: bool, reason: str, text: str) -> dict[str, Any]:
        return condition(type_, ok, reason, text, generation, previous, now)

    if batch and failed:
        phase, message = api.Phase.FAILED, f"pod {failed[0].name} failed"
        new = [
            cond("Failed", True, "PodFailed", message),
            cond("Ready", False, "PodFailed", message),
        ]
    elif batch and len(succeeded) == want:
        phase, message = api.Phase.SUCCEEDED, f"all {want} pods succeeded"
        new = [
            cond("Complete", True, "Succeeded", message),
            cond("Ready", True, "Succeeded", message),
        ]
    elif batch and was == api.Phase.RUNNING.value and len(live) + created < want:
        phase, message = api.Phase.FAILED, f"{want - len(live)} pods vanished before completing"
        new = [cond("Failed", True, "PodLost", message), cond("Ready", False, "PodLost", message)]
    elif ready >= want:
        phase = api.Phase.RUNNING
        new = [cond("Ready", True, "AllReplicasReady", f"{want}/{want} replicas ready on {pool}")]
    else:
        healing = spec.is_service and was == api.Phase.RUNNING.value
        # Running once every replica's pod is seen running; pods only just created do not
        # count, so a status written before its pods exist never claims Running (a restart
        # then still creates whatever is missing).
        started = len(live) >= want and all(p.phase == "Running" for p in live)
        phase = api.Phase.RUNNING if healing or started else api.Phase.PLACED
        if refused and len(live) + created < want:
            message = refused
            new = [cond("Ready", False, "PodsRefused", refused)]
        else:
            text = f"{ready}/{want} replicas ready on {pool}"
            new = [cond("Ready", False, "ReplicasNotReady", text)]
    shown = min(ready, want)
    return {
        "phase": phase.value,
        "replicas": len([p for p in live if not p.terminal]) + created + len(old),
        "readyReplicas": shown,
        "summary": {"ready": f"{shown}/{want}"},
        "message": message,
        "conditions": kept + new,
        "observedGeneration": generation,
    }


def progress_only(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """True when a new lifecycle status differs from the old only in counts and messages
    (same phase, same condition types, statuses and reasons): such a write can wait."""

    def shape(status: Mapping[str, Any]) -> Any:
        conds = status.get("conditions") or []
        return status.get("phase"), [(c["type"], c["status"], c["reason"]) for c in conds]

    return bool(before.get("phase")) and shape(before) == shape(after)


# A burst starts when more than BURST pods are placed within BURST_WINDOW seconds, in one
# cycle or over several. Pods, not Workloads: they are the API server's load (a stream of
# 13-21 gangs a second, 60-100 pods, never started one counted in Workloads, and each gang
# took its pods + 3 writes). Over a window, not per cycle: how many one cycle places
# depends on how long cycles take. It lasts while the window holds at least BURST_LASTS
# pods: a steady stream near the threshold then stays one burst (one status write per
# placement) instead of flipping between it and two writes each. Counted per cycle (at
# least 8), a stream of 60 pods a second in cycles 0.2 s apart (2-45 pods each) ended it
# whenever one cycle placed fewer, and the next cycle wrote its decisions at once (1.33 s).
# At a burst's start the window is not full yet: its pods are counted against the seconds
# since the first of them was seen pending (at least half the window), so a burst is known
# by its first large cycle. Counted against the whole window, a burst arriving at 110
# Workloads a second was known only once 64 had been placed, and the cycles before it wrote
# each decision at once: the first took 1.05 s for 64 (pods, then status writes, under a
# loaded API server) while every later arrival waited for the next cycle.
BURST = 64
BURST_WINDOW = 1.0
BURST_LASTS = 16


def bursting(was: bool, placed: int, before: int, span: float = BURST_WINDOW) -> bool:
    """Whether a cycle that placed `placed` pods is (still) in a burst; `was`: the last
    placing cycle was; `before`: the pods the cycles of the BURST_WINDOW seconds before it
    placed; `span`: the seconds since the first of those pods was seen pending
    (RecentPlacements.span). In a burst each decision is written with its first lifecycle
    status."""
    seconds = min(max(span, BURST_WINDOW / 2), BURST_WINDOW)
    held = placed + before
    return held > BURST * seconds / BURST_WINDOW or (was and held >= BURST_LASTS)


class RecentPlacements:
    """The pods each placing cycle of the last BURST_WINDOW seconds placed (`bursting`'s
    `before`), by the monotonic time the cycle decided, with when the first of them was
    seen pending."""

    def __init__(self) -> None:
        self._cycles: deque[tuple[float, int, float]] = deque()

    def place(self, now: float, pods: int, since: float | None = None) -> int:
        """Records a cycle that placed `pods` at `now`, the first of them seen pending at
        `since` (`now` when not given); returns what the window held before."""
        while self._cycles and now - self._cycles[0][0] > BURST_WINDOW:
            self._cycles.popleft()
        before = sum(n for _, n, _ in self._cycles)
        self._cycles.append((now, pods, now if since is None else since))
        return before

    @property
    def placing(self) -> bool:
        """Whether the last cycle recorded placed pods."""
        return bool(self._cycles) and self._cycles[-1][1] > 0

    def span(self, now: float) -> float:
        """Seconds since the first pod the window holds was seen pending (0 if none)."""
        return now - min((s for _, n, s in self._cycles if n), default=now)


# A decision made outside a burst is written at once. One made in a burst goes out with the
# workload's first lifecycle status, and while the burst lasts that write waits, good news
# (Running) included, at most BURST_WRITE_AFTER seconds after the pods were sent: the API
# server's capacity goes to the burst's pod creates first. At 5,000 nodes the decisions
# written 60 s into a 10,000-Workload burst (the earlier rule) doubled the writes its pods
# competed with, and held placement back for the rest of the burst (bench/README.md). Once
# the burst is over it is written when the pods run, or once they were sent
# FIRST_WRITE_AFTER seconds ago and the burst has been over for QUIET_AFTER_BURST: right
# after a burst the API server and kwok (or the kubelets) are busiest, and a decision
# written then, its pods not yet running, was followed by a second write when they ran
# (1,850 status writes for 1,000 singles at 1,000 nodes, the first half of them within 10 s
# of the burst's end). Bad news (unschedulable, refused, failed) never waits.
FIRST_WRITE_AFTER = 10.0
QUIET_AFTER_BURST = 30.0
BURST_WRITE_AFTER = 300.0


_ROUTINE = frozenset({api.Phase.PLACED.value, api.Phase.RUNNING.value})


def first_write_due(
    age: float,
    burst: bool,
    phase: str = api.Phase.PLACED.value,
    news: bool = False,
    quiet: float = math.inf,
) -> bool:
    """Whether a decision whose pods were sent `age` seconds ago is written now, with the
    lifecycle `phase` its pods imply; `news`: bad news the phase does not say (a pod
    unschedulable or refused); `burst`: placement is still in a burst; `quiet`: seconds
    since the last burst ended (infinite when none has)."""
    if news or phase not in _ROUTINE or age >= BURST_WRITE_AFTER:
        return True
    if burst:
        return False
    if phase == api.Phase.RUNNING.value:
        return True
    return age >= FIRST_WRITE_AFTER and quiet >= QUIET_AFTER_BURST


# Seconds a pod this process sent is trusted to exist before the pod watch shows it.
CREATED_GRACE = 30.0


def settle_claims(
    created: dict[str, tuple[float, str]], visible: Container[str], copied: float
) -> list[tuple[str, float]]:
    """Forgets, in place, the claims on pods the World shows (they exist) and on those sent
    CREATED_GRACE or more before the World was copied (monotonic `copied`) yet not in it:
    the next visit sends those again. Returns the latter, with how long before the copy
    they were sent. The age counts to the copy, not to the clock: a 5,000-node gang burst's
    cycle waited 40 s on the send queue while placing, then held the World copied before
    those sends against the clock after them, and sent 1,379 pods a second time (409)."""
    expired = []
    for name, (at, _) in list(created.items()):
        if name in visible:
            created.pop(name, None)
        elif copied - at >= CREATED_GRACE:
            created.pop(name, None)
            expired.append((name, copied - at))
    return expired


def fallback_reason(
    limit: float,
    pods: Iterable[PodFacts],
    now: datetime,
    refused: tuple[float, str] | None = None,
) -> str | None:
    """Why a gang should leave its pool: one of its pods unschedulable, or refused by the API
    server (`refused`: for how many seconds, and what it said), for over `limit` seconds (0:
    never); else None."""
    if limit <= 0:
        return None
    for p in pods:
        since = p.unschedulable_since
        if since is not None and not p.node and (now - since).total_seconds() > limit:
            return f"pods unschedulable for over {limit}s: {p.unschedulable_message}"
    if refused is not None and refused[0] > limit:
        return f"pods refused for over {limit}s: {refused[1]}"
    return None


PROGRESS_EVERY = 30.0  # a workload's ready count alone is rewritten at most this often
# A gang still starting this many seconds after its decision has its ready count written
# before it runs, so that a stalled start shows how far it got.
SLOW_START = 300.0


class CountsWrite(enum.Enum):
    """When a lifecycle status may be written, as far as its counts are concerned."""

    NOW = "now"  # more than counts changed, or the counts are due
    WITH_RUNNING = "with-running"  # a starting gang's counts: they go with Running
    LATER = "later"  # counts alone, written less than PROGRESS_EVERY ago


def counts_write(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    placed_at: datetime | None,
    now: datetime,
    since_written: float,
) -> CountsWrite:
    """A change that moves only the counts (3/8 ready) is not written on its own at once.
    A starting gang's (phase Placed) go out with the write that says Running: a gang is all
    or none, so a start costs pods + 2 writes; not once the start is slow (SLOW_START
    seconds after the decision, or when the decision's time is unknown). Anyone else's
    (a running service healing, a slow start) at most every PROGRESS_EVERY seconds."""
    if not progress_only(before, after):
        return CountsWrite.NOW
    starting = after.get("phase") == api.Phase.PLACED.value
    if starting and placed_at is not None and (now - placed_at).total_seconds() < SLOW_START:
        return CountsWrite.WITH_RUNNING
    return CountsWrite.LATER if since_written < PROGRESS_EVERY else CountsWrite.NOW
