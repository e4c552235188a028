"""The threads a cycle fans its API calls out to, and the guard that keeps one object's
failure from stopping the loop. Imports metrics for the error count; no API calls of its own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tessera import metrics
from tessera.controller.clock import Clock
from tessera.errors import TesseraError

log = logging.getLogger("tessera.controller")
T = TypeVar("T")
_DONE = object()  # the end of the items `each` hands out

WRITERS = 32  # concurrent API writes within one cycle (the client's pool is sized to match)
# A burst's placements are sent by SENDERS threads of their own while the loop goes on to
# its next cycle, at most SEND_QUEUE placements at a time (beyond that the cycle waits).
SENDERS = 32
SEND_QUEUE = 2 * SENDERS


def guard(kind: str, fn: Callable[..., object], *args: Any) -> bool:
    """Runs fn; one object's failure is logged and counted, never stops the loop. False on
    failure."""
    try:
        fn(*args)
    except TesseraError as err:
        metrics.RECONCILE_ERRORS.labels(kind).inc()
        log.warning("reconciling %s failed: %s", kind, err)
    except Exception:
        metrics.RECONCILE_ERRORS.labels(kind).inc()
        log.exception("reconciling %s failed unexpectedly", kind)
    else:
        return True
    return False


class Workers:
    """The WRITERS threads a cycle's per-object work runs on, and the SENDERS that create a
    burst's pods while the loop goes on."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="tessera-write")
        self._senders = ThreadPoolExecutor(SENDERS, thread_name_prefix="tessera-send")
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
        """Returns once everything queued on the senders so far has run."""
        for _ in range(SEND_QUEUE):
            self._send_slots.acquire()
        for _ in range(SEND_QUEUE):
            self._send_slots.release()

    def send(self, fn: Callable[[], object]) -> None:
        """Queues fn on the senders; a full queue (SEND_QUEUE) holds the caller back, not
        the API server."""
        self._send_slots.acquire()

        def queued() -> None:
            try:
                fn()
            finally:
                self._send_slots.release()

        self._senders.submit(queued)
