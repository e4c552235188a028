"""Which of its own decisions the loop still hands the World (the cache may not show them
yet), and which event keys it still remembers: both looked at only where something changed."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from tessera.handlers.reconciler import Reconciler, _said_of_live
from tessera.world import ObjectFacts, Placed, World, object_facts

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def facts(name: str, uid: str = "u", pool: str | None = None, rv: str = "1") -> ObjectFacts:
    status = {"pool": pool} if pool else {}
    meta = {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": rv}
    return object_facts({"metadata": meta, "spec": {}, "status": status})


def test_a_decision_is_kept_until_the_cache_shows_it_or_its_workload_goes() -> None:
    loop = Reconciler(cast(Any, None))
    a, b, c = facts("a", "ua"), facts("b", "ub"), facts("c", "uc")
    workloads = {"ml/a": a, "ml/b": b, "ml/c": c}
    assert loop.recent_for(workloads) == {}
    for name, uid in (("a", "ua"), ("b", "ub"), ("c", "uc")):
        loop.recent[f"ml/{name}"] = (uid, Placed("h100", {0: "n0"}, NOW))
    assert set(loop.recent_for(dict(workloads))) == {"ml/a", "ml/b", "ml/c"}
    assert set(loop.recent_for(dict(workloads))) == {"ml/a", "ml/b", "ml/c"}  # nothing moved
    workloads["ml/a"] = facts("a", "ua", pool="h100", rv="2")  # the status write, cached
    workloads["ml/b"] = facts("b", "other", rv="3")  # deleted and created again
    del workloads["ml/c"]
    assert loop.recent_for(dict(workloads)) == {}


def test_a_decision_made_since_the_last_look_is_looked_at_though_its_workload_is_unchanged() -> (
    None
):
    loop = Reconciler(cast(Any, None))
    shown = facts("a", "ua", pool="h100")
    workloads = {"ml/a": shown}
    loop.recent_for(workloads)
    loop.recent["ml/a"] = ("ua", Placed("h100", {0: "n0"}, NOW))
    assert loop.recent_for(dict(workloads)) == {}


def test_event_keys_are_kept_for_the_objects_the_world_has() -> None:
    world = cast(World, SimpleNamespace(workloads={"ml/a": None}, pools={"h100": None}))
    assert _said_of_live(world, "Workload/ml/a/Placed")
    assert not _said_of_live(world, "Workload/ml/b/Placed")
    assert _said_of_live(world, "AcceleratorPool/None/h100/Degraded")
    assert not _said_of_live(world, "AcceleratorPool/None/a100/Degraded")
