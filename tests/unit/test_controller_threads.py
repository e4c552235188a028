"""Workers: the writers share one queue of items and a deadline leaves the rest; a burst's
sends run on the event loop, at most SEND_QUEUE queued, one failure never the next's."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tessera import metrics
from tessera.controller.clock import SystemClock
from tessera.controller.threads import SEND_QUEUE, WRITERS, Workers, drain, guarded
from tessera.errors import NotFound
from tessera.k8s import Kube
from tessera.k8s_aio import AsyncKube

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def loop() -> Iterator[AsyncKube]:
    """An event loop whose client sends nothing here (no test below makes a request)."""
    config = client.Configuration()
    config.host = "https://127.0.0.1:9"
    sender = AsyncKube(Kube(client.ApiClient(config)), 4)
    yield sender
    sender.close()


@pytest.fixture
def workers(loop: AsyncKube) -> Iterator[Workers]:
    yield Workers(SystemClock(), loop)


def test_every_item_runs_once_on_the_writers(workers: Workers) -> None:
    seen: list[int] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def fn(item: int) -> None:
        time.sleep(0.001)
        with lock:
            seen.append(item)
            threads.add(threading.current_thread().name)

    assert workers.each(fn, range(500)) == []
    assert sorted(seen) == list(range(500))
    assert all(name.startswith("tessera-write") for name in threads)
    assert 1 < len(threads) <= WRITERS


def test_a_passed_deadline_returns_the_items_not_started_in_order(workers: Workers) -> None:
    started: list[int] = []

    def fn(item: int) -> None:
        started.append(item)
        time.sleep(0.01)

    left = workers.each(fn, range(1000), deadline=time.monotonic() + 0.05)
    assert left, "1,000 items of 10 ms each cannot finish in 50 ms"
    assert sorted(started) + left == list(range(1000))
    assert workers.each(fn, range(5), deadline=time.monotonic() - 1) == list(range(5))


def test_items_that_are_none_are_run_too(workers: Workers) -> None:
    seen: list[Any] = []
    workers.each(seen.append, [None, 0, None])
    assert sorted(seen, key=repr) == [0, None, None]


def test_sends_run_on_the_event_loop_and_wait_sent_waits_for_them(workers: Workers) -> None:
    ran: list[tuple[int, str]] = []
    w = workers

    async def send(i: int) -> None:
        await asyncio.sleep(0.01)
        ran.append((i, threading.current_thread().name))

    for i in range(3 * SEND_QUEUE):
        w.send(lambda i=i: send(i))  # type: ignore[misc]
    w.wait_sent()
    assert sorted(i for i, _ in ran) == list(range(3 * SEND_QUEUE))
    assert {name for _, name in ran} == {"tessera-send"}


def test_a_full_queue_holds_the_caller_back_until_a_send_ends(workers: Workers) -> None:
    w = workers
    release = threading.Event()

    async def stuck() -> None:
        while not release.is_set():
            await asyncio.sleep(0.005)

    for _ in range(SEND_QUEUE):
        w.send(stuck)
    queued = threading.Thread(target=w.send, args=(stuck,), daemon=True)
    queued.start()
    queued.join(0.2)
    assert queued.is_alive(), "a send beyond SEND_QUEUE went out at once"
    release.set()
    queued.join(5)
    assert not queued.is_alive()
    w.wait_sent()


def test_a_failed_send_is_logged_and_counted_and_the_next_goes_on(
    workers: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    w = workers
    errors = metrics.RECONCILE_ERRORS.labels("Workload")
    before = errors._value.get()
    done: list[str] = []

    async def fails() -> None:
        raise NotFound(404, "NotFound", "namespaces gone")

    async def works() -> None:
        done.append("next")

    w.send(lambda: guarded("Workload", fails()))
    w.send(lambda: guarded("Workload", works()))
    w.wait_sent()
    assert done == ["next"]
    assert errors._value.get() == before + 1
    assert "namespaces gone" in caplog.text


class Item:
    """Something a cycle hands out and can be released (a weak reference sees it go)."""


def test_drain_releases_each_item_once_the_next_is_taken() -> None:
    """A backlog's cycle records 10,000 decisions over a minute: each one recorded must not
    be held (with its spec and explanation) until the last is."""
    items = [Item() for _ in range(3)]
    refs = [weakref.ref(i) for i in items]
    taken = drain(items)
    order = []
    for item in taken:
        order.append(refs.index(weakref.ref(item)))
        del item
        gc.collect()
        assert all(r() is None for r in refs[: order[-1]]), "an item done with is still held"
    assert order == [0, 1, 2]
    assert items == []
    gc.collect()
    assert all(r() is None for r in refs)


def test_the_writers_take_every_drained_item(workers: Workers) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def fn(i: int) -> None:
        with lock:
            seen.append(i)

    items = list(range(100))
    assert workers.each(fn, drain(items)) == []
    assert sorted(seen) == list(range(100)) and items == []
