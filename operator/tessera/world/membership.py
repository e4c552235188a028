"""Which nodes form each pool, and which of them take no new pods: a node two pools select
counts for one, the pool that counted it first (or the older one), and a node a pool's
tolerations or its state rule out is kept out of placement with its reason. Kept in the
WorldCache between Worlds: recomputed only when a node or a pool changed. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tessera import api
from tessera.placement.snapshot import Taint
from tessera.world.caches import WorldCache, by_id
from tessera.world.facts import NodeFacts, ObjectFacts, unfit_reason, untolerated


def pool_tolerations(spec: api.AcceleratorPoolSpec) -> list[dict[str, Any]]:
    """A pool's tolerations as core/v1 dicts (as copied onto its pods)."""
    return [t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations]


def membership(
    pools: Mapping[str, ObjectFacts],
    specs: Mapping[str, api.AcceleratorPoolSpec],
    nodes: dict[str, NodeFacts],
    cache: WorldCache,
) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
    """Nodes of each pool (of those whose spec parses: `specs`). A node two pools select
    stays with the pool that counted it first (this process remembers: WorldCache.claims),
    else goes to the older pool (then by name); the other pool reports the overlap. Devices
    are never counted twice, and a pool created (or deleted) beside another never takes a
    node with pods on it."""
    members: dict[str, list[str]] = {name: [] for name in specs}
    overlaps: dict[str, dict[str, str]] = {name: {} for name in specs}
    # Membership follows the pools' specs (their selectors), never their status.
    pools_key = tuple((name, facts.spec, facts.created) for name, facts in sorted(pools.items()))
    if cache.pools_key != pools_key:
        cache.pools_key, cache.owners, cache.base = pools_key, {}, {}
    ids = by_id(nodes)
    known, same = cache.membership
    if same is not None and same[0] is cache.pools_key and ids == known:
        return same[1], same[2]  # the same pools over the same nodes (objects)
    cached = cache.owners
    cache.owners = {}
    # Older pools first: without a remembered claim, the oldest selector keeps a node.
    by_age = sorted(specs, key=lambda name: (pools[name].created, name))
    # The selectors read a few label keys; nodes alike in those have the same owners, so
    # each pool's selector runs once per kind of node, not once per node (a cold start
    # over 5,000 nodes spent 0.4 s of its first cycle, under cProfile, matching 20 selectors
    # on each).
    read = sorted({k for s in specs.values() for k in s.node_selector.label_keys()})
    by_labels: dict[tuple[str | None, ...], list[str]] = {}
    claims = cache.claims
    for node in sorted(nodes.values(), key=lambda n: n.name):
        hit = cached.get(node.name)
        if hit is not None and hit[0] == node:
            owners = hit[1]
        else:
            alike = tuple(node.labels.get(k) for k in read)
            if alike not in by_labels:
                by_labels[alike] = [
                    name
                    for name in by_age
                    if not (spec := specs[name]).node_selector.is_empty()
                    and spec.node_selector.matches(node.labels)
                ]
            owners = by_labels[alike]
            claim = claims.get(node.name)
            if claim in owners and owners[0] != claim:
                owners = [claim, *(o for o in owners if o != claim)]
        cache.owners[node.name] = (node, owners)
        if owners:
            members[owners[0]].append(node.name)
            claims[node.name] = owners[0]
        else:
            claims.pop(node.name, None)
        for other in owners[1:]:
            overlaps[other][node.name] = owners[0]
    for name in claims.keys() - nodes.keys():
        del claims[name]
    cache.membership = (ids, (cache.pools_key, members, overlaps))
    return members, overlaps


def unfit_nodes(
    members: Mapping[str, list[str]],
    specs: Mapping[str, api.AcceleratorPoolSpec],
    nodes: Mapping[str, NodeFacts],
    cache: WorldCache,
) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, tuple[Taint, ...]]]]:
    """Each pool's nodes that take no new pods, with why, and those of them unfit only for
    taints, with the taints (kept with the membership: recomputed only when a node or a
    pool changed). Brings cache.nodes_epoch up to date (a new object only when the nodes or
    the unfit ones changed: World.nodes_epoch is compared by identity)."""
    known = cache.unfit
    if known is not None and known[0] is cache.membership[1]:
        return known[1], known[2]
    unfit: dict[str, dict[str, str]] = {}
    gated: dict[str, dict[str, tuple[Taint, ...]]] = {}
    for name, names in members.items():
        tolerations = pool_tolerations(specs[name])
        reasons = {n: why for n in names if (why := unfit_reason(nodes[n], tolerations))}
        unfit[name] = reasons
        gated[name] = {
            n: untolerated(nodes[n], tolerations)
            for n in reasons
            if reasons[n].startswith("Tainted")
        }
    cache.unfit = (cache.membership[1], unfit, gated)
    epoch = (frozenset(nodes), frozenset(n for d in unfit.values() for n in d))
    if epoch != cache.nodes_epoch:
        cache.nodes_epoch = epoch  # else the same object: compared by identity
    return unfit, gated
