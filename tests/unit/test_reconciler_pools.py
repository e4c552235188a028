"""The pools' status in the reconciler: computed again when a pool changes (not when the
operator's own write moves its resourceVersion), and written beside the cycle."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any, cast

from tessera.handlers.reconciler import POOL_WRITERS, Reconciler
from tessera.world import World, WorldCache, node_facts, object_facts


def reconciler() -> Reconciler:
    return Reconciler(cast(Any, None))  # neither test makes an API call


def test_pool_statuses_are_computed_again_when_the_pool_changes_not_its_resource_version() -> None:
    nodes = {
        "n0": node_facts(
            {
                "metadata": {"name": "n0", "labels": {"nvidia.com/gpu.product": "H100"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            }
        )
    }
    cache = WorldCache()

    def world(rv: str, deleting: bool = False) -> World:
        meta: dict[str, Any] = {"name": "h100", "uid": "u1", "resourceVersion": rv}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
        pool = object_facts(
            {
                "metadata": {**meta, "generation": 1},
                "spec": {
                    "accelerator": {"vendor": "nvidia", "model": "H100-SXM5-80GB"},
                    "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "H100"}},
                },
                "status": {},
            }
        )
        return World(nodes=nodes, pods=[], pools={"h100": pool}, workloads={}, namespaces={},
                     cache=cache)  # fmt: skip

    r, now = reconciler(), datetime.now(UTC)
    assert list(r._pool_statuses(world("1"), now)) == ["h100"]
    assert r._pool_statuses(world("2"), now) == {}, "its status written: nothing changed"
    assert list(r._pool_statuses(world("3", deleting=True), now)) == ["h100"]
    r.statuses_at -= 10  # POOL_DEVICES_EVERY past: the counts may have moved
    assert list(r._pool_statuses(world("3", deleting=True), now)) == ["h100"]


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
