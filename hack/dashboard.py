"""Writes the fleet dashboard, charts/tessera/dashboards/tessera-fleet.json, from code with the
Grafana Foundation SDK (`make chart`; `--check` fails when the committed file differs).

The chart ships it as a ConfigMap the Grafana sidecar picks up (dashboard.enabled); the file
is also the one to import by hand. Every panel's query is in PANELS, the one list the
dashboard, docs/operations.md and tests/unit/test_dashboard.py read: a query must name only
the metrics tessera.metrics defines, and the docs must show it as it is here."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.builders.common import StackingConfig
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import StackingMode
from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "charts" / "tessera" / "dashboards" / "tessera-fleet.json"
UID = "tessera-fleet"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """One panel: what it answers, its queries, and how it is drawn."""

    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat": the latest value, large
    stacked: bool = False
    width: int = 12


PANELS: tuple[Panel, ...] = (
    Panel(
        "Devices by pool and state",
        "Allocated and available devices of each pool over time: where the fleet is full.",
        (
            Query(
                'sum by (pool, state) (tessera_pool_devices{state=~"allocated|available"})',
                "{{pool}} {{state}}",
            ),
        ),
        stacked=True,
    ),
    Panel(
        "Utilisation by accelerator model",
        "Allocated over allocatable devices, per model: how full each generation is.",
        (
            Query(
                'sum by (model) (tessera_pool_devices{state="allocated"}) / '
                'sum by (model) (tessera_pool_devices{state="allocatable"})',
                "{{model}}",
            ),
        ),
        unit="percentunit",
    ),
    Panel(
        "Waiting workloads",
        "Workloads waiting for a pool (Pending).",
        (Query('sum(tessera_workloads{phase="Pending"})', "waiting"),),
        kind="stat",
        width=6,
    ),
    Panel(
        "Oldest wait",
        "How long the oldest waiting workload has waited.",
        (Query("max(tessera_oldest_pending_workload_seconds)", "oldest"),),
        unit="s",
        kind="stat",
        width=6,
    ),
    Panel(
        "Workloads by phase",
        "Workloads in each phase, as the operator last observed them.",
        (Query("sum by (phase) (tessera_workloads)", "{{phase}}"),),
        stacked=True,
    ),
    Panel(
        "Placements by pool and objective",
        "Placement decisions per minute, by the pool chosen and the workload's objective.",
        (
            Query(
                "sum by (pool, objective) (rate(tessera_placements_total[5m])) * 60",
                "{{pool}} {{objective}}",
            ),
        ),
        unit="short",
    ),
    Panel(
        "Placement latency",
        "Seconds from a Workload's creation until all its pods were created: p50, p95, p99.",
        tuple(
            Query(
                f"histogram_quantile({q}, sum by (le) "
                "(rate(tessera_placement_latency_seconds_bucket[5m])))",
                f"p{round(q * 100)}",
            )
            for q in (0.5, 0.95, 0.99)
        ),
        unit="s",
    ),
    Panel(
        "Planning cycle",
        "Seconds one planning cycle took (snapshot to decisions): p50 and p99.",
        tuple(
            Query(
                f"histogram_quantile({q}, sum by (le) "
                "(rate(tessera_placement_cycle_seconds_bucket[5m])))",
                f"p{round(q * 100)}",
            )
            for q in (0.5, 0.99)
        ),
        unit="s",
    ),
    Panel(
        "Fallbacks by pool",
        "Gangs withdrawn from a pool per hour: unschedulable pods or refused ones.",
        (Query("sum by (pool) (increase(tessera_fallbacks_total[1h]))", "{{pool}}"),),
    ),
    Panel(
        "Reconcile errors",
        "Errors while reconciling, per minute, by kind of object.",
        (Query("sum by (kind) (rate(tessera_reconcile_errors_total[5m])) * 60", "{{kind}}"),),
    ),
    Panel(
        "Degraded pools",
        "Pools some of whose nodes take no new pods (NotReady, cordoned, tainted).",
        (Query("sum(tessera_pool_degraded)", "degraded"),),
        kind="stat",
        width=6,
    ),
    Panel(
        "Operator replicas",
        "Replicas serving metrics, and how many hold the leader Lease (1 when healthy).",
        (
            Query("count(tessera_leader)", "replicas"),
            Query("sum(tessera_leader)", "leaders"),
        ),
        kind="stat",
        width=6,
    ),
    # Per team: the AcceleratorQuotas (docs/sharing.md).
    Panel(
        "Quota usage by team",
        "Normalised units each AcceleratorQuota uses, against its nominal: above it, it "
        "borrows capacity other teams leave idle (and may have to give it back).",
        (
            Query('sum by (quota) (tessera_quota_units{state="used"})', "{{quota}} used"),
            Query('sum by (quota) (tessera_quota_units{state="nominal"})', "{{quota}} nominal"),
        ),
    ),
    Panel(
        "Cost by team",
        "What each team's placed workloads cost per hour, at the pools' prices.",
        (Query("sum by (quota) (rate(tessera_cost_total[5m])) * 3600", "{{quota}}"),),
        stacked=True,
    ),
    Panel(
        "Preemptions by team and rule",
        "Workloads evicted per hour so that a waiting one of this team fits: WithinQuota "
        "(priority) or Reclaim (capacity others had borrowed).",
        (
            Query(
                "sum by (quota, rule) (increase(tessera_preemptions_total[1h]))",
                "{{quota}} {{rule}}",
            ),
        ),
    ),
    Panel(
        "Energy by team",
        "Average power of each team's placed devices, at the pools' watts per device.",
        (Query("sum by (quota) (rate(tessera_energy_joules_total[5m]))", "{{quota}}"),),
        unit="watt",
        stacked=True,
    ),
)


def _panel(spec: Panel, x: int, y: int) -> Any:
    builder: Any = stat.Panel() if spec.kind == "stat" else timeseries.Panel()
    builder = (
        builder.title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .grid_pos(GridPos(h=8, w=spec.width, x=x, y=y))
    )
    if spec.kind == "timeseries":
        builder = builder.fill_opacity(20 if spec.stacked else 10)
        if spec.stacked:
            builder = builder.stacking(StackingConfig().mode(StackingMode.NORMAL))
    for i, query in enumerate(spec.queries):
        builder = builder.with_target(
            prometheus.Dataquery()
            .expr(query.expr)
            .legend_format(query.legend)
            .ref_id(chr(ord("A") + i))
            .datasource(DATASOURCE)
        )
    return builder


def build() -> dict[str, Any]:
    board = (
        dashboard.Dashboard("Tessera: accelerator fleet")
        .uid(UID)
        .tags(["tessera", "accelerators"])
        .description(
            "Devices by pool and state, waiting workloads, placements, latency, fallbacks, "
            "the operator's health and each team's quota, cost and preemptions "
            "(docs/operations.md explains each panel)."
        )
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
        )
    )
    x = y = 0
    for spec in PANELS:
        if x + spec.width > 24:
            x, y = 0, y + 8
        board = board.with_panel(_panel(spec, x, y))
        x += spec.width
    built: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True, indent=2).encode(board.build()))
    return built


def text() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when the file differs")
    args = parser.parse_args()
    wanted = text()
    if args.check:
        if not OUT.exists() or OUT.read_text() != wanted:
            print(f"{OUT.relative_to(REPO)} is stale: run `make chart`", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(wanted)
    print(f"wrote {OUT.relative_to(REPO)} ({len(PANELS)} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
