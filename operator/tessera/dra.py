"""What Dynamic Resource Allocation objects say, as compact facts: a node's ResourceSlice (a
driver's devices on it) and an allocated ResourceClaim (the devices it holds). Read by the
World (tessera.world.dra) and by `tessera pools suggest`. Pure; imports nothing of Tessera."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SliceFacts:
    """One ResourceSlice of a node: its driver, node and pool, how many devices it lists,
    and the first device's attributes and capacity as text (what discovery reads; a
    driver publishes one kind of device per slice on the nodes of a pool)."""

    driver: str
    node: str
    pool: str
    devices: int
    attributes: Mapping[str, str]
    capacity: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    """An allocated ResourceClaim: (driver, pool, device) of each device allocated."""

    allocated: tuple[tuple[str, str, str], ...]


def _text(value: Mapping[str, Any]) -> str:
    """A DeviceAttribute's one value (string, int, bool or version) as text."""
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            return str(value[kind])
    return ""


def slice_facts(body: Mapping[str, Any]) -> SliceFacts | None:
    """A node-local ResourceSlice's facts; None for slices not bound to one node (network
    devices: no pool of nodes holds them)."""
    spec = body.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        return None
    devices = spec.get("devices") or []
    first = devices[0] if devices else {}
    return SliceFacts(
        driver=str(spec.get("driver", "")),
        node=str(node),
        pool=str((spec.get("pool") or {}).get("name", node)),
        devices=len(devices),
        attributes={k: _text(v) for k, v in (first.get("attributes") or {}).items()},
        capacity={
            k: str((v or {}).get("value", "")) for k, v in (first.get("capacity") or {}).items()
        },
    )


def claim_facts(body: Mapping[str, Any]) -> ClaimFacts | None:
    """An allocated claim's devices; None while it is not allocated (it holds nothing)."""
    results = (((body.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    if not results:
        return None
    return ClaimFacts(
        tuple((str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results)
    )
