"""CustomResourceDefinitions of Tessera's three kinds, built from tessera.api: what each kind
is (names, scope, subresources, `kubectl get` columns), the CEL rules that need the catalog or
status, and the whole definition. The schema transform is tessera.crd_schema. Imports only
tessera.api, tessera.crd_schema and pydantic (no kopf, kubernetes or catalog)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from tessera import api
from tessera.crd_schema import model_schema, rule_order

# Root-level fields every Kubernetes object has; the API server owns their schema.
_ROOT_PROPERTIES: dict[str, Any] = {
    "apiVersion": {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an "
        "object: tessera.dev/v1alpha1.",
    },
    "kind": {
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object "
        "represents.",
    },
    "metadata": {"type": "object"},  # the API server forbids anything else, even a description
}


def _add_rules(node: dict[str, Any], *rules: dict[str, str]) -> None:
    node.setdefault("x-kubernetes-validations", []).extend(rule_order(r) for r in rules)


def _metadata(kind: str, label: str) -> dict[str, Any]:
    """Root metadata may only restrict name and generateName; names become label values."""
    return {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "description": f"{kind} names are at most {api.MAX_NAME_LENGTH} characters: the "
                f"name becomes the {label} label value on its pods.",
                "maxLength": api.MAX_NAME_LENGTH,
            }
        },
    }


_PLACED = "has(oldSelf.status) && has(oldSelf.status.pool) && oldSelf.status.pool != ''"


def _is_service(obj: str) -> str:
    """CEL: the object's template restarts its pods Always (the default): a service."""
    spec = f"{obj}.spec.template.spec"
    return (
        f"(!has({obj}.spec.template.spec) || !has({spec}.restartPolicy) || "
        f"{spec}.restartPolicy == 'Always')"
    )


def _same(field: str) -> str:
    return (
        f"has(self.spec.{field}) == has(oldSelf.spec.{field}) && "
        f"(!has(self.spec.{field}) || self.spec.{field} == oldSelf.spec.{field})"
    )


def _immutable_while_placed(field: str) -> dict[str, str]:
    """A transition rule at the root: it needs status.pool, which spec-level rules cannot see."""
    return api.cel(
        f"!({_PLACED}) || ({_same(field)})",
        f"spec.{field} is immutable while the workload is placed (status.pool is set): its "
        "pods already run with it; delete and recreate the Workload to change it",
        field_path=f".spec.{field}",
        reason="FieldValueForbidden",
    )


def _immutable_for_batch_while_placed(field: str) -> dict[str, str]:
    """A service (before and after the change) may scale and roll out while placed; a batch
    workload's gang runs as it was made."""
    services = f"{_is_service('oldSelf')} && {_is_service('self')}"
    return api.cel(
        f"!({_PLACED}) || ({services}) || ({_same(field)})",
        f"spec.{field} of a batch workload is immutable while it is placed (status.pool is "
        "set): its gang already runs with it; delete and recreate the Workload to change it "
        "(a service, restartPolicy Always, may change it, and may not become a batch "
        "workload while placed)",
        field_path=f".spec.{field}",
        reason="FieldValueForbidden",
    )


def _pool_model_rules(catalog: Mapping[str, api.Vendor]) -> list[dict[str, str]]:
    """Pool accelerator rules that need the catalog: known models carry their own vendor."""
    vendors = json.dumps({model: str(vendor) for model, vendor in sorted(catalog.items())})
    return [
        api.cel(
            f"!has(self.model) || {vendors}[?self.model].orValue(self.vendor) == self.vendor",
            "model is made by another vendor than the one given",
            message_expression="'model ' + self.model + ' is not made by ' + self.vendor",
            field_path=".vendor",
        ),
        api.cel(
            f"!has(self.model) || self.model in {vendors} || "
            "(has(self.memoryGiB) && has(self.peakTFLOPS))",
            "a model the catalog does not know needs memoryGiB and peakTFLOPS",
            message_expression="'model ' + self.model + ' is not in the catalog: give memoryGiB "
            "and peakTFLOPS so it can be scored, or use a catalog model name'",
            field_path=".model",
        ),
    ]


