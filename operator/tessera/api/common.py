"""What both kinds share: the API group and labels, patterns, enums, the frozen camelCase
base model, label selectors, tolerations, conditions, durations. Pure data."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "tessera.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Label keys that Tessera writes on the pods it creates.
WORKLOAD_LABEL = f"{GROUP}/workload"
POOL_LABEL = f"{GROUP}/pool"
REPLICA_LABEL = f"{GROUP}/replica"
# On every AcceleratorPool: its deletion waits until no workload holds the pool (batch work
# finished, services moved away), as a draining pool's would.
POOL_FINALIZER = f"{GROUP}/pool-protection"
# The Workload generation a pod was built from: pods of an earlier spec are never adopted
# as a placement the status does not record yet (tessera.world.World.stale_pods).
GENERATION_ANNOTATION = f"{GROUP}/generation"
# The hash of the template (and variants, distributed settings) a pod was made from: a
# service's pods of another hash are replaced one at a time (a rollout).
TEMPLATE_HASH_ANNOTATION = f"{GROUP}/template-hash"

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
# A service's replicas, template, variants and distributed settings may change (a scale, a
# rollout); a batch workload's may not.
IMMUTABLE_WHILE_PLACED = ("accelerator",)
IMMUTABLE_FOR_BATCH_WHILE_PLACED = ("replicas", "template", "variants", "distributed")


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


class Model(BaseModel):
    """Frozen, camelCase on the wire, tolerant of fields added by newer versions."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_enum_values=False,
    )


def described(description: str, default: Any = ..., **kwargs: Any) -> Any:
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
SET_LIST = {"x-kubernetes-list-type": "set"}
# Conditions are keyed by type, like every metav1.Condition list.
CONDITIONS_LIST = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


def set_of(description: str, max_items: int) -> Any:
    """A list field of unique scalars, empty by default."""
    return described(
        description, default_factory=list, max_length=max_items, json_schema_extra=SET_LIST
    )


ModelName = Annotated[str, Field(pattern=MODEL_PATTERN, max_length=63)]
FeatureName = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)]
PoolName = Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=MAX_NAME_LENGTH)]


# --- Shared Kubernetes shapes -------------------------------------------------------------


class LabelSelectorRequirement(Model):
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

    key: str = described("The label key the selector applies to.", min_length=1, max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = described(
        "How the key relates to the values: In, NotIn, Exists or DoesNotExist."
    )
    values: list[Annotated[str, Field(max_length=63)]] = described(
        "Values for In and NotIn; must be empty for Exists and DoesNotExist.",
        default_factory=list,
        max_length=64,
    )


class LabelSelector(Model):
    """A Kubernetes label selector: matchLabels and matchExpressions, ANDed together."""

    match_labels: dict[str, Annotated[str, Field(max_length=63)]] = described(
        "Labels that must all be present with exactly these values.",
        default_factory=dict,
        max_length=64,
    )
    match_expressions: list[LabelSelectorRequirement] = described(
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


class Toleration(Model):
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

    key: str | None = described(
        "The taint key to tolerate; empty with Exists matches all.", None, max_length=317
    )
    operator: Literal["Equal", "Exists"] = described(
        "Equal matches key and value; Exists matches any value.", "Equal"
    )
    value: str | None = described(
        "The taint value to match when operator is Equal.", None, max_length=63
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = described(
        "The taint effect to tolerate: NoSchedule, PreferNoSchedule or NoExecute; empty "
        "tolerates all effects.",
        None,
    )
    toleration_seconds: int | None = described(
        "How long a NoExecute taint is tolerated before eviction.", None, ge=0
    )


class EnvVar(Model):
    """A literal environment variable for a vendor variant."""

    name: str = described("Variable name.", pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=253)
    value: str = described("Variable value.", "")


class Condition(Model):
    """A metav1.Condition: the latest observation of one aspect of the object's state."""

    type: str = described(
        "Condition type, CamelCase, e.g. Ready or Placed.",
        max_length=316,
        pattern=CONDITION_TYPE_PATTERN,
    )
    status: Literal["True", "False", "Unknown"] = described("True, False or Unknown.")
    reason: str = described(
        "CamelCase reason for the last transition, e.g. NodesReady.",
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON_PATTERN,
    )
    message: str = described("Human-readable details.", "", max_length=32768)
    observed_generation: int | None = described(
        "The .metadata.generation this condition was set from.", None, ge=0
    )
    last_transition_time: datetime = described("When the status last changed.")


# --- AcceleratorPool ---------------------------------------------------------------------


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as `6h`, `1h30m` or `90m` (the schema's pattern)."""
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90m, 6h or 1h30m)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
