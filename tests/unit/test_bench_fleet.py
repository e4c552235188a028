"""The fleet benchmark's pure parts: percentiles, the API server's counters and who made each
write, watch bookkeeping, the integrity check, and the fleet, pools and pods it creates."""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "bench"))  # hack/ is on the path too (tests/conftest.py)

import fleet  # noqa: E402  (hack/fleet.py: the simulated fleet)
import fleet_bench  # noqa: E402  (bench/fleet_bench.py: the benchmark's runner)
import fleet_kube  # noqa: E402
import fleet_measure as m  # noqa: E402
import fleet_report  # noqa: E402
import fleet_specs as specs  # noqa: E402
import fleet_stats  # noqa: E402
import fleet_targets  # noqa: E402
from tessera import api  # noqa: E402

# --- the benchmark's modules -------------------------------------------------------------------

PHASES = {
    "fleet_setup",
    "fleet_kill",
    "fleet_warmup",
    "fleet_idle",
    "fleet_bursts",
    "fleet_restart",
    "fleet_backlog",
    "fleet_baseline",
    "fleet_floor",
    "fleet_cleanup",
}


def imports(module: str) -> set[str]:
    tree = ast.parse((REPO / "bench" / f"{module}.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


def test_each_phase_imports_what_its_docstring_allows() -> None:
    """A phase imports neither the runner nor another phase (the warm-up is the floor's
    burst); what they share is in fleet_context, which imports none of them."""
    for phase in PHASES:
        allowed = {phase, "fleet_floor"} if phase == "fleet_warmup" else {phase}
        assert imports(phase) & (PHASES | {"fleet_bench", "fleet_rotation"}) <= allowed, phase
    assert not imports("fleet_context") & (PHASES | {"fleet_bench", "fleet_rotation"})
    # the runner and the repeats (fleet_rotation) run every phase; nothing else imports them
    assert imports("fleet_bench") | imports("fleet_rotation") >= PHASES
    assert "fleet_bench" not in imports("fleet_rotation")


# --- percentiles ------------------------------------------------------------------------------


def test_percentiles_interpolate_between_ranks() -> None:
    data = [4.0, 1.0, 3.0, 2.0, 5.0]
    assert m.percentile(data, 50) == 3.0
    assert m.percentile(data, 0) == 1.0
    assert m.percentile(data, 100) == 5.0
    assert m.percentile(data, 90) == pytest.approx(4.6)
    assert m.percentile([], 50) is None


def test_summary_of_latencies_and_of_nothing() -> None:
    s = m.summary(x / 100 for x in range(1, 101))
    assert s["n"] == 100 and s["p50"] == 0.505 and s["max"] == 1.0
    assert m.summary([]) == {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}


def test_rate_needs_a_span() -> None:
    assert m.rate(100, 10.0, 12.0) == 50.0
    assert m.rate(100, None, 12.0) is None
    assert m.rate(100, 12.0, 12.0) is None


# --- the API server's counters ----------------------------------------------------------------


def sample(
    verb: str, resource: str, value: int, group: str = "", sub: str = "", code: str = "201"
) -> str:
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="{group}",resource="{resource}",'
        f'scope="resource",subresource="{sub}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}"


METRICS = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        "# TYPE apiserver_request_total counter",
        sample("POST", "pods", 10),
        sample("POST", "pods", 2, code="409"),
        sample("POST", "pods", 12, sub="binding"),
        sample("PATCH", "workloads", 24, group="tessera.dev", sub="status", code="200"),
        sample("POST", "workloads", 12, group="tessera.dev"),
        sample("POST", "events", 12),
        sample("POST", "events", 12, group="events.k8s.io"),
        sample("LIST", "pods", 3, code="200"),
        sample("LIST", "limitranges", 1, code="200"),
        'apiserver_request_duration_seconds_count{group="",resource="pods",verb="POST"} 99',
    ]
)


def test_parse_requests_sums_over_codes_and_ignores_other_metrics() -> None:
    counts = m.parse_requests(METRICS)
    assert counts[("POST", "", "pods", "")] == 12
    assert counts[("POST", "", "pods", "binding")] == 12
    assert counts[("PATCH", "tessera.dev", "workloads", "status")] == 24
    assert sum(counts.values()) == 12 + 12 + 24 + 12 + 12 + 12 + 3 + 1


def test_delta_keeps_what_changed() -> None:
    before = {("POST", "", "pods", ""): 5, ("GET", "", "nodes", ""): 7}
    after = {("POST", "", "pods", ""): 8, ("GET", "", "nodes", ""): 7, ("LIST", "", "pods", ""): 1}
    assert m.delta(after, before) == {("POST", "", "pods", ""): 3, ("LIST", "", "pods", ""): 1}


def test_attribution_gives_the_operator_only_what_only_it_writes() -> None:
    own = {("POST", "tessera.dev", "workloads", ""): 12, ("LIST", "", "pods", ""): 1}
    cost = m.attribute(m.parse_requests(METRICS), own)
    assert cost["operator"]["byCategory"] == {
        "event": 12,
        "pod create": 12,
        "workload status patch": 24,
    }
    assert cost["operator"]["total"] == 48  # the bench's own Workload POSTs are not counted
    assert cost["others"]["byRequest"] == {
        "POST pods/binding": 12,
        "POST events.k8s.io/events": 12,
    }


def test_refused_requests_are_kept_by_code_and_the_operators_named() -> None:
    text = "\n".join([METRICS, sample("POST", "pods", 3, sub="binding", code="409")])
    refused = m.parse_refused(text)
    assert refused == {
        (("POST", "", "pods", ""), "409"): 2,
        (("POST", "", "pods", "binding"), "409"): 3,
    }
    # The refused binding is the scheduler's, not the operator's.
    assert m.operator_refused(refused, {}) == {"pod create 409": 2}
    # A kind of request the bench made in the same window could be either's refusal.
    assert m.operator_refused(refused, {("POST", "", "pods", ""): 5}) == {}
    later = m.parse_refused(
        text.replace('verb="POST",version="v1"} 2', 'verb="POST",version="v1"} 7')
    )
    assert m.delta(later, refused) == {(("POST", "", "pods", ""), "409"): 5}


