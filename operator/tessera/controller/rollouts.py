"""Rollouts: a placed service whose template, variants or distributed settings changed has its
pods replaced one at a time on the pool it runs on. Each pod records the hash of the spec it
was made from (runtime.template_hash); a pod of another hash is deleted once every replica
is Ready, and made again from the new spec on the same node, where its devices are booked.
So at most one replica is down at a time (like a Deployment with maxSurge 0 and
maxUnavailable 1): accelerators are the scarce part of a pool, and a surge pod would need a
second device set free beside every replica.

A batch workload's spec is immutable while placed (the CRD's rules), but those rules compare
only the fields the schema declares: the hash shows when an undeclared template field was
swapped, and the status says the gang keeps what it was made from."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from tessera import api, runtime
from tessera.world.facts import ObjectFacts, PodFacts

_HASHES_KEPT = 16384  # workloads whose spec hash is remembered (by uid and generation)
ROLLING = "rolling out a new template"  # how a rollout's status message starts


class Hashes:
    """The spec hash of each workload's current generation, computed once per generation:
    a visit comes every pass, a spec changes rarely."""

    def __init__(self) -> None:
        self._hashes: OrderedDict[tuple[str, int], str] = OrderedDict()

    def of(self, facts: ObjectFacts, spec: api.WorkloadSpec) -> str:
        key = (facts.uid, facts.generation)
        found = self._hashes.get(key)
        if found is None:
            found = self._hashes[key] = runtime.template_hash(spec)
            if len(self._hashes) > _HASHES_KEPT:
                self._hashes.popitem(last=False)
        return found


def stale(desired: str, current: Mapping[int, PodFacts]) -> list[int]:
    """The replicas whose live pod was made from another spec. A pod that records no hash
    (made before pods carried one) is taken as current: an operator upgrade rolls nothing."""
    return sorted(
        r
        for r, p in current.items()
        if p.template_hash and p.template_hash != desired and not p.deleting and not p.terminal
    )


def next_to_replace(
    desired: str,
    replicas: int,
    current: Mapping[int, PodFacts],
    moving: bool,
    lost: Mapping[int, str],
) -> PodFacts | None:
    """The one pod to replace now, or None: nothing while a migration (`moving`) or a
    repair runs, or while any replica is missing, not Ready or on its way out (the last
    replacement not yet Ready); else the lowest replica made from another spec."""
    if moving or lost:
        return None
    for replica in range(replicas):
        pod = current.get(replica)
        if pod is None or pod.deleting or pod.terminal or not pod.ready:
            return None
    replace = [r for r in stale(desired, current) if r < replicas]
    return current[replace[0]] if replace else None


def progress(desired: str, replicas: int, current: Mapping[int, PodFacts]) -> str | None:
    """`rolling out a new template: 2/4 replicas updated`, while some replica is not."""
    if not any(r < replicas for r in stale(desired, current)):
        return None
    updated = sum(
        1
        for r, p in current.items()
        if r < replicas and p.template_hash == desired and not p.deleting and not p.terminal
    )
    return f"{ROLLING} ({desired}): {updated}/{replicas} replicas updated, one at a time"
