"""The accelerator catalog (packaged data/catalog.yaml), label discovery and pool resolution.
Imports only tessera.api and tessera.dra: no kopf, kubernetes or prometheus_client, no I/O
but its data file."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Literal

import yaml
from pydantic import Field

from tessera import dra
from tessera.api import (
    MODEL_PATTERN,
    AcceleratorPoolSpec,
    Model,
    Precision,
    ResolvedAccelerator,
    Vendor,
)

_DATA = "data/catalog.yaml"
UNKNOWN = "Unknown"

# Used when neither the spec nor the catalog names the device-plugin resource or stack.
DEFAULT_RESOURCE = {
    Vendor.NVIDIA: "nvidia.com/gpu",
    Vendor.AMD: "amd.com/gpu",
    Vendor.GOOGLE: "google.com/tpu",
    Vendor.AWS: "aws.amazon.com/neuron",
}
_STACK_BY_RESOURCE_PREFIX = {
    "nvidia.com/": "cuda",
    "amd.com/": "rocm",
    "habana.ai/": "synapse",
    "gpu.intel.com/": "oneapi",
    "google.com/": "xla",
    "aws.amazon.com/": "neuron",
}


class Sources(Model):
    """Where the figures of one model come from: a URL or a document for each group."""

    specs: str = Field(min_length=1, description="Memory, bandwidth and TFLOPS.")
    power: str = Field(min_length=1, description="TDP.")
    price: str = Field(min_length=1, description="Default price per device-hour.")


class AcceleratorModel(Model):
    """One catalog entry: the published facts about an accelerator model, per device."""

    key: Annotated[str, Field(pattern=MODEL_PATTERN)]
    vendor: Vendor
    architecture: str
    year: int = Field(ge=2010, le=2100)
    memory_gib: float = Field(gt=0, alias="memoryGiB")
    memory_bandwidth_tbps: float = Field(gt=0, alias="memoryBandwidthTBps")
    peak_tflops: dict[Precision, Annotated[float, Field(gt=0)]] = Field(alias="peakTFLOPS")
    tdp_watts: float = Field(gt=0)
    price_per_device_hour: float = Field(gt=0)
    resource_name: str
    software: str
    interconnect: tuple[str, ...] = ()
    sources: Sources
    notes: tuple[str, ...] = ()
    labels: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    instance_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Index:
    """The catalog's discovery data, arranged for lookups."""

    models: dict[str, AcceleratorModel]
    by_label: dict[str, dict[str, frozenset[str]]]  # key -> normalised value -> models
    instance_types: tuple[tuple[str, str], ...]  # (lower-case glob, model)
    memory_labels: tuple[str, ...]
    read: frozenset[str]  # every label key discovery reads: the rest cannot change its result


def _norm(value: str) -> str:
    return re.sub(r"[\s_]+", "-", value.strip()).lower()


@functools.cache
def _index() -> _Index:
    text = resources.files("tessera").joinpath(_DATA).read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    models = {k: AcceleratorModel.model_validate({"key": k, **v}) for k, v in raw["models"].items()}
    by_label: dict[str, dict[str, set[str]]] = {}
    for m in models.values():
        for key, values in m.labels.items():
            for value in values:
                by_label.setdefault(key, {}).setdefault(_norm(value), set()).add(m.key)
    for vendor, labels in raw.get("vendorLabels", {}).items():
        of_vendor = {m.key for m in models.values() if m.vendor == vendor}
        for key, values in labels.items():
            for value in values:
                by_label.setdefault(key, {}).setdefault(_norm(value), set()).update(of_vendor)
    globs = tuple((g.lower(), m.key) for m in models.values() for g in m.instance_types)
    memory_labels = tuple(raw.get("memoryLabels", ()))
    return _Index(
        models=models,
        by_label={k: {v: frozenset(s) for v, s in vs.items()} for k, vs in by_label.items()},
        instance_types=globs,
        memory_labels=memory_labels,
        read=frozenset(by_label) | {INSTANCE_TYPE_LABEL} | frozenset(memory_labels),
    )


def catalog() -> dict[str, AcceleratorModel]:
    """Every model of the packaged catalog by key, validated once and cached."""
    return _index().models


