"""The benchmark table of README.md and bench/README.md, generated from bench/results/*.json:
each target, what was measured, the same run's baseline; and bench/README.md's placement
quality tables (hack/quality_tables.py). Standard library only; no tessera."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import quality_tables  # hack/quality_tables.py, beside this file

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
README = REPO / "README.md"
BENCH_README = REPO / "bench" / "README.md"
DOCS = (README, BENCH_README)  # each holds the table between the markers
QUALITY = (quality_tables.START, quality_tables.END)  # bench/README.md's quality tables
START, END = "<!-- bench:start -->", "<!-- bench:end -->"

Row = tuple[str, str, str, str, str]  # benchmark, target, measured, same-run baseline, met


def load(name: str, results: Path) -> dict[str, Any] | None:
    path = results / name
    return json.loads(path.read_text()) if path.exists() else None


def number(value: float, digits: int = 3) -> str:
    """A figure as the results hold it, thousands separated: 1,000; 0.759; 247.7."""
    return f"{value:,}" if isinstance(value, int) else f"{round(value, digits):,}"


def met(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "**no**"


def planning(r: dict[str, Any]) -> Iterator[Row]:
    """The all-distinct run's targets (median [min, max] of the repeats, CPU time), beside
    the same figure of the run drawn from a few hundred specs; then that run as context."""
    f, runs = r["fleet"], r["runs"]
    head = f"planning: {f['nodes']:,} nodes, {f['pools']} pools, {r['workloads']:,} pending"
    shared = runs["templates"]
    for t in r["targets"]:
        fig, unit_ = t["figure"], t["unit"]
        ctx = shared[t["key"]]
        measured = f"{fig['median']:g} {unit_} [{fig['min']:g}, {fig['max']:g}]"
        baseline = (
            f"{shared['distinctSpecs']:,} specs: {ctx['median']:g} {unit_} "
            f"[{ctx['min']:g}, {ctx['max']:g}]"
        )
        verdict = {"met": True, "not met": False}.get(t["verdict"])
        name = f"{head}, all distinct (CPU time, {r['repeat']} runs)"
        yield name, t["target"], measured, baseline, met(verdict)
    c, p = shared["cycleCpuSeconds"], shared["p99DecisionMs"]
    yield (
        f"{head} of {shared['distinctSpecs']:,} specs (CPU time, {r['repeat']} runs)",
        "context, no target",
        f"cycle {c['median']:g} s [{c['min']:g}, {c['max']:g}], "
        f"p99 {p['median']:g} ms [{p['min']:g}, {p['max']:g}]",
        "",
        "-",
    )


def cycles(r: dict[str, Any]) -> Iterator[Row]:
    p, cpu = r["parameters"], r["cycleCpuMs"]
    name = f"reconcile loop, stub API: {p['nodes']:,} nodes, {p['workloads']:,} Workloads"
    measured = f"{cpu['mean']} ms CPU a cycle, p90 {cpu['p90']} ms"
    yield name, "diagnostic, no target", measured, "", "-"


def quality(r: dict[str, Any]) -> Iterator[Row]:
    """Each target with its figure and 95 % interval (see `confidence`), then the gap to the
    LP optimum split into planner and information at 100 % demand, as a diagnostic."""
    name = (
        f"placement quality: {r['snapshotSeeds']} batches a demand, "
        f"{len(r['scenarios'])} information scenarios"
    )
    snap = {(s["demand"], s["scenario"], s["policy"]): s for s in r["snapshot"]}
    for t in r["targets"]:
        fig = t["figure"]
        if "baseline" not in t:  # the floor with exact throughputs
            low = min(t["decidedOn"], key=lambda d: fig[d]["ci95"][0])
            top = max(fig, key=float)
            measured = (
                f"{_ci(fig[low])} at {_pct(low)} (lowest), worst seed "
                f"{min(fig[d]['min'] for d in t['decidedOn']):.3f}; {_ci(fig[top])} at {_pct(top)}"
            )
            greedy = snap[(float(low), t["scenario"], "greedy-fastest")]
            baseline = f"greedy-fastest {greedy['mean']:.3f} at {_pct(low)}"
        else:
            worst = t["worstDemand"]
            ours, theirs = t["tesseraToLp"], t["baselineToLp"]
            measured = (
                f"{_ci(fig[worst], signed=True)} at {_pct(worst)} (lowest); "
                f"{ours['1.0']['mean']:.3f} of the LP at 100 %"
            )
            baseline = f"{t['baseline']} {theirs['1.0']['mean']:.3f} of the LP at 100 %"
        yield name, t["target"], measured, baseline, _verdict(t["verdict"])
    for d in r["decomposition"]:
        if d["demand"] == 1.0:
            target = f"gap to the LP at 100 % demand, {d['scenario']} information: why"
            measured = (
                f"{d['gap']['mean']:.3f} = planner {_ci(d['planner'])} "
                f"+ information {_ci(d['information'])}"
            )
            baseline = f"LP told the same: {d['lpInformed']['mean']:.3f} of the LP"
            yield name, target, measured, baseline, "-"


def _pct(demand: str) -> str:
    return f"{float(demand):.0%}".replace("%", " %")


def _ci(figure: dict[str, Any], signed: bool = False) -> str:
    """A mean with its 95 % interval: 0.993 [0.990, 0.996]."""
    f = "+.3f" if signed else ".3f"
    lo, hi = figure["ci95"]
    return f"{figure['mean']:{f}} [{lo:{f}}, {hi:{f}}]"


def _verdict(verdict: str) -> str:
    """A quality target's verdict (met / not met / undecided) in the table's words."""
    return {"met": "yes", "not met": "**no**"}.get(verdict, "undecided")


def sharing(r: dict[str, Any]) -> Iterator[Row]:
    name = f"team quotas: {len(r['teams'])} teams, {r['jobsPerTrace']:,} jobs x {r['seeds']} traces"
    for t in r["targets"]:
        f = t["figure"]
        measured = f"{f['median']:g} [{f['min']:g}, {f['max']:g}]"
        verdict = {"met": True, "not met": False}.get(t["verdict"])
        yield name, t["target"], measured, "same traces, other policies", met(verdict)


def unit(threshold: str) -> str:
    """The unit a threshold's figure is in: `>= 0.8x` -> x, `<= 1 s` -> ` s`, `== 0` -> none."""
    last = threshold.rsplit(maxsplit=1)[-1]
    if last.endswith("x") or last.endswith("/s"):
        return last.lstrip("0123456789.,")
    return "" if last[0].isdigit() else f" {last}"


