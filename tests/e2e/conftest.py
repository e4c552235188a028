"""Fixtures most end-to-end modules share: the CRDs and the example pools as an admin would
apply them, and one operator for the module. A module that needs another start (CRDs only,
an operator per test) defines its own fixture of the same name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from operator_harness import REPO, Operator, install_crds


@pytest.fixture(scope="module")
def installed(cluster: Any) -> Any:
    """CRDs and the example pools, as an admin would apply them."""
    install_crds(cluster)
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "examples/pools")
    )
    return cluster


@pytest.fixture(scope="module")
def operator(installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    op = Operator(installed.kubeconfig, tmp_path_factory.mktemp("operator"))
    op.start()
    yield op
    op.stop()
