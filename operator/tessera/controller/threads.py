"""The threads a cycle fans its API calls out to, the event loop a burst's pods are sent
on, and the guard that keeps one object's failure from stopping the loop. Imports metrics
for the error count; no API calls of its own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tessera import metrics
from tessera.controller.clock import Clock
from tessera.errors import TesseraError
from tessera.k8s_aio import AsyncKube

log = logging.getLogger("tessera.controller")
T = TypeVar("T")
_DONE = object()  # the end of the items `each` hands out

WRITERS = 32  # concurrent API writes within one cycle (the client's pool is sized to match)
# A burst's placements are sent on the event loop (tessera.k8s_aio) while the loop goes on to
# its next cycle: at most SENDERS pod creates at a time, and at most SEND_QUEUE placements
# queued (beyond that the cycle waits).
SENDERS = 32
SEND_QUEUE = 2 * SENDERS


def drain(items: list[T]) -> Iterator[T]:
    """Yields the items in order, each taken out of the list as it is yielded (the list ends
    empty): an item done with is not held until the last one is (Placing._act)."""
    items.reverse()
    while items:
        yield items.pop()


def guard(kind: str, fn: Callable[..., object], *args: Any) -> bool:
    """Runs fn; one object's failure is logged and counted, never stops the loop. False on
    failure."""
    try:
        fn(*args)
    except Exception as err:
        _failed(kind, err)
        return False
    return True


async def guarded(kind: str, coro: Awaitable[object]) -> bool:
    """guard for a coroutine (a placement's sends on the event loop)."""
    try:
        await coro
    except Exception as err:
        _failed(kind, err)
        return False
    return True


def _failed(kind: str, err: Exception) -> None:
    metrics.RECONCILE_ERRORS.labels(kind).inc()
    if isinstance(err, TesseraError):
        log.warning("reconciling %s failed: %s", kind, err)
    else:
        log.error("reconciling %s failed unexpectedly", kind, exc_info=err)


class Workers:
    """The WRITERS threads a cycle's per-object work runs on, and the event loop that sends a
    burst's pods while the cycles go on."""

    def __init__(self, clock: Clock, loop: AsyncKube) -> None:
        self.clock, self.loop = clock, loop
        self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="tessera-write")
        self._send_slots = threading.BoundedSemaphore(SEND_QUEUE)

    def each(
        self, fn: Callable[[T], object], items: Iterable[T], deadline: float = float("inf")
    ) -> list[T]:
        """Runs fn over items on the writers, each taking the next item until none is left
        or the deadline (monotonic) passes; returns the items not started. One task per
        writer, not per item: at 10,000 Workloads, submitting a future per item was nearly
        half of the loop's time (py-spy)."""
        pending = iter(items)
        lock = threading.Lock()

        def work() -> None:
            while self.clock.monotonic() <= deadline:
                with lock:
                    item = next(pending, _DONE)
                if item is _DONE:
                    return
                fn(item)  # type: ignore[arg-type]

        for future in [self._writers.submit(work) for _ in range(WRITERS)]:
            future.result()
        return list(pending)

    def wait_sent(self) -> None:
        """Returns once everything sent on the event loop so far has run."""
        for _ in range(SEND_QUEUE):
            self._send_slots.acquire()
        for _ in range(SEND_QUEUE):
            self._send_slots.release()

    def send(self, sending: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Runs a coroutine made by `sending` on the event loop; a full queue (SEND_QUEUE)
        holds the caller back, not the API server."""
        self._send_slots.acquire()
        try:
            future = self.loop.submit(sending())
        except BaseException:
            self._send_slots.release()
            raise
        future.add_done_callback(lambda _: self._send_slots.release())