def model_names() -> list[str]:
    """The catalog's model keys, sorted (CRD generation uses them for variant keys)."""
    return sorted(catalog())


def get(model: str) -> AcceleratorModel | None:
    """The catalog entry for a model key, or None when the catalog does not know it."""
    return catalog().get(model)


# --- Discovery: node labels -> model ---------------------------------------------------------

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
_GFD_PRODUCT = "nvidia.com/gpu.product"
_GFD_SUFFIXES = ("-shared",)  # GFD appends -SHARED when devices are time-sliced


class Discovery(Model):
    """What a node's (or a pool's) labels say about its accelerator."""

    status: Literal["identified", "none", "unknown", "ambiguous", "conflict"] = Field(
        description="identified: one model; none: no accelerator labels; unknown: labels "
        "name nothing the catalog knows; ambiguous: several models fit; conflict: labels disagree."
    )
    model: str | None = Field(None, description="The catalog key when identified.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="The accelerator labels that were read."
    )
    candidates: tuple[str, ...] = Field((), description="Models the labels leave open.")
    message: str = Field("", description="One sentence for a status condition.")


def _memory_gib(value: str) -> float | None:
    """Memory per device from a label: MiB as GFD and Karpenter write it, or `192G`."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([GgMm]i?[Bb]?)?\s*", value)
    if not m:
        return None
    number, unit = float(m.group(1)), (m.group(2) or "").lower()
    return number if unit.startswith("g") else number / 1024


def labelled_memory_gib(nodes: Mapping[str, Mapping[str, str]]) -> float:
    """Memory per device as the nodes' labels (or their DRA devices) give it, the least of
    the pool's nodes; 0.0 when none says. Fills in for a model the catalog does not know."""
    found = []
    for labels in nodes.values():
        said = (_memory_gib(labels[k]) for k in _index().memory_labels if k in labels)
        gib = next((g for g in said if g), None)
        if gib is not None:
            found.append(gib)
    return round(min(found), 1) if found else 0.0


def _lookup(key: str, value: str) -> frozenset[str] | None:
    """Models a label names; None when the key identifies accelerators but the value is new."""
    if key == INSTANCE_TYPE_LABEL:
        low = value.lower()
        return frozenset(m for g, m in _index().instance_types if fnmatch.fnmatchcase(low, g))
    values = _index().by_label.get(key)
    if values is None:
        return frozenset()
    norm = _norm(value)
    if key == _GFD_PRODUCT:
        for suffix in _GFD_SUFFIXES:
            norm = norm.removesuffix(suffix)
    return values.get(norm)


def discover(labels: Mapping[str, str]) -> Discovery:
    """Identify a node's accelerator from its labels; never raises, whatever the labels say.
    Only the labels discovery reads are looked at, and the answer is remembered for them: the
    nodes of a pool share those labels, and a cold start over 5,000 nodes spent 0.7 s of its
    first cycle here (under cProfile) looking the same ones up again."""
    read_keys = _index().read
    return _discover(tuple(sorted((k, v) for k, v in labels.items() if k in read_keys)))


@functools.lru_cache(maxsize=1024)
def _discover(pairs: tuple[tuple[str, str], ...]) -> Discovery:
    labels = dict(pairs)
    read: dict[str, str] = {}
    sets: list[tuple[str, frozenset[str]]] = []
    unrecognised: dict[str, str] = {}
    for key in sorted(labels):
        found = _lookup(key, labels[key])
        if found is None:
            unrecognised[key] = labels[key]
            read[key] = labels[key]
        elif found:
            sets.append((key, found))
            read[key] = labels[key]
    if not sets:
        if unrecognised:
            said = ", ".join(f"{k}={v}" for k, v in unrecognised.items())
            return Discovery(
                status="unknown", labels=read, message=f"unknown model: the catalog has no {said}"
            )
        return Discovery(status="none", message="no accelerator labels on the node")
    left = functools.reduce(lambda a, b: a & b, (s for _, s in sets))
    if not left:
        said = "; ".join(f"{k}={labels[k]} says {'/'.join(sorted(s))}" for k, s in sets)
        return Discovery(status="conflict", labels=read, message=f"labels disagree: {said}")
    if len(left) > 1:
        left = _narrow_by_memory(left, labels, read)
    if len(left) == 1:
        (model,) = left
        return Discovery(status="identified", model=model, labels=read, candidates=(model,))
    options = tuple(sorted(left))
    return Discovery(
        status="ambiguous",
        labels=read,
        candidates=options,
        message=f"labels fit several models: {', '.join(options)}; set spec.accelerator.model",
    )


