"""The benchmark table of README.md and bench/README.md, generated from bench/results/*.json:
each target, what was measured, the same run's baseline. Standard library only; no tessera."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
README = REPO / "README.md"
DOCS = (README, REPO / "bench" / "README.md")  # each holds the table between the markers
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
# A paced run (--rate) is about latency at an offered rate: only these of its targets are shown.
PACED = ("bound pods/s vs bare scheduler", "creation to all bound")

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
    f = r["fleet"]
    name = f"planning: {f['nodes']:,} nodes, {f['pools']} pools, {r['workloads']:,} pending"
    measured = {
        "cycle": f"{r['cycleCpuSeconds']['median']} s CPU (median)",
        "p99": f"{r['perDecisionMs']['p99']} ms",
    }
    for target, ok in r["targets"].items():
        yield name, target, measured["cycle" if "cycle" in target else "p99"], "", met(ok)


def cycles(r: dict[str, Any]) -> Iterator[Row]:
    p, cpu = r["parameters"], r["cycleCpuMs"]
    name = f"reconcile loop, stub API: {p['nodes']:,} nodes, {p['workloads']:,} Workloads"
    measured = f"{cpu['mean']} ms CPU a cycle, p90 {cpu['p90']} ms"
    yield name, "diagnostic, no target", measured, "", "-"


def quality(r: dict[str, Any]) -> Iterator[Row]:
    noise = (
        f", estimates noisy (sigma {r['estimateNoiseSigma']:g})" if r["estimateNoiseSigma"] else ""
    )
    traces = f"{r['seeds']} trace{'s' if r['seeds'] != 1 else ''}"
    name = f"placement quality: {r['jobsPerTrace']:,} jobs x {traces}{noise}"
    by = {(row["load"], row["policy"]): row for row in r["simulation"]}
    for target, ok in r["targets"].items():
        measured = baseline = ""
        if target.startswith("snapshot"):
            worst = min(s["tessera-performance"] for s in r["snapshot"] if s["demand"] <= 1)
            measured = f"{worst:.3f} of the LP optimum (worst)"
        elif target.startswith("performance"):
            load_ = float(target.rpartition("@")[2])
            perf, blind = by[(load_, "tessera-performance")], by[(load_, "blind")]
            measured = f"{blind['avg_jct_h'] / perf['avg_jct_h']:.2f}x faster"
            baseline = f"blind {blind['avg_jct_h']:.2f} h, performance {perf['avg_jct_h']:.2f} h"
        elif target.startswith("cost"):
            load_ = float(target.rpartition("@")[2])
            cost, fast = by[(load_, "tessera-cost")], by[(load_, "greedy-fastest")]
            saving = 1 - cost["cost_per_job"] / fast["cost_per_job"]
            slower = cost["avg_jct_h"] / fast["avg_jct_h"] - 1
            measured = f"{saving:.1%} cheaper, {slower:+.1%} time"
            baseline = f"greedy-fastest ${fast['cost_per_job']:.2f} a job"
        yield name, target, measured, baseline, met(ok)


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
    p = r["parameters"]
    rate = p.get("clientPodsPerSecond")
    name = f"fleet ({r['scale']}{f', offered {rate:g} pods/s' if rate else ''})"
    for t in r["targets"]:
        if rate and not t["target"].startswith(PACED):
            continue
        value = t["measured"]
        measured = "-" if value is None else number(value) + unit(t["threshold"])
        target = f"{t['target']} {t['threshold']}"
        yield name, target, measured, fleet_baseline(r, t["target"]), met(t["met"])


def fleet_baseline(r: dict[str, Any], target: str) -> str:
    """The same run's bare scheduler or floor operator beside a target, where it has one."""
    mix = target.rpartition(", ")[2]
    tessera, bare = r.get("tessera", {}).get(mix, {}), r.get("baseline", {}).get(mix, {})
    floor = r.get("floor", {}).get(mix, {})
    if target.startswith("bound pods/s") and tessera and bare:
        ratio = r.get("ratioToFloor", {}).get(mix)
        floor_ = f"; {ratio}x the floor" if ratio else ""
        return f"{tessera['podsBoundPerSecond']} vs {bare['podsBoundPerSecond']} pods/s{floor_}"
    if target.endswith("from a backlog of singles"):
        backlog = r.get("backlog", {})
        if backlog.get("ratioToFloor") is None:
            return ""
        return (
            f"{backlog['ratioToFloor']}x the floor's {backlog['floor']['podsCreatedPerSecond']}/s"
        )
    if target.startswith("pods created/s") and tessera and floor.get("podsCreatedPerSecond"):
        ours, theirs = tessera["operatorPodsCreatedPerSecond"], floor["podsCreatedPerSecond"]
        return f"{ours / theirs:.3f}x the floor's {theirs}/s"
    if target.startswith("creation to all bound"):
        pct = target.split()[4].rstrip(",")  # p50 or p99
        floor, bare = r.get("floor", {}).get("singles"), r.get("baseline", {}).get("singles")
        if floor and bare:
            return f"floor {floor['createdToBound'][pct]} s, bare {bare['createdToBound'][pct]} s"
    return ""


def rows(results: Path = RESULTS) -> list[Row]:
    """Every row, in a fixed order: the pure benchmarks, then the fleet's runs."""
    out: list[Row] = []
    for name, rows_of in (
        ("planning.json", planning),
        ("cycles.json", cycles),
        ("quality.json", quality),
        ("quality-noisy-estimates.json", quality),
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


def rewrite(text: str, table_: str) -> str:
    """A document's text with the table between the markers replaced."""
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise SystemExit(f"no {START} ... {END} markers to put the table between")
    return f"{head}{START}\n{table_}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rewrite the benchmark table from the results.")
    parser.add_argument("--check", action="store_true", help="fail if a table is stale")
    args = parser.parse_args(argv)
    table_ = table(rows())
    stale = []
    for doc in DOCS:
        text = doc.read_text()
        new = rewrite(text, table_)
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
