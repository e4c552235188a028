"""Kubernetes Events about Workloads and pools: said once per message, Normal ones within a
budget, posted on threads of their own beside the work. API calls only through tessera.k8s."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from tessera import metrics
from tessera.controller.clock import Clock
from tessera.errors import TesseraError
from tessera.k8s import Kube
from tessera.world.facts import ObjectFacts
from tessera.world.snapshot import World

log = logging.getLogger("tessera.controller")

EVENT_WRITERS = 4  # Events are posted beside the work, never in its critical path
# Normal Events are best effort (as in client-go's recorder): beyond a burst of EVENT_BURST
# they are posted at EVENTS_PER_SECOND, so a burst of placements is not also a burst of
# Events; a placement made in a burst posts none. The status says the same, always.
# Warnings are never held back.
EVENT_BURST = 50
EVENTS_PER_SECOND = 2.0


class TokenBucket:
    """Allows `burst` at once, then `rate` per second; thread-safe."""

    def __init__(self, burst: float, rate: float, clock: Clock) -> None:
        self.burst, self.rate, self.clock = burst, rate, clock
        self.tokens, self.at = burst, clock.monotonic()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self.clock.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens < 1:
                return False
            self.tokens -= 1
            return True


def _of_live(world: World, key: str) -> bool:
    """Whether an event key (`kind/namespace/name/reason`) is of an object the World has."""
    kind, _, name = key.rpartition("/")[0].partition("/")
    if kind == "Workload":
        return name in world.workloads
    return name.removeprefix("None/") in world.pools


class Events:
    """Posts an Event unless the same message was last said of the same object and reason."""

    def __init__(self, kube: Kube, clock: Clock) -> None:
        self.kube = kube
        self.said: dict[str, str] = {}  # last message per object and reason
        self._budget = TokenBucket(EVENT_BURST, EVENTS_PER_SECOND, clock)
        self._posters = ThreadPoolExecutor(EVENT_WRITERS, thread_name_prefix="tessera-event")

    def post(
        self, obj: ObjectFacts, kind: str, reason: str, message: str, warning: bool = False
    ) -> None:
        key = f"{kind}/{obj.namespace}/{obj.name}/{reason}"
        if self.said.get(key) == message:
            return
        self.said[key] = message
        if not warning and not self._budget.take():
            metrics.EVENTS_SKIPPED.labels(reason).inc()
            return

        def post() -> None:
            try:
                self.kube.post_event(obj.reference, kind, reason, message, warning)
            except TesseraError as err:
                log.warning("could not post event %s on %s: %s", reason, obj.name, err)

        self._posters.submit(post)

    def forget_gone(self, world: World) -> None:
        """Forgets what was said of objects the World no longer has. Pruned over a copy of
        the keys: a burst's senders post (FailedCreate) while the cycle runs."""
        for key in list(self.said):
            if not _of_live(world, key):
                self.said.pop(key, None)
