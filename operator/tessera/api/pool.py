"""The AcceleratorPool kind: the accelerator a pool's nodes hold, how they are selected, and
the status the operator reports. Pure data; imports only tessera.api.common."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from tessera.api.common import (
    API_VERSION,
    CONDITIONS_LIST,
    DNS_SUBDOMAIN_PATTERN,
    EXTENDED_RESOURCE_PATTERN,
    MODEL_PATTERN,
    SOFTWARE_KEY_PATTERN,
    VERSION_PATTERN,
    Condition,
    FeatureName,
    LabelSelector,
    Model,
    Precision,
    Toleration,
    Vendor,
    cel,
    described,
    set_of,
    validations,
)


class DRADevices(Model):
    """Devices a Dynamic Resource Allocation driver serves: its ResourceSlices for the pool's
    nodes, requested through a DeviceClass."""

    driver: str = described(
        "The DRA driver whose ResourceSlices list the devices, e.g. gpu.nvidia.com, gpu.amd.com.",
        pattern=DNS_SUBDOMAIN_PATTERN,
        max_length=63,
    )
    device_class_name: str = described(
        "The DeviceClass the pods' claims request, e.g. gpu.nvidia.com.",
        pattern=DNS_SUBDOMAIN_PATTERN,
        max_length=253,
    )


class PoolAccelerator(Model):
    """What accelerator the pool's nodes carry; catalog facts fill what is not given here."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.dra) || !has(self.resourceName)",
                "a pool's devices come from a device-plugin resourceName or a DRA driver "
                "(dra), not both",
                field_path=".dra",
            ),
            *(
                cel(
                    f"self.vendor != 'other' || has(self.{name})",
                    f"vendor other needs {name}: {why}",
                    field_path=f".{name}",
                    reason="FieldValueRequired",
                )
                for name, why in (
                    ("resourceName", "the catalog cannot tell which device resource to request"),
                    ("memoryGiB", "the catalog does not know this hardware's memory"),
                    ("peakTFLOPS", "the catalog does not know this hardware's speed"),
                )
            ),
        )
    )

    vendor: Vendor = described(
        "Who makes the accelerator: nvidia, amd, intel, google, aws or other."
    )
    model: str | None = described(
        "Catalog model key, e.g. H100-SXM5-80GB. Optional when the nodes' labels identify it; "
        "a name the catalog does not know needs memoryGiB and peakTFLOPS.",
        None,
        pattern=MODEL_PATTERN,
        max_length=63,
    )
    resource_name: str | None = described(
        "The device plugin's extended resource, e.g. nvidia.com/gpu. Defaults from the catalog.",
        None,
        pattern=EXTENDED_RESOURCE_PATTERN,
        max_length=253,
    )
    memory_gib: float | None = described(
        "Memory per device in GiB, overriding the catalog.", None, gt=0, alias="memoryGiB"
    )
    memory_bandwidth_tbps: float | None = described(
        "Memory bandwidth per device in TB/s, overriding the catalog.",
        None,
        gt=0,
        alias="memoryBandwidthTBps",
    )
    peak_tflops: dict[Precision, Annotated[float, Field(gt=0)]] = described(
        "Peak dense TFLOPS per precision (fp32, tf32, bf16, fp16, fp8, int8, fp4), overriding "
        "the catalog. With memoryGiB, required for hardware the catalog does not know.",
        default_factory=dict,
        alias="peakTFLOPS",
        min_length=1,
        max_length=len(Precision),
    )
    dra: DRADevices | None = described(
        "Set when a Dynamic Resource Allocation driver serves the devices: they are the "
        "driver's ResourceSlices for the pool's nodes (not node allocatable), and each pod "
        "gets a ResourceClaim for its devices of this DeviceClass.",
        None,
    )
    units_per_device: float | None = described(
        "Normalised units one device counts for in AcceleratorQuotas, overriding the "
        "catalog's (its dense bf16 TFLOPS over an H100-SXM5-80GB's, the operator's reference).",
        None,
        ge=0,
        le=1000,
    )


