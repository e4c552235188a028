"""The controller: kopf runs the process (login, start-up, signals, clean-up); the caches of
tessera.controller.informers feed one serialized loop of cycles (tessera.controller.pipeline)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from tessera import catalog, metrics
from tessera.controller.collector import GC_YOUNG
from tessera.controller.informers import Informers
from tessera.controller.leadership import Leader
from tessera.controller.pipeline import Controller

log = logging.getLogger("tessera.controller")

INTERVAL = 2.0  # a cycle at least this often, even when nothing seems to change
# After a change wakes the loop, wait this long so changes arriving together share a cycle;
# not after a change that waited out a period already (in a burst: cycles 0.25 s apart, not 0.2).
SETTLE = 0.05
# At most two cycles a second while none places: each copies the caches and builds a World.
# A Workload's arrival cuts that wait to PLACING_PERIOD: a burst's first Workloads came
# just after a cycle that placed nothing (its namespace's creation had woken it) and waited
# out the 0.5 s, 136 of them at once, their pods created 1.5 s after the first.
PERIOD = 0.5
# While cycles place workloads (a burst), one every PLACING_PERIOD: an arrival waits for the
# next cycle, half a period on average. Over 1,000 nodes a burst's cycle took 10-25 ms of
# the loop's CPU and 15-50 ms in all, so five a second cost the loop under a tenth of a
# core. In default bursts (five, against four at 0.5 s and the old burst rule), a single's
# creation to its pod's creation, less the floor's in the same run, fell from 0.72-1.80 s
# (median 0.85) to -0.18-0.72 s (median 0.43).
PLACING_PERIOD = 0.2


def release_free_memory() -> None:
    """Hands the C heap's free pages back to the system (glibc's malloc_trim; elsewhere a
    no-op). The imports and reading the caches whole, or a burst, free most of what they
    allocated, yet glibc keeps the pages: over 5,000 nodes the idle operator's RSS measured
    77.6-80.1 MB against the 80 MB target, and trimming once the caches were filled gave
    back 1.6 MB (71.1-71.2 MB against 72.7-72.8, no pools, two runs each)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


async def run_loop(
    controller: Controller, informers: Informers, stop: asyncio.Event, leader: Leader | None
) -> None:
    """The serialized loop: wait for a change (or INTERVAL), copy the world, run one cycle,
    at most one each PERIOD (PLACING_PERIOD while cycles place or once a Workload arrived).
    With a leader election, only the replica holding the Lease runs cycles."""
    began = time.monotonic()
    await asyncio.to_thread(catalog.catalog)  # read while the caches fill, not in a cycle
    await asyncio.to_thread(informers.wait_synced)
    # Little of what the process holds now is garbage (a full collection here, over 5,000
    # nodes and 18,000 pods, found 37 unreachable objects): frozen, see start_loop.
    gc.freeze()
    release_free_memory()
    log.info(
        "caches filled in %.1fs; placement loop running every %.0fs or on change",
        time.monotonic() - began, INTERVAL,
    )  # fmt: skip
    changed, arrived = informers.changed, informers.arrived
    while not stop.is_set():
        beat = controller.heartbeat or 0.0
        await asyncio.sleep(max(0.0, beat + PLACING_PERIOD - time.monotonic()))
        gathered = changed.is_set()  # changes that waited a period already: no SETTLE
        rest = beat + PERIOD - time.monotonic()
        if not controller.bursts.placing and rest > 0:
            await asyncio.to_thread(arrived.wait, rest)  # an arrival ends the wait
        if not controller.behind:
            await asyncio.to_thread(changed.wait, INTERVAL)
        if not gathered:
            await asyncio.sleep(SETTLE)
        changed.clear()
        arrived.clear()
        controller.heartbeat = time.monotonic()
        if leader is not None:
            try:
                leading = await asyncio.to_thread(leader.hold, datetime.now(UTC))
            except Exception as err:
                log.warning("leader election failed: %s", err)
                leading = False
            metrics.LEADER.set(1 if leading else 0)
            if not leading:
                await asyncio.to_thread(controller.stand_by)
                continue  # standing by, caches warm
        ended = controller.bursts.ended
        try:
            await asyncio.to_thread(controller.run, informers.copy())
            if controller.bursts.ended != ended:
                release_free_memory()  # what the burst freed
        except Exception:
            log.exception("reconcile cycle failed; retrying")
            await asyncio.sleep(INTERVAL)


@kopf.on.login()
def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    """kopf uses the connection the CLI resolved (--kubeconfig, --context or in-cluster)."""
    return kopf.ConnectionInfo(**memo.kube.connection())


@kopf.on.startup()
async def start_loop(memo: kopf.Memo, **_: Any) -> None:
    """Starts the caches and the loop beside kopf, which runs the process around them.
    From here on the cyclic collector takes young objects every GC_YOUNG new ones, not every
    700: the loop's garbage is acyclic (decoded JSON, replaced facts) and refcounting frees
    it as it goes, yet at 700 the collector ran all the time and each full collection
    rescanned the caches (over 5,000 nodes and 12,000 Workloads: 1 s of a restart's first
    seconds, 3.5 s of a 2,000-Workload burst, for 12 unreachable objects). Once the caches
    are filled, the loop freezes what they hold: never scanned again."""
    gc.set_threshold(GC_YOUNG)
    memo.informers = Informers(memo.kube, memo.namespaces)
    memo.informers.start()
    memo.stop_loop = asyncio.Event()
    memo.loop_task = asyncio.create_task(
        run_loop(memo.controller, memo.informers, memo.stop_loop, memo.get("leader"))
    )


@kopf.on.cleanup()
async def stop_loop(memo: kopf.Memo, **_: Any) -> None:
    if getattr(memo, "stop_loop", None) is not None:
        memo.stop_loop.set()
        memo.informers.stop()
        memo.loop_task.cancel()
    if memo.get("leader") is not None:
        await asyncio.to_thread(memo.leader.release)
    if memo.get("controller") is not None:
        await asyncio.to_thread(memo.controller.close)
