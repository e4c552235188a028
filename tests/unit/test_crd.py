"""The pydantic -> structural CRD transform and the generated CRDs (no cluster needed).
Checks what the API server requires of a structural schema, and that crds/ does not drift."""

from __future__ import annotations

import ast
import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

from tessera import api, crd, crd_schema
from tessera.catalog import catalog, model_names

REPO = Path(__file__).resolve().parents[2]
CATALOG = {name: model.vendor for name, model in catalog().items()}
DEFINITIONS = {d["spec"]["names"]["kind"]: d for d in crd.all_definitions(CATALOG)}


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = DEFINITIONS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _nodes(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return list(crd_schema.walk(_schema(kind)))


def _rules(kind: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (path, r) for path, node in _nodes(kind) for r in node.get("x-kubernetes-validations", [])
    ]


KINDS = ["AcceleratorPool", "Workload"]


# --- the generated CRDs are structural ------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_no_refs_defs_or_titles(kind: str) -> None:
    text = json.dumps(DEFINITIONS[kind])
    for word in (
        '"$ref"',
        '"$defs"',
        '"title"',
        '"const"',
        '"propertyNames"',
        '"patternProperties"',
    ):
        assert word not in text


@pytest.mark.parametrize("kind", KINDS)
def test_no_nullable_unions_and_no_closed_objects(kind: str) -> None:
    for path, node in _nodes(kind):
        assert "oneOf" not in node and "allOf" not in node and "not" not in node, path
        assert "nullable" not in node, path
        assert node.get("additionalProperties") is not False, path
        if "anyOf" in node:  # only the int-or-string form is structural
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert {"type": "null"} not in node["anyOf"], path


@pytest.mark.parametrize("kind", KINDS)
def test_every_node_has_a_type_and_properties_exclude_additional_properties(kind: str) -> None:
    for path, node in _nodes(kind):
        if not node.get("x-kubernetes-int-or-string"):
            assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), path


@pytest.mark.parametrize("kind", KINDS)
def test_every_property_has_a_description(kind: str) -> None:
    missing = [
        f"{path}.{prop}"
        for path, node in _nodes(kind)
        for prop, sub in node.get("properties", {}).items()
        if not sub.get("description", "").strip()
        and f"{path}.{prop}" != ".metadata"  # the API server allows no description there
    ]
    assert not missing


@pytest.mark.parametrize("kind", KINDS)
def test_defaults_satisfy_their_own_schema(kind: str) -> None:
    for path, node in _nodes(kind):
        if "default" not in node:
            continue
        value = node["default"]
        assert not path.startswith(".status"), f"status is never defaulted: {path}"
        if "enum" in node:
            assert value in node["enum"], path
        if "minimum" in node:
            assert value >= node["minimum"], path
        if "maximum" in node:
            assert value <= node["maximum"], path
        expected = {"object": dict, "string": str, "boolean": bool, "integer": int}
        if node["type"] in expected:
            assert isinstance(value, expected[node["type"]]), path


def test_the_defaults_the_issue_asks_for() -> None:
    spec = _schema("Workload")["properties"]["spec"]["properties"]
    assert spec["objective"]["default"] == "balanced"
    assert spec["replicas"]["default"] == 1
    assert spec["accelerator"]["default"] == {}  # so the nested defaults below apply
    assert spec["accelerator"]["properties"]["profile"]["default"] == "compute"
    assert spec["accelerator"]["properties"]["count"]["default"] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_patterns_compile(kind: str) -> None:
    for _path, node in _nodes(kind):
        if "pattern" in node:
            re.compile(node["pattern"])


@pytest.mark.parametrize("kind", KINDS)
def test_rules_have_single_line_messages(kind: str) -> None:
    rules = _rules(kind)
    assert rules
    for path, rule in rules:
        assert rule["message"] and "\n" not in rule["message"], path
        assert set(rule) <= {"rule", "message", "messageExpression", "fieldPath", "reason"}
        assert rule.get("reason", "FieldValueInvalid") in {
            "FieldValueInvalid",
            "FieldValueForbidden",
            "FieldValueRequired",
            "FieldValueDuplicate",
        }


