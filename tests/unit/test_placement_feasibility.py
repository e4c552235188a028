"""Feasibility: every reason that rules a pool out, in the words a user reads."""

from __future__ import annotations

import pytest
from builders import pool, workload

from tessera.placement import NodeFit, PendingWorkload, PoolState, PoolView, satisfies
from tessera.placement.feasibility import capacity_reason, static_reasons
from tessera.placement.snapshot import parse_version

NS = {"ml": {"team": "ml"}, "research": {"team": "research"}}


def why_not(w: PendingWorkload, p: PoolState) -> list[str]:
    """Every reason that rules the pool out for the workload, whatever is free: what the
    planning cycle lists for a pool it rules out."""
    return static_reasons(w, PoolView.of(p), NS.get(w.namespace, {}))


def reason_now(w: PendingWorkload, p: PoolState) -> str | None:
    """Why a pool that is not ruled out cannot take the whole gang now, over its ready nodes'
    free devices as the planning cycle counts them."""
    assert why_not(w, p) == [], "ruled out, whatever is free"
    return capacity_reason(w, PoolView.of(p), NodeFit((n.name, n.free) for n in p.nodes if n.ready))


def test_memory_per_device() -> None:
    got = why_not(workload(minMemoryGiB=80), pool("a100-40"))
    assert got == ["40 GiB per device < 80 GiB required"]
    assert why_not(workload(minMemoryGiB=80), pool("a100")) == []


def test_precision_must_be_supported() -> None:
    assert why_not(workload(precision="fp8"), pool("a100")) == ["A100-SXM4-80GB has no fp8"]
    assert why_not(workload(precision="bf16"), pool("t4")) == ["T4 has no bf16"]
    assert why_not(workload(precision="fp8"), pool("h100")) == []


def test_namespace_selector() -> None:
    p = pool("h100", namespaceSelector={"matchLabels": {"team": "research"}})
    assert why_not(workload(namespace="ml"), p) == ["namespace ml is not allowed by this pool"]
    assert why_not(workload(namespace="research"), p) == []
    by_name = pool(
        "h100",
        namespaceSelector={
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml"]}
            ]
        },
    )
    assert why_not(workload(namespace="ml"), by_name) == []
    assert why_not(workload(namespace="research"), by_name) != []


def test_draining_pool_takes_nothing_new() -> None:
    assert why_not(workload(), pool("h100", draining=True)) == ["pool is draining"]


def test_capacity_now_names_the_largest_free_node() -> None:
    got = reason_now(workload(count=8), pool("h100", 2, 8, free=[4, 2]))
    assert got == "no node has 8 free nvidia.com/gpu (largest free: 4)"
    gang = reason_now(workload(count=4, replicas=3), pool("h100", 2, 8, free=[4, 4]))
    assert gang == "room for 2 of 3 pods of 4 nvidia.com/gpu now"
    assert reason_now(workload(count=4, replicas=3), pool("h100", 2, 8, free=[8, 4])) is None


def test_static_capacity_is_per_node_not_per_pool() -> None:
    # 16 devices in the pool, but no node holds 8: a pod's devices must share a node
    got = why_not(workload(count=8), pool("l4", 4, 4))
    assert got == ["no node has 8 nvidia.com/gpu (largest: 4); a pod's devices must be on one node"]
    gang = why_not(workload(count=8, replicas=3), pool("h100", 2, 8))
    assert gang == ["the nodes hold at most 2 pods of 8 nvidia.com/gpu, 3 required"]


def test_not_ready_nodes_do_not_count() -> None:
    p = pool("h100", 2, 8, ready=[False, False])
    assert why_not(workload(), p) == ["pool has no node that takes new pods"]
    half = pool("h100", 2, 8, free=[8, 8], ready=[False, True])
    assert why_not(workload(count=8, replicas=2), half) == [
        "the nodes hold at most 1 pod of 8 nvidia.com/gpu, 2 required"
    ]


def test_software_versions() -> None:
    p = pool("h100", software={"cuda": "12.2"})
    w = workload(software={"cuda": ">=12.4"})
    assert why_not(w, p) == ["needs cuda >= 12.4, pool has 12.2"]
    assert why_not(workload(software={"cuda": ">=12.1"}), p) == []


