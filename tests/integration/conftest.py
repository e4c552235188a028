"""Integration fixtures for the API: Tessera's CRDs installed on the real control plane, a
client with the cluster's credentials, and a namespace of its own for each test.
Uses the session `cluster` from tests/conftest.py; imports tessera.k8s (the client) and
nothing from the operator's controller."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tessera.k8s import Kube

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"


@pytest.fixture(scope="session")
def crds(cluster: Any) -> list[str]:
    """Server-side applies crds/*.yaml and waits until the API server serves them."""
    files = sorted(CRD_DIR.glob("*.yaml"))
    assert files, f"no CRDs in {CRD_DIR}: run make crds"
    names = []
    for path in files:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        names.append(f"crd/{path.stem}")
    cluster.wait_established(names)
    return [n.removeprefix("crd/") for n in names]


@pytest.fixture
def kube(cluster: Any) -> Kube:
    return Kube.connect(str(cluster.kubeconfig))


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A namespace for one test, deleted after it."""
    name = f"it-{uuid.uuid4().hex[:8]}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}")
