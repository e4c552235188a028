"""Fleet-scale benchmark: Tessera end to end on the real local control plane with thousands
of kwok accelerator nodes, side by side with the bare kube-scheduler in the same run, and
with the floor: an operator that costs next to nothing (floor_operator.py).
Bench only: hack/cluster.py and hack/fleet.py, the raw API and the `tessera run` process.

Run: .venv/bin/python bench/fleet.py [--scale default|large] [--nodes N --pools P --workloads W];
writes bench/results/fleet-<scale>.json and fleet-<scale>.png (see bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "hack"))

import cluster as local_cluster  # noqa: E402
import fleet as fleet_desc  # noqa: E402  (hack/fleet.py: hack/ is first on the path)
import fleet_measure as m  # noqa: E402
import fleet_report as report  # noqa: E402
import fleet_specs as specs  # noqa: E402
from fleet_kube import (  # noqa: E402
    Api,
    BenchError,
    CpuSampler,
    Floor,
    Operator,
    Watch,
    burst,
    schedule,
    wait_until,
)

SCALES = {
    "default": {"nodes": 1000, "pools": 8, "workloads": 1000, "idle": 20.0, "warm": 10.0},
    "large": {"nodes": 5000, "pools": 20, "workloads": 10000, "idle": 30.0, "warm": 20.0},
    "custom": {"nodes": 16, "pools": 2, "workloads": 12, "idle": 5.0, "warm": 3.0},
}
WORKLOADS = f"/apis/{specs.API_VERSION}/namespaces/{{ns}}/workloads"
PODS = "/api/v1/namespaces/{ns}/pods"
DELETE_THREADS = 4  # clean-up batches deleted at once
WARM_UP = 1000  # Workloads in the unmeasured burst that warms the control plane up


@dataclass(frozen=True)
class Sample:
    """The API server's request counters, the bench's own, and the audit log's length, at
    one moment: two samples bound a window."""

    server: Counter[m.Request]
    own: Counter[m.Request]
    audit: int
    refused: Counter[m.Refused]


@dataclass
class Phase:
    """One burst in one namespace: what was created when, and what the watches saw. Its
    kind: `tessera`, `baseline` (bare pods) or `floor` (bench/floor_operator.py)."""

    name: str
    kind: str
    namespace: str
    resource_version: str
    pods: m.PodTracker
    workloads: m.WorkloadTracker | None = None
    watches: list[Watch] = field(default_factory=list)
    starts: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    batches: list[str] = field(default_factory=list)

    def check(self) -> None:
        for watch in self.watches:
            watch.check()


class Bench:
    """One run: a fresh cluster in a temporary directory, the operator, an unmeasured
    warm-up, six measured bursts and two backlogs."""

    def __init__(self, args: argparse.Namespace, state: Path) -> None:
        self.args, self.state = args, state
        self.started = time.monotonic()
        self.results: dict[str, Any] = {}  # filled as each step completes
        self.step = "set-up"  # what the run is doing, for the report of a failed run
        self.cluster = local_cluster.Cluster(state)
        self.api: Api
        self.operator: Operator
        self.pools: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []
        self.server_version: str | None = None
        self.cpu = CpuSampler(self.processes)
        self.floor_operator: Floor

    def say(self, message: str) -> None:
        report.say(message, self.started, time.monotonic())

    def processes(self) -> dict[str, int]:
        """Every process of the run whose CPU is sampled: the control plane's, the
        operator's while it runs, and the bench's own (its client and watches)."""
        pids = {**self.cluster.pids, "bench": os.getpid()}
        operator = getattr(self, "operator", None)
        if operator is not None and operator.proc is not None and operator.proc.poll() is None:
            pids[report.OPERATOR["tessera"]] = operator.pid
        floor = getattr(self, "floor_operator", None)
        if floor is not None and floor.pid is not None:
            pids[report.OPERATOR["floor"]] = floor.pid
        return pids

    def cpu_in(self, start: float, end: float | None) -> dict[str, Any]:
        """The CPU seconds each process used in a burst, from its first create until its
        last pod was bound: on a small machine the CPUs are the bottleneck, and this says
        who spent them."""
        if end is None:
            return {}
        self.cpu.sample()
        used = self.cpu.between(start, end)
        return {
            "seconds": round(end - start, 2),
            "busyCpus": round(sum(used.values()) / max(end - start, 1e-9), 2),
            "byProcess": dict(sorted(used.items(), key=lambda kv: -kv[1])),
        }

    # --- set-up ---------------------------------------------------------------------------

    def setup(self) -> None:
        a = self.args
        self.say(f"starting a local control plane in {self.state}")
        self.cluster.up(fleet=None)
        self.cpu.start()
        self.api = Api(self.cluster.server, self.cluster.pki, connections=a.threads + 8)
        self.floor_operator = Floor(self.api, self.state)
        self.server_version = str(self.api.get("/version")["gitVersion"])
        self.say("installing the CRDs")
        self.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds")
        )
        self.cluster.wait_established(["workloads.tessera.dev", "acceleratorpools.tessera.dev"])
        wait_until("the Workloads' watch cache", self.workloads_watchable, 60, poll=0.5)
        self.groups = fleet_desc.pool_groups(fleet_desc.load_groups(), a.pools, a.nodes, 8)
        fleet_file = self.state / "bench-fleet.yaml"
        fleet_file.write_text(yaml.safe_dump({"groups": self.groups}, sort_keys=False))
        self.say(f"creating {a.nodes} nodes in {a.pools} pools (8 devices each) and waiting Ready")
        self.cluster.create_fleet(fleet_file)
        self.pools = [specs.pool_manifest(g) for g in self.groups]
        for pool in self.pools:
            self.api.call("POST", f"/apis/{specs.API_VERSION}/acceleratorpools", pool)
        self.say(
            f"fleet ready: {', '.join(g['name'] + ':' + str(g['count']) for g in self.groups)}"
        )

    def workloads_watchable(self) -> bool:
        """Whether a watch of the Workloads from the present is served: just after the CRD
        is established, their watch cache is still filling (429, "storage is (re)initializing"),
        and then starts at a resourceVersion that a namespace made before it is too old for."""
        path = f"/apis/{specs.API_VERSION}/workloads"
        rv = self.api.get(path, limit="1")["metadata"]["resourceVersion"]
        query = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"}
        status, event = self.api.call("GET", path, query=query, ok=(429,))
        return status == 200 and (event or {}).get("type") != "ERROR"

    def start_operator(self) -> None:
        """Starts the operator and waits until it is warm: healthy, every pool's status
        written, and a quiet period passed."""
        self.operator = Operator(self.cluster.kubeconfig, self.state, local_cluster.free_port())
        self.operator.start()
        self.say(f"operator started (pid {self.operator.pid}); waiting until it is warm")
        checks = [self.operator.check]
        wait_until("operator /healthz", self.operator.healthy, 120, checks=checks, poll=0.2)
        want = {g["name"]: g["count"] for g in self.groups}

        def pools_seen() -> bool:
            items = self.api.get(f"/apis/{specs.API_VERSION}/acceleratorpools")["items"]
            got = {p["metadata"]["name"]: (p.get("status") or {}).get("readyNodes") for p in items}
            return got == want

        wait_until(
            "every pool's status",
            pools_seen,
            60 + self.args.nodes / 50,
            checks=checks,
            poll=0.5,
        )

    def idle_figures(self) -> dict[str, Any]:
        """The warm operator's memory, and its CPU over a quiet period, before any workload;
        and every process's CPU in that period: what the fleet costs the machine at rest
        (the test bed's own load, which every side of the run shares)."""
        before, start = self.operator.figures(), time.monotonic()
        time.sleep(self.args.warm_seconds)
        after, machine = self.operator.figures(), self.cpu_in(start, time.monotonic())
        cpu = after["cpuSeconds"] - before["cpuSeconds"]
        by_process = ", ".join(f"{k} {v:.2f}" for k, v in machine["byProcess"].items())
        self.say(
            f"operator idle: RSS {after['rssMB']:.1f} MB, {cpu:.2f} CPU s "
            f"in {self.args.warm_seconds:g} s; the machine at rest: {machine['busyCpus']:.2f} "
            f"CPUs busy ({by_process} CPU s)"
        )
        return {
            "rssMB": round(after["rssMB"], 1),
            "peakRssMB": round(after["peakRssMB"], 1),
            "cpuSeconds": round(cpu, 2),
            "seconds": self.args.warm_seconds,
            "machineCpuSeconds": machine,
        }

    # --- namespaces and watches -----------------------------------------------------------

    @property
    def pace(self) -> str:
        return f" at {self.args.rate:g} pods/s" if self.args.rate else ""

    def due(self, groups: list[str], pods: list[int]) -> list[float] | None:
        """With --rate, when each body of a burst is due; else None (as fast as it can)."""
        return schedule(groups, pods, self.args.rate) if self.args.rate else None

    def namespace(self, name: str) -> str:
        """Creates a namespace; returns its resourceVersion, where its watches start."""
        _, ns = self.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        wait_until(
            f"the default service account in {name}", lambda: self.api.exists(path), 60, poll=0.2
        )
        return str(ns["metadata"]["resourceVersion"])

    def phase(self, name: str, kind: str) -> Phase:
        namespace = f"bench-{name}"
        rv = self.namespace(namespace)
        tessera = kind == "tessera"
        label = specs.WORKLOAD_LABEL if tessera else specs.GROUP_LABEL
        phase = Phase(name, kind, namespace, rv, m.PodTracker(label, keep_first=tessera))
        phase.watches.append(Watch(self.api, PODS.format(ns=namespace), rv, phase.pods.handle))
        if kind != "baseline":  # the floor's Workloads are watched to be deleted
            phase.workloads = m.WorkloadTracker()
            path = WORKLOADS.format(ns=namespace)
            phase.watches.append(Watch(self.api, path, rv, phase.workloads.handle))
        for watch in phase.watches:
            watch.start()
        return phase

    def workload_phase(self, name: str, workloads: list[dict[str, Any]]) -> tuple[Phase, int]:
        """A Tessera phase for these Workloads (put in its namespace); and their pods."""
        phase = self.phase(name, "tessera")
        for body in workloads:
            body["metadata"]["namespace"] = phase.namespace
        phase.sizes = {w["metadata"]["name"]: w["spec"]["replicas"] for w in workloads}
        phase.batches = specs.batches(workloads)
        return phase, sum(phase.sizes.values())

    def scrape(self) -> Sample:
        audit = self.cluster.audit_log
        size = audit.stat().st_size if audit.exists() else 0
        text = self.api.text("/metrics")
        return Sample(m.parse_requests(text), self.api.own(), size, m.parse_refused(text))

    def audited(self, before: Sample, after: Sample) -> list[str]:
        """The audit log's lines written between two samples (from the start of the file
        when it was rotated in between)."""
        with self.cluster.audit_log.open("rb") as f:
            start = before.audit if f.seek(0, os.SEEK_END) >= before.audit else 0
            f.seek(start)
            return f.read(max(after.audit - start, 0)).decode(errors="replace").splitlines()

    def api_cost(self, before: Sample, after: Sample, workloads: int) -> dict[str, Any]:
        server = m.delta(after.server, before.server)
        own = m.delta(after.own, before.own)
        cost: dict[str, Any] = dict(m.attribute(server, own))
        by_resource = m.lists(server, own)
        cost["operator"]["perWorkload"] = round(cost["operator"]["total"] / max(workloads, 1), 2)
        cost["operator"]["refused"] = m.operator_refused(
            m.delta(after.refused, before.refused), own
        )
        cost["lists"] = by_resource
        cost["watchedLists"] = m.watched_lists(by_resource)
        by_client = m.audited_lists(self.audited(before, after))
        cost["listsByClient"] = by_client
        cost["operatorLists"] = sum(by_client.get(m.OPERATOR_CLIENT, {}).values())
        return cost

    # --- the Tessera phases ---------------------------------------------------------------

    def tessera(
        self, name: str, workloads: list[dict[str, Any]], probe: bool
    ) -> tuple[dict[str, Any], Phase]:
        """A burst of Workloads through the operator, measured until every one is Running
        and then until every replica is ready; with probe, then an idle window and the
        restart check. The phase is left for the clean-up."""
        phase, pods = self.workload_phase(name, workloads)
        ns = phase.namespace
        self.say(
            f"tessera {name}: creating {len(workloads)} Workloads ({pods} pods) in {ns}" + self.pace
        )
        due = self.due(list(phase.sizes), list(phase.sizes.values()))
        before, cpu0 = self.scrape(), self.operator.figures()
        phase.starts, first, last_post = burst(
            self.api, WORKLOADS.format(ns=ns), workloads, self.args.threads, due
        )
        self.say(
            f"  {len(workloads)} Workloads created in {last_post - first:.2f} s; "
            "waiting until every pod is bound and every Workload Running"
        )
        self.wait_workloads(phase, pods, running=True)
        running, cpu1 = self.scrape(), self.operator.figures()
        self.wait_workloads(phase, pods, running=False)
        counted = self.wait_pools_counted(phase, m.devices_by_pool(workloads))
        ready = self.scrape()
        result = self.figures(phase, first, last_post)
        result["poolsCountedSeconds"] = counted
        result["apiWrites"] = self.api_cost(before, running, len(workloads))
        result["apiWritesRunningToReady"] = self.api_cost(running, ready, len(workloads))
        result["operatorCpuSeconds"] = round(cpu1["cpuSeconds"] - cpu0["cpuSeconds"], 2)
        result["operatorPeakRssMB"] = round(cpu1["peakRssMB"], 1)
        self.report_phase(f"tessera {name}", result)
        later = result["apiWritesRunningToReady"]["operator"]
        self.say(
            f"  from Running until every replica ready: {later['total']} operator writes "
            f"{later['byCategory'] or ''}"
        )
        if probe:
            result["idle"] = self.idle_window(ready, len(workloads))
            result["restart"] = self.restart(phase)
        result["integrity"] = self.integrity(phase)
        result["tesseraPods"] = pods_made(phase)
        return result, phase

    def wait_workloads(self, phase: Phase, pods: int, running: bool) -> None:
        """Until every pod is bound and every Workload Running (or, after that, until every
        Workload's replicas are all ready)."""
        wl = phase.workloads
        assert wl is not None
        n = len(phase.starts)

        def done() -> bool:
            _, run, ready, _ = wl.counts()
            return phase.pods.counts()[1] >= pods and (run if running else ready) >= n

        def progress() -> str:
            seen, bound, _ = phase.pods.counts()
            placed, run, ready, _ = wl.counts()
            return (
                f"pods created {seen}/{pods}, bound {bound}/{pods}; workloads placed "
                f"{placed}/{n}, Running {run}/{n}, ready {ready}/{n}"
            )

        what = "the burst" if running else "every replica to be ready"
        timeout = self.args.timeout + pods * 0.2
        checks = [phase.check, self.operator.check]
        wait_until(what, done, timeout, progress, self.say, checks=checks)

    def wait_pools_counted(self, phase: Phase, want: Mapping[str, int]) -> float:
        """Until every pool's status counts the burst's devices as allocated: the operator
        writes device counts at most every few seconds, so the last of a burst's may come
        after every replica is ready; the idle window starts once nothing is left to write.
        Returns the seconds from the burst's last pod created to the first poll that saw
        every pool counted. The polls start once every replica is ready, so this bounds
        how stale `kubectl get acp` was from above; it is not that staleness itself."""
        path = f"/apis/{specs.API_VERSION}/acceleratorpools"
        uncounted: dict[str, tuple[int | None, int]] = {}

        def done() -> bool:
            nonlocal uncounted
            uncounted = m.pools_uncounted(self.api.get(path)["items"], want)
            return not uncounted

        def progress() -> str:
            return ", ".join(f"{n} shows {s} of {w}" for n, (s, w) in sorted(uncounted.items()))

        checks = [phase.check, self.operator.check]
        what = "every pool's status to count the burst's devices"
        wait_until(what, done, 60, progress, self.say, checks=checks, poll=0.25)
        with phase.pods.lock:
            last = max(phase.pods.created.values(), default=time.monotonic())
        seconds = round(time.monotonic() - last, 2)
        self.say(
            f"  every pool's status counts the burst's devices, {seconds} s after its last pod"
        )
        return seconds

    def figures(self, phase: Phase, first: float, last_post: float) -> dict[str, Any]:
        """Per-workload latencies and overall rates of one burst, from the watch records."""
        members = phase.pods.members()
        with phase.pods.lock:
            created, bound = dict(phase.pods.created), dict(phase.pods.bound)
        to_created, _ = m.group_latencies(phase.starts, members, created, phase.sizes)
        to_bound, unbound = m.group_latencies(phase.starts, members, bound, phase.sizes)
        pods = sum(phase.sizes.values())
        mine = [p for g in phase.starts for p in members.get(g, [])]
        last_created = max((created[p] for p in mine), default=None)
        last_bound = max((bound[p] for p in mine if p in bound), default=None)
        out: dict[str, Any] = {
            "workloads": len(phase.starts),
            "pods": pods,
            "clientCreatesPerSecond": m.rate(len(phase.starts), first, last_post),
            "createdToPodsCreated": m.summary(to_created),
            "createdToBound": m.summary(to_bound),
            "podsBoundPerSecond": m.rate(pods, first, last_bound),
            "unbound": len(unbound),
            "slowest": m.slowest(phase.starts, members, created, bound, phase.sizes),
            "cpuSeconds": self.cpu_in(first, last_bound),
            "samples": {
                "createdToPodsCreated": sorted(round(x, 4) for x in to_created),
                "createdToBound": sorted(round(x, 4) for x in to_bound),
            },
        }
        if phase.kind == "floor":
            out["podsCreatedPerSecond"] = m.rate(pods, first, last_created)
        if phase.kind == "tessera" and phase.workloads is not None:
            with phase.workloads.lock:
                running = dict(phase.workloads.running)
                ready = dict(phase.workloads.ready)
            with phase.pods.lock:
                pods_running = dict(phase.pods.running)
            out["operatorPodsCreatedPerSecond"] = m.rate(pods, first, last_created)
            # When kwok had started every pod, beside when status said Running: the gap is
            # the operator's, the rest the simulated kubelets'.
            to_running, _ = m.group_latencies(phase.starts, members, pods_running, phase.sizes)
            out["createdToPodsRunning"] = m.summary(to_running)
            out["samples"]["createdToPodsRunning"] = sorted(round(x, 4) for x in to_running)
            for key, times in (("createdToRunning", running), ("createdToReady", ready)):
                latencies = [times[w] - t for w, t in phase.starts.items() if w in times]
                out[key] = m.summary(latencies)
                out["samples"][key] = sorted(round(x, 4) for x in latencies)
        return out

    def report_phase(self, title: str, r: dict[str, Any]) -> None:
        b = r["createdToBound"]
        self.say(
            f"  {title}: {r['pods']} pods bound at {r['podsBoundPerSecond']} pods/s; "
            f"creation to all bound p50 {b['p50']} s, p99 {b['p99']} s, max {b['max']} s"
        )
        if (tail := r["slowest"])["n"]:
            at, made, bind = (
                tail[k] for k in ("createdAtOffset", "toPodsCreated", "podsCreatedToBound")
            )
            self.say(
                f"  slowest {tail['n']}: created {tail['earliestCreatedAtOffset']}-{at['max']} s "
                f"into the burst (p50 {at['p50']}); "
                f"pods created after p50 {made['p50']} s (max {made['max']}), "
                f"bound p50 {bind['p50']} s later (max {bind['max']})"
            )
        if cpu := r["cpuSeconds"]:
            parts = ", ".join(f"{n} {c:.1f}" for n, c in cpu["byProcess"].items())
            self.say(
                f"  CPU s from first create to last bound ({cpu['seconds']:.1f} s, "
                f"{cpu['busyCpus']:.2f} of {os.cpu_count()} CPUs busy): {parts}"
            )
        if "apiWrites" in r and "operatorPodsCreatedPerSecond" in r:
            w = r["apiWrites"]["operator"]
            self.say(
                f"  operator: {r['operatorPodsCreatedPerSecond']} pods created/s, "
                f"{w['total']} writes ({w['perWorkload']} per Workload: {w['byCategory']}), "
                f"{r['operatorCpuSeconds']} CPU s"
                + (f"; refused: {w['refused']}" if w.get("refused") else "")
            )
            self.say(
                f"  creation to Running p50: pods (kwok) {r['createdToPodsRunning']['p50']} s, "
                f"Workload status {r['createdToRunning']['p50']} s"
            )

    def idle_window(self, start: Sample, workloads: int) -> dict[str, Any]:
        """Everything Running and nothing changing: the operator should neither write nor list."""
        seconds = self.args.idle_seconds
        self.say(f"  idle window: {seconds:g} s with {workloads} Workloads Running")
        cpu0 = self.operator.figures()
        time.sleep(seconds)
        self.operator.check()
        cost = self.api_cost(start, self.scrape(), workloads)
        cpu1 = self.operator.figures()
        result = {
            "seconds": seconds,
            "operatorWrites": cost["operator"]["total"],
            "operatorWritesByCategory": cost["operator"]["byCategory"],
            "othersWrites": cost["others"]["total"],
            "lists": cost["lists"],
            "watchedLists": cost["watchedLists"],
            "listsByClient": cost["listsByClient"],
            "operatorLists": cost["operatorLists"],
            "operatorCpuSeconds": round(cpu1["cpuSeconds"] - cpu0["cpuSeconds"], 2),
            "operatorRssMB": round(cpu1["rssMB"], 1),
            "operatorPeakRssMB": round(cpu1["peakRssMB"], 1),
        }
        self.say(
            f"  idle: operator writes {result['operatorWrites']} "
            f"{result['operatorWritesByCategory'] or ''}, LISTs {result['operatorLists']} "
            f"(all clients: {result['lists'] or 0}), "
            f"{result['operatorCpuSeconds']} CPU s, RSS {result['operatorRssMB']} MB"
        )
        return result

    def restart(self, phase: Phase) -> dict[str, Any]:
        """SIGKILL the operator with every Workload Running, start it again and create one
        more Workload at once: how long until that one is placed and its pod exists."""
        assert phase.workloads is not None
        wl = phase.workloads
        before = self.operator.figures()
        self.say(
            f"  restart: SIGKILL the operator (RSS {before['rssMB']:.1f} MB, "
            f"peak {before['peakRssMB']:.1f} MB) and start it again with one new Workload"
        )
        self.operator.kill()
        name = "restart-probe"
        body = specs.workload_manifest(name, phase.namespace, self.pools[0])
        t0 = time.monotonic()
        self.operator.start()
        self.api.call("POST", WORKLOADS.format(ns=phase.namespace), body)

        def placed() -> bool:
            pods = phase.pods.members().get(name, [])
            return name in wl.placed and bool(pods)

        wait_until(
            "the Workload created after the restart to be placed",
            placed,
            self.args.timeout + self.args.workloads / 20,
            say=self.say,
            progress=lambda: f"placed: {name in wl.placed}",
            checks=[phase.check, self.operator.check],
        )
        pod = phase.pods.members()[name][0]
        with wl.lock, phase.pods.lock:
            seconds = max(wl.placed[name], phase.pods.created[pod]) - t0
        wait_until("the restarted operator's /healthz", self.operator.healthy, 60, poll=0.1)
        healthy = time.monotonic() - t0
        wait_until(
            "the new Workload to run",
            lambda: name in wl.running,
            self.args.timeout,
            checks=[phase.check, self.operator.check],
        )
        after = self.operator.figures()
        self.say(
            f"  restart: placed in {seconds:.2f} s after the restart "
            f"(/healthz answered after {healthy:.2f} s)"
        )
        return {
            "seconds": round(seconds, 3),
            "healthySeconds": round(healthy, 3),
            "rssMBBeforeKill": round(before["rssMB"], 1),
            "peakRssMBBeforeKill": round(before["peakRssMB"], 1),
            "rssMBAfterRestart": round(after["rssMB"], 1),
            "podsRecreated": phase.pods.recreated(),
        }

    def backlog(self, workloads: list[dict[str, Any]]) -> tuple[dict[str, Any], Phase]:
        """The operator's own pace: the one-pod Workloads created while it is stopped, then
        it is started with all of them pending. A burst's pods are created no faster than
        its Workloads arrive (the client's pace); from a backlog, the operator's pods come
        as fast as it makes them. Measured from its first pod to its last, and from its
        start (its caches filled first) to its first pod."""
        phase, pods = self.workload_phase("backlog", workloads)
        ns = phase.namespace
        self.say(f"tessera backlog: stopping the operator, creating {len(workloads)} Workloads")
        self.operator.stop()
        phase.starts, first, last_post = burst(
            self.api, WORKLOADS.format(ns=ns), workloads, self.args.threads
        )
        self.say(
            f"  {len(workloads)} Workloads created in {last_post - first:.2f} s; starting "
            "the operator with all of them pending"
        )
        before = self.scrape()
        began = time.monotonic()
        self.operator.start()
        self.cpu.sample()  # its CPU is read from here: the backlog may be shorter than a tick
        self.wait_workloads(phase, pods, running=True)
        result = self.backlog_figures(phase, began, first, last_post, "operator")
        result["apiWrites"] = self.api_cost(before, self.scrape(), len(workloads))
        result["integrity"] = self.integrity(phase)
        result["tesseraPods"] = pods_made(phase)
        return result, phase

    def backlog_figures(
        self, phase: Phase, began: float, first: float, last_post: float, who: str
    ) -> dict[str, Any]:
        """A backlog's figures: from the start of the process that makes its pods (`who`)
        to its first pod, from its first pod to its last, the pace in between, and who
        spent the CPUs then."""
        members = phase.pods.members()
        with phase.pods.lock:
            created = [phase.pods.created[p] for g in phase.starts for p in members.get(g, [])]
        result: dict[str, Any] = {
            "workloads": len(phase.starts),
            "pods": sum(phase.sizes.values()),
            "clientCreatesPerSecond": m.rate(len(phase.starts), first, last_post),
            "startToFirstPodSeconds": round(min(created) - began, 3),
            "firstToLastPodSeconds": round(max(created) - min(created), 3),
            "podsCreatedPerSecond": m.pace(created),
            "cpuSeconds": self.cpu_in(min(created), max(created)),
        }
        cpu = result["cpuSeconds"]
        self.say(
            f"  backlog: the {who}'s first pod {result['startToFirstPodSeconds']:.2f} s after "
            f"its start, then {result['pods']} pods in {result['firstToLastPodSeconds']:.2f} s: "
            f"{result['podsCreatedPerSecond']} pods/s ({cpu['busyCpus']} of "
            f"{os.cpu_count()} CPUs busy: "
            + ", ".join(f"{k} {v:.1f}" for k, v in cpu["byProcess"].items())
            + " CPU s)"
        )
        return result

    def integrity(self, phase: Phase) -> dict[str, Any]:
        """No duplicate, missing or orphan pods (one LIST each, after the measurements)."""
        ns = phase.namespace
        workloads = self.api.get(WORKLOADS.format(ns=ns))["items"]
        pods = self.api.get(PODS.format(ns=ns))["items"]
        result = m.integrity(workloads, pods)
        result["podsRecreated"] = phase.pods.recreated()
        bad = len(result["duplicated"]) + len(result["orphans"]) + len(result["missing"])
        self.say(
            f"  integrity: {result['workloads']} Workloads, {result['pods']} pods; "
            f"{len(result['duplicated'])} duplicated, {len(result['orphans'])} orphans, "
            f"{len(result['missing'])} missing, {result['unbound']} unbound, "
            f"{result['podsRecreated']} recreated"
        )
        result["duplicatesAndOrphans"] = bad + result["podsRecreated"]
        return result

    # --- the baseline ---------------------------------------------------------------------

    def baseline(
        self, name: str, tessera_pods: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], Phase]:
        """The same pods, created directly and bound by the same kube-scheduler. The phase
        is left for the clean-up."""
        phase = self.phase(f"baseline-{name}", "baseline")
        ns = phase.namespace
        bodies = [specs.baseline_pod(p, ns) for p in tessera_pods]
        groups = [b["metadata"]["labels"][specs.GROUP_LABEL] for b in bodies]
        phase.sizes = dict(Counter(groups))
        phase.batches = specs.batches(bodies)
        self.say(f"baseline {name}: creating {len(bodies)} pods directly in {ns}" + self.pace)
        due = self.due(groups, [1] * len(bodies))
        before = self.scrape()
        starts, first, last_post = burst(
            self.api, PODS.format(ns=ns), bodies, self.args.threads, due
        )
        for pod, group in zip(bodies, groups, strict=True):
            t = starts[pod["metadata"]["name"]]
            phase.starts[group] = min(t, phase.starts.get(group, t))
        total = len(bodies)
        self.wait_bound(phase, "the baseline burst", total)
        after = self.scrape()
        result = self.figures(phase, first, last_post)
        result["clientCreatesPerSecond"] = m.rate(total, first, last_post)
        cost = self.api_cost(before, after, len(phase.sizes))
        result["apiWrites"] = {
            "all": cost["others"],
            "lists": cost["lists"],
            "listsByClient": cost["listsByClient"],
        }
        self.report_phase(f"baseline {name}", result)
        return result, phase

    def wait_bound(
        self, phase: Phase, what: str, total: int, check: Callable[[], None] | None = None
    ) -> None:
        """Until the phase's `total` pods are all bound (the baseline's and the floor's)."""

        def progress() -> str:
            seen, bound, _ = phase.pods.counts()
            return f"pods seen {seen}/{total}, bound {bound}/{total}"

        wait_until(
            what,
            lambda: phase.pods.counts()[1] >= total,
            self.args.timeout + total * 0.2,
            progress,
            self.say,
            checks=[phase.check] + ([check] if check else []),
        )

    # --- the floor ------------------------------------------------------------------------

    def floor(
        self,
        name: str,
        workloads: list[dict[str, Any]],
        tessera_pods: list[dict[str, Any]],
        backlog: bool = False,
    ) -> tuple[dict[str, Any], Phase]:
        """The same Workloads in another namespace, turned into the pods Tessera made of
        them by an operator that costs next to nothing (bench/floor_operator.py): what any
        operator could do at best on this machine; with backlog, all of them created before
        it starts. The phase is left for the clean-up."""

        def made(ns: str) -> dict[str, list[dict[str, Any]]]:
            pods: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for pod in tessera_pods:
                body = specs.baseline_pod(pod, ns, floor=True)
                pods[body["metadata"]["labels"][specs.GROUP_LABEL]].append(body)
            return pods

        return self.floor_burst(f"floor-{name}", f"floor {name}", workloads, made, backlog)

    def floor_burst(
        self,
        name: str,
        title: str,
        workloads: list[dict[str, Any]],
        made: Callable[[str], dict[str, list[dict[str, Any]]]],
        backlog: bool = False,
    ) -> tuple[dict[str, Any], Phase]:
        """Workloads created in namespace bench-<name>, each turned at once into the pods
        `made(namespace)` holds for it by the floor operator."""
        phase = self.phase(name, "floor")
        ns = phase.namespace
        bodies = copy.deepcopy(workloads)
        for body in bodies:
            body["metadata"]["namespace"] = ns
        pods = made(ns)
        phase.sizes = {w["metadata"]["name"]: w["spec"]["replicas"] for w in bodies}
        phase.batches = specs.batches(bodies)
        total = sum(phase.sizes.values())
        self.say(
            f"{title}: creating {len(bodies)} Workloads ({total} pods) in {ns}, their "
            "pods created by the floor operator" + self.pace
        )
        # A backlog's Workloads are all created first; the floor operator then lists them
        # (no resourceVersion: a watch from before them can be too old for the API server,
        # 410 Gone after 10,000 creates) and is handed all of them at once.
        rv = "" if backlog else phase.resource_version
        start = functools.partial(self.floor_operator.start, name, ns, rv, dict(pods))
        if not backlog:
            start()
            self.cpu.sample()  # its CPU is read from here: the burst may be shorter than a tick
        try:
            due = self.due(list(phase.sizes), list(phase.sizes.values()))
            phase.starts, first, last_post = burst(
                self.api, WORKLOADS.format(ns=ns), bodies, self.args.threads, due
            )
            began = time.monotonic()
            if backlog:
                start()
                self.cpu.sample()

            def alive() -> None:
                if self.floor_operator.pid is None:
                    raise BenchError("the floor operator exited (its log is in the state dir)")

            self.wait_bound(phase, f"the {title}", total, alive)
            if backlog:
                result = self.backlog_figures(phase, began, first, last_post, "floor operator")
            else:
                result = self.figures(phase, first, last_post)  # its CPU, while it runs
        finally:
            self.floor_operator.stop()
        if not backlog:
            self.report_phase(title, result)
            self.say(f"  floor operator: {result['podsCreatedPerSecond']} pods created/s")
        return result, phase

    def warm_up(self, n: int) -> dict[str, Any]:
        """A burst before any measured one, not measured: n one-pod Workloads turned into
        pods by the floor operator (no Tessera), then cleaned up. The first burst on a fresh
        control plane is slow whoever makes the pods (the floor's: creation to all bound p50
        2.6 s first, 0.6 s after; bench/README.md, the twenty-fifth round), and the measured
        bursts used to start with Tessera's, the baseline's and floor's came after it."""
        workloads = specs.singles(n, self.pools, "")
        resources = {g["name"]: fleet_desc.device_resource(g) or "" for g in self.groups}

        def made(ns: str) -> dict[str, list[dict[str, Any]]]:
            return specs.warm_up_pods(workloads, self.pools, resources, ns)

        result, phase = self.floor_burst("warm-up", "warm-up (not measured)", workloads, made)
        self.cleanup(phase)
        keep = ("workloads", "clientCreatesPerSecond", "createdToPodsCreated", "createdToBound")
        return {k: result[k] for k in keep} | {"podsBoundPerSecond": result["podsBoundPerSecond"]}

    # --- cleaning up between phases -------------------------------------------------------

    def delete_collection(self, path: str, query: dict[str, str] | None = None) -> None:
        """A collection DELETE (of one clean-up batch, or of the whole collection). The API
        server can end it before it is done (a dropped connection, or a 504 after its 60 s
        request timeout; the deletion stops with it), so it is sent again until it completes."""
        for _ in range(20):
            try:
                status, _ = self.api.call(
                    "DELETE", path, query=query, timeout=300, ok=(404, 500, 503, 504)
                )
            except urllib3.exceptions.HTTPError as err:
                status, why = 0, type(err).__name__
            else:
                why = str(status)
            if status < 500 and status != 0:
                return
            self.say(f"  DELETE {path} ended early ({why}); sending it again")
        raise BenchError(f"DELETE {path} kept ending early")

    def delete_batches(
        self,
        phase: Phase,
        path: str,
        what: str,
        left: Callable[[], int],
        query: dict[str, str] | None = None,
    ) -> None:
        """Deletes the phase's objects in the collection at `path`: one collection DELETE per
        clean-up batch, DELETE_THREADS at once, each small enough to end well within the API
        server's request timeout; then one of the whole collection for anything outside the
        batches (nothing, normally). Waits until the watch has seen them go; `left` counts
        those that still exist."""
        ns, total, t0 = phase.namespace, left(), time.monotonic()

        def progress() -> str:
            return f"deleted {total - left():,}/{total:,} {what}"

        selectors = [f"{specs.BATCH_LABEL}={b}" for b in phase.batches]
        timeout = self.args.timeout + total * 0.05
        pool = ThreadPoolExecutor(DELETE_THREADS, thread_name_prefix="bench-delete")
        try:
            jobs = [
                pool.submit(self.delete_collection, path, {**(query or {}), "labelSelector": s})
                for s in selectors
            ]
            wait_until(
                f"the {what} in {ns} to be deleted",
                lambda: all(job.done() for job in jobs),
                timeout,
                progress,
                self.say,
                checks=[phase.check, lambda: _raise_failed(jobs)],
            )
            _raise_failed(jobs)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        self.delete_collection(path, query)
        wait_until(
            f"the {what} in {ns} to go",
            lambda: left() == 0,
            timeout,
            progress,
            self.say,
            checks=[phase.check],
        )
        self.say(f"  {progress()} in {time.monotonic() - t0:.1f} s")

    def cleanup(self, phase: Phase) -> None:
        """Deletes the phase's objects, batch by batch, then its namespace, and waits until
        it is gone and its devices are free. Workloads go first, so the operator never sees
        a Workload without its pods; the pods then go at once (grace period 0)."""
        ns = phase.namespace
        self.say(f"  deleting {ns}")
        if phase.workloads is not None:
            wl = phase.workloads
            self.delete_batches(phase, WORKLOADS.format(ns=ns), "Workloads", lambda: wl.counts()[3])
        pods = phase.pods
        self.delete_batches(
            phase, PODS.format(ns=ns), "pods", lambda: pods.counts()[2], {"gracePeriodSeconds": "0"}
        )
        self.api.call("DELETE", f"/api/v1/namespaces/{ns}", ok=(404,))
        wait_until(
            f"namespace {ns} to go",
            lambda: not self.api.exists(f"/api/v1/namespaces/{ns}"),
            self.args.timeout + pods.counts()[0] * 0.05,  # its events go with it
            every=10,
            poll=0.5,
        )
        for watch in phase.watches:
            watch.stop()

    # --- the run --------------------------------------------------------------------------

    def run(self) -> None:
        """The set-up, the bursts and the backlogs. Each figure goes into self.results as
        soon as it is measured, so a run that fails later still reports what it measured."""
        a, r = self.args, self.results
        self.setup()
        if a.warm_up:
            self.step = "warm-up"
            r["warmUp"] = self.warm_up(a.warm_up)
        self.start_operator()
        self.step = "operator idle"
        op: dict[str, Any] = {"idle": self.idle_figures(), "burstCpuSeconds": {}}
        r.update(operator=op, tessera={}, baseline={}, ratio={})
        mixes = {
            "singles": specs.singles(a.workloads, self.pools, ""),
            "gangs": specs.gangs(a.workloads, self.pools, ""),
        }
        pods = {}
        for mix, workloads in mixes.items():
            self.step = f"tessera {mix}"
            probe = mix == "singles"
            t, phase = self.tessera(mix, workloads, probe)
            pods[mix] = t.pop("tesseraPods")
            r["tessera"][mix] = t
            op["burstCpuSeconds"][mix] = t["operatorCpuSeconds"]
            if probe:
                r["restart"] = t.pop("restart")
                op["peakRssMB"] = r["restart"]["peakRssMBBeforeKill"]
                op["idleWithWorkloads"] = {
                    "seconds": t["idle"]["seconds"],
                    "cpuSeconds": t["idle"]["operatorCpuSeconds"],
                    "rssMB": t["idle"]["operatorRssMB"],
                }
            r["restart"]["duplicatesAndOrphans"] = sum(
                x["integrity"]["duplicatesAndOrphans"] for x in r["tessera"].values()
            )
            self.step = f"clean-up after tessera {mix}"
            self.cleanup(phase)
        op["afterRestartPeakRssMB"] = round(self.operator.figures()["peakRssMB"], 1)
        self.step = "tessera backlog"
        pending = specs.singles(a.workloads, self.pools, "")
        t, phase = self.backlog(pending)
        pods["backlog"] = t.pop("tesseraPods")
        r["backlog"] = {"tessera": t}
        r["restart"]["duplicatesAndOrphans"] += t["integrity"]["duplicatesAndOrphans"]
        self.step = "clean-up after tessera backlog"
        self.cleanup(phase)
        self.say("stopping the operator for the baseline and the floor")
        self.operator.stop()
        r.update(floor={}, ratioToFloor={})
        for kind in ("baseline", "floor"):
            for mix, workloads in mixes.items():
                self.step = f"{kind} {mix}"
                if kind == "baseline":
                    b, phase = self.baseline(mix, pods[mix])
                    r["ratio"][mix] = _ratio(
                        r["tessera"][mix]["podsBoundPerSecond"], b["podsBoundPerSecond"]
                    )
                else:
                    b, phase = self.floor(mix, workloads, pods[mix])
                    r["ratioToFloor"][mix] = _ratio(
                        r["tessera"][mix]["podsBoundPerSecond"], b["podsBoundPerSecond"]
                    )
                r[kind][mix] = b
                self.step = f"clean-up after {kind} {mix}"
                self.cleanup(phase)
        self.step = "floor backlog"
        b, phase = self.floor("backlog", pending, pods["backlog"], backlog=True)
        r["backlog"]["floor"] = b
        r["backlog"]["ratioToFloor"] = _ratio(
            r["backlog"]["tessera"]["podsCreatedPerSecond"], b["podsCreatedPerSecond"]
        )
        for watch in phase.watches:  # the last phase leaves its pods: the cluster goes next
            watch.stop()


