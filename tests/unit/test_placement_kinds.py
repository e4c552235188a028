"""The cycle's fast feasibility test (feasibility.feasible) says what static_reasons says:
a pool is feasible exactly when static_reasons finds no reason, whatever the pool and the
workload; the cycle writes the reasons of the pools ruled out only."""

from __future__ import annotations

from builders import NOW, pool, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera import api
from tessera.placement import NodeState, PendingWorkload, PoolState, PoolView, pool_state
from tessera.placement.feasibility import feasible, static_reasons
from tessera.placement.snapshot import Taint

MODELS = ["H100-SXM5-80GB", "A100-SXM4-40GB", "L4", "MI300X", "TPU-v5e", "T4", "no-such-model"]
NAMESPACES = {"team-a": {"tier": "gold"}, "team-b": {"tier": "bronze"}}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def subsets(options: list[str]) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(options), max_size=2, unique=True)


@st.composite
def pools(draw: st.DrawFn) -> PoolState:
    nodes = draw(st.integers(1, 3))
    devices = draw(st.sampled_from([1, 2, 4, 8]))
    spec: dict[str, object] = {"draining": draw(st.booleans())}
    if draw(st.booleans()):
        spec["software"] = {"cuda": draw(st.sampled_from(["11.8", "12.2", "12.4"]))}
    if draw(st.booleans()):
        spec["namespaceSelector"] = {"matchLabels": {"tier": "gold"}}
    return pool(
        draw(st.sampled_from(["p1", "p2", "p3"])),
        nodes,
        devices,
        model=draw(st.sampled_from(MODELS)),
        ready=draw(st.lists(st.booleans(), min_size=nodes, max_size=nodes)),
        **spec,
    )


@st.composite
def workloads(draw: st.DrawFn) -> PendingWorkload:
    needs: dict[str, object] = {
        "precision": draw(st.sampled_from(["bf16", "fp16", "fp8", "fp32"])),
        "profile": draw(st.sampled_from(["compute", "memory"])),
    }
    if draw(st.booleans()):
        needs["minMemoryGiB"] = draw(st.sampled_from([16, 24, 40, 80, 192]))
    if draw(st.booleans()):
        needs["vendors"] = draw(subsets(["nvidia", "amd", "google"]))
    if draw(st.booleans()):
        needs["models"] = draw(subsets(MODELS[:-1]))
    elif draw(st.booleans()):
        needs["excludeModels"] = draw(subsets(MODELS[:-1]))
    if draw(st.booleans()):
        needs["pools"] = draw(subsets(["p1", "p2", "p3"]))
    if draw(st.booleans()):
        needs["features"] = draw(subsets(["nvlink", "fp8", "mig"]))
    if draw(st.booleans()):
        needs["software"] = {
            draw(st.sampled_from(["cuda", "rocm"])): draw(
                st.sampled_from([">=12.1", "<12", "~12.2"])
            )
        }
    return workload(
        namespace=draw(st.sampled_from(sorted(NAMESPACES))),
        count=draw(st.sampled_from([1, 2, 4, 8])),
        replicas=draw(st.integers(1, 6)),
        excluded=draw(st.lists(st.sampled_from(["p1", "p2"]), max_size=1)),
        **needs,
    )


@SETTINGS
@given(pools(), workloads())
def test_feasible_is_exactly_no_static_reason(state: PoolState, w: PendingWorkload) -> None:
    view = PoolView.of(state)
    labels = NAMESPACES[w.namespace]
    assert feasible(w, view, labels) == (not static_reasons(w, view, labels))


def test_feasible_counts_the_tainted_nodes_a_workload_tolerates() -> None:
    taint = Taint("gpu", "reserved", "NoSchedule")
    nodes = [
        NodeState(name="n0", allocatable=2, free=2, ready=False, taints=(taint,)),
        NodeState(name="n1", allocatable=8, free=8, ready=False, taints=(taint,)),
        NodeState(name="n2", allocatable=2, free=2),
    ]
    spec = api.AcceleratorPoolSpec.model_validate(
        {"accelerator": {"vendor": "nvidia", "model": "L4"}, "nodeSelector": {}}
    )
    view = PoolView.of(pool_state("tainted", spec, nodes))
    tolerations = [{"key": "gpu", "operator": "Exists"}]
    for count, replicas in ((2, 1), (4, 1), (2, 3), (8, 1), (2, 7)):
        for tolerate in (False, True):
            w = workload(count=count, replicas=replicas)
            if tolerate:
                template = {"spec": {**w.spec.template["spec"], "tolerations": tolerations}}
                spec_ = w.spec.model_copy(update={"template": template})
                w = w.model_copy(update={"spec": spec_, "created_at": NOW})
            assert feasible(w, view, {}) == (not static_reasons(w, view, {})), (count, tolerate)