def fleet(r: dict[str, Any]) -> Iterator[Row]:
    if "repeats" in r:
        yield from fleet_repeated(r)
        return
    # A run from before the repeats (one run, fixed phase order, the bare scheduler as the
    # headline): its verdicts were against withdrawn targets, so none is shown.
    started = str(r.get("startedAt", ""))[:10]
    yield (
        f"fleet ({r['scale']})",
        "not yet run as restated (repeats, rotated phases, the floor as the baseline)",
        f"one run of {started}: bench/results/fleet-{r['scale']}.json",
        "",
        "undecided",
    )


# The bare scheduler's figures shown beside Tessera's and the floor's, as context (no target).
FLEET_CONTEXT = ("bound pods/s, ", "creation to all bound p99, ")
FLEET_VERDICT = {"met": "yes", "not met": "**no**", "undecided": "undecided"}


def fleet_spread(figure: dict[str, Any] | None, unit_: str) -> str:
    """A figure over a run's repeats: `0.97x [0.93, 1.02]` (median [min, max]), or its one
    value where every repeat measured the same."""
    if figure is None:
        return "-"
    median = number(figure["median"]) + unit_
    if figure["min"] == figure["max"]:
        return median
    return f"{median} [{number(figure['min'])}, {number(figure['max'])}]"