def pods_made(phase: Phase) -> list[dict[str, Any]]:
    """The pods the operator made of a phase's Workloads, as first seen: the bodies the
    baseline and the floor create again."""
    return [
        p
        for p in phase.pods.first_objects()
        if p["metadata"]["labels"].get(specs.WORKLOAD_LABEL) in phase.starts
    ]


def _raise_failed(jobs: Sequence[Future[None]]) -> None:
    """Raises the error of the first job that failed, if any has."""
    for job in jobs:
        error = job.exception() if job.done() and not job.cancelled() else None
        if error is not None:
            raise error


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else round(a / b, 3)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", choices=["default", "large"], default="default")
    parser.add_argument("--nodes", type=int, help="override the scale's node count")
    parser.add_argument("--pools", type=int, help="override the scale's pool count")
    parser.add_argument("--workloads", type=int, help="override the scale's N")
    parser.add_argument("--threads", type=int, default=16, help="client threads creating objects")
    parser.add_argument(
        "--rate",
        type=float,
        help="offer the bursts at this many pods/s instead of as fast as the client can",
    )
    parser.add_argument("--idle-seconds", type=float, help="idle window after the burst")
    parser.add_argument("--warm-seconds", type=float, help="quiet period before measuring idle")
    parser.add_argument(
        "--warm-up",
        type=int,
        help=f"Workloads in the unmeasured first burst (default: N, at most {WARM_UP}; 0: none)",
    )
    parser.add_argument("--timeout", type=float, default=120, help="base timeout of each wait (s)")
    parser.add_argument("--results-dir", type=Path, default=HERE / "results")
    parser.add_argument("--keep-state", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args(argv)
    custom = any(x is not None for x in (args.nodes, args.pools, args.workloads))
    args.name = "custom" if custom else args.scale
    if args.rate is not None and args.rate <= 0:
        parser.error("--rate must be above 0")
    scale = SCALES[args.scale]
    args.nodes = args.nodes or scale["nodes"]
    args.pools = args.pools or scale["pools"]
    args.workloads = args.workloads or scale["workloads"]
    args.warm_up = min(args.workloads, WARM_UP) if args.warm_up is None else args.warm_up
    quick = SCALES["custom"] if custom and args.workloads <= 100 else scale
    args.idle_seconds = args.idle_seconds if args.idle_seconds is not None else quick["idle"]
    args.warm_seconds = args.warm_seconds if args.warm_seconds is not None else quick["warm"]
    return args


@contextlib.contextmanager
def terminated_as_exit() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the cluster is always stopped."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write(args: argparse.Namespace, result: dict[str, Any]) -> tuple[Path, Path | None]:
    """The JSON results and, where there are latencies, the chart of their distributions."""
    args.results_dir.mkdir(parents=True, exist_ok=True)
    paced = f"-rate{args.rate:g}" if args.rate else ""
    out = args.results_dir / f"fleet-{args.name}{paced}.json"
    png = out.with_suffix(".png")
    p = result["parameters"]
    title = (
        f"Tessera fleet benchmark ({args.name}): {p['workloads']:,} workloads, "
        f"{p['nodes']:,} nodes in {p['pools']} pools"
    )
    panels = report.curves(result)
    if panels:
        report.chart(png, panels, title)
    else:
        png.unlink(missing_ok=True)  # an earlier run's chart would not match these results
    out.write_text(json.dumps(result, indent=1) + "\n")
    return out, png if panels else None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="tessera-bench-fleet-"))
    bench = Bench(args, state)
    began = datetime.now(UTC)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    code = report.source()
    failed: str | None = None
    ok = False
    try:
        with terminated_as_exit():
            bench.say(
                f"fleet benchmark ({args.name}): {args.nodes} nodes, {args.pools} pools, "
                f"{args.workloads} workloads, {args.threads} client threads" + bench.pace
            )
            bench.run()
            ok = True
    except (BenchError, local_cluster.ClusterError, urllib3.exceptions.HTTPError) as err:
        failed = str(err) or type(err).__name__
        print(f"fleet benchmark failed ({bench.step}): {failed}", file=sys.stderr)
    except Exception as err:  # a bug in the harness: what was measured is still written
        failed = f"{type(err).__name__}: {err}"
        traceback.print_exc()
        print(f"fleet benchmark failed ({bench.step}): {failed}", file=sys.stderr)
    finally:
        bench.cpu.stop()
        with contextlib.suppress(Exception):
            if hasattr(bench, "operator"):
                bench.operator.stop()
        bench.cluster.down(quiet=True, keep_logs=not ok or args.keep_state)
        if ok and not args.keep_state:
            shutil.rmtree(state, ignore_errors=True)
        else:
            print(f"state and logs kept in {state}", file=sys.stderr)
    if not bench.results:
        return 1  # failed before measuring anything: no results to write
    result: dict[str, Any] = {
        "benchmark": "fleet",
        "scale": args.name,
        "startedAt": began.isoformat(timespec="seconds"),
        "durationSeconds": round(time.monotonic() - bench.started, 1),
        "machine": {**report.machine(), "loadAverageAtStart": load_at_start},
        "versions": report.versions(bench.server_version),
        # The digest, not the commit: a commit made during the run changes no operator file.
        "source": {
            **code,
            "operatorChangedDuringRun": report.source()["operatorDigest"] != code["operatorDigest"],
        },
        "parameters": {
            "nodes": args.nodes,
            "pools": args.pools,
            "devicesPerNode": 8,
            "workloads": args.workloads,
            "gangSizes": list(specs.GANG_SIZES),
            "clientThreads": args.threads,
            "clientPodsPerSecond": args.rate,  # None: as fast as the client can
            "idleSeconds": args.idle_seconds,
            "warmSeconds": args.warm_seconds,
            "warmUpWorkloads": args.warm_up,
        },
        "fleet": [
            {"pool": g["name"], "group": g["group"], "zone": g["zone"], "nodes": g["count"]}
            for g in bench.groups
        ],
        **bench.results,
    }
    if failed:
        result.update(failed=failed, failedIn=bench.step)
    result["targets"] = report.targets(result)
    if result["source"]["operatorChangedDuringRun"]:
        bench.say("warning: operator/ changed during the run; the figures mix two versions")
    out, png = write(args, result)
    written = f"{out} and {png}" if png else f"{out} (no latencies to chart)"
    bench.say(("done" if ok else f"failed in {bench.step}; what it measured") + f": {written}")
    print(report.table(result["targets"]))
    print(report.comparison_table(report.comparison(result)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
