"""`tessera pools suggest` against the real control plane and the simulated fleet: the pools
it prints select the same nodes as the hand-written examples/pools, and applied back with
server-side apply in their place, the operator gives them those nodes and places workloads on
them. Leaves the cluster as it found it: the example pools back if they were there."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import (
    NO_FINALIZERS,
    REPO,
    TESSERA,
    Kubectl,
    Operator,
    install_crds,
    namespace,
    pool_object,
    wait_for,
    workload,
)

from tessera import api

EXAMPLES = REPO / "examples" / "pools"
SUGGESTED = {
    "a100-sxm4-80gb": "A100-SXM4-80GB",
    "h100-sxm5-80gb": "H100-SXM5-80GB",
    "l4": "L4",
    "mi300x": "MI300X",
    "gaudi2": "Gaudi2",
    "tpu-v5e": "TPU-v5e",
    "trainium": "Trainium",
    "h200-sxm-141gb": "H200-SXM-141GB",  # DRA: from the gpu.nvidia.com driver's slices
    "mi325x": "MI325X",  # DRA: gpu.amd.com
}


def suggest(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TESSERA), "pools", "suggest", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def live_nodes(cluster: Any) -> dict[str, dict[str, str]]:
    items = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in items}


def selected(selector: dict[str, Any], nodes: dict[str, dict[str, str]]) -> list[str]:
    chosen = api.LabelSelector.model_validate(selector)
    return sorted(name for name, labels in nodes.items() if chosen.matches(labels))


def examples() -> dict[str, dict[str, Any]]:
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))}


def drop(k: Kubectl, names: list[str]) -> None:
    """Deletes pools and waits them gone (the operator takes its finalizer off)."""
    for name in names:
        k("delete", "acp", name, "--wait=false", "--ignore-not-found")
    try:
        wait_for("pools gone", lambda: all(pool_object(k, n) is None for n in names), 30)
    except AssertionError:
        for name in names:
            k("patch", "acp", name, "--type=merge", "-p", NO_FINALIZERS, check=False)


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    """CRDs, the operator, and none of the example pools (they would overlap the suggested
    ones): put back at the end if they were there."""
    install_crds(cluster)
    op = Operator(cluster.kubeconfig, tmp_path_factory.mktemp("operator"), name="pools-suggest")
    op.start()
    k = Kubectl(cluster, "default")
    had = [n for n in examples() if pool_object(k, n) is not None]
    drop(k, list(examples()))
    try:
        yield op
    finally:
        drop(k, list(SUGGESTED))
        if had:
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(EXAMPLES))
        op.stop()


def test_suggest_prints_one_pool_per_model_selecting_the_examples_nodes(cluster: Any) -> None:
    result = suggest(cluster)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert {d["metadata"]["name"]: d["spec"]["accelerator"]["model"] for d in docs} == SUGGESTED
    assert all(d["apiVersion"] == "tessera.dev/v1alpha1" for d in docs)
    assert "not accelerator nodes" in result.stderr  # the system nodes, counted in one line
    nodes = live_nodes(cluster)
    suggested = sorted(selected(d["spec"]["nodeSelector"], nodes) for d in docs)
    hand_written = sorted(selected(e["spec"]["nodeSelector"], nodes) for e in examples().values())
    assert suggested == hand_written
    assert all(suggested)


def test_suggested_pools_applied_server_side_get_the_example_pools_nodes(
    cluster: Any, operator: Operator
) -> None:
    nodes = live_nodes(cluster)
    want = {}  # suggested pool -> the nodes the example pool of that model selects
    for example in examples().values():
        names = selected(example["spec"]["nodeSelector"], nodes)
        model = example["spec"]["accelerator"].get("model") or "L4"  # l4.yaml: from labels
        (pool,) = [p for p, m in SUGGESTED.items() if m == model]
        want[pool] = names
    result = suggest(cluster)
    assert result.returncode == 0, result.stderr
    cluster.kubectl("apply", "--server-side", "-f", "-", input=result.stdout)
    k = Kubectl(cluster, "default")

    def reconciled() -> dict[str, Any]:
        got = {}
        for name in SUGGESTED:
            status = (pool_object(k, name) or {}).get("status") or {}
            got[name] = (status.get("nodeNames"), (status.get("accelerator") or {}).get("model"))
        return got

    expected = {name: (want[name], model) for name, model in SUGGESTED.items()}
    wait_for("the suggested pools' status", lambda: reconciled() == expected, timeout=60)
    for name in SUGGESTED:
        conds = {c["type"]: c["status"] for c in pool_object(k, name)["status"]["conditions"]}
        assert conds["Ready"] == "True", (name, conds)


def test_workload_for_a_model_lands_on_the_suggested_pool(cluster: Any, operator: Operator) -> None:
    result = suggest(cluster)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=result.stdout)
    with namespace(cluster, "pools-suggest") as ns:
        ns.apply(workload("train", count=8, models=["H100-SXM5-80GB"]))
        status = wait_for(
            "train placed", lambda: (s := ns.status("train")).get("pool") and s, timeout=60
        )
        assert status["pool"] == "h100-sxm5-80gb"
        ns("wait", "--for=condition=Ready", "awl/train", "-n", ns.ns, "--timeout=60s")
        (pod,) = ns.pods(**{"tessera.dev/workload": "train"})
        assert pod["spec"]["nodeName"].startswith("h100-")
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "spec"
        ]["tolerations"]
        ns("delete", "awl", "--all", "-n", ns.ns)
        ns("delete", "pods", "--all", "-n", ns.ns, "--wait=false")


def test_output_dir_files_pass_server_side_dry_run(cluster: Any, tmp_path: Path) -> None:
    install_crds(cluster)
    target = tmp_path / "gitops" / "pools"
    result = suggest(cluster, "--output-dir", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert sorted(p.stem for p in target.glob("*.yaml")) == sorted(SUGGESTED)
    out = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", str(target))
    assert out.stdout.count("serverside-applied") == len(SUGGESTED), out.stdout
