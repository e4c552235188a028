"""The reconcile loop's own cost at fleet scale, without a control plane: the real
Controller and World over a stub API, a burst of one-pod Workloads arriving a fixed number
per cycle over the large fleet. Each cycle's pods appear bound to their nodes in the next
cycle's caches, and each status written appears in them too, as the watches would show.
Deterministic where fleet_bench.py is not (no API server shares the CPUs, and the loop's
clock moves by the burst's arrivals, ARRIVALS_PER_SECOND, not by the CPU time a cycle
takes: its full passes and pacing fall on the same cycles in every run), so a change to the
loop can be judged in a minute; what it leaves out is the API server's answers.
Bench only: imports tessera's world and controller, hack/fleet.py and bench/fleet_specs.py.

Run: .venv/bin/python bench/cycles.py [--nodes 5000 --pools 20 --workloads 10000 --per-cycle 30];
writes bench/results/cycles.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "hack"))

import fleet as fleet_desc  # noqa: E402  (hack/fleet.py)
import fleet_measure as m  # noqa: E402
import fleet_report as report  # noqa: E402
import fleet_specs as specs  # noqa: E402
from tessera import api  # noqa: E402
from tessera.controller.clock import ManualClock  # noqa: E402
from tessera.controller.pipeline import Controller  # noqa: E402
from tessera.world.caches import Edits  # noqa: E402
from tessera.world.facts import ObjectFacts, PodFacts, node_facts, object_facts, pod_facts  # noqa: E402

T = TypeVar("T")
CREATED = "2026-12-05T12:00:00Z"
# Workloads created per second: about the rate the fleet benchmark's client reaches at 5,000
# nodes (bench/results/fleet-large.json), so a 10,000 burst lasts about as long as there.
ARRIVALS_PER_SECOND = 120.0
NAMESPACE = "bench"


class StubKube:
    """What the loop writes, kept for the next cycle's caches; nothing is sent."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.statuses: list[tuple[str, str, dict[str, Any]]] = []

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        return True

    def patch_workload_status(
        self, namespace: str, name: str, status: dict[str, Any], rv: str | None = None
    ) -> None:
        self.statuses.append((namespace, name, status))

    def workload_status_patch(
        self, namespace: str, name: str, status: dict[str, Any], rv: str | None
    ) -> tuple[str, str, dict[str, Any]]:
        """The request a visit sends on the loop (StubLoop.write_status): what it writes."""
        return (namespace, name, status)

    def patch_pool_status(self, name: str, status: dict[str, Any]) -> None:
        pass

    def post_event(self, *args: Any, **kwargs: Any) -> None:
        pass


class StubLoop:
    """The event loop's client (tessera.k8s_aio.AsyncKube): each coroutine runs at once, on
    the caller's thread (a stub send never waits), and its pods are kept in the StubKube."""

    def __init__(self, kube: StubKube) -> None:
        self.kube = kube

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        done: Future[T] = Future()
        try:
            coro.send(None)
        except StopIteration as stop:
            done.set_result(stop.value)
        except Exception as err:
            done.set_exception(err)
        else:
            raise RuntimeError("a stub send waited")
        return done

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    async def create_pod(self, pod: dict[str, Any]) -> bool:
        self.kube.pods.append(pod)
        return True

    async def write_status(self, request: tuple[str, str, dict[str, Any]]) -> None:
        self.kube.statuses.append(request)

    def close(self) -> None:
        pass


