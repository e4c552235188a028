"""Tessera's CRDs on the real API server: examples accepted, invalid manifests rejected by name.
Everything goes through kubectl and the API server; no validation is reimplemented here."""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
INVALID = Path(__file__).resolve().parent / "invalid"
EXAMPLE_FILES = sorted(EXAMPLES.glob("pools/*.yaml")) + sorted(
    p for p in EXAMPLES.glob("workloads/*.yaml") if p.name != "namespace.yaml"
)
INVALID_FILES = sorted(INVALID.glob("*.yaml"))


def _id(path: Path) -> str:
    return path.stem


@pytest.fixture(scope="module")
def namespace(cluster: Any, crds: list[str]) -> Iterator[str]:
    """A namespace of its own for the invalid cases and the status tests."""
    name = f"api-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _apply(
    cluster: Any, manifest: dict[str, Any] | str, namespace: str | None = None, via: str = "apply"
) -> Any:
    """Server-side apply with strict field validation (or `kubectl create`, via="create")."""
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
    verb = ["apply", "--server-side"] if via == "apply" else [via]
    args = [*verb, "--validate=strict", "-f", "-"]
    if namespace:
        args += ["-n", namespace]
    return cluster.kubectl(*args, input=text, check=False)


def _get(cluster: Any, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    args = ["get", kind, name, "-o", "json"]
    if namespace:
        args += ["-n", namespace]
    out: dict[str, Any] = json.loads(cluster.kubectl(*args).stdout)
    return out


def _delete(cluster: Any, kind: str, name: str, namespace: str | None = None) -> None:
    args = ["delete", kind, name, "--ignore-not-found", "--wait=false"]
    if namespace:
        args += ["-n", namespace]
    cluster.kubectl(*args, check=False)


def _resource(doc: dict[str, Any]) -> str:
    return {"AcceleratorPool": "acceleratorpools.tessera.dev", "Workload": "workloads.tessera.dev"}[
        doc["kind"]
    ]


def _schema(kind: str) -> dict[str, Any]:
    plural = {"AcceleratorPool": "acceleratorpools", "Workload": "workloads"}[kind]
    crd = yaml.safe_load((REPO / "crds" / f"{plural}.tessera.dev.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What the API server's structural defaulting makes of `value` (a test oracle)."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for prop, sub in schema.get("properties", {}).items():
            if prop not in value and "default" in sub:
                value[prop] = copy.deepcopy(sub["default"])
            if prop in value:
                value[prop] = with_defaults(sub, value[prop])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in schema.get("properties", {}):
                    value[key] = with_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [with_defaults(schema["items"], item) for item in value]
    return value


# --- examples ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_namespace(cluster: Any, crds: list[str]) -> str:
    cluster.kubectl("apply", "--server-side", "-f", str(EXAMPLES / "workloads" / "namespace.yaml"))
    return "ml"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_id)
def test_example_is_accepted_and_reads_back_unchanged_but_for_defaults(
    cluster: Any, example_namespace: str, path: Path
) -> None:
    doc = yaml.safe_load(path.read_text())
    # Under a name of its own: the end-to-end tests apply the same examples, and a copy of
    # theirs left on a shared cluster has a status (and the operator's finalizers).
    name = doc["metadata"]["name"] = f"api-{doc['metadata']['name']}"
    resource, ns = _resource(doc), doc["metadata"].get("namespace")
    result = _apply(cluster, doc)
    assert result.returncode == 0, result.stderr
    try:
        stored = _get(cluster, resource, name, ns)
        assert stored["spec"] == with_defaults(
            _schema(doc["kind"])["properties"]["spec"], doc["spec"]
        )
        assert "status" not in stored
        for key in ("name", "namespace", "labels", "annotations"):
            assert stored["metadata"].get(key) == doc["metadata"].get(key)
    finally:
        _delete(cluster, resource, name, ns)


def test_defaults_come_from_the_schema(cluster: Any, namespace: str) -> None:
    """objective balanced, replicas 1, profile compute: filled by the API server."""
    manifest = {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "defaults"},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
    }
    assert _apply(cluster, manifest, namespace).returncode == 0
    spec = _get(cluster, "awl", "defaults", namespace)["spec"]
    assert spec["objective"] == "balanced"
    assert spec["replicas"] == 1
    assert spec["accelerator"] == {"count": 1, "precision": "bf16", "profile": "compute"}
    assert spec["placement"] == {"fallbackAfterSeconds": 300}
    assert spec["priority"] == 0


# --- invalid manifests -------------------------------------------------------------------


@dataclass
class Case:
    """One invalid manifest and what its header says about it."""

    path: Path
    what: str
    expect: list[str]
    manifest: dict[str, Any]
    given: Path | None = None
    status: dict[str, Any] = field(default_factory=dict)
    via: str = "apply"

    @classmethod
    def load(cls, path: Path) -> Case:
        text = path.read_text()
        what, expect, given, status, via = [], [], None, {}, "apply"
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            body = line.lstrip("#").strip()
            key, _, rest = body.partition(":")
            if key == "expect":
                expect.append(rest.strip())
            elif key == "given":
                given = path.parent / rest.strip()
            elif key == "status":
                status = json.loads(rest)
            elif key == "via":
                via = rest.strip()
            else:
                what.append(body)
        return cls(path, " ".join(what), expect, yaml.safe_load(text), given, status, via)


def test_there_are_at_least_25_invalid_manifests() -> None:
    assert len(INVALID_FILES) >= 25
    for path in INVALID_FILES:
        case = Case.load(path)
        assert case.what, f"{path.name}: say in a leading comment what is wrong"
        assert case.expect, f"{path.name}: add an `# expect: <substring>` line"


@pytest.mark.parametrize("path", INVALID_FILES, ids=_id)
def test_invalid_manifest_is_rejected_naming_the_field(
    cluster: Any, namespace: str, path: Path
) -> None:
    case = Case.load(path)
    resource, name = _resource(case.manifest), case.manifest["metadata"]["name"]
    ns = namespace if case.manifest["kind"] == "Workload" else None
    try:
        if case.given:
            given = yaml.safe_load(case.given.read_text())
            given["metadata"]["name"] = name
            created = _apply(cluster, given, ns)
            assert created.returncode == 0, created.stderr
            if case.status:
                args = ["patch", resource, name, "--subresource=status", "--type=merge"]
                args += ["-p", json.dumps({"status": case.status})]
                cluster.kubectl(*args, *(["-n", ns] if ns else []))
        result = _apply(cluster, case.manifest, ns, via=case.via)
        assert result.returncode != 0, f"{path.name} was accepted: {case.what}"
        message = " ".join(result.stderr.split())
        for expected in case.expect:
            assert expected in message, f"{path.name}: {expected!r} not in: {message}"
    finally:
        _delete(cluster, resource, name, ns)


# --- status, immutability and kubectl --------------------------------------------------


def _workload(name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "replicas": 2,
        "accelerator": {"count": 8},
        "template": {"spec": {"containers": [{"name": "main", "image": "train:1.0"}]}},
        **spec,
    }
    return {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": body,
    }


def _patch_status(cluster: Any, name: str, namespace: str, status: dict[str, Any]) -> Any:
    return cluster.kubectl(
        "patch", "awl", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}), check=False,
    )  # fmt: skip


