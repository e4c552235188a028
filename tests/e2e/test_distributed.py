"""Distributed workloads end to end, against the real control plane and kwok.

What it proves, as a user would see it:
- rendezvous: a gang of more than one replica gets a headless Service it owns, whose
  EndpointSlices (filled by the control plane's endpointslice controller) list one endpoint
  per pod under the pod's hostname; every pod has the documented hostname, subdomain,
  rendezvous port and framework environment (PyTorch; JAX on a TPU pool; the Neuron root on
  a Trainium pool), values as docs/distributed.md gives them;
- gang restarts: a batch gang whose pod fails is restarted whole (every pod new, on the same
  nodes) up to spec.failurePolicy.backoffLimit, then Failed with the documented message;
- scaling: `kubectl scale` grows and shrinks a placed service on its pool (the highest
  replicas go first, a replica with no room waits), and is refused for a batch workload;
- rollouts: a placed service's new template replaces one pod at a time, never more than one
  replica short of Ready.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from operator_harness import (
    NO_FINALIZERS,
    Kubectl,
    Operator,
    ReadyWatch,
    is_ready,
    make_pool,
    namespace,
    pool_manifest,
    pool_nodes,
    pool_object,
    wait_for,
    workload,
)

from tessera import api, runtime

WORKLOAD = "tessera.dev/workload"
REPLICA = "tessera.dev/replica"
POOL = "tessera.dev/pool"
RUNTIME = "tessera.dev/simulated-runtime-ms"  # kwok completes a batch pod after this long
EXIT_CODE = "tessera.dev/simulated-exit-code"  # ... with this exit code
HASH = "tessera.dev/template-hash"

# Pools of the test-only accelerator, made once for the module: name -> (nodes, devices).
POOLS = {"dist": (4, 8), "dist-scale": (2, 4), "dist-aws": (2, 8)}


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pools(operator: Operator, installed: Any) -> Iterator[None]:
    """The module's own small pools; `dist-aws` is an aws (Trainium-like) pool of the
    test-only resource: the fleet's trainium pool admits only the ml namespaces."""
    k = Kubectl(installed, "default")
    for name in ("dist", "dist-scale"):
        make_pool(k, name, *POOLS[name])
    aws = pool_manifest("dist-aws", {"matchLabels": {"example.com/test-pool": "dist-aws"}})
    aws["spec"]["accelerator"].update(vendor="aws", model="T1")
    k.apply(*pool_nodes("dist-aws", *POOLS["dist-aws"]), aws)
    yield
    k("delete", "acp", *POOLS, "--wait=false", check=False)
    try:
        wait_for("the pools gone", lambda: all(pool_object(k, n) is None for n in POOLS), 15)
    except AssertionError:  # the operator did not let them go: not this cleanup's business
        for name in POOLS:
            k("patch", "acp", name, "--type=merge", "-p", NO_FINALIZERS, check=False)
    nodes = [f"{name}-{i}" for name, (count, _) in POOLS.items() for i in range(count)]
    k("delete", "node", *nodes, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def ns(pools: None, installed: Any) -> Iterator[Kubectl]:
    with namespace(installed, "dist") as kubectl:
        yield kubectl
        # Emptied first: the namespace controller then finds nothing left to wait on.
        kubectl("delete", "awl", "--all", "-n", kubectl.ns, "--wait=false")
        kubectl("delete", "pods", "--all", "-n", kubectl.ns, "--wait=false")
        wait_for("the namespace's pods gone", lambda: not kubectl.pods(), timeout=60)


# --- helpers -----------------------------------------------------------------------------------


def pods_of(k: Kubectl, name: str) -> dict[int, dict[str, Any]]:
    """The workload's pods by replica index."""
    return {int(p["metadata"]["labels"][REPLICA]): p for p in k.pods(**{WORKLOAD: name})}


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def running(k: Kubectl, name: str, replicas: int) -> dict[int, dict[str, Any]]:
    """Waits until every replica's pod runs with an IP (kwok gives one), and returns them."""

    def check() -> dict[int, dict[str, Any]] | None:
        pods = pods_of(k, name)
        ok = sorted(pods) == list(range(replicas)) and all(
            p["status"].get("phase") == "Running" and p["status"].get("podIP")
            for p in pods.values()
        )
        return pods if ok else None

    result: dict[int, dict[str, Any]] = wait_for(f"{name}'s {replicas} pods running", check)
    return result


def ready(k: Kubectl, name: str) -> None:
    k("wait", "--for=condition=Ready", f"awl/{name}", "-n", k.ns, "--timeout=60s")


def phase(k: Kubectl, name: str, want: str, timeout: float = 60) -> dict[str, Any]:
    status: dict[str, Any] = wait_for(
        f"{name} {want}", lambda: (s := k.status(name)).get("phase") == want and s, timeout
    )
    return status


def events(k: Kubectl, name: str, reason: str) -> list[str]:
    """The messages of the workload's events of one reason, oldest first."""
    found = [e for e in k.events(name) if e["reason"] == reason]
    found.sort(key=lambda e: e.get("firstTimestamp") or e.get("eventTime") or "")
    return [e["message"] for e in found]


def scale(k: Kubectl, name: str, replicas: int) -> Any:
    return k("scale", f"awl/{name}", f"--replicas={replicas}", "-n", k.ns, check=False)


def address(name: str, ns: str, replica: int) -> str:
    """Replica `replica`'s DNS name, as docs/distributed.md spells it (a name that is a DNS
    label is its own Service name)."""
    return f"{name}-{replica}.{name}.{ns}.svc"


def rendezvous_port(pod: dict[str, Any]) -> int | None:
    ports = pod["spec"]["containers"][0].get("ports") or []
    return next((p["containerPort"] for p in ports if p.get("name") == "rendezvous"), None)


def service(k: Kubectl, name: str) -> dict[str, Any]:
    def get() -> dict[str, Any] | None:
        out = k("get", "svc", name, "-n", k.ns, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    svc: dict[str, Any] = wait_for(f"service {name}", get)
    return svc


def endpoints(k: Kubectl, svc: str, count: int) -> list[dict[str, Any]]:
    """The Service's endpoints, once its EndpointSlices list `count` with an address each."""

    def check() -> list[dict[str, Any]] | None:
        label = f"kubernetes.io/service-name={svc}"
        slices = json.loads(k("get", "endpointslices", "-n", k.ns, "-l", label, "-o", "json")
                            .stdout)["items"]  # fmt: skip
        found = [e for s in slices for e in s.get("endpoints") or [] if e.get("addresses")]
        return found if len(found) == count else None

    result: list[dict[str, Any]] = wait_for(f"{count} endpoints of {svc}", check, timeout=30)
    return result


def spec_hash(k: Kubectl, name: str) -> str:
    """The template hash of the workload's spec as it is now (what its pods should carry)."""
    return runtime.template_hash(api.WorkloadSpec.model_validate(k.awl(name)["spec"]))


# --- rendezvous --------------------------------------------------------------------------------


def test_a_pytorch_gang_gets_a_headless_service_hostnames_and_the_torch_environment(
    ns: Kubectl,
) -> None:
    manifest = workload("train", replicas=4, count=2, pools=["dist"])
    manifest["spec"]["distributed"] = {"framework": "pytorch"}
    ns.apply(manifest)
    pods = running(ns, "train", 4)
    awl = wait_for(
        "status.service", lambda: (w := ns.awl("train")).get("status", {}).get("service") and w
    )
    assert awl["status"]["service"] == "train"

    svc = service(ns, "train")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {WORKLOAD: "train"}
    [port] = svc["spec"]["ports"]
    assert (port["name"], port["port"], port["protocol"]) == ("rendezvous", 29500, "TCP")
    assert port["targetPort"] == 29500
    [owner] = svc["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Workload", "train",
                                                             awl["metadata"]["uid"])  # fmt: skip
    assert owner["controller"] is True

    master = address("train", ns.ns, 0)
    assert master == f"train-0.train.{ns.ns}.svc"
    for replica, pod in pods.items():
        assert pod["metadata"]["labels"][POOL] == "dist"
        assert pod["spec"]["hostname"] == f"train-{replica}"
        assert pod["spec"]["subdomain"] == "train"
        assert rendezvous_port(pod) == 29500
        env = env_of(pod)
        rank = str(replica)
        assert {k: v for k, v in env.items() if not k.startswith("TESSERA_")} == {
            "MASTER_ADDR": master,
            "MASTER_PORT": "29500",
            "WORLD_SIZE": "8",  # 4 pods x 2 devices: processes
            "RANK": rank,
            "NODE_RANK": rank,
            "NNODES": "4",
            "NPROC_PER_NODE": "2",
            "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": "29500",
            "PET_NNODES": "4",
            "PET_NODE_RANK": rank,
            "PET_NPROC_PER_NODE": "2",
        }
        assert env["TESSERA_ACCELERATOR_COUNT"] == "2"

    # One endpoint per pod, under its hostname: what `train-<i>.train.<ns>.svc` resolves to.
    found = endpoints(ns, "train", 4)
    by_pod = {e["targetRef"]["name"]: e for e in found}
    assert sorted(by_pod) == sorted(p["metadata"]["name"] for p in pods.values())
    for pod in pods.values():
        endpoint = by_pod[pod["metadata"]["name"]]
        assert endpoint["hostname"] == pod["spec"]["hostname"]
        assert endpoint["addresses"] == [pod["status"]["podIP"]]


def test_a_jax_gang_on_a_tpu_pool_gets_the_jax_and_tpu_worker_environment(ns: Kubectl) -> None:
    manifest = workload("jx", replicas=2, count=8, pools=["tpu-v5e"])
    manifest["spec"]["distributed"] = {"framework": "jax"}
    ns.apply(manifest)
    pods = running(ns, "jx", 2)
    svc = service(ns, "jx")
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("rendezvous", 1234)]
    for replica, pod in pods.items():
        assert pod["metadata"]["labels"][POOL] == "tpu-v5e"
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"jx-{replica}", "jx")
        assert rendezvous_port(pod) == 1234
        env = env_of(pod)
        assert {k: v for k, v in env.items() if not k.startswith("TESSERA_")} == {
            "JAX_COORDINATOR_ADDRESS": f"{address('jx', ns.ns, 0)}:1234",
            "JAX_NUM_PROCESSES": "2",
            "JAX_PROCESS_ID": str(replica),
            "TPU_WORKER_HOSTNAMES": "jx-0.jx,jx-1.jx",
            "TPU_WORKER_ID": str(replica),
        }
        assert env["TESSERA_ACCELERATOR_VENDOR"] == "google"
    assert len(endpoints(ns, "jx", 2)) == 2


