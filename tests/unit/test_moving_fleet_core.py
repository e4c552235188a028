"""A moving fleet without a cluster: node fitness (Ready, cordons, taints), which pool keeps a
node two pools select, pools being deleted, exclusions that lift, replicas lost with their
node, and namespaces being deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tessera import api, placement
from tessera.controller.ledger import Ledger
from tessera.controller.repairs import NO_NODE, lost_replicas
from tessera.world import exclusions
from tessera.world.caches import WorldCache
from tessera.world.facts import (
    NodeFacts,
    ObjectFacts,
    PodFacts,
    Taint,
    namespace_facts,
    node_facts,
    object_facts,
    pod_facts,
    tolerates,
    unfit_reason,
)
from tessera.world.pool_status import deletion_message, pool_status
from tessera.world.snapshot import World
from tessera.world.status import migration_waiting, settled_message

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LABEL = "example.com/pool"


def node(name: str, group: str = "a", **spec: Any) -> NodeFacts:
    ready = spec.pop("ready", True)
    return node_facts(
        {
            "metadata": {"name": name, "labels": {LABEL: group}},
            "spec": spec,
            "status": {
                "allocatable": {"example.com/dev": "8"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def pool(
    name: str, group: str = "a", created: str = "2026-12-01T00:00:00Z", **extra: Any
) -> ObjectFacts:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"u-{name}",
        "generation": extra.pop("generation", 1),
        "creationTimestamp": created,
        "resourceVersion": "1",
    }
    if extra.pop("deleting", False):
        meta["deletionTimestamp"] = "2026-12-06T11:00:00Z"
    spec = {
        "accelerator": {
            "vendor": "other",
            "model": "B1",
            "resourceName": "example.com/dev",
            "memoryGiB": 64,
            "peakTFLOPS": {"bf16": 500},
        },
        "nodeSelector": {"matchLabels": {LABEL: group}},
        **extra,
    }
    return object_facts({"metadata": meta, "spec": spec, "status": {}})


def workload(name: str, status: dict[str, Any], restart: str = "Always") -> ObjectFacts:
    template = {"spec": {"restartPolicy": restart, "containers": [{"name": "m", "image": "x"}]}}
    return object_facts(
        {
            "metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}", "generation": 1},
            "spec": {"replicas": 2, "accelerator": {"count": 8}, "template": template},
            "status": status,
        }
    )


def world(
    nodes: list[NodeFacts],
    pools: list[ObjectFacts],
    workloads: list[ObjectFacts] = (),  # type: ignore[assignment]
    pods: list[PodFacts] = (),  # type: ignore[assignment]
    cache: WorldCache | None = None,
) -> World:
    return World(
        nodes={n.name: n for n in nodes},
        pods=list(pods),
        pools={p.name: p for p in pools},
        workloads={w.key: w for w in workloads},
        namespaces={},
        cache=cache or WorldCache(),
    )


def test_a_taint_is_tolerated_as_the_scheduler_decides() -> None:
    taint = Taint("example.com/maintenance", "yes", "NoSchedule")
    assert tolerates([{"operator": "Exists"}], taint)
    assert tolerates([{"key": "example.com/maintenance", "operator": "Exists"}], taint)
    assert tolerates([{"key": "example.com/maintenance", "value": "yes"}], taint)
    assert not tolerates([{"key": "example.com/maintenance", "value": "no"}], taint)
    assert not tolerates([{"operator": "Exists", "effect": "NoExecute"}], taint)
    assert not tolerates([], taint)
    assert str(taint) == "example.com/maintenance=yes:NoSchedule"


def test_a_node_is_unfit_when_not_ready_cordoned_or_tainted_untolerated() -> None:
    assert unfit_reason(node("n0")) is None
    assert unfit_reason(node("n0", ready=False)) == "NotReady"
    assert unfit_reason(node("n0", unschedulable=True)) == "Cordoned"
    taints = [
        {"key": "example.com/maintenance", "value": "yes", "effect": "NoSchedule"},
        {"key": "example.com/slow", "effect": "PreferNoSchedule"},  # steers only: ignored
    ]
    tainted = node("n0", taints=taints)
    assert unfit_reason(tainted) == "Tainted example.com/maintenance=yes:NoSchedule"
    assert unfit_reason(tainted, [{"key": "example.com/maintenance", "operator": "Exists"}]) is None


def test_placement_and_pool_status_leave_out_the_nodes_that_take_no_pods() -> None:
    taint = [{"key": "example.com/maintenance", "value": "yes", "effect": "NoSchedule"}]
    nodes = [node("n0", taints=taint), node("n1", unschedulable=True), node("n2")]
    w = world(nodes, [pool("p")])
    state = w.pool_state("p")
    assert [(n.name, n.ready) for n in state.nodes] == [("n0", False), ("n1", False), ("n2", True)]
    status = pool_status(w, "p", NOW)
    assert status["unavailableNodes"] == [
        {"node": "n0", "reason": "Tainted example.com/maintenance=yes:NoSchedule"},
        {"node": "n1", "reason": "Cordoned"},
    ]
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Degraded"]["status"] == "True"
    assert conds["Degraded"]["reason"] == "NodesUnavailable"
    assert status["summary"] == {"nodes": "1/3", "devices": "8/24"}
    assert status["devices"]["available"] == 8
    tolerant = pool("p", tolerations=[{"key": "example.com/maintenance", "operator": "Exists"}])
    assert [n.ready for n in world(nodes, [tolerant]).pool_state("p").nodes] == [True, False, True]


def test_a_node_two_pools_select_stays_with_the_older_claim_not_the_name() -> None:
    nodes = [node("n0"), node("n1")]
    old = pool("zeta", created="2026-12-01T00:00:00Z")
    new = pool("alpha", created="2026-12-05T00:00:00Z")
    w = world(nodes, [old, new])
    assert w.layout.members == {"zeta": ["n0", "n1"], "alpha": []}
    assert w.layout.overlaps == {"zeta": {}, "alpha": {"n0": "zeta", "n1": "zeta"}}
    conds = {c["type"]: c for c in pool_status(w, "alpha", NOW)["conditions"]}
    assert (
        conds["NodesOverlap"]["status"] == "True"
        and "n0 (zeta)" in conds["NodesOverlap"]["message"]
    )
    assert conds["Ready"]["reason"] == "NoNodes"
    # A pool that counted the nodes first keeps them, even against an older pool created later
    # with an older timestamp (a GitOps tool re-applying it), for as long as it selects them.
    cache = WorldCache()
    assert world(nodes, [new], cache=cache).layout.members == {"alpha": ["n0", "n1"]}
    both = world(nodes, [old, new], cache=cache)
    assert both.layout.members == {"zeta": [], "alpha": ["n0", "n1"]}
    elsewhere = pool("alpha", group="b", created="2026-12-05T00:00:00Z")  # selects others now
    assert world(nodes, [old, elsewhere], cache=cache).layout.members["zeta"] == ["n0", "n1"]


def test_a_pool_being_deleted_drains_and_says_what_it_waits_for() -> None:
    placed = {"pool": "p", "phase": "Running", "assignments": [{"replica": 0, "node": "n0"}]}
    service = workload("svc", placed)
    batch = workload("job", placed, restart="Never")
    done = workload("old", {**placed, "phase": "Succeeded"}, restart="Never")
    w = world([node("n0")], [pool("p", deleting=True)], [service, batch, done])
    assert w.pool_specs["p"].draining
    message = deletion_message(w, "p")
    assert message == (
        "deleting: waits for 1 batch workload(s) to finish (ml/job) and "
        "1 service(s) to move away (ml/svc)"
    )
    ready = next(c for c in pool_status(w, "p", NOW)["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "Deleting", message)
    assert deletion_message(world([node("n0")], [pool("p", deleting=True)]), "p") == (
        "deleting: no workload holds the pool"
    )


def test_an_exclusion_lifts_when_the_pool_changes_or_its_backoff_ends() -> None:
    entries = exclusions.exclude([], "p", "pods unschedulable", NOW, (1, 2, 16), base=30)
    [entry] = entries
    assert entry["withdrawals"] == 1 and entry["seen"] == {
        "generation": 1,
        "nodes": 2,
        "available": 16,
    }
    assert entry["retryAt"] == "2026-12-06T12:01:00Z"  # at least MIN_BACKOFF

    def active(at: datetime, seen: tuple[int, int, int] | None) -> dict[str, str]:
        return exclusions.active(entries, at, lambda _: seen)

    assert "pods unschedulable" in active(NOW, (1, 2, 16))["p"]
    assert active(NOW, (1, 2, 12)) != {}, "fewer free devices: still excluded"
    assert active(NOW, (2, 2, 16)) == {}, "its spec changed"
    assert active(NOW, (1, 3, 16)) == {}, "its nodes changed"
    assert active(NOW, (1, 2, 17)) == {}, "more free devices than it left"
    assert active(NOW, None) == {}, "gone"
    assert active(NOW + timedelta(seconds=60), (1, 2, 16)) == {}, "backed off"
    # Placed there again, the entry stays without a retry time (in force no more, its pods
    # the placement's), and the next withdrawal from the pool waits twice as long.
    placed_again = exclusions.lifted(entries, "p")
    assert exclusions.in_force(entries) == {"p"} and exclusions.in_force(placed_again) == set()
    assert exclusions.active(placed_again, NOW, lambda _: (1, 2, 16)) == {}
    again = exclusions.exclude(placed_again, "p", "again", NOW, (1, 2, 16), base=30)
    assert [e["withdrawals"] for e in again] == [2]
    assert again[0]["retryAt"] == "2026-12-06T12:02:00Z"
    assert exclusions.backoff(300, 10) == exclusions.MAX_BACKOFF
    legacy = [{"pool": "p", "reason": "written before entries had times"}]
    assert exclusions.active(legacy, NOW, lambda _: (1, 2, 3)) == {}


def pod(replica: int, node_name: str, phase: str = "Running") -> PodFacts:
    return PodFacts(
        namespace="ml", name=f"svc-p-{replica}", uid=f"pu{replica}", node=node_name, phase=phase,
        deleting=False, ready=bool(node_name), requests={"example.com/dev": 8}, workload="svc",
        pool="p", replica=replica, owner_uid="u-svc", unschedulable_since=None,
        unschedulable_message="",
    )  # fmt: skip


def test_a_replica_is_lost_with_its_node_and_not_while_it_runs_on_a_tainted_one() -> None:
    taint = [{"key": "example.com/maintenance", "effect": "NoExecute"}]
    status = {
        "pool": "p",
        "phase": "Running",
        "assignments": [{"replica": 0, "node": "gone"}, {"replica": 1, "node": "n1"}],
    }
    svc = workload("svc", status)
    spec = api.WorkloadSpec.model_validate(svc.spec)
    w = world([node("n1", taints=taint), node("n2")], [pool("p")], [svc])
    placed = w.placement_of("ml/svc")
    assert placed is not None
    on_gone, on_tainted = pod(0, "gone"), pod(1, "n1")
    lost, doomed = lost_replicas(w, placed, spec, {0: on_gone, 1: on_tainted})
    assert lost == {0: "node gone was deleted"} and doomed == [on_gone]
    unbound = pod(1, "", phase="Pending")
    lost, doomed = lost_replicas(w, placed, spec, {1: unbound})
    assert lost == {
        0: "node gone was deleted",
        1: "node n1 takes no new pods (Tainted example.com/maintenance:NoExecute)",
    }
    assert doomed == [unbound]


def test_a_repair_is_kept_in_the_ledger_until_the_status_records_its_nodes() -> None:
    ledger = Ledger()
    status = {"pool": "p", "assignments": [{"replica": 0, "node": "n0"}]}
    svc = workload("svc", status)
    placed = world([node("n0")], [pool("p")], [svc]).placement_of("ml/svc")
    assert placed is not None
    ledger.lose("ml/svc", placed, {0: "node n0 was deleted"})
    assert ledger.losses() == {"ml/svc": (placed, {0: "node n0 was deleted"})}
    repaired = type(placed)("p", {0: "n1"}, placed.placed_at)
    ledger.assume(svc, repaired)
    ledger.repaired("ml/svc")
    assert ledger.losses() == {}
    assert ledger.decided({"ml/svc": svc}) == {"ml/svc": repaired}, "same pool, old nodes"
    written = workload("svc", {"pool": "p", "assignments": [{"replica": 0, "node": "n1"}]})
    assert ledger.decided({"ml/svc": written}) == {}
    ledger.lose("ml/svc", placed, {0: "x"})
    ledger.forget("ml/svc")
    assert ledger.losses() == {}


def test_a_terminating_namespace_is_known_from_its_phase_or_deletion() -> None:
    live = namespace_facts({"metadata": {"name": "a", "labels": {"team": "x"}}})
    assert dict(live) == {"team": "x"} and not live.terminating
    going = namespace_facts({"metadata": {"name": "b"}, "status": {"phase": "Terminating"}})
    assert going.terminating
    same_labels = namespace_facts(
        {"metadata": {"name": "a", "labels": {"team": "x"}}, "status": {"phase": "Terminating"}}
    )
    assert same_labels != live, "the caches must see a namespace turn Terminating"
    assert namespace_facts({"metadata": {"name": "a", "labels": {"team": "x"}}}) == live
    w = World(nodes={}, pods=[], pools={}, workloads={}, namespaces={"a": live, "b": going})
    assert w.terminating == {"b"}


def pending(
    name: str, devices: int, tolerations: tuple[dict[str, str], ...] = ()
) -> placement.PendingWorkload:
    containers = [{"name": "m", "image": "x"}]
    template = {"spec": {"containers": containers, "tolerations": list(tolerations)}}
    spec = api.WorkloadSpec.model_validate(
        {"replicas": 1, "accelerator": {"count": devices}, "template": template}
    )
    return placement.PendingWorkload(namespace="ml", name=name, spec=spec, created_at=NOW)


def test_a_tainted_node_takes_only_the_workloads_whose_own_tolerations_allow_it() -> None:
    """A node tainted against the pool's tolerations is left out for everyone but the
    workloads whose template tolerates the taint: they may use it, and only its devices."""
    taint = [{"key": "example.com/dedicated", "value": "team-a", "effect": "NoSchedule"}]
    w = world([node("n0", taints=taint), node("n1")], [pool("p")])
    team_a = ({"key": "example.com/dedicated", "operator": "Equal", "value": "team-a"},)
    plain, tolerant = pending("plain", 8), pending("tolerant", 8, team_a)
    by = {d.name: d for d in placement.plan([plain, tolerant], w.snapshot(), NOW)}
    assert by["plain"].placed and by["plain"].nodes == ("n1",)
    assert by["tolerant"].placed and by["tolerant"].nodes == ("n0",)
    [alone] = placement.plan([pending("second", 8), pending("third", 8)], w.snapshot(), NOW)[1:]
    assert not alone.placed, "the tainted node is not the others' to take"
    [big] = placement.plan([pending("big", 9, team_a)], w.snapshot(), NOW)
    assert "no node has 9" in " ".join(c.reasons[0] for c in big.candidates if c.reasons)


def test_a_service_no_longer_waits_to_leave_a_pool_that_drains_no_more() -> None:
    placed = {"type": "Placed", "message": "placed on p (B1), score 80.0, 2 x 8 example.com/dev"}
    waiting = {"message": migration_waiting("p", "waiting: no room"), "conditions": [placed]}
    assert settled_message(waiting, "p", draining=True) is None, "still draining: still true"
    assert settled_message(waiting, "p", draining=False) == placed["message"]
    assert settled_message({"message": "2/2 replicas ready on p"}, "p", draining=False) is None


def gang_pod(replica: int, spec: dict[str, Any], phase: str) -> PodFacts:
    """A pod of the 4-replica `gang` on pool p, as the API server returns it."""
    labels = {api.WORKLOAD_LABEL: "gang", api.POOL_LABEL: "p", api.REPLICA_LABEL: str(replica)}
    owner = {"kind": "Workload", "apiVersion": api.API_VERSION, "uid": "u-gang"}
    container = {"name": "m", "resources": {"requests": {"example.com/dev": "8"}}}
    meta = {"name": f"gang-p-{replica}", "namespace": "ml", "uid": f"g{replica}"}
    return pod_facts(
        {
            "metadata": {**meta, "labels": labels, "ownerReferences": [owner]},
            "spec": {**spec, "containers": [container]},
            "status": {"phase": phase},
        }
    )


def test_a_gang_read_back_from_its_pods_knows_their_pins_and_loses_the_missing() -> None:
    """The operator killed in a burst, between a gang's pods (status not yet written): the
    restarted one reads the placement from the pods, their nodes from the pins of those not
    yet bound, reserves those devices, and places the replicas it never made like lost ones
    (a pod made without a node could take one another placement holds)."""
    gang = object_facts(
        {
            "metadata": {"name": "gang", "namespace": "ml", "uid": "u-gang", "generation": 1},
            "spec": {
                "replicas": 4,
                "accelerator": {"count": 8},
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m"}]}},
            },
            "status": {},
        }
    )
    spec = api.WorkloadSpec.model_validate(gang.spec)
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]
            }
        }
    }
    bound = gang_pod(0, {"nodeName": "n0"}, "Running")
    pinned = gang_pod(1, {"affinity": affinity}, "Pending")
    assert (bound.pinned, pinned.pinned) == ("", "n1")
    nodes = [node(f"n{i}") for i in range(4)]
    w = world(nodes, [pool("p")], [gang], [bound, pinned])
    placed = w.placement_of("ml/gang")
    assert placed is not None and placed.assignments == {0: "n0", 1: "n1"}
    assert w.free("n1", "example.com/dev") == 0  # the pinned pod's devices are promised
    lost, doomed = lost_replicas(w, placed, spec, {0: bound, 1: pinned})
    assert lost == {2: NO_NODE, 3: NO_NODE} and doomed == []
