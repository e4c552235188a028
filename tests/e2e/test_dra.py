"""Pools of DRA-managed devices beside device-plugin pools, on the real control plane: the
fleet's DRA nodes (h200-dra, mi325x-dra) publish ResourceSlices as their drivers would, the
example pools count them, a Workload placed on a DRA pool gets a claim the real scheduler
allocates on the pinned node, a mixed burst never over-allocates a device (claims counted
beside pods' requests), and draining, fallback and an operator restart behave as on any
pool."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from operator_harness import (
    REPO,
    Kubectl,
    Operator,
    Sampler,
    clear_workloads,
    is_ready,
    namespace,
    set_draining,
    wait_for,
    workload,
)

DRA_POOLS = {"h200-dra": "gpu.nvidia.com", "mi325x-dra": "gpu.amd.com"}
PLUGIN_POOLS = ["a100", "h100", "mi300x"]  # the fleet's NVIDIA and AMD device-plugin pools
PER_NODE = 8  # every node of the simulated fleet has 8 devices


@pytest.fixture
def ns(operator: Operator, installed: Any) -> Iterator[Kubectl]:
    with namespace(installed, "dra") as k:
        yield k
        clear_workloads(k)


def pool_status(k: Kubectl, name: str) -> dict[str, Any]:
    return k.get("acp", name, cluster_scoped=True).get("status") or {}


def claims(k: Kubectl, namespace: str | None = None) -> list[dict[str, Any]]:
    where = ["-n", namespace] if namespace else ["-A"]
    out = k("get", "resourceclaims", *where, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def allocated(claim: dict[str, Any]) -> list[dict[str, Any]]:
    status = claim.get("status") or {}
    results: list[dict[str, Any]] = ((status.get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return results


def test_dra_pools_count_the_slices_devices(ns: Kubectl) -> None:
    for name, driver in DRA_POOLS.items():
        status = wait_for(
            f"{name} counted",
            lambda name=name: (
                (s := pool_status(ns, name)).get("devices", {}).get("allocatable") and s
            ),
            timeout=30,
        )
        assert status["devices"]["allocatable"] == 2 * PER_NODE, name
        assert status["accelerator"]["resourceName"] == f"{driver}/devices"
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", ready


def test_a_workload_on_a_dra_pool_gets_its_devices_from_the_scheduler(ns: Kubectl) -> None:
    before = pool_status(ns, "h200-dra")["devices"]["allocated"]
    ns.apply(workload("on-dra", count=4, pools=["h200-dra"], minMemoryGiB=100))
    wait_for("placed on h200-dra", lambda: ns.status("on-dra").get("pool") == "h200-dra")
    (pod,) = wait_for(
        "its pod running",
        lambda: [p for p in ns.pods() if is_ready(p)] or None,
        timeout=60,
    )
    node = pod["spec"]["nodeName"]
    assert node.startswith("h200-dra-")
    main = pod["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in (main.get("requests") or {})  # devices by claim only
    assert main["claims"] == [{"name": "tessera-devices"}]
    (claimed,) = pod["spec"]["resourceClaims"]
    template = ns.get("resourceclaimtemplates", claimed["resourceClaimTemplateName"])
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == "gpu.nvidia.com" and request["count"] == 4
    expression = request["selectors"][0]["cel"]["expression"]
    assert 'productName == "NVIDIA H200"' in expression and 'quantity("100Gi")' in expression
    (claim,) = claims(ns, ns.ns)
    results = allocated(claim)
    assert len(results) == 4 and {r["pool"] for r in results} == {node}
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
    counted = wait_for(
        "the pool counts the claim",
        lambda: pool_status(ns, "h200-dra")["devices"]["allocated"] == before + 4,
        timeout=30,
    )
    assert counted
    ns("delete", "awl", "on-dra", "-n", ns.ns)
    wait_for("the claim gone", lambda: not claims(ns, ns.ns), timeout=60)
    wait_for(
        "the devices back",
        lambda: pool_status(ns, "h200-dra")["devices"]["allocated"] == before,
        timeout=30,
    )


def test_a_dra_pool_says_why_in_devices_not_claims(ns: Kubectl) -> None:
    ns.apply(
        workload("too-big", replicas=3, count=8, pools=["h200-dra"]),
        workload("too-much-memory", count=1, pools=list(DRA_POOLS), minMemoryGiB=300),
    )
    message = wait_for("it says why", lambda: ns.status("too-big").get("message"), timeout=30)
    assert "gpu.nvidia.com/devices" in message, message
    assert "cannot allocate" not in message
    # More memory than any DRA device has: each pool named with the memory it lacks.
    status = wait_for(
        "the memory reason",
        lambda: (s := ns.status("too-much-memory")).get("message") and s,
        timeout=30,
    )
    assert not status.get("pool")
    reasons = {c["pool"]: " ".join(c.get("reasons", [])) for c in status["candidates"]}
    assert "141 GiB per device < 300 GiB required" in reasons["h200-dra"], reasons
    assert "256 GiB per device < 300 GiB required" in reasons["mi325x-dra"], reasons
    assert "h200-dra" in status["message"] and "300 GiB" in status["message"], status


class DeviceWatch(Sampler):
    """Devices in use per node at every sample: device-plugin requests of pods that are
    bound, plus devices allocated in claims (by their pool, one per node here)."""

    every = 0.5

    def __init__(self, k: Kubectl) -> None:
        super().__init__()
        self.k = k
        self.worst: dict[str, int] = defaultdict(int)

    def sample(self) -> None:
        per_node: dict[str, int] = defaultdict(int)
        pods = json.loads(self.k("get", "pods", "-A", "-o", "json").stdout)["items"]
        for pod in pods:
            node = pod["spec"].get("nodeName")
            if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            for container in pod["spec"]["containers"]:
                for name, value in (
                    (container.get("resources") or {}).get("requests") or {}
                ).items():
                    if "/" in name and not name.startswith(("cpu", "memory")):
                        per_node[node] += int(value)
        for claim in claims(self.k):
            for result in allocated(claim):
                per_node[result["pool"]] += 1
        for node, used in per_node.items():
            self.worst[node] = max(self.worst[node], used)


def test_a_mixed_burst_never_over_allocates_a_device(ns: Kubectl) -> None:
    """Device-plugin and DRA pools in one fleet, one burst of workloads: every node holds at
    most its devices at every sampled moment, claims counted beside requests."""
    # The device-plugin workloads name their pools: by vendor alone a DRA pool may be their
    # best, and a fleet that earlier tests left busy tips them onto it.
    burst = [
        *(workload(f"plugin-{i}", count=4, pools=PLUGIN_POOLS) for i in range(8)),
        *(workload(f"dra-{i}", count=4, pools=list(DRA_POOLS)) for i in range(10)),
    ]
    with DeviceWatch(ns) as watch:
        ns.apply(*burst)
        wait_for(
            "the DRA pools full",
            lambda: sum(1 for c in claims(ns, ns.ns) if allocated(c)) == 8,
            timeout=90,
        )
        wait_for(
            "every device-plugin workload placed",
            lambda: all(ns.status(f"plugin-{i}").get("pool") for i in range(8)),
            timeout=60,
        )
        wait_for("a few samples of the full fleet", lambda: watch.samples > 8, timeout=30)
    over = {n: v for n, v in watch.worst.items() if v > PER_NODE}
    assert not over, f"nodes over their devices: {over}"

    # 4 nodes of 8 take 8 gangs of 4 (in a burst a placement's status is written once its
    # pods run: wait for them).
    def unplaced() -> list[str]:
        return [f"dra-{i}" for i in range(10) if not ns.status(f"dra-{i}").get("pool")]

    try:
        waiting = wait_for("two left waiting", lambda: len(w := unplaced()) == 2 and w, timeout=60)
    except AssertionError as timed_out:
        statuses = {f"dra-{i}": ns.status(f"dra-{i}") for i in range(10)}
        raise AssertionError(f"{timed_out}; unplaced {unplaced()}; statuses {statuses}") from None
    for name in waiting:
        assert "no feasible pool has room" in ns.status(name)["message"]


def dra_pods_claims(k: Kubectl, name: str) -> list[list[dict[str, Any]]]:
    """The devices allocated to each claim of the workload's pods (by the pod's claim)."""
    pods = {p["metadata"]["name"] for p in k.pods(**{"tessera.dev/workload": name})}
    out = []
    for claim in claims(k, k.ns):
        owners = {o["name"] for o in claim["metadata"].get("ownerReferences") or []}
        if owners & pods:
            out.append(allocated(claim))
    return out


def test_draining_and_fallback_on_a_dra_pool_release_its_devices(ns: Kubectl) -> None:
    """As on any pool: a service moves off a draining DRA pool one pod at a time (its claim
    goes with its old pod), and a gang the scheduler cannot bind there is withdrawn, its
    claims with its pods."""
    # The earlier tests' claims gone with their pods: the pool empty again.
    empty = {"allocated": 0, "available": 2 * PER_NODE}
    wait_for(
        "h200-dra empty",
        lambda: {k: pool_status(ns, "h200-dra").get("devices", {}).get(k) for k in empty} == empty,
    )
    before = 0
    service_on_dra(ns, "svc", ("h200-dra", "H200-SXM-141GB"), ("h100", "H100-SXM5-80GB"))
    try:
        set_draining(ns, "h200-dra", True)
        wait_for("svc moved", lambda: ns.status("svc").get("pool") == "h100", timeout=90)
        wait_for("svc Ready on h100", lambda: running_on(ns, "svc", "h100"), timeout=90)
        wait_for("its claim released", lambda: not dra_pods_claims(ns, "svc"), timeout=60)
        wait_for(
            "h200-dra's devices back",
            lambda: pool_status(ns, "h200-dra")["devices"]["allocated"] == before,
            timeout=30,
        )
    finally:
        set_draining(ns, "h200-dra", False)
    stuck = workload(
        "stuck", count=4, pools=["h200-dra"],
        pod_spec={"nodeSelector": {"topology.kubernetes.io/zone": "nowhere"}},
    )  # fmt: skip
    stuck["spec"]["placement"] = {"fallbackAfterSeconds": 2}
    ns.apply(stuck)
    status = wait_for(
        "withdrawn from h200-dra",
        lambda: (s := ns.status("stuck")).get("excludedPools") and s,
        timeout=60,
    )
    assert status["excludedPools"][0]["pool"] == "h200-dra"
    assert "unschedulable" in status["excludedPools"][0]["reason"]
    wait_for("its claims gone", lambda: not dra_pods_claims(ns, "stuck"), timeout=60)


def service_on_dra(k: Kubectl, name: str, dra: tuple[str, str], other: tuple[str, str]) -> None:
    """A service of one pod of 4 devices that may run on a DRA pool or a device-plugin pool
    (each given as pool and model), measured faster on the DRA pool: placed there, its
    claim allocated."""
    faster = {dra[1]: 2.0, other[1]: 1.0}
    k.apply(
        workload(
            name,
            count=4,
            restart="Always",
            objective="performance",
            pools=[dra[0], other[0]],
            throughput=faster,
        )
    )
    placed = wait_for(f"{name} placed", lambda: (s := k.status(name)).get("pool") and s, 60)
    assert placed["pool"] == dra[0], placed["candidates"]
    wait_for(f"{name}'s claim allocated", lambda: [len(c) for c in dra_pods_claims(k, name)] == [4])


def running_on(k: Kubectl, name: str, pool: str) -> bool:
    pods = k.pods(**{"tessera.dev/workload": name})
    return bool(pods) and all(
        is_ready(p) and p["metadata"]["labels"]["tessera.dev/pool"] == pool for p in pods
    )


def test_a_restarted_operator_keeps_a_dra_placement(ns: Kubectl, operator: Operator) -> None:
    ns.apply(workload("kept", count=2, pools=["mi325x-dra"]))
    wait_for("kept running", lambda: running_on(ns, "kept", "mi325x-dra"), timeout=60)
    (devices,) = wait_for("its claim", lambda: dra_pods_claims(ns, "kept"), timeout=30)
    uids = {p["metadata"]["uid"] for p in ns.pods()}
    operator.kill()
    operator.start()
    counted = wait_for(
        "the pool counts it again",
        lambda: pool_status(ns, "mi325x-dra")["devices"]["allocated"] >= 2,
        timeout=30,
    )
    assert counted
    assert {p["metadata"]["uid"] for p in ns.pods()} == uids  # nothing recreated
    assert dra_pods_claims(ns, "kept") == [devices]  # nor reallocated
    assert ns.status("kept")["pool"] == "mi325x-dra"


def test_a_deleted_dra_pool_moves_its_service_and_releases_its_devices(ns: Kubectl) -> None:
    """`kubectl delete` on a DRA pool with a service on it, as on any pool: the service moves
    to the other pool, its old pod's claim goes with the pod, then the pool goes. The
    example pool is created again for the tests after it."""
    service_on_dra(ns, "amd-svc", ("mi325x-dra", "MI325X"), ("mi300x", "MI300X"))
    example = str(REPO / "examples" / "pools" / "mi325x-dra.yaml")
    try:
        ns("delete", "acp", "mi325x-dra", "--wait=false")
        wait_for("moved", lambda: running_on(ns, "amd-svc", "mi300x"), timeout=90)
        wait_for("its claim released", lambda: not dra_pods_claims(ns, "amd-svc"), timeout=60)
        wait_for(
            "the pool gone",
            lambda: "mi325x-dra" not in ns("get", "acp", "-o", "name").stdout,
            timeout=60,
        )
    finally:
        ns("apply", "--server-side", "--force-conflicts", "-f", example)
    counted = wait_for(
        "the pool back, its devices counted and free",
        lambda: (
            (d := pool_status(ns, "mi325x-dra").get("devices") or {}).get("available")
            == 2 * PER_NODE
            and d
        ),
        timeout=60,
    )
    assert counted["allocated"] == 0
