"""The kopf shell: indexes of nodes, pods, pools, workloads and namespaces, and the task that
runs the serialized reconcile loop over a copy of them. Imports kopf; the core stays pure."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from tessera import api, metrics
from tessera.handlers.leadership import Leader
from tessera.handlers.reconciler import Reconciler
from tessera.world import World, node_facts, object_facts, pod_facts

log = logging.getLogger("tessera.handlers")

# What the indexes watch, as (API group, plural): the source of the list/watch RBAC rules.
WATCHED = (
    ("", "nodes"),
    ("", "pods"),
    ("", "namespaces"),
    (api.GROUP, "acceleratorpools"),
    (api.GROUP, "workloads"),
)

INTERVAL = 2.0  # a cycle at least this often, even when nothing seems to change
SETTLE = 0.05  # after a change, wait this long so changes arriving together share a cycle

_changed = threading.Event()  # set by the indexes whenever something they hold changes
_indexed = threading.Event()  # set once kopf has pre-populated every index


def _touch() -> None:
    _changed.set()


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf computes a diff base (a deep copy of the body) on every event for change handlers.
    Tessera has none (indexes only), so the copy is skipped: it was a tenth of the CPU."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


# Index handlers are coroutines: kopf runs a plain function in a thread executor, and that
# hand-off per watch event was a third of the operator's CPU in a burst.

# The last facts of each node: a heartbeat that changes nothing Tessera reads wakes nothing.
_node_facts: dict[str, Any] = {}


@kopf.index("nodes")
async def nodes_idx(body: kopf.Body, name: str, **_: Any) -> dict[str, Any]:
    facts = node_facts(body)
    if _node_facts.get(name) == facts:
        return {name: _node_facts[name]}  # the same object: the World cache compares by identity
    _node_facts[name] = facts
    _touch()
    return {name: facts}


@kopf.index("pods")
async def pods_idx(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[tuple[str | None, str], Any] | None:
    facts = pod_facts(body)
    if not facts.requests and not facts.workload:
        return None  # a pod with no devices and not ours changes nothing Tessera counts
    _touch()
    return {(namespace, name): facts}


@kopf.index(api.GROUP, api.VERSION, "acceleratorpools")
async def pools_idx(body: kopf.Body, name: str, **_: Any) -> dict[str, Any]:
    _touch()
    return {name: object_facts(body)}


@kopf.index(api.GROUP, api.VERSION, "workloads")
async def workloads_idx(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[str, Any]:
    _touch()
    return {f"{namespace}/{name}": object_facts(body)}


@kopf.index("namespaces")
async def namespaces_idx(name: str, labels: kopf.Labels, **_: Any) -> dict[str, Any]:
    return {name: dict(labels)}


@kopf.on.event("namespaces", when=lambda **_: not _indexed.is_set())
async def indexes_ready(**_: Any) -> None:
    """kopf runs non-indexing handlers only after every index is pre-populated."""
    _indexed.set()


def _single(index: Any) -> dict[Any, Any]:
    """An index's values (each key holds one object's facts)."""
    return {key: next(iter(store)) for key, store in index.items() if store}


def _copy_indexes(indices: dict[str, Any]) -> dict[str, Any]:
    """Copies the indexes; runs on the event loop, so nothing changes meanwhile."""
    nodes = _single(indices["nodes_idx"])
    for gone in _node_facts.keys() - nodes.keys():
        del _node_facts[gone]
    return {
        "nodes": nodes,
        "pods": list(_single(indices["pods_idx"]).values()),
        "pools": _single(indices["pools_idx"]),
        "workloads": _single(indices["workloads_idx"]),
        "namespaces": _single(indices["namespaces_idx"]),
    }


def _cycle(reconciler: Reconciler, copied: dict[str, Any]) -> None:
    """Builds the World (the arithmetic over the copy) and runs one cycle, off the loop."""
    world = World(
        **copied, recent=reconciler.recent_for(copied["workloads"]), cache=reconciler.cache
    )
    reconciler.cycle(world, datetime.now(UTC))


async def run_loop(
    reconciler: Reconciler, indices: dict[str, Any], stop: asyncio.Event, leader: Leader | None
) -> None:
    """The serialized loop: wait for a change (or INTERVAL), copy the world, run one cycle.
    With a leader election, only the replica holding the Lease runs cycles."""
    await asyncio.to_thread(_indexed.wait)
    log.info("indexes populated; placement loop running every %.0fs or on change", INTERVAL)
    while not stop.is_set():
        await asyncio.to_thread(_changed.wait, INTERVAL)
        await asyncio.sleep(SETTLE)
        _changed.clear()
        reconciler.heartbeat = time.monotonic()
        if leader is not None:
            try:
                leading = await asyncio.to_thread(leader.hold, datetime.now(UTC))
            except Exception as err:
                log.warning("leader election failed: %s", err)
                leading = False
            metrics.LEADER.set(1 if leading else 0)
            if not leading:
                await asyncio.to_thread(reconciler.stand_by)
                continue  # standing by, indexes warm
        copied = _copy_indexes(indices)
        try:
            await asyncio.to_thread(_cycle, reconciler, copied)
        except Exception:
            log.exception("reconcile cycle failed; retrying")
            await asyncio.sleep(INTERVAL)


@kopf.on.login()
def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    """kopf uses the connection the CLI resolved (--kubeconfig, --context or in-cluster)."""
    return kopf.ConnectionInfo(**memo.reconciler.kube.connection())


@kopf.on.startup()
async def start_loop(memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any) -> None:
    """Starts the loop beside kopf's watchers; indices arrive live (kopf updates them)."""
    indices = {
        name: kwargs[name]
        for name in ("nodes_idx", "pods_idx", "pools_idx", "workloads_idx", "namespaces_idx")
    }
    memo.stop_loop = asyncio.Event()
    memo.loop_task = asyncio.create_task(
        run_loop(memo.reconciler, indices, memo.stop_loop, memo.get("leader"))
    )


@kopf.on.cleanup()
async def stop_loop(memo: kopf.Memo, **_: Any) -> None:
    if getattr(memo, "stop_loop", None) is not None:
        memo.stop_loop.set()
        _changed.set()
        memo.loop_task.cancel()
    if memo.get("leader") is not None:
        await asyncio.to_thread(memo.leader.release)