def _messages(kind: str) -> str:
    return " | ".join(rule["message"] for _, rule in _rules(kind))


CROSS_FIELD_RULES = {
    "AcceleratorPool": [
        "an empty selector would claim every node",
        "empty for Exists and DoesNotExist",
        "vendor other needs memoryGiB",
        "peakTFLOPS keys must be one of",
        "value must be empty when operator is Exists",
    ],
    "Workload": [
        "weights must not all be zero",
        "models and excludeModels must not overlap",
        "template needs at least one container",
        "template may not set nodeName",
        "requests may not name accelerator resources",
        "limits may not name accelerator resources",
        "variant keys must be a vendor",
        *(
            f"spec.{f} is immutable while the workload is placed"
            for f in api.IMMUTABLE_WHILE_PLACED
        ),
        *(
            f"spec.{f} of a batch workload is immutable while it is placed"
            for f in api.IMMUTABLE_FOR_BATCH_WHILE_PLACED
        ),
    ],
}


@pytest.mark.parametrize("kind", KINDS)
def test_cross_field_rules_are_present(kind: str) -> None:
    messages = _messages(kind)
    for expected in CROSS_FIELD_RULES[kind]:
        assert expected in messages


def test_immutability_rules_sit_at_the_root_and_read_old_status() -> None:
    root = _schema("Workload")["x-kubernetes-validations"]
    transition = [r for r in root if "oldSelf" in r["rule"]]
    assert [r["fieldPath"] for r in transition] == [
        f".spec.{f}" for f in (*api.IMMUTABLE_WHILE_PLACED, *api.IMMUTABLE_FOR_BATCH_WHILE_PLACED)
    ]
    for rule in transition:
        assert "oldSelf.status.pool" in rule["rule"]
        assert rule["reason"] == "FieldValueForbidden"
    # A service may scale and roll out while placed: the batch rules let services through,
    # judged by the template's restartPolicy before and after.
    for rule in transition[len(api.IMMUTABLE_WHILE_PLACED) :]:
        assert "oldSelf.spec.template.spec.restartPolicy == 'Always'" in rule["rule"]
        assert "self.spec.template.spec.restartPolicy == 'Always'" in rule["rule"]


def test_workloads_scale_through_the_scale_subresource() -> None:
    (version,) = DEFINITIONS["Workload"]["spec"]["versions"]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    pools = DEFINITIONS["AcceleratorPool"]["spec"]["versions"][0]
    assert pools["subresources"] == {"status": {}}


def test_variant_keys_are_vendors_and_catalog_models() -> None:
    variants = _schema("Workload")["properties"]["spec"]["properties"]["variants"]
    (rule,) = variants["x-kubernetes-validations"]
    keys = json.loads(rule["rule"].removeprefix("self.all(k, k in ").removesuffix(")"))
    assert keys == [str(v) for v in api.Vendor] + model_names()


def test_template_declares_what_cel_needs_and_keeps_the_rest() -> None:
    template = _schema("Workload")["properties"]["spec"]["properties"]["template"]
    assert template["x-kubernetes-preserve-unknown-fields"] is True
    pod = template["properties"]["spec"]
    assert pod["x-kubernetes-preserve-unknown-fields"] is True
    assert {"containers", "initContainers", "nodeName", "restartPolicy"} <= set(pod["properties"])
    assert pod["properties"]["restartPolicy"]["enum"] == ["Always", "OnFailure", "Never"]
    container = pod["properties"]["containers"]["items"]
    assert {"name", "image", "resources"} <= set(container["properties"])
    assert set(container["properties"]["resources"]["properties"]) == {"requests", "limits"}


