"""AcceleratorPools suggested from the nodes themselves (`tessera pools suggest`): each node's
model from the catalog's label discovery, nodes grouped by (vendor, model), and for each group
a pool whose selector picks exactly those nodes with labels that, alone, name the model.
Nodes it cannot identify are reported with the reason, never guessed. Pure: node bodies in,
manifests out; no I/O."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from tessera import api, catalog
from tessera.dra import dra_labels, dra_resource, slice_facts

# Device-plugin resources that mark a node as an accelerator node (allocatable > 0), beyond
# the catalog's own resourceName values.
_EXTRA_RESOURCES = frozenset(
    {
        "nvidia.com/gpu",
        "amd.com/gpu",
        "google.com/tpu",
        "habana.ai/gaudi",
        "gpu.intel.com/i915",
        "gpu.intel.com/xe",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "aws.amazon.com/neurondevice",
    }
)
_BLOCKING = ("NoSchedule", "NoExecute")

# How much a label key says about the model, best first: the labeller's product label, then
# the provider's accelerator label, device ids, per-device memory, the instance type, and last
# the labels that only say a vendor's device is present. Keys not listed come after.
_RANK = (
    "nvidia.com/gpu.product",
    "amd.com/gpu.product-name",
    "gpu.intel.com/product",
    "cloud.google.com/gke-tpu-accelerator",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-gpu-name",
    "eks.amazonaws.com/instance-gpu-name",
    "beta.amd.com/gpu.product-name",
    "amd.com/gpu.device-id",
    "beta.amd.com/gpu.device-id",
    "nvidia.com/gpu.memory",
    "karpenter.k8s.aws/instance-gpu-memory",
    "eks.amazonaws.com/instance-gpu-memory",
    "amd.com/gpu.vram",
    "beta.amd.com/gpu.vram",
    catalog.INSTANCE_TYPE_LABEL,
)
# Labels that split one model into pools that must not mix: a TPU slice's topology.
_SPLITTING = ("cloud.google.com/gke-tpu-topology",)
_HOSTNAME = "kubernetes.io/hostname"
_MAX_TERMS = 3  # selector terms tried together before falling back


@dataclass(frozen=True)
class Node:
    """What suggestion reads of a node: labels, accelerator devices, blocking taints."""

    name: str
    labels: Mapping[str, str]
    devices: Mapping[str, int]  # accelerator resource -> allocatable count (> 0)
    taints: tuple[tuple[str, str], ...]  # (key, effect), NoSchedule and NoExecute only
    # Devices DRA drivers publish for it: driver -> count, and what their attributes say as
    # the labels discovery reads (tessera.dra.dra_labels).
    dra: Mapping[str, int] = field(default_factory=dict)
    dra_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Unidentified:
    """An accelerator node (or one with accelerator labels) no pool is suggested for."""

    node: str
    reason: str
    labels: Mapping[str, str] = field(default_factory=dict)  # the accelerator labels read

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "reason": self.reason, "labels": dict(self.labels)}


@dataclass(frozen=True)
class Pool:
    """One suggested AcceleratorPool and how it was arrived at."""

    name: str
    vendor: str
    model: str
    nodes: tuple[str, ...]
    resource: str
    devices: Mapping[str, int]  # node -> devices of `resource`
    manifest: dict[str, Any]
    notes: tuple[str, ...] = ()

    @property
    def total_devices(self) -> int:
        return sum(self.devices.values())

    def comment(self) -> str:
        """The comment above the manifest: the model, its nodes and devices, and any notes."""
        counts = sorted(set(self.devices.values()))
        each = (
            f"{counts[0]} each"
            if len(counts) == 1
            else ", ".join(
                f"{c} on {sum(1 for v in self.devices.values() if v == c)}" for c in counts
            )
        )
        n = len(self.nodes)
        lines = [
            f"{self.model} ({self.vendor}): {n} node{'s' if n != 1 else ''}, "
            f"{self.total_devices} {self.resource} ({each})",
            "nodes: " + _some(self.nodes),
            *self.notes,
        ]
        return "\n".join("# " + line for line in lines)

    def to_yaml(self) -> str:
        """The manifest with its comment, ready for a GitOps repository."""
        body = yaml.safe_dump(self.manifest, sort_keys=False, default_flow_style=False)
        return f"{self.comment()}\n{body}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vendor": self.vendor,
            "model": self.model,
            "nodes": list(self.nodes),
            "resource": self.resource,
            "devices": self.total_devices,
            "notes": list(self.notes),
            "manifest": self.manifest,
        }


@dataclass(frozen=True)
class Suggestion:
    """The pools suggested for a fleet, the accelerator nodes left out, and the rest counted."""

    pools: tuple[Pool, ...]
    unidentified: tuple[Unidentified, ...]
    not_accelerator: int  # nodes with neither accelerator devices nor accelerator labels

    def to_dict(self) -> dict[str, Any]:
        return {
            "pools": [p.to_dict() for p in self.pools],
            "unidentified": [u.to_dict() for u in self.unidentified],
            "notAcceleratorNodes": self.not_accelerator,
        }

    def to_yaml(self) -> str:
        """Every pool as one YAML stream (`---` between documents)."""
        return "---\n".join(p.to_yaml() for p in self.pools)

    def report(self) -> list[str]:
        """The lines about nodes that got no pool: one per unidentified node, one count."""
        lines = [f"{u.node}: {u.reason}" for u in self.unidentified]
        if self.not_accelerator:
            n = self.not_accelerator
            lines.append(
                f"{n} node{'s' if n != 1 else ''} without accelerator devices or labels "
                "(not accelerator nodes)"
            )
        return lines


def _some(names: Sequence[str], most: int = 8) -> str:
    """Names for a comment: all of them, or the first few and how many more."""
    if len(names) <= most:
        return ", ".join(names)
    return ", ".join(names[:most]) + f" and {len(names) - most} more"


def accelerator_resources() -> frozenset[str]:
    """Allocatable resources that count as accelerator devices."""
    return _EXTRA_RESOURCES | {m.resource_name for m in catalog.catalog().values()}


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def node_from_body(body: Mapping[str, Any]) -> Node:
    """A Node from a Kubernetes Node object as the API server returns it."""
    meta, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    known = accelerator_resources()
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    devices = {k: _count(v) for k, v in allocatable.items() if k in known}
    return Node(
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        devices={k: v for k, v in devices.items() if v > 0},
        taints=tuple(
            (t.get("key", ""), t["effect"])
            for t in spec.get("taints") or []
            if t.get("effect") in _BLOCKING
        ),
    )


def pool_name(model: str) -> str:
    """A DNS label from a model key: H100-SXM5-80GB -> h100-sxm5-80gb."""
    name = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:63].rstrip("-")
    return name or "pool"


def _rank(key: str) -> int:
    return _RANK.index(key) if key in _RANK else len(_RANK)


def _classify(node: Node) -> tuple[str, str, str] | Unidentified | None:
    """(vendor, model, DRA driver or "") for an identified node, the reason it is not, or
    None for a node that is no accelerator node at all. A node a DRA driver serves is
    identified by its labels and its devices' attributes together."""
    found = catalog.discover({**node.labels, **node.dra_labels})
    if node.dra and found.status == "identified" and found.model:
        entry = catalog.get(found.model)
        assert entry is not None
        return entry.vendor.value, found.model, sorted(node.dra)[0]
    if found.status == "none":
        if not node.devices:
            return None
        said = ", ".join(f"{v} {k}" for k, v in sorted(node.devices.items()))
        return Unidentified(node.name, f"offers {said} but no label names its model")
    if found.status != "identified" or not found.model:
        reason = found.message or found.status
        unknown = [
            f"{k}={v}"
            for k, v in sorted(found.labels.items())
            if catalog.discover({k: v}).status == "unknown"
        ]
        if found.status == "ambiguous":
            reason = "labels fit several models: " + ", ".join(found.candidates)
            if unknown:
                reason += "; the catalog has no " + ", ".join(unknown)
        return Unidentified(node.name, reason, found.labels)
    entry = catalog.get(found.model)
    assert entry is not None  # discovery names only catalog models
    if not node.devices:
        return Unidentified(
            node.name,
            f"labels say {found.model} but the node has no allocatable {entry.resource_name} "
            "(device plugin not running?)",
            found.labels,
        )
    if entry.resource_name not in node.devices:
        said = ", ".join(sorted(node.devices))
        return Unidentified(
            node.name,
            f"labels say {found.model}, which the device plugin offers as "
            f"{entry.resource_name}, but the node offers {said}",
            found.labels,
        )
    return entry.vendor.value, found.model, ""


