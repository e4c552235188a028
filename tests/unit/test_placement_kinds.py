"""The cycle's fast feasibility test (feasibility.feasible) says what static_reasons says:
a pool is feasible exactly when static_reasons finds no reason, whatever the pool and the
workload; the cycle writes the reasons of the pools ruled out only. Kinds that differ only
in how they score share one test of the pools (kinds.feasibility_key)."""

from __future__ import annotations

from builders import NOW, pool, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera import api
from tessera.placement import NodeState, PendingWorkload, PoolState, PoolView, pool_state
from tessera.placement.feasibility import feasible, static_reasons
from tessera.placement.kinds import feasibility, feasibility_key, signature, static
from tessera.placement.snapshot import Taint
from tessera.placement.state import PoolWork

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


def _work(states: list[PoolState]) -> list[PoolWork]:
    """Working states as plan() makes them (only the views are read here)."""
    return [PoolWork(view=PoolView.of(s), fit=None, releases=[]) for s in states]  # type: ignore[arg-type]


@st.composite
def rescored(draw: st.DrawFn, w: PendingWorkload) -> PendingWorkload:
    """The workload with everything that only scores it drawn again: objective, weights,
    profile, measured throughputs, priority, duration, and its name."""
    weights = draw(
        st.none() | st.fixed_dictionaries({"performance": st.floats(0, 1), "cost": st.floats(0, 1)})
    )
    throughput = draw(st.dictionaries(st.sampled_from(MODELS[:-1]), st.floats(0.5, 4), max_size=3))
    need = w.spec.accelerator.model_copy(
        update={
            "profile": draw(st.sampled_from(list(api.Profile))),
            "throughput": throughput,
        }
    )
    spec = w.spec.model_copy(
        update={
            "objective": draw(st.sampled_from(list(api.Objective))),
            "weights": None if weights is None else api.Weights.model_validate(weights),
            "priority": draw(st.integers(0, 100)),
            "estimated_duration": draw(st.sampled_from([None, "1h", "2d"])),
            "accelerator": need,
        }
    )
    return w.model_copy(update={"spec": spec, "name": "other"})


@SETTINGS
@given(st.lists(pools(), min_size=1, max_size=4, unique_by=lambda p: p.name), st.data())
def test_kinds_that_differ_only_in_scoring_share_the_pools_tests(
    states: list[PoolState], data: st.DataObject
) -> None:
    w = data.draw(workloads())
    other = data.draw(rescored(w))
    labels = NAMESPACES[w.namespace]
    work = _work(states)
    closed = tuple(p.view.name for p in work if not p.view.allows_namespace(w.namespace, labels))
    assert feasibility_key(w, closed) == feasibility_key(other, closed)
    tested = feasibility(w, work, labels)
    assert feasibility(other, work, labels) == tested
    # what the cycle builds from the shared test is what it builds from its own
    shared, own = static(other, work, labels, tested), static(other, work, labels)
    assert (shared.scored, shared.misses, shared.unlocked) == (own.scored, own.misses, own.unlocked)
    assert (shared.ruled_out_count, shared.chosen_away) == (own.ruled_out_count, own.chosen_away)


def test_a_field_that_rules_pools_out_tells_feasibility_keys_apart() -> None:
    """Each field feasible() reads changes the key: a kind must never borrow another's test."""
    base = workload(count=2, replicas=2)
    changed = [
        workload(count=4, replicas=2),
        workload(count=2, replicas=3),
        workload(count=2, replicas=2, minMemoryGiB=80),
        workload(count=2, replicas=2, precision="fp8"),
        workload(count=2, replicas=2, vendors=["amd"]),
        workload(count=2, replicas=2, models=["L4"]),
        workload(count=2, replicas=2, excludeModels=["L4"]),
        workload(count=2, replicas=2, pools=["p1"]),
        workload(count=2, replicas=2, features=["nvlink"]),
        workload(count=2, replicas=2, software={"cuda": ">=12.1"}),
        workload(count=2, replicas=2, excluded=["p1"]),
    ]
    template = {"spec": {**base.spec.template["spec"], "tolerations": [{"operator": "Exists"}]}}
    tolerant = base.spec.model_copy(update={"template": template})
    changed.append(base.model_copy(update={"spec": tolerant}))
    keys = {feasibility_key(w, ()) for w in changed}
    assert len(keys) == len(changed) and feasibility_key(base, ()) not in keys
    assert feasibility_key(base, ("p1",)) != feasibility_key(base, ())
    # and a kind (the per-kind cache) is finer than its feasibility key
    assert signature(base, ()) != signature(changed[0], ())
