"""Placement, the pure core: feasibility with reasons, scoring, node-level gang fit, the
planning cycle and its explanations. Imports tessera.api and tessera.catalog only: no kopf,
kubernetes or prometheus_client, no clocks, randomness, environment or I/O."""

from tessera.placement.cycle import Decision, plan
from tessera.placement.explain import MAX_CANDIDATES, table
from tessera.placement.feasibility import reasons, satisfies
from tessera.placement.fit import NodeFit, earliest_fit
from tessera.placement.scoring import OBJECTIVE_WEIGHTS, Scored, score, throughputs, weights_for
from tessera.placement.snapshot import (
    NodeState,
    PendingWorkload,
    PoolState,
    PoolView,
    Release,
    Snapshot,
    pool_state,
)

__all__ = [
    "MAX_CANDIDATES",
    "OBJECTIVE_WEIGHTS",
    "Decision",
    "NodeFit",
    "NodeState",
    "PendingWorkload",
    "PoolState",
    "PoolView",
    "Release",
    "Scored",
    "Snapshot",
    "earliest_fit",
    "plan",
    "pool_state",
    "reasons",
    "satisfies",
    "score",
    "table",
    "throughputs",
    "weights_for",
]
