"""Reconciler._hold: in a burst, routine status writes wait for it to be over (at most
HOLD_MAX each); failures and unschedulable pods never wait."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, cast

from tessera.handlers.reconciler import BURST_QUIET, HOLD_MAX, Reconciler
from tessera.world import PodFacts

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def pod(unschedulable: bool = False) -> PodFacts:
    return PodFacts(
        namespace="ml", name="w-h100-0", uid="u0", node="" if unschedulable else "n0",
        phase="Pending" if unschedulable else "Running", deleting=False,
        ready=not unschedulable, requests={"nvidia.com/gpu": 8}, workload="w", pool="h100",
        replica=0, owner_uid="owner", unschedulable_since=NOW if unschedulable else None,
        unschedulable_message="0/8 nodes are available" if unschedulable else "",
    )  # fmt: skip


def reconciler(burst_ago: float | None) -> Reconciler:
    r = Reconciler(cast(Any, None))  # _hold makes no API call
    if burst_ago is not None:
        r.burst_at = time.monotonic() - burst_ago
    return r


def test_routine_writes_wait_in_a_burst_and_are_remembered() -> None:
    r = reconciler(burst_ago=0.0)
    for phase in ("Placed", "Running"):
        assert r._hold(f"ml/{phase}", {"phase": phase}, {0: pod()}, None)
    assert set(r.held) == {"ml/Placed", "ml/Running"}


def test_nothing_waits_outside_a_burst() -> None:
    assert not reconciler(burst_ago=None)._hold("ml/w", {"phase": "Running"}, {0: pod()}, None)
    r = reconciler(burst_ago=BURST_QUIET + 0.1)  # the burst is over: held writes go out
    since = time.monotonic() - 5
    assert not r._hold("ml/w", {"phase": "Running"}, {0: pod()}, since)
    assert r.held == {}


def test_failures_and_unschedulable_pods_never_wait() -> None:
    r = reconciler(burst_ago=0.0)
    assert not r._hold("ml/a", {"phase": "Failed"}, {0: pod()}, None)
    assert not r._hold("ml/b", {"phase": "Succeeded"}, {0: pod()}, None)
    assert not r._hold("ml/c", {"phase": "Placed"}, {0: pod(unschedulable=True)}, None)
    assert r.held == {}


def test_a_write_waits_at_most_hold_max_from_when_it_was_first_held() -> None:
    r = reconciler(burst_ago=0.0)
    recent = time.monotonic() - 1
    assert r._hold("ml/w", {"phase": "Running"}, {0: pod()}, recent)
    assert r.held["ml/w"] == recent  # the clock is not restarted by a later visit
    r.held.clear()
    assert not r._hold("ml/w", {"phase": "Running"}, {0: pod()}, time.monotonic() - HOLD_MAX)
    assert r.held == {}
