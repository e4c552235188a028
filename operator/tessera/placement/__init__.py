"""Placement, the pure core: feasibility, scoring, contention, node-level fit, plan, explanations.
Imports only tessera.api and tessera.catalog: no kopf, kubernetes, prometheus_client or I/O."""

from tessera.placement.cycle import Prepared, plan
from tessera.placement.decision import Decision
from tessera.placement.explain import MAX_CANDIDATES, table
from tessera.placement.feasibility import satisfies
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
    "Prepared",
    "Release",
    "Scored",
    "Snapshot",
    "earliest_fit",
    "plan",
    "pool_state",
    "satisfies",
    "score",
    "table",
    "throughputs",
    "weights_for",
]