def test_status_updates_are_not_blocked_by_the_immutability_rule(
    cluster: Any, namespace: str
) -> None:
    assert _apply(cluster, _workload("status-free"), namespace).returncode == 0
    placed = {"pool": "h100", "accelerator": "H100-SXM5-80GB", "phase": "Placed"}
    assert _patch_status(cluster, "status-free", namespace, placed).returncode == 0
    running = {
        "phase": "Running",
        "replicas": 2,
        "readyReplicas": 2,
        "summary": {"ready": "2/2"},
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "ReplicasReady",
                "message": "2/2 replicas ready",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        ],
    }
    result = _patch_status(cluster, "status-free", namespace, running)
    assert result.returncode == 0, result.stderr
    # Moving to another pool (a fallback) is a status change too.
    result = _patch_status(cluster, "status-free", namespace, {"pool": "a100"})
    assert result.returncode == 0, result.stderr
    status = _get(cluster, "awl", "status-free", namespace)["status"]
    assert status["pool"] == "a100"
    assert status["conditions"][0]["type"] == "Ready"


def test_mutable_fields_may_change_while_placed(cluster: Any, namespace: str) -> None:
    assert _apply(cluster, _workload("mutable"), namespace).returncode == 0
    assert _patch_status(cluster, "mutable", namespace, {"pool": "h100"}).returncode == 0
    changed = _workload(
        "mutable",
        objective="cost",
        weights={"cost": 1},
        priority=10,
        estimatedDuration="2h",
        placement={"fallbackAfterSeconds": 60},
    )
    result = _apply(cluster, changed, namespace)
    assert result.returncode == 0, result.stderr


