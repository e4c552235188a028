"""What the World reads for quotas: which namespaces each quota selects, the devices placed
workloads hold, an evicted workload's pods (never its placement again, deleted if the
operator stopped before it deleted them), and the statuses built from them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast
from unittest.mock import Mock

import pytest

from tessera import metrics
from tessera.controller.clock import ManualClock
from tessera.controller.quotas import QUOTAS_EVERY, QuotaStatuses
from tessera.placement.sharing import Victim
from tessera.world.facts import NamespaceLabels, PodFacts, object_facts
from tessera.world.quota_status import preempted_status, quota_status, sharing
from tessera.world.snapshot import World
from tessera.world.status import waiting_status

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def namespaces(**labels: dict[str, str]) -> dict[str, Mapping[str, str]]:
    return {name: NamespaceLabels(values) for name, values in labels.items()}


def quota_facts(name: str, selector: dict[str, Any], nominal: float = 8) -> Any:
    body = {
        "metadata": {"name": name, "uid": name, "resourceVersion": "1", "generation": 1},
        "spec": {"namespaceSelector": selector, "nominal": nominal},
    }
    return object_facts(body)


def workload_facts(ns: str, name: str, status: dict[str, Any], count: int = 4) -> Any:
    meta = {"name": name, "namespace": ns, "uid": f"{ns}-{name}", "resourceVersion": "1"}
    spec = {"accelerator": {"count": count}, "priority": 3}
    return object_facts({"metadata": meta, "spec": spec, "status": status})


def pod(ns: str, workload: str, replica: int, pool: str = "h100", **kw: Any) -> PodFacts:
    facts = PodFacts(
        namespace=ns, name=f"{workload}-{pool}-{replica}", uid=f"p{replica}", node=f"n{replica}",
        phase="Running", deleting=False, ready=True, requests={"nvidia.com/gpu": 4},
        workload=workload, pool=pool, replica=replica, owner_uid=f"{ns}-{workload}",
        unschedulable_since=None, unschedulable_message="",
    )  # fmt: skip
    return dataclasses.replace(facts, **kw)


def world(
    workloads: dict[str, Any],
    pods: Sequence[PodFacts] = (),
    quotas: dict[str, Any] | None = None,
) -> World:
    return World(
        nodes={},
        pods=list(pods),
        pools={},
        workloads=workloads,
        namespaces=namespaces(research={"team": "research"}, serving={"team": "product"}, misc={}),
        quotas=quotas or {},
    )


PLACED = {
    "pool": "h100",
    "phase": "Running",
    "placedAt": "2026-12-06T08:00:00Z",
    "assignments": [{"replica": 0, "node": "n0"}, {"replica": 1, "node": "n1"}],
}


def test_each_quota_selects_namespaces_by_labels_or_name_and_empty_selects_all() -> None:
    w = world(
        {},
        quotas={
            "research": quota_facts("research", {"matchLabels": {"team": "research"}}),
            "byname": quota_facts(
                "byname",
                {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": ["serving"],
                        }
                    ]
                },
            ),
            "all": quota_facts("all", {}),
        },
    )
    states = w.quota_states
    assert states["research"].namespaces == {"research"}
    assert states["byname"].namespaces == {"serving"}
    assert states["all"].namespaces == {"research", "serving", "misc"}


def test_holdings_are_the_placed_workloads_of_governed_namespaces() -> None:
    quotas = {"research": quota_facts("research", {"matchLabels": {"team": "research"}})}
    w = world(
        {
            "research/train": workload_facts("research", "train", PLACED),
            "research/done": workload_facts("research", "done", {**PLACED, "phase": "Succeeded"}),
            "misc/other": workload_facts("misc", "other", PLACED),
        },
        quotas=quotas,
    )
    (held,) = w.holdings()
    assert (held.key, held.pool, held.nodes, held.priority) == (
        "research/train", "h100", (("n0", 4), ("n1", 4)), 3
    )  # fmt: skip
    assert held.placed_at == datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
    # What accounting charges: every namespace's, the finished one's devices not held.
    assert w.devices_held() == {("research", "h100"): 8, ("misc", "h100"): 8}


def test_an_evicted_workloads_pods_are_never_its_placement_and_go_if_left() -> None:
    """The eviction is written first: until the pods are deleted they must not place the
    workload again (as a status without a pool otherwise would from its pods), and a
    restarted operator deletes them."""
    record = {
        "by": "serving/embed",
        "rule": "Reclaim",
        "pool": "h100",
        "at": "2026-12-06T08:59:00Z",
    }
    evicted = workload_facts("research", "sweep", {"phase": "Pending", "preempted": record})
    pods = [pod("research", "sweep", 0), pod("research", "sweep", 1)]
    w = world({"research/sweep": evicted}, pods)
    assert w.placement_of("research/sweep") is None
    assert [p.name for p in w.stale_pods("research/sweep")] == ["sweep-h100-0", "sweep-h100-1"]
    assert "research/sweep" not in w.waiting()  # placed again once they are gone
    deleting = [dataclasses.replace(p, deleting=True) for p in pods]
    w = world({"research/sweep": evicted}, deleting)
    assert w.stale_pods("research/sweep") == [] and "research/sweep" in w.waiting()
    # Placed again (its status records the pool): its pods are its placement once more.
    again = workload_facts("research", "sweep", {**PLACED, "preempted": None})
    assert world({"research/sweep": again}, pods).stale_pods("research/sweep") == []


def test_an_evicted_status_keeps_the_age_says_who_and_survives_waiting_writes() -> None:
    facts = workload_facts("research", "sweep", PLACED)
    victim = Victim("research", "sweep", "Reclaim", "h100", 8)
    status = preempted_status(facts, victim, "serving/embed", NOW)
    assert status["phase"] == "Pending" and status["pool"] is None and status["placedAt"] is None
    assert status["preempted"] == {
        "by": "serving/embed", "rule": "Reclaim", "pool": "h100", "at": "2026-12-06T09:00:00Z"
    }  # fmt: skip
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Preempted"]["reason"] == "Reclaim" and conds["Placed"]["reason"] == "Preempted"
    waiting = workload_facts("research", "sweep", status)
    later, reason = waiting_status(waiting, "waiting: no room", [], 2, NOW, quota="research")
    assert reason == "NoFeasiblePool"
    assert any(c["type"] == "Preempted" for c in later["conditions"])
    assert later["quota"] == "research"


def test_a_quota_status_counts_units_waiting_and_overlaps() -> None:
    quotas = {
        "research": quota_facts("research", {"matchLabels": {"team": "research"}}, nominal=4),
        "all": quota_facts("all", {}),
    }
    waiting = workload_facts(
        "serving", "embed",
        {"phase": "Pending", "conditions": [{"type": "Placed", "reason": "WaitingForQuota"}]},
    )  # fmt: skip
    w = world(
        {
            "research/train": workload_facts("research", "train", PLACED),
            "serving/embed": waiting,
        },
        quotas=quotas,
    )
    shared = sharing(w)
    research = quota_status(w, "research", shared, 2, NOW)
    ready = research["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "NamespacesOverlap")
    assert "research (also all)" in ready["message"]
    assert research["namespaces"] == [] and research["preemptions"] == 2
    everything = quota_status(w, "all", shared, 0, NOW)
    assert everything["namespaces"] == ["misc", "serving"]
    assert everything["waiting"] == 1 and everything["waitingForQuota"] == 1
    assert everything["used"] == 0  # research's devices count for no quota while contested


def test_accounting_charges_each_namespace_its_held_devices_for_the_time_since_the_last_step() -> (
    None
):
    """Every namespace's placed workloads, governed by a quota or not (labelled ""), each
    step the devices held times the seconds since the last; finished ones hold nothing."""
    h100 = object_facts(
        {
            "metadata": {"name": "h100", "uid": "h100", "resourceVersion": "1", "generation": 1},
            "spec": {
                "accelerator": {"vendor": "nvidia", "model": "H100-SXM5-80GB"},
                "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "H100"}},
                "costPerDeviceHour": 3.6,
            },
        }
    )
    w = World(
        nodes={},
        pods=[],
        pools={"h100": h100},
        workloads={
            "research/train": workload_facts("research", "train", PLACED),
            "research/done": workload_facts("research", "done", {**PLACED, "phase": "Succeeded"}),
            "misc/other": workload_facts("misc", "other", PLACED, count=2),
        },
        namespaces=namespaces(research={"team": "research"}, misc={}),
        quotas={"research": quota_facts("research", {"matchLabels": {"team": "research"}})},
    )
    clock = ManualClock()
    accounting = QuotaStatuses(cast(Any, Mock()), clock)
    series = {("research", "research", "h100"): 8, ("misc", "", "h100"): 4}
    before = {labels: _charged(labels) for labels in series}
    accounting.run(w, NOW)  # the first step: nothing held for any time yet
    clock.advance(QUOTAS_EVERY + 1)
    accounting.run(w, NOW)
    for labels, devices in series.items():
        device_seconds = devices * (QUOTAS_EVERY + 1)
        (held, cost), (held_before, cost_before) = _charged(labels), before[labels]
        assert held - held_before == pytest.approx(device_seconds)
        assert cost - cost_before == pytest.approx(device_seconds / 3600 * 3.6)


def _charged(labels: tuple[str, str, str]) -> tuple[float, float]:
    """The device-seconds and cost counted for one (namespace, quota, pool)."""
    names = dict(zip(("namespace", "quota", "pool"), labels, strict=True))
    return tuple(  # type: ignore[return-value]
        metrics.REGISTRY.get_sample_value(series, names) or 0.0
        for series in ("tessera_device_seconds_total", "tessera_cost_total")
    )