def test_a_gang_on_an_aws_pool_gets_the_neuron_root_whatever_the_framework(
    ns: Kubectl,
) -> None:
    # framework none: no framework variables and no Service port, but the Neuron
    # collectives' root on replica 0 and its port on the container.
    ns.apply(workload("neuron", replicas=2, count=8, pools=["dist-aws"]))
    pods = running(ns, "neuron", 2)
    svc = service(ns, "neuron")
    assert svc["spec"]["clusterIP"] == "None" and not svc["spec"].get("ports")
    for replica, pod in pods.items():
        assert pod["spec"]["hostname"] == f"neuron-{replica}"
        assert rendezvous_port(pod) == 48620
        env = env_of(pod)
        assert {k: v for k, v in env.items() if not k.startswith("TESSERA_")} == {
            "NEURON_RT_ROOT_COMM_ID": f"{address('neuron', ns.ns, 0)}:48620",
        }
        assert env["TESSERA_ACCELERATOR_VENDOR"] == "aws"


# --- gang restarts -----------------------------------------------------------------------------


def test_a_batch_gang_whose_pod_fails_once_restarts_whole_and_then_succeeds(
    ns: Kubectl,
) -> None:
    manifest = workload("flaky", replicas=2, pools=["dist"], annotations={RUNTIME: "5000"})
    manifest["spec"]["failurePolicy"] = {"backoffLimit": 2}
    ns.apply(manifest)
    first = running(ns, "flaky", 2)
    victim = first[1]["metadata"]
    # Only this live pod fails; the gang made again comes from the template, and succeeds.
    ns("annotate", "pod", victim["name"], "-n", ns.ns, f"{EXIT_CODE}=1", "--overwrite")

    message = wait_for("GangRestarting", lambda: events(ns, "flaky", "GangRestarting"))[0]
    expected = (
        f"restarting the gang (1 of 2 restarts): pod {victim['name']} failed: "
        "container main exited with code 1 (Error)"
    )
    assert message == expected
    status = ns.status("flaky")
    assert status["restarts"] == 1
    failure = status["lastFailure"]
    assert (failure["pod"], failure["uid"], failure["replica"]) == (victim["name"],
                                                                    victim["uid"], 1)  # fmt: skip
    assert failure["reason"] == "container main exited with code 1 (Error)" and failure["at"]

    done = phase(ns, "flaky", "Succeeded")
    assert done["restarts"] == 1
    after = pods_of(ns, "flaky")
    assert sorted(after) == [0, 1]
    old_uids = {p["metadata"]["uid"] for p in first.values()}
    for replica, pod in after.items():  # every pod new, where the gang's devices are booked
        assert pod["metadata"]["uid"] not in old_uids
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["spec"]["nodeName"] == first[replica]["spec"]["nodeName"]
    assert len(events(ns, "flaky", "GangRestarting")) == 1


