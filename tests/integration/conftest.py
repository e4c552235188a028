"""Integration fixtures for the API: Tessera's CRDs installed on the real control plane.
Uses the session `cluster` from tests/conftest.py; imports nothing from the operator layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
