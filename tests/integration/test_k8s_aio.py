"""The event loop's client (tessera.k8s_aio) against the real API server: it creates pods
with the operator's credentials, says when one exists already, and translates a refusal and
an unreachable server into the same errors as tessera.k8s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tessera.errors import ApiError, ClusterUnreachable
from tessera.k8s import Kube
from tessera.k8s_aio import AsyncKube


@pytest.fixture
def loop(kube: Kube) -> Iterator[AsyncKube]:
    sender = AsyncKube(kube, 4)
    yield sender
    sender.close()


def pod(namespace: str, name: str) -> dict[str, Any]:
    # No scheduler has this name: the pod stays as created.
    spec = {"containers": [{"name": "main", "image": "busybox"}], "schedulerName": "nobody"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def test_a_pod_is_created_once_with_the_operators_field_manager(
    kube: Kube, loop: AsyncKube, namespace: str
) -> None:
    assert loop.run(loop.create_pod(pod(namespace, "one"))) is True
    assert loop.run(loop.create_pod(pod(namespace, "one"))) is False  # exists: not an error
    created = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/one")
    managers = {m["manager"] for m in created["metadata"]["managedFields"]}
    assert managers == {"tessera"}


def test_many_pods_sent_at_once_are_all_created(
    kube: Kube, loop: AsyncKube, namespace: str
) -> None:
    futures = [loop.submit(loop.create_pod(pod(namespace, f"p{i}"))) for i in range(40)]
    assert all(f.result() for f in futures)
    listed = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    assert len(listed["items"]) == 40


def test_a_refused_pod_raises_the_api_servers_reason(loop: AsyncKube, namespace: str) -> None:
    bad = pod(namespace, "Not_A_Name")
    with pytest.raises(ApiError) as refused:
        loop.run(loop.create_pod(bad))
    assert refused.value.status == 422 and refused.value.refusal
    assert "Not_A_Name" in refused.value.message  # the server's own message, not a stack


def test_a_server_that_does_not_answer_is_unreachable(cluster: Any, namespace: str) -> None:
    closed = Kube.connect(str(cluster.kubeconfig))
    closed.api_client.configuration.host = "https://127.0.0.1:9"  # nothing listens there
    sender = AsyncKube(closed, 1)
    try:
        with pytest.raises(ClusterUnreachable, match=r"127\.0\.0\.1:9"):
            sender.run(sender.create_pod(pod(namespace, "never")))
    finally:
        sender.close()
