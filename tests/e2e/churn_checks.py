"""The invariants a churn checks, as pure functions of one snapshot of the cluster (nodes,
pods and Workloads as a user reads them), and the reader that takes the snapshot:

1. capacity: no node has more devices requested by the pods bound to it than it has;
2. single placement: a replica of a Workload runs once (twice only while migrating);
3. nothing lost: every Workload created and not deleted still exists;
4. readable: every Workload is Running where its status says, waiting with a reason, or
   finished (tests/e2e/churn.py allows a grace period in between), and no service's status
   claims more Ready replicas than there are.

tests/e2e/churn.py samples them over time while it breaks the fleet. Not a test module.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operator_harness import RESOURCE

POOL_NODE_LABEL = "example.com/test-pool"  # how make_pool's pools select their nodes
WORKLOAD_LABEL = "tessera.dev/workload"  # the labels the operator puts on its pods
POOL_LABEL = "tessera.dev/pool"
REPLICA_LABEL = "tessera.dev/replica"
TERMINAL = frozenset({"Succeeded", "Failed"})


# --- what the sampler reads ---------------------------------------------------------------


@dataclass(frozen=True)
class NodeFacts:
    """What the invariants need of a node: which pool's label it has, how many devices."""

    name: str
    pool: str
    allocatable: int  # devices (example.com/burst)


@dataclass(frozen=True)
class PodFacts:
    """What the invariants need of a pod: whose replica it is, where, in what state."""

    name: str  # the same for a replica re-created on the same pool: the uid tells them apart
    uid: str
    workload: str
    replica: int | None
    pool: str
    node: str  # "" while unbound
    phase: str
    deleting: bool
    ready: bool
    devices: int

    @property
    def live(self) -> bool:
        """Running or about to: not finished and not being deleted."""
        return self.phase not in TERMINAL and not self.deleting

    def shown(self) -> str:
        state = (
            self.phase + (", Ready" if self.ready else "") + (", deleting" if self.deleting else "")
        )
        return f"{self.name} on {self.node or 'no node'} (pool {self.pool}, {state})"


@dataclass(frozen=True)
class WorkloadFacts:
    """What the invariants need of a Workload: its shape and the status a user reads."""

    name: str
    replicas: int
    service: bool  # restartPolicy Always
    status: Mapping[str, Any]

    def placed_reason(self) -> str:
        conditions = self.status.get("conditions") or []
        return next((str(c.get("reason")) for c in conditions if c.get("type") == "Placed"), "")

    def shown(self) -> str:
        """The status fields a user reads, on one line."""
        s = self.status
        conditions = [
            f"{c.get('type')}={c.get('status')}/{c.get('reason')}"
            for c in s.get("conditions") or []
        ]
        brief = {
            "phase": s.get("phase"),
            "pool": s.get("pool"),
            "readyReplicas": s.get("readyReplicas"),
            "message": s.get("message"),
            "conditions": conditions,
        }
        return json.dumps(brief)


@dataclass(frozen=True)
class Snapshot:
    """One reading of the churn's nodes, pods and Workloads (three LISTs, not atomic)."""

    at: float  # seconds since the churn began
    nodes: dict[str, NodeFacts]
    pods: list[PodFacts]
    workloads: dict[str, WorkloadFacts]

    def pods_of(self, name: str) -> list[PodFacts]:
        return [p for p in self.pods if p.workload == name]


def node_facts(obj: Mapping[str, Any]) -> NodeFacts:
    meta = obj["metadata"]
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    pool = (meta.get("labels") or {}).get(POOL_NODE_LABEL, "")
    return NodeFacts(meta["name"], pool, int(allocatable.get(RESOURCE, 0)))


def pod_facts(obj: Mapping[str, Any]) -> PodFacts:
    meta, spec, status = obj["metadata"], obj["spec"], obj.get("status") or {}
    labels = meta.get("labels") or {}
    replica = labels.get(REPLICA_LABEL)
    devices = sum(
        int(((c.get("resources") or {}).get("requests") or {}).get(RESOURCE, 0))
        for c in spec.get("containers") or []
    )
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return PodFacts(
        name=meta["name"],
        uid=meta.get("uid", ""),
        workload=labels.get(WORKLOAD_LABEL, ""),
        replica=int(replica) if replica is not None and replica.isdigit() else None,
        pool=labels.get(POOL_LABEL, ""),
        node=spec.get("nodeName") or "",
        phase=status.get("phase") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        ready=ready,
        devices=devices,
    )


