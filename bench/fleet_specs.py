"""What the fleet benchmark creates: pools mirroring examples/pools, Workloads pinned to one
pool each, the bare pods of the baseline made from the pods Tessera created, and the pods
of the warm-up. Pure; the warm-up's pods take Tessera's node affinity (tessera.runtime)."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_POOLS = REPO / "examples" / "pools"
API_VERSION = "tessera.dev/v1alpha1"
ZONE_LABEL = "topology.kubernetes.io/zone"
WORKLOAD_LABEL = "tessera.dev/workload"  # set by Tessera on every pod (tessera.api)
REPLICA_LABEL = "tessera.dev/replica"
POOL_LABEL = "tessera.dev/pool"
GROUP_LABEL = "bench.tessera.dev/group"  # the baseline's stand-in for the workload label
# Every Workload, pod and baseline pod carries its clean-up batch: the bench deletes a
# namespace's objects one batch (one collection DELETE) at a time, as one DELETE of 10,000
# Workloads does not finish within the API server's 60 s request timeout.
BATCH_LABEL = "bench.tessera.dev/batch"
BATCH_PODS = 500  # pods per batch (a gang is never split, so a batch may hold a few more)
GANG_SIZES = (2, 4, 8)
IMAGE = "registry.example/bench:1"


def pool_manifest(group: dict[str, Any], examples: Path = EXAMPLE_POOLS) -> dict[str, Any]:
    """The example pool of the group's accelerator, renamed for this group and, where the
    group is split by zone, selecting that zone too. Namespace rules are dropped: every
    benchmark namespace may use every pool."""
    example = yaml.safe_load((examples / f"{group['group']}.yaml").read_text())
    spec = copy.deepcopy(example["spec"])
    spec.pop("namespaceSelector", None)
    if group.get("zone"):
        spec["nodeSelector"].setdefault("matchLabels", {})[ZONE_LABEL] = group["zone"]
    return {
        "apiVersion": API_VERSION,
        "kind": "AcceleratorPool",
        "metadata": {"name": group["name"]},
        "spec": spec,
    }


def workload_manifest(
    name: str, namespace: str, pool: dict[str, Any], replicas: int = 1, batch: int = 0
) -> dict[str, Any]:
    """A Workload of `replicas` pods with one device each, allowed on exactly one pool (its
    vendor, model where the pool names one, and the pool itself), so the feasible set is
    known. restartPolicy Always and no simulated runtime: the pods stay Running. The Workload
    and, through its template, its pods carry the clean-up batch."""
    accelerator = pool["spec"]["accelerator"]
    need: dict[str, Any] = {
        "count": 1,
        "vendors": [accelerator["vendor"]],
        "pools": [pool["metadata"]["name"]],
    }
    if accelerator.get("model"):
        need["models"] = [accelerator["model"]]
    container = {
        "name": "main",
        "image": IMAGE,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    labels = {BATCH_LABEL: str(batch)}
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "objective": "performance",
            "accelerator": need,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"restartPolicy": "Always", "containers": [container]},
            },
        },
    }


def singles(n: int, pools: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """n one-pod Workloads, spread evenly over the pools."""
    return [
        workload_manifest(f"s-{i:05d}", namespace, pools[i % len(pools)], batch=i // BATCH_PODS)
        for i in range(n)
    ]


def gang_sizes(pods: int) -> list[int]:
    """Gangs of 2, 4 and 8 in turn until they hold at least `pods` pods."""
    sizes: list[int] = []
    total = 0
    for size in itertools.cycle(GANG_SIZES):
        if total >= pods:
            break
        sizes.append(size)
        total += size
    return sizes


def gangs(pods: int, pools: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """Gang Workloads of 2, 4 and 8 pods (about `pods` in all), spread evenly over the pools;
    a gang's batch is that of its first pod."""
    out, first = [], 0
    for i, size in enumerate(gang_sizes(pods)):
        pool = pools[i % len(pools)]
        out.append(workload_manifest(f"g-{i:05d}", namespace, pool, size, first // BATCH_PODS))
        first += size
    return out


def batches(bodies: list[dict[str, Any]]) -> list[str]:
    """The clean-up batches the objects carry, in order."""
    return sorted({b["metadata"]["labels"][BATCH_LABEL] for b in bodies}, key=int)


def baseline_pod(pod: dict[str, Any], namespace: str, floor: bool = False) -> dict[str, Any]:
    """The pod Tessera created, as a user would create it without Tessera: same containers,
    requests, tolerations and node affinity to the pool, but no owner, no status, no node,
    no pin to the node Tessera reserved (the scheduler picks among the pool's nodes), and
    no Tessera labels (the operator must not count it). Its workload name becomes
    `bench.tessera.dev/group`, so a gang's pods can still be measured together. For the
    floor (floor_operator.py), the pin to Tessera's node and Tessera's owner reference
    stay: the decision is Tessera's, and the floor operator puts its new Workload's uid in
    the owner."""
    meta, spec = pod["metadata"], pod["spec"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith("tessera.")}
    labels[GROUP_LABEL] = (meta.get("labels") or {}).get(WORKLOAD_LABEL, meta["name"])
    containers = []
    for container in spec["containers"]:
        c = copy.deepcopy(container)
        mounts = [m for m in c.pop("volumeMounts", []) if not _service_account(m["name"])]
        if mounts:
            c["volumeMounts"] = mounts
        containers.append(c)
    out_spec: dict[str, Any] = {"containers": containers}
    for key in ("restartPolicy", "tolerations", "affinity"):
        if key in spec:
            out_spec[key] = copy.deepcopy(spec[key])
    volumes = [v for v in spec.get("volumes") or [] if not _service_account(v["name"])]
    if volumes:
        out_spec["volumes"] = volumes
    node_affinity = (out_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        if not floor:
            term.pop("matchFields", None)
    out_meta = {
        "name": meta["name"],
        "namespace": namespace,
        "labels": labels,
        "annotations": dict(meta.get("annotations") or {}),
    }
    if floor:
        out_meta["ownerReferences"] = copy.deepcopy(meta.get("ownerReferences") or [])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": out_meta, "spec": out_spec}


def warm_up_pods(
    workloads: list[dict[str, Any]],
    pools: list[dict[str, Any]],
    resources: dict[str, str],
    namespace: str,
) -> dict[str, list[dict[str, Any]]]:
    """The pods the floor operator creates for the warm-up's one-pod Workloads, by Workload
    name: Tessera's shape without Tessera (the template's container with one device of the
    pool's resource, `resources` by pool name; the pool's tolerations; Tessera's required
    affinity to the pool's labels, without its pin to a node; owned by the Workload, whose
    uid the floor operator fills in), left to the scheduler to place among the pool's nodes."""
    # Imported here: floor_operator.py imports this module, and its start is measured.
    from tessera import api, runtime

    by_name = {p["metadata"]["name"]: p for p in pools}
    out: dict[str, list[dict[str, Any]]] = {}
    for workload in workloads:
        name = workload["metadata"]["name"]
        pool = by_name[workload["spec"]["accelerator"]["pools"][0]]
        template = copy.deepcopy(workload["spec"]["template"])
        spec = template["spec"]
        resource = resources[pool["metadata"]["name"]]
        needs = spec["containers"][0].setdefault("resources", {})
        needs.setdefault("requests", {})[resource] = "1"
        needs.setdefault("limits", {})[resource] = "1"
        selector = api.LabelSelector.model_validate(pool["spec"]["nodeSelector"])
        spec["affinity"] = {"nodeAffinity": runtime.node_affinity(selector, None)}
        spec["tolerations"] = copy.deepcopy(pool["spec"].get("tolerations") or [])
        owner = {
            "apiVersion": API_VERSION,
            "kind": "Workload",
            "name": name,
            "uid": "",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        meta = {
            "name": f"{name}-0",
            "namespace": namespace,
            "labels": {**(template.get("metadata") or {}).get("labels", {}), GROUP_LABEL: name},
            "ownerReferences": [owner],
        }
        out[name] = [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}]
    return out


def _service_account(volume: str) -> bool:
    """The token volume admission adds; it adds it again to the baseline pod."""
    return volume.startswith("kube-api-access-")