def _variant_rule(catalog: Mapping[str, api.Vendor]) -> dict[str, str]:
    keys = [str(v) for v in api.Vendor] + sorted(catalog)
    literal = json.dumps(keys)
    return api.cel(
        f"self.all(k, k in {literal})",
        "variant keys must be a vendor (" + ", ".join(str(v) for v in api.Vendor) + ") or a "
        "catalog model name",
        message_expression=f"'variant key ' + self.filter(k, !(k in {literal}))[0] + ' is "
        "neither a vendor (" + ", ".join(str(v) for v in api.Vendor) + ") nor a catalog model "
        "name'",
    )


@dataclass(frozen=True)
class Column:
    """One `kubectl get` column."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0  # 1: only with -o wide

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            out["priority"] = self.priority
        return out


_AGE = Column("Age", "date", ".metadata.creationTimestamp", "Time since creation.")

POOL_COLUMNS = (
    Column("Vendor", "string", ".spec.accelerator.vendor", "Who makes the accelerator."),
    Column("Model", "string", ".status.accelerator.model", "The resolved accelerator model."),
    Column("Nodes", "string", ".status.summary.nodes", "Ready/total nodes."),
    Column("Available", "string", ".status.summary.devices", "Available/allocatable devices."),
    Column("Draining", "boolean", ".spec.draining", "No new placements."),
    _AGE,
    Column(
        "Resource",
        "string",
        ".status.accelerator.resourceName",
        "Device-plugin resource requested for each device.",
        priority=1,
    ),
    Column("Preference", "integer", ".spec.preference", "Admin bias, -100..100.", priority=1),
    Column(
        "Units",
        "number",
        ".status.accelerator.unitsPerDevice",
        "Normalised units one device counts for in AcceleratorQuotas.",
        priority=1,
    ),
)

WORKLOAD_COLUMNS = (
    Column("Pool", "string", ".status.pool", "The pool the workload is placed on."),
    Column("Accelerator", "string", ".status.accelerator", "The accelerator model it runs on."),
    Column("Ready", "string", ".status.summary.ready", "Ready/desired replicas."),
    Column("Phase", "string", ".status.phase", "Pending, Placed, Running, Succeeded or Failed."),
    Column(
        "Reason",
        "string",
        ".status.summary.reason",
        "Why a waiting workload waits, in short (the first reason); empty once placed.",
    ),
    Column(
        "Restarts",
        "integer",
        ".status.restarts",
        "Whole-gang restarts after a pod failed.",
        priority=1,
    ),
    _AGE,
    Column("Score", "number", ".status.score", "Score of the chosen pool.", priority=1),
    Column("Objective", "string", ".spec.objective", "What placement optimises.", priority=1),
    Column(
        "Message",
        "string",
        ".status.message",
        "Where it runs, or why it waits (the nearest pool and what rules it out).",
        priority=1,
    ),
)

QUOTA_COLUMNS = (
    Column("Nominal", "number", ".status.nominal", "Units the quota is entitled to."),
    Column("Used", "number", ".status.used", "Units held by its placed workloads."),
    Column("Borrowed", "number", ".status.borrowed", "Units used above nominal."),
    Column("Waiting", "integer", ".status.waiting", "Its workloads waiting for a placement."),
    _AGE,
    Column("Weight", "number", ".spec.weight", "Fair-sharing weight.", priority=1),
    Column(
        "Namespaces",
        "string",
        ".status.namespaces",
        "The namespaces it governs now.",
        priority=1,
    ),
)


@dataclass(frozen=True)
class Kind:
    """What a CustomResourceDefinition needs beyond the schema."""

    kind: str
    plural: str
    short_name: str
    scope: str
    spec: type[BaseModel]
    status: type[BaseModel]
    description: str
    columns: tuple[Column, ...]
    selectable: tuple[str, ...] = ()
    scalable: bool = False

    @property
    def subresources(self) -> dict[str, Any]:
        """Status always; scale where spec.replicas is the number of pods (kubectl scale, a
        HorizontalPodAutoscaler: the selector it needs is in status.selector)."""
        out: dict[str, Any] = {"status": {}}
        if self.scalable:
            out["scale"] = {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            }
        return out

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{api.GROUP}"


POOL = Kind(
    kind="AcceleratorPool",
    plural="acceleratorpools",
    short_name="acp",
    scope="Cluster",
    spec=api.AcceleratorPoolSpec,
    status=api.AcceleratorPoolStatus,
    description="AcceleratorPool is a set of nodes with one accelerator type and generation, "
    "selected by the labels the accelerator labellers write; Tessera scores it for each "
    "Workload by speed, cost and energy.",
    columns=POOL_COLUMNS,
    selectable=(".spec.accelerator.vendor", ".spec.draining"),
)

WORKLOAD = Kind(
    kind="Workload",
    plural="workloads",
    short_name="awl",
    scope="Namespaced",
    spec=api.WorkloadSpec,
    status=api.WorkloadStatus,
    description="Workload is a pod template plus what each pod needs from an accelerator and "
    "what to optimise; Tessera places all its replicas on the best AcceleratorPool.",
    columns=WORKLOAD_COLUMNS,
    selectable=(".status.pool", ".status.phase"),
    scalable=True,
)

QUOTA = Kind(
    kind="AcceleratorQuota",
    plural="acceleratorquotas",
    short_name="acq",
    scope="Cluster",
    spec=api.AcceleratorQuotaSpec,
    status=api.AcceleratorQuotaStatus,
    description="AcceleratorQuota is a team's share of the fleet in normalised units (one "
    "reference device's dense bf16 throughput): the namespaces it governs, how much they may "
    "use and borrow, their fair-sharing weight and when their workloads preempt others.",
    columns=QUOTA_COLUMNS,
)


def root_schema(kind: Kind, catalog: Mapping[str, api.Vendor]) -> dict[str, Any]:
    """The CRD's openAPIV3Schema: metadata, spec (defaulted), status (never defaulted), rules."""
    spec = model_schema(kind.spec, name="spec")
    status = model_schema(kind.status, defaults=False, name="status")
    root: dict[str, Any] = {
        "type": "object",
        "description": kind.description,
        "required": ["spec"],
        "properties": {**copy.deepcopy(_ROOT_PROPERTIES), "spec": spec, "status": status},
    }
    if kind is POOL:
        root["properties"]["metadata"] = _metadata(kind.kind, api.POOL_LABEL)
        _add_rules(spec["properties"]["accelerator"], *_pool_model_rules(catalog))
    elif kind is WORKLOAD:
        root["properties"]["metadata"] = _metadata(kind.kind, api.WORKLOAD_LABEL)
        _add_rules(root, *(_immutable_while_placed(f) for f in api.IMMUTABLE_WHILE_PLACED))
        _add_rules(
            root,
            *(_immutable_for_batch_while_placed(f) for f in api.IMMUTABLE_FOR_BATCH_WHILE_PLACED),
        )
        _add_rules(spec["properties"]["variants"], _variant_rule(catalog))
    return root


def custom_resource_definition(kind: Kind, catalog: Mapping[str, api.Vendor]) -> dict[str, Any]:
    """The whole apiextensions.k8s.io/v1 CustomResourceDefinition for one kind.

    `catalog` maps every catalog model name to its vendor (tessera.catalog provides it): the
    CEL rules for variant keys and pool models list them.
    """
    version: dict[str, Any] = {
        "name": api.VERSION,
        "served": True,
        "storage": True,
        "subresources": kind.subresources,
        "additionalPrinterColumns": [c.as_dict() for c in kind.columns],
        "schema": {"openAPIV3Schema": root_schema(kind, catalog)},
    }
    if kind.selectable:
        version["selectableFields"] = [{"jsonPath": p} for p in kind.selectable]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.crd_name},
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": [kind.short_name],
                "categories": ["tessera"],
            },
            "scope": kind.scope,
            "versions": [version],
        },
    }


def all_definitions(catalog: Mapping[str, api.Vendor]) -> list[dict[str, Any]]:
    """Every CRD: AcceleratorPool, Workload, AcceleratorQuota."""
    return [custom_resource_definition(k, catalog) for k in KINDS]


KINDS: Sequence[Kind] = (POOL, WORKLOAD, QUOTA)
