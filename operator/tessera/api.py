"""The public API: pydantic models of AcceleratorPool and Workload (spec and status).
Pure data; imports nothing from Kubernetes, kopf or the other layers. CRDs are generated from it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

GROUP = "tessera.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Label keys that Tessera writes on the pods it creates.
WORKLOAD_LABEL = f"{GROUP}/workload"
POOL_LABEL = f"{GROUP}/pool"
REPLICA_LABEL = f"{GROUP}/replica"
# The Workload generation a pod was built from: pods of an earlier spec are never adopted
# as a placement the status does not record yet (tessera.world.World.stale_pods).
GENERATION_ANNOTATION = f"{GROUP}/generation"

# Extended resources that identify accelerators: a workload's template may not request
# them itself, because Tessera adds the pool's resource when it places the pods.
ACCELERATOR_RESOURCE_PATTERN = (
    r"^(nvidia\.com|amd\.com|habana\.ai|gpu\.intel\.com|aws\.amazon\.com)/.+$|^google\.com/tpu$"
)
EXTENDED_RESOURCE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
SOFTWARE_KEY_PATTERN = r"^[a-z][a-z0-9-]{0,31}$"
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){0,3}$"
CONSTRAINT_PATTERN = r"^(>=|<=|==|>|<|=|~)?\s*[0-9]+(\.[0-9]+){0,3}$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(s|m|h|d))+$"
# metav1.Condition's own patterns, so a condition the operator writes is one kubectl accepts.
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

# Names of Tessera objects become label values on pods (tessera.dev/pool, tessera.dev/workload),
# and label values are at most 63 characters.
MAX_NAME_LENGTH = 63

# Workload spec fields that may not change while the workload is placed (status.pool set):
# its pods are already running with them. Delete and recreate the Workload to change them.
IMMUTABLE_WHILE_PLACED = ("replicas", "accelerator", "template", "variants")


class Vendor(StrEnum):
    """Who makes the accelerator; `other` admits hardware the catalog does not know."""

    NVIDIA = "nvidia"
    AMD = "amd"
    INTEL = "intel"
    GOOGLE = "google"
    AWS = "aws"
    OTHER = "other"


class Precision(StrEnum):
    """Numeric formats, widest first."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    FP4 = "fp4"


class Objective(StrEnum):
    """What the scorer optimises when no custom weights are given."""

    PERFORMANCE = "performance"
    COST = "cost"
    ENERGY = "energy"
    BALANCED = "balanced"


class Profile(StrEnum):
    """Which roofline bound dominates the workload: peak FLOPS or memory bandwidth."""

    COMPUTE = "compute"
    MEMORY = "memory"


