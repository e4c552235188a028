"""Repairs: replicas lost with their node (deleted, NotReady, cordoned, tainted), placed again
on their pool through the cycle's one plan, so the new nodes are booked with everything else
placed that cycle. A service keeps its healthy replicas meanwhile; a gang that has not
started, and cannot be completed on its pool, is placed again from scratch."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from tessera import api, placement
from tessera.controller.events import Events
from tessera.controller.fallback import withdraw
from tessera.controller.ledger import Ledger
from tessera.controller.writes import Writes
from tessera.errors import Conflict, NotFound
from tessera.placement.snapshot import tolerates
from tessera.world.facts import TERMINAL, ObjectFacts, Placed, PodFacts
from tessera.world.snapshot import World
from tessera.world.status import SCALED_UP, lost_message

log = logging.getLogger("tessera.controller")

# Repairs are planned before every pending workload of their priority: a running service's
# lost replica comes before work that never ran.
REPAIR_PRIORITY_BOOST = 1
# A repair's message names each replica's new node up to this many; more are counted.
MOVES_LISTED = 4


# Why a replica is placed again when the operator stopped before creating its pod and no
# status recorded its node.
NO_NODE = "no node recorded and no pod made before the operator restarted"


def lost_replicas(
    world: World, placed: Placed, spec: api.WorkloadSpec, current: Mapping[int, PodFacts]
) -> tuple[dict[int, str], list[PodFacts]]:
    """The replicas lost with their node (replica -> why), and a service's replicas a scale
    up added (no node yet: placed on the pool the same way), and the pods to delete for good
    (bound to a node that is gone, or pinned to a node that takes no pods and not bound):
    a replica is lost when the node it was placed on is gone or takes no new pods, and it
    does not run there (no pod, a pod never bound, a pod on the deleted node, or a service's
    finished pod). A pod still running on a node that takes no new pods (cordoned, tainted
    NoSchedule) runs on: it is not lost."""
    unfit = world.layout.unfit.get(placed.pool, {})
    gated = world.layout.gated.get(placed.pool, {})
    tolerations = (spec.template.get("spec") or {}).get("tolerations") or []
    lost: dict[int, str] = {}
    doomed: list[PodFacts] = []
    for replica in range(spec.replicas):
        node = placed.assignments.get(replica)
        if node is None:
            if spec.is_service and placed.assignments and replica not in current:
                lost[replica] = f"{SCALED_UP} {spec.replicas}"  # placed by the repairs too
            elif placed.assignments and replica not in current:
                # Read back from the pods after a restart, the operator stopped before it
                # made them all: a pod made now would have no node, and could take one
                # another placement holds. Placed on the pool like a lost replica.
                lost[replica] = NO_NODE
            continue
        if node not in world.nodes:
            why = f"node {node} was deleted"
        elif node in unfit:
            taints = gated.get(node)
            if taints and all(tolerates(tolerations, t) for t in taints):
                continue  # tainted, but the workload's own tolerations let it stay
            why = f"node {node} takes no new pods ({unfit[node]})"
        else:
            continue
        pod = current.get(replica)
        if pod is not None:
            gone = bool(pod.node) and pod.node not in world.nodes
            if pod.terminal and not spec.is_service:
                continue  # a batch replica that finished
            if pod.node and not gone and not pod.terminal:
                continue  # bound and running on a node that still exists
            if (gone or not pod.node) and not pod.terminal:
                doomed.append(pod)
        lost[replica] = why
    return lost, doomed


@dataclass(frozen=True)
class Repair:
    """A placed workload's lost replicas, to be planned on its pool, and its pods there."""

    facts: ObjectFacts
    placed: Placed
    lost: dict[int, str]
    spec: api.WorkloadSpec
    pending: placement.PendingWorkload
    pods: list[PodFacts]


