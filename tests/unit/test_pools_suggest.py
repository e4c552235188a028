"""`tessera pools suggest`: grouping by model, selector choice, tolerations, and the nodes it
refuses to guess about, with node label sets as the real labellers write them (hack/fleet)."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

import fleet  # hack/fleet.py: on the path (tests/conftest.py)
from tessera import api, suggest
from tessera.cli import live
from tessera.cli import main as cli_main

REPO = Path(__file__).resolve().parents[2]


def groups() -> list[dict[str, Any]]:
    return copy.deepcopy(fleet.load_groups())


def group(name: str) -> dict[str, Any]:
    return next(g for g in groups() if g["name"] == name)


def nodes(*groups_: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = fleet.node_manifests(list(groups_))
    return result


def renamed(
    g: dict[str, Any], name: str, count: int = 1, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    g = copy.deepcopy(g)
    g["name"], g["count"] = name, count
    g["labels"].update(labels or {})
    return g


def selects(selector: dict[str, Any], bodies: list[dict[str, Any]]) -> set[str]:
    chosen = api.LabelSelector.model_validate(selector)
    return {b["metadata"]["name"] for b in bodies if chosen.matches(b["metadata"]["labels"])}


def by_model(found: suggest.Suggestion) -> dict[str, suggest.Pool]:
    return {p.model: p for p in found.pools}


def test_the_simulated_fleet_gives_the_example_pools_node_for_node() -> None:
    bodies = nodes(*groups())
    found = suggest.suggest(bodies, fleet.resource_slices(groups()))
    examples = {}
    for path in sorted((REPO / "examples" / "pools").glob("*.yaml")):
        pool = yaml.safe_load(path.read_text())
        examples[path.stem] = selects(pool["spec"]["nodeSelector"], bodies)
    assert {p.name for p in found.pools} == {
        "a100-sxm4-80gb", "h100-sxm5-80gb", "l4", "mi300x", "gaudi2", "tpu-v5e", "trainium",
        "h200-sxm-141gb", "mi325x",
    }  # fmt: skip
    suggested = {p.name: selects(p.manifest["spec"]["nodeSelector"], bodies) for p in found.pools}
    assert sorted(map(sorted, suggested.values())) == sorted(map(sorted, examples.values()))
    for pool in found.pools:
        assert set(pool.nodes) == suggested[pool.name]
        api.AcceleratorPoolSpec.model_validate(pool.manifest["spec"])
    assert found.unidentified == ()
    assert found.not_accelerator == 2  # the system nodes, counted, not listed


def test_selector_is_the_labellers_product_label_with_its_exact_value() -> None:
    pools = by_model(suggest.suggest(nodes(*groups())))
    assert pools["H100-SXM5-80GB"].manifest["spec"]["nodeSelector"] == {
        "matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    }
    assert pools["MI300X"].manifest["spec"]["nodeSelector"] == {
        "matchLabels": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}
    }
    assert pools["L4"].manifest["spec"]["nodeSelector"] == {
        "matchLabels": {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    }
    assert pools["Trainium"].manifest["spec"]["nodeSelector"] == {
        "matchLabels": {"karpenter.k8s.aws/instance-accelerator-name": "trainium"}
    }
    # A TPU slice's topology is part of its pool: slices of different shapes never mix.
    assert pools["TPU-v5e"].manifest["spec"]["nodeSelector"] == {
        "matchLabels": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x4",
        }
    }
    # "a Gaudi is present" names no generation: the instance type does.
    assert pools["Gaudi2"].manifest["spec"]["nodeSelector"] == {
        "matchLabels": {"node.kubernetes.io/instance-type": "gaudi2-8x"}
    }


def test_manifest_names_the_model_and_tolerates_the_device_plugin_taint() -> None:
    pool = by_model(suggest.suggest(nodes(group("a100"), group("system"))))["A100-SXM4-80GB"]
    assert pool.manifest["apiVersion"] == "tessera.dev/v1alpha1"
    assert pool.manifest["kind"] == "AcceleratorPool"
    assert pool.manifest["spec"]["accelerator"] == {"vendor": "nvidia", "model": "A100-SXM4-80GB"}
    assert pool.manifest["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    text = pool.to_yaml()
    assert text.startswith(
        "# A100-SXM4-80GB (nvidia): 4 nodes, 32 nvidia.com/gpu (8 each)\n"
        "# nodes: a100-0, a100-1, a100-2, a100-3\n"
    )
    assert yaml.safe_load(text) == pool.manifest


def test_no_toleration_unless_every_node_carries_the_taint() -> None:
    tainted = group("h100")
    bare = renamed(group("h100"), "h100-bare", count=2)
    bare["taints"] = []
    pool = suggest.suggest(nodes(tainted, bare)).pools[0]
    assert len(pool.nodes) == 6
    assert "tolerations" not in pool.manifest["spec"]


def test_other_taints_are_not_tolerated_but_noted() -> None:
    g = group("l4")
    g["taints"].append({"key": "dedicated", "value": "team-a", "effect": "NoExecute"})
    g["taints"].append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"})
    pool = suggest.suggest(nodes(g)).pools[0]
    assert pool.manifest["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert "# also tainted, not tolerated: dedicated:NoExecute" in pool.to_yaml()


def test_disagreeing_labels_are_listed_never_guessed() -> None:
    odd = renamed(
        group("h100"), "odd", labels={"node.kubernetes.io/instance-type": "p4de.24xlarge"}
    )
    found = suggest.suggest(nodes(group("h100"), odd))
    assert [u.node for u in found.unidentified] == ["odd-0"]
    assert found.unidentified[0].reason.startswith("labels disagree")
    assert "p4de.24xlarge" in found.unidentified[0].reason
    # The H100 pool's selector must not catch the odd node, which carries its product label.
    pool = found.pools[0]
    assert pool.nodes == ("h100-0", "h100-1", "h100-2", "h100-3")
    assert selects(pool.manifest["spec"]["nodeSelector"], nodes(group("h100"), odd)) == set(
        pool.nodes
    )
    # The fewest labels that do it: here the instance type, which names H100 by itself.
    assert pool.manifest["spec"]["nodeSelector"] == {
        "matchLabels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    }


def test_unknown_models_and_unlabelled_devices_are_listed() -> None:
    unknown = renamed(group("h100"), "x", labels={"nvidia.com/gpu.product": "NVIDIA-X999"})
    del unknown["labels"]["node.kubernetes.io/instance-type"]
    only_product = {  # a GFD product label and nothing else that names the vendor
        "name": "y",
        "count": 1,
        "labels": {"nvidia.com/gpu.product": "NVIDIA-Y1"},
        "capacity": {"nvidia.com/gpu": "8", "cpu": "8", "memory": "8Gi", "pods": "110"},
    }
    unlabelled = renamed(group("system"), "bare")
    unlabelled["capacity"]["nvidia.com/gpu"] = "4"
    no_plugin = renamed(group("mi300x"), "noplugin")
    del no_plugin["capacity"]["amd.com/gpu"]
    found = suggest.suggest(nodes(unknown, only_product, unlabelled, no_plugin, group("system")))
    assert found.pools == ()
    reasons = {u.node: u.reason for u in found.unidentified}
    assert reasons["x-0"] == (
        "labels fit several models: A100-SXM4-80GB, H100-PCIe-80GB, H100-SXM5-80GB; "
        "the catalog has no nvidia.com/gpu.product=NVIDIA-X999"
    )
    assert reasons["y-0"] == "unknown model: the catalog has no nvidia.com/gpu.product=NVIDIA-Y1"
    assert reasons["bare-0"] == "offers 4 nvidia.com/gpu but no label names its model"
    assert "no allocatable amd.com/gpu" in reasons["noplugin-0"]
    assert found.not_accelerator == 2
    assert found.report()[-1] == (
        "2 nodes without accelerator devices or labels (not accelerator nodes)"
    )


def test_device_of_another_vendor_than_the_labels_say_is_listed() -> None:
    g = renamed(group("mi300x"), "mixed")
    g["capacity"]["nvidia.com/gpu"] = g["capacity"].pop("amd.com/gpu")
    (u,) = suggest.suggest(nodes(g)).unidentified
    assert "offers nvidia.com/gpu" in u.reason and "amd.com/gpu" in u.reason


def test_generations_sharing_a_presence_label_are_told_apart_by_instance_type() -> None:
    gaudi3 = renamed(
        group("gaudi2"), "gaudi3", 2, labels={"node.kubernetes.io/instance-type": "gaudi3-8x"}
    )
    bodies = nodes(group("gaudi2"), gaudi3)
    pools = by_model(suggest.suggest(bodies))
    assert set(pools) == {"Gaudi2", "Gaudi3"}
    for model, prefix in (("Gaudi2", "gaudi2"), ("Gaudi3", "gaudi3")):
        chosen = selects(pools[model].manifest["spec"]["nodeSelector"], bodies)
        assert chosen == {f"{prefix}-0", f"{prefix}-1"}


def test_memory_label_joins_the_selector_when_the_name_alone_is_ambiguous() -> None:
    def karpenter(name: str, mib: str) -> dict[str, Any]:
        return {
            "name": name,
            "count": 2,
            "labels": {
                "karpenter.k8s.aws/instance-gpu-name": "a100",
                "karpenter.k8s.aws/instance-gpu-memory": mib,
            },
            "capacity": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti", "pods": "110"},
            "taints": [],
        }

    bodies = nodes(karpenter("small", "40960"), karpenter("big", "81920"))
    pools = by_model(suggest.suggest(bodies))
    assert set(pools) == {"A100-SXM4-40GB", "A100-SXM4-80GB"}
    assert pools["A100-SXM4-80GB"].manifest["spec"]["nodeSelector"] == {
        "matchLabels": {
            "karpenter.k8s.aws/instance-gpu-name": "a100",
            "karpenter.k8s.aws/instance-gpu-memory": "81920",
        }
    }


def test_several_label_values_of_one_model_become_an_in_expression() -> None:
    shared = renamed(
        group("h100"),
        "h100-shared",
        2,
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"},
    )
    bodies = nodes(group("h100"), shared)
    (pool,) = suggest.suggest(bodies).pools
    assert pool.manifest["spec"]["nodeSelector"] == {
        "matchExpressions": [
            {
                "key": "nvidia.com/gpu.product",
                "operator": "In",
                "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3-SHARED"],
            }
        ]
    }
    assert selects(pool.manifest["spec"]["nodeSelector"], bodies) == set(pool.nodes)
    assert len(pool.nodes) == 6


def test_tpu_slices_of_different_topology_get_their_own_pools() -> None:
    bigger = renamed(
        group("tpu-v5e"), "tpu-big", 4, labels={"cloud.google.com/gke-tpu-topology": "4x4"}
    )
    pools = suggest.suggest(nodes(group("tpu-v5e"), bigger)).pools
    assert [p.name for p in pools] == ["tpu-v5e-2x4", "tpu-v5e-4x4"]
    assert [len(p.nodes) for p in pools] == [2, 4]


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("H100-SXM5-80GB", "h100-sxm5-80gb"),
        ("TPU-v5e", "tpu-v5e"),
        ("Max-1550", "max-1550"),
        ("MI300X", "mi300x"),
        ("Weird__Model..X", "weird-model-x"),
        ("A" * 80, "a" * 63),
    ],
)
def test_pool_names_are_dns_labels_from_the_model(model: str, name: str) -> None:
    assert suggest.pool_name(model) == name


def test_uneven_device_counts_are_in_the_comment() -> None:
    small = renamed(group("l4"), "l4-small", 1)
    small["capacity"]["nvidia.com/gpu"] = "4"
    (pool,) = suggest.suggest(nodes(group("l4"), small)).pools
    assert pool.total_devices == 20
    assert pool.comment().splitlines()[0] == (
        "# L4 (nvidia): 3 nodes, 20 nvidia.com/gpu (4 on 1, 8 on 2)"
    )


# --- The command, against a stand-in for the API server ----------------------------------


class FakeKube:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def request(self, method: str, path: str) -> dict[str, Any]:
        if path == "/apis/resource.k8s.io/v1/resourceslices":  # what the DRA drivers publish
            names = {n["metadata"]["name"] for n in self.items}
            published = fleet.resource_slices(groups())
            return {"items": [s for s in published if s["spec"]["nodeName"] in names]}
        assert (method, path) == ("GET", "/api/v1/nodes")
        return {"items": self.items}


def run_cli(
    monkeypatch: pytest.MonkeyPatch, bodies: list[dict[str, Any]], *argv: str
) -> tuple[int, str, str]:
    connect: Callable[[Any], FakeKube] = lambda args: FakeKube(bodies)  # noqa: E731
    monkeypatch.setattr(live, "connect", connect)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli_main(["pools", "suggest", *argv])
    return code, out.getvalue(), err.getvalue()


def test_cli_prints_pools_on_stdout_and_notes_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = renamed(
        group("l4"), "odd", labels={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    )
    code, out, err = run_cli(monkeypatch, nodes(*groups(), odd))
    assert code == 0
    docs = list(yaml.safe_load_all(out))
    assert len(docs) == 9 and all(d["kind"] == "AcceleratorPool" for d in docs)
    assert err.splitlines() == [
        "# 1 accelerator node not in any suggested pool (set their pools by hand):",
        "#   odd-0: labels disagree: cloud.google.com/gke-accelerator=nvidia-tesla-t4 says T4; "
        "node.kubernetes.io/instance-type=g2-standard-96 says L4",
        "# 2 nodes without accelerator devices or labels: not accelerator nodes",
    ]
    assert list(yaml.safe_load_all(out + err)) == docs  # 2>&1 is still the same YAML


def test_cli_json_and_yaml_carry_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(monkeypatch, nodes(*groups()), "-o", "json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert len(data["pools"]) == 9 and data["unidentified"] == []
    assert data["notAcceleratorNodes"] == 2
    code, out, _ = run_cli(monkeypatch, nodes(*groups()), "-o", "yaml")
    assert yaml.safe_load(out) == data


def test_cli_exit_1_when_nothing_is_identified(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(monkeypatch, nodes(group("system")))
    assert code == 1 and out == ""
    assert "no accelerator node could be identified" in err


def test_cli_output_dir_writes_one_file_per_pool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / "pools"
    code, out, err = run_cli(monkeypatch, nodes(*groups()), "--output-dir", str(target))
    assert code == 0 and out == ""
    files = sorted(p.name for p in target.iterdir())
    assert files == sorted(
        f"{n}.yaml"
        for n in (
            "a100-sxm4-80gb",
            "h100-sxm5-80gb",
            "h200-sxm-141gb",
            "mi325x",
            "l4",
            "mi300x",
            "gaudi2",
            "tpu-v5e",
            "trainium",
        )
    )
    h100 = (target / "h100-sxm5-80gb.yaml").read_text()
    assert h100.startswith("# H100-SXM5-80GB (nvidia): 4 nodes")
    assert yaml.safe_load(h100)["metadata"]["name"] == "h100-sxm5-80gb"
    assert f"wrote {target / 'l4.yaml'}: L4, 2 nodes" in err
    # Files that exist are not replaced without --force.
    code, _, err = run_cli(monkeypatch, nodes(*groups()), "--output-dir", str(target))
    assert code == 2 and "--force" in err
    code, _, _ = run_cli(monkeypatch, nodes(*groups()), "--output-dir", str(target), "--force")
    assert code == 0


def test_nodes_a_dra_driver_serves_become_a_dra_pool() -> None:
    """Their devices are the driver's ResourceSlices, not allocatable: the pool says so, and
    counts the devices the slices list."""
    found = suggest.suggest(nodes(group("h200-dra")), fleet.resource_slices([group("h200-dra")]))
    (pool,) = found.pools
    accelerator = pool.manifest["spec"]["accelerator"]
    assert accelerator == {
        "vendor": "nvidia",
        "model": "H200-SXM-141GB",
        "dra": {"driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com"},
    }
    assert pool.total_devices == 16 and pool.resource == "gpu.nvidia.com/devices"
    assert pool.manifest["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    # Without its slices the same node is an accelerator node no pool can count.
    (alone,) = suggest.suggest(nodes(group("h200-dra"))).unidentified[:1]
    assert "no allocatable nvidia.com/gpu" in alone.reason
