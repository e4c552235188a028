"""The operator under a moving fleet, on the real control plane: a node deleted under a
service, tainted and cordoned nodes, pools deleted with work on them (with somewhere to go and
without), overlapping pools, exclusions that lift when the pool changes, and a namespace being
deleted. Each test brings its own kwok nodes and pools, and checks in the background that no
node is ever promised more devices than it has."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from operator_harness import (
    NO_FINALIZERS,
    RESOURCE,
    CapacityWatch,
    Kubectl,
    Operator,
    drop_pools,
    install_crds,
    make_pool,
    namespace,
    pool_manifest,
    pool_object,
    wait_for,
    workload,
)

import fleet  # hack/fleet.py: operator_harness puts hack/ on the path

POOL_KEY = "example.com/test-pool"  # the label make_pool's nodes carry, and its pools select
FINALIZER = "tessera.dev/pool-protection"
MAINTENANCE = "example.com/maintenance=yes:NoSchedule"
RUNTIME = "tessera.dev/simulated-runtime-ms"  # kwok completes such batch pods


@pytest.fixture(scope="module")
def installed(cluster: Any) -> Any:
    install_crds(cluster)
    return cluster


# --- what a user reads -------------------------------------------------------------------------


class Watch:
    """`kubectl get KIND [NAME] -w`: every version of the objects the API server sends, in
    the order it sent them, each with its event type and when it arrived. Catches what a
    poll can miss: a message written for one cycle, a pod deleted and re-created."""

    def __init__(
        self, cluster: Any, kind: str, name: str | None = None, ns: str | None = None
    ) -> None:
        args = [str(cluster.bin("kubectl")), f"--kubeconfig={cluster.kubeconfig}", "get", kind]
        args += [name] if name else []
        args += ["-n", ns] if ns else []
        args += ["--watch", "--output-watch-events", "-o", "json"]
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self._proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in self._proc.stdout:
            buffer += line
            try:
                event, _ = decoder.raw_decode(buffer.strip())
            except json.JSONDecodeError:
                continue  # a pretty-printed object not yet complete
            buffer = ""
            self.events.append((time.monotonic(), event["type"], event["object"]))

    def __enter__(self) -> Watch:
        wait_for("the watch's first event", lambda: self.events, timeout=30, every=0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._thread.join(10)

    def objects(self) -> list[dict[str, Any]]:
        return [obj for _, _, obj in list(self.events)]

    def statuses(self) -> list[dict[str, Any]]:
        return [obj.get("status") or {} for obj in self.objects()]


def pool_status(k: Kubectl, name: str) -> dict[str, Any]:
    pool = pool_object(k, name)
    return (pool or {}).get("status") or {}


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def assignments(status: dict[str, Any]) -> dict[int, str]:
    return {a["replica"]: a["node"] for a in status.get("assignments") or []}


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod["status"].get("conditions") or []
    )


def replica(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"]["tessera.dev/replica"])


def pods_of(k: Kubectl, name: str) -> list[dict[str, Any]]:
    return k.pods(**{"tessera.dev/workload": name})


def uids(pods: list[dict[str, Any]]) -> dict[int, str]:
    return {replica(p): p["metadata"]["uid"] for p in pods}


def never_deleted(pod_log: Watch, kept: set[str]) -> None:
    """None of the pods `kept` (by uid) was ever deleted, or marked for deletion."""
    for _, kind, pod in list(pod_log.events):
        if pod["metadata"]["uid"] in kept:
            assert kind != "DELETED", f"pod {pod['metadata']['name']} was deleted"
            assert not pod["metadata"].get("deletionTimestamp"), (
                f"pod {pod['metadata']['name']} was marked for deletion"
            )


def holds(what: str, check: Callable[[], Any], seconds: float, every: float = 0.5) -> None:
    """`check` stays true for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), f"{what} stopped holding"
        time.sleep(every)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


# --- 1. a node lost under a service ------------------------------------------------------------


