"""The pod a placement becomes (tessera.runtime.build_pod): devices, descriptor, variant,
tolerations, affinity, names and ownership, and a template left as it was."""

from __future__ import annotations

import copy

import pytest

from tessera import api, runtime

pytestmark = pytest.mark.unit

TEMPLATE = {
    "metadata": {"labels": {"app": "train"}, "annotations": {"team": "ml"}},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "train:cuda",
                "env": [{"name": "TESSERA_POOL", "value": "mine"}, {"name": "KEEP", "value": "1"}],
                "resources": {"requests": {"cpu": "2"}},
            },
            {"name": "sidecar", "image": "log:1"},
        ],
        "tolerations": [{"key": "team", "operator": "Exists"}],
    },
}


def _workload() -> api.Workload:
    spec = api.WorkloadSpec.model_validate(
        {
            "replicas": 2,
            "accelerator": {"count": 4},
            "template": copy.deepcopy(TEMPLATE),
            "variants": {"amd": {"image": "train:rocm", "env": [{"name": "HIP", "value": "1"}]}},
        }
    )
    meta = {"name": "w", "namespace": "ns", "generation": 3}
    return api.Workload(metadata=meta, spec=spec)


def _pool() -> api.AcceleratorPoolSpec:
    return api.AcceleratorPoolSpec.model_validate(
        {
            "accelerator": {"vendor": "amd", "model": "MI300X"},
            "nodeSelector": {"matchLabels": {"amd.com/gpu.product-name": "MI300X"}},
            "tolerations": [
                {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "team", "operator": "Exists"},
            ],
        }
    )


ACCELERATOR = api.ResolvedAccelerator(
    vendor=api.Vendor.AMD, model="MI300X", source="spec", resource_name="amd.com/gpu",
    memory_gib=192.0,
)  # fmt: skip


def test_the_pod_carries_the_placement() -> None:
    workload = _workload()
    pod = runtime.build_pod(workload, "uid-1", "mi300x", _pool(), ACCELERATOR, 1, "node-7")
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "w-mi300x-1"
    assert meta["namespace"] == "ns"
    assert meta["labels"] == {
        "app": "train",
        api.WORKLOAD_LABEL: "w",
        api.POOL_LABEL: "mi300x",
        api.REPLICA_LABEL: "1",
    }
    assert meta["annotations"] == {
        "team": "ml",
        api.GENERATION_ANNOTATION: "3",
        api.TEMPLATE_HASH_ANNOTATION: runtime.template_hash(workload.spec),
    }
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Workload", "w", "uid-1", True,
    )  # fmt: skip
    main, sidecar = spec["containers"]
    assert main["image"] == "train:rocm"  # the amd variant
    assert main["resources"] == {
        "requests": {"cpu": "2", "amd.com/gpu": "4"},
        "limits": {"amd.com/gpu": "4"},
    }
    assert "resources" not in sidecar  # the devices go to the first container only
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["KEEP"] == "1" and env["HIP"] == "1"
    assert env["TESSERA_POOL"] == "mi300x"  # the descriptor replaces the template's own
    assert [e["name"] for e in main["env"]].count("TESSERA_POOL") == 1
    assert env["TESSERA_ACCELERATOR_COUNT"] == "4"
    assert (env["TESSERA_REPLICA"], env["TESSERA_REPLICAS"]) == ("1", "2")
    assert env["TESSERA_ACCELERATOR_MEMORY_GIB"] == "192"
    assert spec["tolerations"] == [  # the template's, then the pool's not already there
        {"key": "team", "operator": "Exists"},
        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "amd.com/gpu.product-name", "operator": "In", "values": ["MI300X"]}
    ]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["node-7"]}]
    assert spec["restartPolicy"] == "Always"
    # Found by its peers at w-1.w.ns.svc; no framework and an AMD pool: no rendezvous env.
    assert (spec["hostname"], spec["subdomain"]) == ("w-1", "w")
    assert not any(n in env for n in ("MASTER_ADDR", "JAX_COORDINATOR_ADDRESS", "TPU_WORKER_ID"))
    assert "ports" not in main


def test_the_template_is_left_as_it_was() -> None:
    """Each pod is built on a copy: one replica's env, devices or image never leak into the
    Workload's template, nor into the next replica's pod."""
    workload = _workload()
    first = runtime.build_pod(workload, "uid-1", "mi300x", _pool(), ACCELERATOR, 0, "node-1")
    second = runtime.build_pod(workload, "uid-1", "mi300x", _pool(), ACCELERATOR, 1, None)
    assert workload.spec.template == TEMPLATE
    first["spec"]["containers"][0]["env"].append({"name": "LATER", "value": "x"})
    assert "LATER" not in str(second) and "LATER" not in str(workload.spec.template)
    assert "matchFields" not in str(second["spec"]["affinity"])  # no node known: the pool's
