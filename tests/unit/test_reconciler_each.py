"""Reconciler._each: the writers share one queue of items, and a deadline leaves the rest;
Reconciler._write_pools: pool status writes go on beside the cycle."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from tessera.handlers.reconciler import POOL_WRITERS, WRITERS, Reconciler


def reconciler() -> Reconciler:
    return Reconciler(cast(Any, None))  # _each makes no API call


def test_every_item_runs_once_on_the_writers() -> None:
    seen: list[int] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def fn(item: int) -> None:
        time.sleep(0.001)
        with lock:
            seen.append(item)
            threads.add(threading.current_thread().name)

    assert reconciler()._each(fn, range(500)) == []
    assert sorted(seen) == list(range(500))
    assert all(name.startswith("tessera-write") for name in threads)
    assert 1 < len(threads) <= WRITERS


def test_a_passed_deadline_returns_the_items_not_started_in_order() -> None:
    started: list[int] = []

    def fn(item: int) -> None:
        started.append(item)
        time.sleep(0.01)

    left = reconciler()._each(fn, range(1000), deadline=time.monotonic() + 0.05)
    assert left, "1,000 items of 10 ms each cannot finish in 50 ms"
    assert sorted(started) + left == list(range(1000))
    assert reconciler()._each(fn, range(5), deadline=time.monotonic() - 1) == list(range(5))


def test_items_that_are_none_are_run_too() -> None:
    seen: list[Any] = []
    reconciler()._each(seen.append, [None, 0, None])
    assert sorted(seen, key=repr) == [0, None, None]


def test_pool_writes_go_on_beside_the_cycle_pool_writers_at_a_time() -> None:
    # The pools' status patches run on threads of their own, POOL_WRITERS at a time (each
    # request in flight holds a connection, and connections stay open); the cycle waits for
    # none of them, and a pool whose last write is still in flight is not sent again.
    r = reconciler()
    running, peak, written = 0, 0, []
    lock = threading.Lock()
    release = threading.Event()

    def update(world: Any, name: str, status: dict[str, Any]) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(10)
        with lock:
            running -= 1
            written.append(name)

    r._update_pool = update  # type: ignore[method-assign]
    statuses: dict[str, dict[str, Any]] = {f"pool-{i:02d}": {} for i in range(20)}
    began = time.monotonic()
    r._write_pools(cast(Any, None), statuses)
    assert time.monotonic() - began < 1, "returned while every write is held"
    deadline = time.monotonic() + 5
    while peak < POOL_WRITERS and time.monotonic() < deadline:
        time.sleep(0.01)
    r._write_pools(cast(Any, None), statuses)  # all 20 still in flight: none sent twice
    release.set()
    for future in list(r._pool_writes.values()):
        future.result(10)
    assert sorted(written) == sorted(statuses)
    assert peak == POOL_WRITERS
    r._write_pools(cast(Any, None), {"pool-00": {}})  # its write is done: sent again
    for future in list(r._pool_writes.values()):
        future.result(10)
    assert sorted(written) == sorted([*statuses, "pool-00"])
