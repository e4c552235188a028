"""The fleet benchmark's targets: each a figure taken from every repeat (Tessera against the
floor operator, same cluster, same repeat), summed up as median, min and max, and a verdict
only where the whole spread is on one side of the target; the bare scheduler's figures beside
them as context (its pods are not pinned to a node), with no verdict. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import fleet_stats as stats

# Each side's operator process, by the name its CPU is sampled under (`byProcess`).
OPERATOR = {"tessera": "operator", "floor": "floor operator"}
# Pods created per second, by side and phase: from a burst, the operator's pace is that of
# its pods (its Workloads arrive at the client's pace); from a backlog, its own.
CREATED = {"tessera": "operatorPodsCreatedPerSecond", "floor": "podsCreatedPerSecond"}
PHASES = ("singles", "gangs", "backlog")
Repeat = Mapping[str, Any]


def part(r: Any, *path: str) -> Any:
    """The figure at `path`, or None where the run did not get that far."""
    for key in path:
        if not isinstance(r, Mapping) or key not in r:
            return None
        r = r[key]
    return r


def created(rep: Repeat, side: str, phase: str) -> float | None:
    key = "podsCreatedPerSecond" if phase == "backlog" else CREATED.get(side, "")
    return part(rep, side, phase, key)


def cpu_ms_per_pod(rep: Repeat, side: str, phase: str, process: str | None = None) -> float | None:
    """CPU milliseconds a pod over the phase: the whole machine's (every sampled process),
    or one process's (`process`; 0 where it used none that was sampled)."""
    cpu, pods = part(rep, side, phase, "cpuSeconds", "byProcess"), part(rep, side, phase, "pods")
    if not cpu or not pods:
        return None
    used = sum(cpu.values()) if process is None else cpu.get(process, 0.0)
    return 1000 * used / pods


def operator_cpu(rep: Repeat, side: str, phase: str) -> float | None:
    return cpu_ms_per_pod(rep, side, phase, OPERATOR[side])


def latency(pct: str) -> Callable[[Repeat, str, str], float | None]:
    return lambda rep, side, phase: part(rep, side, phase, "createdToBound", pct)


def bound(rep: Repeat, side: str, phase: str) -> float | None:
    return part(rep, side, phase, "podsBoundPerSecond")


def writes_per_workload(rep: Repeat, side: str, phase: str) -> float | None:
    """A Workload's own writes (its pods, its status, Events) per Workload. A pool's status
    patches are the pool's, a few a phase whatever the Workloads: pool_writes counts them."""
    t = part(rep, side, phase)
    by = part(t, "apiWrites", "operator", "byCategory") if t else None
    if not t or not by:
        return None
    return sum(n for what, n in by.items() if not what.startswith("pool ")) / t["workloads"]


def pool_writes(rep: Repeat, side: str, phase: str) -> float | None:
    """The pools' own writes (status patches) in a phase."""
    by = part(rep, side, phase, "apiWrites", "operator", "byCategory")
    return None if by is None else sum(n for what, n in by.items() if what.startswith("pool "))


Figure = Callable[[Repeat, str, str], float | None]


def each(r: Mapping[str, Any], side: str, phase: str, figure: Figure) -> dict[str, Any] | None:
    """One side's figure over the repeats."""
    return stats.spread(figure(rep, side, phase) for rep in r.get("repeats") or [])


def against(r: Mapping[str, Any], phase: str, figure: Figure, how: str) -> dict[str, Any] | None:
    """Tessera's figure against the floor's, repeat by repeat (`how`: ratio or difference),
    summed up over the repeats."""
    values: list[float | None] = []
    for rep in r.get("repeats") or []:
        ours, floor = figure(rep, "tessera", phase), figure(rep, "floor", phase)
        if ours is None or floor is None or (how == "ratio" and not floor):
            values.append(None)
        else:
            values.append(ours / floor if how == "ratio" else ours - floor)
    return stats.spread(values)


def short(x: float) -> str:
    """A figure to about three significant digits: 0.546, 6.67, 30.83, 1780.7."""
    return f"{round(x, 3 if abs(x) < 1 else 2 if abs(x) < 100 else 1):g}"


def show(figure: dict[str, Any] | None, unit: str = "") -> str:
    """median [min, max], or the one value where they are the same."""
    if figure is None:
        return "-"
    median = short(figure["median"]) + unit
    if figure["min"] == figure["max"]:
        return median
    return f"{median} [{short(figure['min'])}, {short(figure['max'])}]"


def row(
    name: str, figure: dict[str, Any] | None, op: str, limit: float, label: str, baseline: str = ""
) -> dict[str, Any]:
    """One target: the figure's spread, its median as `measured`, the verdict and, for the
    table's met column, met (True, False, or None where undecided or unmeasured)."""
    verdict = stats.verdict(figure, op, limit)
    out: dict[str, Any] = {
        "target": name,
        "threshold": label,
        "measured": None if figure is None else figure["median"],
        "spread": figure,
        "verdict": verdict,
        "met": stats.met(verdict),
    }
    if baseline:
        out["baseline"] = baseline
    return out


def one(value: float | None) -> dict[str, Any] | None:
    return stats.spread([value])


