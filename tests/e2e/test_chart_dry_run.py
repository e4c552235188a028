"""Every object the chart renders, and deploy/, is accepted by the real API server (server-side
dry run with strict field validation), and the operator's pod passes the Pod Security
Standards `restricted` level as the API server's own admission enforces it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from chart_support import (
    ALL_FEATURES,
    MONITORING_CRDS,
    REPO,
    TESSERA_CRDS,
    crds_present,
    dry_run,
    dump,
    namespace,
    pod_from,
    render,
    unique,
)


@pytest.fixture(scope="module")
def ns(cluster: Any) -> Iterator[str]:
    """A namespace enforcing `restricted`, with the CRDs the optional objects need."""
    with (
        crds_present(cluster, [MONITORING_CRDS]),
        namespace(cluster, unique("tessera-dry-run")) as name,
    ):
        yield name


def _accepted(cluster: Any, docs: list[dict[str, Any]]) -> str:
    proc = dry_run(cluster, docs)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for doc in docs:
        assert f"/{doc['metadata']['name']} serverside-applied (server dry run)" in out, (
            doc["kind"],
            out,
        )
    return proc.stderr


@pytest.mark.parametrize("args", [[], ALL_FEATURES], ids=["defaults", "every-feature"])
def test_every_rendered_object_is_accepted(cluster: Any, ns: str, args: list[str]) -> None:
    docs = render(*args, namespace=ns)
    warnings = _accepted(cluster, docs)
    # The namespace warns (as well as enforces) at `restricted`: a Deployment whose pods
    # would be rejected draws a "would violate PodSecurity" warning on the dry run.
    assert "PodSecurity" not in warnings, warnings


def test_deploy_manifests_are_accepted(cluster: Any, ns: str) -> None:
    """deploy/tessera.yaml as `kubectl apply -f` sends it, moved into the test namespace."""
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "tessera.yaml").read_text()) if d]
    assert docs[0]["kind"] == "Namespace"
    manifest_ns = docs[0]["metadata"]["name"]
    text = dump(docs[1:]).replace(f"namespace: {manifest_ns}\n", f"namespace: {ns}\n")
    warnings = _accepted(cluster, [d for d in yaml.safe_load_all(text) if d])
    assert "PodSecurity" not in warnings, warnings
    namespace_doc = {**docs[0], "metadata": {**docs[0]["metadata"], "name": unique("ns")}}
    _accepted(cluster, [namespace_doc])


@pytest.mark.parametrize("args", [[], ALL_FEATURES], ids=["defaults", "every-feature"])
def test_operator_pod_is_admitted_under_restricted(cluster: Any, ns: str, args: list[str]) -> None:
    docs = render(*args, namespace=ns)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = pod_from(deployment, ns)
    # A pod needs its ServiceAccount to exist (admission looks it up): create the chart's.
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(account))
    proc = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod), check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "PodSecurity" not in proc.stderr


@pytest.mark.parametrize(
    ("breach", "complaint"),
    [
        ({"allowPrivilegeEscalation": True}, "allowPrivilegeEscalation != false"),
        ({"capabilities": {"drop": []}}, "unrestricted capabilities"),
        ({"runAsNonRoot": False}, "runAsNonRoot != true"),
        ({"seccompProfile": {"type": "Unconfined"}}, "seccompProfile"),
    ],
)
def test_restricted_admission_is_really_enforced(
    cluster: Any, ns: str, breach: dict[str, Any], complaint: str
) -> None:
    """The control: the same pod, weakened in one way, is rejected by the same admission."""
    deployment = next(d for d in render(namespace=ns) if d["kind"] == "Deployment")
    pod = pod_from(deployment, ns)
    pod["spec"]["serviceAccountName"] = "default"
    container = pod["spec"]["containers"][0]
    container["securityContext"] = {**container["securityContext"], **breach}
    proc = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod), check=False
    )
    assert proc.returncode != 0, "a weakened pod was admitted: is PodSecurity enforcing?"
    assert "violates PodSecurity" in proc.stderr and complaint in proc.stderr, proc.stderr


def test_kind_example_workload_is_accepted(cluster: Any, ns: str) -> None:
    """The Workload the README's kind walkthrough applies passes the real CRD's validation."""
    with crds_present(cluster, TESSERA_CRDS):
        docs = [d for d in yaml.safe_load_all((REPO / "examples/kind/workload.yaml").read_text())]
        workload = next(d for d in docs if d and d["kind"] == "Workload")
        workload["metadata"]["namespace"] = ns
        _accepted(cluster, [workload])


def test_security_doc_examples_are_accepted(cluster: Any, ns: str) -> None:
    """The objects docs/security.md tells admins to create (a pool restricted to namespaces,
    a quota, a NetworkPolicy) are valid as written."""
    text = (REPO / "docs" / "security.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    docs = [yaml.safe_load(b) for b in blocks]
    assert {d["kind"] for d in docs} == {"AcceleratorPool", "ResourceQuota", "NetworkPolicy"}
    for doc in docs:
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = ns
    with crds_present(cluster, TESSERA_CRDS):
        _accepted(cluster, docs)
