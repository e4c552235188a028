"""Every status the operator writes is one the api models (and so the CRD schema generated
from them) declare: each builder's output validates, and no key of it is one the models
would drop. The API server prunes unknown status fields silently; this test does not."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel
from test_world_releases import NOW, _world

from tessera import api, placement
from tessera.world.caches import WorldCache
from tessera.world.facts import Placed, PodFacts, object_facts, placed_of
from tessera.world.pool_status import pool_status
from tessera.world.status import (
    dump,
    invalid_spec_status,
    lifecycle_status,
    migrating_status,
    placement_status,
    recovered_status,
    waiting_status,
    withdrawn_status,
)

SPEC = {
    "replicas": 1,
    "accelerator": {"count": 8},
    "estimatedDuration": "2h",
    "template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c"}]}},
}


def dropped(data: Any, kept: Any, path: str = "status") -> list[str]:
    """The keys of `data` missing from `kept` (the model's dump of it), at any depth."""
    if isinstance(data, dict) and isinstance(kept, dict):
        out = [f"{path}.{k}" for k in data if k not in kept]
        return out + [
            p for k in data if k in kept for p in dropped(data[k], kept[k], f"{path}.{k}")
        ]
    if isinstance(data, list) and isinstance(kept, list) and len(data) == len(kept):
        return [
            p
            for i, (d, k) in enumerate(zip(data, kept, strict=True))
            for p in dropped(d, k, f"{path}[{i}]")
        ]
    return []


def check(model: type[BaseModel], status: dict[str, Any]) -> None:
    parsed = model.model_validate(status)
    kept = parsed.model_dump(by_alias=True, mode="json", exclude_unset=True)
    assert dropped(status, kept) == [], f"keys {model.__name__} does not declare"


def test_the_checker_sees_an_undeclared_key() -> None:
    with pytest.raises(AssertionError, match="does not declare"):
        check(api.WorkloadStatus, {"phase": "Pending", "conditions": [], "queue": "x"})
    cond = {
        "type": "Ready",
        "status": "True",
        "reason": "R",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "why": 1,
    }
    with pytest.raises(AssertionError, match="does not declare"):
        check(api.WorkloadStatus, {"conditions": [cond]})


def _decisions() -> tuple[Any, placement.Decision, placement.Decision]:
    body = {"metadata": {"name": "svc", "namespace": "ml", "uid": "u", "generation": 1}}
    facts = object_facts({**body, "spec": SPEC})
    world = _world({"ml/svc": facts}, WorldCache())
    spec = api.WorkloadSpec.model_validate(SPEC)
    pending = placement.PendingWorkload(
        namespace="ml", name="svc", spec=spec, created_at=NOW, excluded_pools={}
    )
    (placed,) = placement.plan([pending], world.snapshot(), NOW)
    too_big = pending.model_copy(update={"spec": spec.model_copy(update={"replicas": 9})})
    (waiting,) = placement.plan([too_big], world.snapshot(), NOW)
    assert placed.placed and not waiting.placed
    return facts, placed, waiting


def test_every_workload_status_the_operator_writes_is_declared() -> None:
    facts, placed, waiting = _decisions()
    written = placement_status(facts, placed, NOW, "placed")
    check(api.WorkloadStatus, written)
    meta = {"name": "svc", "namespace": "ml", "uid": "u", "generation": 1}
    running = object_facts({"metadata": meta, "spec": SPEC, "status": written})
    check(api.WorkloadStatus, migrating_status(running, placed, NOW, "moving"))
    status, _ = waiting_status(facts, waiting.message, dump(waiting.candidates), 9, NOW)
    check(api.WorkloadStatus, status)
    check(api.WorkloadStatus, withdrawn_status(running, "a100", "pods unschedulable", NOW))
    check(api.WorkloadStatus, invalid_spec_status(facts, "spec.replicas: too many", NOW))
    pod = PodFacts(
        namespace="ml", name="svc-a100-0", uid="p", node="a-0", phase="Running",
        deleting=False, ready=True, requests={"nvidia.com/gpu": 8}, workload="svc",
        pool="a100", replica=0, owner_uid="u", unschedulable_since=None,
        unschedulable_message="",
    )  # fmt: skip
    spec = api.WorkloadSpec.model_validate(SPEC)
    check(api.WorkloadStatus, lifecycle_status(spec, "a100", written, 1, {0: pod}, [], 0, NOW))
    world = _world({}, WorldCache())
    recovered = recovered_status(world.accelerator("a100"), Placed("a100", {0: "a-0"}, None))
    check(api.WorkloadStatus, recovered)
    # Read back, it keeps the nodes the pods are pinned to (replicas never made get theirs
    # from the repairs, never a pod without a node).
    assert placed_of(recovered) == Placed("a100", {0: "a-0"}, None)


def test_every_pool_status_the_operator_writes_is_declared() -> None:
    world = _world({}, WorldCache())
    for name in world.pool_specs:
        check(api.AcceleratorPoolStatus, pool_status(world, name, datetime(2026, 1, 1, tzinfo=UTC)))
