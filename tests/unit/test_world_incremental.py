"""A World built over the last one's cache (pods by workload, devices used and reserved,
redone only for what changed) must say what a World built from nothing says, whatever
changed in between: pods bound, finished, deleted or moved; statuses and decisions written,
replaced or gone; pools added."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.world.caches import Edits, WorldCache
from tessera.world.facts import ObjectFacts, Placed, PodFacts, node_facts, object_facts
from tessera.world.snapshot import World

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
NODES = ("n0", "n1", "n2")
WORKLOADS = ("a", "b", "c")
REPLICAS = (0, 1)


def _pool(name: str, product: str, model: str, vendor: str) -> ObjectFacts:
    return object_facts(
        {
            "metadata": {"name": name, "resourceVersion": "1", "generation": 1},
            "spec": {
                "accelerator": {"vendor": vendor, "model": model},
                "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": product}},
            },
        }
    )


H100 = _pool("h100", "H100", "H100-SXM5-80GB", "nvidia")
A100 = _pool("a100", "A100", "A100-SXM4-80GB", "nvidia")
POOLS = ({"h100": H100}, {"h100": H100, "a100": A100})


def _node(name: str, product: str) -> Any:
    return node_facts(
        {
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}},
        }
    )


# Fleets: every node an H100; or n2 relabelled an A100 (it changes pools).
FLEETS = (
    {n: _node(n, "H100") for n in NODES},
    {**{n: _node(n, "H100") for n in NODES[:2]}, "n2": _node("n2", "A100")},
)


def _workload(name: str, variant: int) -> ObjectFacts:
    """Variants: 0 no status; 1-3 placed on h100 (assignments differ); 4 Succeeded; 5 deleting;
    6 placed on a pool that does not exist; 7 placed with an estimated duration (and so an
    expected finish)."""
    status: dict[str, Any] = {}
    spec: dict[str, Any] = {"replicas": 2, "accelerator": {"count": 3}}
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"u-{name}"}
    if variant in (1, 2, 3, 4, 5, 6, 7):
        nodes = {1: ("n0", "n1"), 2: ("n1", "n1"), 3: ("n2", "n0")}.get(variant, ("n0", "n0"))
        status = {
            "pool": "gone" if variant == 6 else "h100",
            "assignments": [{"replica": r, "node": n} for r, n in enumerate(nodes)],
        }
    if variant == 4:
        status["phase"] = "Succeeded"
    if variant == 5:
        meta["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    if variant == 7:
        spec["estimatedDuration"] = "2h"
        status["placedAt"] = "2026-12-05T11:00:00Z"
        status["expectedFinish"] = "2026-12-05T13:00:00Z"
    return object_facts(
        {"metadata": {**meta, "resourceVersion": str(variant)}, "spec": spec, "status": status}
    )


def _pod(workload: str, replica: int, variant: int) -> PodFacts:
    """Variants: 0 unbound; 1-3 bound to n0-n2; 4 finished on n1; 5 deleting on n2; 6 a pod
    of another owner; 7 unbound on a100."""
    node = {1: "n0", 2: "n1", 3: "n2", 4: "n1", 5: "n2", 6: "n0"}.get(variant, "")
    return PodFacts(
        namespace="ml", name=f"{workload}-{'a100' if variant == 7 else 'h100'}-{replica}",
        uid=f"p-{workload}-{replica}-{variant}", node=node,
        phase="Succeeded" if variant == 4 else ("Running" if node else "Pending"),
        deleting=variant == 5, ready=bool(node), requests={"nvidia.com/gpu": 3},
        workload=workload, pool="a100" if variant == 7 else "h100", replica=replica,
        owner_uid="someone" if variant == 6 else f"u-{workload}",
        unschedulable_since=None, unschedulable_message="",
    )  # fmt: skip


# Built once: a variant drawn again is the same object, as the caches keep unchanged facts.
FACTS = {(w, v): _workload(w, v) for w in WORKLOADS for v in range(8)}
PODS = {(w, r, v): _pod(w, r, v) for w in WORKLOADS for r in REPLICAS for v in range(8)}
DECISIONS = {
    (w, v): Placed("h100", {0: NODES[v], 1: NODES[(v + 1) % 3]}, NOW)
    for w in WORKLOADS
    for v in (0, 1)
}
DECISIONS.update({(w, 2): Placed("a100", {0: "n0"}, NOW) for w in WORKLOADS})

step = st.fixed_dictionaries(
    {
        "pools": st.integers(0, 1),
        "fleet": st.integers(0, 1),
        "workloads": st.dictionaries(st.sampled_from(WORKLOADS), st.integers(0, 7)),
        "pods": st.dictionaries(
            st.tuples(st.sampled_from(WORKLOADS), st.sampled_from(REPLICAS)), st.integers(0, 7)
        ),
        "recent": st.dictionaries(st.sampled_from(WORKLOADS), st.integers(0, 2)),
        # A decision made again (an equal Placed, not the same object) must count as new.
        "fresh": st.booleans(),
        # Whether placement looks at this World's pools (a cycle with nothing to place
        # does not): the changes meanwhile must still reach the next look.
        "look": st.booleans(),
        # What the World is told changed since the copy before (Informers.copy, and the
        # ledger's decisions): nothing (it compares objects); the keys that changed; or a
        # copy that follows one it never saw, with no keys (it must not trust them).
        "edits": st.sampled_from(("none", "chained", "gap")),
    }
)


def _changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> frozenset[str]:
    """The keys set, replaced or deleted between two copies, as the caches record them."""
    keys = before.keys() | after.keys()
    return frozenset(k for k in keys if before.get(k) is not after.get(k))


def _with_edits(steps: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Edits | None]]:
    """Each step with the edits a copy of the caches would carry (the step's `edits`)."""
    out: list[tuple[dict[str, Any], Edits | None]] = []
    serial, last = 0, None
    for s in steps:
        fields = _fields(s)
        serial += 1 if s["edits"] != "gap" else 2
        edits: Edits | None = None
        if s["edits"] == "chained" and last is not None:
            keys = {f: _changed(last[f], fields[f]) for f in ("workloads", "recent")}
            edits = Edits(serial, keys)
        elif s["edits"] == "gap":
            edits = Edits(serial, {"workloads": frozenset(), "recent": frozenset()})
        elif s["edits"] == "chained":
            edits = Edits(serial, {"workloads": None, "recent": None})  # the first copy
        out.append(({**s, "_fields": fields}, edits))
        last = fields
    return out


def _fields(s: Mapping[str, Any]) -> dict[str, Any]:
    recent = {f"ml/{w}": DECISIONS[(w, v)] for w, v in s["recent"].items()}
    if s["fresh"]:
        recent = {k: dataclasses.replace(p) for k, p in recent.items()}
    workloads = {f"ml/{w}": FACTS[(w, v)] for w, v in s["workloads"].items()}
    return {"workloads": workloads, "recent": recent}


def _world(s: Mapping[str, Any], cache: WorldCache, edits: Edits | None = None) -> World:
    fields = s.get("_fields") or _fields(s)
    return World(
        nodes=dict(FLEETS[s.get("fleet", 0)]),
        pods=[PODS[(w, r, v)] for (w, r), v in s["pods"].items()],
        pools=dict(POOLS[s["pools"]]),
        workloads=dict(fields["workloads"]),
        namespaces={},
        recent=dict(fields["recent"]),
        cache=cache,
        edits=edits,
    )


def _seen(world: World) -> tuple[Any, ...]:
    by_workload = {k: sorted(p.uid for p in v) for k, v in world.pods_by_workload.items() if v}
    used = {n: dict(r) for n, r in world.devices.used.items() if any(r.values())}
    reserved = {n: dict(r) for n, r in world.devices.reserved.items() if any(r.values())}
    free = {n: world.free(n, "nvidia.com/gpu") for n in NODES}
    keys = sorted(world.workloads.keys() | world.recent.keys() | {"ml/none"})
    placed = {k: (p.pool, sorted(p.assignments.items())) if p else None for k in keys
              for p in [world.placement_of(k)]}  # fmt: skip
    releases = {
        n: sorted((r.at, r.devices) for r in rs) for n, rs in world.devices.releases.items() if rs
    }
    states = [n for pool in world.pool_specs for n in world.pool_state(pool).nodes]
    # NodeStates are built without validation (model_construct): the World keeps the bound.
    assert all(0 <= n.free <= n.allocatable for n in states), states
    return (
        by_workload,
        used,
        reserved,
        free,
        placed,
        sorted(world.unplaced),
        releases,
        world.layout.members,
        {
            pool: [(n.name, n.ready, n.allocatable, n.free, n.releases) for n in state.nodes]
            for pool in world.pool_specs
            for state in [world.pool_state(pool)]
        },
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=8))
def test_a_world_over_the_last_ones_cache_matches_one_built_from_nothing(
    steps: list[dict[str, Any]],
) -> None:
    cache = WorldCache()
    for s, edits in _with_edits(steps):
        world = _world(s, cache, edits)
        if s["look"]:
            assert _seen(world) == _seen(_world(s, WorldCache()))


