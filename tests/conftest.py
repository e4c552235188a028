"""Shared pytest setup: markers by directory and the real local control plane.
The `cluster` fixture reuses a cluster that KUBECONFIG points at, or starts one for the session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent

# Tests assert behaviour, not time: on a shared 2-core machine one example of a property
# test took 377 ms against hypothesis's default deadline of 200 ms, and failed for it.
settings.register_profile("tessera", deadline=None)
settings.load_profile("tessera")
sys.path.insert(0, str(REPO / "hack"))

import cluster as local_cluster  # noqa: E402

_MARKERS = {"unit": "unit", "integration": "integration", "e2e": "e2e"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test by the directory it lives in (tests/unit, tests/integration, ...)."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO / "tests").parts
        marker = _MARKERS.get(parts[0]) if parts else None
        if marker:
            item.add_marker(getattr(pytest.mark, marker))


@dataclass
class ClusterHandle:
    """A handle on the control plane the tests run against."""

    kubeconfig: Path
    api: Any  # kubernetes.client.ApiClient
    state_dir: Path | None = None  # set when this session started the cluster

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Runs the pinned kubectl with this cluster's kubeconfig; raises on failure if check."""
        proc = subprocess.run(
            [str(local_cluster.binaries()["kubectl"]), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            check=False,
            text=True,
            capture_output=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
            )
        return proc

    def wait_established(self, crds: Iterable[str]) -> None:
        """Waits until the API server serves these CRDs (see hack/cluster.py)."""
        local_cluster.wait_established(self.kubectl, crds)

    def bin(self, name: str) -> Path:
        """Path of a pinned binary (helm, kubectl, ...)."""
        return local_cluster.binaries()[name]


def _reachable(kubeconfig: str) -> bool:
    from kubernetes import client, config

    try:
        api = config.new_client_from_config(kubeconfig)
        client.VersionApi(api).get_code(_request_timeout=5)
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterHandle]:
    """The real control plane: the one KUBECONFIG names if it answers, else a fresh one.

    A fresh cluster gets its own state directory, so it never collides with
    `make cluster-up` or with another test session, and is stopped at the end.
    """
    from kubernetes import config

    existing = os.environ.get("KUBECONFIG")
    if existing and Path(existing).exists() and _reachable(existing):
        yield ClusterHandle(Path(existing), config.new_client_from_config(existing))
        return
    state = Path(tempfile.mkdtemp(prefix="tessera-test-cluster-"))
    local = local_cluster.Cluster(state)
    local.up()
    try:
        yield ClusterHandle(
            local.kubeconfig, config.new_client_from_config(str(local.kubeconfig)), state
        )
    finally:
        local.down(quiet=True)
        shutil.rmtree(state, ignore_errors=True)