@pytest.mark.parametrize(
    ("key", "category"),
    [
        (("DELETE", "", "pods", ""), "pod delete"),
        (("PATCH", "tessera.dev", "acceleratorpools", "status"), "pool status patch"),
        (("PUT", "tessera.dev", "workloads", ""), "workload object put"),
        (("PATCH", "", "pods", "status"), None),  # kwok
        (("PUT", "coordination.k8s.io", "leases", ""), None),  # kwok's node leases
        (("POST", "events.k8s.io", "events", ""), None),  # the scheduler
        (("LIST", "", "pods", ""), None),  # not a write
    ],
)
def test_operator_categories(key: m.Request, category: str | None) -> None:
    assert m.operator_category(*key) == category


def test_lists_by_resource_less_own_and_those_the_operator_watches() -> None:
    by_resource = m.lists(m.parse_requests(METRICS), {("LIST", "", "pods", ""): 1})
    assert by_resource == {"limitranges": 1, "pods": 2}
    assert m.watched_lists(by_resource) == 2


@pytest.mark.parametrize(
    ("agent", "client"),
    [
        ("tessera/0.1.0", "tessera"),
        ("tessera-bench", "tessera-bench"),
        (
            "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/podgc",
            "kube-controller-manager/podgc",
        ),
        ("kube-scheduler/v1.37.2 (linux/amd64) kubernetes/abc1234", "kube-scheduler"),
        ("kwok/v0.7.0 (linux/amd64) kubernetes/$Format", "kwok"),
        ("", "unnamed"),
    ],
)
def test_client_names_from_user_agents(agent: str, client: str) -> None:
    assert m.client_name(agent) == client


def test_audited_lists_by_client_and_resource() -> None:
    def line(verb: str, agent: str, resource: str, group: str = "", stage: str = "") -> str:
        ref = {"resource": resource, **({"apiGroup": group} if group else {})}
        event = {"verb": verb, "userAgent": agent, "objectRef": ref}
        return json.dumps({**event, "stage": stage or "ResponseComplete"})

    lines = [
        line("list", "tessera/0.1.0", "pods"),
        line("list", "tessera/0.1.0", "workloads", "tessera.dev"),
        line("list", "tessera/0.1.0", "pods", stage="ResponseStarted"),  # the same request
        line("watch", "tessera/0.1.0", "pods"),
        line("list", "kwok/v0.7.0 (linux/amd64) kubernetes/$Format", "pods"),
        line("list", "kwok/v0.7.0 (linux/amd64) kubernetes/$Format", "pods"),
        '{"verb": "list", "userAg',  # cut by rotation
    ]
    assert m.audited_lists(lines) == {
        "kwok": {"pods": 2},
        "tessera": {"pods": 1, "tessera.dev/workloads": 1},
    }


@pytest.mark.parametrize(
    ("method", "path", "query", "key"),
    [
        ("POST", "/api/v1/namespaces/ns/pods", None, ("POST", "", "pods", "")),
        ("GET", "/api/v1/namespaces/ns/pods", None, ("LIST", "", "pods", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "1"}, ("WATCH", "", "pods", "")),
        ("GET", "/api/v1/namespaces/ns", None, ("GET", "", "namespaces", "")),
        ("DELETE", "/api/v1/namespaces/ns/pods", None, ("DELETECOLLECTION", "", "pods", "")),
        (
            "PATCH",
            "/apis/tessera.dev/v1alpha1/namespaces/ns/workloads/w/status",
            None,
            ("PATCH", "tessera.dev", "workloads", "status"),
        ),
        (
            "GET",
            "/apis/tessera.dev/v1alpha1/acceleratorpools",
            None,
            ("LIST", "tessera.dev", "acceleratorpools", ""),
        ),
    ],
)
def test_request_keys_match_the_servers_counters(
    method: str, path: str, query: dict[str, str] | None, key: m.Request
) -> None:
    assert fleet_kube.request_key(method, path, query) == key


# --- watch bookkeeping ------------------------------------------------------------------------


def pod_obj(
    name: str, workload: str, node: str = "", uid: str = "u", phase: str = "Pending"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid, "labels": {m.WORKLOAD_LABEL: workload}},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def test_pod_tracker_records_first_seen_first_bound_and_first_running() -> None:
    t = m.PodTracker(m.WORKLOAD_LABEL, keep_first=True)
    t.handle("ADDED", pod_obj("w-0", "w"), 1.0, b'{"type":"ADDED","object":{"n":0}}')
    t.handle("MODIFIED", pod_obj("w-0", "w", node="n1"), 1.5, b"")
    t.handle("MODIFIED", pod_obj("w-0", "w", node="n1", phase="Running"), 2.0, b"")
    t.handle("MODIFIED", pod_obj("w-0", "w", node="n1", phase="Running"), 2.5, b"")
    t.handle("ADDED", pod_obj("w-1", "w"), 1.2, b'{"type":"ADDED","object":{"n":1}}')
    assert t.created == {"w-0": 1.0, "w-1": 1.2}
    assert t.bound == {"w-0": 1.5}
    assert t.running == {"w-0": 2.0}
    assert t.counts() == (2, 1, 2)
    assert t.members() == {"w": ["w-0", "w-1"]}
    assert t.first_objects() == [{"n": 0}, {"n": 1}]
    t.handle("DELETED", pod_obj("w-1", "w"), 3.0, b"")
    t.handle("ADDED", pod_obj("w-1", "w", uid="other"), 3.1, b"")
    assert t.recreated() == 1
    assert t.counts() == (2, 1, 2)