def test_a_replica_lost_with_its_node_runs_again_on_a_free_node_of_its_pool(
    installed: Any, operator: Operator
) -> None:
    """A node deleted under a service: within seconds its replica is placed again on the
    pool's free node (the pod on the deleted node force-deleted, the new node in
    status.assignments, a ReplicaLost Warning), while the other replicas' pods run on
    untouched and the workload stays on its pool, with nothing excluded."""
    pool = unique("loss")
    with namespace(installed, "loss") as k:
        make_pool(k, pool, nodes=4, devices=1)
        try:
            k.apply(workload("svc", replicas=3, count=1, restart="Always", pools=[pool]))
            k("wait", "--for=condition=Ready", "awl/svc", "-n", k.ns, "--timeout=60s")
            before = k.status("svc")
            placed = assignments(before)
            assert sorted(placed) == [0, 1, 2] and len(set(placed.values())) == 3, placed
            (free,) = {f"{pool}-{i}" for i in range(4)} - set(placed.values())
            old = uids(pods_of(k, "svc"))
            lost_node = placed[1]
            kept = {old[0], old[2]}
            with (
                CapacityWatch(k, allocatable=1) as capacity,
                Watch(installed, "awl", "svc", k.ns) as status_log,
                Watch(installed, "pods", ns=k.ns) as pod_log,
            ):
                start = time.monotonic()
                k("delete", "node", lost_node, "--wait=false")

                def back() -> dict[str, Any] | None:
                    return next(
                        (
                            p
                            for p in pods_of(k, "svc")
                            if replica(p) == 1
                            and p["metadata"]["uid"] != old[1]
                            and p["spec"].get("nodeName") == free
                            and ready(p)
                        ),
                        None,
                    )

                wait_for("replica 1 Ready on the free node", back, timeout=30, every=0.1)
                took = time.monotonic() - start
                final = wait_for(
                    "Running 3/3",
                    lambda: (
                        (s := k.status("svc")).get("phase") == "Running"
                        and s.get("readyReplicas") == 3
                        and s
                    ),
                    timeout=30,
                )
            print(f"\nnode {lost_node} deleted -> replica 1 Ready again on {free}: {took:.1f}s")
            capacity.assert_never_over()
            assert final["pool"] == pool and final["summary"]["ready"] == "3/3"
            assert assignments(final) == {**placed, 1: free}
            assert not final.get("excludedPools")
            said = (
                f"replica 1 lost: node {lost_node} was deleted: placed again on {pool} "
                f"(replica 1 to {free})"
            )
            written = [s for s in status_log.statuses() if s.get("message") == said]
            assert written, [s.get("message") for s in status_log.statuses()]
            assert all(assignments(s) == {**placed, 1: free} for s in written)
            assert all(s.get("pool") == pool for s in status_log.statuses())
            assert not any(s.get("excludedPools") for s in status_log.statuses())
            event = wait_for(
                "ReplicaLost event",
                lambda: next((e for e in k.events("svc") if e["reason"] == "ReplicaLost"), None),
            )
            assert event["type"] == "Warning" and event["message"] == said, event
            # The pod bound to the deleted node went at once (not after podgc's quarantine),
            # and the other two were never touched.
            assert any(
                kind == "DELETED" and pod["metadata"]["uid"] == old[1]
                for _, kind, pod in pod_log.events
            )
            never_deleted(pod_log, kept)
            now = uids(pods_of(k, "svc"))
            assert (now[0], now[2]) == (old[0], old[2]) and now[1] != old[1]
        finally:
            drop_pools(k, {pool: 4})


# --- 2. taints and cordons ---------------------------------------------------------------------