class Phase(StrEnum):
    """Where a Workload is in its life."""

    PENDING = "Pending"
    PLACED = "Placed"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class _Model(BaseModel):
    """Frozen, camelCase on the wire, tolerant of fields added by newer versions."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_enum_values=False,
    )


def _field(description: str, default: Any = ..., **kwargs: Any) -> Any:
    """A field with a mandatory description (it becomes `kubectl explain` text)."""
    return Field(default, description=description, **kwargs)


def cel(
    rule: str,
    message: str,
    *,
    field_path: str | None = None,
    reason: str | None = None,
    message_expression: str | None = None,
) -> dict[str, str]:
    """One CEL rule for `x-kubernetes-validations`: the API server enforces it on every write."""
    out = {"rule": rule, "message": message}
    if message_expression:
        out["messageExpression"] = message_expression
    if field_path:
        out["fieldPath"] = field_path
    if reason:
        out["reason"] = reason
    return out


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """JSON Schema extra carrying CEL rules; the CRD generator copies it into the schema."""
    return {"x-kubernetes-validations": list(rules)}


# Scalar lists whose items are unique: server-side apply merges them as sets, and the API
# server rejects duplicates.
_SET = {"x-kubernetes-list-type": "set"}
# Conditions are keyed by type, like every metav1.Condition list.
CONDITIONS_LIST = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


def _set(description: str, max_items: int) -> Any:
    """A list field of unique scalars, empty by default."""
    return _field(description, default_factory=list, max_length=max_items, json_schema_extra=_SET)


ModelName = Annotated[str, Field(pattern=MODEL_PATTERN, max_length=63)]
FeatureName = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)]
PoolName = Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=MAX_NAME_LENGTH)]


# --- Shared Kubernetes shapes -------------------------------------------------------------


class LabelSelectorRequirement(_Model):
    """One expression of a label selector."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0)"
                " : (!has(self.values) || size(self.values) == 0)",
                "values must be non-empty for operator In and NotIn, and empty for Exists and "
                "DoesNotExist",
                field_path=".values",
            )
        )
    )

    key: str = _field("The label key the selector applies to.", min_length=1, max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = _field(
        "How the key relates to the values: In, NotIn, Exists or DoesNotExist."
    )
    values: list[Annotated[str, Field(max_length=63)]] = _field(
        "Values for In and NotIn; must be empty for Exists and DoesNotExist.",
        default_factory=list,
        max_length=64,
    )


class LabelSelector(_Model):
    """A Kubernetes label selector: matchLabels and matchExpressions, ANDed together."""

    match_labels: dict[str, Annotated[str, Field(max_length=63)]] = _field(
        "Labels that must all be present with exactly these values.",
        default_factory=dict,
        max_length=64,
    )
    match_expressions: list[LabelSelectorRequirement] = _field(
        "Expressions that must all hold.", default_factory=list, max_length=32
    )

    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def label_keys(self) -> set[str]:
        """The label keys the selector reads: whether it matches depends on these alone."""
        return {*self.match_labels, *(r.key for r in self.match_expressions)}

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: every matchLabels pair and every expression must hold."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and not (present and labels[req.key] in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True


class Toleration(_Model):
    """A pod toleration, copied onto every pod placed in the pool."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.operator != 'Exists' || !has(self.value) || self.value == ''",
                "value must be empty when operator is Exists",
                field_path=".value",
            ),
            cel(
                "self.operator == 'Exists' || (has(self.key) && self.key != '')",
                "key may be empty only with operator Exists, which tolerates every taint",
                field_path=".key",
            ),
        )
    )

    key: str | None = _field(
        "The taint key to tolerate; empty with Exists matches all.", None, max_length=317
    )
    operator: Literal["Equal", "Exists"] = _field(
        "Equal matches key and value; Exists matches any value.", "Equal"
    )
    value: str | None = _field(
        "The taint value to match when operator is Equal.", None, max_length=63
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = _field(
        "The taint effect to tolerate: NoSchedule, PreferNoSchedule or NoExecute; empty "
        "tolerates all effects.",
        None,
    )
    toleration_seconds: int | None = _field(
        "How long a NoExecute taint is tolerated before eviction.", None, ge=0
    )


class EnvVar(_Model):
    """A literal environment variable for a vendor variant."""

    name: str = _field("Variable name.", pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=253)
    value: str = _field("Variable value.", "")


class Condition(_Model):
    """A metav1.Condition: the latest observation of one aspect of the object's state."""

    type: str = _field(
        "Condition type, CamelCase, e.g. Ready or Placed.",
        max_length=316,
        pattern=CONDITION_TYPE_PATTERN,
    )
    status: Literal["True", "False", "Unknown"] = _field("True, False or Unknown.")
    reason: str = _field(
        "CamelCase reason for the last transition, e.g. NodesReady.",
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON_PATTERN,
    )
    message: str = _field("Human-readable details.", "", max_length=32768)
    observed_generation: int | None = _field(
        "The .metadata.generation this condition was set from.", None, ge=0
    )
    last_transition_time: datetime = _field("When the status last changed.")


# --- AcceleratorPool ---------------------------------------------------------------------


class PoolAccelerator(_Model):
    """What accelerator the pool's nodes carry; catalog facts fill what is not given here."""

    model_config = ConfigDict(
        json_schema_extra=validations(
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
            )
        )
    )

    vendor: Vendor = _field("Who makes the accelerator: nvidia, amd, intel, google, aws or other.")
    model: str | None = _field(
        "Catalog model key, e.g. H100-SXM5-80GB. Optional when the nodes' labels identify it; "
        "a name the catalog does not know needs memoryGiB and peakTFLOPS.",
        None,
        pattern=MODEL_PATTERN,
        max_length=63,
    )
    resource_name: str | None = _field(
        "The device plugin's extended resource, e.g. nvidia.com/gpu. Defaults from the catalog.",
        None,
        pattern=EXTENDED_RESOURCE_PATTERN,
        max_length=253,
    )
    memory_gib: float | None = _field(
        "Memory per device in GiB, overriding the catalog.", None, gt=0, alias="memoryGiB"
    )
    memory_bandwidth_tbps: float | None = _field(
        "Memory bandwidth per device in TB/s, overriding the catalog.",
        None,
        gt=0,
        alias="memoryBandwidthTBps",
    )
    peak_tflops: dict[Precision, Annotated[float, Field(gt=0)]] = _field(
        "Peak dense TFLOPS per precision (fp32, tf32, bf16, fp16, fp8, int8, fp4), overriding "
        "the catalog. With memoryGiB, required for hardware the catalog does not know.",
        default_factory=dict,
        alias="peakTFLOPS",
        min_length=1,
        max_length=len(Precision),
    )


