"""hack/cluster.py's wait for CRDs: a CRD read before its first status is waited for, not an
error (as `kubectl wait --for=condition=Established` makes it, kubernetes/kubernetes#66439)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

import cluster  # hack/cluster.py: tests/conftest.py puts hack/ on the path


def crd(name: str, established: bool | None) -> dict[str, Any]:
    """A CRD as kubectl prints it; established None: created a moment ago, no status yet."""
    body: dict[str, Any] = {"kind": "CustomResourceDefinition", "metadata": {"name": name}}
    if established is not None:
        conds = [{"type": "NamesAccepted", "status": "True"}]
        conds.append({"type": "Established", "status": str(established)})
        body["status"] = {"conditions": conds}
    return body


class Kubectl:
    """Answers `kubectl get` with the next of the given replies, recording each call."""

    def __init__(self, *replies: tuple[int, Any]) -> None:
        self.replies, self.calls = list(replies), []  # type: ignore[var-annotated]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert not check  # a failed read is waited on, not raised
        self.calls.append(args)
        code, body = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        out = json.dumps(body) if code == 0 else ""
        return subprocess.CompletedProcess(args, code, out, "" if code == 0 else body)


def listed(*items: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "List", "items": list(items)}


def test_established_reads_the_condition_and_an_empty_status() -> None:
    assert cluster.crd_established(crd("a", True))
    assert not cluster.crd_established(crd("a", False))
    assert not cluster.crd_established(crd("a", None))
    assert not cluster.crd_established({"metadata": {"name": "a"}, "status": {"conditions": None}})


def test_waits_through_a_missing_crd_and_an_empty_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster.time, "sleep", lambda _: None)
    kubectl = Kubectl(
        (1, 'Error from server (NotFound): "b" not found'),
        (0, listed(crd("a.x", True), crd("b.x", None))),
        (0, listed(crd("a.x", True), crd("b.x", True))),
    )
    cluster.wait_established(kubectl, ["crd/a.x", "b.x"])
    assert len(kubectl.calls) == 3
    assert kubectl.calls[0] == ("get", "crd/a.x", "crd/b.x", "-o", "json")


def test_a_single_crd_is_read_as_an_object() -> None:
    kubectl = Kubectl((0, crd("a.x", True)))
    cluster.wait_established(kubectl, ["a.x"])
    assert len(kubectl.calls) == 1


def test_times_out_naming_what_is_not_served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster.time, "sleep", lambda _: None)
    kubectl = Kubectl((0, listed(crd("a.x", True), crd("b.x", False))))
    with pytest.raises(cluster.ClusterError, match=r"not yet Established: b\.x"):
        cluster.wait_established(kubectl, ["a.x", "b.x"], timeout=0)