def fleet_repeated(r: dict[str, Any]) -> Iterator[Row]:
    """A run of repeats (bench/fleet_rotation.py): each target's median [min, max] and its
    verdict (met, not met, or undecided where the spread straddles the target); then the bare
    scheduler beside Tessera and the floor, as context without a verdict."""
    p = r["parameters"]
    runs = p["repeats"]
    rate = p.get("clientPodsPerSecond")
    paced = f", offered {rate:g} pods/s" if rate else ""
    name = (
        f"fleet ({r['scale']}{paced}, median of {runs})"
        if runs > 1
        else f"fleet ({r['scale']}{paced}, 1 run)"
    )
    for t in r["targets"]:
        measured = fleet_spread(t.get("spread"), unit(t["threshold"]))
        verdict = FLEET_VERDICT.get(t.get("verdict") or "", "-")
        yield name, f"{t['target']} {t['threshold']}", measured, fleet_baseline(r, t), verdict
    for c in r.get("context", []):
        if c["figure"].startswith(FLEET_CONTEXT):
            tessera, floor = (fleet_spread(c[side], c["unit"]) for side in ("tessera", "floor"))
            bare = fleet_spread(c["baseline"], c["unit"])
            if c["baseline"] and c["baseline"]["n"] < runs:  # run in the first repeats only
                bare += f" ({c['baseline']['n']} of {runs} repeats)"
            target = f"{c['figure']} (context, no target)"
            baseline = f"floor {floor}; bare scheduler, pods not pinned: {bare}"
            yield name, target, f"Tessera {tessera}", baseline, "-"


def fleet_baseline(r: dict[str, Any], target: dict[str, Any]) -> str:
    """The same run's floor operator beside a target, where it has one (its `baseline`)."""
    return str(target.get("baseline", ""))


def rows(results: Path = RESULTS) -> list[Row]:
    """Every row, in a fixed order: the pure benchmarks, then the fleet's runs."""
    out: list[Row] = []
    for name, rows_of in (
        ("planning.json", planning),
        ("cycles.json", cycles),
        ("quality.json", quality),
        ("sharing.json", sharing),
        ("fleet-default.json", fleet),
        ("fleet-large.json", fleet),
    ):
        if (r := load(name, results)) is not None:
            out.extend(rows_of(r))
    paced = sorted(results.glob("fleet-*-rate*.json"), key=lambda p: (len(p.name), p.name))
    for path in paced:
        out.extend(fleet(json.loads(path.read_text())))
    return out


def table(rows_: list[Row]) -> str:
    lines = [
        "| benchmark | target | measured | same run's baseline | met |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(cell or "" for cell in row) + " |" for row in rows_]
    return "\n".join(lines) + "\n"


def rewrite(text: str, table_: str, start_: str = START, end_: str = END) -> str:
    """A document's text with the table between the markers replaced."""
    head, start, rest = text.partition(start_)
    _, end, tail = rest.partition(end_)
    if not start or not end:
        raise SystemExit(f"no {start_} ... {end_} markers to put the table between")
    return f"{head}{start_}\n{table_}{end_}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rewrite the benchmark table from the results.")
    parser.add_argument("--check", action="store_true", help="fail if a table is stale")
    args = parser.parse_args(argv)
    table_ = table(rows())
    stale = []
    for doc in DOCS:
        text = doc.read_text()
        new = rewrite(text, table_)
        if doc == BENCH_README and (quality_ := load("quality.json", RESULTS)) is not None:
            new = rewrite(new, quality_tables.render(quality_), *QUALITY)
        if new == text:
            continue
        stale.append(doc.relative_to(REPO))
        if not args.check:
            doc.write_text(new)
            print(f"{doc.relative_to(REPO)}: benchmark table rewritten from bench/results/")
    if args.check and stale:
        names = ", ".join(map(str, stale))
        print(f"stale benchmark table in {names}: run `make bench-table`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