class AcceleratorPoolSpec(_Model):
    """Desired state of an AcceleratorPool: which nodes, which accelerator, on what terms."""

    accelerator: PoolAccelerator = _field("The accelerator every node of the pool carries.")
    node_selector: LabelSelector = _field(
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
    tolerations: list[Toleration] = _field(
        "Tolerations added to every pod placed in this pool (for the nodes' taints).",
        default_factory=list,
        max_length=32,
    )
    cost_per_device_hour: float | None = _field(
        "Price of one device for one hour, overriding the catalog's default price.", None, ge=0
    )
    power_watts: float | None = _field(
        "Power per device in watts, overriding the catalog's TDP.", None, gt=0
    )
    software: dict[
        Annotated[str, Field(pattern=SOFTWARE_KEY_PATTERN)],
        Annotated[str, Field(pattern=VERSION_PATTERN, max_length=32)],
    ] = _field(
        "Software versions installed on the nodes, by name: e.g. {cuda: '12.4', driver: "
        "'550.54'}, {rocm: '6.2'}, {neuron: '2.20'}. Names are lowercase; versions are dotted "
        "numbers.",
        default_factory=dict,
        max_length=32,
    )
    features: list[FeatureName] = _set(
        "Capabilities beyond the catalog's, e.g. nvlink, infiniband.", 32
    )
    preference: int = _field(
        "Admin bias added to every score on this pool, from -100 (avoid) to 100 (prefer).",
        0,
        ge=-100,
        le=100,
    )
    draining: bool = _field(
        "No new placements; running service workloads migrate to other pools, one pod at a time.",
        False,
    )
    namespace_selector: LabelSelector | None = _field(
        "Which namespaces may place workloads here; unset allows all. Select by name with the "
        "kubernetes.io/metadata.name label.",
        None,
    )


class ResolvedAccelerator(_Model):
    """The accelerator facts the pool is scored with, after catalog, labels and overrides."""

    vendor: Vendor = _field("Vendor.")
    model: str = _field("Model key, or Unknown when neither spec nor labels identify it.")
    source: Literal["spec", "labels", "unknown"] = _field(
        "Where the model came from: the spec, the nodes' labels, or nowhere."
    )
    resource_name: str = _field("Device-plugin resource requested for each device.")
    memory_gib: float = _field("Memory per device in GiB.", 0.0, alias="memoryGiB")
    peak_tflops: dict[Precision, float] = _field(
        "Peak dense TFLOPS per precision.",
        default_factory=dict,
        alias="peakTFLOPS",
        max_length=len(Precision),
    )
    cost_per_device_hour: float = _field("Price per device-hour used in scoring.", 0.0)
    power_watts: float = _field("Power per device in watts used in scoring.", 0.0)


class DeviceCounts(_Model):
    """Devices of the pool's resource summed over its nodes."""

    capacity: int = _field("Devices the nodes report as capacity.", 0, ge=0)
    allocatable: int = _field("Devices the nodes report as allocatable.", 0, ge=0)
    allocated: int = _field(
        "Devices requested by non-terminal pods on the nodes, plus Tessera pods not yet bound.",
        0,
        ge=0,
    )
    available: int = _field("Allocatable minus allocated, on Ready nodes.", 0, ge=0)


class PoolSummary(_Model):
    """Pre-formatted figures for `kubectl get` columns."""

    nodes: str = _field("Ready/total nodes, e.g. 3/4.", "0/0")
    devices: str = _field("Available/allocatable devices, e.g. 20/32.", "0/0")


class AcceleratorPoolStatus(_Model):
    """Observed state of an AcceleratorPool."""

    observed_generation: int | None = _field("The generation this status describes.", None)
    accelerator: ResolvedAccelerator | None = _field("The accelerator as resolved.", None)
    nodes: int = _field("Nodes the selector matches.", 0, ge=0)
    ready_nodes: int = _field("Matched nodes that are Ready.", 0, ge=0)
    node_names: list[str] = _field("Names of the matched nodes, sorted.", default_factory=list)
    devices: DeviceCounts = _field("Device counts.", default_factory=DeviceCounts)
    summary: PoolSummary = _field("Figures for kubectl columns.", default_factory=PoolSummary)
    conditions: list[Condition] = _field(
        "Ready (the pool has Ready nodes and a resolved accelerator), Degraded and others.",
        default_factory=list,
        json_schema_extra=CONDITIONS_LIST,
    )


class AcceleratorPool(_Model):
    """A set of nodes with one accelerator type and generation (cluster-scoped)."""

    api_version: Literal["tessera.dev/v1alpha1"] = _field("API version.", API_VERSION)
    kind: Literal["AcceleratorPool"] = _field("Kind.", "AcceleratorPool")
    metadata: dict[str, Any] = _field("Standard object metadata.", default_factory=dict)
    spec: AcceleratorPoolSpec = _field("Desired state.")
    status: AcceleratorPoolStatus | None = _field("Observed state.", None)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))