def _narrow_by_memory(
    left: frozenset[str], labels: Mapping[str, str], read: dict[str, str]
) -> frozenset[str]:
    models = catalog()
    for key in _index().memory_labels:
        gib = _memory_gib(labels[key]) if key in labels else None
        if gib is None:
            continue
        close = frozenset(m for m in left if abs(models[m].memory_gib - gib) <= 0.1 * gib)
        if close:
            read[key] = labels[key]
            return close
    return left


def discover_pool(nodes: Mapping[str, Mapping[str, str]]) -> Discovery:
    """Identify a pool's accelerator from its nodes' labels (node name -> labels)."""
    found: dict[str, list[str]] = {}
    first: Discovery | None = None
    for name in sorted(nodes):
        d = discover(nodes[name])
        if d.status == "identified" and d.model:
            found.setdefault(d.model, []).append(name)
            first = first or d
        elif d.status in ("conflict", "ambiguous", "unknown"):
            return d.model_copy(update={"message": f"node {name}: {d.message}"})
    if len(found) > 1:
        said = "; ".join(f"{m} on {', '.join(ns)}" for m, ns in sorted(found.items()))
        return Discovery(
            status="conflict",
            candidates=tuple(sorted(found)),
            message=f"nodes carry different accelerators: {said}",
        )
    if first is None:
        return Discovery(status="none", message="no node of the pool has accelerator labels")
    return first


# --- Resolution: catalog + labels + spec overrides -> the facts placement scores with -----


class Accelerator(Model):
    """A pool's accelerator as placement sees it: catalog facts with the pool's overrides."""

    vendor: Vendor
    model: str
    source: Literal["spec", "labels", "unknown"]
    resource_name: str
    memory_gib: float = 0.0
    memory_bandwidth_tbps: float = 0.0
    peak_tflops: dict[Precision, float] = Field(default_factory=dict)
    cost_per_device_hour: float = 0.0
    power_watts: float = 0.0
    software: str | None = None  # the stack it needs: cuda, rocm, synapse, oneapi, xla, neuron
    features: frozenset[str] = frozenset()  # interconnect and other capabilities
    units_per_device: float = 0.0  # normalised units (tessera.catalog.units_per_device)

    def to_api(self) -> ResolvedAccelerator:
        """The status.accelerator shape of the AcceleratorPool."""
        return ResolvedAccelerator(
            vendor=self.vendor,
            model=self.model,
            source=self.source,
            resource_name=self.resource_name,
            memory_gib=self.memory_gib,
            peak_tflops=dict(self.peak_tflops),
            cost_per_device_hour=self.cost_per_device_hour,
            power_watts=self.power_watts,
            units_per_device=self.units_per_device,
        )


class Resolution(Model):
    """The outcome of resolving a pool's accelerator, with what stands in the way of using it."""

    accelerator: Accelerator
    status: Literal["resolved", "unknown", "conflict"]
    problems: tuple[str, ...] = ()
    discovery: Discovery | None = None

    @property
    def usable(self) -> bool:
        """Whether placement can score this pool: known memory and FLOPS, no conflict."""
        return not self.problems


# The device one normalised unit stands for, unless the operator is told another
# (`tessera run --unit-reference`): quotas count every pool's devices in these.
REFERENCE_MODEL = "H100-SXM5-80GB"


def dense_tflops(tflops: Mapping[Precision, float]) -> float:
    """What a device's units are counted from: dense bf16 TFLOPS (the precision training
    and serving mostly run in), else fp16, else its fastest precision given."""
    return (
        tflops.get(Precision.BF16) or tflops.get(Precision.FP16) or max(tflops.values(), default=0)
    )


