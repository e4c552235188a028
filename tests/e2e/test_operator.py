"""The operator against the real control plane and the simulated fleet: placement, pods,
status, events, metrics, lifecycle, fallback, deletion, restarts and draining."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from operator_harness import (
    REPO,
    Kubectl,
    Operator,
    Sampler,
    drop_pools,
    make_pool,
    metric_value,
    namespace,
    set_draining,
    wait_for,
    workload,
)

sys.path.insert(0, str(REPO / "hack"))
import fleet as fleet_mod


@pytest.fixture
def ns(operator: Operator, installed: Any) -> Iterator[Kubectl]:
    with namespace(installed) as kubectl:
        yield kubectl


def placed(k: Kubectl, name: str, timeout: float = 30) -> dict[str, Any]:
    return dict(
        wait_for(f"{name} placed", lambda: (s := k.status(name)).get("pool") and s, timeout)
    )


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def test_pool_status_is_kept_true(operator: Operator, installed: Any) -> None:
    k = Kubectl(installed, "default")
    pool = wait_for("h100 status", lambda: k.get("acp", "h100", cluster_scoped=True).get("status"))
    assert pool["nodes"] == 4 and pool["readyNodes"] == 4
    assert pool["accelerator"]["model"] == "H100-SXM5-80GB"
    assert pool["devices"]["capacity"] == 32 and pool["devices"]["allocatable"] == 32
    conds = {c["type"]: c for c in pool["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Degraded"]["status"] == "False"
    table = installed.kubectl("get", "acp").stdout
    assert "H100-SXM5-80GB" in table and "4/4" in table


def test_workload_is_placed_on_best_pool_as_pods_with_everything_the_pool_needs(
    ns: Kubectl, operator: Operator
) -> None:
    ns.apply(
        workload(
            "pretrain",
            replicas=2,
            count=8,
            objective="performance",
            precision="bf16",
            minMemoryGiB=80,
            vendors=["nvidia"],
            restart="OnFailure",
        )
    )
    status = placed(ns, "pretrain")
    assert status["pool"] == "h100" and status["accelerator"] == "H100-SXM5-80GB"
    cands = status["candidates"]
    assert cands[0]["pool"] == "h100" and cands[0]["feasible"]
    a100 = next(c for c in cands if c["pool"] == "a100")
    assert a100["score"] < cands[0]["score"]
    l4 = next(c for c in cands if c["pool"] == "l4")
    assert not l4["feasible"] and any("GiB" in r for r in l4["reasons"])
    ns("wait", "--for=condition=Ready", "awl/pretrain", "-n", ns.ns, "--timeout=60s")
    pods = ns.pods(**{"tessera.dev/workload": "pretrain"})
    assert sorted(p["metadata"]["name"] for p in pods) == ["pretrain-h100-0", "pretrain-h100-1"]
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert all(n.startswith("h100-") for n in nodes) and len(nodes) == 2
    for pod in pods:
        main = pod["spec"]["containers"][0]
        assert main["resources"]["requests"]["nvidia.com/gpu"] == "8"
        assert main["resources"]["limits"]["nvidia.com/gpu"] == "8"
        env = env_of(pod)
        assert env["TESSERA_ACCELERATOR_VENDOR"] == "nvidia"
        assert env["TESSERA_ACCELERATOR_MODEL"] == "H100-SXM5-80GB"
        assert env["TESSERA_ACCELERATOR_MEMORY_GIB"] == "80"
        assert env["TESSERA_ACCELERATOR_COUNT"] == "8" and env["TESSERA_POOL"] == "h100"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "spec"
        ]["tolerations"]
        owner = pod["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "Workload" and owner["controller"] is True
        assert pod["metadata"]["labels"]["tessera.dev/pool"] == "h100"
    final = ns.status("pretrain")
    assert final["phase"] == "Running" and final["readyReplicas"] == 2
    assert final["summary"]["ready"] == "2/2"
    assert {"Placed", "Ready"} <= {c["type"] for c in final["conditions"]}
    # Posted with the decision's first write, a moment before or after it lands.
    wait_for("the Placed Event", lambda: "Placed" in {e["reason"] for e in ns.events("pretrain")})
    row = ns("get", "awl", "pretrain", "-n", ns.ns, "-o", "wide").stdout
    assert "h100" in row and "2/2" in row and "Running" in row and "performance" in row
    text = operator.metrics()
    assert (
        metric_value(text, "tessera_placements_total", pool="h100", objective="performance") or 0
    ) >= 1
    assert (
        metric_value(
            text, "tessera_pool_devices", pool="h100", model="H100-SXM5-80GB", state="capacity"
        )
    ) == 32


def test_vendor_variant_swaps_image_and_env(ns: Kubectl) -> None:
    manifest = workload("portable", count=8, models=["MI300X"], minMemoryGiB=100)
    manifest["spec"]["variants"] = {
        "nvidia": {"image": "registry.example/app:cuda"},
        "amd": {
            "image": "registry.example/app:rocm",
            "env": [{"name": "HSA_ENABLE", "value": "1"}],
        },
    }
    ns.apply(manifest)
    assert placed(ns, "portable")["pool"] == "mi300x"
    pod = wait_for("pod", lambda: ns.pods(**{"tessera.dev/workload": "portable"}))[0]
    assert pod["spec"]["containers"][0]["image"] == "registry.example/app:rocm"
    env = env_of(pod)
    assert env["HSA_ENABLE"] == "1" and env["TESSERA_ACCELERATOR_VENDOR"] == "amd"
    assert pod["spec"]["containers"][0]["resources"]["requests"]["amd.com/gpu"] == "8"


def test_batch_workloads_end_succeeded_or_failed(ns: Kubectl) -> None:
    ok = {"tessera.dev/simulated-runtime-ms": "5000"}
    bad = {**ok, "tessera.dev/simulated-exit-code": "3"}
    ns.apply(
        workload("done", replicas=2, count=1, vendors=["google"], annotations=ok),
        workload("broken", count=1, vendors=["google"], annotations=bad),
    )
    wait_for("done Succeeded", lambda: ns.status("done").get("phase") == "Succeeded", 60)
    pods = ns.pods(**{"tessera.dev/workload": "done"})
    assert len(pods) == 2
    for pod in pods:  # ran as long as it said
        started = datetime.fromisoformat(pod["status"]["startTime"])
        ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
        assert (datetime.fromisoformat(ended) - started).total_seconds() >= 4, pod["status"]
    wait_for("broken Failed", lambda: ns.status("broken").get("phase") == "Failed", 60)
    assert ns.condition("done", "Complete")["status"] == "True"  # type: ignore[index]
    failed = ns.condition("broken", "Failed")
    assert failed and failed["reason"] == "PodFailed" and "broken" in failed["message"]


def test_service_pods_that_vanish_are_recreated_on_the_same_pool(ns: Kubectl) -> None:
    ns.apply(
        workload("svc", replicas=2, count=1, restart="Always", objective="energy", models=["L4"])
    )
    ns("wait", "--for=condition=Ready", "awl/svc", "-n", ns.ns, "--timeout=60s")
    pool = ns.status("svc")["pool"]
    victim = ns.pods(**{"tessera.dev/workload": "svc"})[0]
    ns("delete", "pod", victim["metadata"]["name"], "-n", ns.ns, "--wait=true")
    wait_for(
        "replacement",
        lambda: any(
            p["metadata"]["name"] == victim["metadata"]["name"]
            and p["metadata"]["uid"] != victim["metadata"]["uid"]
            for p in ns.pods(**{"tessera.dev/workload": "svc"})
        ),
    )
    ns("wait", "--for=condition=Ready", "awl/svc", "-n", ns.ns, "--timeout=60s")
    pods = ns.pods(**{"tessera.dev/workload": "svc"})
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]  # both replicas, none lost
    assert {p["metadata"]["labels"]["tessera.dev/pool"] for p in pods} == {pool}


def test_unschedulable_gang_falls_back_to_the_next_pool(ns: Kubectl, operator: Operator) -> None:
    # The template pins pods to a zone only the A100 nodes... none have: the scheduler
    # cannot bind them anywhere, so each pool is withdrawn from in turn, with the reason kept.
    manifest = workload(
        "stuck",
        count=8,
        vendors=["nvidia"],
        objective="performance",
        pod_spec={"nodeSelector": {"topology.kubernetes.io/zone": "nowhere"}},
    )
    manifest["spec"]["placement"] = {"fallbackAfterSeconds": 2}
    ns.apply(manifest)
    assert placed(ns, "stuck")["pool"] == "h100"
    status = wait_for("fallback", lambda: (s := ns.status("stuck")).get("excludedPools") and s, 60)
    excluded = status["excludedPools"][0]
    assert excluded["pool"] == "h100" and "unschedulable" in excluded["reason"]
    after = wait_for(
        "re-placed", lambda: (s := ns.status("stuck")).get("pool") not in (None, "h100") and s, 60
    )
    assert after["pool"] != "h100"  # the next best for performance: an H200 or an A100 pool
    assert "FallbackTriggered" in {e["reason"] for e in ns.events("stuck")}
    assert (metric_value(operator.metrics(), "tessera_fallbacks_total", pool="h100") or 0) >= 1


REFUSE = "e2e.tessera.dev/refuse-"  # + replica or pool: a namespace label naming what to refuse


@pytest.fixture
def refusing(ns: Kubectl) -> Iterator[Callable[..., None]]:
    """An admission policy that refuses ns's pods of one replica index, on one pool, or both
    (as a full ResourceQuota or a policy engine would), while the namespace's REFUSE labels
    name them. The returned call `refuse(value, key="replica")` sets one (None lifts it) and
    waits until the API server answers accordingly."""
    name = f"refuse-replica-{ns.ns}"
    labels = "namespaceObject.metadata.labels"

    def active(key: str) -> str:
        return f"(has({labels}) && '{REFUSE}{key}' in {labels})"

    def matches(key: str) -> str:  # the pod is the one named, or nothing is named for key
        pod = f"object.metadata.labels['tessera.dev/{key}']"
        return (
            f"(!{active(key)} || (has(object.metadata.labels) && 'tessera.dev/{key}' in "
            f"object.metadata.labels && {pod} == {labels}['{REFUSE}{key}']))"
        )

    refused_pod = (
        f"({active('replica')} || {active('pool')}) && {matches('replica')} && {matches('pool')}"
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"!({refused_pod})",
                    "message": "refused by the test's admission policy",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.ns}}
            },
        },
    }
    ns(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, binding]}),
    )
    # The probe pod carries the values named last, so it is refused while any is named.
    last = {"replica": "0", "pool": "none"}
    named = {"replica": False, "pool": False}

    def refused() -> bool:
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "probe",
                "labels": {f"tessera.dev/{key}": value for key, value in last.items()},
            },
            "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
        }
        out = ns(
            "create",
            "--dry-run=server",
            "-n",
            ns.ns,
            "-f",
            "-",
            input=json.dumps(probe),
            check=False,
        )
        return out.returncode != 0 and "refused by the test" in out.stderr

    def refuse(value: str | None, key: str = "replica") -> None:
        label = f"{REFUSE}{key}={value}" if value else f"{REFUSE}{key}-"
        ns("label", "namespace", ns.ns, "--overwrite", label)
        if value:
            last[key] = value
        named[key] = bool(value)
        wait_for(f"admission refusing {key} {value}", lambda: refused() == any(named.values()))

    try:
        yield refuse
    finally:
        ns(
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            name,
            check=False,
        )


class GangWatch(Sampler):
    """Samples the namespace's pods every 0.2 s in the background and keeps, per workload,
    the longest stretch in which some but not all of its `replicas` pods were live (not
    terminating): how long a half-made gang was left holding its pool."""

    every = 0.2

    def __init__(self, k: Kubectl, replicas: int) -> None:
        super().__init__()
        self.k, self.replicas = k, replicas
        self.longest: dict[str, float] = {}
        self._since: dict[str, float] = {}

    def sample(self) -> None:
        live: dict[str, int] = {}
        for pod in self.k.pods():
            if not pod["metadata"].get("deletionTimestamp"):
                name = pod["metadata"]["labels"]["tessera.dev/workload"]
                live[name] = live.get(name, 0) + 1
        now = time.monotonic()
        for name in set(live) | set(self._since):
            if 0 < live.get(name, 0) < self.replicas:
                since = self._since.setdefault(name, now)
                self.longest[name] = max(self.longest.get(name, 0.0), now - since)
            else:
                self._since.pop(name, None)

    def assert_no_half_gang_held(self, longer_than: float = 3.0) -> None:
        assert self.samples > 5
        held = {n: round(t, 1) for n, t in self.longest.items() if t > longer_than}
        assert not held, f"gangs left half-made (seconds): {held}"


def retry_deadline(statuses: list[dict[str, Any]], pool: str) -> float:
    """Seconds from now until the last of these workloads may try `pool` again."""
    retries = [
        datetime.fromisoformat(e["retryAt"]).timestamp()
        for s in statuses
        for e in s.get("excludedPools") or []
        if e["pool"] == pool
    ]
    assert retries, statuses
    return max(retries) - time.time()


def test_a_gang_refused_part_way_is_withdrawn_whole_and_placed_again_once_the_refusal_lifts(
    ns: Kubectl, refusing: Callable[..., None]
) -> None:
    # The third pod of a gang of 4 is refused: the gang is withdrawn at once, its two pods
    # deleted (half a gang must not hold its pool, its pods waiting for peers that never
    # come), the refusal said in its status, and mi300x (the only pool it allows) excluded for a
    # short backoff. Once the refusal lifts, the whole gang follows when the backoff ends:
    # no replica is left claimed as if in flight (it would wait CREATED_GRACE, 30 s).
    refusing("2")
    with GangWatch(ns, replicas=4) as watch:
        ns.apply(workload("gang", replicas=4, pools=["mi300x"]))
        status = wait_for(
            "the refusal in status",
            lambda: (s := ns.status("gang")).get("excludedPools") and s,
            timeout=15,
        )
        assert status["phase"] == "Pending" and status.get("pool") is None
        assert "gang-mi300x-2 refused" in status["message"]
        assert "refused by the test" in status["message"]
        [excluded] = status["excludedPools"]
        assert excluded["pool"] == "mi300x" and "refused by the test" in excluded["reason"]
        wait_for("the withdrawn gang's pods gone", lambda: not ns.pods(), timeout=5)
        refusing(None)
        deadline = retry_deadline([ns.status("gang")], "mi300x")
        assert deadline <= 21, deadline  # 10 s, doubled at most once meanwhile
        pods = wait_for(
            "every replica created",
            lambda: len(p := ns.pods(**{"tessera.dev/workload": "gang"})) == 4 and p,
            timeout=max(deadline, 0) + 8,
        )
    watch.assert_no_half_gang_held()
    replicas = sorted(p["metadata"]["labels"]["tessera.dev/replica"] for p in pods)
    assert replicas == ["0", "1", "2", "3"]
    assert {p["metadata"]["labels"]["tessera.dev/pool"] for p in pods} == {"mi300x"}
    assert "FallbackTriggered" in {e["reason"] for e in ns.events("gang")}
    ns("wait", "--for=condition=Ready", "awl/gang", "-n", ns.ns, "--timeout=30s")


def test_a_burst_refused_part_way_is_withdrawn_and_completed_once_the_refusal_lifts(
    ns: Kubectl, refusing: Callable[..., None]
) -> None:
    # 20 gangs of 4 placed in one cycle: a burst, whose pods are sent beside the loop. Every
    # gang's third pod is refused, so every gang is withdrawn whole, none left half-made.
    # Once the refusal lifts, all 80 follow when the backoff ends, none twice: no replica
    # was left claimed.
    make_pool(ns, "refusal-wave", nodes=10, devices=8, draining=True)
    try:
        refusing("2")

        def statuses() -> list[dict[str, Any]]:
            return [i.get("status") or {} for i in ns.get("awl")["items"]]

        with GangWatch(ns, replicas=4) as watch:
            ns.apply(
                *[
                    workload(f"g-{i:02d}", replicas=4, count=1, pools=["refusal-wave"])
                    for i in range(20)
                ]
            )
            wait_for("all waiting", lambda: all(s.get("candidates") for s in statuses()))
            set_draining(ns, "refusal-wave", False)

            def withdrawn(s: dict[str, Any]) -> bool:
                reasons = [e["reason"] for e in s.get("excludedPools") or []]
                return (
                    s.get("phase") == "Pending"
                    and "refused by the test" in s.get("message", "")
                    and any("refused by the test" in r for r in reasons)
                )

            # A gang withdrawn frees devices, which does not lift the other gangs' exclusions
            # of the pool (a refusal is not for want of room): each waits out its backoff.
            wait_for(
                "every gang withdrawn, its refusal in its status",
                lambda: all(withdrawn(s) for s in statuses()),
                timeout=60,
            )
            wait_for("the withdrawn gangs' pods gone", lambda: not ns.pods(), timeout=10)
            refusing(None)
            deadline = retry_deadline(statuses(), "refusal-wave")
            assert deadline <= 41, deadline  # 10 s, doubled twice at most meanwhile
            pods = wait_for(
                "all 80 pods",
                lambda: len(p := ns.pods()) == 80 and p,
                timeout=max(deadline, 0) + 10,
            )
        watch.assert_no_half_gang_held()
        by_gang: dict[str, list[str]] = {}
        for p in pods:
            labels = p["metadata"]["labels"]
            by_gang.setdefault(labels["tessera.dev/workload"], []).append(
                labels["tessera.dev/replica"]
            )
        assert {g: sorted(r) for g, r in by_gang.items()} == {
            f"g-{i:02d}": ["0", "1", "2", "3"] for i in range(20)
        }
        uids = {p["metadata"]["uid"] for p in pods}
        wait_for(
            "every gang Ready",
            lambda: all(s.get("phase") == "Running" for s in statuses()),
            timeout=30,
        )
        assert {p["metadata"]["uid"] for p in ns.pods()} == uids  # none sent twice
    finally:
        drop_pools(ns, {"refusal-wave": 10})


def test_deleting_a_workload_frees_its_devices_for_the_next(ns: Kubectl) -> None:
    ns.apply(workload("first", replicas=2, count=8, models=["Gaudi2"]))
    assert placed(ns, "first")["pool"] == "gaudi2"
    ns.apply(workload("second", count=8, models=["Gaudi2"]))
    waiting = wait_for("second waiting", lambda: (s := ns.status("second")).get("candidates") and s)
    assert waiting.get("pool") is None and waiting["phase"] == "Pending"
    assert any("free" in r for r in waiting["candidates"][0]["reasons"]), waiting["candidates"]
    assert ns.condition("second", "Placed")["reason"] == "WaitingForCapacity"  # type: ignore[index]
    ns("delete", "awl", "first", "-n", ns.ns)
    assert placed(ns, "second", timeout=60)["pool"] == "gaudi2"


def test_pool_degraded_and_overlap_are_reported(operator: Operator, installed: Any) -> None:
    k = Kubectl(installed, "default")
    group = {
        "name": "probe",
        "count": 2,
        "labels": {"example.com/accel": "x1"},
        "capacity": {"example.com/x1": "4", "cpu": "8", "memory": "32Gi", "pods": "110"},
    }
    nodes = fleet_mod.node_manifests([group])
    pools = [
        {
            "apiVersion": "tessera.dev/v1alpha1",
            "kind": "AcceleratorPool",
            "metadata": {"name": name},
            "spec": {
                "accelerator": {
                    "vendor": "other",
                    "model": "X1",
                    "resourceName": "example.com/x1",
                    "memoryGiB": 48,
                    "peakTFLOPS": {"bf16": 400},
                },
                "nodeSelector": {"matchLabels": {"example.com/accel": "x1"}},
            },
        }
        for name in ("probe-a", "probe-b")
    ]
    k.apply(*nodes, *pools)
    try:

        def status(name: str) -> dict[str, Any]:
            return k.get("acp", name, cluster_scoped=True).get("status") or {}

        a = wait_for(
            "probe-a counted", lambda: status("probe-a").get("nodes") == 2 and status("probe-a")
        )
        assert a["devices"]["allocatable"] == 8 and a["accelerator"]["model"] == "X1"
        b = wait_for("probe-b overlap", lambda: (s := status("probe-b")).get("conditions") and s)
        assert b["nodes"] == 0, "a node two pools select must be counted once"
        overlap = {c["type"]: c for c in b["conditions"]}["NodesOverlap"]
        assert overlap["status"] == "True" and "probe-0" in overlap["message"]
        # A node goes NotReady: kwok stops managing it and the condition says so.
        installed.kubectl("annotate", "node", "probe-1", "kwok.x-k8s.io/node-")
        installed.kubectl(
            "patch",
            "node",
            "probe-1",
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletDown",'
            '"message":"test","lastHeartbeatTime":null}]}}',
        )
        degraded = wait_for(
            "Degraded",
            lambda: next(
                (
                    c
                    for c in status("probe-a").get("conditions", [])
                    if c["type"] == "Degraded" and c["status"] == "True"
                ),
                None,
            ),
        )
        assert "probe-1" in degraded["message"]
        assert status("probe-a")["readyNodes"] == 1
        assert wait_for(
            "degraded metric",
            lambda: metric_value(operator.metrics(), "tessera_pool_degraded", pool="probe-a") == 1,
        )
    finally:
        installed.kubectl("delete", "acp", "probe-a", "probe-b", "--wait=false", check=False)
        installed.kubectl("delete", "node", "probe-0", "probe-1", "--wait=false", check=False)


def test_spec_changes_replan_a_waiting_workload_and_leave_a_placed_one_alone(ns: Kubectl) -> None:
    # Waiting: nothing satisfies fp4 on an A100; widening the choice re-plans it at once.
    ns.apply(workload("picky", count=1, precision="fp8", models=["A100-SXM4-80GB"]))
    waiting = wait_for("picky waiting", lambda: (s := ns.status("picky")).get("candidates") and s)
    assert waiting.get("pool") is None
    assert any("fp8" in r for c in waiting["candidates"] for r in c["reasons"])
    ns("patch", "awl", "picky", "-n", ns.ns, "--type=merge", "-p",
       '{"spec":{"accelerator":{"models":["A100-SXM4-80GB","H100-SXM5-80GB"]}}}')  # fmt: skip
    assert placed(ns, "picky")["pool"] == "h100"
    # Placed: a change that does not touch placement (the objective) moves nothing.
    ns("wait", "--for=condition=Ready", "awl/picky", "-n", ns.ns, "--timeout=60s")
    pods = {p["metadata"]["uid"] for p in ns.pods(**{"tessera.dev/workload": "picky"})}
    assert len(pods) == 1
    ns("patch", "awl", "picky", "-n", ns.ns, "--type=merge", "-p", '{"spec":{"objective":"cost"}}')
    generation = ns.awl("picky")["metadata"]["generation"]
    wait_for(
        "observedGeneration", lambda: ns.status("picky").get("observedGeneration") == generation
    )
    assert ns.status("picky")["pool"] == "h100"
    assert {p["metadata"]["uid"] for p in ns.pods(**{"tessera.dev/workload": "picky"})} == pods


def test_pods_of_a_spec_edited_before_the_decision_was_written_are_replaced(ns: Kubectl) -> None:
    """The CRD freezes a spec only once status.pool is set. Pods built from an earlier
    generation (here: left by an operator stopped before it wrote its decision, the spec
    edited since) must not be adopted as the placement: they are deleted and the workload
    placed again from the spec it has now."""
    # Restricted to a pool that does not exist, so the operator leaves it waiting.
    ns.apply(workload("edited", count=1, pools=["nowhere"]))
    wait_for("edited waiting", lambda: ns.condition("edited", "Placed"))
    ns("patch", "awl", "edited", "-n", ns.ns, "--type=json", "-p",
       '[{"op":"replace","path":"/spec/template/spec/containers/0/image",'
       '"value":"registry.example/app:2"}]')  # fmt: skip
    edited = ns.awl("edited")
    assert edited["metadata"]["generation"] == 2
    stale = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "edited-h100-0",
            "labels": {"tessera.dev/workload": "edited", "tessera.dev/pool": "h100",
                       "tessera.dev/replica": "0"},
            "annotations": {"tessera.dev/generation": "1"},
            "ownerReferences": [{"apiVersion": "tessera.dev/v1alpha1", "kind": "Workload",
                                 "name": "edited", "uid": edited["metadata"]["uid"],
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }  # fmt: skip
    created = ns("create", "-n", ns.ns, "-o", "json", "-f", "-", input=json.dumps(stale))
    old_uid = json.loads(created.stdout)["metadata"]["uid"]
    wait_for("stale pod deleted", lambda: not ns.pods(**{"tessera.dev/workload": "edited"}))
    assert ns.status("edited").get("pool") is None  # not adopted
    event = wait_for(
        "SpecChanged event",
        lambda: next((e for e in ns.events("edited") if e["reason"] == "SpecChanged"), None),
    )
    assert "generation 2" in event["message"] and "generation 1" in event["message"]
    # Placed now, its pod is built from the spec it has.
    ns("patch", "awl", "edited", "-n", ns.ns, "--type=merge", "-p",
       '{"spec":{"accelerator":{"pools":["h100"]}}}')  # fmt: skip
    assert placed(ns, "edited")["pool"] == "h100"
    pod = wait_for("new pod", lambda: ns.pods(**{"tessera.dev/workload": "edited"}))[0]
    assert pod["metadata"]["uid"] != old_uid
    assert pod["spec"]["containers"][0]["image"] == "registry.example/app:2"
    assert pod["metadata"]["annotations"]["tessera.dev/generation"] == "3"


def test_model_conflict_between_spec_and_labels_is_a_condition(
    operator: Operator, installed: Any
) -> None:
    k = Kubectl(installed, "default")
    pool = {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "AcceleratorPool",
        "metadata": {"name": "conflicted"},
        "spec": {
            "accelerator": {"vendor": "nvidia", "model": "H100-SXM5-80GB"},
            "nodeSelector": {"matchLabels": {"example.com/mislabelled": "yes"}},
        },
    }
    # Its own node, labelled by GPU Feature Discovery as an L4 while the pool claims H100s
    # (not by GKE's label: the example l4 pool selects that, and being older keeps the node).
    group = {
        "name": "mislabelled",
        "count": 1,
        "labels": {
            "nvidia.com/gpu.product": "NVIDIA-L4",
            "example.com/mislabelled": "yes",
        },
        "capacity": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "32Gi", "pods": "110"},
    }
    k.apply(*fleet_mod.node_manifests([group]), pool)
    try:

        def resolved() -> Any:
            conds = (k.get("acp", "conflicted", cluster_scoped=True).get("status") or {}).get(
                "conditions", []
            )
            return next((c for c in conds if c["type"] == "AcceleratorResolved"), None)

        cond = wait_for("AcceleratorResolved", resolved)
        assert cond["status"] == "False" and cond["reason"] == "ModelConflict"
        assert "H100-SXM5-80GB" in cond["message"] and "L4" in cond["message"]
        ready = next(
            c
            for c in k.get("acp", "conflicted", cluster_scoped=True)["status"]["conditions"]
            if c["type"] == "Ready"
        )
        assert ready["status"] == "False"
    finally:
        k("delete", "acp", "conflicted", "--wait=false", check=False)
        k("delete", "node", "mislabelled-0", "--wait=false", check=False)


def test_a_gang_refused_on_its_pool_says_so_and_falls_back_to_the_next(
    ns: Kubectl, refusing: Callable[..., None], operator: Operator
) -> None:
    # The API server refuses the gang's second pod on h100, as a ResourceQuota of 8
    # nvidia.com/gpu would. The gang is withdrawn from h100 at once, not after
    # fallbackAfterSeconds (5 minutes here): its first pod deleted (it held 8 devices), the
    # refusal said in its status, h100 excluded for a short backoff, and the gang placed on
    # the next pool.
    refusing("1")
    refusing("h100", key="pool")
    manifest = workload("quota", replicas=2, count=8, vendors=["nvidia"], objective="performance")
    manifest["spec"]["placement"] = {"fallbackAfterSeconds": 300}
    ns.apply(manifest)
    status = wait_for(
        "fallback", lambda: (s := ns.status("quota")).get("excludedPools") and s, timeout=20
    )
    [excluded] = status["excludedPools"]
    assert excluded["pool"] == "h100"
    assert "quota-h100-1 refused" in excluded["reason"]
    assert "refused by the test" in excluded["reason"]
    withdrawn = wait_for(
        "FallbackTriggered",
        lambda: next((e for e in ns.events("quota") if e["reason"] == "FallbackTriggered"), None),
    )
    assert withdrawn["message"].startswith("withdrawn from h100: pod quota-h100-1 refused")
    assert "refused by the test" in withdrawn["message"]
    after = placed(ns, "quota")
    assert after["pool"] != "h100"  # the next best for performance: an H200 or an A100 pool
    pods = wait_for(
        "the gang's pods on the next pool only",
        lambda: (
            {
                (
                    p["metadata"]["labels"]["tessera.dev/pool"],
                    p["metadata"]["labels"]["tessera.dev/replica"],
                )
                for p in ns.pods(**{"tessera.dev/workload": "quota"})
            }
            == {(after["pool"], "0"), (after["pool"], "1")}
        ),
    )
    assert pods
    ns("wait", "--for=condition=Ready", "awl/quota", "-n", ns.ns, "--timeout=60s")
    assert ns.status("quota")["message"].startswith(f"placed on {after['pool']}")
    assert (metric_value(operator.metrics(), "tessera_fallbacks_total", pool="h100") or 0) >= 1
