"""The Workload kind: a pod template plus accelerator needs, an objective, a fallback and a
failure policy, and how its replicas find each other. Its status is in
tessera.api.workload_status. Pure data; imports tessera.api.common."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema

from tessera.api.common import (
    ACCELERATOR_RESOURCE_PATTERN,
    API_VERSION,
    CONSTRAINT_PATTERN,
    DNS_LABEL_PATTERN,
    DURATION_PATTERN,
    MODEL_PATTERN,
    SOFTWARE_KEY_PATTERN,
    EnvVar,
    FeatureName,
    Model,
    ModelName,
    Objective,
    PoolName,
    Precision,
    Profile,
    Vendor,
    cel,
    described,
    set_of,
    validations,
)
from tessera.api.workload_status import WorkloadStatus


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


class AcceleratorNeeds(Model):
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

    count: int = described("Devices per pod; all on one node.", 1, ge=1, le=64)
    min_memory_gib: float | None = described(
        "Minimum memory per device in GiB.", None, gt=0, alias="minMemoryGiB"
    )
    precision: Precision = described(
        "Numeric precision the workload computes in (fp32, tf32, bf16, fp16, fp8, int8 or "
        "fp4); the pool must support it.",
        Precision.BF16,
    )
    profile: Profile = described(
        "compute: scored by peak FLOPS at the precision; memory: by memory bandwidth.",
        Profile.COMPUTE,
    )
    vendors: list[Vendor] = set_of("Allowed vendors; empty allows any.", len(Vendor))
    models: list[ModelName] = set_of("Allowed models (catalog keys); empty allows any.", 64)
    exclude_models: list[ModelName] = set_of("Models never to use; must not overlap models.", 64)
    pools: list[PoolName] = set_of("Allowed pools by name; empty allows any.", 64)
    features: list[FeatureName] = set_of("Capabilities the pool must have, e.g. nvlink.", 32)
    software: dict[
        Annotated[str, Field(pattern=SOFTWARE_KEY_PATTERN)],
        Annotated[str, Field(pattern=CONSTRAINT_PATTERN, max_length=40)],
    ] = described(
        "Version constraints on the pool's software, e.g. {cuda: '>=12.1', rocm: '>=6.0'}. "
        "A constraint applies only to pools that have that software's vendor stack.",
        default_factory=dict,
        max_length=32,
    )
    throughput: dict[
        Annotated[str, Field(pattern=MODEL_PATTERN)], Annotated[float, Field(gt=0)]
    ] = described(
        "Measured relative throughput per model (any unit, higher is faster); beats the "
        "catalog's estimate where given.",
        default_factory=dict,
        max_length=64,
    )


class Weights(Model):
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

    performance: float = described("Weight of speed, from 0 to 1.", 0.0, ge=0, le=1)
    cost: float = described("Weight of cost per unit of work, from 0 to 1.", 0.0, ge=0, le=1)
    energy: float = described("Weight of energy per unit of work, from 0 to 1.", 0.0, ge=0, le=1)


class PlacementPolicy(Model):
    """How long to wait for the scheduler (or the API server) before trying the next pool."""

    fallback_after_seconds: int = described(
        "Pods the scheduler leaves Unschedulable, or the API server refuses (a quota, an "
        "admission policy), this long are withdrawn and the next pool is tried; 0 disables "
        "fallback.",
        300,
        ge=0,
        le=86400,
    )


class Framework(StrEnum):
    """The distributed runtime whose rendezvous environment the pods get."""

    PYTORCH = "pytorch"
    JAX = "jax"
    NONE = "none"


class Distributed(Model):
    """How the replicas find each other: every workload of more than one replica gets a
    headless Service and a stable hostname per pod; a framework adds the environment its
    launcher reads (tessera.rendezvous; the table is in docs/distributed.md)."""

    framework: Framework = described(
        "pytorch: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK, NNODES, "
        "NPROC_PER_NODE and torchrun's PET_* twins; jax: JAX_COORDINATOR_ADDRESS, "
        "JAX_NUM_PROCESSES, JAX_PROCESS_ID; none: only the Service and hostnames. A TPU or "
        "Trainium pool adds what its runtime needs on top, whatever the framework.",
        Framework.NONE,
    )
    port: int | None = described(
        "Rendezvous port on replica 0, declared on the first container and the Service; "
        "defaults to the framework's own (29500 for pytorch, 1234 for jax).",
        None,
        ge=1,
        le=65535,
    )


class FailurePolicy(Model):
    """What happens when a pod of a batch gang fails."""

    backoff_limit: int = described(
        "Whole-gang restarts allowed after a pod of a batch workload fails (or is lost with "
        "its node): every pod is deleted and the gang created again, on the same pool while "
        "its nodes take pods, else placed again. Past the limit the Workload is Failed. "
        "0 fails at the first failure. Services ignore it: their pods are replaced one by one.",
        0,
        ge=0,
        le=100,
    )


class Variant(Model):
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

    image: str | None = described(
        "Container image for the first container.", None, min_length=1, max_length=1024
    )
    env: list[EnvVar] = described(
        "Environment variables added to every container.", default_factory=list, max_length=64
    )
    args: list[str] | None = described("Arguments replacing the first container's args.", None)
    command: list[str] | None = described("Command replacing the first container's command.", None)


class WorkloadSpec(Model):
    """Desired state of a Workload: a pod template plus what it needs and what it optimises."""

    replicas: int = described(
        "Pods; placed as a gang, all or none. A service's may change while placed (kubectl "
        "scale, a HorizontalPodAutoscaler): new replicas go on its pool, the highest go "
        "first on a scale down. A batch workload's is immutable while placed.",
        1,
        ge=1,
        le=1024,
    )
    accelerator: AcceleratorNeeds = described(
        "What each pod needs from an accelerator. Immutable while the workload is placed.",
        default_factory=AcceleratorNeeds,
        json_schema_extra={"default": {}},
    )
    objective: Objective = described(
        "What to optimise: performance, cost, energy or balanced.", Objective.BALANCED
    )
    weights: Weights | None = described("Custom weights; override the objective when set.", None)
    priority: int = described(
        "Higher is placed first; equal priorities go oldest first.", 0, ge=-1000, le=1000
    )
    estimated_duration: str | None = described(
        "Expected run time on the best pool, e.g. 6h or 90m; lets placement weigh waiting for "
        "a faster pool against starting now on a slower one.",
        None,
        pattern=DURATION_PATTERN,
        max_length=32,
    )
    placement: PlacementPolicy = described(
        "Fallback policy.",
        default_factory=PlacementPolicy,
        json_schema_extra={"default": {}},
    )
    template: Annotated[dict[str, Any], WithJsonSchema(POD_TEMPLATE_SCHEMA)] = described(
        "Pod template (a core/v1 PodTemplateSpec). Tessera adds node affinity, device "
        "requests, tolerations, the vendor variant, a hostname and subdomain, and TESSERA_* "
        "(and rendezvous) environment variables. A service's may change while placed (its "
        "pods are replaced one at a time); a batch workload's is immutable while placed."
    )
    variants: dict[str, Variant] = described(
        "Per vendor or model (a model key beats a vendor key): image, env and args to use "
        "there. Keys are vendors (nvidia, amd, intel, google, aws, other) or catalog model "
        "names. Changes while placed as the template does.",
        default_factory=dict,
        max_length=32,
    )
    distributed: Distributed = described(
        "How the replicas find each other: rendezvous environment for a framework.",
        default_factory=Distributed,
        json_schema_extra={"default": {}},
    )
    failure_policy: FailurePolicy = described(
        "Gang restarts of a batch workload.",
        default_factory=FailurePolicy,
        json_schema_extra={"default": {}},
    )

    @property
    def restart_policy(self) -> str:
        return str(self.template.get("spec", {}).get("restartPolicy", "Always"))

    @property
    def is_service(self) -> bool:
        """Always-restart pods are services: recreated when they vanish, migrated off drains."""
        return self.restart_policy == "Always"


class Workload(Model):
    """A pod template plus accelerator needs and an objective (namespaced)."""

    api_version: Literal["tessera.dev/v1alpha1"] = described("API version.", API_VERSION)
    kind: Literal["Workload"] = described("Kind.", "Workload")
    metadata: dict[str, Any] = described("Standard object metadata.", default_factory=dict)
    spec: WorkloadSpec = described("Desired state.")
    status: WorkloadStatus | None = described("Observed state.", None)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))
