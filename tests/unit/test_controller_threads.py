"""Workers.each: the writers share one queue of items, and a deadline leaves the rest."""

from __future__ import annotations

import threading
import time
from typing import Any

from tessera.controller.clock import SystemClock
from tessera.controller.threads import WRITERS, Workers


def workers() -> Workers:
    return Workers(SystemClock())


def test_every_item_runs_once_on_the_writers() -> None:
    seen: list[int] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def fn(item: int) -> None:
        time.sleep(0.001)
        with lock:
            seen.append(item)
            threads.add(threading.current_thread().name)

    assert workers().each(fn, range(500)) == []
    assert sorted(seen) == list(range(500))
    assert all(name.startswith("tessera-write") for name in threads)
    assert 1 < len(threads) <= WRITERS


def test_a_passed_deadline_returns_the_items_not_started_in_order() -> None:
    started: list[int] = []

    def fn(item: int) -> None:
        started.append(item)
        time.sleep(0.01)

    left = workers().each(fn, range(1000), deadline=time.monotonic() + 0.05)
    assert left, "1,000 items of 10 ms each cannot finish in 50 ms"
    assert sorted(started) + left == list(range(1000))
    assert workers().each(fn, range(5), deadline=time.monotonic() - 1) == list(range(5))


def test_items_that_are_none_are_run_too() -> None:
    seen: list[Any] = []
    workers().each(seen.append, [None, 0, None])
    assert sorted(seen, key=repr) == [0, None, None]
