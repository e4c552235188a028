"""Prometheus metrics and the operator's HTTP endpoint (/metrics, /healthz).
The only importer of prometheus_client; labels are bounded (pool, model, phase, objective)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

REGISTRY = CollectorRegistry(auto_describe=True)

WORKLOADS = Gauge(
    "tessera_workloads",
    "Workloads by phase, as the operator last observed them.",
    ["phase"],
    registry=REGISTRY,
)
POOL_DEVICES = Gauge(
    "tessera_pool_devices",
    "Devices of a pool by state: capacity, allocatable, allocated or available.",
    ["pool", "model", "state"],
    registry=REGISTRY,
)
POOL_DEGRADED = Gauge(
    "tessera_pool_degraded",
    "1 when some of the pool's nodes take no new pods (NotReady, cordoned, tainted), else 0.",
    ["pool"],
    registry=REGISTRY,
)
PLACEMENTS = Counter(
    "tessera_placements_total",
    "Placement decisions that put a workload on a pool, by pool and objective.",
    ["pool", "objective"],
    registry=REGISTRY,
)
PLACEMENT_LATENCY = Histogram(
    "tessera_placement_latency_seconds",
    "Seconds from a Workload's creation until all its pods were created.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600),
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "tessera_fallbacks_total",
    "Gangs withdrawn from a pool: the scheduler left their pods unschedulable for "
    "fallbackAfterSeconds, or the API server refused one of them (a quota, an admission "
    "policy: at once).",
    ["pool"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "tessera_reconcile_errors_total",
    "Errors while reconciling, by kind of object.",
    ["kind"],
    registry=REGISTRY,
)
# Every kind's error count exists from the start at 0, so the dashboard and the alert draw
# a 0 rather than "no data", and rate() has a starting point when the first error comes.
for _kind in ("Workload", "AcceleratorPool", "AcceleratorQuota"):
    RECONCILE_ERRORS.labels(_kind)
EVENTS_SKIPPED = Counter(
    "tessera_events_skipped_total",
    "Normal Events not posted: a placement in a burst, or beyond the Event budget "
    "(the status says the same).",
    ["reason"],
    registry=REGISTRY,
)
OLDEST_PENDING = Gauge(
    "tessera_oldest_pending_workload_seconds",
    "Age in seconds of the oldest Workload still waiting for a placement (0 when none waits).",
    registry=REGISTRY,
)
CYCLE_SECONDS = Histogram(
    "tessera_placement_cycle_seconds",
    "Seconds one planning cycle took, from snapshot to decisions.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5),
    registry=REGISTRY,
)

QUOTA_UNITS = Gauge(
    "tessera_quota_units",
    "An AcceleratorQuota's normalised units by state: nominal, used or borrowed (used above "
    "nominal).",
    ["quota", "state"],
    registry=REGISTRY,
)
PREEMPTIONS = Counter(
    "tessera_preemptions_total",
    "Workloads evicted so that a waiting one fits, by the preemptor's quota and the rule "
    "(WithinQuota: priority; Reclaim: borrowed capacity taken back).",
    ["quota", "rule"],
    registry=REGISTRY,
)
# What placed workloads consume, per namespace, quota ("" where none governs it) and pool:
# counted from the devices they hold, every few seconds (tessera.controller.quotas).
_USAGE_LABELS = ["namespace", "quota", "pool"]
DEVICE_SECONDS = Counter(
    "tessera_device_seconds_total",
    "Device-seconds held by placed workloads.",
    _USAGE_LABELS,
    registry=REGISTRY,
)
UNIT_SECONDS = Counter(
    "tessera_unit_seconds_total",
    "Normalised-unit-seconds held by placed workloads (devices x the pool's unitsPerDevice).",
    _USAGE_LABELS,
    registry=REGISTRY,
)
COST = Counter(
    "tessera_cost_total",
    "What the devices held cost at the pool's price per device-hour (in that price's currency).",
    _USAGE_LABELS,
    registry=REGISTRY,
)
ENERGY = Counter(
    "tessera_energy_joules_total",
    "Energy of the devices held at the pool's power per device (watts x seconds).",
    _USAGE_LABELS,
    registry=REGISTRY,
)


LEADER = Gauge(
    "tessera_leader",
    "1 on the replica that holds the leader Lease and places workloads (always 1 without "
    "leader election), 0 on a standby.",
    registry=REGISTRY,
)
LEADER.set(1)


def set_pool(pool: str, model: str, devices: dict[str, int], degraded: bool) -> None:
    for state in ("capacity", "allocatable", "allocated", "available"):
        POOL_DEVICES.labels(pool, model, state).set(devices.get(state, 0))
    POOL_DEGRADED.labels(pool).set(1 if degraded else 0)
    FALLBACKS.labels(pool)  # 0 until the first fallback, as for the kinds' errors above


def forget_pool(pool: str) -> None:
    """Drops a deleted pool's series, so dashboards do not show a ghost."""
    for labels in list(POOL_DEVICES._metrics):
        if labels[0] == pool:
            POOL_DEVICES.remove(*labels)
    for family in (POOL_DEGRADED, FALLBACKS):
        if (pool,) in family._metrics:
            family.remove(pool)


class Health:
    """Healthy when the API server answered recently and the loop is going round (after a
    grace period for kopf's login and first listing); checked at most every few seconds."""

    def __init__(
        self,
        probe: Callable[[], object],
        heartbeat: Callable[[], float | None] = lambda: None,
        ttl: float = 5.0,
        stall: float = 60.0,
    ) -> None:
        self._probe, self._heartbeat, self._ttl, self._stall = probe, heartbeat, ttl, stall
        self._checked, self._ok, self._error = 0.0, False, "not checked yet"
        self._lock = threading.Lock()

    def check(self) -> tuple[bool, str]:
        with self._lock:
            if time.monotonic() - self._checked > self._ttl:
                try:
                    self._probe()
                    self._ok, self._error = True, "ok"
                except Exception as err:
                    self._ok, self._error = False, f"API server unreachable: {err}"
                self._checked = time.monotonic()
            beat = self._heartbeat()  # None until kopf has listed everything: no stall yet
            if self._ok and beat is not None and time.monotonic() - beat > self._stall:
                return False, f"placement loop has not run for {time.monotonic() - beat:.0f}s"
            return self._ok, self._error


def serve(address: str, port: int, health: Health) -> ThreadingHTTPServer:
    """Starts the endpoint in a daemon thread: /metrics, /healthz (API reachable)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/metrics":
                self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz", "/livez"):
                ok, why = health.check()
                self._send(200 if ok else 503, (why + "\n").encode(), "text/plain")
            else:
                self._send(404, b"try /metrics or /healthz\n", "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # scrapes every few seconds would drown the operator's own log

    server = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, name="tessera-http", daemon=True).start()
    return server