def test_workload_tracker_records_pool_running_and_ready() -> None:
    t = m.WorkloadTracker()

    def w(**status: Any) -> dict[str, Any]:
        return {"metadata": {"name": "w"}, "spec": {"replicas": 2}, "status": status}

    t.handle("ADDED", w(), 1.0, b"")
    t.handle("MODIFIED", w(pool="h100", phase="Placed"), 2.0, b"")
    t.handle("MODIFIED", w(pool="h100", phase="Running", readyReplicas=1), 3.0, b"")
    t.handle("MODIFIED", w(pool="h100", phase="Running", readyReplicas=2), 4.0, b"")
    assert (t.placed, t.running, t.ready) == ({"w": 2.0}, {"w": 3.0}, {"w": 4.0})
    assert t.pool == {"w": "h100"}
    t.handle("DELETED", w(), 5.0, b"")
    assert t.counts() == (1, 1, 1, 0)


def test_group_latencies_wait_for_every_pod_of_a_gang() -> None:
    starts = {"a": 1.0, "b": 1.0}
    members = {"a": ["a-0", "a-1"], "b": ["b-0", "b-1"]}
    bound = {"a-0": 1.5, "a-1": 2.5, "b-0": 1.2}
    done, missing = m.group_latencies(starts, members, bound, {"a": 2, "b": 2})
    assert done == [1.5]
    assert missing == ["b"]


def test_slowest_splits_the_tail_into_creating_and_binding() -> None:
    starts = {f"w{i}": float(i) for i in range(100)}
    members = {w: [f"{w}-0"] for w in starts}
    created = {f"{w}-0": t + 0.1 for w, t in starts.items()}
    bound = {f"{w}-0": t + 0.2 for w, t in starts.items()}
    bound["w40-0"] = 40 + 9.1  # one slow mid-burst: it waited after its pod was created
    del bound["w7-0"]  # unbound workloads are not in the tail
    tail = m.slowest(starts, members, created, bound, {w: 1 for w in starts})
    assert tail["n"] == 1
    assert tail["earliestCreatedAtOffset"] == 40.0
    assert tail["toPodsCreated"]["max"] == 0.1
    assert tail["podsCreatedToBound"]["max"] == 9.0
    assert m.slowest(starts, members, created, {}, {w: 1 for w in starts}) == {"n": 0}


# --- integrity --------------------------------------------------------------------------------


def workload_obj(name: str, replicas: int, pool: str = "h100") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"replicas": replicas},
        "status": {"pool": pool},
    }


def placed_pod(
    workload: str, replica: int, pool: str = "h100", owner: str | None = None
) -> dict[str, Any]:
    labels = {m.WORKLOAD_LABEL: workload, m.POOL_LABEL: pool, m.REPLICA_LABEL: str(replica)}
    return {
        "metadata": {
            "name": f"{workload}-{pool}-{replica}",
            "labels": labels,
            "ownerReferences": [{"kind": "Workload", "uid": owner or f"uid-{workload}"}],
        },
        "spec": {"nodeName": "n1"},
    }


def test_integrity_of_a_clean_namespace() -> None:
    result = m.integrity(
        [workload_obj("a", 1), workload_obj("g", 2)],
        [placed_pod("a", 0), placed_pod("g", 0), placed_pod("g", 1), {"metadata": {"name": "x"}}],
    )
    assert result["ok"] and result["pods"] == 3 and result["unbound"] == 0


def test_integrity_finds_duplicates_orphans_and_missing_pods() -> None:
    result = m.integrity(
        [workload_obj("dup", 2), workload_obj("short", 2), workload_obj("moved", 1, pool="a100")],
        [
            placed_pod("dup", 0),
            placed_pod("dup", 0),
            placed_pod("short", 0),
            placed_pod("gone", 0),  # its Workload does not exist
            placed_pod("moved", 0),  # on a pool the Workload is no longer placed on
            placed_pod("short", 1, owner="uid-of-an-older-short"),
        ],
    )
    assert result["duplicated"] == ["dup"]
    assert result["missing"] == ["moved", "short"]
    assert result["orphans"] == ["gone-h100-0", "moved-h100-0", "short-h100-1"]
    assert not result["ok"]


# --- the fleet, pools, workloads and baseline pods --------------------------------------------


def test_pool_groups_cycle_the_accelerators_and_split_by_zone() -> None:
    groups = fleet.pool_groups(fleet.load_groups(), pools=8, nodes=1000)
    assert len(groups) == 8 and sum(g["count"] for g in groups) == 1000
    assert {g["count"] for g in groups} == {125}
    assert "system" not in {g["group"] for g in groups}
    split = [g for g in groups if g["group"] == "a100"]
    assert [g["name"] for g in split] == ["a100-zone-a", "a100-zone-b"]
    assert [g["zone"] for g in split] == ["zone-a", "zone-b"]
    assert all(g["zone"] is None for g in groups if g["group"] != "a100")
    for g in groups:
        assert g["capacity"][fleet.device_resource(g)] == "8"
        assert g["labels"][fleet.ZONE_LABEL].startswith("zone-")
        assert g["taints"], "accelerator nodes keep their taints"


def test_pool_groups_at_large_scale_and_uneven_splits() -> None:
    groups = fleet.pool_groups(fleet.load_groups(), pools=20, nodes=5003)
    assert len({g["name"] for g in groups}) == 20
    assert sum(g["count"] for g in groups) == 5003
    assert max(g["count"] for g in groups) - min(g["count"] for g in groups) == 1
    trainium = next(g for g in groups if g["group"] == "trainium")
    assert trainium["capacity"]["aws.amazon.com/neuron"] == "8"
    nodes = fleet.node_manifests(groups)
    assert len({n["metadata"]["name"] for n in nodes}) == 5003
    with pytest.raises(ValueError, match="one node per pool"):
        fleet.pool_groups(fleet.load_groups(), pools=8, nodes=4)