def workload_facts(obj: Mapping[str, Any]) -> WorkloadFacts:
    spec = obj["spec"]
    restart = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy", "Always")
    return WorkloadFacts(
        obj["metadata"]["name"],
        int(spec.get("replicas", 1)),
        restart == "Always",
        obj.get("status") or {},
    )


class Reader:
    """Reads a Snapshot with the kubernetes client, as raw JSON: turning the answers into
    the client's model objects would cost more CPU than the reads, about every second on a
    2-core machine. Retries a failed read a few times: a soak of many minutes should not
    end on one API server hiccup."""

    def __init__(self, kubeconfig: Path, namespace: str, pools: Iterable[str]) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        # Any: the raw answers (_preload_content=False) are not what the client's hints say.
        self.core: Any = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.selector = f"{POOL_NODE_LABEL} in ({','.join(sorted(pools))})"

    def snapshot(self, at: float) -> Snapshot:
        for attempt in range(3):
            try:
                return self._read(at)
            except Exception:
                if attempt == 2:
                    raise
                time.sleep(1)
        raise AssertionError("unreachable")

    def _read(self, at: float) -> Snapshot:
        timeout = 30
        nodes = json.loads(
            self.core.list_node(
                label_selector=self.selector, _preload_content=False, _request_timeout=timeout
            ).data
        )["items"]
        workloads = self.custom.list_namespaced_custom_object(
            "tessera.dev", "v1alpha1", self.namespace, "workloads", _request_timeout=timeout
        )["items"]
        pods = json.loads(
            self.core.list_namespaced_pod(
                self.namespace, _preload_content=False, _request_timeout=timeout
            ).data
        )["items"]
        return Snapshot(
            at,
            {n.name: n for n in map(node_facts, nodes)},
            [pod_facts(p) for p in pods],
            {w.name: w for w in map(workload_facts, workloads)},
        )


# --- the invariants: pure functions of a snapshot ------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One invariant broken by one object, as one snapshot shows it."""

    invariant: str
    subject: str
    detail: str

    @property
    def key(self) -> tuple[str, str]:
        return self.invariant, self.subject


def over_capacity(snap: Snapshot) -> list[Finding]:
    """Invariant 1. Pods being deleted count: their devices are not free until they are gone."""
    used: dict[str, list[PodFacts]] = defaultdict(list)
    for pod in snap.pods:
        if pod.node and pod.phase not in TERMINAL:
            used[pod.node].append(pod)
    found = []
    for name, pods in sorted(used.items()):
        node = snap.nodes.get(name)
        total = sum(p.devices for p in pods)
        if node is not None and total > node.allocatable:
            found.append(
                Finding(
                    "capacity",
                    f"node {name}",
                    f"{total} {RESOURCE} requested by its pods, {node.allocatable} allocatable: "
                    + "; ".join(f"{p.shown()} wants {p.devices}" for p in pods),
                )
            )
    return found


def placed_twice(snap: Snapshot) -> list[Finding]:
    """Invariant 2: at most one live pod a replica, or two on different pools while the
    Workload's Placed condition says Migrating."""
    replicas: dict[tuple[str, int], list[PodFacts]] = defaultdict(list)
    for pod in snap.pods:
        if pod.live and pod.replica is not None and pod.workload in snap.workloads:
            replicas[pod.workload, pod.replica].append(pod)
    found = []
    for (name, replica), pods in sorted(replicas.items()):
        if len(pods) < 2:
            continue
        reason = snap.workloads[name].placed_reason()
        if len(pods) == 2 and reason == "Migrating" and pods[0].pool != pods[1].pool:
            continue
        found.append(
            Finding(
                "placed-twice",
                f"workload {name} replica {replica}",
                f"{len(pods)} live pods: {'; '.join(p.shown() for p in pods)}; "
                f"Placed reason {reason or 'none'}",
            )
        )
    return found


def lost(snap: Snapshot, expected: Iterable[str]) -> list[Finding]:
    """Invariant 3: what the driver created and did not delete is still there."""
    return [
        Finding("lost", f"workload {name}", "created and never deleted, but no longer exists")
        for name in sorted(set(expected) - set(snap.workloads))
    ]


