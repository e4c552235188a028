"""The operator under a short seeded churn (tests/e2e/churn.py): Workloads come and go while
nodes, taints, cordons, pools and the operator itself fail and come back; no invariant may
break at any step. `make soak` runs the same churn for minutes (hack/soak.py). The checks
themselves are tried first on hand-made snapshots, so a silent sampler cannot pass the churn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from churn import ALL_FAULTS, Churn, ChurnConfig
from churn_checks import (
    NodeFacts,
    PodFacts,
    Snapshot,
    WorkloadFacts,
    lost,
    over_capacity,
    overclaimed,
    placed_twice,
    unsettled,
)
from operator_harness import Operator, install_crds, namespace

# Its first node loss lands under a service: the operator from before the moving-fleet fixes
# kept that service's status at 3/3 Ready with a replica on the deleted node ([readable]).
SEED = 2
CHURN_SECONDS = 90  # with set-up, restoring and settling: under 3 minutes when all is well


@pytest.fixture
def operator(cluster: Any, tmp_path: Path) -> Iterator[Operator]:
    install_crds(cluster)
    op = Operator(cluster.kubeconfig, tmp_path)
    op.start()
    yield op
    op.stop()


def test_churn_breaks_no_invariant(cluster: Any, operator: Operator) -> None:
    config = ChurnConfig(seed=SEED, seconds=CHURN_SECONDS, faults=ALL_FAULTS, settle_seconds=90)
    with namespace(cluster, "churn") as k, Churn(k, operator, config) as churn:
        result = churn.run()
    assert result.steps >= 20, f"only {result.steps} steps in {CHURN_SECONDS}s"
    untried = [fault for fault, n in result.faults.items() if n == 0]
    assert not untried, f"faults never injected: {untried}"
    assert not result.violations, (
        f"{len(result.violations)} invariant violations with seed {SEED} (operator logs in "
        f"{operator.log_dir}):\n" + "\n".join(result.violations)
    )


# --- the checks on hand-made snapshots --------------------------------------------------------


def pod(name: str, replica: int, node: str, pool: str = "a", **kw: Any) -> PodFacts:
    facts: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "workload": "w",
        "replica": replica,
        "pool": pool,
        "node": node,
        "phase": "Running",
        "deleting": False,
        "ready": True,
        "devices": 4,
        **kw,
    }
    return PodFacts(**facts)


def snapshot(pods: list[PodFacts], status: dict[str, Any], replicas: int = 1) -> Snapshot:
    nodes = {n: NodeFacts(n, pool, 8) for n, pool in (("a-0", "a"), ("a-1", "a"), ("b-0", "b"))}
    return Snapshot(0, nodes, pods, {"w": WorkloadFacts("w", replicas, True, status)})


def test_a_node_is_over_capacity_only_past_its_allocatable_and_deleting_pods_count() -> None:
    full = [pod("p0", 0, "a-0"), pod("p1", 1, "a-0")]
    assert over_capacity(snapshot(full, {})) == []
    going = pod("p2", 2, "a-0", deleting=True, devices=1)
    done = pod("p3", 3, "a-0", phase="Succeeded")
    found = over_capacity(snapshot([*full, going, done], {}))
    assert [f.subject for f in found] == ["node a-0"] and "9 example.com/burst" in found[0].detail


def test_a_second_pod_of_a_replica_is_allowed_only_while_migrating_across_pools() -> None:
    pods = [pod("w-a-0", 0, "a-0"), pod("w-b-0", 0, "b-0", pool="b")]
    migrating = {"conditions": [{"type": "Placed", "status": "True", "reason": "Migrating"}]}
    assert placed_twice(snapshot(pods, migrating)) == []
    assert [f.subject for f in placed_twice(snapshot(pods, {}))] == ["workload w replica 0"]
    same_pool = [pod("x", 0, "a-0"), pod("y", 0, "a-1")]
    assert len(placed_twice(snapshot(same_pool, migrating))) == 1
    assert placed_twice(snapshot([pods[0], pod("old", 0, "b-0", deleting=True)], {})) == []


def test_a_workload_is_lost_only_when_created_and_gone() -> None:
    snap = snapshot([], {})
    assert lost(snap, {"w"}) == []
    assert [f.subject for f in lost(snap, {"w", "gone"})] == ["workload gone"]


def test_running_is_settled_only_with_every_replica_ready_on_the_pool_status_names() -> None:
    running = {"phase": "Running", "pool": "a", "readyReplicas": 2}
    two = [pod("p0", 0, "a-0"), pod("p1", 1, "a-1")]
    assert unsettled(WorkloadFacts("w", 2, True, running), snapshot(two, running, 2)) is None
    on_gone_node = [two[0], pod("p1", 1, "a-9")]
    doing = unsettled(WorkloadFacts("w", 2, True, running), snapshot(on_gone_node, running, 2))
    assert doing is not None and "1/2 replicas running on pool a" in doing
    waiting = {"phase": "Pending", "message": "no room"}
    assert unsettled(WorkloadFacts("w", 1, True, waiting), snapshot([], waiting)) is None
    assert unsettled(WorkloadFacts("w", 1, True, {}), snapshot([], {})) == "no status written"


def test_a_service_overclaims_when_status_counts_a_replica_on_a_deleted_node_ready() -> None:
    claims = {"phase": "Running", "pool": "a", "readyReplicas": 2}
    service = WorkloadFacts("w", 2, True, claims)
    assert (
        overclaimed(service, snapshot([pod("p0", 0, "a-0"), pod("p1", 1, "a-1")], claims)) is None
    )
    found = overclaimed(service, snapshot([pod("p0", 0, "a-0"), pod("p1", 1, "a-9")], claims))
    assert found is not None and found.startswith("status says 2/2 Ready, but 1 Ready pods")
    assert "[node a-9 gone]" in found
    honest = {**claims, "readyReplicas": 1}
    assert overclaimed(WorkloadFacts("w", 2, True, honest), snapshot([], honest)) is None
