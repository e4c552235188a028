"""Helpers for end-to-end tests of the operator: start `tessera run` against the test
cluster, submit workloads, wait on what a user would see. Not a test module itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import yaml

REPO = Path(__file__).resolve().parents[2]
TESSERA = Path(sys.executable).parent / "tessera"
sys.path.insert(0, str(REPO / "hack"))

from cluster import free_port  # noqa: E402  (hack/cluster.py: below the ephemeral ports)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60, every: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def install_crds(cluster: Any) -> None:
    """Server-side applies crds/ and waits until the API server serves both kinds."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    cluster.wait_established(["workloads.tessera.dev", "acceleratorpools.tessera.dev"])


class Operator:
    """A `tessera run` process; restartable and killable like a real pod."""

    def __init__(self, kubeconfig: Path, log_dir: Path, *args: str, name: str = "operator") -> None:
        self.kubeconfig, self.log_dir, self.args, self.name = kubeconfig, log_dir, args, name
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.log_dir / f"{self.name}-{self.starts}.log").open("wb")
        env = {**{k: v for k, v in os.environ.items() if k != "KUBECONFIG"}, "POD_NAME": self.name}
        self.proc = subprocess.Popen(
            [
                str(TESSERA),
                "run",
                "--kubeconfig",
                str(self.kubeconfig),
                "--metrics-address",
                "127.0.0.1",
                "--metrics-port",
                str(self.port),
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        wait_for("operator /healthz", self.healthy, timeout=30)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def log(self) -> str:
        return (self.log_dir / f"{self.name}-{self.starts}.log").read_text(errors="replace")


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text format, or None."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head == name and not want:
            return float(value)
        if head.startswith(name + "{"):
            got = ",".join(sorted(head[len(name) + 1 : -1].split(",")))
            if got == want:
                return float(value)
    return None


def workload(
    name: str,
    *,
    replicas: int = 1,
    count: int = 1,
    objective: str = "balanced",
    restart: str = "Never",
    annotations: dict[str, str] | None = None,
    pod_spec: dict[str, Any] | None = None,
    **accelerator: Any,
) -> dict[str, Any]:
    """A Workload manifest for tests: `workload("job", count=8, vendors=["nvidia"])`."""
    spec: dict[str, Any] = {
        "replicas": replicas,
        "objective": objective,
        "accelerator": {"count": count, **accelerator},
        "template": {
            "metadata": {"annotations": annotations or {}},
            "spec": {
                "restartPolicy": restart,
                "containers": [{"name": "main", "image": "registry.example/app:1"}],
                **(pod_spec or {}),
            },
        },
    }
    return {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": spec,
    }


class Kubectl:
    """kubectl bound to one namespace, returning parsed JSON where it helps."""

    def __init__(self, cluster: Any, namespace: str) -> None:
        self.cluster, self.ns = cluster, namespace

    def __call__(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        result: subprocess.CompletedProcess[str] = self.cluster.kubectl(*args, **kw)
        return result

    def apply(self, *manifests: dict[str, Any]) -> None:
        docs = []
        for manifest in manifests:
            m = json.loads(json.dumps(manifest))
            if m["kind"] not in ("AcceleratorPool", "Node", "Namespace"):
                m["metadata"]["namespace"] = self.ns
            docs.append(m)
        self(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs)
        )

    def get(self, kind: str, name: str | None = None, cluster_scoped: bool = False) -> Any:
        args = ["get", kind] + ([name] if name else []) + ["-o", "json"]
        if not cluster_scoped:
            args += ["-n", self.ns]
        return json.loads(self(*args).stdout)

    def awl(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.get("awl", name)
        return result

    def pods(self, **labels: str) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        args = ["get", "pods", "-n", self.ns, "-o", "json"] + (["-l", selector] if selector else [])
        items: list[dict[str, Any]] = json.loads(self(*args).stdout)["items"]
        return items

    def events(self, name: str) -> list[dict[str, Any]]:
        items = json.loads(
            self(
                "get",
                "events",
                "-n",
                self.ns,
                "-o",
                "json",
                "--field-selector",
                f"involvedObject.name={name}",
            ).stdout
        )["items"]
        return list(items)

    def status(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.awl(name).get("status") or {}
        return result

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        for cond in self.status(name).get("conditions") or []:
            if cond["type"] == type_:
                return dict(cond)
        return None


@contextmanager
def namespace(cluster: Any, prefix: str = "e2e") -> Iterator[Kubectl]:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    wait_for(
        "default service account",
        lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
    )
    try:
        yield Kubectl(cluster, name)
    finally:
        cluster.kubectl("delete", "namespace", name, "--timeout=90s", check=False)


RESOURCE = "example.com/burst"


def pool_manifest(
    name: str, selector: dict[str, Any], preference: int = 0, draining: bool = False
) -> dict[str, Any]:
    """An AcceleratorPool of the test-only accelerator over whatever `selector` selects."""
    return {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "AcceleratorPool",
        "metadata": {"name": name},
        "spec": {
            "accelerator": {
                "vendor": "other",
                "model": "B1",
                "resourceName": RESOURCE,
                "memoryGiB": 64,
                "peakTFLOPS": {"bf16": 500},
            },
            "nodeSelector": selector,
            "preference": preference,
            "draining": draining,
        },
    }


def make_pool(
    k: Kubectl, name: str, nodes: int, devices: int, preference: int = 0, draining: bool = False
) -> None:
    """`nodes` kwok nodes with `devices` each of a test-only resource, and a pool over them."""
    selector = {"matchLabels": {"example.com/test-pool": name}}
    pool = pool_manifest(name, selector, preference, draining)
    k.apply(*pool_nodes(name, nodes, devices), pool)


def drop_pool(k: Kubectl, name: str, nodes: int) -> None:
    k("delete", "acp", name, "--wait=false", check=False)
    k("delete", "node", *[f"{name}-{i}" for i in range(nodes)], "--wait=false", check=False)


NO_FINALIZERS = '{"metadata":{"finalizers":null}}'  # a merge patch taking them all off


def pool_object(k: Kubectl, name: str) -> dict[str, Any] | None:
    """The AcceleratorPool, or None once it is gone."""
    out = k("get", "acp", name, "-o", "json", check=False)
    if out.returncode != 0:
        assert "NotFound" in out.stderr, out.stderr
        return None
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def drop_pools(k: Kubectl, pools: dict[str, int]) -> None:
    """Cleans up after a test: its workloads and their pods first (so nothing holds the pools
    and their finalizer comes off), then the pools, then their nodes. The pods are deleted
    here, not left to the garbage collector: on a fresh cluster it only starts to follow
    Workloads at its next discovery (every 30 s)."""
    k("delete", "awl", "--all", "-n", k.ns)
    k("delete", "pods", "--all", "-n", k.ns, "--wait=false")
    wait_for("the namespace's pods gone", lambda: not k.pods(), timeout=60, every=0.5)
    for name in pools:
        k("delete", "acp", name, "--wait=false", check=False)
    try:
        wait_for(
            "the pools gone", lambda: all(pool_object(k, n) is None for n in pools), timeout=15
        )
    except AssertionError:
        for name in pools:  # the operator did not let them go: not this cleanup's business
            k("patch", "acp", name, "--type=merge", "-p", NO_FINALIZERS, check=False)
    nodes = [f"{name}-{i}" for name, count in pools.items() for i in range(count)]
    if nodes:
        k("delete", "node", *nodes, "--wait=false", "--ignore-not-found", check=False)


def set_draining(k: Kubectl, pool: str, draining: bool) -> None:
    k("patch", "acp", pool, "--type=merge", "-p", json.dumps({"spec": {"draining": draining}}))


def _fleet() -> Any:
    import fleet

    return fleet


def pool_nodes(name: str, nodes: int, devices: int) -> list[dict[str, Any]]:
    """The Node manifests `make_pool(k, name, nodes, devices)` applies (the same group), so a
    test that deletes one of the pool's nodes can put the very same node back."""
    group = {
        "name": name,
        "count": nodes,
        "labels": {"example.com/test-pool": name},
        "capacity": {RESOURCE: str(devices), "cpu": "64", "memory": "256Gi", "pods": "110"},
    }
    manifests: list[dict[str, Any]] = _fleet().node_manifests([group])
    return manifests


def clear_workloads(k: Kubectl, timeout: float = 90) -> None:
    """Deletes every Workload of the namespace and waits until their pods are gone. Done
    before a test drops its nodes: a pod left on a deleted node lingers in Terminating until
    podgc's quarantine (40 s and more) is over, and holds up the namespace's deletion."""
    k("delete", "awl", "--all", "-n", k.ns, "--wait=false")
    wait_for("the namespace's pods gone", lambda: not k.pods(), timeout, every=1)


class Sampler:
    """Calls `sample()` every `every` seconds in a background thread while in a `with`
    block: what a test must see hold at every moment, not just at the end."""

    every = 0.25

    def __init__(self) -> None:
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self.samples += 1
            self._stop.wait(self.every)

    def sample(self) -> None:
        raise NotImplementedError


class CapacityWatch(Sampler):
    """Samples every Tessera pod in the background: devices promised per node (bound, or
    pinned by affinity) must never exceed the node's allocatable."""

    def __init__(self, k: Kubectl, allocatable: int) -> None:
        super().__init__()
        self.k, self.allocatable = k, allocatable
        self.worst: dict[str, int] = defaultdict(int)

    def sample(self) -> None:
        per_node: dict[str, int] = defaultdict(int)
        for pod in self.k.pods():
            if pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            node = pod["spec"].get("nodeName") or _pinned(pod)
            per_node[node] += int(pod["spec"]["containers"][0]["resources"]["requests"][RESOURCE])
        for node, n in per_node.items():
            self.worst[node] = max(self.worst[node], n)

    def assert_never_over(self) -> None:
        assert self.samples > 3
        over = {n: v for n, v in self.worst.items() if v > self.allocatable}
        assert not over, f"nodes over capacity: {over}"


def _pinned(pod: dict[str, Any]) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return str(terms[0]["matchFields"][0]["values"][0])


def is_ready(pod: dict[str, Any]) -> bool:
    conds = pod["status"].get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
    return ready and not pod["metadata"].get("deletionTimestamp")


class ReadyWatch(Sampler):
    """Counts the workload's Ready pods (not terminating) every 0.2 s in the background."""

    every = 0.2

    def __init__(self, k: Kubectl, name: str) -> None:
        super().__init__()
        self.k, self.name = k, name
        self.counts: list[int] = []

    def sample(self) -> None:
        pods = self.k.pods(**{"tessera.dev/workload": self.name})
        self.counts.append(sum(is_ready(p) for p in pods))