def suggest(
    bodies: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]] = ()
) -> Suggestion:
    """The pools for a fleet's Node objects and DRA drivers' ResourceSlices: one per
    (vendor, model, DRA driver), split where a label such as a TPU slice's topology must
    not mix, with every unidentified node and its reason."""
    dra: dict[str, dict[str, int]] = {}
    labels: dict[str, dict[str, str]] = {}
    for body in slices:
        facts = slice_facts(body)
        if facts is None:
            continue
        held = dra.setdefault(facts.node, {})
        held[facts.driver] = held.get(facts.driver, 0) + facts.devices
        labels.setdefault(facts.node, {}).update(
            dra_labels(facts.driver, facts.attributes, facts.capacity)
        )
    nodes = [node_from_body(b) for b in bodies]
    nodes = [replace(n, dra=dra.get(n.name, {}), dra_labels=labels.get(n.name, {})) for n in nodes]
    return suggest_nodes(nodes)


def suggest_nodes(nodes: Sequence[Node]) -> Suggestion:
    groups: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], list[Node]] = {}
    unidentified: list[Unidentified] = []
    plain = 0
    for node in sorted(nodes, key=lambda n: n.name):
        found = _classify(node)
        if found is None:
            plain += 1
        elif isinstance(found, Unidentified):
            unidentified.append(found)
        else:
            split = tuple((k, node.labels[k]) for k in _SPLITTING if k in node.labels)
            groups.setdefault((*found, split), []).append(node)
    by_model: dict[str, int] = {}
    for _vendor, model, _driver, _ in groups:
        by_model[model] = by_model.get(model, 0) + 1
    pools: list[Pool] = []
    taken: set[str] = set()
    for (vendor, model, driver, split), members in sorted(groups.items()):
        name = pool_name(model)
        if by_model[model] > 1:
            name = pool_name(f"{model}-{'-'.join(v for _, v in split)}")
        base, i = name, 2
        while name in taken:
            name, i = f"{base[:60]}-{i}", i + 1
        taken.add(name)
        pools.append(_pool(name, vendor, model, split, members, nodes, driver))
    return Suggestion(tuple(pools), tuple(unidentified), plain)


