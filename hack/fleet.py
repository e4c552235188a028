"""Expands a fleet file into kwok Node manifests, and for groups a DRA driver serves, the
DeviceClasses and ResourceSlices that driver would publish: the simulated mixed-accelerator
fleet. Standard library and PyYAML only, so tests, the demo and benchmarks can all import it."""

from __future__ import annotations

import argparse
import string
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

FLEET_FILE = Path(__file__).parent / "fleet" / "fleet.yaml"
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
FLEET_LABEL = "tessera.dev/simulated"
ZONE_LABEL = "topology.kubernetes.io/zone"


def load_groups(path: Path = FLEET_FILE) -> list[dict[str, Any]]:
    """The node groups of a fleet file, validated enough to fail with a clear message."""
    doc = yaml.safe_load(path.read_text())
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list) or not groups:
        raise ValueError(f"{path}: expected a top-level 'groups' list")
    for group in groups:
        for key in ("name", "count", "labels", "capacity"):
            if key not in group:
                raise ValueError(f"{path}: group {group.get('name', '?')!r} lacks {key!r}")
    return groups


def node_manifests(groups: list[dict[str, Any]], scale: int = 1) -> list[dict[str, Any]]:
    """One Node per simulated machine; `scale` multiplies every group's count.

    Nodes carry status on create (the API server accepts a Node's status on create), so
    capacity and allocatable are there before kwok takes the node over.
    """
    nodes = []
    for group in groups:
        count = int(group["count"]) * scale
        width = len(str(count - 1))
        for index in range(count):
            name = f"{group['name']}-{index:0{width}d}" if scale > 1 else f"{group['name']}-{index}"
            capacity = {k: str(v) for k, v in group["capacity"].items()}
            labels = {
                **{k: str(v) for k, v in group["labels"].items()},
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                FLEET_LABEL: "true",
                "tessera.dev/fleet-group": group["name"],
            }
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": labels, "annotations": KWOK_ANNOTATION},
                    "spec": {"taints": list(group.get("taints", []))},
                    "status": {
                        "capacity": capacity,
                        "allocatable": dict(capacity),
                    },
                }
            )
    return nodes


def device_classes(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One DeviceClass per DRA driver of the fleet, named after the driver and selecting its
    full devices by their `type`, as NVIDIA's and AMD's Helm charts install them."""
    out, seen = [], set()
    for group in groups:
        dra = group.get("dra")
        if not dra or dra["driver"] in seen:
            continue
        driver = dra["driver"]
        seen.add(driver)
        kind = dra["attributes"]["type"]["string"]
        expression = (
            f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{kind}'"
        )
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": driver, "labels": {FLEET_LABEL: "true"}},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            }
        )
    return out


def resource_slices(groups: list[dict[str, Any]], scale: int = 1) -> list[dict[str, Any]]:
    """The ResourceSlice a DRA driver's kubelet plugin publishes for each node it serves:
    one pool per node, named after it, with the group's devices and their attributes."""
    nodes = {n["metadata"]["name"]: n for n in node_manifests(groups, scale)}
    out = []
    for name, node in nodes.items():
        group = next(
            g for g in groups if g["name"] == node["metadata"]["labels"]["tessera.dev/fleet-group"]
        )
        dra = group.get("dra")
        if not dra:
            continue
        devices = [
            {
                "name": dra["name"].format(index=i, render=128 + i),
                "attributes": dra["attributes"],
                "capacity": dra.get("capacity", {}),
            }
            for i in range(int(dra["devices"]))
        ]
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {
                    "name": f"{name}-{dra['driver'].replace('.', '-')}",
                    "labels": {FLEET_LABEL: "true"},
                },
                "spec": {
                    "driver": dra["driver"],
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return out


def device_resource(group: dict[str, Any]) -> str | None:
    """The group's device-plugin resource: the one capacity key with a vendor domain."""
    return next((key for key in group["capacity"] if "/" in key), None)


def zone(index: int) -> str:
    """zone-a, zone-b, ...: the values clouds write into topology.kubernetes.io/zone."""
    letters = string.ascii_lowercase
    return f"zone-{letters[index]}" if index < len(letters) else f"zone-{index}"


def pool_groups(
    groups: list[dict[str, Any]], pools: int, nodes: int, devices: int = 8
) -> list[dict[str, Any]]:
    """One node group per pool, for fleets of any size made from the same description.

    Pools take the accelerator groups in turn (the `system` group has no devices); a group
    that more than one pool takes is split by zone, so each pool can select its own nodes by
    the group's labels plus `topology.kubernetes.io/zone`. Nodes are split evenly across the
    pools and every node gets `devices` of its group's device-plugin resource. Each result is
    a fleet group (for `node_manifests`) with two more keys: `group` (the source group's name)
    and `zone` (set when the group is split, else None).
    """
    accelerated = [g for g in groups if device_resource(g)]
    if not accelerated:
        raise ValueError("the fleet has no group with a device-plugin resource")
    if pools < 1 or nodes < pools:
        raise ValueError(f"need at least one node per pool: {nodes} nodes for {pools} pools")
    sources = [accelerated[i % len(accelerated)] for i in range(pools)]
    shares = Counter(g["name"] for g in sources)
    taken: Counter[str] = Counter()
    out = []
    for index, source in enumerate(sources):
        where = zone(taken[source["name"]])
        taken[source["name"]] += 1
        split = shares[source["name"]] > 1
        resource = device_resource(source)
        assert resource is not None
        out.append(
            {
                "name": f"{source['name']}-{where}" if split else source["name"],
                "count": nodes // pools + (index < nodes % pools),
                "labels": {**source["labels"], ZONE_LABEL: where},
                "capacity": {**source["capacity"], resource: str(devices)},
                "taints": list(source.get("taints", [])),
                "group": source["name"],
                "zone": where if split else None,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print a fleet file's Node manifests as YAML.")
    parser.add_argument("--fleet", type=Path, default=FLEET_FILE, help="fleet file")
    parser.add_argument("--scale", type=int, default=1, help="multiply every group's count")
    args = parser.parse_args(argv)
    nodes = node_manifests(load_groups(args.fleet), args.scale)
    yaml.safe_dump_all(nodes, sys.stdout, sort_keys=False)
    print(f"# {len(nodes)} nodes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
