"""How replicas find each other (tessera.rendezvous): Service and host names that stay valid
DNS labels, the framework and vendor environment of each replica, the declared port, the
headless Service, and what build_pod puts in the pod."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera import api, rendezvous, runtime

pytestmark = pytest.mark.unit

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(api.DNS_LABEL_PATTERN)

H100 = api.ResolvedAccelerator(
    vendor=api.Vendor.NVIDIA, model="H100-SXM5-80GB", source="spec",
    resource_name="nvidia.com/gpu", memory_gib=80.0,
)  # fmt: skip
TPU = api.ResolvedAccelerator(
    vendor=api.Vendor.GOOGLE, model="TPU-v5e", source="spec",
    resource_name="google.com/tpu", memory_gib=16.0,
)  # fmt: skip
TRAINIUM = api.ResolvedAccelerator(
    vendor=api.Vendor.AWS, model="Trainium", source="spec",
    resource_name="aws.amazon.com/neuron", memory_gib=32.0,
)  # fmt: skip


def _spec(
    replicas: int = 1,
    count: int = 1,
    framework: str = "none",
    port: int | None = None,
    **extra: Any,
) -> api.WorkloadSpec:
    distributed: dict[str, Any] = {"framework": framework}
    if port is not None:
        distributed["port"] = port
    return api.WorkloadSpec.model_validate(
        {
            "replicas": replicas,
            "accelerator": {"count": count},
            "distributed": distributed,
            "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}},
            **extra,
        }
    )


def _env(
    spec: api.WorkloadSpec, accelerator: api.ResolvedAccelerator, replica: int, name: str = "train"
) -> dict[str, str]:
    pairs = rendezvous.environment(spec, name, "ml", accelerator, replica)
    names = [e["name"] for e in pairs]
    assert len(names) == len(set(names)), names
    return {e["name"]: e["value"] for e in pairs}


# --- names --------------------------------------------------------------------------------


def test_a_valid_dns_1035_name_is_the_service_name() -> None:
    assert rendezvous.service_name("train") == "train"
    assert rendezvous.service_name("llama-70b-sft") == "llama-70b-sft"
    assert rendezvous.hostname("train", 3) == "train-3"
    assert rendezvous.address("train", "ml", 3) == "train-3.train.ml.svc"


def test_a_name_that_is_no_dns_1035_label_is_rewritten_with_a_hash() -> None:
    dotted, hyphened, digit = (rendezvous.service_name(n) for n in ("a.b", "a-b", "7b-sft"))
    assert hyphened == "a-b"
    assert dotted.startswith("a-b-") and dotted != hyphened  # never the other's Service
    assert digit.startswith("w-7b-sft-") and DNS_1035.match(digit)
    assert rendezvous.service_name("a.b") == dotted  # deterministic
    assert rendezvous.hostname("a.b", 0) == "a-b-0"


def test_long_names_are_cut_with_a_hash_and_keep_replicas_apart() -> None:
    name = "x" * 61 + ".y"  # 63 characters, a valid subdomain
    service = rendezvous.service_name(name)
    assert len(service) <= 63 and DNS_1035.match(service)
    hosts = {rendezvous.hostname(name, i) for i in (0, 1, 10, 1023)}
    assert len(hosts) == 4
    assert all(len(h) <= 63 and DNS_1123_LABEL.match(h) for h in hosts)
    assert rendezvous.hostname(name, 1023).endswith("-1023")


# A DNS-1123 subdomain of at most 63 characters, as Workload names are.
_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
NAMES = st.lists(_LABEL, min_size=1, max_size=4).map(".".join).filter(lambda n: len(n) <= 63)


@given(name=NAMES, replicas=st.integers(min_value=1, max_value=1024))
def test_names_are_valid_bounded_and_distinct_per_replica(name: str, replicas: int) -> None:
    service = rendezvous.service_name(name)
    assert DNS_1035.match(service) and len(service) <= 63
    if DNS_1035.match(name):
        assert service == name
    last = replicas - 1
    hosts = [rendezvous.hostname(name, i) for i in {0, last // 2, last}]
    assert all(DNS_1123_LABEL.match(h) and len(h) <= 63 for h in hosts)
    assert len(set(hosts)) == len({0, last // 2, last})


@given(first=NAMES, second=NAMES)
def test_distinct_names_get_distinct_services(first: str, second: str) -> None:
    """Only a name written as another's rewritten form (`a-b-<its hash>`) could collide."""
    if first != second:
        assert rendezvous.service_name(first) != rendezvous.service_name(second)


# --- environment --------------------------------------------------------------------------