def test_software_constraint_applies_only_to_its_stack() -> None:
    w = workload(software={"rocm": ">=6.0", "cuda": ">=12.1"})
    # an NVIDIA pool ignores the rocm rule; an AMD pool ignores the cuda rule
    assert why_not(w, pool("h100", software={"cuda": "12.4"})) == []
    assert why_not(w, pool("mi300x", software={"rocm": "6.2"})) == []
    assert why_not(w, pool("mi300x", software={"rocm": "5.7"})) == [
        "needs rocm >= 6.0, pool has 5.7"
    ]
    # the right stack without a version: say so rather than guess
    assert why_not(w, pool("mi300x")) == [
        "needs rocm >= 6.0, pool does not say which rocm it has (set spec.software.rocm)"
    ]
    # other keys apply where the pool lists them
    assert why_not(
        workload(software={"driver": ">=560"}), pool("h100", software={"driver": "550.54"})
    ) == ["needs driver >= 560, pool has 550.54"]


def test_cuda_version_is_read_from_gpu_feature_discovery_labels() -> None:
    labels = {"nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "4"}
    p = pool("h100", labels=labels)
    assert p.software == {"cuda": "12.4"}
    assert why_not(workload(software={"cuda": ">=12.6"}), p) == [
        "needs cuda >= 12.6, pool has 12.4"
    ]
    assert pool("h100", labels=labels, software={"cuda": "12.8"}).software == {"cuda": "12.8"}


@pytest.mark.parametrize(
    ("have", "constraint", "ok"),
    [
        ("12.4", ">=12.4", True),
        ("12.4", ">12.4", False),
        ("12.4", "<13", True),
        ("12.4", "<=12.3", False),
        ("12.4", "==12.4.0", True),
        ("12.4", "=12.5", False),
        ("12.4", "~12.1", True),
        ("13.0", "~12.1", False),
        ("12.0", "~12.1", False),
        ("12.10", ">=12.9", True),
        ("12.4", "12.1", True),
    ],
)
def test_version_constraints(have: str, constraint: str, ok: bool) -> None:
    assert satisfies(parse_version(have), constraint) is ok


def test_workload_filters() -> None:
    assert why_not(workload(vendors=["amd"]), pool("h100")) == [
        "vendor nvidia is not allowed (allowed: amd)"
    ]
    assert why_not(workload(models=["MI300X"]), pool("h100")) == [
        "model H100-SXM5-80GB is not among the workload's models"
    ]
    assert why_not(workload(excludeModels=["H100-SXM5-80GB"]), pool("h100")) == [
        "model H100-SXM5-80GB is excluded by the workload"
    ]
    assert why_not(workload(pools=["a100"]), pool("h100")) == [
        "pool h100 is not among the workload's pools"
    ]
    assert why_not(workload(features=["nvlink"]), pool("h100-pcie")) == [
        "H100-PCIe-80GB has no nvlink"
    ]
    assert why_not(workload(features=["infiniband"]), pool("h100", features=["infiniband"])) == []
    assert why_not(workload(excluded=["h100"]), pool("h100")) == ["withdrawn from h100"]


def test_every_reason_is_returned_not_just_the_first() -> None:
    w = workload(namespace="ml", count=16, precision="fp8", minMemoryGiB=100, vendors=["amd"])
    p = pool("a100-40", draining=True, namespaceSelector={"matchLabels": {"team": "x"}})
    assert why_not(w, p) == [
        "vendor nvidia is not allowed (allowed: amd)",
        "40 GiB per device < 100 GiB required",
        "A100-SXM4-40GB has no fp8",
        "namespace ml is not allowed by this pool",
        "pool is draining",
        "no node has 16 nvidia.com/gpu (largest: 8); a pod's devices must be on one node",
    ]


def test_unusable_accelerator_rules_the_pool_out() -> None:
    p = pool("fpga", model="FPGA-X1", accelerator={"resourceName": "xilinx.com/fpga"})
    got = why_not(workload(), p)
    assert got and got[0].startswith("accelerator unusable: model FPGA-X1 is not in the catalog")
