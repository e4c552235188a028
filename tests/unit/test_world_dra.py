"""DRA pools without a cluster: a node's devices are its driver's ResourceSlices and the ones
in use are those claims hold (tessera.world.dra), the pool resolves its model from the
devices' attributes, and its pods claim their devices from a template Tessera owns
(tessera.runtime)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

import fleet  # hack/fleet.py (hack/ is on the path: tests/conftest.py)
from tessera import api, runtime
from tessera.dra import claim_facts, slice_facts
from tessera.world.caches import WorldCache
from tessera.world.facts import node_facts, object_facts
from tessera.world.snapshot import World

GROUP = next(g for g in fleet.load_groups() if g["name"] == "h200-dra")


def pool_facts(product: str = "NVIDIA-H200", **accelerator: Any) -> Any:
    body = {
        "metadata": {"name": "h200-dra", "uid": "p", "resourceVersion": "1", "generation": 1},
        "spec": {
            "accelerator": {
                "vendor": "nvidia",
                "dra": {"driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com"},
                **accelerator,
            },
            "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": product}},
        },
    }
    return object_facts(body)


def claim(pool: str, *devices: str) -> dict[str, Any]:
    results = [
        {"request": "tessera-devices", "driver": "gpu.nvidia.com", "pool": pool, "device": d}
        for d in devices
    ]
    return {
        "metadata": {"name": "c", "namespace": "ml"},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def world(
    claims: Sequence[dict[str, Any]] = (),
    cache: WorldCache | None = None,
    group: dict[str, Any] = GROUP,
    pool: Any = None,
) -> World:
    nodes = [node_facts(n) for n in fleet.node_manifests([group])]
    slices = [f for f in map(slice_facts, fleet.resource_slices([group])) if f is not None]
    held = [c for c in map(claim_facts, claims) if c is not None]
    return World(
        nodes={n.name: n for n in nodes},
        pods=[],
        pools={"h200-dra": pool or pool_facts()},
        workloads={},
        namespaces={},
        slices={f"s{i}": s for i, s in enumerate(slices)},
        claims={("ml", f"c{i}"): c for i, c in enumerate(held)},
        cache=cache or WorldCache(),
    )


def test_a_dra_pool_counts_slices_as_devices_and_claims_as_used() -> None:
    w = world([claim("h200-dra-1", "gpu-0", "gpu-1", "gpu-2")])
    state = w.pool_state("h200-dra")
    assert state.accelerator.model == "H200-SXM-141GB"  # from the devices' productName
    assert state.accelerator.resource_name == "gpu.nvidia.com/devices"
    assert state.software == {"cuda": "12.8"}  # the devices' cudaDriverVersion
    assert {n.name: (n.allocatable, n.free) for n in state.nodes} == {
        "h200-dra-0": (8, 8),
        "h200-dra-1": (8, 5),
    }


def test_a_model_the_catalog_lacks_takes_its_memory_from_the_slice() -> None:
    """A new GPU whose node labels say only its product: the devices' memory capacity is
    the pool's memory per device, so the pool needs no more than its FLOPS from the admin."""
    product = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    group = copy.deepcopy(GROUP)
    group["labels"] = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "RTX-PRO"}
    group["dra"]["attributes"]["productName"] = {"string": product}
    group["dra"]["capacity"]["memory"] = {"value": "97887Mi"}
    bare = world(group=group, pool=pool_facts("RTX-PRO")).pool_state("h200-dra")
    assert bare.accelerator.memory_gib == 95.6
    (problem,) = bare.problems
    assert problem.endswith("set spec.accelerator.model, or peakTFLOPS"), problem
    given = world(group=group, pool=pool_facts("RTX-PRO", peakTFLOPS={"bf16": 500}))
    state = given.pool_state("h200-dra")
    assert state.accelerator.memory_gib == 95.6 and not state.problems
    assert {n.allocatable for n in state.nodes} == {8}