def units_per_device(
    accelerator: Accelerator, reference: str = REFERENCE_MODEL, override: float | None = None
) -> float:
    """Normalised units of one device: its dense throughput over the reference model's (an
    H100 is 1.0, an A100 0.32, a B200 2.27), or the pool's own figure when it gives one."""
    if override is not None:
        return override
    entry = get(reference)
    base = dense_tflops(entry.peak_tflops) if entry else 0.0
    if not base:
        raise ValueError(f"unit reference {reference} is not a catalog model with bf16 TFLOPS")
    return round(dense_tflops(accelerator.peak_tflops) / base, 4)


def stack_for(resource_name: str) -> str | None:
    """The software stack a device-plugin resource implies (nvidia.com/ -> cuda, ...)."""
    for prefix, stack in _STACK_BY_RESOURCE_PREFIX.items():
        if resource_name.startswith(prefix):
            return stack
    return None


def resolve_accelerator(
    spec: AcceleratorPoolSpec,
    nodes: Mapping[str, Mapping[str, str]] | None = None,
    reference: str = REFERENCE_MODEL,
) -> Resolution:
    """Resolve a pool's accelerator: the spec's model (or the nodes' labels) looked up in the
    catalog, then the spec's overrides applied. Unknown models and conflicts are results with
    problems in sentences, never exceptions."""
    want = spec.accelerator
    found = discover_pool(nodes or {})
    problems: list[str] = []
    status: Literal["resolved", "unknown", "conflict"] = "resolved"
    source: Literal["spec", "labels", "unknown"]
    if want.model:
        source, key = "spec", want.model
        if found.status == "identified" and found.model != want.model:
            status = "conflict"
            problems.append(f"spec names {want.model} but the nodes' labels say {found.model}")
    elif found.status == "identified" and found.model:
        source, key = "labels", found.model
    else:
        source, key = "unknown", UNKNOWN
        if found.status == "conflict":
            status = "conflict"
            problems.append(found.message)
        else:
            status = "unknown"
    entry = get(key)
    if entry is not None and entry.vendor != want.vendor:
        status = "conflict"
        problems.append(f"spec says vendor {want.vendor.value} but {key} is {entry.vendor.value}")
    tflops: dict[Precision, float] = dict(entry.peak_tflops) if entry else {}
    tflops.update(want.peak_tflops)
    resource = (
        (dra.dra_resource(want.dra.driver) if want.dra else None)
        or want.resource_name
        or (entry.resource_name if entry else None)
        or DEFAULT_RESOURCE.get(want.vendor, "")
    )
    accelerator = Accelerator(
        vendor=want.vendor,
        model=key,
        source=source,
        resource_name=resource,
        memory_gib=want.memory_gib
        or (entry.memory_gib if entry else labelled_memory_gib(nodes or {})),
        memory_bandwidth_tbps=want.memory_bandwidth_tbps
        or (entry.memory_bandwidth_tbps if entry else 0.0),
        peak_tflops=tflops,
        cost_per_device_hour=spec.cost_per_device_hour
        if spec.cost_per_device_hour is not None
        else (entry.price_per_device_hour if entry else 0.0),
        power_watts=spec.power_watts or (entry.tdp_watts if entry else 0.0),
        software=entry.software if entry else stack_for(want.resource_name or resource),
        features=frozenset((entry.interconnect if entry else ()) + tuple(spec.features)),
    )
    units = units_per_device(accelerator, reference, want.units_per_device)
    accelerator = accelerator.model_copy(update={"units_per_device": units})
    if entry is None and status != "conflict":
        status = "unknown"
        missing = [
            name
            for name, value in (
                ("memoryGiB", accelerator.memory_gib),
                ("peakTFLOPS", accelerator.peak_tflops),
            )
            if not value
        ]
        if missing and source == "spec":
            problems.append(
                f"model {key} is not in the catalog: set spec.accelerator.{' and '.join(missing)}"
            )
        elif missing:
            problems.append(
                f"{found.message}: set spec.accelerator.model, or {' and '.join(missing)}"
            )
    if not resource:
        problems.append(
            f"no device-plugin resource known for vendor {want.vendor.value}: "
            "set spec.accelerator.resourceName"
        )
    return Resolution(
        accelerator=accelerator, status=status, problems=tuple(problems), discovery=found
    )