def test_a_batch_gang_that_always_fails_is_failed_after_its_backoff_limit(ns: Kubectl) -> None:
    failing = {RUNTIME: "1000", EXIT_CODE: "1"}
    manifest = workload("doomed", replicas=2, pools=["dist"], annotations=failing)
    manifest["spec"]["failurePolicy"] = {"backoffLimit": 2}
    ns.apply(manifest)
    status = phase(ns, "doomed", "Failed", timeout=90)
    assert status["restarts"] == 2
    match = re.fullmatch(
        r"pod (\S+) failed: container main exited with code 1 \(Error\) "
        r"\(backoffLimit 2 reached after 2 restarts\)",
        status["message"],
    )
    assert match, status["message"]
    assert match[1] in {f"doomed-dist-{r}" for r in (0, 1)}
    assert status["lastFailure"]["pod"] == match[1]
    failed = ns.condition("doomed", "Failed")
    assert failed and failed["status"] == "True" and failed["message"] == status["message"]
    restarts = events(ns, "doomed", "GangRestarting")
    assert [m.split(":")[0] for m in restarts] == [
        "restarting the gang (1 of 2 restarts)",
        "restarting the gang (2 of 2 restarts)",
    ]


# --- scaling -----------------------------------------------------------------------------------


def test_kubectl_scale_grows_and_shrinks_a_service_on_its_pool(ns: Kubectl) -> None:
    # dist-scale has room for 4 replicas of 2 devices.
    ns.apply(workload("web", replicas=2, count=2, restart="Always", pools=["dist-scale"]))
    ready(ns, "web")
    before = pods_of(ns, "web")
    scaled = json.loads(ns("get", "awl", "web", "-n", ns.ns, "--subresource=scale", "-o", "json")
                        .stdout)  # fmt: skip
    assert scaled["spec"]["replicas"] == 2 and scaled["status"]["selector"] == f"{WORKLOAD}=web"

    assert scale(ns, "web", 4).returncode == 0
    pods = wait_for(
        "4 Ready replicas",
        lambda: (
            sorted(p := pods_of(ns, "web")) == [0, 1, 2, 3]
            and all(is_ready(x) for x in p.values())
            and p
        ),
    )
    for pod in pods.values():
        assert pod["metadata"]["labels"][POOL] == "dist-scale"
        assert pod["spec"]["nodeName"].startswith("dist-scale-")
    for replica in (0, 1):  # the replicas there are kept as they were
        assert pods[replica]["metadata"]["uid"] == before[replica]["metadata"]["uid"]
    status = wait_for(
        "4 assignments", lambda: len((s := ns.status("web")).get("assignments") or []) == 4 and s
    )
    assert {a["replica"]: a["node"] for a in status["assignments"]} == {
        r: p["spec"]["nodeName"] for r, p in pods.items()
    }
    assert wait_for("ScaledUp event", lambda: events(ns, "web", "ScaledUp"))
    ready(ns, "web")

    # A fifth has no room: it waits, and says so; the four run on.
    assert scale(ns, "web", 5).returncode == 0
    waiting = wait_for(
        "ScalingUp",
        lambda: (c := ns.condition("web", "Ready")) and c["reason"] == "ScalingUp" and c,
    )
    assert "replica 4" in waiting["message"], waiting
    assert sorted(pods_of(ns, "web")) == [0, 1, 2, 3]

    # Down to 2: the highest replicas go, the rest stay, and the assignments follow.
    assert scale(ns, "web", 2).returncode == 0
    wait_for("replicas 0 and 1 left", lambda: sorted(pods_of(ns, "web")) == [0, 1], timeout=30)
    left = pods_of(ns, "web")
    assert {r: p["metadata"]["uid"] for r, p in left.items()} == {
        r: before[r]["metadata"]["uid"] for r in (0, 1)
    }

    def assigned() -> list[int]:
        return [a["replica"] for a in ns.status("web").get("assignments") or []]

    wait_for("2 assignments", lambda: assigned() == [0, 1])
    final = ns.status("web")
    assert final["pool"] == "dist-scale"
    ready(ns, "web")
    assert ns.status("web")["readyReplicas"] == 2


