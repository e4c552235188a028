"""When a placed workload's devices come back: one rule (placement.run_seconds, the estimate at
the chosen pool's speed), the same in the plan that placed it and in every World after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tessera import api, placement
from tessera.placement.timing import run_seconds
from tessera.world.caches import WorldCache
from tessera.world.facts import PodFacts, node_facts, object_facts, placed_of
from tessera.world.snapshot import World
from tessera.world.status import placement_status

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
POOLS = {"h100": ("H100", "H100-SXM5-80GB"), "a100": ("A100", "A100-SXM4-80GB")}


def _world(workloads: dict[str, Any], cache: WorldCache) -> World:
    nodes = {
        name: node_facts(
            {
                "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [
                    {"type": "Ready", "status": "True"}]},
            }
        )
        for name, product in (("h-0", "H100"), ("a-0", "A100"))
    }  # fmt: skip
    pools = {
        name: object_facts(
            {
                "metadata": {"name": name, "uid": name, "resourceVersion": "1", "generation": 1},
                "spec": {
                    "accelerator": {"vendor": "nvidia", "model": model},
                    "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": product}},
                },
            }
        )
        for name, (product, model) in POOLS.items()
    }
    # The H100 node is full, so the workload runs on the slower A100.
    busy = PodFacts(
        namespace="ml", name="other", uid="p", node="h-0", phase="Running", deleting=False,
        ready=True, requests={"nvidia.com/gpu": 8}, workload=None, pool=None, replica=None,
        owner_uid=None, unschedulable_since=None, unschedulable_message="",
    )  # fmt: skip
    return World(
        nodes=nodes, pods=[busy], pools=pools, workloads=workloads, namespaces={}, cache=cache
    )


def test_devices_come_back_at_the_plans_time_in_every_later_world() -> None:
    spec = {
        "accelerator": {"count": 8},
        "estimatedDuration": "2h",
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}},
    }
    body = {"metadata": {"name": "train", "namespace": "ml", "uid": "u", "generation": 1}}
    facts = object_facts({**body, "spec": spec})
    cache = WorldCache()
    world = _world({"ml/train": facts}, cache)
    pending = placement.PendingWorkload(
        namespace="ml",
        name="train",
        spec=api.WorkloadSpec.model_validate(spec),
        created_at=NOW,
        excluded_pools={},
    )
    (decision,) = placement.plan([pending], world.snapshot(), NOW)
    assert decision.placed and decision.pool == "a100"
    assert decision.runtime is not None
    assert decision.runtime > 2 * 3600, "the estimate is for the fastest pool: slower here"
    finish = NOW + timedelta(seconds=decision.runtime)

    status = placement_status(facts, decision, NOW, decision.message)
    placed = placed_of(status)
    assert placed is not None and placed.ends_at is not None
    assert abs((placed.ends_at - finish).total_seconds()) < 1  # status keeps whole seconds

    written = object_facts({**body, "metadata": {**body["metadata"], "resourceVersion": "2"},
                            "spec": spec, "status": status})  # fmt: skip
    later = _world({"ml/train": written}, cache)
    (release,) = later.devices.releases["a-0"]
    assert release.at == placed.ends_at
    assert release.devices == 8


def test_run_seconds_scales_the_estimate_by_speed() -> None:
    assert run_seconds(3600, 2.0, 2.0) == 3600
    assert run_seconds(3600, 2.0, 1.0) == 7200
    assert run_seconds(3600, 2.0, 0.0) == float("inf")