def test_tainted_and_cordoned_nodes_take_no_placements_unless_the_pool_tolerates_them(
    installed: Any, operator: Operator
) -> None:
    """A tainted node is reported unavailable (the pool Degraded, its devices not available)
    and never chosen: a second workload waits rather than land there. A cordoned node the
    same. Once the pool tolerates the taint and the node is uncordoned, the waiting workload
    is placed there and its pod runs (it carries the pool's toleration)."""
    pool = unique("taint")
    tainted, other = f"{pool}-0", f"{pool}-1"
    with namespace(installed, "taint") as k:
        make_pool(k, pool, nodes=2, devices=8)
        try:
            wait_for("pool counted", lambda: pool_status(k, pool).get("nodes") == 2)
            k("taint", "node", tainted, MAINTENANCE)
            reason = f"Tainted {MAINTENANCE}"
            status = wait_for(
                "the tainted node unavailable",
                lambda: (
                    (s := pool_status(k, pool)).get("unavailableNodes")
                    == [{"node": tainted, "reason": reason}]
                    and s
                ),
            )
            degraded = conditions(status)["Degraded"]
            assert degraded["status"] == "True" and degraded["reason"] == "NodesUnavailable"
            assert tainted in degraded["message"]
            assert status["summary"]["nodes"] == "1/2"
            assert conditions(status)["Ready"]["status"] == "True"
            with CapacityWatch(k, allocatable=8) as capacity:
                k.apply(workload("first", count=8, pools=[pool]))
                first = wait_for("first placed", lambda: (s := k.status("first")).get("pool") and s)
                assert assignments(first) == {0: other}
                wait_for(
                    "first's pod bound",
                    lambda: [p["spec"].get("nodeName") for p in pods_of(k, "first")] == [other],
                )
                wait_for(
                    "no device available",
                    lambda: pool_status(k, pool)["devices"]["available"] == 0,
                    timeout=30,
                )
                k.apply(workload("second", count=8, pools=[pool]))
                second = wait_for(
                    "second waiting",
                    lambda: (s := k.status("second")).get("candidates") and s,
                )
                assert second["phase"] == "Pending" and not second.get("pool"), second
                assert "room" in second["message"], second["message"]

                # Cordoned (and untainted): still no room for the second.
                k("cordon", tainted)
                k("taint", "node", tainted, "example.com/maintenance-")
                wait_for(
                    "the cordoned node unavailable",
                    lambda: (
                        pool_status(k, pool).get("unavailableNodes")
                        == [{"node": tainted, "reason": "Cordoned"}]
                    ),
                )
                holds("second waiting", lambda: not k.status("second").get("pool"), 5)
                assert pool_status(k, pool)["summary"]["nodes"] == "1/2"

                # Tainted again, tolerated by the pool, uncordoned: the second goes there.
                k("taint", "node", tainted, MAINTENANCE)
                toleration = {
                    "key": "example.com/maintenance",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
                patch = {"spec": {"tolerations": [toleration]}}
                k("patch", "acp", pool, "--type=merge", "-p", json.dumps(patch))
                holds("second waiting", lambda: not k.status("second").get("pool"), 3)
                k("uncordon", tainted)
                second = wait_for(
                    "second placed", lambda: (s := k.status("second")).get("pool") and s
                )
                assert assignments(second) == {0: tainted}
                pod = wait_for(
                    "second's pod Ready on the tainted node",
                    lambda: next(
                        (
                            p
                            for p in pods_of(k, "second")
                            if p["spec"].get("nodeName") == tainted and ready(p)
                        ),
                        None,
                    ),
                )
                assert toleration in pod["spec"]["tolerations"]
                status = wait_for(
                    "every node available",
                    lambda: (
                        not (s := pool_status(k, pool)).get("unavailableNodes")
                        and s["summary"]["nodes"] == "2/2"
                        and s
                    ),
                )
                assert conditions(status)["Degraded"]["status"] == "False"
            capacity.assert_never_over()
        finally:
            k("uncordon", tainted, check=False)
            drop_pools(k, {pool: 2})


# --- 3. a pool deleted with work on it ---------------------------------------------------------


def test_a_deleted_pool_waits_for_its_batch_work_and_its_services_to_move(
    installed: Any, operator: Operator
) -> None:
    """`kubectl delete` on a pool with a service and a batch job on it: the pool stays
    (finalizer), says what it waits for, deletes no pod at once; the service moves to the
    other pool one replica at a time (each old pod deleted only once its replacement is
    Ready), the job runs to its end where it is, then the pool goes. Nothing is withdrawn,
    and a pool of the same name can be created again."""
    old, new = unique("doomed"), unique("refuge")
    pools = [old, new]
    with namespace(installed, "deleted") as k:
        make_pool(k, old, nodes=2, devices=4, preference=50)
        make_pool(k, new, nodes=2, devices=4)
        try:
            wait_for(
                "the finalizer on the pool",
                lambda: FINALIZER in (pool_object(k, old) or {})["metadata"].get("finalizers", []),
            )
            k.apply(
                workload("svc", replicas=2, count=1, restart="Always", pools=pools),
                workload("job", count=1, pools=pools, annotations={RUNTIME: "20000"}),
            )
            k("wait", "--for=condition=Ready", "awl/svc", "awl/job", "-n", k.ns, "--timeout=60s")
            assert k.status("svc")["pool"] == old and k.status("job")["pool"] == old
            seed = {p["metadata"]["uid"]: p for p in k.pods()}
            (job_uid,) = uids(pods_of(k, "job")).values()
            with (
                CapacityWatch(k, allocatable=4) as capacity,
                Watch(installed, "acp", old) as pool_log,
                Watch(installed, "awl", ns=k.ns) as workload_log,
                Watch(installed, "pods", ns=k.ns) as pod_log,
            ):
                k("delete", "acp", old, "--wait=false")
                deleting = wait_for(
                    "Ready False, Deleting",
                    lambda: (
                        (p := pool_object(k, old))
                        and p["metadata"].get("deletionTimestamp")
                        and conditions(p.get("status") or {})["Ready"]["reason"] == "Deleting"
                        and p
                    ),
                )
                assert FINALIZER in deleting["metadata"]["finalizers"]
                assert conditions(deleting["status"])["Ready"]["status"] == "False"

                def moved() -> bool:
                    live = [
                        p for p in pods_of(k, "svc") if not p["metadata"].get("deletionTimestamp")
                    ]
                    return (
                        k.status("svc").get("pool") == new
                        and len(live) == 2
                        and all(p["metadata"]["labels"]["tessera.dev/pool"] == new for p in live)
                        and all(ready(p) for p in live)
                    )

                wait_for("the service on the other pool", moved, timeout=60)
                wait_for(
                    "job Succeeded", lambda: k.status("job").get("phase") == "Succeeded", timeout=60
                )
                wait_for("the pool gone", lambda: pool_object(k, old) is None, timeout=30)
            capacity.assert_never_over()

            waits = (
                f"deleting: waits for 1 batch workload(s) to finish ({k.ns}/job) and "
                f"1 service(s) to move away ({k.ns}/svc)"
            )
            said = [
                conditions(s).get("Ready", {}).get("message")
                for s in pool_log.statuses()
                if conditions(s).get("Ready", {}).get("reason") == "Deleting"
            ]
            assert waits in said, said
            held = [
                o
                for _, kind, o in pool_log.events
                if kind != "DELETED" and o["metadata"].get("deletionTimestamp")
            ]
            assert held and all(FINALIZER in o["metadata"]["finalizers"] for o in held)

            # The pods, event by event: the job's never touched; the service never below two
            # Ready, never more than one replica on its way, and an old replica deleted only
            # once its new one was Ready.
            never_deleted(pod_log, {job_uid})
            state = dict(seed)
            lowest, most = 2, 2
            for _, kind, pod in list(pod_log.events):
                if kind == "DELETED":
                    state.pop(pod["metadata"]["uid"], None)
                else:
                    state[pod["metadata"]["uid"]] = pod
                svc = [
                    p
                    for p in state.values()
                    if p["metadata"]["labels"]["tessera.dev/workload"] == "svc"
                ]
                live = [p for p in svc if not p["metadata"].get("deletionTimestamp")]
                lowest = min(lowest, sum(ready(p) for p in live))
                most = max(most, len(live))
                for r in (0, 1):
                    on_old = [
                        p
                        for p in live
                        if replica(p) == r and p["metadata"]["labels"]["tessera.dev/pool"] == old
                    ]
                    on_new = [
                        p
                        for p in live
                        if replica(p) == r
                        and ready(p)
                        and p["metadata"]["labels"]["tessera.dev/pool"] == new
                    ]
                    assert on_old or on_new, f"replica {r} had no pod: {kind} {pod['metadata']}"
            assert lowest >= 2 and most <= 3, (lowest, most)
            job = next(p for p in k.pods() if p["metadata"]["uid"] == job_uid)
            assert job["status"]["phase"] == "Succeeded"
            assert job["spec"]["nodeName"].startswith(f"{old}-")

            statuses = [*workload_log.statuses(), k.status("svc"), k.status("job")]
            assert not any(s.get("excludedPools") for s in statuses), statuses
            assert {"Migrating", "Migrated"} <= {e["reason"] for e in k.events("svc")}

            # The same name again: a new pool, Ready, protected like any.
            make_pool(k, old, nodes=2, devices=4, preference=50)
            again = wait_for(
                "the pool back",
                lambda: (
                    (p := pool_object(k, old))
                    and (p.get("status") or {}).get("nodes") == 2
                    and conditions(p["status"])["Ready"]["status"] == "True"
                    and FINALIZER in p["metadata"].get("finalizers", [])
                    and p
                ),
            )
            assert not again["metadata"].get("deletionTimestamp")
            assert k.status("svc")["pool"] == new and k.status("svc")["phase"] == "Running"
        finally:
            drop_pools(k, {old: 2, new: 2})


# --- 4. a pool deleted with nowhere to go ------------------------------------------------------


def test_a_deleted_pool_with_nowhere_else_to_go_keeps_its_service_running(
    installed: Any, operator: Operator
) -> None:
    """A pool deleted under a service no other pool can take: the pool waits (Deleting) and
    the service runs on, saying the pool is draining and no other pool has room. With the
    finalizer taken off by hand the pool goes and the pods still run on, untouched; a pool
    of the same name created again changes nothing for them."""
    pool = unique("lone")
    with namespace(installed, "lone") as k:
        make_pool(k, pool, nodes=2, devices=2)
        try:
            k.apply(workload("svc", replicas=2, count=1, restart="Always", pools=[pool]))
            k("wait", "--for=condition=Ready", "awl/svc", "-n", k.ns, "--timeout=60s")
            wait_for(
                "the finalizer on the pool",
                lambda: FINALIZER in (pool_object(k, pool) or {})["metadata"].get("finalizers", []),
            )
            old = uids(pods_of(k, "svc"))

            def untouched() -> bool:
                pods = pods_of(k, "svc")
                status = k.status("svc")
                return (
                    uids(pods) == old
                    and not any(p["metadata"].get("deletionTimestamp") for p in pods)
                    and status.get("phase") == "Running"
                    and status.get("pool") == pool
                )

            with (
                CapacityWatch(k, allocatable=2) as capacity,
                Watch(installed, "pods", ns=k.ns) as pod_log,
            ):
                k("delete", "acp", pool, "--wait=false")
                waits = f"deleting: waits for 1 service(s) to move away ({k.ns}/svc)"
                wait_for(
                    "Ready False, Deleting",
                    lambda: (
                        (c := conditions(pool_status(k, pool)).get("Ready"))
                        and (c["status"], c["reason"], c["message"]) == ("False", "Deleting", waits)
                    ),
                )
                status = wait_for(
                    "the service says why it stays",
                    lambda: "draining" in (s := k.status("svc")).get("message", "") and s,
                )
                assert f"pool {pool} is draining; no other pool has room yet" in status["message"]
                assert status["phase"] == "Running" and status["pool"] == pool
                holds("the service untouched", untouched, 3)
                assert pool_object(k, pool) is not None, "the pool went with a service on it"

                k("patch", "acp", pool, "--type=merge", "-p", NO_FINALIZERS)
                wait_for("the pool gone", lambda: pool_object(k, pool) is None)
                holds("the service untouched", untouched, 6)
                wait_for(
                    "the message no longer says it waits to leave a pool that is gone",
                    lambda: "is draining" not in k.status("svc").get("message", ""),
                )

                make_pool(k, pool, nodes=2, devices=2)
                wait_for(
                    "the pool back",
                    lambda: (
                        (s := pool_status(k, pool)).get("nodes") == 2
                        and conditions(s)["Ready"]["status"] == "True"
                    ),
                )
                holds("the service untouched", untouched, 6)
                assert FINALIZER in (pool_object(k, pool) or {})["metadata"]["finalizers"]
            capacity.assert_never_over()
            never_deleted(pod_log, set(old.values()))
            assert k.status("svc")["summary"]["ready"] == "2/2"
        finally:
            drop_pools(k, {pool: 2})


# --- 5. overlapping pools ----------------------------------------------------------------------


def test_a_pool_created_over_another_pools_nodes_takes_none_of_them(
    installed: Any, operator: Operator
) -> None:
    """A second pool whose selector takes in a running pool's nodes, and which sorts first by
    name: the running pool keeps its nodes, the new one counts none and reports the overlap;
    deleting it disturbs nothing."""
    tag = uuid.uuid4().hex[:5]
    first, second = f"overlap-b-{tag}", f"overlap-a-{tag}"  # the second sorts first
    with namespace(installed, "overlap") as k:
        make_pool(k, first, nodes=2, devices=2)
        try:
            k.apply(workload("svc", replicas=2, count=1, restart="Always", pools=[first]))
            k("wait", "--for=condition=Ready", "awl/svc", "-n", k.ns, "--timeout=60s")
            old = uids(pods_of(k, "svc"))
            nodes = [f"{first}-0", f"{first}-1"]

            def first_unchanged() -> bool:
                s = pool_status(k, first)
                return (
                    s.get("nodes") == 2
                    and s.get("nodeNames") == nodes
                    and conditions(s)["Ready"]["status"] == "True"
                    and conditions(s)["NodesOverlap"]["status"] == "False"
                )

            assert wait_for("the first pool's status", first_unchanged)
            with (
                CapacityWatch(k, allocatable=2) as capacity,
                Watch(installed, "pods", ns=k.ns) as pod_log,
            ):
                selector = {
                    "matchExpressions": [{"key": POOL_KEY, "operator": "In", "values": [first]}]
                }
                k.apply(pool_manifest(second, selector))
                status = wait_for(
                    "the overlap reported",
                    lambda: (
                        (c := conditions(s := pool_status(k, second)).get("NodesOverlap"))
                        and c["status"] == "True"
                        and s
                    ),
                )
                overlap = conditions(status)["NodesOverlap"]
                assert status["nodes"] == 0 and not status.get("nodeNames")
                assert overlap["reason"] == "SelectorsOverlap"
                for node in nodes:
                    assert f"{node} ({first})" in overlap["message"], overlap["message"]
                holds("the first pool keeps its nodes", first_unchanged, 5)

                k("delete", "acp", second, "--wait=false")
                wait_for("the second pool gone", lambda: pool_object(k, second) is None)
                holds("the first pool keeps its nodes", first_unchanged, 3)
            capacity.assert_never_over()
            never_deleted(pod_log, set(old.values()))
            assert uids(pods_of(k, "svc")) == old
            final = k.status("svc")
            assert final["phase"] == "Running" and final["pool"] == first
        finally:
            drop_pools(k, {first: 2, second: 0})


# --- 6. exclusions expire ----------------------------------------------------------------------


def test_a_pool_withdrawn_from_is_tried_again_once_it_changes(
    installed: Any, operator: Operator
) -> None:
    """A pool whose nodes cannot run the pods for a reason Tessera does not model (too little
    cpu): after fallbackAfterSeconds the workload is withdrawn, the exclusion recorded with
    when, until when and the pool as it was; it waits meanwhile, and once the pool's spec
    changes the exclusion lifts and the workload is placed there again."""
    pool = unique("excl")
    group = {
        "name": pool,
        "count": 1,
        "labels": {POOL_KEY: pool},
        "capacity": {RESOURCE: "2", "cpu": "1", "memory": "8Gi", "pods": "110"},
    }
    main = {
        "name": "main",
        "image": "registry.example/app:1",
        "resources": {"requests": {"cpu": "2"}},
    }
    manifest = workload("big", count=1, pools=[pool], pod_spec={"containers": [main]})
    manifest["spec"]["placement"] = {"fallbackAfterSeconds": 5}
    with namespace(installed, "excl") as k:
        k.apply(
            *fleet.node_manifests([group]),
            pool_manifest(pool, {"matchLabels": {POOL_KEY: pool}}, preference=50),
        )
        try:
            wait_for(
                "pool counted",
                lambda: pool_status(k, pool).get("devices", {}).get("available") == 2,
            )
            generation = (pool_object(k, pool) or {})["metadata"]["generation"]
            k.apply(manifest)
            wait_for("placed", lambda: k.status("big").get("pool") == pool)
            with (
                CapacityWatch(k, allocatable=2) as capacity,
                Watch(installed, "awl", "big", k.ns) as status_log,
            ):
                status = wait_for(
                    "withdrawn",
                    lambda: (s := k.status("big")).get("excludedPools") and s,
                    timeout=40,
                )
                (excluded,) = status["excludedPools"]
                assert excluded["pool"] == pool
                assert "unschedulable" in excluded["reason"], excluded
                since = datetime.fromisoformat(excluded["since"])
                retry = datetime.fromisoformat(excluded["retryAt"])
                assert (retry - since).total_seconds() == 60, excluded  # at least a minute
                assert excluded["withdrawals"] == 1
                assert excluded["seen"] == {"generation": generation, "nodes": 1, "available": 2}

                # The next cycle plans it again, without the pool: it waits, and says why.
                def ruled_out() -> dict[str, Any] | None:
                    s = k.status("big")
                    reasons = [r for c in s.get("candidates") or [] for r in c["reasons"]]
                    if s.get("pool") or not any(r.startswith("withdrawn from at") for r in reasons):
                        return None
                    return s

                waiting = wait_for("waiting, the pool ruled out", ruled_out)
                assert waiting["phase"] == "Pending"
                (candidate,) = waiting["candidates"]
                assert candidate["pool"] == pool and not candidate["feasible"]
                assert f"tried again at {excluded['retryAt']}" in candidate["reasons"][0]
                # Its pod gone, the pool has as many free devices as it was seen with: that
                # is no change, the exclusion holds.
                holds("still waiting", lambda: not k.status("big").get("pool"), 6)

                k("patch", "acp", pool, "--type=merge", "-p", '{"spec":{"preference":60}}')
                again = wait_for(
                    "placed on the pool again",
                    lambda: (s := k.status("big")).get("pool") == pool and s,
                    timeout=20,
                )
                # Not in force any more: an entry kept (to count withdrawals in a row) has no
                # retryAt.
                kept = [e for e in again.get("excludedPools") or [] if e["pool"] == pool]
                assert not any(e.get("retryAt") for e in kept), kept
                feasible = {c["pool"]: c["feasible"] for c in again.get("candidates") or []}
                assert feasible.get(pool) is True, again.get("candidates")
            capacity.assert_never_over()
            placements = [s.get("placedAt") for s in status_log.statuses() if s.get("pool")]
            assert len(set(placements)) >= 2, placements
        finally:
            drop_pools(k, {pool: 1})


# --- 7. a namespace being deleted --------------------------------------------------------------


def test_a_workload_in_a_namespace_being_deleted_gets_no_placement(
    installed: Any, operator: Operator
) -> None:
    """A workload waiting for room in a namespace being deleted: when room comes, it goes to
    a workload of a live namespace that arrived later; nothing is created in the namespace
    being deleted, and the operator's log shows no refusal for it. (An admission policy keeps
    the namespace controller from deleting the Workload, so the namespace stays Terminating
    with the Workload in it, not deleting: as it is while the namespace controller works.)"""
    pool = unique("nsdel")
    doomed = unique("doomed")
    policy = f"hold-{doomed}"
    with namespace(installed, "live") as k:
        make_pool(k, pool, nodes=1, devices=1)
        d = Kubectl(installed, doomed)
        k("create", "namespace", doomed)
        try:
            k.apply(workload("blocker", count=1, restart="Always", pools=[pool]))
            k("wait", "--for=condition=Ready", "awl/blocker", "-n", k.ns, "--timeout=60s")
            d.apply(workload("late", count=1, pools=[pool]))
            wait_for("late waiting", lambda: d.status("late").get("candidates"))
            hold_workloads(k, policy, doomed)
            with CapacityWatch(k, allocatable=1) as capacity:
                k("delete", "namespace", doomed, "--wait=false")
                wait_for(
                    "the namespace Terminating",
                    lambda: (
                        d.get("namespace", doomed, cluster_scoped=True)["status"]["phase"]
                        == "Terminating"
                    ),
                )
                k.apply(workload("control", count=1, pools=[pool]))
                wait_for("control waiting", lambda: k.status("control").get("candidates"))
                late = d.awl("late")
                assert not late["metadata"].get("deletionTimestamp"), "the policy did not hold"
                # Its pod too: the garbage collector of a fresh cluster may not follow
                # Workloads yet.
                k("delete", "awl", "blocker", "-n", k.ns)
                k("delete", "pods", "-n", k.ns, "-l", "tessera.dev/workload=blocker")
                wait_for(
                    "the room taken",
                    lambda: k.status("control").get("pool") or d.status("late").get("pool"),
                    timeout=30,
                )
                late_status = d.status("late")
                assert not late_status.get("pool"), (
                    f"placed in a namespace being deleted: {late_status.get('message')}"
                )
                assert k.status("control")["pool"] == pool
                holds(
                    "nothing in the namespace being deleted",
                    lambda: not d.pods() and not d.status("late").get("pool"),
                    10,
                )
            capacity.assert_never_over()
            assert not d.awl("late")["metadata"].get("deletionTimestamp")
            refused = [
                line
                for line in operator.log().splitlines()
                if doomed in line
                and any(w in line.lower() for w in ("403", "forbidden", "being terminated"))
            ]
            assert not refused, "\n".join(refused[:10])
        finally:
            k(
                "delete",
                "validatingadmissionpolicybinding,validatingadmissionpolicy",
                policy,
                "--ignore-not-found",
                check=False,
            )
            wait_for(  # once the API server has dropped the policy
                "the namespace's workloads deleted",
                lambda: (
                    k(
                        "delete", "awl", "--all", "-n", doomed, "--wait=false", check=False
                    ).returncode
                    == 0
                ),
            )
            k("delete", "namespace", doomed, "--wait=false", check=False)
            drop_pools(k, {pool: 1})


def hold_workloads(k: Kubectl, name: str, ns: str) -> None:
    """An admission policy refusing to delete the Workloads of namespace `ns` (as a webhook
    down, or a slow namespace controller, would leave them), once the API server applies it."""
    rules = [
        {
            "apiGroups": ["tessera.dev"],
            "apiVersions": ["*"],
            "operations": ["DELETE"],
            "resources": ["workloads"],
        }
    ]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "validations": [{"expression": "false", "message": "held by the test"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
            },
        },
    }
    k(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, binding]}),
    )
    wait_for(
        "deletes refused",
        lambda: (
            "held by the test"
            in k("delete", "awl", "--all", "-n", ns, "--dry-run=server", check=False).stderr
        ),
    )