# --- Workload ------------------------------------------------------------------------------


def _resource_list(what: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"{what}, by resource name (cpu, memory, ...). Accelerator resources "
        "may not appear here: Tessera adds the pool's device resource.",
        "maxProperties": 32,
        "additionalProperties": {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        },
    }


def _no_accelerator(key: str) -> dict[str, str]:
    """Forbids accelerator resources in a container's requests or limits."""
    return cel(
        f"!has(self.{key}) || self.{key}.all(r, !r.matches(r'{ACCELERATOR_RESOURCE_PATTERN}'))",
        f"{key} may not name accelerator resources: Tessera adds the pool's device resource "
        "when it places the pods; set spec.accelerator.count instead",
        message_expression=(
            f"'{key} may not name ' + self.{key}.filter(r, "
            f"r.matches(r'{ACCELERATOR_RESOURCE_PATTERN}'))[0] + ': Tessera adds the pool\\'s "
            "device resource when it places the pods; set spec.accelerator.count instead'"
        ),
        field_path=f".{key}",
        reason="FieldValueForbidden",
    )


_CONTAINER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A core/v1 Container. Fields not listed here are kept as written and "
    "validated when the pods are created.",
    "x-kubernetes-preserve-unknown-fields": True,
    "required": ["name"],
    "properties": {
        "name": {
            "type": "string",
            "description": "Container name, a DNS label unique within the pod.",
            "pattern": DNS_LABEL_PATTERN,
            "maxLength": 63,
        },
        "image": {
            "type": "string",
            "description": "Container image; a variant may replace it on the first container.",
        },
        "resources": {
            "type": "object",
            "description": "CPU and memory requests and limits. Accelerator resources are "
            "Tessera's to add (spec.accelerator.count devices of the pool's resource).",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "requests": _resource_list("Minimum resources"),
                "limits": _resource_list("Maximum resources"),
            },
            "x-kubernetes-validations": [_no_accelerator("requests"), _no_accelerator("limits")],
        },
    },
}