def _template(image: str, restart: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": image}]}
    if restart:
        spec["restartPolicy"] = restart
    return {"spec": spec}


def test_a_placed_service_scales_and_rolls_out_but_stays_a_service(
    cluster: Any, namespace: str
) -> None:
    assert _apply(cluster, _workload("svc"), namespace).returncode == 0
    assert _patch_status(cluster, "svc", namespace, {"pool": "h100"}).returncode == 0
    # A new image, more replicas, a framework: a rollout and a scale, not a new Workload.
    changed = _workload(
        "svc", replicas=4, template=_template("train:2.0"), distributed={"framework": "pytorch"}
    )
    result = _apply(cluster, changed, namespace)
    assert result.returncode == 0, result.stderr
    scaled = cluster.kubectl("scale", "awl", "svc", "-n", namespace, "--replicas=3", check=False)
    assert scaled.returncode == 0, scaled.stderr
    assert _get(cluster, "awl", "svc", namespace)["spec"]["replicas"] == 3
    # Turning the placed service into a batch gang is refused: its pods run as a service.
    batch = _workload("svc", replicas=3, template=_template("train:2.0", "Never"))
    result = _apply(cluster, batch, namespace)
    assert result.returncode != 0
    assert "spec.template of a batch workload is immutable while it is placed" in result.stderr
    # The accelerator stays as placed whatever the workload is.
    bigger = _workload("svc", replicas=3, accelerator={"count": 4}, template=_template("train:2.0"))
    result = _apply(cluster, bigger, namespace)
    assert result.returncode != 0 and "spec.accelerator is immutable" in result.stderr


def test_the_scale_subresource_reads_the_replicas_and_selector(
    cluster: Any, namespace: str
) -> None:
    assert _apply(cluster, _workload("scaled"), namespace).returncode == 0
    status = {"pool": "h100", "replicas": 2, "selector": "tessera.dev/workload=scaled"}
    assert _patch_status(cluster, "scaled", namespace, status).returncode == 0
    scale = json.loads(
        cluster.kubectl(
            "get", "--raw",
            f"/apis/tessera.dev/v1alpha1/namespaces/{namespace}/workloads/scaled/scale",
        ).stdout
    )  # fmt: skip
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 2 and scale["status"]["replicas"] == 2
    assert scale["status"]["selector"] == "tessera.dev/workload=scaled"
    # A placed batch gang cannot be scaled: the same rule as an edit of spec.replicas.
    gang = _workload("gang", template=_template("train:1.0", "Never"))
    assert _apply(cluster, gang, namespace).returncode == 0
    assert _patch_status(cluster, "gang", namespace, {"pool": "h100"}).returncode == 0
    result = cluster.kubectl("scale", "awl", "gang", "-n", namespace, "--replicas=4", check=False)
    assert result.returncode != 0
    assert "spec.replicas of a batch workload is immutable" in result.stderr


def test_immutable_fields_may_change_before_placement(cluster: Any, namespace: str) -> None:
    assert _apply(cluster, _workload("pending"), namespace).returncode == 0
    result = _apply(cluster, _workload("pending", replicas=4, accelerator={"count": 2}), namespace)
    assert result.returncode == 0, result.stderr


def test_status_condition_must_have_the_metav1_shape(cluster: Any, namespace: str) -> None:
    assert _apply(cluster, _workload("bad-condition"), namespace).returncode == 0
    condition = {"type": "Ready", "status": "Maybe", "reason": "Because"}
    result = _patch_status(cluster, "bad-condition", namespace, {"conditions": [condition]})
    assert result.returncode != 0
    assert "status.conditions[0].status" in result.stderr
    assert "status.conditions[0].lastTransitionTime: Required value" in result.stderr


def _columns(output: str) -> list[str]:
    return re.split(r"\s{2,}", output.splitlines()[0].strip())


def test_printer_columns_answer_the_first_question(cluster: Any, namespace: str) -> None:
    assert _apply(cluster, _workload("columns", objective="cost"), namespace).returncode == 0
    status = {
        "pool": "h100",
        "accelerator": "H100-SXM5-80GB",
        "phase": "Running",
        "score": 87.5,
        "summary": {"ready": "2/2"},
        "message": "placed on h100 (H100-SXM5-80GB), score 87.5, 2 x 8 nvidia.com/gpu",
    }
    assert _patch_status(cluster, "columns", namespace, status).returncode == 0
    plain = cluster.kubectl("get", "awl", "columns", "-n", namespace).stdout
    assert _columns(plain) == ["NAME", "POOL", "ACCELERATOR", "READY", "PHASE", "REASON", "AGE"]
    assert re.split(r"\s+", plain.splitlines()[1])[:5] == [
        "columns", "h100", "H100-SXM5-80GB", "2/2", "Running",
    ]  # fmt: skip
    wide = cluster.kubectl("get", "awl", "columns", "-n", namespace, "-o", "wide").stdout
    assert _columns(wide)[-3:] == ["SCORE", "OBJECTIVE", "MESSAGE"]
    assert re.split(r"\s{2,}", wide.splitlines()[1].strip())[-3:] == [
        "87.5", "cost", status["message"],
    ]  # fmt: skip


def test_pool_columns(cluster: Any, crds: list[str]) -> None:
    pool = yaml.safe_load((EXAMPLES / "pools" / "h100.yaml").read_text())
    pool["metadata"]["name"] = "columns-h100"
    assert _apply(cluster, pool).returncode == 0
    try:
        status = {
            "accelerator": {
                "vendor": "nvidia",
                "model": "H100-SXM5-80GB",
                "source": "spec",
                "resourceName": "nvidia.com/gpu",
                "unitsPerDevice": 1,
            },
            "summary": {"nodes": "3/4", "devices": "20/32"},
        }
        cluster.kubectl(
            "patch", "acp", "columns-h100", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
        plain = cluster.kubectl("get", "acp", "columns-h100").stdout
        assert _columns(plain) == [
            "NAME", "VENDOR", "MODEL", "NODES", "AVAILABLE", "DRAINING", "AGE",
        ]  # fmt: skip
        out = cluster.kubectl("get", "acp", "columns-h100", "-o", "wide").stdout
        assert _columns(out) == [
            "NAME", "VENDOR", "MODEL", "NODES", "AVAILABLE", "DRAINING", "AGE", "RESOURCE",
            "PREFERENCE", "UNITS",
        ]  # fmt: skip
        row = re.split(r"\s+", out.splitlines()[1].strip())
        assert row[:6] == ["columns-h100", "nvidia", "H100-SXM5-80GB", "3/4", "20/32", "false"]
        assert row[-3:] == ["nvidia.com/gpu", str(pool["spec"]["preference"]), "1"]
        # Short name, category and selectable fields.
        assert "columns-h100" in cluster.kubectl("get", "tessera").stdout
        selected = cluster.kubectl(
            "get", "acp", "--field-selector", "spec.accelerator.vendor=nvidia", "-o", "name"
        ).stdout
        assert "acceleratorpool.tessera.dev/columns-h100" in selected.split()
        other = cluster.kubectl(
            "get", "acp", "--field-selector", "spec.accelerator.vendor=amd", "-o", "name"
        ).stdout
        assert "acceleratorpool.tessera.dev/columns-h100" not in other.split()
    finally:
        _delete(cluster, "acp", "columns-h100")


def test_workloads_are_selectable_by_pool(cluster: Any, namespace: str) -> None:
    assert _apply(cluster, _workload("on-mi300x"), namespace).returncode == 0
    assert _patch_status(cluster, "on-mi300x", namespace, {"pool": "mi300x"}).returncode == 0
    out = cluster.kubectl(
        "get", "awl", "-n", namespace, "--field-selector", "status.pool=mi300x", "-o", "name"
    ).stdout.split()
    assert out == ["workload.tessera.dev/on-mi300x"]


def _explain_fields(cluster: Any, path: str) -> dict[str, str]:
    """Field name -> description text, from `kubectl explain` output."""
    out = cluster.kubectl("explain", path).stdout
    fields: dict[str, str] = {}
    current = None
    for line in out.split("FIELDS:", 1)[1].splitlines():
        match = re.match(r"^  (\w+)\t<", line)
        if match:
            current = match.group(1)
            fields[current] = ""
        elif current and line.startswith("    ") and not line.strip().startswith("enum:"):
            fields[current] += line.strip() + " "
    return fields


@pytest.mark.parametrize(
    "path",
    [
        "workloads.tessera.dev.spec.accelerator",
        "workloads.tessera.dev.spec",
        "acceleratorpools.tessera.dev.spec",
        "acceleratorpools.tessera.dev.spec.accelerator",
    ],
)
def test_kubectl_explain_describes_every_field(cluster: Any, crds: list[str], path: str) -> None:
    fields = _explain_fields(cluster, path)
    assert fields, f"kubectl explain {path} listed no fields"
    undescribed = [name for name, text in fields.items() if not text.strip()]
    assert not undescribed, f"fields without a description in {path}: {undescribed}"
    if path.endswith("spec.accelerator") and path.startswith("workloads"):
        assert set(fields) >= {"count", "minMemoryGiB", "precision", "profile", "vendors"}