def test_pools_mirror_the_examples_and_select_their_zone() -> None:
    groups = fleet.pool_groups(fleet.load_groups(), pools=14, nodes=28)
    pools = [specs.pool_manifest(g) for g in groups]
    for group, pool in zip(groups, pools, strict=True):
        spec = api.AcceleratorPoolSpec.model_validate(pool["spec"])
        assert spec.namespace_selector is None
        labels = group["labels"]
        assert all(labels.get(k) == v for k, v in spec.node_selector.match_labels.items())
        assert spec.tolerations, "the example's tolerations are kept"
    a = next(p for p in pools if p["metadata"]["name"] == "a100-zone-b")
    assert a["spec"]["nodeSelector"]["matchLabels"][specs.ZONE_LABEL] == "zone-b"


def test_workloads_are_pinned_to_one_pool_and_spread_evenly() -> None:
    groups = fleet.pool_groups(fleet.load_groups(), pools=8, nodes=16)
    pools = [specs.pool_manifest(g) for g in groups]
    singles = specs.singles(16, pools, "ns")
    assert [w["spec"]["accelerator"]["pools"] for w in singles[:8]] == [
        [p["metadata"]["name"]] for p in pools
    ]
    for w in singles:
        spec = api.WorkloadSpec.model_validate(w["spec"])
        assert spec.is_service and spec.replicas == 1 and spec.accelerator.count == 1
    l4 = next(w for w in singles if w["spec"]["accelerator"]["pools"] == ["l4"])
    assert "models" not in l4["spec"]["accelerator"]  # the L4 pool names no model
    gangs = specs.gangs(100, pools, "ns")
    assert [w["spec"]["replicas"] for w in gangs[:4]] == [2, 4, 8, 2]
    assert 100 <= sum(w["spec"]["replicas"] for w in gangs) < 108


def test_the_pools_count_the_devices_of_every_workload_pinned_to_them() -> None:
    pools = [specs.pool_manifest(g) for g in fleet.pool_groups(fleet.load_groups(), 2, 4)]
    first, second = (p["metadata"]["name"] for p in pools)
    gangs = specs.gangs(14, pools, "ns")  # 2, 4, 8 pods: 2 + 8 on the first pool, 4 on the second
    want = m.devices_by_pool(gangs)
    assert want == {first: 10, second: 4}

    def pool(name: str, status: dict[str, Any] | None) -> dict[str, Any]:
        return {"metadata": {"name": name}, **({"status": status} if status else {})}

    shown = [pool(first, {"devices": {"allocated": 10}}), pool(second, None), pool("idle", None)]
    assert m.pools_uncounted(shown, want) == {second: (None, 4), "idle": (None, 0)}
    shown = [
        pool(first, {"devices": {"allocated": 10}}),
        pool(second, {"devices": {"allocated": 4}}),
    ]
    assert m.pools_uncounted(shown, want) == {}
    shown.append(pool("idle", {"devices": {"allocated": 0}}))
    assert m.pools_uncounted(shown, want) == {}


def test_every_object_carries_its_clean_up_batch() -> None:
    pools = [specs.pool_manifest(g) for g in fleet.pool_groups(fleet.load_groups(), 2, 4)]
    singles = specs.singles(1001, pools, "ns")
    for w in singles:
        labels = w["metadata"]["labels"]
        assert w["spec"]["template"]["metadata"]["labels"] == labels  # so its pods carry it
    assert Counter(w["metadata"]["labels"][specs.BATCH_LABEL] for w in singles) == {
        "0": 500,
        "1": 500,
        "2": 1,
    }
    gangs = specs.gangs(10_000, pools, "ns")
    pods: Counter[str] = Counter()
    for w in gangs:
        pods[w["metadata"]["labels"][specs.BATCH_LABEL]] += w["spec"]["replicas"]
    assert len(pods) == 20 and max(pods.values()) < specs.BATCH_PODS + max(specs.GANG_SIZES)
    assert specs.batches(gangs) == [str(b) for b in range(20)]  # in numeric order
    assert specs.batches(singles[:1]) == ["0"]


PIN = {"key": "metadata.name", "operator": "In", "values": ["h100-3"]}
TO_POOL = {"key": "k", "operator": "In", "values": ["v"]}


def test_baseline_pod_is_the_tessera_pod_without_tessera() -> None:
    pod = {
        "metadata": {
            "name": "s-00001-h100-0",
            "namespace": "bench-singles",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {
                m.WORKLOAD_LABEL: "s-00001",
                m.POOL_LABEL: "h100",
                specs.BATCH_LABEL: "3",
                "app": "x",
            },
            "ownerReferences": [{"kind": "Workload", "uid": "w"}],
        },
        "spec": {
            "nodeName": "h100-3",
            "priority": 0,
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"nvidia.com/gpu": "1"}},
                    "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var"}],
                }
            ],
            "volumes": [{"name": "kube-api-access-abcde"}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [TO_POOL], "matchFields": [PIN]}]
                    }
                }
            },
        },
        "status": {"phase": "Running"},
    }
    out = specs.baseline_pod(pod, "bench-baseline")
    assert out["metadata"] == {
        "name": "s-00001-h100-0",
        "namespace": "bench-baseline",
        "labels": {"app": "x", specs.BATCH_LABEL: "3", specs.GROUP_LABEL: "s-00001"},
        "annotations": {},
    }
    assert set(out["spec"]) == {"containers", "restartPolicy", "tolerations", "affinity"}
    assert out["spec"]["containers"] == [
        {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    ]
    term = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]
    assert term == {"matchExpressions": [TO_POOL]}
    assert (
        "matchFields"
        in pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]
    ), "the Tessera pod is left as it was"


OWNER = {
    "apiVersion": api.API_VERSION,
    "kind": "Workload",
    "name": "s-00001",
    "uid": "w-tessera",
    "controller": True,
    "blockOwnerDeletion": True,
}