# The pod template's schema is partial: it declares what the API server must check before
# Tessera accepts the workload (CEL sees only declared fields) and keeps everything else.
POD_TEMPLATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "metadata": {
            "type": "object",
            "description": "Labels and annotations for the pods; Tessera adds its tessera.dev/* "
            "labels.",
            "x-kubernetes-preserve-unknown-fields": True,
        },
        "spec": {
            "type": "object",
            "description": "A core/v1 PodSpec. Tessera adds node affinity for the pool, the "
            "pool's tolerations, the device request and the TESSERA_* environment.",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "containers": {
                    "type": "array",
                    "description": "The pod's containers; at least one. Each gets the "
                    "TESSERA_* environment; the first gets the devices and the variant.",
                    "maxItems": 32,
                    "items": _CONTAINER_SCHEMA,
                },
                "initContainers": {
                    "type": "array",
                    "description": "Init containers, run in order before the containers.",
                    "maxItems": 32,
                    "items": _CONTAINER_SCHEMA,
                },
                "nodeName": {
                    "type": "string",
                    "description": "Must not be set: Tessera chooses the pool and the scheduler "
                    "chooses the node.",
                },
                "restartPolicy": {
                    "type": "string",
                    "description": "Always: a service, recreated when a pod vanishes and "
                    "migrated off draining pools. OnFailure or Never: a batch job that runs "
                    "to completion. Defaults to Always.",
                    "enum": ["Always", "OnFailure", "Never"],
                },
            },
            "x-kubernetes-validations": [
                cel(
                    "!has(self.nodeName) || self.nodeName == ''",
                    "template may not set nodeName: Tessera chooses the pool and the scheduler "
                    "chooses the node",
                    field_path=".nodeName",
                    reason="FieldValueForbidden",
                ),
            ],
        },
    },
    "x-kubernetes-validations": [
        cel(
            "has(self.spec) && has(self.spec.containers) && size(self.spec.containers) > 0",
            "template needs at least one container in spec.containers",
            field_path=".spec.containers",
            reason="FieldValueRequired",
        ),
    ],
}


class AcceleratorNeeds(_Model):
    """What each pod of the workload needs from an accelerator."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.models) || !has(self.excludeModels) || "
                "!self.models.exists(m, m in self.excludeModels)",
                "models and excludeModels must not overlap",
                message_expression="'models and excludeModels must not overlap: ' + "
                "self.models.filter(m, m in self.excludeModels)[0] + ' is in both'",
                field_path=".excludeModels",
            )
        )
    )

    count: int = _field("Devices per pod; all on one node.", 1, ge=1, le=64)
    min_memory_gib: float | None = _field(
        "Minimum memory per device in GiB.", None, gt=0, alias="minMemoryGiB"
    )
    precision: Precision = _field(
        "Numeric precision the workload computes in (fp32, tf32, bf16, fp16, fp8, int8 or "
        "fp4); the pool must support it.",
        Precision.BF16,
    )
    profile: Profile = _field(
        "compute: scored by peak FLOPS at the precision; memory: by memory bandwidth.",
        Profile.COMPUTE,
    )
    vendors: list[Vendor] = _set("Allowed vendors; empty allows any.", len(Vendor))
    models: list[ModelName] = _set("Allowed models (catalog keys); empty allows any.", 64)
    exclude_models: list[ModelName] = _set("Models never to use; must not overlap models.", 64)
    pools: list[PoolName] = _set("Allowed pools by name; empty allows any.", 64)
    features: list[FeatureName] = _set("Capabilities the pool must have, e.g. nvlink.", 32)
    software: dict[
        Annotated[str, Field(pattern=SOFTWARE_KEY_PATTERN)],
        Annotated[str, Field(pattern=CONSTRAINT_PATTERN, max_length=40)],
    ] = _field(
        "Version constraints on the pool's software, e.g. {cuda: '>=12.1', rocm: '>=6.0'}. "
        "A constraint applies only to pools that have that software's vendor stack.",
        default_factory=dict,
        max_length=32,
    )
    throughput: dict[
        Annotated[str, Field(pattern=MODEL_PATTERN)], Annotated[float, Field(gt=0)]
    ] = _field(
        "Measured relative throughput per model (any unit, higher is faster); beats the "
        "catalog's estimate where given.",
        default_factory=dict,
        max_length=64,
    )


class Weights(_Model):
    """Custom weights of the score terms; they need not sum to 1, but not all may be 0."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(has(self.performance) && self.performance > 0.0) || "
                "(has(self.cost) && self.cost > 0.0) || (has(self.energy) && self.energy > 0.0)",
                "weights must not all be zero: give performance, cost or energy a weight above 0",
            )
        )
    )

    performance: float = _field("Weight of speed, from 0 to 1.", 0.0, ge=0, le=1)
    cost: float = _field("Weight of cost per unit of work, from 0 to 1.", 0.0, ge=0, le=1)
    energy: float = _field("Weight of energy per unit of work, from 0 to 1.", 0.0, ge=0, le=1)


