"""The pool status phase: computed again when a pool changes (not when the
operator's own write moves its resourceVersion), and written beside the cycle."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from tessera.controller.clock import ManualClock
from tessera.controller.pools import POOL_DEVICES_EVERY, POOL_WRITERS, PoolStatuses
from tessera.world.caches import WorldCache
from tessera.world.facts import node_facts, object_facts
from tessera.world.snapshot import World


def phase(kube: Any = None, clock: ManualClock | None = None) -> PoolStatuses:
    return PoolStatuses(cast(Any, kube), cast(Any, None), clock or ManualClock())


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

    clock = ManualClock()
    r, now = phase(clock=clock), clock.now()
    assert list(r.compute(world("1"), now)) == ["h100"]
    assert r.compute(world("2"), now) == {}, "its status written: nothing changed"
    assert list(r.compute(world("3", deleting=True), now)) == ["h100"]
    assert r.compute(world("3", deleting=True), now) == {}, "nothing changed since"
    clock.advance(POOL_DEVICES_EVERY)  # the counts may have moved
    assert list(r.compute(world("3", deleting=True), now)) == ["h100"]


def test_pool_writes_go_on_beside_the_cycle_pool_writers_at_a_time() -> None:
    # The pools' status patches run on threads of their own, POOL_WRITERS at a time (each
    # request in flight holds a connection, and connections stay open); the cycle waits for
    # none of them, and a pool whose last write is still in flight is not sent again.
    r = phase()
    running, peak, written = 0, 0, []
    lock = threading.Lock()
    release = threading.Event()

    def update(world: Any, name: str, status: dict[str, Any], computed: float) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(10)
        with lock:
            running -= 1
            written.append(name)

    r._update = update  # type: ignore[method-assign]
    statuses: dict[str, dict[str, Any]] = {f"pool-{i:02d}": {} for i in range(20)}
    began = time.monotonic()
    r.write(cast(Any, None), statuses)
    assert time.monotonic() - began < 1, "returned while every write is held"
    deadline = time.monotonic() + 5
    while peak < POOL_WRITERS and time.monotonic() < deadline:
        time.sleep(0.01)
    r.write(cast(Any, None), statuses)  # all 20 still in flight: none sent twice
    release.set()
    for future in list(r._writes.values()):
        future.result(10)
    assert sorted(written) == sorted(statuses)
    assert peak == POOL_WRITERS
    r.write(cast(Any, None), {"pool-00": {}})  # its write is done: sent again
    for future in list(r._writes.values()):
        future.result(10)
    assert sorted(written) == sorted([*statuses, "pool-00"])


class PoolPatches:
    """Records the pool status patches the phase sends (its only API call here)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def patch_pool_status(self, name: str, status: dict[str, Any]) -> None:
        self.sent.append((name, status))


def test_device_counts_are_written_every_pool_devices_every_of_computation_time() -> None:
    # The interval between two writes of a pool's device counts is counted between the
    # statuses' computations: a write whose thread ran late (clock t + 0.3) must not make
    # the next statuses, computed POOL_DEVICES_EVERY after the first, look too soon.
    pool = object_facts(
        {
            "metadata": {"name": "h100", "uid": "u1", "resourceVersion": "1", "generation": 1},
            "spec": {},
            "status": {"devices": {"allocated": 0}, "summary": "0/8", "conditions": []},
        }
    )
    world = cast(Any, SimpleNamespace(pools={"h100": pool}))
    kube = PoolPatches()
    r = phase(kube)
    t = time.monotonic()

    def status(allocated: int) -> dict[str, Any]:
        return {"devices": {"allocated": allocated}, "summary": f"{allocated}/8", "conditions": []}

    r._update(world, "h100", status(1), t)
    r._update(world, "h100", status(2), t + POOL_DEVICES_EVERY - 0.1)  # too soon
    r._update(world, "h100", status(3), t + POOL_DEVICES_EVERY)
    r._update(world, "h100", status(0), t + 2 * POOL_DEVICES_EVERY)  # as the pool shows
    assert [s["devices"]["allocated"] for _, s in kube.sent] == [1, 3]
    # Anything but device counts goes out at once.
    r._update(world, "h100", {**status(4), "nodes": 2}, t + POOL_DEVICES_EVERY + 0.1)
    assert len(kube.sent) == 3


def test_write_pools_hands_the_writers_the_time_the_statuses_were_computed() -> None:
    r = phase(PoolPatches())
    seen: list[float] = []
    r._update = lambda world, name, status, computed: seen.append(computed)  # type: ignore[method-assign]
    r.computed_at = 123.0
    r.write(cast(Any, None), {"h100": {}})
    for future in list(r._writes.values()):
        future.result(10)
    assert seen == [123.0]