def test_floor_pod_keeps_the_pin_to_tessera_s_node_and_its_owner() -> None:
    pod = {
        "metadata": {
            "name": "s-00001-h100-0",
            "labels": {m.WORKLOAD_LABEL: "s-00001"},
            "ownerReferences": [OWNER],
        },
        "spec": {
            "containers": [{"name": "main"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [TO_POOL], "matchFields": [PIN]}]
                    }
                }
            },
        },
    }
    out = specs.baseline_pod(pod, "bench-floor-singles", floor=True)
    term = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]
    assert term == {"matchExpressions": [TO_POOL], "matchFields": [PIN]}
    assert out["metadata"]["labels"] == {specs.GROUP_LABEL: "s-00001"}
    assert out["metadata"]["namespace"] == "bench-floor-singles"
    assert out["metadata"]["ownerReferences"] == [OWNER]
    assert out["metadata"]["ownerReferences"][0] is not OWNER  # a copy


def test_the_floor_operator_owns_its_pods_as_tessera_does() -> None:
    import floor_operator

    body = {
        "metadata": {"name": "s-00001-h100-0", "labels": {"a": "b"}, "ownerReferences": [OWNER]},
        "spec": {},
    }
    workload = {"metadata": {"name": "s-00001", "namespace": "ns", "uid": "u-1"}}
    out = floor_operator.owned(body, workload)
    assert out["metadata"]["ownerReferences"] == [
        {
            "apiVersion": api.API_VERSION,
            "kind": "Workload",
            "name": "s-00001",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert out["metadata"]["labels"] == {"a": "b"}
    assert body["metadata"]["ownerReferences"] == [OWNER]  # the body is left as it was


def _selects(expressions: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """A node selector term's In / Exists expressions against a node's labels."""
    for e in expressions:
        if e["operator"] == "In" and labels.get(e["key"]) not in e["values"]:
            return False
        if e["operator"] == "Exists" and e["key"] not in labels:
            return False
    return True


def test_warm_up_pods_take_their_pool_s_nodes_devices_and_taints() -> None:
    import floor_operator

    groups = fleet.pool_groups(fleet.load_groups(), pools=8, nodes=16)
    pools = [specs.pool_manifest(g) for g in groups]
    resources = {g["name"]: fleet.device_resource(g) for g in groups}
    workloads = specs.singles(16, pools, "")
    made = specs.warm_up_pods(workloads, pools, resources, "bench-warm-up")
    assert sorted(made) == sorted(w["metadata"]["name"] for w in workloads)
    nodes = fleet.node_manifests(groups)
    for workload in workloads:
        name, pool = workload["metadata"]["name"], workload["spec"]["accelerator"]["pools"][0]
        [pod] = made[name]
        spec = pod["spec"]
        [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        fits = {
            n["metadata"]["name"]
            for n in nodes
            if _selects(term["matchExpressions"], n["metadata"]["labels"])
        }
        group = next(g for g in groups if g["name"] == pool)
        assert fits == {
            n["metadata"]["name"] for n in nodes if n["metadata"]["name"].startswith(pool + "-")
        }
        assert len(fits) == group["count"]
        tolerated = {t["key"] for t in spec["tolerations"]}
        assert {t["key"] for t in group["taints"]} <= tolerated
        requests = spec["containers"][0]["resources"]["requests"]
        assert requests[resources[pool]] == "1" and requests["cpu"] == "100m"
        assert pod["metadata"]["namespace"] == "bench-warm-up"
        assert pod["metadata"]["labels"][specs.GROUP_LABEL] == name
        assert specs.BATCH_LABEL in pod["metadata"]["labels"]
        uid = {"metadata": {"name": name, "uid": "u-9"}}
        [owner] = floor_operator.owned(pod, uid)["metadata"]["ownerReferences"]
        assert owner["uid"] == "u-9" and owner["name"] == name and owner["kind"] == "Workload"
    assert workloads == specs.singles(16, pools, "")  # the Workloads are left as they were


def test_the_warm_up_is_n_at_most_a_thousand() -> None:
    assert fleet_bench.parse_args([]).warm_up == 1000
    assert fleet_bench.parse_args(["--scale", "large"]).warm_up == 1000
    assert fleet_bench.parse_args(["--nodes", "16", "--workloads", "12"]).warm_up == 12
    assert fleet_bench.parse_args(["--warm-up", "0"]).warm_up == 0


# --- a paced client ---------------------------------------------------------------------------


def test_a_paced_burst_offers_the_pods_at_the_rate() -> None:
    # Workloads of 1, 2 and 4 pods at 100 pods/s: each is due when the pods before it are.
    assert fleet_kube.schedule(["a", "b", "c", "d"], [1, 2, 4, 1], 100) == [0, 0.01, 0.03, 0.07]


def test_a_paced_group_is_due_at_once() -> None:
    # The baseline's pods of one gang are due together, when the gang before was offered.
    due = fleet_kube.schedule(["g1", "g1", "g2", "g2", "g2", "g2", "g3"], [1] * 7, 50)
    assert due == [0, 0, 0.04, 0.04, 0.04, 0.04, 0.12]


def test_the_rate_names_the_results_and_must_be_positive(tmp_path: Path) -> None:
    args = fleet_bench.parse_args(["--rate", "120", "--results-dir", str(tmp_path)])
    assert args.rate == 120 and args.name == "default"
    out, _ = fleet_bench.write(args, {"parameters": {"workloads": 1, "nodes": 1, "pools": 1}})
    assert out.name == "fleet-default-rate120.json"
    assert fleet_bench.parse_args([]).rate is None
    with pytest.raises(SystemExit):
        fleet_bench.parse_args(["--rate", "0"])


# --- repeats, targets ------------------------------------------------------------------------


def test_the_sides_run_in_an_order_rotated_each_repeat() -> None:
    orders = [fleet_stats.rotation(i) for i in range(5)]
    assert orders[:3] == [
        ["tessera", "floor", "baseline"],
        ["floor", "baseline", "tessera"],
        ["baseline", "tessera", "floor"],
    ]
    assert orders[3] == orders[0]
    for k in range(3):  # in three repeats each side runs first, second and last once
        assert sorted(o[k] for o in orders[:3]) == ["baseline", "floor", "tessera"]


def test_the_bare_scheduler_runs_in_the_first_bare_repeats_only() -> None:
    assert fleet_stats.sides_of(0, 1) == ["tessera", "floor", "baseline"]
    assert fleet_stats.sides_of(1, 1) == ["floor", "tessera"]
    assert fleet_stats.sides_of(2, 1) == ["tessera", "floor"]
    assert fleet_stats.sides_of(2, 3) == fleet_stats.rotation(2)
    assert [fleet_stats.sides_of(i, 0) for i in range(2)] == [
        ["tessera", "floor"],
        ["floor", "tessera"],
    ]
    assert fleet_bench.parse_args(["--repeats", "3"]).bare_repeats == 3
    assert fleet_bench.parse_args(["--repeats", "3", "--bare-repeats", "1"]).bare_repeats == 1
    for bad in ("4", "-1"):
        with pytest.raises(SystemExit):
            fleet_bench.parse_args(["--repeats", "3", "--bare-repeats", bad])


def test_a_spread_is_median_min_max_of_what_was_measured() -> None:
    s = fleet_stats.spread([1.0, None, 3.0, 2.0, 10.0])
    assert s == {"n": 4, "median": 2.5, "min": 1.0, "max": 10.0, "values": [1.0, 3.0, 2.0, 10.0]}
    assert fleet_stats.spread([None]) is None and fleet_stats.spread([]) is None


def test_a_verdict_only_where_the_whole_spread_is_on_one_side() -> None:
    v = fleet_stats.verdict
    s = fleet_stats.spread
    assert v(s([0.96, 1.0, 1.2]), ">=", 0.95) == "met"
    assert v(s([0.9, 1.0, 1.2]), ">=", 0.95) == "undecided"
    assert v(s([0.8, 0.9]), ">=", 0.95) == "not met"
    assert v(s([0.1, 0.5]), "<=", 0.5) == "met"
    assert v(s([0.1, 0.6]), "<=", 0.5) == "undecided"
    assert v(s([0.6, 0.7]), "<=", 0.5) == "not met"
    assert v(s([0, 0]), "==", 0) == "met"
    assert v(s([0, 2]), "==", 0) == "undecided"
    assert v(s([1, 2]), "==", 0) == "not met"
    assert v(None, "<=", 1) is None
    assert [fleet_stats.met(x) for x in ("met", "not met", "undecided", None)] == [
        True,
        False,
        None,
        None,
    ]


def test_repeats_default_to_five_at_the_named_scales_and_one_at_a_custom_one() -> None:
    assert fleet_bench.parse_args([]).repeats == 5
    assert fleet_bench.parse_args(["--scale", "large"]).repeats == 5
    assert fleet_bench.parse_args(["--nodes", "16", "--workloads", "12"]).repeats == 1
    assert fleet_bench.parse_args(["--repeats", "3"]).repeats == 3
    with pytest.raises(SystemExit):
        fleet_bench.parse_args(["--repeats", "0"])


def test_the_idle_window_outlasts_the_operator_s_full_pass() -> None:
    from tessera.controller.visits import FULL_PASS

    for scale in ("default", "large"):
        assert fleet_bench.parse_args(["--scale", scale]).idle_seconds > FULL_PASS
    assert fleet_bench.parse_args(["--idle-seconds", "3"]).idle_seconds == 3


def side(pods: int, created: float, p99: float, operator: float, **over: Any) -> dict[str, Any]:
    """One side's figures of one phase: `operator` CPU seconds, 1 s of the API server's."""
    out: dict[str, Any] = {
        "workloads": 10,
        "pods": pods,
        "podsBoundPerSecond": created,
        "podsCreatedPerSecond": created,
        "operatorPodsCreatedPerSecond": created,
        "createdToBound": {"p50": p99 / 2, "p99": p99},
        "cpuSeconds": {"byProcess": {"kube-apiserver": 1.0, "operator": operator}},
        "apiWrites": {
            "operator": {
                "total": pods + 13,
                "byCategory": {
                    "pod create": pods,
                    "workload status patch": 10,
                    "pool status patch": 3,
                },
            },
            "operatorLists": 0,
        },
        "operatorPeakRssMB": 120.0,
    }
    return out | over


def repeat(k: int, tessera_rate: float = 190.0, tessera_p99: float = 1.2) -> dict[str, Any]:
    def floor_cpu(pods: int) -> dict[str, Any]:
        return {"byProcess": {"kube-apiserver": 1.0, "floor operator": pods / 100}}

    return {
        "order": fleet_stats.rotation(k),
        "tessera": {
            "singles": side(10, tessera_rate, tessera_p99, 0.102),
            "gangs": side(40, tessera_rate, tessera_p99, 0.408),
            "backlog": side(10, tessera_rate, tessera_p99, 0.102),
        },
        "floor": {
            phase: side(pods, 200.0, 1.0, 0.0, cpuSeconds=floor_cpu(pods))
            for phase, pods in (("singles", 10), ("gangs", 40), ("backlog", 10))
        },
        "baseline": {
            "singles": side(10, 300.0, 0.5, 0.0),
            "gangs": side(40, 300.0, 0.5, 0.0),
        },
    }


def result(repeats: list[dict[str, Any]] | None = None, **over: Any) -> dict[str, Any]:
    r = {
        "scale": "default",
        "parameters": {"workloads": 10, "nodes": 16, "idleSeconds": 45},
        "operator": {"idle": {"rssMB": 70.0}},
        "idle": {"operatorWrites": 0, "operatorLists": 0, "operatorRssMB": 75.0},
        "killAtIdle": {"seconds": 3.0, "duplicatesAndOrphans": 0},
        "killMidBurst": {"duplicatesAndOrphans": 0, "podsCreatedAtKill": 20, "pods": 40},
        "repeats": [repeat(k) for k in range(5)] if repeats is None else repeats,
    }
    return r | over


def targets(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["target"]: t for t in fleet_targets.targets(r)}


def test_targets_set_tessera_against_the_floor_of_the_same_repeat() -> None:
    rows = targets(result())
    burst = rows["pods created/s, Tessera / floor, burst of singles"]
    assert burst["measured"] == 0.95 and burst["verdict"] == "met" and burst["met"] is True
    assert burst["spread"]["n"] == 5 and burst["baseline"] == "Tessera 190/s, floor 200/s"
    p99 = rows["creation to all bound p99, Tessera - floor, gangs"]
    assert p99["measured"] == 0.2 and p99["verdict"] == "met"
    cpu = rows["operator CPU ms per pod, Tessera - floor operator, singles"]
    assert cpu["measured"] == 0.2 and cpu["verdict"] == "met"  # 10.2 ms against 10.0 ms
    writes = rows["operator writes per Workload to Running, gangs"]
    assert writes["threshold"] == "<= pods + 1 = 5.00" and writes["measured"] == 5.0
    assert "the pools' status patches apart: 3 in the phase" in writes["baseline"]
    assert rows["operator peak RSS, a backlog of 10 pending"]["verdict"] == "met"
    assert {t["verdict"] for t in rows.values()} == {"met"}
    assert len(rows) == 17
    table = fleet_report.table(fleet_targets.targets(result()))
    assert "0.95 [0.95, 0.95]" in table and "met" in table


def test_a_workloads_writes_count_its_events_and_not_the_pools() -> None:
    reps = [repeat(k) for k in range(5)]
    for rep in reps:
        rep["tessera"]["singles"]["apiWrites"]["operator"]["byCategory"]["event"] = 2
    writes = targets(result(reps))["operator writes per Workload to Running, singles"]
    assert writes["measured"] == 2.2 and writes["verdict"] == "not met"  # (10 + 10 + 2) / 10
    # 26 Events over 10,000 singles in one repeat of five: the table shows why it is undecided
    figure = fleet_stats.spread([2.0, 2.0, 2.0026])
    row = {"target": "writes", "threshold": "<= 2.00", "spread": figure, "verdict": "undecided"}
    assert "2 [2, 2.003]  undecided" in fleet_report.table([row])


def test_exactly_pods_plus_one_writes_meets_the_target_whatever_the_rounding() -> None:
    reps = [repeat(k) for k in range(5)]
    for rep in reps:  # 1,000 pods in 215 gangs: 1,215 / 215 = 5.65116...
        gangs = rep["tessera"]["gangs"]
        gangs.update(workloads=215, pods=1000)
        gangs["apiWrites"]["operator"]["byCategory"].update(
            {"pod create": 1000, "workload status patch": 215}
        )
    writes = targets(result(reps))["operator writes per Workload to Running, gangs"]
    assert writes["verdict"] == "met", writes


def test_a_spread_across_the_target_is_undecided_and_one_beyond_it_not_met() -> None:
    reps = [repeat(k, tessera_rate=rate) for k, rate in enumerate((180, 190, 200, 210, 220))]
    row = targets(result(reps))["pods created/s, Tessera / floor, burst of gangs"]
    assert row["spread"]["min"] == 0.9 and row["spread"]["max"] == 1.1
    assert row["verdict"] == "undecided" and row["met"] is None
    slow = [repeat(k, tessera_p99=2.0) for k in range(5)]
    row = targets(result(slow))["creation to all bound p99, Tessera - floor, singles"]
    assert row["measured"] == 1.0 and row["verdict"] == "not met"


def test_the_sigkills_and_the_idle_window_have_their_targets() -> None:
    bad = result(
        killMidBurst={"duplicatesAndOrphans": 2, "podsCreatedAtKill": 20, "pods": 40},
        idle={"operatorWrites": 1, "operatorLists": 1, "operatorRssMB": 75.0},
    )
    rows = targets(bad)
    mid = next(name for name in rows if name.endswith("after SIGKILL mid-burst"))
    assert rows[mid]["verdict"] == "not met"
    assert rows[mid]["baseline"] == "killed with 20 of 40 pods created"
    assert rows["duplicates and orphans after SIGKILL at idle"]["verdict"] == "met"
    assert rows["operator writes while idle (45 s, 10 on 16 nodes Running)"]["met"] is False
    lists = rows["operator LISTs after warm-up (every burst and the idle window)"]
    assert lists["measured"] == 1 and lists["verdict"] == "not met"


def test_a_failed_run_reports_what_it_measured() -> None:
    partial = result(repeats=[{"order": ["tessera"], "tessera": repeat(0)["tessera"]}])
    del partial["killMidBurst"]
    rows = targets(partial)
    assert list(rows) == list(targets(result()))
    assert rows["pods created/s, Tessera / floor, burst of singles"]["verdict"] is None
    assert rows["operator writes per Workload to Running, singles"]["verdict"] == "met"
    mid = next(name for name in rows if name.endswith("after SIGKILL mid-burst"))
    assert rows[mid]["measured"] is None and rows[mid]["met"] is None
    lines = fleet_report.table(list(rows.values())).splitlines()
    assert next(x for x in lines if "burst of singles" in x).split()[-2:] == ["-", "-"]
    nothing = targets({"scale": "default", "parameters": partial["parameters"]})
    assert {r["verdict"] for r in nothing.values()} == {None}


def test_the_bare_scheduler_is_context_without_a_verdict() -> None:
    rows = {c["figure"]: c for c in fleet_targets.context(result())}
    bound = rows["bound pods/s, singles"]
    assert (bound["tessera"]["median"], bound["floor"]["median"]) == (190.0, 200.0)
    assert bound["baseline"]["median"] == 300.0 and "verdict" not in bound
    cpu = rows["CPU ms per pod, the whole machine, gangs"]
    assert cpu["baseline"]["median"] == 25.0  # 1 s of the API server's over 40 pods


def test_comparison_sets_tessera_beside_the_floor_and_the_bare_scheduler() -> None:
    rows = dict(fleet_report.comparison(result()))
    assert rows["singles: bound pods/s"] == ["190", "200", "300"]
    assert rows["singles: pods created/s by the operator"] == ["190", "200", "-"]
    assert rows["gangs: creation to all bound p50 / p99"] == [
        "0.6 / 1.2 s",
        "0.5 / 1 s",
        "0.25 / 0.5 s",
    ]
    # CPU per pod over every process, the operator's own in brackets (none for the bare run)
    assert rows["singles: CPU ms per pod, all (operator)"] == [
        "110.20 (10.20)",
        "110.00 (10.00)",
        "100.00",
    ]
    assert rows["backlog: pods created/s by the operator"] == ["190", "200", "-"]  # no bare one
    assert "backlog: bound pods/s" not in rows  # a backlog is timed to its last pod created
    table = fleet_report.comparison_table(fleet_report.comparison(result()))
    assert "bare (unpinned)" in table.splitlines()[0] and len(table.splitlines()) == 11
    assert fleet_report.orders(result()).splitlines()[1] == "  repeat 2: floor, baseline, tessera"


def test_pace_counts_the_intervals_between_the_first_and_the_last() -> None:
    assert m.pace([3.0, 1.0, 2.0, 1.5, 2.5]) == 2.0  # 4 intervals over 2 s
    assert m.pace([1.0]) is None and m.pace([]) is None and m.pace([2.0, 2.0]) is None


def test_curves_hold_only_the_latencies_measured_in_the_first_repeat() -> None:
    samples = {"createdToBound": [1.0, 2.0], "createdToPodsCreated": [0.5], "createdToReady": []}
    r = {"repeats": [{"tessera": {"singles": {"samples": samples}}, "baseline": {}}]}
    assert fleet_report.curves(r) == {
        "creation to all pods bound (first repeat)": {"Tessera singles": [1.0, 2.0]},
        "Tessera: creation to all pods created, Running, ready": {"pods created, singles": [0.5]},
    }
    assert fleet_report.curves({"repeats": []}) == {}


def test_the_operator_client_is_named_from_its_user_agent() -> None:
    from tessera.k8s import USER_AGENT

    assert m.client_name(USER_AGENT) == m.OPERATOR_CLIENT


def test_cpu_sampler_interpolates_each_process_between_the_samples_around_a_window() -> None:
    cpu = fleet_kube.CpuSampler(dict)
    cpu.samples = [
        (10.0, {"kube-apiserver": (1, 1.0), "operator": (2, 0.5)}),
        (10.5, {"kube-apiserver": (1, 1.4), "operator": (2, 0.6)}),
        (11.0, {"kube-apiserver": (1, 2.0), "operator": (2, 0.9), "bench": (3, 3.0)}),
        (11.5, {"kube-apiserver": (1, 2.5), "operator": (4, 0.1), "bench": (3, 3.5)}),
    ]
    # 10.25 reads 1.2 and 0.55, 10.75 reads 1.7 and 0.75
    assert cpu.between(10.25, 10.75) == {"kube-apiserver": 0.5, "operator": 0.2}
    # bench was not sampled before 11.0; the operator restarted (a new pid) before 11.5
    assert cpu.between(10.5, 11.25) == {"kube-apiserver": 0.85}
    assert cpu.between(11.0, 11.5) == {"kube-apiserver": 0.5, "bench": 0.5}
    assert cpu.between(9.0, 10.5) == {}  # before the first sample
    assert fleet_kube.CpuSampler(dict).between(0.0, 1.0) == {}
    cpu.samples.append((10.4, {"kube-apiserver": (1, 1.2)}))  # appended late, by the bench
    assert cpu.between(10.45, 10.5) == {"kube-apiserver": 0.1, "operator": 0.01}


def test_cpu_sampler_samples_live_processes() -> None:
    import os

    cpu = fleet_kube.CpuSampler(lambda: {"self": os.getpid(), "gone": 2**22 + 1})
    cpu.sample()
    start = fleet_kube.cpu_seconds(os.getpid())
    while fleet_kube.cpu_seconds(os.getpid()) == start:  # spend at least one clock tick
        sum(i * i for i in range(10_000))
    cpu.sample()
    (t0, first), (t1, _) = cpu.samples
    assert set(first) == {"self"}  # a pid that does not exist is left out
    assert first["self"][0] == os.getpid()
    assert cpu.between(t0, t1)["self"] > 0


def test_a_pod_is_pinned_by_a_match_fields_term_on_its_node_name() -> None:
    import fleet_kill

    def pod(*terms: dict[str, Any]) -> dict[str, Any]:
        required = {"nodeSelectorTerms": list(terms)}
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
        return {"spec": {"affinity": affinity}}

    name = {"key": "metadata.name", "operator": "In", "values": ["a100-0"]}
    pool = {"key": "tessera.dev/pool", "operator": "In", "values": ["a100"]}
    assert fleet_kill.pinned(pod({"matchFields": [name], "matchExpressions": [pool]}))
    assert not fleet_kill.pinned(pod({"matchExpressions": [pool]}))
    assert not fleet_kill.pinned({"spec": {}})


def test_results_keep_each_list_of_numbers_on_one_line() -> None:
    result = {"samples": [0.5, 1, -2.25, 1e-05], "names": ["a", "b"], "empty": [], "n": 3}
    text = fleet_bench.dump(result)
    assert json.loads(text) == result
    assert '"samples": [0.5, 1, -2.25, 1e-05]' in text
    assert '"a",' in text and "\n" in text.split('"names": [')[1].split("]")[0]  # not numbers