def _terms(
    members: Sequence[Node], split: tuple[tuple[str, str], ...]
) -> list[tuple[str, tuple[str, ...]]]:
    """Candidate selector terms, best first: each accelerator label every member carries, with
    the values the members have."""
    keys: set[str] = set()
    for node in members:
        keys |= set(catalog.discover(node.labels).labels)
    keys = {k for k in keys if all(k in n.labels for n in members)}
    terms = [
        (k, tuple(sorted({n.labels[k] for n in members})))
        for k in sorted(keys, key=lambda k: (_rank(k), k))
    ]
    return terms + [(k, (v,)) for k, v in split]


def _selector(terms: Sequence[tuple[str, tuple[str, ...]]]) -> dict[str, Any]:
    match_labels = {k: vs[0] for k, vs in terms if len(vs) == 1}
    expressions = [
        {"key": k, "operator": "In", "values": list(vs)} for k, vs in terms if len(vs) > 1
    ]
    selector: dict[str, Any] = {}
    if match_labels:
        selector["matchLabels"] = match_labels
    if expressions:
        selector["matchExpressions"] = expressions
    return selector


def _names_model(terms: Sequence[tuple[str, tuple[str, ...]]], node: Node, model: str) -> bool:
    """Whether the node's values of these terms' keys alone identify the model."""
    own = {k: node.labels[k] for k, _ in terms}
    found = catalog.discover(own)
    return found.status == "identified" and found.model == model


