"""Unit tests of tessera.catalog: the packaged figures, label discovery and pool resolution."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera import api, catalog
from tessera.dra import dra_labels
from tessera.placement.snapshot import cuda_from_labels

REQUIRED = [
    "T4", "A10G", "L4", "L40S", "V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB",
    "H100-SXM5-80GB", "H100-PCIe-80GB", "H200-SXM-141GB", "B200", "MI210", "MI250X", "MI300X",
    "MI325X", "Gaudi2", "Gaudi3", "Max-1550", "TPU-v4", "TPU-v5e", "TPU-v5p", "TPU-v6e",
    "Inferentia2", "Trainium", "Trainium2",
]  # fmt: skip
STACKS = {
    api.Vendor.NVIDIA: {"cuda"},
    api.Vendor.AMD: {"rocm"},
    api.Vendor.INTEL: {"synapse", "oneapi"},
    api.Vendor.GOOGLE: {"xla"},
    api.Vendor.AWS: {"neuron"},
}
ACCELERATOR_DOMAINS = {"nvidia.com", "amd.com", "habana.ai", "gpu.intel.com", "google.com",
                       "aws.amazon.com"}  # fmt: skip
FLEET = Path(__file__).resolve().parents[2] / "hack" / "fleet" / "fleet.yaml"


def test_catalog_holds_every_required_model_with_valid_keys() -> None:
    names = catalog.model_names()
    assert len(names) >= 24
    assert set(REQUIRED) <= set(names)
    assert names == sorted(names)
    assert all(re.fullmatch(api.MODEL_PATTERN, n) for n in names)


@pytest.mark.parametrize("key", REQUIRED)
def test_every_model_has_complete_cited_figures(key: str) -> None:
    m = catalog.get(key)
    assert m is not None
    assert m.architecture and 2010 <= m.year <= 2026
    assert m.memory_gib > 0 and m.memory_bandwidth_tbps > 0
    assert m.tdp_watts > 0 and m.price_per_device_hour > 0
    assert m.peak_tflops, "at least one precision"
    assert re.fullmatch(api.ACCELERATOR_RESOURCE_PATTERN, m.resource_name)
    assert m.software in STACKS[m.vendor]
    assert m.interconnect
    for text in (m.sources.specs, m.sources.power, m.sources.price):
        # a URL, or an explicit statement that no figure is published, backed by a note
        assert text.startswith("https://") or m.notes, f"{key}: {text!r} needs a note"


def test_figures_match_the_reference_table() -> None:
    expect = {  # (memory GiB, bandwidth TB/s, bf16 or fp16 TFLOPS, TDP W) from datasheets
        "H100-SXM5-80GB": (80, 3.35, 989.4, 700),
        "A100-SXM4-40GB": (40, 1.555, 312, 400),
        "MI300X": (192, 5.3, 1307.4, 750),
        "Gaudi3": (128, 3.7, 1835, 900),
        "TPU-v5e": (16, 0.819, 197, None),
        "Trainium2": (96, 2.9, 667, None),
        "L4": (24, 0.3, 121, 72),
    }
    for key, (mem, bw, bf16, tdp) in expect.items():
        m = catalog.get(key)
        assert m is not None
        assert (m.memory_gib, m.memory_bandwidth_tbps, m.peak_tflops[api.Precision.BF16]) == (
            mem,
            bw,
            bf16,
        )
        if tdp is not None:
            assert m.tdp_watts == tdp


def test_precisions_are_dense_and_ordered() -> None:
    P = api.Precision  # noqa: N806 - reads like the enum
    for m in catalog.catalog().values():
        t = m.peak_tflops
        if P.FP8 in t and P.BF16 in t:
            assert t[P.FP8] >= t[P.BF16], m.key
        if P.FP32 in t and P.BF16 in t:
            assert t[P.BF16] > t[P.FP32], m.key
    t = catalog.catalog()["H100-SXM5-80GB"].peak_tflops  # dense fp8 = 2x bf16, not 4x
    assert t[P.FP8] == pytest.approx(2 * t[P.BF16], rel=0.01)
    assert P.BF16 not in catalog.catalog()["T4"].peak_tflops  # Turing has no bf16
    assert P.FP8 not in catalog.catalog()["A100-SXM4-80GB"].peak_tflops


SPELLINGS = [
    ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "H100-SXM5-80GB"),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, "A100-SXM4-40GB"),
    ({"nvidia.com/gpu.product": "A100-SXM4-40GB"}, "A100-SXM4-40GB"),
    ({"nvidia.com/gpu.product": "NVIDIA-H200"}, "H200-SXM-141GB"),
    ({"nvidia.com/gpu.product": "Tesla-T4"}, "T4"),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED"}, "A100-SXM4-40GB"),
    ({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, "H100-SXM5-80GB"),
    ({"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}, "H100-SXM5-80GB"),
    ({"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}, "T4"),
    ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, "L4"),
    ({"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}, "A100-SXM4-80GB"),
    ({"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"}, "H200-SXM-141GB"),
    ({"cloud.google.com/gke-accelerator": "nvidia-b200"}, "B200"),
    ({"cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice"}, "TPU-v4"),
    ({"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}, "TPU-v5e"),
    ({"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice"}, "TPU-v5p"),
    ({"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}, "TPU-v6e"),
    ({"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, "MI300X"),
    ({"amd.com/gpu.device-id": "74a1"}, "MI300X"),
    ({"gpu.intel.com/product": "Max_1550"}, "Max-1550"),
    ({"karpenter.k8s.aws/instance-gpu-name": "h100"}, "H100-SXM5-80GB"),
    ({"karpenter.k8s.aws/instance-gpu-name": "a10g"}, "A10G"),
    ({"karpenter.k8s.aws/instance-accelerator-name": "trainium"}, "Trainium"),
    ({"karpenter.k8s.aws/instance-accelerator-name": "inferentia2"}, "Inferentia2"),
    ({"eks.amazonaws.com/instance-gpu-name": "h200"}, "H200-SXM-141GB"),
    ({"node.kubernetes.io/instance-type": "p5.48xlarge"}, "H100-SXM5-80GB"),
    ({"node.kubernetes.io/instance-type": "p4d.24xlarge"}, "A100-SXM4-40GB"),
    ({"node.kubernetes.io/instance-type": "g6e.12xlarge"}, "L40S"),
    ({"node.kubernetes.io/instance-type": "g6.xlarge"}, "L4"),
    ({"node.kubernetes.io/instance-type": "trn1.32xlarge"}, "Trainium"),
    ({"node.kubernetes.io/instance-type": "trn2.48xlarge"}, "Trainium2"),
    ({"node.kubernetes.io/instance-type": "inf2.24xlarge"}, "Inferentia2"),
    (
        {
            "karpenter.k8s.aws/instance-gpu-name": "a100",
            "karpenter.k8s.aws/instance-gpu-memory": "40960",
        },
        "A100-SXM4-40GB",
    ),
    (
        {"habana.ai/gaudi.present": "true", "node.kubernetes.io/instance-type": "gaudi2-8x"},
        "Gaudi2",
    ),
]


@pytest.mark.parametrize(("labels", "model"), SPELLINGS)
def test_discovery_reads_every_published_spelling(labels: dict[str, str], model: str) -> None:
    found = catalog.discover(labels)
    assert (found.status, found.model) == ("identified", model)
    assert set(found.labels) <= set(labels)


def test_discovery_resolves_every_group_of_the_simulated_fleet() -> None:
    expect = {
        "a100": "A100-SXM4-80GB",
        "h100": "H100-SXM5-80GB",
        "l4": "L4",
        "mi300x": "MI300X",
        "gaudi2": "Gaudi2",
        "tpu-v5e": "TPU-v5e",
        "trainium": "Trainium",
    }
    # DRA nodes: their labels and their devices' attributes say the same.
    by_devices = {"h200-dra": "H200-SXM-141GB", "mi325x-dra": "MI325X"}
    groups = yaml.safe_load(FLEET.read_text())["groups"]
    assert set(expect) | set(by_devices) <= {g["name"] for g in groups}
    for g in groups:
        found = catalog.discover(g["labels"])
        if g["name"] in expect:
            assert found.model == expect[g["name"]], g["name"]
        elif g["name"] in by_devices:
            dra = g["dra"]
            capacity = {k: str(v["value"]) for k, v in dra.get("capacity", {}).items()}
            attributes = {k: str(next(iter(v.values()))) for k, v in dra["attributes"].items()}
            devices = dra_labels(dra["driver"], attributes, capacity)
            assert found.model == by_devices[g["name"]], g["name"]
            assert catalog.discover(devices).model == by_devices[g["name"]]
        elif not any("/" in k and k.split("/")[0] in ACCELERATOR_DOMAINS for k in g["capacity"]):
            assert found.status == "none", g["name"]  # CPU-only nodes carry no accelerator


def test_each_drivers_device_attributes_read_as_its_labellers_labels() -> None:
    """What the NVIDIA, AMD, Intel Gaudi and TPU drivers publish, spelled as each does."""
    nvidia = dra_labels(
        "gpu.nvidia.com",
        {"productName": "NVIDIA H100 80GB HBM3", "cudaDriverVersion": "12.8.0"},
        {"memory": "81559Mi"},
    )
    assert nvidia == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "8",
    }
    assert cuda_from_labels(nvidia) == "12.8"  # the pool's CUDA version, as GFD's labels give it
    amd = dra_labels(
        "gpu.amd.com",
        {"productName": "AMD_Instinct_MI300X_OAM", "deviceID": "0x74A1"},
        {"memory": "196592Mi", "computeUnits": "304"},
    )
    assert amd == {
        "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM",
        "amd.com/gpu.device-id": "74a1",
        "amd.com/gpu.vram": "192G",
    }
    assert catalog.discover(amd).model == "MI300X"
    # A compute partition (CPX: 8 per MI300X) is no MI300X: a model of its own, unknown to
    # the catalog, with the partition's memory; SPX is the whole GPU.
    whole, cpx = (
        dra_labels(
            "gpu.amd.com",
            {"productName": "AMD_Instinct_MI300X_OAM", "deviceID": "0x74a1", "partitionProfile": p},
            {"memory": "24Gi"},
        )
        for p in ("spx_nps1", "cpx_nps4")
    )
    assert catalog.discover(whole).model == "MI300X"
    assert cpx == {
        "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM-CPX",
        "amd.com/gpu.vram": "24G",
    }
    assert catalog.discover(cpx).status == "unknown"
    assert catalog.labelled_memory_gib({"n": cpx}) == 24
    for sku in ("Gaudi2", "Gaudi3"):
        gaudi = dra_labels("gaudi.intel.com", {"model": sku, "pciRoot": "00"}, {})
        assert catalog.discover(gaudi).model == sku
    tpu = dra_labels("tpu.google.com", {"accelerator": "tpu-v5-lite-podslice"}, {})
    assert catalog.discover(tpu).model == "TPU-v5e"
    assert dra_labels("example.com", {"model": "X"}, {}) == {}


def test_unknown_label_value_is_a_result_naming_the_label() -> None:
    found = catalog.discover({"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000", "zone": "a"})
    assert found.status == "unknown" and found.model is None
    assert found.labels == {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000"}
    assert "nvidia.com/gpu.product=NVIDIA-RTX-PRO-6000" in found.message


def test_mig_partitions_are_not_mistaken_for_whole_devices() -> None:
    found = catalog.discover({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"})
    assert found.status == "unknown"


def test_disagreeing_labels_are_a_conflict_and_vague_ones_ambiguous() -> None:
    found = catalog.discover(
        {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "node.kubernetes.io/instance-type": "p4d.24xlarge",
        }
    )
    assert found.status == "conflict"
    assert "H100-SXM5-80GB" in found.message and "A100-SXM4-40GB" in found.message
    vague = catalog.discover({"karpenter.k8s.aws/instance-gpu-name": "a100"})
    assert vague.status == "ambiguous"
    assert vague.candidates == ("A100-SXM4-40GB", "A100-SXM4-80GB")
    assert catalog.discover({"node.kubernetes.io/instance-type": "m5.large"}).status == "none"


def test_discovery_answers_from_the_labels_it_reads() -> None:
    """Answers are remembered by the labels discovery reads: a label it reads (here the
    memory one) still changes the answer; one it does not (the hostname) never does."""
    vague = {"karpenter.k8s.aws/instance-gpu-name": "a100"}
    assert catalog.discover(vague).status == "ambiguous"
    sized = catalog.discover({**vague, "karpenter.k8s.aws/instance-gpu-memory": "81920"})
    assert (sized.status, sized.model) == ("identified", "A100-SXM4-80GB")
    assert sized.labels == {**vague, "karpenter.k8s.aws/instance-gpu-memory": "81920"}
    one = catalog.discover({**vague, "kubernetes.io/hostname": "n-1"})
    two = catalog.discover({**vague, "kubernetes.io/hostname": "n-2"})
    assert one == two == catalog.discover(vague)


@settings(max_examples=150)
@given(
    st.dictionaries(
        st.sampled_from([*sorted({k for ls, _ in SPELLINGS for k in ls}), "x"]), st.text()
    )
)
def test_discovery_never_raises(labels: dict[str, str]) -> None:
    found = catalog.discover(labels)
    assert found.status in {"identified", "none", "unknown", "ambiguous", "conflict"}
    assert (found.model is not None) == (found.status == "identified")


def test_pool_nodes_with_different_accelerators_conflict() -> None:
    found = catalog.discover_pool(
        {
            "a-0": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "h-0": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "cpu-0": {},
        }
    )
    assert found.status == "conflict"
    assert "A100-SXM4-80GB on a-0" in found.message and "H100-SXM5-80GB on h-0" in found.message


def _spec(**accel: object) -> api.AcceleratorPoolSpec:
    extra = {k: accel.pop(k) for k in ("costPerDeviceHour", "powerWatts", "features") if k in accel}
    return api.AcceleratorPoolSpec.model_validate(
        {"accelerator": accel, "nodeSelector": {"matchLabels": {"a": "b"}}, **extra}
    )


def test_resolve_from_labels_applies_spec_overrides() -> None:
    spec = _spec(vendor="nvidia", memoryGiB=79, peakTFLOPS={"bf16": 900}, costPerDeviceHour=2.5,
                 features=["infiniband"])  # fmt: skip
    got = catalog.resolve_accelerator(
        spec, {"n": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    )
    assert got.status == "resolved" and got.usable
    acc = got.accelerator
    assert (acc.model, acc.source, acc.resource_name) == (
        "H100-SXM5-80GB",
        "labels",
        "nvidia.com/gpu",
    )
    assert acc.memory_gib == 79 and acc.peak_tflops[api.Precision.BF16] == 900
    assert acc.peak_tflops[api.Precision.FP8] == 1978.9  # the catalog fills the rest
    assert acc.cost_per_device_hour == 2.5 and acc.power_watts == 700
    assert {"nvlink", "infiniband"} <= acc.features and acc.software == "cuda"
    status = acc.to_api().model_dump(by_alias=True, mode="json")  # status.accelerator
    expected = {
        "vendor": "nvidia",
        "model": "H100-SXM5-80GB",
        "source": "labels",
        "resourceName": "nvidia.com/gpu",
        "memoryGiB": 79,
        "costPerDeviceHour": 2.5,
        "powerWatts": 700,
    }
    assert {k: status[k] for k in expected} == expected
    assert status["peakTFLOPS"]["bf16"] == 900 and status["peakTFLOPS"]["fp8"] == 1978.9


def test_resolve_unknown_hardware_needs_memory_and_flops() -> None:
    bare = catalog.resolve_accelerator(
        _spec(vendor="other", model="FPGA-X1", resourceName="xilinx.com/fpga")
    )
    assert bare.status == "unknown" and not bare.usable
    assert "FPGA-X1 is not in the catalog" in bare.problems[0]
    assert "memoryGiB and peakTFLOPS" in bare.problems[0]
    full = catalog.resolve_accelerator(
        _spec(
            vendor="other",
            model="FPGA-X1",
            resourceName="xilinx.com/fpga",
            memoryGiB=64,
            peakTFLOPS={"int8": 100},
        )
    )
    assert full.usable and full.accelerator.source == "spec"
    assert full.accelerator.resource_name == "xilinx.com/fpga"
    # A model the catalog lacks: memory per device from the nodes' labels (the least).
    sized = catalog.resolve_accelerator(
        _spec(vendor="nvidia"),
        {
            "a": {
                "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000",
                "nvidia.com/gpu.memory": "97887",
            },
            "b": {
                "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000",
                "nvidia.com/gpu.memory": "98304",
            },
        },
    )
    assert sized.accelerator.memory_gib == 95.6
    assert sized.problems[0].endswith("set spec.accelerator.model, or peakTFLOPS")
    nothing = catalog.resolve_accelerator(_spec(vendor="nvidia"), {"n": {"zone": "a"}})
    assert nothing.accelerator.model == catalog.UNKNOWN and not nothing.usable
    assert "set spec.accelerator.model" in nothing.problems[0]


def test_resolve_reports_conflicts() -> None:
    wrong_vendor = catalog.resolve_accelerator(_spec(vendor="amd", model="H100-SXM5-80GB"))
    assert wrong_vendor.status == "conflict"
    assert wrong_vendor.problems == ("spec says vendor amd but H100-SXM5-80GB is nvidia",)
    labels = {"n": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}
    disagree = catalog.resolve_accelerator(_spec(vendor="nvidia", model="H100-SXM5-80GB"), labels)
    assert disagree.status == "conflict" and not disagree.usable
    assert "the nodes' labels say A100-SXM4-80GB" in disagree.problems[0]