def test_pytorch_on_gpus_gets_torchrun_and_env_init() -> None:
    spec = _spec(replicas=4, count=8, framework="pytorch")
    env = _env(spec, H100, 2)
    coordinator = "train-0.train.ml.svc"
    assert env == {
        "MASTER_ADDR": coordinator,
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "32",  # processes: replicas x devices per pod, as Kubeflow sets it
        "RANK": "2",  # the pod's index; torchrun gives each worker its own
        "NODE_RANK": "2",
        "NNODES": "4",
        "NPROC_PER_NODE": "8",
        "PET_MASTER_ADDR": coordinator,
        "PET_MASTER_PORT": "29500",
        "PET_NNODES": "4",
        "PET_NODE_RANK": "2",
        "PET_NPROC_PER_NODE": "8",
    }
    assert _env(spec, H100, 0)["RANK"] == "0"
    assert _env(spec, H100, 3)["MASTER_ADDR"] == coordinator  # replica 0 for everyone


def test_a_port_given_replaces_the_framework_default() -> None:
    env = _env(_spec(replicas=2, framework="pytorch", port=23456), H100, 1)
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
    env = _env(_spec(replicas=2, framework="jax", port=23456), H100, 1)
    assert env["JAX_COORDINATOR_ADDRESS"] == "train-0.train.ml.svc:23456"


def test_jax_on_a_tpu_pool_adds_the_tpu_worker_list() -> None:
    spec = _spec(replicas=4, count=4, framework="jax")
    env = _env(spec, TPU, 1)
    assert env == {
        "JAX_COORDINATOR_ADDRESS": "train-0.train.ml.svc:1234",
        "JAX_NUM_PROCESSES": "4",
        "JAX_PROCESS_ID": "1",
        "TPU_WORKER_HOSTNAMES": "train-0.train,train-1.train,train-2.train,train-3.train",
        "TPU_WORKER_ID": "1",
    }


def test_the_framework_part_is_the_same_on_every_vendor() -> None:
    spec = _spec(replicas=3, count=2, framework="pytorch")
    on_gpu, on_tpu, on_trainium = (_env(spec, a, 1) for a in (H100, TPU, TRAINIUM))
    assert on_gpu.items() <= on_tpu.items()
    assert on_gpu.items() <= on_trainium.items()
    assert set(on_tpu) - set(on_gpu) == {"TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID"}
    assert set(on_trainium) - set(on_gpu) == {"NEURON_RT_ROOT_COMM_ID"}


def test_a_trainium_pool_adds_the_neuron_root() -> None:
    env = _env(_spec(replicas=2, count=16, framework="pytorch"), TRAINIUM, 1)
    assert env["NEURON_RT_ROOT_COMM_ID"] == "train-0.train.ml.svc:48620"
    assert env["MASTER_ADDR"] == "train-0.train.ml.svc"


def test_framework_none_gets_only_the_vendor_part() -> None:
    assert _env(_spec(replicas=1), H100, 0) == {}
    assert _env(_spec(replicas=1), TPU, 0) == {}  # a single host needs no worker list
    assert _env(_spec(replicas=2), H100, 1) == {}
    assert _env(_spec(replicas=2), TPU, 1) == {
        "TPU_WORKER_HOSTNAMES": "train-0.train,train-1.train",
        "TPU_WORKER_ID": "1",
    }
    assert _env(_spec(replicas=2), TRAINIUM, 0) == {
        "NEURON_RT_ROOT_COMM_ID": "train-0.train.ml.svc:48620"
    }


def test_a_lone_replica_with_a_framework_is_its_own_coordinator() -> None:
    env = _env(_spec(replicas=1, count=8, framework="pytorch"), H100, 0)
    assert (env["MASTER_ADDR"], env["WORLD_SIZE"], env["NNODES"]) == ("localhost", "8", "1")
    env = _env(_spec(replicas=1, framework="jax"), TPU, 0)
    assert env == {
        "JAX_COORDINATOR_ADDRESS": "localhost:1234",
        "JAX_NUM_PROCESSES": "1",
        "JAX_PROCESS_ID": "0",
    }
    assert not rendezvous.needs_service(_spec(replicas=1, framework="jax"))
    assert rendezvous.needs_service(_spec(replicas=2))


def test_the_declared_port() -> None:
    assert rendezvous.port(_spec(replicas=4, framework="pytorch"), api.Vendor.NVIDIA) == 29500
    assert rendezvous.port(_spec(replicas=4, framework="jax"), api.Vendor.GOOGLE) == 1234
    assert rendezvous.port(_spec(framework="jax", port=9999), api.Vendor.NVIDIA) == 9999
    assert rendezvous.port(_spec(replicas=4), api.Vendor.NVIDIA) is None
    assert rendezvous.port(_spec(replicas=4), api.Vendor.GOOGLE) == 8471
    assert rendezvous.port(_spec(replicas=4), api.Vendor.AWS) == 48620
    assert rendezvous.port(_spec(replicas=1), api.Vendor.AWS) is None
    assert rendezvous.port(_spec(replicas=4, port=7777), api.Vendor.AWS) == 7777