def targets(r: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The targets, each with its figure over the repeats and its verdict."""
    p = r["parameters"]
    at = f"{p['workloads']:,} on {p['nodes']:,} nodes"
    rows = []
    for phase in PHASES:
        what = "from a backlog of singles" if phase == "backlog" else f"burst of {phase}"
        ours, floor = each(r, "tessera", phase, created), each(r, "floor", phase, created)
        rows.append(
            row(
                f"pods created/s, Tessera / floor, {what}",
                against(r, phase, created, "ratio"),
                ">=", 0.95, ">= 0.95x",
                f"Tessera {show(ours, '/s')}, floor {show(floor, '/s')}",
            )
        )  # fmt: skip
    for mix in ("singles", "gangs"):
        p99 = latency("p99")
        ours, floor = each(r, "tessera", mix, p99), each(r, "floor", mix, p99)
        p50s = [show(each(r, side, mix, latency("p50")), " s") for side in ("tessera", "floor")]
        rows.append(
            row(
                f"creation to all bound p99, Tessera - floor, {mix}",
                against(r, mix, p99, "difference"),
                "<=", 0.5, "<= +0.5 s",
                f"p99 Tessera {show(ours, ' s')}, floor {show(floor, ' s')}; "
                f"p50 {p50s[0]} vs {p50s[1]}",
            )
        )  # fmt: skip
    for phase in PHASES:
        what = "backlog of singles" if phase == "backlog" else phase
        ours, floor = each(r, "tessera", phase, operator_cpu), each(r, "floor", phase, operator_cpu)
        machine = [each(r, side, phase, cpu_ms_per_pod) for side in ("tessera", "floor")]
        rows.append(
            row(
                f"operator CPU ms per pod, Tessera - floor operator, {what}",
                against(r, phase, operator_cpu, "difference"),
                "<=", 0.3, "<= +0.3 ms",
                f"operator {show(ours, ' ms')} vs {show(floor, ' ms')}; the machine "
                f"{show(machine[0], ' ms')} vs {show(machine[1], ' ms')} a pod",
            )
        )  # fmt: skip
    for mix in ("singles", "gangs"):
        t = next(
            (rep["tessera"][mix] for rep in r.get("repeats") or [] if part(rep, "tessera", mix)),
            None,
        )
        allowed, label = 0.0, "<= pods + 1"
        if t is not None:
            # at the figures' precision (fleet_stats.spread): exactly pods + 1 meets it
            allowed = round((t["pods"] + t["workloads"]) / t["workloads"], 4)
            label += f" = {allowed:.2f}"
        rows.append(
            row(
                f"operator writes per Workload to Running, {mix}",
                each(r, "tessera", mix, writes_per_workload),
                "<=", allowed, label,
                f"pods, status and Events; the pools' status patches apart: "
                f"{show(each(r, 'tessera', mix, pool_writes), '')} in the phase",
            )
        )  # fmt: skip
    rows += [
        row(
            "operator LISTs after warm-up (every burst and the idle window)",
            one(lists(r)), "==", 0, "== 0",
        ),
        row(
            f"operator writes while idle ({p['idleSeconds']:g} s, {at} Running)",
            one(part(r, "idle", "operatorWrites")), "==", 0, "== 0",
        ),
        row(
            "operator RSS idle", one(part(r, "operator", "idle", "rssMB")), "<=", 80, "<= 80 MB",
            f"{show(one(part(r, 'idle', 'operatorRssMB')), ' MB')} with {at} Running",
        ),
        row(
            f"operator peak RSS, a backlog of {p['workloads']:,} pending",
            each(r, "tessera", "backlog", lambda rep, s, ph: part(rep, s, ph, "operatorPeakRssMB")),
            "<=", 250, "<= 250 MB",
        ),
        row(
            "duplicates and orphans after SIGKILL at idle",
            one(part(r, "killAtIdle", "duplicatesAndOrphans")), "==", 0, "== 0",
        ),
        row(
            "duplicates, orphans, Workloads never placed and pods without a node pin after "
            "SIGKILL mid-burst",
            one(part(r, "killMidBurst", "duplicatesAndOrphans")), "==", 0, "== 0",
            f"killed with {part(r, 'killMidBurst', 'podsCreatedAtKill')} of "
            f"{part(r, 'killMidBurst', 'pods')} pods created",
        ),
        row(
            f"restart to next placement, {at}",
            one(part(r, "killAtIdle", "seconds")), "<=", 10, "<= 10 s",
        ),
    ]  # fmt: skip
    return rows


def lists(r: Mapping[str, Any]) -> int | None:
    """The operator's LISTs in the idle window and in every burst of every repeat (from the
    API server's audit log); None where one of them was not measured."""
    windows = [part(r, "idle", "operatorLists")]
    for rep in r.get("repeats") or []:
        windows += [
            part(rep, "tessera", mix, "apiWrites", "operatorLists") for mix in ("singles", "gangs")
        ]
    return None if None in windows or len(windows) < 3 else sum(windows)


CONTEXT: dict[str, tuple[Figure, str]] = {
    "bound pods/s": (bound, "/s"),
    "creation to all bound p50": (latency("p50"), " s"),
    "creation to all bound p99": (latency("p99"), " s"),
    "CPU ms per pod, the whole machine": (cpu_ms_per_pod, " ms"),
}


def context(r: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The bare scheduler beside Tessera and the floor, no verdict: the same pods created
    directly, not pinned to a node, so the scheduler's own filtering and scoring is in its
    figures and not in the others'."""
    out = []
    for mix in ("singles", "gangs"):
        for name, (figure, unit) in CONTEXT.items():
            sides = {side: each(r, side, mix, figure) for side in stats.SIDES}
            out.append({"figure": f"{name}, {mix}", "unit": unit, **sides})
    return out
