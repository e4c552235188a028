"""What Dynamic Resource Allocation objects say: a node's ResourceSlice (a driver's devices on
it) and an allocated ResourceClaim (the devices it holds) as compact facts, and what each
driver's device attributes mean, as the labels catalog discovery reads. Read by the World
(tessera.world.dra), the catalog, the pods' claim templates and `tessera pools suggest`.
Pure; imports nothing of Tessera."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SliceFacts:
    """One ResourceSlice of a node: its driver, node and pool, how many devices it lists,
    and the first device's attributes and capacity as text (what discovery reads; a
    driver publishes one kind of device per slice on the nodes of a pool)."""

    driver: str
    node: str
    pool: str
    devices: int
    attributes: Mapping[str, str]
    capacity: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    """An allocated ResourceClaim: (driver, pool, device) of each device allocated."""

    allocated: tuple[tuple[str, str, str], ...]


def _text(value: Mapping[str, Any]) -> str:
    """A DeviceAttribute's one value (string, int, bool or version) as text."""
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            return str(value[kind])
    return ""


def slice_facts(body: Mapping[str, Any]) -> SliceFacts | None:
    """A node-local ResourceSlice's facts; None for slices not bound to one node (network
    devices: no pool of nodes holds them)."""
    spec = body.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        return None
    devices = spec.get("devices") or []
    first = devices[0] if devices else {}
    return SliceFacts(
        driver=str(spec.get("driver", "")),
        node=str(node),
        pool=str((spec.get("pool") or {}).get("name", node)),
        devices=len(devices),
        attributes={k: _text(v) for k, v in (first.get("attributes") or {}).items()},
        capacity={
            k: str((v or {}).get("value", "")) for k, v in (first.get("capacity") or {}).items()
        },
    )


def claim_facts(body: Mapping[str, Any]) -> ClaimFacts | None:
    """An allocated claim's devices; None while it is not allocated (it holds nothing)."""
    results = (((body.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    if not results:
        return None
    return ClaimFacts(
        tuple((str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results)
    )


# What each DRA driver publishes of a device (its ResourceSlices' attributes and capacity),
# as the node label the vendor's device-plugin labeller writes for the same fact, so the
# catalog's discovery (tessera.catalog) serves both. Attribute -> (label, how it is written).
_DASHES = re.compile(r"\s+")
AMD_DEVICE_ID_LABEL = "amd.com/gpu.device-id"
DRA_DISCOVERY: dict[str, dict[str, tuple[str, str]]] = {
    # NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go and partitions.go:
    # productName is NVML's name ("NVIDIA H100 80GB HBM3"), which GPU Feature Discovery
    # writes with dashes; memory is a capacity in bytes, GFD's label in MiB; cudaDriverVersion
    # (12.8.0) the CUDA version the driver supports, GFD's cuda.runtime-version.major/minor
    # (the pool's CUDA version: tessera.placement.cuda_from_labels). architecture and
    # cudaComputeCapability say nothing productName does not.
    "gpu.nvidia.com": {
        "productName": ("nvidia.com/gpu.product", "dashes"),
        "memory": ("nvidia.com/gpu.memory", "mebibytes"),
        "cudaDriverVersion": ("nvidia.com/cuda.runtime-version", "major.minor"),
    },
    # ROCm/k8s-gpu-dra-driver, cmd/gpu-kubeletplugin/deviceinfo.go (docs/demo.md shows an
    # MI300X): productName as the AMD labeller writes it, AMD_Instinct_MI300X_OAM; deviceID
    # as sysfs gives it (0x74a1), the labeller without 0x; memory a capacity in bytes, the
    # labeller's vram in G. partitionProfile (spx_nps1, cpx_nps4: the compute partition
    # first) other than spx makes each device a slice of a GPU, named as the product with
    # the partition (AMD_Instinct_MI300X_OAM-CPX), as GFD names MIG devices: a model the
    # catalog does not know, with the partition's own memory.
    "gpu.amd.com": {
        "productName": ("amd.com/gpu.product-name", "same"),
        "deviceID": (AMD_DEVICE_ID_LABEL, "hex"),
        "memory": ("amd.com/gpu.vram", "gibibytes"),
        "partitionProfile": ("amd.com/gpu.product-name", "partition"),  # after the two above
    },
    # intel/intel-resource-drivers-for-kubernetes, cmd/kubelet-gaudi-plugin/node_state.go and
    # pkg/gaudi/device/device.go: model is the SKU (Gaudi2, Gaudi3) from the PCI device ID.
    # No labeller writes it as a label, so the catalog lists it under the driver's own name.
    "gaudi.intel.com": {"model": ("gaudi.intel.com/model", "same")},
    # kubernetes-sigs/dra-driver-google-tpu, cmd/tpu-dra-kubeletplugin/manager.go:
    # accelerator is GKE's name for the slice type, e.g. tpu-v6e-slice.
    "tpu.google.com": {"accelerator": ("cloud.google.com/gke-tpu-accelerator", "same")},
}


def dra_labels(
    driver: str, attributes: Mapping[str, str], capacity: Mapping[str, str]
) -> dict[str, str]:
    """A DRA device's attributes and capacity (values as text) as the labels discovery
    reads; empty for a driver the table does not know."""
    out = {}
    for name, (label, written) in DRA_DISCOVERY.get(driver, {}).items():
        value = attributes.get(name) if name in attributes else capacity.get(name)
        if value is None:
            continue
        if written == "dashes":
            value = _DASHES.sub("-", value.strip())
        elif written == "major.minor":
            major, _, rest = value.strip().partition(".")
            if major.isdigit():
                out[f"{label}.major"] = major
                out[f"{label}.minor"] = rest.partition(".")[0] or "0"
            continue
        elif written == "hex":
            value = value.strip().lower().removeprefix("0x")
        elif written == "partition":
            compute = value.strip().split("_")[0].upper()
            if label not in out or compute in ("", "SPX"):
                continue  # the whole device
            value = f"{out[label]}-{compute}"
            out.pop(AMD_DEVICE_ID_LABEL, None)  # the device ID is the whole GPU's
        elif written in ("mebibytes", "gibibytes"):
            mib = quantity_mib(value)
            if mib is None:
                continue
            value = str(round(mib)) if written == "mebibytes" else f"{round(mib / 1024)}G"
        out[label] = value
    return out


_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTOR = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_FACTOR |= {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity_mib(text: str) -> float | None:
    """A Kubernetes quantity of bytes (143771Mi, 80Gi, 85899345920) in MiB, or None."""
    m = _QUANTITY.match(text.strip())
    if not m:
        return None
    return float(m.group(1)) * _FACTOR[m.group(2)] / 2**20


def dra_resource(driver: str) -> str:
    """How a DRA pool's devices are counted and named in messages: `<driver>/devices` (no
    node reports them as allocatable; tessera.world counts them from ResourceSlices)."""
    return f"{driver}/devices"
