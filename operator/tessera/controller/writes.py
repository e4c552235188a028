"""The writes every phase makes: a Workload's status and a replica's pod, each recorded in
the ledger as it goes out. API calls only through tessera.k8s; decides nothing."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tessera import api, runtime
from tessera.controller.clock import Clock
from tessera.controller.events import Events
from tessera.controller.ledger import Ledger
from tessera.errors import ApiError
from tessera.k8s import Kube
from tessera.world.facts import ObjectFacts, Placed, PodFacts
from tessera.world.snapshot import World

# A replica's pod, claimed: its key and the request that creates it (True: created).
Claimed = tuple[str, Callable[[], bool]]


class Writes:
    """Status patches and pod creates and deletes, with their ledger entries."""

    def __init__(self, kube: Kube, ledger: Ledger, events: Events, clock: Clock) -> None:
        self.kube, self.ledger, self.events, self.clock = kube, ledger, events, clock

    def status(self, facts: ObjectFacts, status: dict[str, Any], guard: bool = True) -> None:
        """Merge-patches a Workload's status (guarded: only over the resourceVersion read) and
        records it as in flight until the cache shows it."""
        rv = facts.resource_version if guard else None
        self.kube.patch_workload_status(facts.namespace or "", facts.name, status, rv)
        self.ledger.wrote(facts, self.clock.monotonic())

    def delete_pod(self, pod: PodFacts, force: bool = False) -> None:
        self.kube.delete_pod(pod.namespace, pod.name, pod.uid, force)

    def pods(
        self, world: World, facts: ObjectFacts, spec: api.WorkloadSpec, placed: Placed
    ) -> Callable[[int], Claimed | None]:
        """Claims one replica's pod on the placed pool and returns its key and the request
        that creates it; None when it exists or is claimed already (on its way, not yet in
        the cache). A claim is made before its request is sent, so no pod is sent twice."""
        pool_spec = world.pool_specs[placed.pool]
        ns = facts.namespace or ""
        ledger, clock = self.ledger, self.clock

        @functools.cache
        def parts() -> tuple[api.Workload, Any]:
            # Built on the first claim only: most visits find every pod there or claimed.
            meta = {
                "name": facts.name,
                "namespace": facts.namespace,
                "generation": facts.generation,
            }
            workload = api.Workload(metadata=meta, spec=spec)
            return workload, world.accelerator(placed.pool).to_api()

        def claim(replica: int) -> Claimed | None:
            key = f"{ns}/{runtime.pod_name(facts.name, placed.pool, replica)}"
            if not ledger.claim(key, facts.key, clock.monotonic()):
                return None
            node = placed.assignments.get(replica)
            workload, accelerator = parts()
            pod = runtime.build_pod(
                workload, facts.uid, placed.pool, pool_spec, accelerator, replica, node
            )

            def send() -> bool:
                ledger.sending(key, facts.key, clock.monotonic())
                try:
                    return self._create(facts, pod)
                except Exception:
                    ledger.unclaim(key)  # not created: the next cycle tries again
                    raise

            return key, send

        return claim

    def _create(self, facts: ObjectFacts, pod: dict[str, Any]) -> bool:
        """Creates one pod. A refusal (a 4xx: quota, admission) is recorded for the
        workload's status and becomes a Warning event, so the user sees it with `kubectl
        get -o wide` and `kubectl describe`; the pod is sent again every REFUSED_RETRY."""
        try:
            return self.kube.create_pod(pod)
        except ApiError as err:
            name = pod["metadata"]["name"]
            message = f"pod {name} {'refused' if err.refusal else 'failed'}: {err.message}"
            if err.refusal:
                self.ledger.refuse(facts.key, message, self.clock.monotonic())
            self.events.post(facts, "Workload", "FailedCreate", message, True)
            raise
