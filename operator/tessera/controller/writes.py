"""The writes every phase makes: a Workload's status and a replica's pod, each recorded in
the ledger as it goes out. API calls only through tessera.k8s (pod creates and the visits'
status writes: on the event loop of tessera.k8s_aio); decides nothing."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from tessera import api, rendezvous, runtime
from tessera.controller.clock import Clock
from tessera.controller.events import Events
from tessera.controller.ledger import Ledger
from tessera.errors import ApiError, Conflict, NotFound
from tessera.k8s import Kube
from tessera.k8s_aio import AsyncKube
from tessera.world.facts import ObjectFacts, Placed, PodFacts
from tessera.world.snapshot import World

T = TypeVar("T")

# A replica's pod, claimed: its key and the coroutine that creates it (True: created), run on
# the event loop (Workers.send, or Writes.run from a thread).
Claimed = tuple[str, Callable[[], Coroutine[Any, Any, bool]]]


class Writes:
    """Status patches and pod creates and deletes, with their ledger entries."""

    def __init__(
        self, kube: Kube, loop: AsyncKube, ledger: Ledger, events: Events, clock: Clock
    ) -> None:
        self.kube, self.loop, self.ledger, self.events = kube, loop, ledger, events
        self.clock = clock
        self._services: set[str] = set()  # uids whose Service exists, not yet in status
        # (namespace, name, workload uid) of the ResourceClaimTemplates made by this process
        self._templates: set[tuple[str, str, str]] = set()

    def status(self, facts: ObjectFacts, status: dict[str, Any], guard: bool = True) -> None:
        """Merge-patches a Workload's status (guarded: only over the resourceVersion read) and
        records it as in flight until the cache shows it."""
        rv = facts.resource_version if guard else None
        self.kube.patch_workload_status(facts.namespace or "", facts.name, status, rv)
        self.ledger.wrote(facts, self.clock.monotonic())

    async def status_sent(self, facts: ObjectFacts, status: dict[str, Any]) -> bool:
        """`status` on the event loop, over the version read: True once written; False
        when the Workload changed since it was read or is gone (Conflict, NotFound), to be
        visited again over the cache's newer copy. A visit's write, sent without holding its
        thread."""
        request = self.kube.workload_status_patch(
            facts.namespace or "", facts.name, status, facts.resource_version
        )
        try:
            await self.loop.write_status(request)
        except (Conflict, NotFound):
            return False
        self.ledger.wrote(facts, self.clock.monotonic())
        return True

    def service(self, facts: ObjectFacts, spec: api.WorkloadSpec) -> str | None:
        """The headless Service through which a workload's replicas find each other
        (tessera.rendezvous): its name once it exists (status.service says so, or this
        process created it and the status does not show it yet), created here otherwise.
        Owned by the Workload, so the garbage collector deletes it with the Workload. A
        refusal is said in an event and tried again on a later visit (None meanwhile)."""
        name = rendezvous.service_name(facts.name)
        if facts.status.get("service") == name:
            self._services.discard(facts.uid)  # recorded: nothing more to remember
            return name
        if facts.uid in self._services:
            return name
        workload = api.Workload(
            metadata={"name": facts.name, "namespace": facts.namespace}, spec=spec
        )
        try:
            self.kube.create_service(rendezvous.service_manifest(workload, facts.uid))
        except ApiError as err:
            if not err.refusal:
                raise
            message = f"service {name} refused: {err.message}"
            self.events.post(facts, "Workload", "FailedCreateService", message, True)
            return None
        self._services.add(facts.uid)
        return name

    def _claim_template(self, template: dict[str, Any], uid: str) -> None:
        """Creates a DRA placement's ResourceClaimTemplate once (one of that name already
        there is the one an earlier placement made: its name says its spec)."""
        meta = template["metadata"]
        key = (meta["namespace"], meta["name"], uid)
        if key not in self._templates:
            self.kube.create_claim_template(template)
            self._templates.add(key)

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
        def parts() -> tuple[api.Workload, Any, str, str | None]:
            # Built on the first claim only: most visits find every pod there or claimed.
            meta = {
                "name": facts.name,
                "namespace": facts.namespace,
                "generation": facts.generation,
            }
            workload = api.Workload(metadata=meta, spec=spec)
            made_from = runtime.template_hash(spec)  # once for the gang's pods
            claims_from = None
            if pool_spec.accelerator.dra is not None:  # its claim's template goes first
                attributes = world.device_attributes(placed.pool)
                template = runtime.claim_template(
                    workload, facts.uid, placed.pool, pool_spec, attributes
                )
                self._claim_template(template, facts.uid)
                claims_from = template["metadata"]["name"]
            return workload, world.accelerator(placed.pool).to_api(), made_from, claims_from

        def claim(replica: int) -> Claimed | None:
            key = f"{ns}/{runtime.pod_name(facts.name, placed.pool, replica)}"
            if not ledger.claim(key, facts.key, clock.monotonic()):
                return None
            node = placed.assignments.get(replica)
            workload, accelerator, made_from, claims_from = parts()
            pod = runtime.build_pod(
                workload,
                facts.uid,
                placed.pool,
                pool_spec,
                accelerator,
                replica,
                node,
                made_from,
                claims_from,
            )

            async def send() -> bool:
                ledger.sending(key, facts.key, clock.monotonic())
                try:
                    created = await self._create(facts, pod)
                except Exception:
                    ledger.unclaim(key)  # not created: the next cycle tries again
                    raise
                if not created:
                    # A pod of that name exists: this one, sent before and not yet in the
                    # cache, or one being deleted (a gang withdrawn and placed again on the
                    # same pool). The visits decide again from the cache, not from a claim
                    # that waits CREATED_GRACE to expire.
                    ledger.unclaim(key)
                return created

            return key, send

        return claim

    async def send_all(self, sends: Sequence[Claimed]) -> bool:
        """Sends a placement's claimed pods; True when every one was created. The first goes
        alone: a refusal (admission, quota) would most likely refuse them all, and the rest
        are then given back unsent, so the visit sends them at once instead of taking them
        for in flight until CREATED_GRACE. The rest go together, as any client sends pods:
        sent one after another, each of a gang's pods waited its turn for a connection
        behind every other placement in flight, and a gang of 8 was bound 8 turns later
        (gangs' creation to bound p50 4.7 s against the floor operator's 3.6 s, 1,000
        nodes). Each failed send gives its own claim back (`pods`)."""
        if not sends:
            return True
        (_, first), rest = sends[0], sends[1:]
        try:
            created = await first()
        except Exception:
            for key, _ in rest:
                self.ledger.unclaim(key)
            raise
        if not rest:
            return created
        results = await asyncio.gather(*(send() for _, send in rest), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return created and all(results)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs a coroutine (a claimed pod's send) on the event loop and waits for it."""
        return self.loop.run(coro)

    async def _create(self, facts: ObjectFacts, pod: dict[str, Any]) -> bool:
        """Creates one pod. A refusal (a 4xx: quota, admission) is recorded for the
        workload's status and becomes a Warning event, so the user sees it with `kubectl
        get -o wide` and `kubectl describe`; the pod is sent again every REFUSED_RETRY."""
        try:
            return await self.loop.create_pod(pod)
        except ApiError as err:
            name = pod["metadata"]["name"]
            message = f"pod {name} {'refused' if err.refusal else 'failed'}: {err.message}"
            if err.refusal:
                self.ledger.refuse(facts.key, message, self.clock.monotonic())
            self.events.post(facts, "Workload", "FailedCreate", message, True)
            raise