class AcceleratorPoolSpec(Model):
    """Desired state of an AcceleratorPool: which nodes, which accelerator, on what terms."""

    accelerator: PoolAccelerator = described("The accelerator every node of the pool carries.")
    node_selector: LabelSelector = described(
        "Selects the pool's nodes by their labels, as the labellers write them (GPU Feature "
        "Discovery, GKE, the AMD labeller, ...). Must not be empty: an empty selector would "
        "claim every node of the cluster.",
        json_schema_extra=validations(
            cel(
                "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
                "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
                "nodeSelector must select nodes by matchLabels or matchExpressions: an empty "
                "selector would claim every node of the cluster",
                reason="FieldValueRequired",
            )
        ),
    )
    tolerations: list[Toleration] = described(
        "Tolerations added to every pod placed in this pool (for the nodes' taints).",
        default_factory=list,
        max_length=32,
    )
    cost_per_device_hour: float | None = described(
        "Price of one device for one hour, overriding the catalog's default price.", None, ge=0
    )
    power_watts: float | None = described(
        "Power per device in watts, overriding the catalog's TDP.", None, gt=0
    )
    software: dict[
        Annotated[str, Field(pattern=SOFTWARE_KEY_PATTERN)],
        Annotated[str, Field(pattern=VERSION_PATTERN, max_length=32)],
    ] = described(
        "Software versions installed on the nodes, by name: e.g. {cuda: '12.4', driver: "
        "'550.54'}, {rocm: '6.2'}, {neuron: '2.20'}. Names are lowercase; versions are dotted "
        "numbers.",
        default_factory=dict,
        max_length=32,
    )
    features: list[FeatureName] = set_of(
        "Capabilities beyond the catalog's, e.g. nvlink, infiniband.", 32
    )
    preference: int = described(
        "Admin bias added to every score on this pool, from -100 (avoid) to 100 (prefer).",
        0,
        ge=-100,
        le=100,
    )
    draining: bool = described(
        "No new placements; running service workloads migrate to other pools, one pod at a time.",
        False,
    )
    namespace_selector: LabelSelector | None = described(
        "Which namespaces may place workloads here; unset allows all. Select by name with the "
        "kubernetes.io/metadata.name label.",
        None,
    )


class ResolvedAccelerator(Model):
    """The accelerator facts the pool is scored with, after catalog, labels and overrides."""

    vendor: Vendor = described("Vendor.")
    model: str = described("Model key, or Unknown when neither spec nor labels identify it.")
    source: Literal["spec", "labels", "unknown"] = described(
        "Where the model came from: the spec, the nodes' labels, or nowhere."
    )
    resource_name: str = described("Device-plugin resource requested for each device.")
    memory_gib: float = described("Memory per device in GiB.", 0.0, alias="memoryGiB")
    peak_tflops: dict[Precision, float] = described(
        "Peak dense TFLOPS per precision.",
        default_factory=dict,
        alias="peakTFLOPS",
        max_length=len(Precision),
    )
    cost_per_device_hour: float = described("Price per device-hour used in scoring.", 0.0)
    power_watts: float = described("Power per device in watts used in scoring.", 0.0)
    units_per_device: float = described(
        "Normalised units one device counts for in AcceleratorQuotas: the spec's, else dense "
        "bf16 TFLOPS over the reference model's (H100-SXM5-80GB unless the operator names "
        "another).",
        0.0,
    )


class DeviceCounts(Model):
    """Devices of the pool's resource summed over its nodes."""

    capacity: int = described("Devices the nodes report as capacity.", 0, ge=0)
    allocatable: int = described("Devices the nodes report as allocatable.", 0, ge=0)
    allocated: int = described(
        "Devices requested by non-terminal pods on the nodes, plus Tessera pods not yet bound.",
        0,
        ge=0,
    )
    available: int = described(
        "Allocatable minus allocated, on the nodes that take new pods.", 0, ge=0
    )


class PoolSummary(Model):
    """Pre-formatted figures for `kubectl get` columns."""

    nodes: str = described("Nodes that take new pods/all nodes, e.g. 3/4.", "0/0")
    devices: str = described("Available/allocatable devices, e.g. 20/32.", "0/0")


class UnavailableNode(Model):
    """A node of the pool that takes no new pods."""

    node: str = described("Node name.")
    reason: str = described(
        "NotReady, Cordoned, or Tainted with the NoSchedule or NoExecute taints the pool's "
        "tolerations do not tolerate."
    )


class AcceleratorPoolStatus(Model):
    """Observed state of an AcceleratorPool."""

    observed_generation: int | None = described("The generation this status describes.", None)
    accelerator: ResolvedAccelerator | None = described("The accelerator as resolved.", None)
    nodes: int = described(
        "Nodes the pool counts: those its selector matches, less any counted for a pool that "
        "selected them first.",
        0,
        ge=0,
    )
    ready_nodes: int = described("Matched nodes that are Ready.", 0, ge=0)
    node_names: list[str] = described("Names of the matched nodes, sorted.", default_factory=list)
    unavailable_nodes: list[UnavailableNode] = described(
        "Matched nodes that take no new pods, with why; placement leaves them out and their "
        "devices are not available.",
        default_factory=list,
    )
    devices: DeviceCounts = described("Device counts.", default_factory=DeviceCounts)
    summary: PoolSummary = described("Figures for kubectl columns.", default_factory=PoolSummary)
    conditions: list[Condition] = described(
        "Ready (the pool has nodes that take new pods and a resolved accelerator), Degraded "
        "(some nodes take none), NodesOverlap and others.",
        default_factory=list,
        json_schema_extra=CONDITIONS_LIST,
    )


class AcceleratorPool(Model):
    """A set of nodes with one accelerator type and generation (cluster-scoped)."""

    api_version: Literal["tessera.dev/v1alpha1"] = described("API version.", API_VERSION)
    kind: Literal["AcceleratorPool"] = described("Kind.", "AcceleratorPool")
    metadata: dict[str, Any] = described("Standard object metadata.", default_factory=dict)
    spec: AcceleratorPoolSpec = described("Desired state.")
    status: AcceleratorPoolStatus | None = described("Observed state.", None)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))


# --- Workload ------------------------------------------------------------------------------