def _choose(
    members: Sequence[Node],
    everyone: Sequence[Node],
    model: str,
    split: tuple[tuple[str, str], ...],
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The selector with the fewest, best-ranked terms that selects exactly the members and
    whose labels alone name the model; notes on any fallback."""
    want = {n.name for n in members}
    terms = _terms(members, split)
    splitting = [t for t in terms if t[0] in _SPLITTING]
    candidates = [t for t in terms if t[0] not in _SPLITTING]

    def selected(selector: dict[str, Any]) -> set[str]:
        chosen = api.LabelSelector.model_validate(selector)
        return {n.name for n in everyone if chosen.matches(n.labels)}

    for size in range(1, min(_MAX_TERMS, len(candidates)) + 1):
        for combo in itertools.combinations(candidates, size):
            if not all(_names_model(combo, n, model) for n in members):
                continue
            selector = _selector([*combo, *splitting])
            if selected(selector) == want:
                return selector, ()
    # No few labels do it: every label read, and nodes it still catches excluded by name.
    notes: list[str] = []
    selector = _selector(terms)
    if not selector:
        selector = {
            "matchExpressions": [{"key": _HOSTNAME, "operator": "In", "values": sorted(want)}]
        }
        return selector, ("no accelerator label common to these nodes: selected by name",)
    extra = sorted(selected(selector) - want)
    if extra:
        selector.setdefault("matchExpressions", []).append(
            {"key": _HOSTNAME, "operator": "NotIn", "values": extra}
        )
        notes.append(
            "the labels also match " + ", ".join(extra) + ", which are not this model: "
            "excluded by name"
        )
    if not all(_names_model(terms, n, model) for n in members):
        notes.append("the selector's labels alone do not name the model: spec names it")
    return selector, tuple(notes)


def _tolerations(members: Sequence[Node], resources: set[str]) -> list[dict[str, Any]]:
    """Tolerations for the device plugins' taints that every member carries."""
    plugin_keys = accelerator_resources() | resources
    shared = set.intersection(*(set(n.taints) for n in members))
    return [
        {"key": key, "operator": "Exists", "effect": effect}
        for key, effect in sorted(shared)
        if key in plugin_keys
    ]


def _other_taints(members: Sequence[Node], resources: set[str]) -> list[str]:
    plugin_keys = accelerator_resources() | resources
    seen = sorted({f"{k}:{e}" for n in members for k, e in n.taints if k not in plugin_keys})
    return seen


def _pool(
    name: str,
    vendor: str,
    model: str,
    split: tuple[tuple[str, str], ...],
    members: Sequence[Node],
    everyone: Sequence[Node],
    driver: str = "",
) -> Pool:
    """A pool over `members`; with a DRA `driver`, of the devices it publishes, requested
    through the DeviceClass of the same name (NVIDIA's and AMD's drivers install one)."""
    entry = catalog.get(model)
    assert entry is not None
    resource = dra_resource(driver) if driver else entry.resource_name
    selector, notes = _choose(members, everyone, model, split)
    # The vendor's taint is the same whoever serves the devices: its key is the resource's.
    tolerations = _tolerations(members, {resource, entry.resource_name})
    others = _other_taints(members, {resource, entry.resource_name})
    if others:
        notes = (*notes, "also tainted, not tolerated: " + ", ".join(others))
    accelerator: dict[str, Any] = {"vendor": vendor, "model": model}
    if driver:
        accelerator["dra"] = {"driver": driver, "deviceClassName": driver}
        notes = (*notes, f"devices from the DRA driver {driver}: check its DeviceClass name")
    spec: dict[str, Any] = {"accelerator": accelerator, "nodeSelector": selector}
    if tolerations:
        spec["tolerations"] = tolerations
    manifest = {
        "apiVersion": f"{api.GROUP}/{api.VERSION}",
        "kind": "AcceleratorPool",
        "metadata": {"name": name},
        "spec": spec,
    }
    api.AcceleratorPoolSpec.model_validate(spec)  # what the CRD would refuse, refused here
    return Pool(
        name=name,
        vendor=vendor,
        model=model,
        nodes=tuple(n.name for n in members),
        resource=resource,
        devices={
            n.name: n.dra.get(driver, 0) if driver else n.devices.get(resource, 0) for n in members
        },
        manifest=manifest,
        notes=notes,
    )