# --- the Service --------------------------------------------------------------------------


def _workload(name: str = "train", **spec: Any) -> api.Workload:
    return api.Workload(metadata={"name": name, "namespace": "ml"}, spec=_spec(**spec))


def test_the_headless_service() -> None:
    service = rendezvous.service_manifest(_workload(replicas=4, framework="pytorch"), "uid-9")
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "labels": {api.WORKLOAD_LABEL: "train"},
            "ownerReferences": [
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "Workload",
                    "name": "train",
                    "uid": "uid-9",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {api.WORKLOAD_LABEL: "train"},
            "ports": [
                {"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}
            ],
        },
    }


def test_a_service_without_a_framework_has_no_port_and_a_valid_name() -> None:
    service = rendezvous.service_manifest(_workload("7b.sft", replicas=2), "uid-1")
    assert "ports" not in service["spec"]  # the vendor's port is the container's only
    assert service["metadata"]["name"] == rendezvous.service_name("7b.sft")
    assert service["spec"]["selector"] == {api.WORKLOAD_LABEL: "7b.sft"}


# --- build_pod ----------------------------------------------------------------------------

POOL = api.AcceleratorPoolSpec.model_validate(
    {"accelerator": {"vendor": "google", "model": "TPU-v5e"},
     "nodeSelector": {"matchLabels": {"pool": "tpu"}}}
)  # fmt: skip


def _pod(workload: api.Workload, replica: int, accelerator: api.ResolvedAccelerator = TPU) -> Any:
    return runtime.build_pod(workload, "uid-1", "tpu-v5e", POOL, accelerator, replica, None)


def test_build_pod_sets_hostname_subdomain_env_and_port() -> None:
    template = {
        "spec": {
            "hostname": "mine",
            "subdomain": "mine",
            "containers": [
                {"name": "main", "image": "jax:tpu",
                 "env": [{"name": "JAX_PROCESS_ID", "value": "9"}, {"name": "KEEP", "value": "1"}]},
                {"name": "sidecar", "image": "log:1"},
            ],
        }
    }  # fmt: skip
    workload = api.Workload(
        metadata={"name": "train", "namespace": "ml"},
        spec=api.WorkloadSpec.model_validate(
            {"replicas": 2, "accelerator": {"count": 4}, "distributed": {"framework": "jax"},
             "template": template,
             "variants": {"google": {"env": [{"name": "JAX_NUM_PROCESSES", "value": "7"}]}}}
        ),
    )  # fmt: skip
    pod = _pod(workload, 1)
    spec = pod["spec"]
    assert (spec["hostname"], spec["subdomain"]) == ("train-1", "train")  # Tessera's win
    assert pod["metadata"]["name"] == "train-tpu-v5e-1"  # pod names are unchanged
    main, sidecar = spec["containers"]
    for container in (main, sidecar):
        names = [e["name"] for e in container["env"]]
        assert len(names) == len(set(names))
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["JAX_PROCESS_ID"] == "1" and env["JAX_NUM_PROCESSES"] == "2"
        assert env["TPU_WORKER_ID"] == "1" and env["TESSERA_REPLICA"] == "1"
        assert names.index("TESSERA_REPLICA") < names.index("JAX_PROCESS_ID")
    assert {e["name"]: e["value"] for e in main["env"]}["KEEP"] == "1"
    assert main["ports"] == [{"name": "rendezvous", "containerPort": 1234, "protocol": "TCP"}]
    assert "ports" not in sidecar
    assert workload.spec.template == template  # built on a copy


def test_build_pod_keeps_a_port_the_template_declares() -> None:
    template = {"spec": {"containers": [
        {"name": "main", "image": "t:1", "ports": [{"name": "c10d", "containerPort": 29500}]}
    ]}}  # fmt: skip
    workload = api.Workload(
        metadata={"name": "train", "namespace": "ml"},
        spec=api.WorkloadSpec.model_validate(
            {"replicas": 2, "distributed": {"framework": "pytorch"}, "template": template}
        ),
    )
    (main,) = _pod(workload, 0, H100)["spec"]["containers"]
    assert main["ports"] == [{"name": "c10d", "containerPort": 29500}]


def test_a_lone_replica_without_a_framework_gets_names_but_no_env_or_port() -> None:
    workload = _workload("solo", replicas=1)
    pod = _pod(workload, 0)
    (main,) = pod["spec"]["containers"]
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("solo-0", "solo")
    assert "ports" not in main
    assert all(e["name"].startswith("TESSERA_") for e in main["env"])
