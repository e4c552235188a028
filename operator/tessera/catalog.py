"""The accelerator catalog: the models Tessera knows, read from the packaged data/catalog.yaml.
Pure data and lookups; imports only tessera.api (no kopf, kubernetes or prometheus_client)."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Annotated

import yaml
from pydantic import Field

from tessera.api import MODEL_PATTERN, Precision, Vendor, _Model

_DATA = "data/catalog.yaml"


class Sources(_Model):
    """Where the figures of one model come from: a URL or a document for each group."""

    specs: str = Field(min_length=1, description="Memory, bandwidth and TFLOPS.")
    power: str = Field(min_length=1, description="TDP.")
    price: str = Field(min_length=1, description="Default price per device-hour.")


class AcceleratorModel(_Model):
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


@functools.cache
def catalog() -> dict[str, AcceleratorModel]:
    """Every model of the packaged catalog by key, validated once and cached."""
    text = resources.files("tessera").joinpath(_DATA).read_text(encoding="utf-8")
    raw = yaml.safe_load(text)["models"]
    return {key: AcceleratorModel.model_validate({"key": key, **body}) for key, body in raw.items()}


def model_names() -> list[str]:
    """The catalog's model keys, sorted (CRD generation uses them for variant keys)."""
    return sorted(catalog())


def get(model: str) -> AcceleratorModel | None:
    """The catalog entry for a model key, or None when the catalog does not know it."""
    return catalog().get(model)
