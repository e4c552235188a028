"""The placement-quality tables of bench/README.md (snapshot placement against the LP, where
the gap comes from, the replay), generated from bench/results/quality.json by
hack/bench_table.py between the quality markers, so the text never disagrees with the file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

START, END = "<!-- quality:start -->", "<!-- quality:end -->"
POLICIES = ("tessera-performance", "greedy-fastest", "blind", "random", "lp-informed")
READ_NOTHING = ("blind", "random")  # read no throughput: the same in every scenario


def _f(x: float, digits: int = 3, sign: bool = False) -> str:
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _ci(figure: Mapping[str, Any], digits: int = 3, sign: bool = False, scale: float = 1.0) -> str:
    lo, hi = figure["ci95"]
    body = f"{_f(figure['mean'] * scale, digits, sign)} "
    return body + f"[{_f(lo * scale, digits, sign)}, {_f(hi * scale, digits, sign)}]"


def _pct(figure: Mapping[str, Any]) -> str:
    lo, hi = figure["ci95"]
    return f"{figure['mean'] * 100:+.1f} % [{lo * 100:+.1f} %, {hi * 100:+.1f} %]"


def _negated(figure: Mapping[str, Any]) -> dict[str, Any]:
    lo, hi = figure["ci95"]
    return {**figure, "mean": -figure["mean"], "ci95": [-hi, -lo]}


def _rows(header: Iterable[str], body: Iterable[Iterable[str]]) -> list[str]:
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cells) + " |" for cells in body]
    return out


def snapshot(r: Mapping[str, Any]) -> list[str]:
    cells = {(x["scenario"], x["demand"], x["policy"]): x for x in r["snapshot"]}
    body = []
    for scenario in r["scenarios"]:
        for demand in r["demands"]:
            row = [scenario, f"{demand * 100:g} %"]
            for policy in POLICIES:
                x = cells.get((scenario, demand, policy))
                if x is None:
                    row.append("-")
                elif scenario != "exact" and policy in READ_NOTHING:
                    row.append("as exact")
                elif x["ci95"][0] == x["ci95"][1]:
                    row.append(_f(x["mean"]))
                else:
                    row.append(_ci(x))
            body.append(row)
    return _rows(["information", "demand", *POLICIES], body)


def decomposition(r: Mapping[str, Any]) -> list[str]:
    body = [
        [
            x["scenario"],
            f"{x['demand'] * 100:g} %",
            _ci(x["gap"]),
            _ci(x["planner"]),
            _ci(x["information"], sign=True),
            _ci(x["lpInformed"]),
        ]
        for x in r["decomposition"]
    ]
    head = ["information", "demand", "gap (1 - tessera)", "planner (1 - tessera exact)"]
    return _rows([*head, "information (exact - told)", "LP told the same"], body)


def replay(r: Mapping[str, Any]) -> list[str]:
    runs = {(x["load"], x["scenario"], x["policy"]): x for x in r["simulation"]}
    context = {(x["load"], x["scenario"]): x for x in r["context"]}
    body = []
    for load in r["loads"]:
        for scenario in r["scenarios"]:
            c = context.get((load, scenario))
            jct = [runs.get((load, scenario, p)) for p in POLICIES[:3]]
            if c is None or None in jct:
                continue
            hours = " / ".join(f"{x['avg_jct_h']['mean']:.2f}" for x in jct if x)
            speedup = c["jctSpeedupVsGreedy"]
            body.append(
                [
                    scenario,
                    f"{load:.2f}",
                    hours,
                    f"{_ci(speedup, 2)}x",
                    _pct(_negated(c["costSavingVsGreedy"])),  # a saving is a lower price
                    _pct(c["costJctChangeVsGreedy"]),
                    f"{jct[0]['policy_ms_per_call']:.1f}" if jct[0] else "-",
                ]
            )
    head = ["information", "load", "avg JCT h: performance / greedy-fastest / blind"]
    head += ["greedy-fastest over performance, avg JCT", "`cost`: $ a job vs greedy-fastest"]
    return _rows([*head, "`cost`: avg JCT vs greedy-fastest", "ms a plan()"], body)


def render(r: Mapping[str, Any]) -> str:
    """The three tables, each under its heading."""
    seeds, jobs, traces = r["snapshotSeeds"], r["simulationJobsPerTrace"], r["simulationSeeds"]
    parts = [
        f"### Snapshot placement: normalised throughput / LP optimum (mean [95 % CI], "
        f"{seeds} batches a demand)",
        "",
        *snapshot(r),
        "",
        "### Where the gap to the LP comes from (mean [95 % CI])",
        "",
        *decomposition(r),
    ]
    if r.get("simulation"):
        parts += [
            "",
            f"### Replay: {jobs} jobs a trace, {traces} traces a load (mean [95 % CI])",
            "",
            *replay(r),
        ]
    return "\n".join(parts) + "\n"
