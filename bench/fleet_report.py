"""The fleet benchmark's output: the machine and versions, each target with what was measured,
the terminal table and the chart of latency distributions (matplotlib, Agg backend)."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import fleet_measure as m

REPO = Path(__file__).resolve().parent.parent
HACK = REPO / "hack"


def machine() -> dict[str, Any]:
    """Where the run happened: what bounds every figure on a shared machine."""
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "memoryGiB": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "loadAverage": [round(x, 2) for x in os.getloadavg()],  # 1, 5, 15 min, at the end
    }


def versions(server: str | None) -> dict[str, str]:
    """Pinned control-plane versions (hack/versions.env), the server's own, and the
    Python packages that matter."""
    out = {}
    for line in (HACK / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    if server:
        out["apiserver"] = server
    for package in ("tessera-operator", "kopf", "kubernetes"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "?"
    return out


def source() -> dict[str, Any]:
    """The commit, the operator files that differ from it, and a digest of the operator's
    source: compared at the end, it tells whether the code under test changed mid-run (the
    tree is shared, and `tessera run` imports it when it starts)."""

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return run.stdout

    digest = hashlib.sha256()
    for path in sorted((REPO / "operator").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".yaml"):
            digest.update(path.relative_to(REPO).as_posix().encode() + path.read_bytes())
    return {
        "commit": git("rev-parse", "HEAD").strip(),
        "uncommittedOperatorFiles": [
            line[3:] for line in git("status", "--porcelain", "--", "operator").splitlines()
        ],
        "operatorDigest": digest.hexdigest()[:16],
    }


def _target(
    name: str, measured: Any, op: str, limit: float, label: str = "", note: str = ""
) -> dict[str, Any]:
    """One target row: met is None where the run could not measure the figure."""
    met = None
    if measured is not None:
        met = {"<=": measured <= limit, ">=": measured >= limit, "==": measured == limit}[op]
    row = {"target": name, "threshold": label or f"{op} {limit:g}", "measured": measured}
    row["met"] = met
    if note:
        row["note"] = note
    return row


def part(r: Any, *path: str) -> Any:
    """The figure at `path` in the results, or None where the run did not get that far."""
    for key in path:
        if not isinstance(r, Mapping) or key not in r:
            return None
        r = r[key]
    return r


def targets(r: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the figure measured in this run and whether it is met
    (None where a failed run did not measure it). The latency limits depend on the scale;
    the peak RSS limit is set for the large one."""
    singles, gangs = part(r, "tessera", "singles"), part(r, "tessera", "gangs")
    large = r["scale"] == "large"
    at = f"{r['parameters']['workloads']:,} on {r['parameters']['nodes']:,} nodes"
    windows = [part(singles, "apiWrites"), part(singles, "idle")]
    lists = [part(w, "operatorLists") for w in windows]
    others: Counter[str] = Counter()
    for w in windows:
        for client, by_resource in (part(w, "listsByClient") or {}).items():
            if client != m.OPERATOR_CLIENT:
                others[client] += sum(by_resource.values())
    ratio = part(r, "ratio") or {}
    rows = [
        _target(
            "bound pods/s vs bare scheduler, singles", ratio.get("singles"), ">=", 0.8, ">= 0.8x"
        ),
        _target("bound pods/s vs bare scheduler, gangs", ratio.get("gangs"), ">=", 0.8, ">= 0.8x"),
    ]
    # Singles can be created no faster than their Workloads arrive; a gang burst's Workloads
    # arrive far faster than their pods can be created, so its rate is the operator's own.
    for mix, phase in (("singles", singles), ("gangs", gangs)):
        arrival = part(phase, "clientCreatesPerSecond")
        rows.append(
            _target(
                f"pods created/s by one operator replica, {mix}",
                part(phase, "operatorPodsCreatedPerSecond"),
                ">=",
                200,
                ">= 200/s",
                f"Workloads created at {arrival}/s" if arrival is not None else "",
            )
        )
    # From a backlog (Workloads created while it was stopped) nothing holds the operator
    # back but the machine: the floor operator's pace on the same backlog is that limit.
    backlog, floor = (
        part(r, "backlog", "tessera"),
        part(r, "backlog", "floor", "podsCreatedPerSecond"),
    )
    note = f"{backlog['pods']:,} pods pending at its start" if backlog else ""
    rows.append(
        _target(
            "pods created/s by one operator replica, from a backlog of singles",
            part(backlog, "podsCreatedPerSecond"),
            ">=",
            200,
            ">= 200/s",
            note + (f"; the floor operator's {floor}/s" if floor is not None else ""),
        )
    )
    if not large:
        p50 = part(singles, "createdToBound", "p50")
        rows.append(_target(f"creation to all bound p50, {at}", p50, "<=", 1, "<= 1 s"))
    limit = 5 if large else 3
    p99 = part(singles, "createdToBound", "p99")
    rows.append(_target(f"creation to all bound p99, {at}", p99, "<=", limit, f"<= {limit} s"))
    for mix, phase in (("singles", singles), ("gangs", gangs)):
        per, allowed, label = None, 0.0, "<= pods + 2"
        if phase is not None:
            n = phase["workloads"]
            per = round(phase["apiWrites"]["operator"]["total"] / n, 4)
            allowed = (phase["pods"] + 2 * n) / n
            label += f" = {allowed:.2f}"
        rows.append(
            _target(f"operator writes per Workload to Running, {mix}", per, "<=", allowed, label)
        )
    rows += [
        _target(
            "operator LISTs after warm-up (burst + idle)",
            None if None in lists else sum(lists), "==", 0,
            note="from the API server's audit log; other clients: "
            + (", ".join(f"{c} {n}" for c, n in others.most_common()) or "none"),
        ),
        _target(
            f"operator writes while idle ({r['parameters']['idleSeconds']:g} s, {at})",
            part(singles, "idle", "operatorWrites"), "==", 0,
        ),
        _target("operator RSS idle", part(r, "operator", "idle", "rssMB"), "<=", 80, "<= 80 MB"),
        _target(
            f"operator peak RSS, {at}", part(r, "operator", "peakRssMB"), "<=", 300, "<= 300 MB",
            "" if large else "the target is set for 10,000 on 5,000 nodes",
        ),
        _target(
            f"restart to next placement, {at}", part(r, "restart", "seconds"), "<=", 10, "<= 10 s"
        ),
        _target(
            "duplicate or orphan pods after restart",
            part(r, "restart", "duplicatesAndOrphans"), "==", 0,
        ),
    ]  # fmt: skip
    return rows


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Target, threshold, measured and met, one line each."""
    width = max(len(r["target"]) for r in rows)
    lines = [f"  {'target':<{width}}  {'threshold':<24} {'measured':>10}  met"]
    for r in rows:
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        lines.append(
            f"  {r['target']:<{width}}  {r['threshold']:<24} {_show(r['measured']):>10}  {met}"
        )
    return "\n".join(lines)


SIDES = (("tessera", "Tessera"), ("floor", "floor"), ("baseline", "bare scheduler"))
CREATED = {"tessera": "operatorPodsCreatedPerSecond", "floor": "podsCreatedPerSecond"}


# Each side's operator process, by the name its CPU is sampled under (`byProcess`).
OPERATOR = {"tessera": "operator", "floor": "floor operator"}


def _p50_p99(summary: Any) -> str:
    p50, p99 = part(summary, "p50"), part(summary, "p99")
    return "-" if p50 is None else f"{_show(p50)} / {_show(p99)} s"


def _cpu_per_pod(phase: Any, side: str) -> str:
    """The machine's CPU milliseconds per pod over the burst, every process's (the operator's
    in brackets): who the CPUs worked for. It grows as the offered rate falls (the components
    batch less), so it compares the sides of one run, not runs at different rates."""
    cpu, pods = part(phase, "cpuSeconds", "byProcess"), part(phase, "pods")
    if not cpu or not pods:
        return "-"
    total = f"{1000 * sum(cpu.values()) / pods:.1f}"
    own = cpu.get(OPERATOR.get(side, ""))
    return total if own is None else f"{total} ({1000 * own / pods:.1f})"


def comparison(r: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """Tessera beside the floor (an operator that costs next to nothing) and the bare
    scheduler, per mix: bound pods/s, pods created/s by the operator, creation to all pods
    created and to all bound (p50 / p99), and the CPU each pod cost the machine. "-" where
    the run did not measure it."""
    rows = []
    for mix in ("singles", "gangs"):
        bound, created, to_created, to_bound, cpu = [], [], [], [], []
        for side, _ in SIDES:
            phase = part(r, side, mix)
            bound.append(_show(part(phase, "podsBoundPerSecond")))
            created.append(_show(part(phase, CREATED[side])) if side in CREATED else "-")
            to_created.append(_p50_p99(part(phase, "createdToPodsCreated")))
            to_bound.append(_p50_p99(part(phase, "createdToBound")))
            cpu.append(_cpu_per_pod(phase, side))
        rows += [
            (f"{mix}: bound pods/s", bound),
            (f"{mix}: pods created/s by the operator", created),
            (f"{mix}: creation to all pods created p50 / p99", to_created),
            (f"{mix}: creation to all bound p50 / p99", to_bound),
            (f"{mix}: CPU ms per pod, all (operator)", cpu),
        ]
    return rows


def comparison_table(rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    width = max(len(name) for name, _ in rows)
    head = "".join(f"{label:>18}" for _, label in SIDES)
    lines = [f"  {'same run':<{width}}{head}"]
    lines += [f"  {name:<{width}}" + "".join(f"{v:>18}" for v in values) for name, values in rows]
    return "\n".join(lines)


def curves(result: Mapping[str, Any]) -> dict[str, dict[str, list[float]]]:
    """The latency distributions to chart, from the phases that completed: panel -> label ->
    samples; a panel with no data is left out."""
    panels = {
        "creation to all pods bound": {
            "Tessera singles": ("tessera", "singles", "createdToBound"),
            "Tessera gangs": ("tessera", "gangs", "createdToBound"),
            "bare scheduler singles": ("baseline", "singles", "createdToBound"),
            "bare scheduler gangs": ("baseline", "gangs", "createdToBound"),
            "floor singles": ("floor", "singles", "createdToBound"),
            "floor gangs": ("floor", "gangs", "createdToBound"),
        },
        "Tessera: creation to all pods created, Running, ready": {
            "pods created, singles": ("tessera", "singles", "createdToPodsCreated"),
            "pods created, gangs": ("tessera", "gangs", "createdToPodsCreated"),
            "Running, singles": ("tessera", "singles", "createdToRunning"),
            "every replica ready, singles": ("tessera", "singles", "createdToReady"),
        },
    }
    out = {}
    for panel, series in panels.items():
        found = {}
        for label, (side, mix, key) in series.items():
            if samples := part(result, side, mix, "samples", key):
                found[label] = samples
        if found:
            out[panel] = found
    return out


def chart(path: Path, curves: Mapping[str, Mapping[str, Sequence[float]]], title: str) -> None:
    """One panel per mapping in `curves` (panel title -> label -> latencies in seconds), each
    the empirical CDF of its latencies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.5), squeeze=False)
    for ax, (panel, series) in zip(axes[0], curves.items(), strict=True):
        for label, values in series.items():
            data = sorted(values)
            if not data:
                continue
            ys = [(i + 1) / len(data) for i in range(len(data))]
            ax.step(data, ys, where="post", label=f"{label} (n={len(data)})")
        ax.set_title(panel)
        ax.set_xlabel("seconds")
        ax.set_ylabel("fraction of workloads")
        ax.set_ylim(0, 1.01)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def say(message: str, started: float, now: float) -> None:
    print(f"[{now - started:7.1f}s] {message}", flush=True)
    sys.stdout.flush()
