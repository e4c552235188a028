"""Helpers for the Helm chart's end-to-end tests: the pinned helm against the test cluster,
server-side dry-runs, CRDs a test needs for a while, Pod Security namespaces, and access
reviews made as an impersonated user. Not a test module itself."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tessera"
HERE = Path(__file__).resolve().parent
# The Prometheus Operator's ServiceMonitor and PrometheusRule, for clusters without it.
MONITORING_CRDS = HERE / "chart_fixtures" / "prometheus-operator-crds.yaml"
TESSERA_CRDS = sorted((REPO / "crds").glob("*.yaml"))

sys.path.insert(0, str(REPO / "hack"))
import sync_chart  # noqa: E402

# Everything optional switched on.
ALL_FEATURES = [
    "--set", "ha.enabled=true",
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "metrics.prometheusRule.enabled=true",
    "--set", "metrics.dashboard.enabled=true",
    "--set", "operator.verbose=true",
    "--set", "operator.logFormat=text",
]  # fmt: skip


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def helm(cluster: Any, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The pinned helm against the test cluster."""
    proc = subprocess.run(
        [str(cluster.bin("helm")), f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def render(*args: str, release: str = "tessera", namespace: str) -> list[dict[str, Any]]:
    """`helm template` (no cluster) of the chart: the objects, in Helm's install order."""
    text = sync_chart.render(CHART, *args, release=release, namespace=namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def dump(docs: list[dict[str, Any]]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)


def dry_run(cluster: Any, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """Server-side apply of the objects as a server-side dry run: admission, schema validation
    (unknown fields rejected) and defaulting run, nothing is stored."""
    proc: subprocess.CompletedProcess[str] = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "--force-conflicts",
        "--field-manager=tessera-chart-test", "--validate=strict", "-f", "-",
        input=dump(docs), check=False,
    )  # fmt: skip
    return proc


def crds_in(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crd_name(path: Path) -> str:
    (crd,) = crds_in(path)
    return str(crd["metadata"]["name"])


@contextmanager
def crds_present(cluster: Any, paths: list[Path]) -> Iterator[None]:
    """Creates the CRDs that are absent and waits until they are served; deletes exactly
    those again afterwards (CRDs already there are left alone)."""
    created = []
    for crd in (c for path in paths for c in crds_in(path)):
        name = crd["metadata"]["name"]
        if cluster.kubectl("get", "crd", name, check=False).returncode != 0:
            cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(crd))
            created.append(name)
    if created:
        cluster.wait_established(created)
    try:
        yield
    finally:
        if created:
            cluster.kubectl("delete", "crd", "--wait=true", "--timeout=60s", *created, check=False)


@contextmanager
def namespace(cluster: Any, name: str, pss: str | None = "restricted") -> Iterator[str]:
    """A namespace, labelled to enforce a Pod Security Standards level; deleted afterwards."""
    labels = {"app.kubernetes.io/part-of": "tessera-tests"}
    if pss:
        labels |= {
            "pod-security.kubernetes.io/enforce": pss,
            "pod-security.kubernetes.io/enforce-version": "latest",
            "pod-security.kubernetes.io/warn": pss,
            "pod-security.kubernetes.io/warn-version": "latest",
        }
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(doc))
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def pod_from(deployment: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The pod the Deployment's ReplicaSet would create, as a Pod object."""
    template = deployment["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": unique("pss-check"),
            "namespace": namespace,
            "labels": template["metadata"].get("labels", {}),
        },
        "spec": template["spec"],
    }


def access(group: str, resource: str, verb: str, namespace: str = "") -> dict[str, str]:
    """resourceAttributes for an access review; "workloads/status" names a subresource."""
    resource, _, sub = resource.partition("/")
    attrs = {"group": group, "resource": resource, "verb": verb}
    if sub:
        attrs["subresource"] = sub
    if namespace:
        attrs["namespace"] = namespace
    return attrs


def allowed_as(cluster: Any, user: str, checks: list[dict[str, str]]) -> list[bool]:
    """Asks the API server, impersonating `user` (kubectl --as), whether each access is
    allowed: one SelfSubjectAccessReview per check, all in one request batch."""
    reviews = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs},
            }
            for attrs in checks
        ],
    }
    proc = cluster.kubectl(
        "create", f"--as={user}", "-o", "yaml", "-f", "-", input=yaml.safe_dump(reviews)
    )
    results = [d for d in yaml.safe_load_all(proc.stdout) if d]
    sent = [{k: v for k, v in attrs.items() if v} for attrs in checks]  # "" is omitted
    assert [r["spec"]["resourceAttributes"] for r in results] == sent
    return [bool(r["status"].get("allowed")) for r in results]


def adopt_crds(cluster: Any, release: str, namespace: str) -> None:
    """Lets a Helm release take over Tessera's CRDs when they already exist (applied with
    kubectl by another test, or kept by an earlier release): Helm's documented adoption."""
    for path in TESSERA_CRDS:
        name = crd_name(path)
        if cluster.kubectl("get", "crd", name, check=False).returncode != 0:
            continue
        cluster.kubectl(
            "annotate", "--overwrite", f"crd/{name}",
            f"meta.helm.sh/release-name={release}", f"meta.helm.sh/release-namespace={namespace}",
        )  # fmt: skip
        cluster.kubectl("label", "--overwrite", f"crd/{name}", "app.kubernetes.io/managed-by=Helm")