def repairs(
    world: World, ledger: Ledger, spec_of: Callable[[ObjectFacts], api.WorkloadSpec | None]
) -> list[Repair]:
    """The lost replicas the visits found (Ledger.lose), still lost as this World shows
    them, each as a gang of the lost replicas restricted to the workload's pool."""
    out = []
    terminating = world.terminating
    for key, (placed, lost) in sorted(ledger.losses().items()):
        if ledger.writing(key):
            continue  # its last status write is not in the cache yet: next cycle
        facts = world.workloads.get(key)
        now_placed = world.placement_of(key)
        if (
            facts is None
            or facts.deleting
            or facts.namespace in terminating
            or facts.status.get("phase") in TERMINAL
            or now_placed is None
            or now_placed.assignments != placed.assignments
            or placed.pool not in world.pool_specs
        ):
            ledger.repaired(key)
            continue
        if world.pool_specs[placed.pool].draining:
            continue  # moved off the pool whole (tessera.controller.fallback.moves)
        spec = spec_of(facts)
        if spec is None:
            continue
        needs = spec.accelerator.model_copy(update={"pools": [placed.pool]})
        gang = spec.model_copy(
            update={
                "replicas": len(lost),
                "accelerator": needs,
                "priority": spec.priority + REPAIR_PRIORITY_BOOST,
            }
        )
        pending = placement.PendingWorkload(
            namespace=facts.namespace or "",
            name=facts.name,
            spec=gang,
            created_at=facts.created,
            holds=True,
        )
        pods = [
            p
            for p in world.pods_by_workload.get(key, ())
            if p.owner_uid == facts.uid and p.pool == placed.pool
        ]
        out.append(Repair(facts, placed, lost, spec, pending, pods))
    return out


def record_repair(
    repair: Repair,
    decision: placement.Decision,
    now: datetime,
    writes: Writes,
    ledger: Ledger,
    events: Events,
) -> None:
    """Writes a repair's new nodes into status.assignments (the visit then creates the pods
    there). Without room on the pool: a service keeps its healthy replicas and the lost ones
    wait (tried again every cycle; the status says they are lost, an event that the pool has
    no room); a gang that has not started is placed again from scratch."""
    facts, placed, lost = repair.facts, repair.placed, repair.lost
    text = lost_message(lost)
    scaling = all(why.startswith(SCALED_UP) for why in lost.values())
    if not decision.placed:
        started = facts.status.get("phase") == api.Phase.RUNNING.value
        if repair.spec.is_service or started:
            message = f"{text}; no room on pool {placed.pool} yet: waiting"
            if scaling:
                # Placed as any placement next: whole, on a pool with room for every replica.
                ledger.outgrow(facts.key)
                message = f"{text}; no room on pool {placed.pool} yet: trying the other pools"
            reason = "ScaleUpWaiting" if scaling else "ReplicaLost"
            events.post(facts, "Workload", reason, message, warning=True)
            return
        ledger.repaired(facts.key)
        why = f"{text}, and the pool has no room for it: placing the gang again"
        withdraw(facts, placed, repair.pods, why, now, writes, ledger, events)
        return
    nodes = dict(placed.assignments)
    moved = []
    for replica, node in zip(sorted(lost), decision.nodes, strict=True):
        nodes[replica] = node
        moved.append(f"replica {replica} to {node}")
    if len(moved) > MOVES_LISTED:
        moved = [f"{len(moved)} replicas on {len(set(decision.nodes))} nodes"]
    assignments = [{"replica": r, "node": n} for r, n in sorted(nodes.items())]
    where = f"{placed.pool} ({', '.join(moved)})"
    message = f"{text}: placed on {where}" if scaling else f"{text}: placed again on {where}"
    try:
        # The pool too: a placement read back from its pods after a restart has none there.
        writes.status(facts, {"pool": placed.pool, "assignments": assignments, "message": message})
    except (Conflict, NotFound):
        return  # read again next cycle
    ledger.assume(facts, Placed(placed.pool, nodes, placed.placed_at, placed.ends_at))
    ledger.repaired(facts.key)
    events.post(facts, "Workload", "ScaledUp" if scaling else "ReplicaLost", message, not scaling)
    log.log(logging.INFO if scaling else logging.WARNING, "workload %s: %s", facts.key, message)
