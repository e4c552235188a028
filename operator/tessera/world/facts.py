"""API objects as compact facts: what the caches keep of each node, pod, pool and workload,
and a workload's recorded placement. Pure: no kopf, no kubernetes, nothing of the shell."""

from __future__ import annotations

import functools
import weakref
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from sys import intern
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from tessera import api
from tessera.placement.snapshot import Taint, tolerates

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


# Taint effects that keep a pod off a node unless it tolerates them (PreferNoSchedule only
# steers the scheduler: such a node still takes pods).
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str]  # never changed once built: NodeStates share it
    ready: bool  # the Ready condition is True
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]
    cordoned: bool = False  # spec.unschedulable
    taints: tuple[Taint, ...] = ()  # the NoSchedule and NoExecute ones only


def untolerated(node: NodeFacts, tolerations: Iterable[Mapping[str, Any]]) -> tuple[Taint, ...]:
    """The node's NoSchedule and NoExecute taints none of the tolerations tolerates."""
    tolerations = list(tolerations)
    return tuple(t for t in node.taints if not tolerates(tolerations, t))


def unfit_reason(node: NodeFacts, tolerations: Iterable[Mapping[str, Any]] = ()) -> str | None:
    """Why pods placed with these tolerations cannot go to the node (None: they can): not
    Ready, cordoned, or tainted with a NoSchedule or NoExecute taint none of them tolerates."""
    if not node.ready:
        return "NotReady"
    if node.cordoned:
        return "Cordoned"
    taints = untolerated(node, tolerations)
    if taints:
        return "Tainted " + ", ".join(str(t) for t in taints)
    return None


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
    template_hash: str | None = None  # runtime.template_hash of the spec it was made from
    failure: str = ""  # why a Failed pod failed, in words (its container's exit)
    # The node a Tessera pod is pinned to (runtime.build_pod's matchFields), while unbound.
    pinned: str = ""
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
    finalizers: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """namespace/name, as the World keys workloads."""
        return f"{self.namespace}/{self.name}"

    @property
    def reference(self) -> dict[str, Any]:
        """What an Event needs to name this object (the full body is not kept: memory)."""
        meta = {"name": self.name, "namespace": self.namespace, "uid": self.uid}
        return {"metadata": meta}


class NamespaceLabels(dict[str, str]):
    """A namespace's labels (what placement's namespace selectors read), and whether the
    namespace is being deleted: its workloads get no new placements or pods then (the API
    server refuses them, and what was placed would hold devices until it is gone)."""

    terminating: bool = False

    def __eq__(self, other: object) -> bool:
        """Labels and deletion both: the caches keep old facts that compare equal to new
        ones, and a namespace turning Terminating changes no label."""
        same = getattr(other, "terminating", False) == self.terminating
        return same and dict.__eq__(self, other) is True

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # a mapping: compared, never hashed


def namespace_facts(body: Mapping[str, Any]) -> NamespaceLabels:
    meta = body.get("metadata", {})
    labels = NamespaceLabels(meta.get("labels") or {})
    phase = (body.get("status") or {}).get("phase")
    labels.terminating = bool(meta.get("deletionTimestamp")) or phase == "Terminating"
    return labels


def node_facts(body: Mapping[str, Any]) -> NodeFacts:
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    taints = tuple(
        Taint(intern(t.get("key", "")), t.get("value") or "", t["effect"])
        for t in spec.get("taints") or []
        if t.get("effect") in BLOCKING_EFFECTS
    )
    return NodeFacts(
        name=intern(meta["name"]),  # the same string as its hostname label's
        labels=NodeLabels(meta.get("labels") or {}),
        ready=conds.get("Ready") == "True",
        capacity=_extended(status.get("capacity")),
        allocatable=_extended(status.get("allocatable")),
        cordoned=bool(spec.get("unschedulable", False)),
        taints=taints,
    )


def pinned_node(spec: Mapping[str, Any]) -> str:
    """The one node a pod's required node affinity names by `metadata.name` (Tessera's pin:
    the scheduler binds it nowhere else), or ""."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field_ in term.get("matchFields") or []:
            values = field_.get("values") or []
            by_name = field_.get("key") == "metadata.name" and field_.get("operator") == "In"
            if by_name and len(values) == 1:
                return str(values[0])
    return ""


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
    annotations = meta.get("annotations") or {}
    built = annotations.get(api.GENERATION_ANNOTATION)
    phase = status.get("phase", "Pending")
    return PodFacts(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        uid=meta.get("uid", ""),
        node=(node := spec.get("nodeName") or ""),
        phase=phase,
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
        template_hash=intern(h) if (h := annotations.get(api.TEMPLATE_HASH_ANNOTATION)) else None,
        failure=failure_reason(status) if phase == "Failed" else "",
        pinned="" if node or api.WORKLOAD_LABEL not in labels else pinned_node(spec),
    )


def failure_reason(status: Mapping[str, Any]) -> str:
    """Why a Failed pod failed, in words: the first container that exited non-zero (its exit
    code, reason and message), else the pod's own reason (Evicted, DeadlineExceeded...)."""
    for container in status.get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated") or {}
        code = ended.get("exitCode")
        if code not in (None, 0):
            text = f"container {container.get('name', '?')} exited with code {code}"
            if ended.get("reason"):
                text += f" ({ended['reason']})"
            if ended.get("message"):
                text += f": {str(ended['message'])[:200]}"
            return text
    reason, message = status.get("reason"), status.get("message")
    if reason or message:
        return ": ".join(str(x) for x in (reason, message) if x)[:300]
    return "it failed"


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
        finalizers=tuple(meta.get("finalizers") or ()),
    )


def validation_message(err: ValidationError) -> str:
    """`spec.accelerator.count: Input should be greater than 0`, first error first."""
    parts = []
    for e in err.errors()[:3]:
        where = ".".join(str(p) for p in e["loc"])
        parts.append(f"spec.{where}: {e['msg']}")
    return "; ".join(parts)


@dataclass
class Placed:
    """A workload's recorded placement: the pool, the node of each replica, when it was
    decided, and when its run is expected to end (placement's estimate at the pool's speed,
    tessera.placement.expected_runtime; None without an estimatedDuration)."""

    pool: str
    assignments: dict[int, str]
    placed_at: datetime | None
    ends_at: datetime | None = None


def placed_of(status: Mapping[str, Any]) -> Placed | None:
    """The placement a Workload's status records, or None when it records no pool."""
    pool = status.get("pool")
    if not pool:
        return None
    assignments = {int(a["replica"]): str(a["node"]) for a in status.get("assignments") or []}
    return Placed(
        pool,
        assignments,
        parse_time(status.get("placedAt")),
        parse_time(status.get("expectedFinish")),
    )
