"""The event loop's client (tessera.k8s_aio) against the real API server: it creates pods
with the operator's credentials, says when one exists already, writes a Workload's status
only over the version read (Writes.status_sent), and translates a refusal and an
unreachable server into the same errors as tessera.k8s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tessera.controller.clock import SystemClock
from tessera.controller.events import Events
from tessera.controller.ledger import Ledger
from tessera.controller.writes import Writes
from tessera.errors import ApiError, ClusterUnreachable, Conflict, NotFound
from tessera.k8s import Kube
from tessera.k8s_aio import AsyncKube
from tessera.world.facts import object_facts


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


def workload(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {
            "accelerator": {"count": 1},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:1.0"}]}},
        },
    }
    path = f"/apis/tessera.dev/v1alpha1/namespaces/{namespace}/workloads"
    return kube.request("POST", path, body)


def test_a_status_is_written_only_over_the_version_read(
    kube: Kube, loop: AsyncKube, namespace: str, crds: list[str]
) -> None:
    read = workload(kube, namespace, "w")
    version = read["metadata"]["resourceVersion"]
    patch = kube.workload_status_patch(namespace, "w", {"message": "one"}, version)
    loop.run(loop.write_status(patch))
    path = f"/apis/tessera.dev/v1alpha1/namespaces/{namespace}/workloads/w"
    now = kube.request("GET", path)
    assert now["status"]["message"] == "one"
    stale = kube.workload_status_patch(namespace, "w", {"message": "two"}, version)
    with pytest.raises(Conflict):
        loop.run(loop.write_status(stale))
    assert kube.request("GET", path)["status"]["message"] == "one"
    gone = kube.workload_status_patch(namespace, "gone", {"message": "x"}, None)
    with pytest.raises(NotFound):
        loop.run(loop.write_status(gone))


def test_a_visits_status_write_is_in_flight_only_once_written(
    kube: Kube, loop: AsyncKube, namespace: str, crds: list[str]
) -> None:
    """Writes.status_sent: written, the ledger holds the Workload as written until the cache
    shows it; over a stale copy (Conflict) or for a Workload gone, False and nothing held."""
    ledger, clock = Ledger(), SystemClock()
    writes = Writes(kube, loop, ledger, Events(kube, clock), clock)
    facts = object_facts(workload(kube, namespace, "w"))
    assert loop.run(writes.status_sent(facts, {"message": "placed"})) is True
    assert ledger.writing(facts.key)

    ledger = Ledger()
    writes = Writes(kube, loop, ledger, Events(kube, clock), clock)
    assert loop.run(writes.status_sent(facts, {"message": "again"})) is False  # stale copy
    assert not ledger.writing(facts.key)
    kube.request("DELETE", f"/apis/tessera.dev/v1alpha1/namespaces/{namespace}/workloads/w")
    assert loop.run(writes.status_sent(facts, {"message": "gone"})) is False
    assert not ledger.writing(facts.key)
