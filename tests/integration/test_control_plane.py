"""The local control plane behaves like a real cluster: scheduler, garbage collector, kwok fleet.
Everything here runs against real binaries; nothing is faked."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.utils import parse_quantity

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
import fleet as fleet_mod


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


@pytest.fixture
def namespace(cluster: Any) -> Iterator[str]:
    core = client.CoreV1Api(cluster.api)
    name = f"cp-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        "default service account",
        lambda: any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items
        ),
    )
    yield name
    core.delete_namespace(name)


def gpu_pod(name: str, gpus: int, product: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/cuda:12.4",
                "resources": {
                    "requests": {"nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if product:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": [product],
                                }
                            ]
                        }
                    ]
                }
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_version_is_the_pinned_release(cluster: Any) -> None:
    version = client.VersionApi(cluster.api).get_code()
    pinned = (Path(__file__).resolve().parents[2] / "hack" / "versions.env").read_text()
    assert f"KUBERNETES_VERSION={version.git_version}" in pinned
    assert version.major == "1" and version.minor == version.git_version.split(".")[1]


def test_every_fleet_node_reports_its_capacity_and_labels(cluster: Any) -> None:
    core = client.CoreV1Api(cluster.api)
    expected = {n["metadata"]["name"]: n for n in fleet_mod.node_manifests(fleet_mod.load_groups())}
    nodes = {n.metadata.name: n for n in core.list_node(label_selector=fleet_mod.FLEET_LABEL).items}
    assert set(expected) <= set(nodes)
    for name, want in expected.items():
        node = nodes[name]
        for key, value in want["metadata"]["labels"].items():
            assert node.metadata.labels.get(key) == value, (name, key)
        for resource, quantity in want["status"]["capacity"].items():
            want_quantity = parse_quantity(quantity)
            assert parse_quantity(node.status.capacity[resource]) == want_quantity, (name, resource)
            assert parse_quantity(node.status.allocatable[resource]) == want_quantity, (
                name,
                resource,
            )
        taints = {(t.key, t.effect) for t in node.spec.taints or []}
        assert {(t["key"], t["effect"]) for t in want["spec"]["taints"]} <= taints
        ready = {c.type: c.status for c in node.status.conditions}
        assert ready.get("Ready") == "True", name
    vendors = {r for n in expected.values() for r in n["status"]["capacity"] if "/" in r}
    assert {
        "nvidia.com/gpu",
        "amd.com/gpu",
        "habana.ai/gaudi",
        "google.com/tpu",
        "aws.amazon.com/neuron",
    } <= vendors


def test_scheduler_binds_gpu_pod_to_h100_node_and_kwok_runs_it(
    cluster: Any, namespace: str
) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_pod(namespace, gpu_pod("train", 2, "NVIDIA-H100-80GB-HBM3"))
    pod = wait_for(
        "pod Running",
        lambda: (p := core.read_namespaced_pod("train", namespace)).status.phase == "Running" and p,
    )
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_pod_larger_than_any_node_stays_pending_unschedulable(cluster: Any, namespace: str) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_pod(namespace, gpu_pod("huge", 64))

    def unschedulable() -> Any:
        pod = core.read_namespaced_pod("huge", namespace)
        for cond in pod.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return cond
        return None

    cond = wait_for("PodScheduled=False", unschedulable)
    assert cond.reason == "Unschedulable"
    assert "nvidia.com/gpu" in cond.message
    assert core.read_namespaced_pod("huge", namespace).status.phase == "Pending"


def test_garbage_collector_deletes_pods_of_a_deleted_owner(cluster: Any, namespace: str) -> None:
    core = client.CoreV1Api(cluster.api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    for i in range(2):
        pod = gpu_pod(f"child-{i}", 1)
        pod["metadata"]["ownerReferences"] = [ref]
        core.create_namespaced_pod(namespace, pod)
    assert len(core.list_namespaced_pod(namespace).items) == 2
    core.delete_namespaced_config_map("owner", namespace)
    wait_for(
        "owned pods deleted", lambda: not core.list_namespaced_pod(namespace).items, timeout=90
    )


def test_a_resource_quota_on_devices_is_enforced(cluster: Any, namespace: str) -> None:
    # The resourcequota controller fills in what the quota uses, so admission can decide:
    # without it a namespace with a ResourceQuota refuses every pod.
    core = client.CoreV1Api(cluster.api)
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    core.create_namespaced_resource_quota(namespace, quota)

    def used() -> str | None:
        status = core.read_namespaced_resource_quota("gpus", namespace).status
        return ((status and status.used) or {}).get("requests.nvidia.com/gpu")

    wait_for("the quota's usage computed", lambda: used() == "0")
    core.create_namespaced_pod(namespace, gpu_pod("fits", 8))
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(namespace, gpu_pod("over", 1))
    assert refused.value.status == 403 and "exceeded quota: gpus" in str(refused.value.body)
