"""The operator's pure arithmetic: lifecycle status from pods, without a cluster."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera import api
from tessera.world.caches import WorldCache
from tessera.world.facts import (
    HOSTNAME_LABEL,
    NodeLabels,
    PodFacts,
    fingerprint,
    node_facts,
    object_facts,
    pod_facts,
)
from tessera.world.pacing import (
    BURST_WRITE_AFTER,
    FIRST_WRITE_AFTER,
    LONE_HOLD,
    PROGRESS_EVERY,
    QUIET_AFTER_BURST,
    SLOW_START,
    Bursts,
    CountsWrite,
    RecentPlacements,
    bursting,
    counts_write,
    fallback_reason,
    first_write_due,
    progress_only,
)
from tessera.world.snapshot import World
from tessera.world.status import condition, lifecycle_status

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def spec(replicas: int = 2, restart: str = "Never") -> api.WorkloadSpec:
    template = {"spec": {"restartPolicy": restart, "containers": [{"name": "m", "image": "x"}]}}
    return api.WorkloadSpec(replicas=replicas, template=template)


def pod(replica: int, phase: str = "Running", ready: bool = True, pool: str = "h100") -> PodFacts:
    return PodFacts(
        namespace="ml", name=f"w-{pool}-{replica}", uid=f"u{replica}", node="n0", phase=phase,
        deleting=False, ready=ready, requests={"nvidia.com/gpu": 8}, workload="w", pool=pool,
        replica=replica, owner_uid="owner", unschedulable_since=None, unschedulable_message="",
    )  # fmt: skip


def status(
    s: api.WorkloadSpec, was: dict[str, Any], pods: list[PodFacts], **kw: Any
) -> dict[str, Any]:
    current = {p.replica: p for p in pods if p.replica is not None}
    return lifecycle_status(
        s, "h100", was, 3, current, kw.get("old", []), kw.get("created", 0), kw.get("now", NOW)
    )


def conds(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in result["conditions"]}


def test_all_pods_running_and_ready_is_running_and_ready() -> None:
    result = status(spec(), {"phase": "Placed"}, [pod(0), pod(1)])
    assert result["phase"] == "Running" and result["readyReplicas"] == 2
    assert result["summary"] == {"ready": "2/2"} and result["observedGeneration"] == 3
    assert conds(result)["Ready"]["status"] == "True"


def test_ready_transition_time_stays_put_while_nothing_changes() -> None:
    first = status(spec(), {"phase": "Placed"}, [pod(0), pod(1)])
    again = status(spec(), first, [pod(0), pod(1)], now=NOW + timedelta(minutes=5))
    assert again == first  # same pods, same status: nothing to write


def test_batch_ends_succeeded_or_failed_with_a_reason() -> None:
    done = status(
        spec(), {"phase": "Running"}, [pod(0, "Succeeded", False), pod(1, "Succeeded", False)]
    )
    assert done["phase"] == "Succeeded" and conds(done)["Complete"]["reason"] == "Succeeded"
    failed = status(spec(), {"phase": "Running"}, [pod(0, "Failed", False), pod(1)])
    assert failed["phase"] == "Failed" and conds(failed)["Failed"]["reason"] == "PodFailed"
    assert "w-h100-0" in failed["message"]
    lost = status(spec(), {"phase": "Running"}, [pod(1)])
    assert lost["phase"] == "Failed" and conds(lost)["Failed"]["reason"] == "PodLost"


def test_pods_still_being_created_keep_the_workload_placed() -> None:
    result = status(spec(), {"phase": "Placed"}, [pod(0, "Pending", False)], created=1)
    assert result["phase"] == "Placed" and result["replicas"] == 2
    assert conds(result)["Ready"]["reason"] == "ReplicasNotReady"


def test_a_refused_pod_is_the_message_until_every_replica_exists() -> None:
    placed = "placed on h100 (H100-SXM5-80GB), score 90.0, 2 x 8 nvidia.com/gpu"
    decided = {
        "phase": "Placed",
        "message": placed,
        "conditions": [condition("Placed", True, "Placed", placed, 3, [], NOW)],
    }
    refusal = 'pod w-h100-1 refused: pods "w-h100-1" is forbidden: exceeded quota: gpus'

    def refused(was: dict[str, Any], pods: list[PodFacts], created: int = 0) -> dict[str, Any]:
        current = {p.replica: p for p in pods}
        return lifecycle_status(spec(), "h100", was, 3, current, [], created, NOW, refusal)

    # Replica 1's pod was refused: the refusal is the message and Ready's reason.
    half = refused(decided, [pod(0)])
    assert half["phase"] == "Placed" and half["message"] == refusal
    assert conds(half)["Ready"]["reason"] == "PodsRefused"
    assert conds(half)["Ready"]["message"] == refusal
    assert conds(half)["Placed"]["message"] == placed  # where it is placed is kept
    # Sent again and created this cycle: no longer missing, so not refused.
    sent = refused(decided, [pod(0)], created=1)
    assert conds(sent)["Ready"]["reason"] == "ReplicasNotReady" and sent["message"] == placed
    # Once every pod exists, the message is the placement's again.
    both = status(spec(), half, [pod(0), pod(1)])
    assert both["phase"] == "Running" and both["message"] == placed
    assert conds(both)["Ready"]["reason"] == "AllReplicasReady"


def test_a_service_stays_running_while_it_heals_and_counts_old_pods_in_migration() -> None:
    svc = spec(3, "Always")
    healing = status(svc, {"phase": "Running"}, [pod(0), pod(1)])
    assert healing["phase"] == "Running" and healing["readyReplicas"] == 2
    migrating = status(svc, {"phase": "Running"}, [pod(0), pod(1)], old=[pod(2, pool="a100")])
    assert migrating["readyReplicas"] == 3 and migrating["replicas"] == 3


def test_progress_only_is_a_change_of_counts_not_of_phase_or_reasons() -> None:
    def status(phase: str, ready: str, reason: str) -> dict[str, Any]:
        cond = {"type": "Ready", "status": "False", "reason": reason, "message": ready}
        return {"phase": phase, "summary": {"ready": ready}, "conditions": [cond]}

    starting = status("Placed", "0/8", "ReplicasNotReady")
    assert progress_only(starting, status("Placed", "3/8", "ReplicasNotReady"))
    assert not progress_only(starting, status("Running", "3/8", "ReplicasNotReady"))
    assert not progress_only(starting, status("Placed", "3/8", "PodFailed"))
    assert not progress_only({}, status("Placed", "0/8", "ReplicasNotReady"))  # first write


def test_a_starting_gangs_counts_wait_for_running_unless_the_start_is_slow() -> None:
    now, with_running, later = CountsWrite.NOW, CountsWrite.WITH_RUNNING, CountsWrite.LATER
    gang = spec(8)
    decided = status(gang, {}, [], created=8)  # the decision's write: 8 pods created, none ready
    assert decided["phase"] == "Placed" and decided["summary"]["ready"] == "0/8"
    starting = [pod(r) for r in range(3)] + [pod(r, "Pending", False) for r in range(3, 8)]
    three = status(gang, decided, starting)
    assert three["summary"]["ready"] == "3/8" and progress_only(decided, three)
    at = NOW + timedelta(seconds=60)  # past PROGRESS_EVERY: counts alone once went out
    due = PROGRESS_EVERY  # seconds since the last write: the counts would be due
    assert counts_write(decided, three, NOW, at, due) is with_running
    slow = NOW + timedelta(seconds=SLOW_START)
    assert counts_write(decided, three, NOW, slow, due) is now
    assert counts_write(decided, three, NOW, slow, 5.0) is later  # a slow start: throttled
    assert counts_write(decided, three, None, at, due) is now  # placed when, not known
    running = status(gang, three, [pod(r) for r in range(8)])
    assert running["phase"] == "Running"
    assert counts_write(three, running, NOW, at, 0.0) is now  # Running: at once
    assert counts_write({}, decided, NOW, at, 0.0) is now  # the first write
    svc = spec(3, "Always")
    one = status(svc, {"phase": "Running"}, [pod(0)])
    two = status(svc, one, [pod(0), pod(1)])
    assert progress_only(one, two)  # a running service's counts: not held for anything
    assert counts_write(one, two, NOW, at, due) is now
    assert counts_write(one, two, NOW, at, due - 1) is later  # but at most every 30 s


def test_workload_facts_keep_a_fingerprint_of_the_candidates_not_the_list() -> None:
    written = [
        {"pool": "h100", "feasible": True, "fitsNow": True, "score": 71.0, "reasons": []},
        {"pool": "mi300x", "feasible": False, "score": 0.0, "reasons": ["needs cuda"]},
    ]
    # As the API server returns them: integral floats become integers, keys in any order.
    read_back = [
        {"score": 71, "pool": "h100", "fitsNow": True, "feasible": True},
        {"reasons": ["needs cuda"], "pool": "mi300x", "feasible": False, "score": 0},
    ]
    body = {
        "metadata": {"name": "w", "namespace": "ns", "resourceVersion": "7"},
        "spec": {"replicas": 1},
        "status": {"phase": "Pending", "candidates": read_back, "message": "waiting"},
    }
    facts = object_facts(body)
    assert "candidates" not in facts.status and facts.status["message"] == "waiting"
    assert facts.candidates == fingerprint(written)
    assert body["status"]["candidates"] == read_back  # the body itself is left alone
    changed = [written[0], {**written[1], "reasons": ["needs rocm"]}]
    assert fingerprint(changed) != fingerprint(written)
    assert fingerprint([{**written[0], "fitsNow": False}, written[1]]) != fingerprint(written)


def test_a_workload_whose_decision_was_not_written_is_placed_where_its_pods_are() -> None:
    """The operator creates pods first and writes the decision with the first status; if it
    stops in between, the next one must read the placement from the pods, not place again."""
    body = {"metadata": {"name": "w", "namespace": "ml", "uid": "owner", "resourceVersion": "1"}}
    facts = object_facts({**body, "spec": {}, "status": {}})
    gone = dataclasses.replace(pod(0, pool="mi300x"), deleting=True)
    world = World(
        nodes={}, pods=[pod(0), pod(1), gone], pools={}, workloads={"ml/w": facts}, namespaces={}
    )
    placed = world.placement_of("ml/w")
    assert placed is not None and placed.pool == "h100" and placed.assignments == {0: "n0", 1: "n0"}
    # Pods of a pool the workload was withdrawn from, or another owner's, place nothing.
    withdrawn = object_facts(
        {**body, "spec": {}, "status": {"excludedPools": [{"pool": "h100", "reason": "stuck"}]}}
    )
    world = World(nodes={}, pods=[pod(0)], pools={}, workloads={"ml/w": withdrawn}, namespaces={})
    assert world.placement_of("ml/w") is None
    stranger = object_facts({**body, "metadata": {**body["metadata"], "uid": "other"}})
    world = World(nodes={}, pods=[pod(0)], pools={}, workloads={"ml/w": stranger}, namespaces={})
    assert world.placement_of("ml/w") is None


def test_pods_of_an_earlier_spec_are_not_a_placement_the_status_does_not_record() -> None:
    """The spec was edited after the pods were created and before the decision was written
    (the CRD freezes it only once status.pool is set): those pods are stale, not adopted."""
    meta = {"name": "w", "namespace": "ml", "uid": "owner", "resourceVersion": "1"}

    def workload(generation: int, status: dict[str, Any]) -> Any:
        body = {"metadata": {**meta, "generation": generation}, "spec": {}, "status": status}
        return object_facts(body)

    def world(facts: Any, *pods: PodFacts) -> World:
        return World(nodes={}, pods=list(pods), pools={}, workloads={"ml/w": facts}, namespaces={})

    def built(generation: int | None, replica: int = 0, pool: str = "h100") -> PodFacts:
        return dataclasses.replace(pod(replica, pool=pool), generation=generation)

    edited = workload(2, {})
    old = world(edited, built(1), built(1, 1))
    assert old.placement_of("ml/w") is None
    assert [p.name for p in old.stale_pods("ml/w")] == ["w-h100-0", "w-h100-1"]
    current = world(edited, built(2), built(2, 1))
    assert current.stale_pods("ml/w") == [] and current.placement_of("ml/w") is not None
    # Pods from before the annotation existed are read as before.
    unknown = world(edited, built(None), built(None, 1))
    assert unknown.stale_pods("ml/w") == [] and unknown.placement_of("ml/w") is not None
    # Once the status records the pool the spec is frozen: a later generation comes from a
    # mutable field (priority, objective) and the pods stay.
    placed = workload(2, {"pool": "h100", "phase": "Running"})
    assert world(placed, built(1)).stale_pods("ml/w") == []
    # Pods on a pool it was withdrawn from are deleted already and never adopted.
    withdrawn = workload(2, {"excludedPools": [{"pool": "a100", "reason": "stuck"}]})
    assert world(withdrawn, built(1, pool="a100")).stale_pods("ml/w") == []
    # Another owner's pods are not this workload's to delete.
    stranger = dataclasses.replace(built(1), owner_uid="other")
    assert world(edited, stranger).stale_pods("ml/w") == []


def test_a_pod_says_the_generation_it_was_built_from() -> None:
    def body(annotations: dict[str, str]) -> dict[str, Any]:
        meta = {"name": "p", "namespace": "ml", "annotations": annotations}
        return {"metadata": meta, "spec": {}, "status": {}}

    assert pod_facts(body({api.GENERATION_ANNOTATION: "3"})).generation == 3
    assert pod_facts(body({})).generation is None
    assert pod_facts(body({api.GENERATION_ANNOTATION: "three"})).generation is None


_label = st.sampled_from(["a", "b", "nvidia.com/gpu.product", HOSTNAME_LABEL])


@given(st.dictionaries(_label, st.sampled_from(["x", "y", "n1"]), max_size=4), _label)
def test_node_labels_read_as_the_labels_they_were_built_from(
    labels: dict[str, str], key: str
) -> None:
    got = NodeLabels(labels)
    assert got == labels and labels == got and dict(got) == labels
    assert len(got) == len(labels) and set(got) == set(labels)
    assert (key in got) == (key in labels) and got.get(key) == labels.get(key)
    assert got != {**labels, "other": "z"}


def test_nodes_differing_only_in_hostname_hold_their_other_labels_once() -> None:
    """5,000 nodes in 20 pools: a label dict per node was a fifth of the memory over the
    imports. Facts still tell nodes apart, and a relabelled node gets labels of its own."""
    gpu = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "topology.kubernetes.io/zone": "a"}

    def node(name: str, **extra: str) -> Any:
        labels = {**gpu, HOSTNAME_LABEL: name, **extra}
        return node_facts({"metadata": {"name": name, "labels": labels}, "status": {}})

    one, two = node("n1"), node("n2")
    assert one.labels._shared is two.labels._shared  # type: ignore[attr-defined]
    assert one.labels[HOSTNAME_LABEL] == "n1" and two.labels[HOSTNAME_LABEL] == "n2"
    assert one != two and one == node("n1")
    relabelled = node("n2", team="ml")
    assert relabelled != two and relabelled.labels["team"] == "ml" and "team" not in two.labels
    assert api.LabelSelector(match_labels={"team": "ml"}).matches(relabelled.labels)


_key = st.sampled_from(["zone", "gpu", "team"])
_value = st.sampled_from(["a", "b"])
_selector = st.fixed_dictionaries(
    {
        "matchLabels": st.dictionaries(_key, _value, max_size=2),
        "matchExpressions": st.lists(
            st.one_of(
                st.fixed_dictionaries(
                    {"key": _key, "operator": st.sampled_from(["In", "NotIn"]),
                     "values": st.lists(_value, min_size=1, max_size=2)}
                ),
                st.fixed_dictionaries(
                    {"key": _key, "operator": st.sampled_from(["Exists", "DoesNotExist"])}
                ),
            ),
            max_size=2,
        ),
    }
)  # fmt: skip


@given(
    st.lists(_selector, min_size=1, max_size=4),
    st.lists(st.dictionaries(_key, _value, max_size=3), min_size=1, max_size=12),
)
def test_each_node_belongs_to_the_oldest_pool_that_selects_it_then_by_name(
    selectors: list[dict[str, Any]], labels: list[dict[str, str]]
) -> None:
    """Pool membership is worked out once per kind of node (the label keys the selectors
    read): every node must still land where each selector, run on it alone, puts it."""
    pools = {
        f"p{i}": object_facts(
            {
                "metadata": {"name": f"p{i}", "resourceVersion": "1"},
                "spec": {"accelerator": {"vendor": "nvidia"}, "nodeSelector": s},
            }
        )
        for i, s in enumerate(selectors)
    }
    nodes = {
        f"n{i:02}": node_facts(
            {"metadata": {"name": f"n{i:02}", "labels": {**ls, HOSTNAME_LABEL: f"n{i:02}"}}}
        )
        for i, ls in enumerate(labels)
    }
    world = World(nodes=nodes, pods=[], pools=pools, workloads={}, namespaces={})
    want: dict[str, list[str]] = {name: [] for name in pools}
    for name, facts in sorted(nodes.items()):
        owners = [
            p
            for p, s in sorted(world.pool_specs.items())
            if not s.node_selector.is_empty() and s.node_selector.matches(facts.labels)
        ]
        if owners:
            want[owners[0]].append(name)
        for other in owners[1:]:
            assert world.layout.overlaps[other][name] == owners[0]
    assert world.layout.members == want


def test_reserved_devices_follow_pods_and_status_across_cycles() -> None:
    """Each World reuses the last one's parsed placements and reservations for unchanged
    workloads: what it reserves must still follow every bind, re-placement and deletion."""
    pool = object_facts(
        {
            "metadata": {"name": "h100", "resourceVersion": "1"},
            "spec": {
                "accelerator": {"vendor": "nvidia", "model": "H100-SXM5-80GB"},
                "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "H100"}},
            },
        }
    )
    nodes = {
        n: node_facts(
            {
                "metadata": {"name": n, "labels": {"nvidia.com/gpu.product": "H100"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            }
        )
        for n in ("n0", "n1")
    }

    def workload(rv: str, assignments: dict[int, str]) -> Any:
        return object_facts(
            {
                "metadata": {"name": "w", "namespace": "ml", "uid": "owner", "resourceVersion": rv},
                "spec": {"replicas": 2, "accelerator": {"count": 4}},
                "status": {
                    "pool": "h100",
                    "assignments": [{"replica": r, "node": n} for r, n in assignments.items()],
                },
            }
        )

    def unbound(p: PodFacts) -> PodFacts:
        return dataclasses.replace(p, node="", phase="Pending", ready=False)

    cache = WorldCache()

    def world(w: Any, pods: list[PodFacts]) -> World:
        return World(
            nodes=nodes, pods=pods, pools={"h100": pool}, workloads={"ml/w": w} if w else {},
            namespaces={}, cache=cache,
        )  # fmt: skip

    placed = workload("1", {0: "n0", 1: "n1"})
    pending = [unbound(pod(0)), unbound(pod(1))]
    assert world(placed, pending).free("n1", "nvidia.com/gpu") == 4
    assert world(placed, pending).free("n0", "nvidia.com/gpu") == 4  # reused: same answer
    bound = [pending[0], dataclasses.replace(pod(1), node="n1", requests={"nvidia.com/gpu": 4})]
    w = world(placed, bound)
    assert w.free("n0", "nvidia.com/gpu") == 4
    assert w.free("n1", "nvidia.com/gpu") == 4  # used by the bound pod, no longer reserved
    moved = workload("2", {0: "n1", 1: "n1"})
    w = world(moved, pending)
    assert w.free("n0", "nvidia.com/gpu") == 8 and w.free("n1", "nvidia.com/gpu") == 0
    assert world(None, []).free("n1", "nvidia.com/gpu") == 8
    assert (
        not cache.placed and not cache.workloads.promised and not cache.workloads.totals
    )  # nothing kept for a deleted workload


def test_a_pool_status_write_keeps_the_cached_membership_and_resolution() -> None:
    """Tessera writes a pool's device counts every few seconds in a burst, each a new
    resourceVersion: only the pool's spec (or its nodes) make a World resolve it again."""
    nodes = {
        n: node_facts(
            {
                "metadata": {"name": n, "labels": {"nvidia.com/gpu.product": "H100"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            }
        )
        for n in ("n0", "n1")
    }

    def pool(rv: str, devices: int, model: str = "H100-SXM5-80GB") -> Any:
        return object_facts(
            {
                "metadata": {"name": "h100", "resourceVersion": rv, "generation": 1},
                "spec": {
                    "accelerator": {"vendor": "nvidia", "model": model},
                    "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "H100"}},
                },
                "status": {"devices": {"free": devices}},
            }
        )

    cache = WorldCache()

    def world(p: Any) -> World:
        return World(nodes=nodes, pods=[], pools={"h100": p}, workloads={}, namespaces={},
                     cache=cache)  # fmt: skip

    assert world(pool("1", 16)).layout.rebuilt == {"h100"}
    owners = cache.owners
    again = world(pool("2", 12))  # its status written: a new resourceVersion, the same spec
    assert again.layout.rebuilt == set() and cache.owners["n0"][1] is owners["n0"][1]
    assert again.layout.members == {"h100": ["n0", "n1"]}
    edited = world(pool("3", 12, model="H100-PCIe-80GB"))  # its spec edited
    assert edited.layout.rebuilt == {"h100"}
    assert edited.accelerator("h100").model == "H100-PCIe-80GB"


def test_a_node_state_is_reused_while_its_node_and_free_devices_stay_the_same() -> None:
    """Placement's NodeStates are carried from World to World: a burst's cycle changes the
    devices in use on a few nodes of thousands, and only those are built again; a node's
    facts changing (its pool resolved again), or placement idle, builds them all again."""

    def node(name: str, devices: str = "8") -> Any:
        return node_facts(
            {
                "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "H100"}},
                "status": {"allocatable": {"nvidia.com/gpu": devices}},
            }
        )

    pool = object_facts(
        {
            "metadata": {"name": "h100", "resourceVersion": "1", "generation": 1},
            "spec": {
                "accelerator": {"vendor": "nvidia", "model": "H100-SXM5-80GB"},
                "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "H100"}},
            },
        }
    )
    cache = WorldCache()

    def states(nodes: dict[str, Any], pods: list[PodFacts] | None = None) -> dict[str, Any]:
        world = World(nodes=nodes, pods=pods or [], pools={"h100": pool}, workloads={},
                      namespaces={}, cache=cache)  # fmt: skip
        return {n.name: n for p in world.snapshot().pools for n in p.nodes}

    nodes = {"n0": node("n0"), "n1": node("n1"), "n2": node("n2")}
    first = states(nodes)
    again = states(dict(nodes))
    assert all(again[n] is first[n] for n in nodes)
    bound = dataclasses.replace(pod(0), node="n1", requests={"nvidia.com/gpu": 3})
    busy = states(nodes, [bound])  # devices taken on n1 alone
    assert busy["n0"] is first["n0"] and busy["n2"] is first["n2"]
    assert busy["n1"] is not first["n1"] and busy["n1"].free == 5
    assert states(nodes, [bound])["n1"] is busy["n1"]  # the same pod: nothing to build
    assert states(nodes)["n1"].free == 8  # the pod gone: its devices free again
    changed = states({**nodes, "n1": node("n1", devices="4")})
    assert changed["n1"].allocatable == 4 and changed["n0"] is not first["n0"]
    assert set(states({"n0": nodes["n0"]})) == {"n0"}
    kept = states({"n0": nodes["n0"]})["n0"]
    assert states({"n0": nodes["n0"]})["n0"] is kept
    cache.forget_node_states()
    assert states({"n0": nodes["n0"]})["n0"] is not kept


def test_a_gang_falls_back_once_a_pod_is_unschedulable_or_refused_past_the_limit() -> None:
    def stuck(seconds: float, node: str = "") -> PodFacts:
        return dataclasses.replace(
            pod(0, phase="Pending", ready=False), node=node,
            unschedulable_since=NOW - timedelta(seconds=seconds),
            unschedulable_message="0/4 nodes are available",
        )  # fmt: skip

    assert fallback_reason(300, [pod(0), stuck(299)], NOW) is None
    assert fallback_reason(300, [pod(0), stuck(301)], NOW) == (
        "pods unschedulable for over 300s: 0/4 nodes are available"
    )
    assert fallback_reason(300, [stuck(301, node="n0")], NOW) is None  # bound since
    assert fallback_reason(0, [stuck(10_000)], NOW, (10_000.0, "quota")) is None  # never
    assert fallback_reason(300, [pod(0)], NOW, (299.0, "exceeded quota")) is None
    assert fallback_reason(300, [pod(0)], NOW, (301.0, "exceeded quota")) == (
        "pods refused for over 300s: exceeded quota"
    )


def test_a_burst_starts_over_64_pods_and_lasts_while_16_a_second_follow() -> None:
    assert not bursting(False, 64, 0)
    assert bursting(False, 65, 0)
    assert bursting(True, 64, 0)  # a steady stream near the threshold stays one burst
    assert bursting(True, 16, 0)
    assert not bursting(True, 15, 0)
    assert bursting(True, 0, 16)  # a cycle that placed nothing within the stream
    assert bursting(True, 2, 14)  # nor one that placed few
    assert not bursting(True, 0, 0)
    assert not bursting(False, 16, 0)  # a trickle never starts one


def test_a_burst_counts_the_pods_of_the_last_second_however_cycles_split_them() -> None:
    """80 pods a second decided every half second (ten gangs of 4 a cycle) is a burst by
    its second cycle; it ends once the window holds fewer than 16."""
    assert not bursting(False, 40, 0)
    assert bursting(False, 40, 40)
    assert not bursting(False, 30, 34)  # 64 within the window: not over it
    assert bursting(True, 7, 100)  # within a second of the stream
    assert not bursting(True, 7, 8)


def test_a_burst_is_known_by_its_first_large_cycle() -> None:
    """At a burst's start the window is not full: 40 pods seen pending over 0.3 s are a
    burst (over 32 in half a second), not 40 or 64 over the whole window, nor 32 at once."""
    assert bursting(False, 40, 8, span=0.3)
    assert not bursting(False, 40, 8)  # the same pods over a whole second: 48 a second
    assert not bursting(False, 32, 0, span=0.0)  # a batch of 32 at once is not one
    assert bursting(False, 33, 0, span=0.0)
    assert not bursting(False, 48, 0, span=0.8)  # over 51.2 at 0.8 s: not over it
    assert bursting(False, 52, 0, span=0.8)
    assert not bursting(False, 64, 0, span=5.0)  # long pending: counted over the window


def test_the_window_spans_from_its_first_pod_seen_pending() -> None:
    recent = RecentPlacements()
    assert recent.span(100.0) == 0.0  # nothing placed yet
    assert not recent.placing
    recent.place(100.0, 0)
    assert recent.span(100.1) == 0.0  # a cycle that placed nothing counts for nothing
    assert not recent.placing
    recent.place(100.2, 8, since=100.15)
    assert recent.span(100.2) == pytest.approx(0.05)
    assert recent.placing  # the last cycle placed: the loop runs the next sooner
    recent.place(100.5, 40, since=100.4)
    assert recent.span(100.5) == pytest.approx(0.35)  # from the first cycle's first pod
    recent.place(101.3, 5)  # 100.2 has left the window
    assert recent.span(101.3) == pytest.approx(0.9)
    recent.place(103.0, 2)  # when not said, first seen when placed
    assert recent.span(103.0) == 0.0
    recent.place(103.2, 0)
    assert not recent.placing


def test_the_window_holds_the_pods_of_the_cycles_of_the_last_second() -> None:
    recent = RecentPlacements()
    assert recent.place(100.0, 40) == 0
    assert recent.place(100.5, 30) == 40
    assert recent.place(101.0, 10) == 70  # a cycle exactly a second before still counts
    assert recent.place(101.6, 5) == 10  # 100.0 and 100.5 have left the window
    assert recent.place(105.0, 0) == 0


def test_a_decision_waits_for_its_pods_to_run_and_for_the_burst_to_end() -> None:
    running = api.Phase.RUNNING.value
    assert not first_write_due(9.9, burst=False)
    assert first_write_due(FIRST_WRITE_AFTER, burst=False)
    assert first_write_due(0.0, burst=False, phase=running)  # out of a burst: Running at once
    assert not first_write_due(60.0, burst=True)  # the burst's pod creates come first
    assert not first_write_due(60.0, burst=True, phase=running)  # good news waits too
    assert first_write_due(BURST_WRITE_AFTER, burst=True)  # a flood never hides the pool for long
    assert first_write_due(BURST_WRITE_AFTER, burst=True, phase=running)
    assert first_write_due(30.0, burst=False)  # the burst is over: due at once
    assert first_write_due(0.0, burst=True, news=True)  # bad news never waits
    assert first_write_due(0.0, burst=True, phase=api.Phase.FAILED.value)


def test_after_a_burst_a_starting_decision_waits_for_quiet_not_a_running_one() -> None:
    running = api.Phase.RUNNING.value
    # Right after a burst its held decisions whose pods still start wait for QUIET_AFTER_BURST,
    # so one write goes out with Running instead of two (Placed now, Running moments later).
    assert not first_write_due(60.0, burst=False, quiet=0.0)
    assert not first_write_due(60.0, burst=False, quiet=QUIET_AFTER_BURST - 0.1)
    assert first_write_due(60.0, burst=False, quiet=QUIET_AFTER_BURST)
    assert not first_write_due(FIRST_WRITE_AFTER - 0.1, burst=False, quiet=QUIET_AFTER_BURST)
    assert first_write_due(0.0, burst=False, phase=running, quiet=0.0)  # Running: at once
    assert first_write_due(0.0, burst=False, news=True, quiet=0.0)  # bad news: at once
    assert first_write_due(BURST_WRITE_AFTER, burst=False, quiet=0.0)  # never past the cap
    # A decision made outside any burst is written at once (its age is infinite).
    assert first_write_due(math.inf, burst=False)
    assert first_write_due(math.inf, burst=False, quiet=0.0)
    # Held (a decision made outside a burst, in its hold): routine news waits for the hold.
    assert not first_write_due(0.5, burst=False, phase=running, held=True)
    assert not first_write_due(FIRST_WRITE_AFTER, burst=False, held=True)
    assert first_write_due(0.5, burst=False, news=True, held=True)  # bad news: at once
    assert first_write_due(0.5, burst=False, phase=api.Phase.FAILED.value, held=True)


def test_the_quiet_after_a_burst_restarts_while_its_pods_still_come_up() -> None:
    """At 5,000 nodes a burst's pods ran up to 130 s after their Workloads were created: a
    held decision whose pods still start waits while other held decisions' pods are seen
    running, not only QUIET_AFTER_BURST after the burst's end (then it was written twice,
    Placed and moments later Running)."""
    bursts, sent = Bursts(), 1.0
    assert bursts.placed(0.0, 100)  # a burst
    assert not bursts.placed(2.0, 0)  # over: it ended at 2.0
    assert bursts.ended == 2.0
    assert not bursts.first_write_due(2.0 + QUIET_AFTER_BURST - 0.1, sent)
    assert bursts.first_write_due(2.0 + QUIET_AFTER_BURST, sent)  # no pods seen running since
    bursts.ran(20.0)  # another held decision's pods run
    assert not bursts.first_write_due(2.0 + QUIET_AFTER_BURST, sent)  # starting, not stuck
    assert not bursts.first_write_due(20.0 + QUIET_AFTER_BURST - 0.1, sent)
    assert bursts.first_write_due(20.0 + QUIET_AFTER_BURST, sent)  # nothing ran for a while
    assert bursts.first_write_due(21.0, sent, api.Phase.RUNNING.value)  # its own run: at once
    bursts.ran(10.0)  # an older sighting never moves the quiet back
    assert bursts.first_write_due(20.0 + QUIET_AFTER_BURST, sent)
    bursts.ran(400.0)
    assert bursts.first_write_due(sent + BURST_WRITE_AFTER, sent)  # never past the cap
    assert bursts.first_write_due(400.0, sent, news=True)  # bad news: at once


def test_a_decision_made_outside_a_burst_is_held_and_joins_one_that_begins_meanwhile() -> None:
    """A burst is known only after its first cycles (`bursting`): their decisions, made
    outside it, are held LONE_HOLD and join it if it begins meanwhile (no Placed Event, one
    write); else they are due once the hold is over."""
    bursts = Bursts()
    assert not bursts.placed(0.0, 10)  # ten pods: not (yet) a burst
    assert bursts.lone_fate(0.0, 0.0) is None  # held
    assert bursts.lone_fate(0.0, LONE_HOLD - 0.01) is None
    assert bursts.lone_fate(0.0, LONE_HOLD) is True  # due: written, with its Placed Event
    assert bursts.placed(0.4, 60)  # the stream is a burst after all
    assert bursts.started == 0.4
    assert bursts.lone_fate(0.0, 0.4) is False  # decided before it: one of the burst's
    assert bursts.lone_fate(0.0, LONE_HOLD) is False
    assert not bursts.placed(3.0, 0)  # over
    assert bursts.lone_fate(0.0, 3.0) is False  # still the burst's once it ended
    assert bursts.lone_fate(3.5, 3.5 + LONE_HOLD) is True  # decided after it: lone
    assert bursts.placed(10.0, 100) and bursts.started == 10.0  # a new burst, a new start


@given(
    st.floats(min_value=0, max_value=1e6),
    st.booleans(),
    st.sampled_from([p.value for p in api.Phase]),
    st.booleans(),
    st.floats(min_value=0, max_value=1e6),
)
def test_quiet_after_a_burst_only_delays_a_routine_write(
    age: float, burst: bool, phase: str, news: bool, quiet: float
) -> None:
    """The quiet after a burst only ever delays a write (never brings one forward), never
    delays Running, bad news or an end, and never past BURST_WRITE_AFTER."""
    due = first_write_due(age, burst, phase, news, quiet)
    if due:
        assert first_write_due(age, burst, phase, news)
    if not burst and (news or phase != api.Phase.PLACED.value):
        assert due
    if age >= BURST_WRITE_AFTER:
        assert due


@given(
    st.floats(min_value=0, max_value=1e6),
    st.booleans(),
    st.sampled_from([p.value for p in api.Phase]),
    st.booleans(),
)
def test_a_decision_due_in_a_burst_is_due_outside_one(
    age: float, burst: bool, phase: str, news: bool
) -> None:
    """A burst only ever delays a decision's write, never brings it forward; pods that run
    never delay it; bad news and an end (Failed, Succeeded) are never held."""
    if first_write_due(age, burst, phase, news):
        assert first_write_due(age, False, phase, news)
    if first_write_due(age, burst):
        assert first_write_due(age, burst, api.Phase.RUNNING.value)
    if news or phase in (api.Phase.FAILED.value, api.Phase.SUCCEEDED.value):
        assert first_write_due(age, burst, phase, news)


@given(st.booleans(), st.integers(min_value=0, max_value=10_000), st.integers(0, 10_000))
def test_a_burst_is_monotonic_in_the_placements(was: bool, placed: int, before: int) -> None:
    """Placing more, now or within the window, never ends a burst that placing fewer would
    have kept; over 64 pods within the window always is one."""
    if bursting(was, placed, before):
        assert bursting(was, placed + 1, before)
        assert bursting(was, placed, before + 1)
    assert bursting(was, placed, before) or placed + before <= 64


@given(
    st.booleans(),
    st.integers(min_value=0, max_value=200),
    st.integers(0, 200),
    st.floats(0.0, 10.0),
    st.floats(0.0, 10.0),
)
def test_a_burst_over_a_shorter_span_is_still_one(
    was: bool, placed: int, before: int, span: float, shorter: float
) -> None:
    """The same pods seen pending over less time are never less of a burst; up to 32 never
    start one and over 64 always are one, whatever the span."""
    if bursting(was, placed, before, span):
        assert bursting(was, placed, before, min(span, shorter))
    if placed + before > 64:
        assert bursting(was, placed, before, span)
    if placed + before <= 32 and not was:
        assert not bursting(was, placed, before, span)
