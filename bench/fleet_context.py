"""The fleet benchmark's shared state: one run's cluster, client, operator and CPU sampler, the
Phase each burst fills, and the measurements every phase takes. Imports no phase module."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "hack"))

import cluster as local_cluster  # noqa: E402  (hack/cluster.py)
import fleet_measure as m  # noqa: E402
import fleet_report as report  # noqa: E402
import fleet_specs as specs  # noqa: E402
from fleet_kube import Api, CpuSampler, Floor, Operator, Watch, schedule, wait_until  # noqa: E402
from fleet_targets import OPERATOR  # noqa: E402

WORKLOADS = f"/apis/{specs.API_VERSION}/namespaces/{{ns}}/workloads"
PODS = "/api/v1/namespaces/{ns}/pods"


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
    """One run: a fresh cluster in a temporary directory, its client, the operator, the
    floor operator, the CPU sampler and the results, which each phase fills in."""

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
            pids[OPERATOR["tessera"]] = operator.pid
        floor = getattr(self, "floor_operator", None)
        if floor is not None and floor.pid is not None:
            pids[OPERATOR["floor"]] = floor.pid
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

    # --- what the API server did ----------------------------------------------------------

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

    # --- waiting and checking -------------------------------------------------------------

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

    # --- the figures of a burst -----------------------------------------------------------

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


def pods_made(phase: Phase) -> list[dict[str, Any]]:
    """The pods the operator made of a phase's Workloads, as first seen: the bodies the
    baseline and the floor create again."""
    return [
        p
        for p in phase.pods.first_objects()
        if p["metadata"]["labels"].get(specs.WORKLOAD_LABEL) in phase.starts
    ]
