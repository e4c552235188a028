"""A plan begun from the last plan's working state (placement.cycle.Prepared) must begin where
one built from the snapshot alone does, and so decide the same, whatever changed between the
two snapshots: free devices, releases, a node's readiness, size or taints, the pool's spec, a
node or a pool added or gone. Between snapshots the World keeps each unchanged node's
NodeState object, and so do these steps."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from builders import NOW, pool, snapshot, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.placement import NodeState, PoolState, Prepared, Release, Snapshot, plan
from tessera.placement.cycle import _pools
from tessera.placement.snapshot import Taint

NODES = 4
TAINTS = (Taint("maintenance", "", "NoSchedule"), Taint("drain", "soon", "NoExecute"))

# What one step does to one node of one pool.
change = st.fixed_dictionaries(
    {
        "pool": st.sampled_from(("h100", "l4")),
        "node": st.integers(0, NODES - 1),
        "what": st.sampled_from(
            ("free", "free", "free", "releases", "ready", "allocatable", "taint", "same")
        ),
        "value": st.integers(0, 8),
    }
)
step = st.fixed_dictionaries(
    {
        "changes": st.lists(change, max_size=4),
        # The pool's spec parsed again (a new object), or a node or a pool gone.
        "respec": st.booleans(),
        "drop_node": st.booleans(),
        "drop_pool": st.booleans(),
        "plan": st.booleans(),
    }
)


def _node(node: NodeState, what: str, value: int) -> NodeState:
    """The node after the change: a new object, as the World makes for a changed node."""
    update: dict[str, Any]
    if what == "free":
        update = {"free": min(value, node.allocatable)}
    elif what == "releases":
        update = {"releases": (Release(at=NOW + timedelta(hours=value + 1), devices=1),)}
    elif what == "ready":
        update = {"ready": not node.ready, "taints": ()}
    elif what == "allocatable":
        update = {"allocatable": max(value, 1), "free": min(node.free, max(value, 1))}
    elif what == "taint":
        update = {"ready": False, "taints": (TAINTS[value % 2],)}
    else:
        update = {}  # an equal node, another object
    return node.model_copy(update=update)


def _apply(pools: dict[str, PoolState], s: dict[str, Any]) -> dict[str, PoolState]:
    out = dict(pools)
    for c in s["changes"]:
        p = out[c["pool"]]
        nodes = list(p.nodes)
        if c["node"] >= len(nodes):
            continue
        nodes[c["node"]] = _node(nodes[c["node"]], c["what"], c["value"])
        gated = frozenset(n.name for n in nodes if n.taints)
        out[c["pool"]] = p.model_copy(update={"nodes": tuple(nodes), "gated": gated})
    h100 = out["h100"]
    if s["respec"]:
        h100 = h100.model_copy(update={"spec": h100.spec.model_copy()})
    if s["drop_node"] and len(h100.nodes) > 1:
        nodes = h100.nodes[:-1]
        gated = frozenset(n.name for n in nodes if n.taints)
        h100 = h100.model_copy(update={"nodes": nodes, "gated": gated})
    out["h100"] = h100
    return out


def _begun(snap: Snapshot, prepared: Prepared | None) -> list[tuple[Any, ...]]:
    """What a plan begins from, pool by pool."""
    return [
        (
            w.view.name,
            w.view.ready_allocatable,
            w.view.devices,
            dict(w.view.gated),
            dict(w.view.gated_allocatable),
            w.view.draining,
            dict(w.fit.free),
            {level: list(names) for level, names in w.fit.levels.items()},
            dict(w.fit.gated),
            {count: w.fit.room(count) for count in (1, 2, 4, 8)},
            w.releases,
        )
        for w in _pools(snap, NOW, prepared)
    ]


QUEUE = [
    workload("a", count=2, replicas=2),
    workload("b", count=8, duration="2h"),
    workload("c", count=1, replicas=3, objective="cost"),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=8))
def test_a_plan_begun_from_the_last_ones_pools_begins_and_decides_as_one_from_nothing(
    steps: list[dict[str, Any]],
) -> None:
    pools = {
        "h100": pool("h100", NODES, 8, free=[8, 3, 0, 5]),
        "l4": pool("l4", NODES, 4, releases={1: [(2.0, 2)]}),
    }
    prepared = Prepared()
    for s in steps:
        pools = _apply(pools, s)
        shown = {k: p for k, p in pools.items() if not (s["drop_pool"] and k == "l4")}
        snap = snapshot(*shown.values())
        if s["plan"]:
            with_prepared = [d.as_dict() for d in plan(QUEUE, snap, NOW, prepared=prepared)]
            assert with_prepared == [d.as_dict() for d in plan(QUEUE, snap, NOW)]
        assert _begun(snap, prepared) == _begun(snap, None)
        assert set(prepared.pools) == set(shown)  # a pool gone is not kept