def test_kubectl_scale_is_refused_for_a_placed_batch_workload(ns: Kubectl) -> None:
    ns.apply(workload("batch", replicas=2, pools=["dist"]))
    running(ns, "batch", 2)
    phase(ns, "batch", "Running")  # placed: its status names the pool
    out = scale(ns, "batch", 3)
    assert out.returncode != 0
    assert "spec.replicas of a batch workload is immutable while it is placed" in out.stderr
    assert ns.awl("batch")["spec"]["replicas"] == 2
    assert sorted(pods_of(ns, "batch")) == [0, 1]


# --- rollouts ----------------------------------------------------------------------------------


def test_a_new_template_rolls_a_service_one_pod_at_a_time(ns: Kubectl) -> None:
    ns.apply(workload("api", replicas=4, restart="Always", pools=["dist"]))
    ready(ns, "api")
    wait_for("every pod Ready", lambda: sum(is_ready(p) for p in pods_of(ns, "api").values()) == 4)
    before = pods_of(ns, "api")
    old_hash = spec_hash(ns, "api")
    assert {p["metadata"]["annotations"][HASH] for p in before.values()} == {old_hash}
    assert wait_for("templateHash", lambda: ns.status("api").get("templateHash")) == old_hash

    with ReadyWatch(ns, "api") as watch:
        ns("patch", "awl", "api", "-n", ns.ns, "--type=json", "-p",
           '[{"op":"replace","path":"/spec/template/spec/containers/0/image",'
           '"value":"registry.example/app:2"}]')  # fmt: skip
        new_hash = spec_hash(ns, "api")
        assert new_hash != old_hash

        def rolled() -> dict[int, dict[str, Any]] | None:
            pods = pods_of(ns, "api")
            done = sorted(pods) == [0, 1, 2, 3] and all(
                is_ready(p)
                and p["metadata"]["annotations"][HASH] == new_hash
                and p["spec"]["containers"][0]["image"] == "registry.example/app:2"
                for p in pods.values()
            )
            return pods if done else None

        after = wait_for("every pod replaced", rolled, timeout=90)
        wait_for("templateHash", lambda: ns.status("api").get("templateHash") == new_hash)
    assert len(watch.counts) > 5
    assert min(watch.counts) >= 3, watch.counts  # never more than one replica down
    for replica, pod in after.items():  # on the same nodes, every pod made anew
        assert pod["metadata"]["uid"] != before[replica]["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == before[replica]["spec"]["nodeName"]
    rolling = events(ns, "api", "RollingOut")
    assert sorted(int(m.split(":")[0].removeprefix("replica ")) for m in rolling) == [0, 1, 2, 3]
    ready(ns, "api")