class PlacementPolicy(_Model):
    """How long to wait for the scheduler (or the API server) before trying the next pool."""

    fallback_after_seconds: int = _field(
        "Pods the scheduler leaves Unschedulable, or the API server refuses (a quota, an "
        "admission policy), this long are withdrawn and the next pool is tried; 0 disables "
        "fallback.",
        300,
        ge=0,
        le=86400,
    )


class Variant(_Model):
    """What changes in the pod when the workload lands on a given vendor or model."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.image) || has(self.env) || has(self.args) || has(self.command)",
                "a variant must set image, env, args or command",
                reason="FieldValueRequired",
            )
        )
    )

    image: str | None = _field(
        "Container image for the first container.", None, min_length=1, max_length=1024
    )
    env: list[EnvVar] = _field(
        "Environment variables added to every container.", default_factory=list, max_length=64
    )
    args: list[str] | None = _field("Arguments replacing the first container's args.", None)
    command: list[str] | None = _field("Command replacing the first container's command.", None)


class WorkloadSpec(_Model):
    """Desired state of a Workload: a pod template plus what it needs and what it optimises."""

    replicas: int = _field(
        "Pods; placed as a gang, all or none. Immutable while the workload is placed.",
        1,
        ge=1,
        le=1024,
    )
    accelerator: AcceleratorNeeds = _field(
        "What each pod needs from an accelerator. Immutable while the workload is placed.",
        default_factory=AcceleratorNeeds,
        json_schema_extra={"default": {}},
    )
    objective: Objective = _field(
        "What to optimise: performance, cost, energy or balanced.", Objective.BALANCED
    )
    weights: Weights | None = _field("Custom weights; override the objective when set.", None)
    priority: int = _field(
        "Higher is placed first; equal priorities go oldest first.", 0, ge=-1000, le=1000
    )
    estimated_duration: str | None = _field(
        "Expected run time on the best pool, e.g. 6h or 90m; lets placement weigh waiting for "
        "a faster pool against starting now on a slower one.",
        None,
        pattern=DURATION_PATTERN,
        max_length=32,
    )
    placement: PlacementPolicy = _field(
        "Fallback policy.",
        default_factory=PlacementPolicy,
        json_schema_extra={"default": {}},
    )
    template: Annotated[dict[str, Any], WithJsonSchema(POD_TEMPLATE_SCHEMA)] = _field(
        "Pod template (a core/v1 PodTemplateSpec). Tessera adds node affinity, device "
        "requests, tolerations, the vendor variant and TESSERA_* environment variables. "
        "Immutable while the workload is placed."
    )
    variants: dict[str, Variant] = _field(
        "Per vendor or model (a model key beats a vendor key): image, env and args to use "
        "there. Keys are vendors (nvidia, amd, intel, google, aws, other) or catalog model "
        "names. Immutable while the workload is placed.",
        default_factory=dict,
        max_length=32,
    )

    @property
    def restart_policy(self) -> str:
        return str(self.template.get("spec", {}).get("restartPolicy", "Always"))

    @property
    def is_service(self) -> bool:
        """Always-restart pods are services: recreated when they vanish, migrated off drains."""
        return self.restart_policy == "Always"


class ScoreBreakdown(_Model):
    """How a pool's score was made: each normalised term in [0, 1] and the total."""

    performance: float = _field("Normalised speed (1 = fastest feasible pool).", 0.0)
    cost: float = _field("Normalised cheapness per unit of work (1 = cheapest).", 0.0)
    energy: float = _field("Normalised frugality per unit of work (1 = least energy).", 0.0)
    preference: float = _field("Admin preference contribution.", 0.0)
    throughput: float = _field("Estimated throughput per device the terms were made from.", 0.0)
    contention: float = _field(
        "Points subtracted because other pending work values this pool's free devices more "
        "(their shadow price); 0 when the pool is not contended.",
        0.0,
    )