def test_an_older_world_keeps_its_figures_when_a_newer_one_is_built() -> None:
    """The figures by node are replaced in the cache, never changed in place: a World still
    in use (a cycle's senders hold theirs) does not see the next one's pods."""
    cache = WorldCache()
    s: dict[str, Any] = {
        "pools": 0,
        "workloads": {"a": 1},
        "pods": {},
        "recent": {},
        "fresh": False,
        "look": True,
    }
    first = _world(s, cache)
    before = _seen(first)
    _world({**s, "pods": {("a", 0): 1, ("a", 1): 2}}, cache)
    assert _seen(first) == before
    assert before[2] == {"n0": {"nvidia.com/gpu": 3}, "n1": {"nvidia.com/gpu": 3}}


def test_a_pool_is_looked_at_again_when_only_a_release_moved() -> None:
    """A running workload given an estimated duration frees its devices at a known time:
    no device count moves, yet placement must see the release."""
    cache = WorldCache()
    bound = {("a", 0): 1, ("a", 1): 1}
    s: dict[str, Any] = {"pools": 0, "workloads": {"a": 1}, "pods": bound, "recent": {}}
    s.update(fresh=False, look=True)
    for variant in (1, 7, 1):
        step = {**s, "workloads": {"a": variant}}
        assert _seen(_world(step, cache)) == _seen(_world(step, WorldCache()))
    assert _world({**s, "workloads": {"a": 7}}, cache).pool_state("h100").nodes[0].releases
