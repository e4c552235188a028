"""Feasibility: every reason that rules a pool out, in the words a user reads."""

from __future__ import annotations

import pytest
from builders import pool, workload

from tessera.placement import reasons, satisfies
from tessera.placement.snapshot import parse_version

NS = {"ml": {"team": "ml"}, "research": {"team": "research"}}


def test_memory_per_device() -> None:
    got = reasons(workload(minMemoryGiB=80), pool("a100-40"), NS)
    assert got == ["40 GiB per device < 80 GiB required"]
    assert reasons(workload(minMemoryGiB=80), pool("a100"), NS) == []


def test_precision_must_be_supported() -> None:
    assert reasons(workload(precision="fp8"), pool("a100"), NS) == ["A100-SXM4-80GB has no fp8"]
    assert reasons(workload(precision="bf16"), pool("t4"), NS) == ["T4 has no bf16"]
    assert reasons(workload(precision="fp8"), pool("h100"), NS) == []


def test_namespace_selector() -> None:
    p = pool("h100", namespaceSelector={"matchLabels": {"team": "research"}})
    assert reasons(workload(namespace="ml"), p, NS) == ["namespace ml is not allowed by this pool"]
    assert reasons(workload(namespace="research"), p, NS) == []
    by_name = pool(
        "h100",
        namespaceSelector={
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml"]}
            ]
        },
    )
    assert reasons(workload(namespace="ml"), by_name, NS) == []
    assert reasons(workload(namespace="research"), by_name, NS) != []


def test_draining_pool_takes_nothing_new() -> None:
    assert reasons(workload(), pool("h100", draining=True), NS) == ["pool is draining"]


def test_capacity_now_names_the_largest_free_node() -> None:
    got = reasons(workload(count=8), pool("h100", 2, 8, free=[4, 2]), NS)
    assert got == ["no node has 8 free nvidia.com/gpu (largest free: 4)"]
    gang = reasons(workload(count=4, replicas=3), pool("h100", 2, 8, free=[4, 4]), NS)
    assert gang == ["room for 2 of 3 pods of 4 nvidia.com/gpu now"]


def test_static_capacity_is_per_node_not_per_pool() -> None:
    # 16 devices in the pool, but no node holds 8: a pod's devices must share a node
    got = reasons(workload(count=8), pool("l4", 4, 4), NS)
    assert got == ["no node has 8 nvidia.com/gpu (largest: 4); a pod's devices must be on one node"]
    gang = reasons(workload(count=8, replicas=3), pool("h100", 2, 8), NS)
    assert gang == ["the nodes hold at most 2 pods of 8 nvidia.com/gpu, 3 required"]


def test_not_ready_nodes_do_not_count() -> None:
    p = pool("h100", 2, 8, ready=[False, False])
    assert reasons(workload(), p, NS) == ["pool has no ready node"]
    half = pool("h100", 2, 8, free=[8, 8], ready=[False, True])
    assert reasons(workload(count=8, replicas=2), half, NS) == [
        "the nodes hold at most 1 pod of 8 nvidia.com/gpu, 2 required"
    ]


def test_software_versions() -> None:
    p = pool("h100", software={"cuda": "12.2"})
    w = workload(software={"cuda": ">=12.4"})
    assert reasons(w, p, NS) == ["needs cuda >= 12.4, pool has 12.2"]
    assert reasons(workload(software={"cuda": ">=12.1"}), p, NS) == []


def test_software_constraint_applies_only_to_its_stack() -> None:
    w = workload(software={"rocm": ">=6.0", "cuda": ">=12.1"})
    # an NVIDIA pool ignores the rocm rule; an AMD pool ignores the cuda rule
    assert reasons(w, pool("h100", software={"cuda": "12.4"}), NS) == []
    assert reasons(w, pool("mi300x", software={"rocm": "6.2"}), NS) == []
    assert reasons(w, pool("mi300x", software={"rocm": "5.7"}), NS) == [
        "needs rocm >= 6.0, pool has 5.7"
    ]
    # the right stack without a version: say so rather than guess
    assert reasons(w, pool("mi300x"), NS) == [
        "needs rocm >= 6.0, pool does not say which rocm it has (set spec.software.rocm)"
    ]
    # other keys apply where the pool lists them
    assert reasons(
        workload(software={"driver": ">=560"}), pool("h100", software={"driver": "550.54"}), NS
    ) == ["needs driver >= 560, pool has 550.54"]


def test_cuda_version_is_read_from_gpu_feature_discovery_labels() -> None:
    labels = {"nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "4"}
    p = pool("h100", labels=labels)
    assert p.software == {"cuda": "12.4"}
    assert reasons(workload(software={"cuda": ">=12.6"}), p, NS) == [
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
    assert reasons(workload(vendors=["amd"]), pool("h100"), NS) == [
        "vendor nvidia is not allowed (allowed: amd)"
    ]
    assert reasons(workload(models=["MI300X"]), pool("h100"), NS) == [
        "model H100-SXM5-80GB is not among the workload's models"
    ]
    assert reasons(workload(excludeModels=["H100-SXM5-80GB"]), pool("h100"), NS) == [
        "model H100-SXM5-80GB is excluded by the workload"
    ]
    assert reasons(workload(pools=["a100"]), pool("h100"), NS) == [
        "pool h100 is not among the workload's pools"
    ]
    assert reasons(workload(features=["nvlink"]), pool("h100-pcie"), NS) == [
        "H100-PCIe-80GB has no nvlink"
    ]
    assert (
        reasons(workload(features=["infiniband"]), pool("h100", features=["infiniband"]), NS) == []
    )
    assert reasons(workload(excluded=["h100"]), pool("h100"), NS) == [
        "withdrawn from: its pods could not be bound or created here"
    ]


def test_every_reason_is_returned_not_just_the_first() -> None:
    w = workload(namespace="ml", count=16, precision="fp8", minMemoryGiB=100, vendors=["amd"])
    p = pool("a100-40", draining=True, namespaceSelector={"matchLabels": {"team": "x"}})
    assert reasons(w, p, NS) == [
        "vendor nvidia is not allowed (allowed: amd)",
        "40 GiB per device < 100 GiB required",
        "A100-SXM4-40GB has no fp8",
        "namespace ml is not allowed by this pool",
        "pool is draining",
        "no node has 16 nvidia.com/gpu (largest: 8); a pod's devices must be on one node",
    ]


def test_unusable_accelerator_rules_the_pool_out() -> None:
    p = pool("fpga", model="FPGA-X1", accelerator={"resourceName": "xilinx.com/fpga"})
    got = reasons(workload(), p, NS)
    assert got and got[0].startswith("accelerator unusable: model FPGA-X1 is not in the catalog")