class Candidate(_Model):
    """One pool as the scorer saw it for this workload."""

    pool: str = _field("Pool name.")
    accelerator: str = _field("Model key of the pool's accelerator.", "")
    feasible: bool = _field("Whether the pool can run the workload at all.")
    fits_now: bool = _field("Whether the pool has room for every replica now.", False)
    score: float = _field("Total score, 0-100 plus preference; higher is better.", 0.0)
    breakdown: ScoreBreakdown | None = _field("The terms of the score.", None)
    reasons: list[str] = _field("Why the pool is ruled out or waits.", default_factory=list)


class Assignment(_Model):
    """Where one replica of the workload goes."""

    replica: int = _field("Replica index, from 0.", ge=0)
    node: str = _field("Node the replica's devices were reserved on.")


class ExcludedPool(_Model):
    """A pool withdrawn from after the scheduler could not bind pods there."""

    pool: str = _field("Pool name.")
    reason: str = _field("Why it was withdrawn from.")


class WorkloadSummary(_Model):
    """Pre-formatted figures for `kubectl get` columns."""

    ready: str = _field("Ready/desired replicas, e.g. 2/4.", "0/0")


class WorkloadStatus(_Model):
    """Observed state of a Workload: where it was placed, why, and how its pods are doing."""

    observed_generation: int | None = _field("The generation this status describes.", None)
    phase: Phase = _field("Pending, Placed, Running, Succeeded or Failed.", Phase.PENDING)
    pool: str | None = _field(
        "Pool the workload is placed on. While set, replicas, accelerator, template and "
        "variants are immutable.",
        None,
    )
    accelerator: str | None = _field("Model key of the accelerator it is placed on.", None)
    vendor: Vendor | None = _field("Vendor of that accelerator.", None)
    score: float | None = _field("Score of the chosen pool.", None)
    assignments: list[Assignment] = _field(
        "Node reserved for each replica by the placement decision.", default_factory=list
    )
    candidates: list[Candidate] = _field(
        "Pools considered, best first, capped at 8: the feasible ones, then the near misses "
        "(pools the workload's own pools, vendors and models let through; every pool when "
        "none passes them).",
        default_factory=list,
    )
    excluded_pools: list[ExcludedPool] = _field(
        "Pools withdrawn from after a fallback; not tried again.", default_factory=list
    )
    replicas: int = _field("Pods that exist.", 0, ge=0)
    ready_replicas: int = _field("Pods that are Ready (or Succeeded, for batch).", 0, ge=0)
    summary: WorkloadSummary = _field(
        "Figures for kubectl columns.", default_factory=WorkloadSummary
    )
    message: str = _field("One line on the current state.", "")
    placed_at: datetime | None = _field("When the placement decision was made.", None)
    expected_finish: datetime | None = _field(
        "When the run is expected to end, given an estimatedDuration: placedAt plus the "
        "estimate scaled to the chosen pool's speed (the estimate is for the fastest pool). "
        "Placement counts the devices free from then on.",
        None,
    )
    conditions: list[Condition] = _field(
        "Placed (a pool was chosen), Ready (every replica is ready) and others.",
        default_factory=list,
        json_schema_extra=CONDITIONS_LIST,
    )


class Workload(_Model):
    """A pod template plus accelerator needs and an objective (namespaced)."""

    api_version: Literal["tessera.dev/v1alpha1"] = _field("API version.", API_VERSION)
    kind: Literal["Workload"] = _field("Kind.", "Workload")
    metadata: dict[str, Any] = _field("Standard object metadata.", default_factory=dict)
    spec: WorkloadSpec = _field("Desired state.")
    status: WorkloadStatus | None = _field("Observed state.", None)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as `6h`, `1h30m` or `90m` (the schema's pattern)."""
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90m, 6h or 1h30m)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