class Caches:
    """The informers' stores, as facts; every change a new object, as the watches make."""

    def __init__(self, nodes: int, pools: int) -> None:
        self.groups = fleet_desc.pool_groups(fleet_desc.load_groups(), pools, nodes, 8)
        self.nodes: dict[str, Any] = {}
        for body in fleet_desc.node_manifests(self.groups):
            status = body.setdefault("status", {})
            status["conditions"] = [{"type": "Ready", "status": "True"}]
            status.setdefault("allocatable", status.get("capacity", {}))
            facts = node_facts(body)
            self.nodes[facts.name] = facts
        self.pool_bodies = [specs.pool_manifest(g) for g in self.groups]
        self.pools: dict[str, ObjectFacts] = {}
        for body in copy.deepcopy(self.pool_bodies):
            body["metadata"].update(uid=body["metadata"]["name"], resourceVersion="1", generation=1)
            body["metadata"]["finalizers"] = [api.POOL_FINALIZER]  # as the operator keeps them
            self.pools[body["metadata"]["name"]] = object_facts(body)
        self.workloads: dict[str, ObjectFacts] = {}
        self.pods: dict[str, PodFacts] = {}
        self.version = 0
        self.copies = 0
        self.edited: dict[str, set[Any] | None] = dict.fromkeys(
            ("nodes", "pods", "pools", "workloads", "namespaces")
        )  # None: each cache as if read whole, before the first copy

    def _meta(self, meta: dict[str, Any], uid: str) -> dict[str, Any]:
        self.version += 1
        rv = str(self.version)
        return {**meta, "uid": uid, "resourceVersion": rv, "creationTimestamp": CREATED}

    def arrive(self, body: dict[str, Any]) -> None:
        body = copy.deepcopy(body)
        name = body["metadata"]["name"]
        body["metadata"] = self._meta({**body["metadata"], "generation": 1}, f"uid-{name}")
        facts = object_facts(body)
        self.workloads[facts.key] = facts
        self._edit("workloads", facts.key)

    def _edit(self, field: str, key: Any) -> None:
        edited = self.edited[field]
        if edited is not None:
            edited.add(key)

    def bind(self, pod: dict[str, Any], node: str) -> None:
        pod = copy.deepcopy(pod)
        pod["metadata"] = self._meta(pod["metadata"], f"pod-{pod['metadata']['name']}")
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        facts = pod_facts(pod)
        self.pods[facts.key] = facts
        self._edit("pods", facts.key)

    def write(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        old = self.workloads[f"{namespace}/{name}"]
        meta = {"name": name, "namespace": namespace, "generation": old.generation}
        body = {
            "metadata": self._meta(meta, old.uid),
            "spec": old.spec,
            "status": {**old.status, **status},
        }
        self.workloads[old.key] = object_facts(body)
        self._edit("workloads", old.key)

    def copy(self) -> dict[str, Any]:
        """What Informers.copy hands a cycle."""
        self.copies += 1
        edits = Edits(
            self.copies, {k: None if v is None else frozenset(v) for k, v in self.edited.items()}
        )
        self.edited = {k: set() for k in self.edited}
        return {
            "edits": edits,
            "nodes": dict(self.nodes),
            "pods": list(self.pods.values()),
            "pools": dict(self.pools),
            "workloads": dict(self.workloads),
            "namespaces": {NAMESPACE: {}},
        }


def run(nodes: int, pools: int, workloads: int, per_cycle: int) -> dict[str, Any]:
    caches = Caches(nodes, pools)
    kube = StubKube()
    clock = ManualClock()
    loop = Controller(cast(Any, kube), clock, loop=cast(Any, StubLoop(kube)))
    bodies = specs.singles(workloads, caches.pool_bodies, NAMESPACE)
    cycles: list[dict[str, float]] = []
    arrived = 0
    began = time.process_time()
    while arrived < len(bodies) or kube.pods or kube.statuses:
        for body in bodies[arrived : arrived + per_cycle]:
            caches.arrive(body)
        arrived += per_cycle
        for pod in kube.pods:
            key = f"{NAMESPACE}/{pod['metadata']['labels'][specs.WORKLOAD_LABEL]}"
            decision = loop.ledger.decision(key)
            assert decision is not None, f"a pod of {key} without its decision"
            caches.bind(pod, decision.assignments[0])
        for namespace, name, status in kube.statuses:
            caches.write(namespace, name, status)
        kube.pods, kube.statuses = [], []
        clock.advance(per_cycle / ARRIVALS_PER_SECOND)
        start = time.process_time()
        copied = caches.copy()
        world = loop.world(copied)
        built = time.process_time()
        loop.cycle(world)
        loop.workers.wait_sent()  # the burst's sends, done
        end = time.process_time()
        cycles.append(
            {"world": built - start, "cycle": end - start, "workloads": len(copied["workloads"])}
        )
    total = time.process_time() - began
    return summarise(cycles, total, len(caches.pods))


def _ms(values: Sequence[float]) -> dict[str, float]:
    """Mean, p50 and p90 of CPU seconds, in ms."""
    return {
        "mean": round(statistics.fmean(values) * 1000, 2),
        "p50": round((m.percentile(values, 50) or 0.0) * 1000, 2),
        "p90": round((m.percentile(values, 90) or 0.0) * 1000, 2),
    }


def summarise(cycles: list[dict[str, float]], total: float, pods: int) -> dict[str, Any]:
    """CPU ms per cycle (the whole process: the loop, its senders, the World's construction),
    over every cycle and over the last 50 (the most Workloads)."""
    last = cycles[-50:]
    return {
        "cycles": len(cycles),
        "podsPlaced": pods,
        "cpuSeconds": round(total, 2),
        "cycleCpuMs": _ms([c["cycle"] for c in cycles]),
        "worldCpuMs": _ms([c["world"] for c in cycles]),
        "last50": {
            "workloads": int(last[0]["workloads"]) if last else 0,
            "cycleCpuMs": _ms([c["cycle"] for c in last]),
            "worldCpuMs": _ms([c["world"] for c in last]),
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pools", type=int, default=20)
    parser.add_argument("--workloads", type=int, default=10000)
    parser.add_argument("--per-cycle", type=int, default=30, help="Workloads arriving per cycle")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cycles.json")
    args = parser.parse_args(argv)
    print(
        f"cycles: {args.workloads} singles arriving {args.per_cycle} a cycle over "
        f"{args.nodes} nodes in {args.pools} pools (stub API) ...",
        flush=True,
    )
    figures = run(args.nodes, args.pools, args.workloads, args.per_cycle)
    result = {
        "benchmark": "cycles",
        "startedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": report.machine(),
        "source": report.source(),
        "parameters": {k: getattr(args, k) for k in ("nodes", "pools", "workloads", "per_cycle")},
        **figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    c, w, last = figures["cycleCpuMs"], figures["worldCpuMs"], figures["last50"]
    placed, cpu = figures["podsPlaced"], figures["cpuSeconds"]
    print(f"{figures['cycles']} cycles placed {placed} pods in {cpu} CPU s")
    print(f"CPU ms per cycle: mean {c['mean']}, p50 {c['p50']}, p90 {c['p90']}")
    print(f"  of which building the World: mean {w['mean']}, p50 {w['p50']}")
    print(
        f"  last 50 cycles (from {last['workloads']} Workloads): p50 "
        f"{last['cycleCpuMs']['p50']} ms, the World {last['worldCpuMs']['p50']} ms"
    )
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
