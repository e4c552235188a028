"""Gang restarts, refusals, scale and rollouts without a cluster: which failure restarts a
batch gang and when it is counted, what the status says at and past the backoffLimit, the
replicas a scale up adds, which pod a rollout replaces next, and what a pod's failure says."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tessera import api, runtime
from tessera.controller.ledger import Ledger
from tessera.controller.repairs import lost_replicas
from tessera.controller.restarts import Failure, counted, gang_failure
from tessera.controller.rollouts import next_to_replace, progress, stale
from tessera.world import exclusions
from tessera.world.caches import WorldCache
from tessera.world.facts import (
    ObjectFacts,
    Placed,
    PodFacts,
    failure_reason,
    node_facts,
    object_facts,
)
from tessera.world.snapshot import World
from tessera.world.status import lifecycle_status, lost_message, restarting_status

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LABEL = "example.com/pool"


def facts(restart: str = "Never", replicas: int = 2, **status: Any) -> ObjectFacts:
    template = {"spec": {"restartPolicy": restart, "containers": [{"name": "m", "image": "x"}]}}
    return object_facts(
        {
            "metadata": {"name": "job", "namespace": "ml", "uid": "u-job", "generation": 1},
            "spec": {
                "replicas": replicas,
                "accelerator": {"count": 8},
                "failurePolicy": {"backoffLimit": 2},
                "template": template,
            },
            "status": {"pool": "p", **status},
        }
    )


def spec_of(f: ObjectFacts) -> api.WorkloadSpec:
    return api.WorkloadSpec.model_validate(f.spec)


def pod(replica: int, phase: str = "Running", **extra: Any) -> PodFacts:
    base = PodFacts(
        namespace="ml", name=f"job-p-{replica}", uid=f"pu{replica}", node="n1", phase=phase,
        deleting=False, ready=phase == "Running", requests={"example.com/dev": 8},
        workload="job", pool="p", replica=replica, owner_uid="u-job",
        unschedulable_since=None, unschedulable_message="",
    )  # fmt: skip
    return replace(base, **extra)


def placed(**assignments: str) -> Placed:
    return Placed("p", {int(k[1:]): v for k, v in assignments.items()}, NOW)


def test_a_failed_pod_ends_the_gangs_run_and_is_counted_once_by_its_uid() -> None:
    f = facts(phase="Running")
    current = {0: pod(0), 1: pod(1, "Failed", failure="container m exited with code 3 (Error)")}
    failure = gang_failure(f, spec_of(f), placed(r0="n1", r1="n1"), current, {})
    assert failure == Failure("job-p-1", "pu1", 1, "container m exited with code 3 (Error)")
    assert not counted(f, failure)
    again = facts(phase="Placed", lastFailure={"uid": "pu1", "pod": "job-p-1"})
    assert counted(again, failure)
    # A failed pod on its way out is not a new failure.
    current[1] = pod(1, "Failed", deleting=True)
    assert gang_failure(f, spec_of(f), placed(r0="n1", r1="n1"), current, {}) is None


def test_a_lost_or_vanished_replica_fails_only_a_gang_that_ran() -> None:
    running, starting = facts(phase="Running"), facts(phase="Placed")
    where = placed(r0="n1", r1="gone")
    lost = {1: "node gone was deleted"}
    failure = gang_failure(running, spec_of(running), where, {0: pod(0)}, lost)
    assert failure is not None and failure.reason == "replica 1 lost: node gone was deleted"
    assert failure.uid == "" and failure.pod == runtime.pod_name("job", "p", 1)
    # Not started yet: the repairs place the replica again, no restart is spent.
    assert gang_failure(starting, spec_of(starting), where, {0: pod(0)}, lost) is None
    vanished = gang_failure(running, spec_of(running), placed(r0="n1", r1="n1"), {0: pod(0)}, {})
    assert vanished is not None and "vanished" in vanished.reason
    service = facts(restart="Always", phase="Running")
    assert gang_failure(service, spec_of(service), where, {0: pod(0, "Failed")}, lost) is None


def test_a_restart_is_placed_again_with_its_count_and_failure_kept() -> None:
    f = facts(
        phase="Running",
        conditions=[{"type": "Placed", "status": "True", "reason": "Placed", "message": "m"}],
    )
    failure = Failure("job-p-1", "pu1", 1, "container m exited with code 3 (Error)")
    status = restarting_status(f, 1, 2, failure.as_status(NOW), NOW)
    assert status["phase"] == "Placed" and status["restarts"] == 1
    assert status["lastFailure"]["uid"] == "pu1"
    assert status["message"] == (
        "restarting the gang (1 of 2 restarts): pod job-p-1 failed: container m exited with "
        "code 3 (Error)"
    )
    types = {c["type"]: c["reason"] for c in status["conditions"]}
    assert types == {"Placed": "Placed", "Ready": "GangRestarting"}


def test_past_the_backoff_limit_the_gang_fails_saying_why_and_after_how_many() -> None:
    f = facts(phase="Running", restarts=2)
    spec = spec_of(f)
    failed = pod(1, "Failed", failure="container m exited with code 3 (Error)")
    status = lifecycle_status(spec, "p", f.status, 1, {0: pod(0), 1: failed}, [], 0, NOW)
    assert status["phase"] == "Failed"
    assert status["message"] == (
        "pod job-p-1 failed: container m exited with code 3 (Error) (backoffLimit 2 reached "
        "after 2 restarts)"
    )
    assert status["lastFailure"]["pod"] == "job-p-1"
    # Without a limit the message is as before, with the reason.
    bare = spec.model_copy(update={"failure_policy": api.FailurePolicy()})
    status = lifecycle_status(bare, "p", f.status, 1, {0: pod(0), 1: failed}, [], 0, NOW)
    assert status["message"] == "pod job-p-1 failed: container m exited with code 3 (Error)"


def test_a_pods_failure_says_which_container_exited_how_or_the_pods_own_reason() -> None:
    exited = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "side", "state": {"terminated": {"exitCode": 0}}},
            {"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
        ],
    }
    assert failure_reason(exited) == "container main exited with code 137 (OOMKilled)"
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "node low on memory"}
    assert failure_reason(evicted) == "Evicted: node low on memory"
    assert failure_reason({"phase": "Failed"}) == "it failed"


def test_a_scale_up_adds_the_new_replicas_to_be_placed_on_the_pool() -> None:
    f = facts(
        restart="Always",
        replicas=3,
        phase="Running",
        assignments=[{"replica": 0, "node": "n1"}, {"replica": 1, "node": "n1"}],
    )
    labels = {LABEL: "a"}
    n1 = node_facts({"metadata": {"name": "n1", "labels": labels}, "status": {}})
    pool = object_facts(
        {
            "metadata": {"name": "p", "uid": "u-p", "generation": 1},
            "spec": {
                "nodeSelector": {"matchLabels": labels},
                "accelerator": {"vendor": "nvidia", "model": "H100-SXM5-80GB"},
            },
        }
    )
    world = World(
        nodes={"n1": n1},
        pods=[],
        pools={"p": pool},
        workloads={f.key: f},
        namespaces={},
        cache=WorldCache(),
    )
    where = world.placement_of(f.key)
    assert where is not None
    lost, doomed = lost_replicas(world, where, spec_of(f), {0: pod(0), 1: pod(1)})
    assert lost == {2: "added by a scale to 3"} and doomed == []
    assert lost_message(lost) == "replica 2 added by a scale to 3"
    status = lifecycle_status(
        spec_of(f), "p", f.status, 1, {0: pod(0), 1: pod(1)}, [], 0, NOW, lost=lost
    )
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ScalingUp"
    assert status["message"] == "replica 2 added by a scale to 3; waiting for room on p"


def test_a_rollout_replaces_one_pod_at_a_time_once_every_replica_is_ready() -> None:
    current = {r: pod(r, template_hash="old") for r in range(3)}
    first = next_to_replace("new", 3, current, False, {})
    assert first is current[0]
    # Replica 0 on its way out, then back but not Ready: nothing more is replaced.
    current[0] = pod(0, deleting=True, template_hash="old")
    assert next_to_replace("new", 3, current, False, {}) is None
    current[0] = pod(0, "Pending", template_hash="new")
    assert next_to_replace("new", 3, current, False, {}) is None
    assert progress("new", 3, current) == (
        "rolling out a new template (new): 1/3 replicas updated, one at a time"
    )
    current[0] = pod(0, template_hash="new")
    assert next_to_replace("new", 3, current, False, {}) is current[1]
    # Nothing while a migration or a repair runs; pods without a hash are taken as current.
    assert next_to_replace("new", 3, current, True, {}) is None
    assert next_to_replace("new", 3, current, False, {2: "node gone was deleted"}) is None
    unmarked = {r: pod(r) for r in range(3)}
    assert next_to_replace("new", 3, unmarked, False, {}) is None
    assert progress("new", 3, unmarked) is None


@given(
    hashes=st.lists(st.sampled_from(["a", "b", None]), min_size=1, max_size=8),
    ready=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_a_rollout_never_takes_down_a_second_replica(
    hashes: list[str | None], ready: list[bool]
) -> None:
    current = {r: pod(r, ready=ready[r], template_hash=h) for r, h in enumerate(hashes)}
    chosen = next_to_replace("b", len(hashes), current, False, {})
    if chosen is not None:
        assert all(p.ready for p in current.values())  # every replica up before one goes
        assert chosen.template_hash == "a" and chosen.replica == min(stale("b", current))


def test_a_refusal_backs_off_from_seconds_not_minutes() -> None:
    floor = exclusions.REFUSAL_BACKOFF
    assert exclusions.backoff(floor, 1, floor) == floor
    assert exclusions.backoff(floor, 3, floor) == 4 * floor
    assert exclusions.backoff(0, 1) == exclusions.MIN_BACKOFF  # a fallback waits as before


def test_the_template_hash_follows_the_template_not_the_replicas() -> None:
    f = facts(restart="Always")
    spec = spec_of(f)
    scaled = spec.model_copy(update={"replicas": 7})
    assert runtime.template_hash(scaled) == runtime.template_hash(spec)
    swapped = dict(spec.template)
    swapped["spec"] = {**swapped["spec"], "schedulerName": "other"}
    changed = spec.model_copy(update={"template": swapped})
    assert runtime.template_hash(changed) != runtime.template_hash(spec)
    pod_ = runtime.build_pod(
        api.Workload(metadata={"name": "job", "namespace": "ml"}, spec=spec),
        "u-job",
        "p",
        api.AcceleratorPoolSpec.model_validate(
            {
                "nodeSelector": {"matchLabels": {LABEL: "a"}},
                "accelerator": {"vendor": "nvidia", "model": "H100-SXM5-80GB"},
            }
        ),
        api.ResolvedAccelerator.model_validate(
            {
                "model": "H100-SXM5-80GB",
                "vendor": "nvidia",
                "source": "spec",
                "memoryGiB": 80,
                "resourceName": "nvidia.com/gpu",
            }
        ),
        0,
        "n1",
    )
    assert pod_["metadata"]["annotations"][api.TEMPLATE_HASH_ANNOTATION] == (
        runtime.template_hash(spec)
    )


def test_an_outgrown_service_is_tried_whole_elsewhere_then_on_its_pool_in_turn() -> None:
    ledger = Ledger()
    ledger.outgrow("ml/svc")
    assert ledger.outgrown() == {"ml/svc"}
    assert ledger.outgrown() == set()  # taken: the next cycle is its pool's again
    ledger.outgrow("ml/svc")
    ledger.repaired("ml/svc")  # placed on its pool after all
    assert ledger.outgrown() == set()


def test_a_large_scale_up_is_said_in_one_phrase() -> None:
    lost = {r: "added by a scale to 40" for r in range(4, 40)}
    lost[1] = "node gone was deleted"
    assert lost_message(lost) == (
        "replica 1 lost: node gone was deleted; replicas 4-39 added by a scale to 40"
    )
    assert lost_message({2: "added by a scale to 9", 5: "added by a scale to 9"}) == (
        "replicas 2, 5 added by a scale to 9"
    )


def test_a_refusal_is_not_lifted_by_free_devices_only_by_a_changed_pool_or_time() -> None:
    # A gang withdrawn for a refusal frees devices; so does every other refused gang. Were
    # that to lift the exclusion, a burst of refused gangs would be placed and refused again
    # at once, their backoff doubling to an hour in seconds.
    entries = exclusions.exclude([], "p", "pod x refused: quota", NOW, (1, 2, 4), 10, 10, True)
    assert entries[0]["refused"] is True
    assert set(exclusions.active(entries, NOW, lambda _: (1, 2, 16))) == {"p"}
    assert exclusions.active(entries, NOW, lambda _: (2, 2, 4)) == {}  # the spec changed
    later = NOW + timedelta(seconds=11)
    assert exclusions.active(entries, later, lambda _: (1, 2, 4)) == {}
    unschedulable = exclusions.exclude([], "p", "unschedulable", NOW, (1, 2, 4), 60)
    assert exclusions.active(unschedulable, NOW, lambda _: (1, 2, 16)) == {}
