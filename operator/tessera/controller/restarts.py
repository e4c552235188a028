"""Gang restarts: a batch gang whose pod failed (or vanished, or was lost with its node while
the gang ran) is started again whole, up to spec.failurePolicy.backoffLimit times, as JobSet
and the Kubeflow trainer do: a distributed job cannot go on with one process missing.

The restart keeps the placement: the same pool and nodes, so the gang comes back where its
devices are booked. A replica whose node takes no pods any more is placed again on the pool
by the repairs (tessera.controller.repairs), and the whole gang is placed again from
scratch when the pool has no room for it. Each failure is counted once: the restart's status
write (restarts, lastFailure with the failed pod's UID) goes out before any pod is deleted,
so an operator that stops between the two finishes the same restart, never a second one."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from tessera import api, runtime
from tessera.controller.events import Events
from tessera.controller.writes import Writes
from tessera.errors import Conflict, NotFound
from tessera.world.facts import ObjectFacts, Placed, PodFacts
from tessera.world.status import restarting_status

log = logging.getLogger("tessera.controller")


@dataclass(frozen=True)
class Failure:
    """What ended a run of a batch gang: a pod that failed (its UID counts it once), or a
    replica lost or vanished while the gang ran (no pod left to name by UID)."""

    pod: str
    uid: str
    replica: int
    reason: str

    def as_status(self, now: datetime) -> dict[str, object]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "replica": self.replica,
            "reason": self.reason[:500],
            "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


def gang_failure(
    facts: ObjectFacts,
    spec: api.WorkloadSpec,
    placed: Placed,
    current: Mapping[int, PodFacts],
    lost: Mapping[int, str],
) -> Failure | None:
    """The failure that ends this run of a batch gang, if any: a Failed pod (the lowest
    replica), else, once the gang ran (phase Running), a replica lost with its node or a
    pod that vanished before it completed. A gang that has not started yet and loses a node
    is not failing: its replica is placed again (the repairs)."""
    if spec.is_service:
        return None
    for replica in sorted(current):
        pod = current[replica]
        if pod.phase == "Failed" and not pod.deleting:
            return Failure(pod.name, pod.uid, replica, pod.failure or "it failed")
    if facts.status.get("phase") != api.Phase.RUNNING.value:
        return None
    name = facts.name
    for replica, why in sorted(lost.items()):
        gone = runtime.pod_name(name, placed.pool, replica)
        return Failure(gone, "", replica, f"replica {replica} lost: {why}")
    for replica in range(spec.replicas):
        if replica not in current:
            gone = runtime.pod_name(name, placed.pool, replica)
            return Failure(gone, "", replica, "its pod vanished before it completed")
    return None


def restarts_left(facts: ObjectFacts, spec: api.WorkloadSpec) -> bool:
    """Whether the gang's backoffLimit has restarts left to spend."""
    return int(facts.status.get("restarts") or 0) < spec.failure_policy.backoff_limit


def counted(facts: ObjectFacts, failure: Failure) -> bool:
    """Whether this failure restarted the gang already (its status write is in, the pods
    not all deleted yet: the operator stopped between the two)."""
    last = facts.status.get("lastFailure") or {}
    return bool(failure.uid) and last.get("uid") == failure.uid


def restart(
    facts: ObjectFacts,
    spec: api.WorkloadSpec,
    current: Mapping[int, PodFacts],
    failure: Failure,
    now: datetime,
    writes: Writes,
    events: Events,
) -> bool:
    """Restarts the gang for `failure`: True when it restarts (or goes on restarting), False
    when the backoffLimit is spent (the lifecycle status then says Failed, and why). The
    pods are recreated by the next visits once the deleted ones are gone (same names)."""
    if not counted(facts, failure):
        if not restarts_left(facts, spec):
            return False
        restarts, limit = int(facts.status.get("restarts") or 0), spec.failure_policy.backoff_limit
        status = restarting_status(facts, restarts + 1, limit, failure.as_status(now), now)
        try:
            writes.status(facts, status)
        except (Conflict, NotFound):
            return True  # read again next visit
        events.post(facts, "Workload", "GangRestarting", status["message"], warning=True)
        log.warning("workload %s: %s", facts.key, status["message"])
    for pod in current.values():
        if not pod.deleting:
            writes.delete_pod(pod)
    return True