def _on_node(pod: PodFacts, snap: Snapshot) -> NodeFacts | None:
    """The node a pod is bound to, if it exists; a pod on a deleted node runs nowhere."""
    return snap.nodes.get(pod.node) if pod.node else None


def ready_replicas(w: WorkloadFacts, snap: Snapshot) -> int:
    """Replicas with a live Ready pod on a node that exists (any pool: a migrating
    service's old pods serve until the new ones are Ready)."""
    return len(
        {
            p.replica
            for p in snap.pods_of(w.name)
            if p.live and p.ready and p.phase == "Running" and _on_node(p, snap)
        }
    )


def _replica_runs(w: WorkloadFacts, replica: int, pool: str, snap: Snapshot) -> bool:
    """Whether one of the replica's pods runs (or, for a batch, has finished) on `pool`."""
    for pod in snap.pods_of(w.name):
        if pod.replica != replica or pod.pool != pool or pod.deleting:
            continue
        if not w.service and pod.phase == "Succeeded":
            return True
        node = _on_node(pod, snap)
        if pod.phase == "Running" and pod.ready and node is not None and node.pool == pool:
            return True
    return False


def pods_shown(w: WorkloadFacts, snap: Snapshot) -> str:
    """A Workload's pods as a violation names them, saying which nodes are gone."""
    shown = [
        p.shown() + ("" if not p.node or p.node in snap.nodes else f" [node {p.node} gone]")
        for p in sorted(snap.pods_of(w.name), key=lambda p: p.name)
    ]
    return "pods: " + ("; ".join(shown) if shown else "none")


def overclaimed(w: WorkloadFacts, snap: Snapshot) -> str | None:
    """A Running service whose status counts every replica Ready while fewer Ready pods run
    on nodes that exist: what it claims and what is, else None."""
    shown = int(w.status.get("readyReplicas") or 0)
    if not w.service or w.status.get("phase") != "Running" or shown < w.replicas:
        return None
    ready = ready_replicas(w, snap)
    if ready >= w.replicas:
        return None
    return (
        f"status says {shown}/{w.replicas} Ready, but {ready} Ready pods run on nodes that "
        f"exist ({pods_shown(w, snap)})"
    )


def unsettled(w: WorkloadFacts, snap: Snapshot) -> str | None:
    """Invariant 4's states. None when a user reads the truth in the Workload's status:
    finished (Succeeded or Failed), waiting (Pending, saying why), or Running with every
    replica running on the pool its status names and that many Ready in status. Otherwise
    what it is doing instead (in transit, or stuck), to be printed if it lasts."""
    status = w.status
    phase = str(status.get("phase") or "")
    pool = str(status.get("pool") or "")
    if phase in TERMINAL:
        return None
    if phase == "Pending":
        return None if status.get("message") else "Pending without a message"
    if phase == "Running":
        running = sum(_replica_runs(w, r, pool, snap) for r in range(w.replicas))
        shown = int(status.get("readyReplicas") or 0)
        if running == w.replicas and shown >= w.replicas:
            return None
        return (
            f"Running with {running}/{w.replicas} replicas running on pool {pool or '?'} "
            f"(status says {shown} ready; {pods_shown(w, snap)})"
        )
    if phase == "Placed":
        return f"Placed on pool {pool or '?'} ({pods_shown(w, snap)})"
    return f"phase {phase}" if phase else "no status written"


def summary(snap: Snapshot) -> str:
    """The state a step led to, on one line of the log: Workloads by phase, the ones in
    transit and what they do, live pods and the nodes under them."""
    phases = Counter(str(w.status.get("phase") or "unwritten") for w in snap.workloads.values())
    moving = [
        f"{name}: {doing}"
        for name, w in sorted(snap.workloads.items())
        if (doing := unsettled(w, snap)) is not None
    ]
    live = [p for p in snap.pods if p.live]
    nodes = {p.node for p in live if p.node}
    by_phase = ", ".join(f"{phase} {n}" for phase, n in sorted(phases.items()))
    line = f"{len(snap.workloads)} Workloads ({by_phase}); {len(live)} live pods on "
    line += f"{len(nodes)} nodes"
    return line + (f"; in transit: {'; '.join(moving)}" if moving else "")
