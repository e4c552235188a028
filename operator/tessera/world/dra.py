"""Devices a Dynamic Resource Allocation driver serves, as the World counts them: a DRA
node's devices are the ResourceSlices its driver publishes for it (no node reports them as
allocatable), the ones in use are those allocated in ResourceClaims. Both are folded into
the same per-node figures device-plugin resources have, under the pool's resource name
(tessera.dra.dra_resource), so placement, pool status and fallback need nothing of
their own. Pure."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tessera.dra import ClaimFacts, SliceFacts, dra_labels, dra_resource
from tessera.world.facts import NodeFacts


@dataclass
class DRADevices:
    """What the slices and claims of one moment add to the World: each DRA node with its
    devices counted as allocatable, the devices allocated per node, and the discovery
    labels each node's devices imply."""

    nodes: dict[str, NodeFacts]
    used: dict[str, dict[str, int]]
    labels: dict[str, dict[str, str]]


def fold(
    nodes: Mapping[str, NodeFacts],
    slices: Mapping[Any, SliceFacts],
    claims: Mapping[Any, ClaimFacts],
    cache: dict[str, tuple[NodeFacts, tuple[tuple[str, int], ...], NodeFacts]],
) -> DRADevices:
    """The nodes with their DRA devices as capacity and allocatable (the same NodeFacts
    object while neither the node nor its devices change: `cache`, by node name), the
    devices claims hold per node, and each node's devices' discovery labels."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    labels: dict[str, dict[str, str]] = {}
    node_of: dict[tuple[str, str], str] = {}
    for facts in slices.values():
        if facts.node not in nodes:
            continue
        counts[facts.node][dra_resource(facts.driver)] += facts.devices
        node_of[facts.driver, facts.pool] = facts.node
        found = dra_labels(facts.driver, facts.attributes, facts.capacity)
        if found:
            labels.setdefault(facts.node, {}).update(found)
    merged = dict(nodes)
    for name, held in counts.items():
        key = tuple(sorted(held.items()))
        node = nodes[name]
        hit = cache.get(name)
        if hit is not None and hit[0] is node and hit[1] == key:
            merged[name] = hit[2]
            continue
        extra = dict(key)
        merged[name] = dataclasses.replace(
            node,
            capacity={**node.capacity, **extra},
            allocatable={**node.allocatable, **extra},
        )
        cache[name] = (node, key, merged[name])
    for name in set(cache) - set(counts):
        del cache[name]
    used: dict[str, dict[str, int]] = defaultdict(dict)
    for claim in claims.values():
        for driver, pool, _ in claim.allocated:
            where = node_of.get((driver, pool))
            if where is not None:
                resource = dra_resource(driver)
                used[where][resource] = used[where].get(resource, 0) + 1
    return DRADevices(merged, dict(used), labels)
