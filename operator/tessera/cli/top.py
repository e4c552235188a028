"""`tessera top`: the fleet now, pool by pool: devices used and free, the workloads placed on
each, and the workloads waiting for a pool with why they wait, oldest first."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tessera.cli import live
from tessera.world.snapshot import World

EXAMPLES = """\
examples:
  # every pool, what runs on it and what waits (all namespaces)
  tessera top

  # the same as a kubectl plugin
  kubectl tessera top

  # only the pools, or only the workloads (placed and waiting)
  tessera top pools
  tessera top workloads

  # the workloads of one namespace (the pools' counts stay fleet-wide)
  tessera top -n ml

  # for scripts: the devices free on each pool
  tessera top -o json | jq -r '.pools[] | "\\(.name) \\(.devices.free)"'
"""

SECTIONS = ("pools", "workloads")
# Finished workloads hold no devices: they are not listed on their pool.
FINISHED = frozenset({"Succeeded", "Failed"})


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    top = sub.add_parser(
        "top",
        parents=[common],
        help="devices used and free per pool, what runs there and what waits",
        description=(
            "Per pool: its accelerator, the nodes that take new pods (of all its nodes), the\n"
            "devices used, free (on those nodes) and in all, and the workloads placed on it.\n"
            "Then the workloads on each pool, and those waiting for a pool, oldest first,\n"
            "with the reason their status gives. Read-only: one LIST each of nodes, pods,\n"
            "pools, workloads and namespaces."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument(
        "what",
        nargs="?",
        choices=SECTIONS,
        help="show only the pools, or only the workloads (default: both)",
    )
    scope = top.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        help="list only this namespace's workloads (pool counts stay fleet-wide)",
    )
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="list the workloads of every namespace (the default: pools are cluster-wide)",
    )
    live.add_output(top)
    top.set_defaults(func=live.guarded(_top))


def _top(args: argparse.Namespace) -> int:
    kube = live.connect(args)
    report = Top.of(live.world(kube), datetime.now(UTC), args.namespace)
    live.emit(args, report.data(args.what), lambda: report.table(args.what))
    return live.OK


@dataclass(frozen=True)
class PlacedRow:
    namespace: str
    name: str
    pool: str
    phase: str
    ready: int
    replicas: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class WaitingRow:
    namespace: str
    name: str
    created: datetime
    age: float  # seconds
    reason: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PoolRow:
    name: str
    accelerator: str
    nodes_usable: int
    nodes: int
    used: int
    free: int
    total: int
    problem: str = ""  # an invalid spec: no counts
    workloads: list[PlacedRow] = field(default_factory=list)


@dataclass(frozen=True)
class Top:
    pools: list[PoolRow]
    waiting: list[WaitingRow]

    @classmethod
    def of(cls, world: World, now: datetime, namespace: str | None = None) -> Top:
        """What `tessera top` shows of a World at `now`; `namespace` limits the workloads."""

        def listed(ns: str | None) -> bool:
            return namespace is None or ns == namespace

        placed: dict[str, list[PlacedRow]] = {}
        for key, where in world.placed_on(set(world.pools)):
            facts = world.workloads.get(key)
            if facts is None or not listed(facts.namespace) or facts.deleting:
                continue
            phase = str(facts.status.get("phase") or "Placed")
            if phase in FINISHED:
                continue
            placed.setdefault(where.pool, []).append(
                PlacedRow(
                    namespace=facts.namespace or "",
                    name=facts.name,
                    pool=where.pool,
                    phase=phase,
                    ready=int(facts.status.get("readyReplicas") or 0),
                    replicas=int(facts.spec.get("replicas") or 1),
                )
            )
        pools = []
        for name in sorted(world.pools):
            if name in world.layout.errors:
                problem = f"invalid spec: {world.layout.errors[name]}"
                pools.append(PoolRow(name, "-", 0, 0, 0, 0, 0, problem, placed.get(name, [])))
                continue
            pools.append(_pool_row(world, name, placed.get(name, [])))
        waiting = [
            WaitingRow(
                namespace=facts.namespace or "",
                name=facts.name,
                created=facts.created,
                age=max(0.0, (now - facts.created).total_seconds()),
                reason=str(facts.status.get("message") or "not yet planned"),
            )
            for key in world.unplaced
            if (facts := world.workloads.get(key)) is not None and listed(facts.namespace)
        ]
        waiting.sort(key=lambda w: (w.created, w.key))
        return cls(pools, waiting)

    def data(self, what: str | None = None) -> dict[str, Any]:
        """The report for `-o json|yaml`: plain numbers, ages in seconds."""
        out: dict[str, Any] = {}
        if what in (None, "pools"):
            out["pools"] = [
                {
                    "name": p.name,
                    "accelerator": p.accelerator,
                    "nodes": {"usable": p.nodes_usable, "total": p.nodes},
                    "devices": {"used": p.used, "free": p.free, "total": p.total},
                    **({"problem": p.problem} if p.problem else {}),
                    "workloads": [
                        {
                            "namespace": w.namespace,
                            "name": w.name,
                            "phase": w.phase,
                            "ready": w.ready,
                            "replicas": w.replicas,
                        }
                        for w in p.workloads
                    ],
                }
                for p in self.pools
            ]
        if what in (None, "workloads"):
            out["waiting"] = [
                {
                    "namespace": w.namespace,
                    "name": w.name,
                    "created": w.created.isoformat().replace("+00:00", "Z"),
                    "ageSeconds": int(w.age),
                    "reason": w.reason,
                }
                for w in self.waiting
            ]
        return out

    def table(self, what: str | None = None) -> str:
        """kubectl-style tables: the pools, the workloads placed on them, the waiting ones."""
        parts = []
        rows: list[tuple[str, ...]]
        if what in (None, "pools"):
            rows = [("POOL", "ACCELERATOR", "NODES", "USED", "FREE", "TOTAL", "WORKLOADS")]
            for p in self.pools:
                if p.problem:
                    rows.append((p.name, "-", "-", "-", "-", "-", p.problem))
                    continue
                rows.append(
                    (
                        p.name,
                        p.accelerator,
                        f"{p.nodes_usable}/{p.nodes}",
                        str(p.used),
                        str(p.free),
                        str(p.total),
                        str(len(p.workloads)),
                    )
                )
            parts.append(live.columns(rows) if self.pools else "No pools.")
        if what in (None, "workloads"):
            placed = [w for p in self.pools for w in p.workloads]
            if placed:
                rows = [("WORKLOAD", "POOL", "PHASE", "READY")]
                rows += [(w.key, w.pool, w.phase, f"{w.ready}/{w.replicas}") for w in placed]
                parts.append(live.columns(rows))
            if self.waiting:
                rows = [("WAITING", "AGE", "REASON")]
                rows += [(w.key, age(w.age), w.reason) for w in self.waiting]
                parts.append(live.columns(rows))
            if not placed and not self.waiting:
                parts.append("No workloads.")
        return "\n\n".join(parts)


def _pool_row(world: World, name: str, workloads: list[PlacedRow]) -> PoolRow:
    resource = world.resource_of(name)
    members = [world.nodes[n] for n in world.layout.members.get(name, [])]
    usable, free = world.capacity(name)
    used = sum(
        world.devices.used.get(n.name, {}).get(resource, 0)
        + world.devices.reserved.get(n.name, {}).get(resource, 0)
        for n in members
    )
    return PoolRow(
        name=name,
        accelerator=world.accelerator(name).model,
        nodes_usable=usable,
        nodes=len(members),
        used=used,
        free=free,
        total=sum(n.allocatable.get(resource, 0) for n in members),
        workloads=workloads,
    )


def age(seconds: float) -> str:
    """kubectl's short age: 45s, 12m, 3h, 2d."""
    s = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"
