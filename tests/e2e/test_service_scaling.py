"""A service outgrowing its pool, and a HorizontalPodAutoscaler, on the real control plane: a
scale up that its pool has no room for is placed as any placement is (whole, on a pool with
room for every replica, moving one pod at a time), and the control plane's HPA controller
reads a Workload's scale subresource."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from operator_harness import (
    Kubectl,
    Operator,
    ReadyWatch,
    drop_pools,
    install_crds,
    is_ready,
    make_pool,
    namespace,
    wait_for,
    workload,
)


@pytest.fixture(scope="module")
def installed(cluster: Any) -> Any:
    install_crds(cluster)
    return cluster


@pytest.fixture
def ns(operator: Operator, installed: Any) -> Iterator[Kubectl]:
    with namespace(installed, "scale") as kubectl:
        yield kubectl


def ready_pods(k: Kubectl, name: str) -> list[dict[str, Any]]:
    return [p for p in k.pods(**{"tessera.dev/workload": name}) if is_ready(p)]


def test_a_scale_up_its_pool_has_no_room_for_moves_the_service_whole(ns: Kubectl) -> None:
    # tight: 2 devices, preferred; roomy: 8. Two replicas fit on tight, three do not.
    make_pool(ns, "tight", nodes=1, devices=2, preference=50)
    make_pool(ns, "roomy", nodes=2, devices=4)
    try:
        ns.apply(workload("web", replicas=2, restart="Always", pools=["tight", "roomy"]))
        wait_for("web running on tight", lambda: len(ready_pods(ns, "web")) == 2, timeout=60)
        wait_for("web's status on tight", lambda: ns.status("web").get("pool") == "tight")

        def moved() -> bool:
            status = ns.status("web")
            pods = ready_pods(ns, "web")
            return (
                status.get("pool") == "roomy"
                and len(pods) == 3
                and all(p["metadata"]["labels"]["tessera.dev/pool"] == "roomy" for p in pods)
            )

        with ReadyWatch(ns, "web") as watch:
            ns("scale", "awl", "web", "-n", ns.ns, "--replicas=3")
            wait_for("web moved whole to roomy", moved, timeout=90)
        assert min(watch.counts) >= 2, f"Ready pods dropped below the 2 running: {watch.counts}"
        reasons = {e["reason"]: e["message"] for e in ns.events("web")}
        assert "no room on pool tight yet: trying the other pools" in reasons["ScaleUpWaiting"]
        assert reasons["Migrating"] == (
            "pool tight has no room for all 3 replicas: migrating to roomy, one pod at a time"
        )
        assigned = ns.status("web")["assignments"]
        assert [a["replica"] for a in assigned] == [0, 1, 2]
    finally:
        drop_pools(ns, {"tight": 1, "roomy": 2})


def test_a_horizontal_pod_autoscaler_reads_the_workloads_scale(ns: Kubectl) -> None:
    make_pool(ns, "hpa", nodes=1, devices=4)
    try:
        ns.apply(workload("api", replicas=2, restart="Always", pools=["hpa"]))
        wait_for("api running", lambda: len(ready_pods(ns, "api")) == 2, timeout=60)
        wait_for("status.selector", lambda: ns.status("api").get("selector"), timeout=30)
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "api", "namespace": ns.ns},
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "tessera.dev/v1alpha1",
                    "kind": "Workload",
                    "name": "api",
                },
                "minReplicas": 1,
                "maxReplicas": 4,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 50},
                        },
                    }
                ],
            },
        }
        ns("apply", "-f", "-", input=json.dumps(hpa))

        def able() -> dict[str, Any] | None:
            status = ns.get("hpa", "api").get("status") or {}
            conditions = {c["type"]: c for c in status.get("conditions") or []}
            got = conditions.get("AbleToScale")
            return status if got and got["status"] == "True" else None

        # The HPA controller got the scale (replicas and selector) of the Workload: with no
        # pod metrics on this control plane it stops there, as it would before metrics-server.
        status = wait_for("the HPA read the scale", able, timeout=60)
        assert status["currentReplicas"] == 2
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["AbleToScale"]["reason"] == "SucceededGetScale"
    finally:
        ns("delete", "hpa", "api", "-n", ns.ns, "--ignore-not-found")
        drop_pools(ns, {"hpa": 1})
