"""Rendezvous: how the replicas of a Workload find each other, wherever they landed.

Every Workload of more than one replica gets a headless Service it owns; every pod gets a
stable `hostname` and the Service's name as its `subdomain`, so replica i resolves as
`<hostname>.<service>.<namespace>.svc` on whatever pool, node or pod name it runs. On top,
`spec.distributed.framework` adds the environment that framework's launcher reads (PyTorch's
torchrun and `init_method="env://"`, JAX's `jax.distributed.initialize`), and the pool's vendor
adds what its runtime needs between hosts (a TPU slice's worker list, the Neuron collectives'
root). What the framework learns is the same on every vendor's pool; only the vendor's part
differs, and it comes from the pool, not from the user. The table, with the source of each
name, is in docs/distributed.md.

Pure: imports tessera.api and the standard library only.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Any

from tessera import api

MAX_LABEL = 63

# The name of the declared port, on the first container and on the Service.
PORT_NAME = "rendezvous"

# Each framework's own default, so a launcher that is given no port agrees with the pods:
# torchrun's --master_port defaults to 29500; JAX has no default, its documentation uses 1234.
FRAMEWORK_PORTS: dict[api.Framework, int] = {
    api.Framework.PYTORCH: 29500,
    api.Framework.JAX: 1234,
}

# Ports the vendor's runtime listens on between the hosts of a multi-host gang, whatever the
# framework: libtpu on 8471 (GKE's multi-host TPU examples declare it), the Neuron collectives'
# root on 48620 (the port AWS's Neuron examples reserve and use; NEURON_RT_ROOT_COMM_ID names
# it, so it is fixed here rather than left to a free port that another process may take).
TPU_RUNTIME_PORT = 8471
NEURON_ROOT_COMM_PORT = 48620
VENDOR_PORTS: dict[api.Vendor, int] = {
    api.Vendor.GOOGLE: TPU_RUNTIME_PORT,
    api.Vendor.AWS: NEURON_ROOT_COMM_PORT,
}

# A lone replica is its own coordinator: it needs no Service, and every framework's
# single-host default is the loopback address.
LOCAL = "localhost"

_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _label_stem(name: str) -> str:
    """The name as DNS label characters: lower case, anything else (a subdomain's dots) a
    hyphen, no leading or trailing hyphen; `w` if nothing is left."""
    return _NOT_IN_LABEL.sub("-", name.lower()).strip("-") or "w"


def _fit(stem: str, suffix: str) -> str:
    """`stem` cut so that `stem + suffix` is a label of at most 63 characters."""
    return stem[: MAX_LABEL - len(suffix)].rstrip("-") + suffix


def needs_service(spec: api.WorkloadSpec) -> bool:
    """Whether the workload gets a headless Service: only replicas that have peers need to
    resolve them (a lone replica's framework environment points at itself)."""
    return spec.replicas > 1


def service_name(workload: str) -> str:
    """The headless Service's name, which is also every pod's `subdomain`.

    A Service name must be a DNS-1035 label (a letter first, [a-z0-9-], at most 63), a Workload
    name is a DNS-1123 subdomain (dots allowed, a digit may come first). A name that already is
    a DNS-1035 label is kept, so the common case reads as the user wrote it; any other is made
    one (dots become hyphens, `w-` goes before a leading digit) and gets a short hash of the
    original, so two Workloads whose names differ only in what was replaced (`a.b`, `a-b`) never
    claim the same Service. Deterministic: every operator replica computes the same name.
    """
    if len(workload) <= MAX_LABEL and _DNS_1035_LABEL.match(workload):
        return workload
    stem = _label_stem(workload)
    if not stem[0].isalpha():
        stem = f"w-{stem}"
    return _fit(stem, f"-{_digest(workload)}")


def hostname(workload: str, replica: int) -> str:
    """The pod's `hostname`: `<name>-<replica>`, a DNS-1123 label of at most 63.

    It depends on the replica index only, not on the pool (pod names do), so replica i keeps
    its DNS name when it is recreated or moved to another pool. Dots become hyphens; a name too
    long is cut and a hash of the whole name added before the index, so distinct replicas keep
    distinct hostnames. Peers share one Service, so hostnames need only be unique within it.
    """
    stem = _label_stem(workload)
    name = f"{stem}-{replica}"
    if len(name) <= MAX_LABEL:
        return name
    return _fit(stem, f"-{_digest(workload)}-{replica}")


def address(workload: str, namespace: str, replica: int) -> str:
    """Replica `replica`'s DNS name, `<hostname>.<service>.<namespace>.svc`: the record the
    headless Service publishes for a pod whose subdomain names it. It resolves from any
    namespace (cluster DNS appends the cluster domain) once the pod has an IP."""
    return f"{hostname(workload, replica)}.{service_name(workload)}.{namespace}.svc"


@lru_cache(maxsize=1024)
def _worker_hostnames(workload: str, replicas: int) -> str:
    """Every replica as `<hostname>.<service>`, comma-separated, in replica order (index i is
    TPU_WORKER_ID i). The short form, which the pods' DNS search path completes, keeps the list
    short: one environment string may not exceed 128 KiB at exec. Cached: every pod of the gang
    carries the same list, and building it per pod is quadratic in the gang."""
    service = service_name(workload)
    return ",".join(f"{hostname(workload, i)}.{service}" for i in range(replicas))


def _framework_port(spec: api.WorkloadSpec) -> int | None:
    """The port the user asked for, else the framework's default (none for framework none)."""
    if spec.distributed.port is not None:
        return spec.distributed.port
    return FRAMEWORK_PORTS.get(spec.distributed.framework)


def port(spec: api.WorkloadSpec, vendor: api.Vendor) -> int | None:
    """The port to declare on the first container: `spec.distributed.port`, else the
    framework's default; with framework none, the vendor runtime's port when a multi-replica
    gang lands on a pool whose runtime listens on one (TPU, Trainium). None when nothing is
    known to listen. Declaring it documents the pod and lets network policies name it; a
    headless Service resolves the pods whatever their ports."""
    framework_port = _framework_port(spec)
    if framework_port is not None:
        return framework_port
    if spec.replicas > 1:
        return VENDOR_PORTS.get(vendor)
    return None


def _pytorch(
    coordinator: str, port: int, replicas: int, nproc: int, rank: int
) -> list[tuple[str, str]]:
    """torchrun's static rendezvous (its arguments read PET_<ARG> when not given) and
    `init_method="env://"`. WORLD_SIZE counts processes and RANK is the pod's index, as
    Kubeflow's PyTorchJob sets them: torchrun replaces both for each worker it starts."""
    return [
        ("MASTER_ADDR", coordinator),
        ("MASTER_PORT", str(port)),
        ("WORLD_SIZE", str(replicas * nproc)),
        ("RANK", str(rank)),
        ("NODE_RANK", str(rank)),
        ("NNODES", str(replicas)),
        ("NPROC_PER_NODE", str(nproc)),
        ("PET_MASTER_ADDR", coordinator),
        ("PET_MASTER_PORT", str(port)),
        ("PET_NNODES", str(replicas)),
        ("PET_NODE_RANK", str(rank)),
        ("PET_NPROC_PER_NODE", str(nproc)),
    ]


def environment(
    spec: api.WorkloadSpec,
    workload: str,
    namespace: str,
    accelerator: api.ResolvedAccelerator,
    replica: int,
) -> list[dict[str, str]]:
    """The rendezvous environment of one replica: the framework's, then the vendor's.

    The coordinator is replica 0: its Service address when it has peers, `localhost` when it
    is alone (no Service exists for it, and every framework's single-host default is local).
    The vendor's part is added for every multi-replica gang on a TPU or Trainium pool,
    whatever the framework, because the runtime under any framework needs it; it comes from
    the pool the gang landed on, never from the spec. Empty for a lone replica of framework
    none: there is nobody to find.
    """
    replicas = spec.replicas
    framework = spec.distributed.framework
    if replicas == 1 and framework is api.Framework.NONE:
        return []
    coordinator = address(workload, namespace, 0) if replicas > 1 else LOCAL
    pairs: list[tuple[str, str]] = []
    framework_port = _framework_port(spec)
    if framework is api.Framework.PYTORCH and framework_port is not None:
        pairs += _pytorch(coordinator, framework_port, replicas, spec.accelerator.count, replica)
    elif framework is api.Framework.JAX and framework_port is not None:
        pairs += [
            ("JAX_COORDINATOR_ADDRESS", f"{coordinator}:{framework_port}"),
            ("JAX_NUM_PROCESSES", str(replicas)),
            ("JAX_PROCESS_ID", str(replica)),
        ]
    if replicas > 1:
        if accelerator.vendor is api.Vendor.GOOGLE:
            pairs += [
                ("TPU_WORKER_HOSTNAMES", _worker_hostnames(workload, replicas)),
                ("TPU_WORKER_ID", str(replica)),
            ]
        elif accelerator.vendor is api.Vendor.AWS:
            pairs.append(("NEURON_RT_ROOT_COMM_ID", f"{coordinator}:{NEURON_ROOT_COMM_PORT}"))
    return [{"name": name, "value": value} for name, value in pairs]


def service_manifest(workload: api.Workload, uid: str) -> dict[str, Any]:
    """The headless Service that publishes a DNS record per replica, ready to create.

    clusterIP None: no virtual IP, a record per pod. publishNotReadyAddresses: peers must
    resolve each other while they start, before any is Ready (a gang waits on its rendezvous
    before it could pass a readiness probe). It selects the Workload's pods by Tessera's label,
    so a pod on any pool is in it. The port is the framework's (a headless Service may have
    none); the pool's vendor is not known here (the Service is made once for the gang, before
    and across placements), so a vendor runtime's port is declared on the container only.
    Owned by the Workload like its pods, so it goes when the Workload does.
    """
    name = workload.name
    spec: dict[str, Any] = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {api.WORKLOAD_LABEL: name},
    }
    service_port = _framework_port(workload.spec)
    if service_port is not None:
        spec["ports"] = [
            {"name": PORT_NAME, "port": service_port, "targetPort": service_port, "protocol": "TCP"}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(name),
            "namespace": workload.namespace,
            "labels": {api.WORKLOAD_LABEL: name},
            "ownerReferences": [
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "Workload",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