def test_a_slice_without_a_node_and_an_unallocated_claim_hold_nothing() -> None:
    network = {"spec": {"driver": "gpu.nvidia.com", "allNodes": True, "devices": [{}]}}
    assert slice_facts(network) is None
    assert claim_facts({"metadata": {"name": "c"}, "status": {}}) is None


def test_an_unchanged_dra_node_keeps_its_facts_object_across_worlds() -> None:
    """The caches compare nodes by identity: a DRA node folded anew each World would make
    every World recompute membership for the whole fleet."""
    nodes = {n.name: n for n in (node_facts(b) for b in fleet.node_manifests([GROUP]))}
    slices = {}
    for i, body in enumerate(fleet.resource_slices([GROUP])):
        facts = slice_facts(body)
        assert facts is not None
        slices[f"s{i}"] = facts
    cache = WorldCache()

    def again() -> World:
        return World(
            nodes=dict(nodes), pods=[], pools={}, workloads={}, namespaces={},
            slices=slices, cache=cache,
        )  # fmt: skip

    first, second = again(), again()
    assert first.nodes["h200-dra-0"] is second.nodes["h200-dra-0"]
    assert second.nodes["h200-dra-0"].allocatable["gpu.nvidia.com/devices"] == 8


def test_a_dra_pods_claim_comes_from_a_template_the_workload_owns() -> None:
    spec = api.WorkloadSpec.model_validate(
        {
            "accelerator": {"count": 4, "minMemoryGiB": 100},
            "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}},
        }
    )
    work = api.Workload(metadata={"name": "train", "namespace": "ml"}, spec=spec)
    pool_spec = api.AcceleratorPoolSpec.model_validate(pool_facts().spec)
    w = world()
    attributes = w.device_attributes("h200-dra")
    template = runtime.claim_template(work, "uid-1", "h200-dra", pool_spec, attributes)
    name = template["metadata"]["name"]
    assert name.startswith("train-h200-dra-") and len(name) == len("train-h200-dra-") + 6
    assert template["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert (exactly["deviceClassName"], exactly["count"]) == ("gpu.nvidia.com", 4)
    assert exactly["selectors"][0]["cel"]["expression"] == (
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200" && '
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) >= 0'
    )
    accelerator = w.accelerator("h200-dra").to_api()
    pod = runtime.build_pod(
        work, "uid-1", "h200-dra", pool_spec, accelerator, 0, "h200-dra-0", claims_from=name
    )
    assert pod["spec"]["resourceClaims"] == [
        {"name": "tessera-devices", "resourceClaimTemplateName": name}
    ]
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources == {"claims": [{"name": "tessera-devices"}]}  # no device-plugin request
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["h200-dra-0"]


def test_other_needs_on_the_same_pool_get_a_template_of_their_own() -> None:
    """A template's spec is immutable: a workload placed on the pool again after an edit
    (more memory) must not reuse the old template's selector, nor a pod go without one."""
    pool_spec = api.AcceleratorPoolSpec.model_validate(pool_facts().spec)
    attributes = world().device_attributes("h200-dra")

    def template(memory: int, count: int = 4) -> dict[str, Any]:
        spec = api.WorkloadSpec.model_validate(
            {
                "accelerator": {"count": count, "minMemoryGiB": memory},
                "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}},
            }
        )
        work = api.Workload(metadata={"name": "train", "namespace": "ml"}, spec=spec)
        return runtime.claim_template(work, "uid-1", "h200-dra", pool_spec, attributes)

    names = {template(100)["metadata"]["name"], template(120)["metadata"]["name"]}
    names.add(template(100, count=2)["metadata"]["name"])
    assert len(names) == 3 and template(100) == template(100)
    work = api.Workload(
        metadata={"name": "train", "namespace": "ml"},
        spec=api.WorkloadSpec.model_validate(
            {"accelerator": {"count": 1}, "template": {"spec": {"containers": [{"name": "m"}]}}}
        ),
    )
    accelerator = world().accelerator("h200-dra").to_api()
    with pytest.raises(ValueError, match="DRA pool"):
        runtime.build_pod(work, "uid-1", "h200-dra", pool_spec, accelerator, 0, "h200-dra-0")