@pytest.mark.parametrize(
    ("name", "accelerator"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.5gb", True),
        ("amd.com/gpu", True),
        ("habana.ai/gaudi", True),
        ("gpu.intel.com/i915", True),
        ("aws.amazon.com/neuron", True),
        ("google.com/tpu", True),
        ("cpu", False),
        ("memory", False),
        ("ephemeral-storage", False),
        ("hugepages-2Mi", False),
        ("example.com/foo", False),
    ],
)
def test_accelerator_resource_pattern(name: str, accelerator: bool) -> None:
    assert bool(re.search(api.ACCELERATOR_RESOURCE_PATTERN, name)) is accelerator


# --- names, columns, subresources ------------------------------------------------------


def test_names_scope_and_subresources() -> None:
    pool, workload = DEFINITIONS["AcceleratorPool"], DEFINITIONS["Workload"]
    assert pool["metadata"]["name"] == "acceleratorpools.tessera.dev"
    assert workload["metadata"]["name"] == "workloads.tessera.dev"
    assert pool["spec"]["scope"] == "Cluster"
    assert workload["spec"]["scope"] == "Namespaced"
    assert pool["spec"]["names"]["shortNames"] == ["acp"]
    assert workload["spec"]["names"]["shortNames"] == ["awl"]
    for d in (pool, workload):
        assert d["spec"]["group"] == "tessera.dev"
        assert d["spec"]["names"]["categories"] == ["tessera"]
        (version,) = d["spec"]["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
        assert version["subresources"]["status"] == {}


def _resolve(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for part in json_path.strip(".").split("."):
        node = (node or {}).get("properties", {}).get(part)
    return node


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns_and_selectable_fields_point_at_declared_scalars(kind: str) -> None:
    (version,) = DEFINITIONS[kind]["spec"]["versions"]
    types = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        node = _resolve(_schema(kind), column["jsonPath"])
        assert node is not None, column
        assert types[node["type"]] == column["type"], column
    for selectable in version.get("selectableFields", []):
        node = _resolve(_schema(kind), selectable["jsonPath"])
        assert node is not None and node["type"] in types, selectable


def test_printer_columns_answer_the_first_question() -> None:
    def names(kind: str, wide: bool) -> list[str]:
        (version,) = DEFINITIONS[kind]["spec"]["versions"]
        cols = version["additionalPrinterColumns"]
        return [c["name"] for c in cols if bool(c.get("priority", 0)) == wide]

    assert names("AcceleratorPool", False) == [
        "Vendor", "Model", "Nodes", "Available", "Draining", "Age",
    ]  # fmt: skip
    assert names("Workload", False) == ["Pool", "Accelerator", "Ready", "Phase", "Reason", "Age"]
    assert names("Workload", True) == ["Restarts", "Score", "Objective", "Message"]


# --- the transform on small models ----------------------------------------------------


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


class Inner(BaseModel):
    """An inner object."""

    model_config = ConfigDict(json_schema_extra=api.validations(api.cel("true", "inner rule")))

    size: int = Field(1, ge=1, description="A size.")


class Sample(BaseModel):
    """A sample."""

    optional: str | None = Field(None, description="Optional string.", max_length=5)
    fixed: Literal["only"] = Field("only", description="A constant.")
    positive: float = Field(1.0, gt=0, description="Positive.")
    free: dict[str, Any] = Field(default_factory=dict, description="Anything.")
    by_color: dict[Color, float] = Field(default_factory=dict, description="Per color.")
    by_word: dict[Annotated[str, Field(pattern=r"^[a-z]+$")], int] = Field(
        default_factory=dict, description="Per word."
    )
    inner: Inner = Field(
        default_factory=Inner,
        description="The inner, described here.",
        json_schema_extra={"default": {}, **api.validations(api.cel("true", "field rule"))},
    )
    maybe_inner: Inner | None = Field(None, description="Maybe an inner.")
    color: Color = Field(Color.RED, description="A color.")


def test_transform_of_a_small_model() -> None:
    schema = crd_schema.model_schema(Sample)
    props = schema["properties"]
    assert props["optional"] == {
        "type": "string",
        "description": "Optional string.",
        "maxLength": 5,
    }
    assert props["fixed"]["enum"] == ["only"]
    assert props["positive"]["minimum"] == 0 and props["positive"]["exclusiveMinimum"] is True
    assert props["free"]["x-kubernetes-preserve-unknown-fields"] is True
    assert props["by_color"]["additionalProperties"] == {"type": "number"}
    assert props["by_color"]["x-kubernetes-validations"][0]["rule"] == (
        'self.all(k, k in ["red", "blue"])'
    )
    assert props["by_word"]["x-kubernetes-validations"][0]["rule"] == (
        "self.all(k, k.matches(r'^[a-z]+$'))"
    )
    inner = props["inner"]
    assert inner["description"] == "The inner, described here."
    assert inner["default"] == {}
    assert [r["message"] for r in inner["x-kubernetes-validations"]] == ["inner rule", "field rule"]
    assert props["maybe_inner"]["type"] == "object"
    assert props["maybe_inner"]["properties"]["size"]["minimum"] == 1
    assert props["color"] == {
        "type": "string",
        "description": "A color. Defaults to red.",
        "enum": ["red", "blue"],
        "default": "red",
    }
    assert "required" not in schema


def test_defaults_can_be_dropped() -> None:
    text = json.dumps(crd_schema.model_schema(Sample, defaults=False))
    assert '"default"' not in text


def test_unions_without_a_structural_form_are_refused() -> None:
    class Union(BaseModel):
        value: int | str = Field(description="Either.")

    with pytest.raises(crd_schema.SchemaError, match="unions"):
        crd_schema.model_schema(Union)


def test_unknown_keywords_are_refused() -> None:
    with pytest.raises(crd_schema.SchemaError, match="unsupported schema keyword"):
        crd_schema.structural({"type": "string", "contentEncoding": "base64"}, {})


# --- the files in the repository ----------------------------------------------------


def test_committed_crds_and_docs_match_the_models() -> None:
    """crds/ and the generated blocks of docs/api.md are what hack/gen_crds.py writes."""
    import gen_crds  # hack/ is on the path (tests/conftest.py)

    assert gen_crds.main(["--check"]) == 0, "run make crds"


def test_committed_crds_are_the_generated_definitions() -> None:
    for kind, definition in DEFINITIONS.items():
        path = REPO / "crds" / f"{definition['metadata']['name']}.yaml"
        assert yaml.safe_load(path.read_text()) == definition, kind


EXAMPLE_OBJECTS = sorted(
    [
        *(REPO / "examples" / "pools").glob("*.yaml"),
        *(REPO / "examples" / "workloads").glob("*.yaml"),
    ]
)


@pytest.mark.parametrize("path", EXAMPLE_OBJECTS, ids=lambda p: p.name)
def test_examples_parse_with_the_models(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    if doc["kind"] == "AcceleratorPool":
        pool = api.AcceleratorPool.model_validate(doc)
        assert not pool.spec.node_selector.is_empty()
    elif doc["kind"] == "Workload":
        api.Workload.model_validate(doc)
    else:
        assert doc["kind"] == "Namespace"


@pytest.mark.parametrize(
    "module",
    [
        "api/__init__",
        "api/common",
        "api/pool",
        "api/quota",
        "api/workload",
        "api/workload_status",
        "crd",
        "crd_schema",
    ],
)
def test_api_and_crd_stay_pure(module: str) -> None:
    """No Kubernetes client, kopf or I/O layer; crd gets the catalog as an argument."""
    tree = ast.parse((REPO / "operator" / "tessera" / f"{module}.py").read_text())
    imported = {
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
    }
    allowed = {"__future__", "copy", "json", "re", "collections.abc", "dataclasses", "datetime"}
    allowed |= {"enum", "typing", "pydantic", "pydantic.alias_generators", "tessera"}
    allowed |= {"tessera.api.common", "tessera.api.pool", "tessera.api.workload"}
    allowed |= {"tessera.api.workload_status", "tessera.api.quota", "tessera.crd_schema"}
    assert imported <= allowed, imported - allowed