# --- 8. fallback spares a service's healthy replicas -------------------------------------------


def test_fallback_takes_only_the_pods_that_cannot_bind_from_a_running_service(
    installed: Any, operator: Operator
) -> None:
    """A service with one replica Running and one the scheduler cannot bind (its node has too
    little cpu, which Tessera does not model): past fallbackAfterSeconds only the stuck pod
    goes (a ReplicaUnschedulable Warning) and its replica is placed again on the pool; the
    Running replica is never deleted, the workload never leaves its pool, nothing is
    excluded, and its status says which replica is lost and why."""
    pool = unique("spare")
    groups = [
        {
            "name": f"{pool}-{kind}",
            "count": 1,
            "labels": {POOL_KEY: pool},
            "capacity": {RESOURCE: "1", "cpu": cpu, "memory": "8Gi", "pods": "110"},
        }
        for kind, cpu in (("low", "1"), ("ok", "64"))
    ]
    main = {
        "name": "main",
        "image": "registry.example/app:1",
        "resources": {"requests": {"cpu": "2"}},
    }
    manifest = workload(
        "svc", replicas=2, count=1, restart="Always", pools=[pool], pod_spec={"containers": [main]}
    )
    manifest["spec"]["placement"] = {"fallbackAfterSeconds": 10}
    with namespace(installed, "spare") as k:
        k.apply(
            *fleet.node_manifests(groups), pool_manifest(pool, {"matchLabels": {POOL_KEY: pool}})
        )
        try:
            wait_for("pool counted", lambda: pool_status(k, pool).get("nodes") == 2)
            k.apply(manifest)
            wait_for("its pods", lambda: len(pods_of(k, "svc")) == 2)
            with (  # well before the fallback, 10 s after the stuck pod's first attempt
                CapacityWatch(k, allocatable=1) as capacity,
                Watch(installed, "awl", "svc", k.ns) as status_log,
                Watch(installed, "pods", None, k.ns) as pod_log,
            ):
                running = wait_for(
                    "one replica Ready",
                    lambda: [p for p in pods_of(k, "svc") if ready(p)],
                    timeout=60,
                )
                (healthy,) = running
                event = wait_for(
                    "ReplicaUnschedulable",
                    lambda: [
                        e for e in k.events("svc") if e.get("reason") == "ReplicaUnschedulable"
                    ],
                    timeout=60,
                )[0]
                assert event["type"] == "Warning" and "unschedulable" in event["message"]
                status = wait_for(
                    "the lost replica in the status",
                    lambda: "lost:" in (s := k.status("svc")).get("message", "") and s,
                    timeout=30,
                )
                # Placed: a service is Running once every replica has run.
                assert status["phase"] == "Placed" and status["pool"] == pool
                assert conditions(status)["Ready"]["reason"] == "ReplicasLost"
                uid = healthy["metadata"]["uid"]

                def runs_on() -> bool:
                    return any(p["metadata"]["uid"] == uid and ready(p) for p in pods_of(k, "svc"))

                holds("the healthy replica runs on", runs_on, 3)
            capacity.assert_never_over()
            never_deleted(pod_log, {healthy["metadata"]["uid"]})
            seen = status_log.statuses()
            assert all(s.get("pool") == pool for s in seen if s.get("phase")), "never withdrawn"
            assert not any(s.get("excludedPools") for s in seen), "nothing excluded"
        finally:
            drop_pools(k, {pool: 0})
            k("delete", "node", f"{pool}-low-0", f"{pool}-ok-0", "--wait=false", check=False)
