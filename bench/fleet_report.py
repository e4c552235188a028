"""The fleet benchmark's output: the machine and versions, each target with what was measured,
the terminal table and the chart of latency distributions (matplotlib, Agg backend)."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import fleet_targets
from fleet_targets import part

REPO = Path(__file__).resolve().parent.parent
HACK = REPO / "hack"


def machine() -> dict[str, Any]:
    """Where the run happened: what bounds every figure on a shared machine."""
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.partition(":")[2].strip()
            break
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpuModel": model or platform.machine(),
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


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):  # to the thousandth: 2.003 pods + 1 shows, not "2"
        return f"{round(value, 3):,g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Target, threshold, measured (median [min, max] over the repeats) and the verdict,
    one line each."""
    width = max(len(r["target"]) for r in rows)
    lines = [f"  {'target':<{width}}  {'threshold':<20} {'median [min, max]':>26}  verdict"]
    for r in rows:
        f = r.get("spread")
        spread = "-" if f is None else _show(f["median"])
        if f is not None and f["n"] > 1:
            spread += f" [{_show(f['min'])}, {_show(f['max'])}]"
        verdict = r.get("verdict") or "-"
        lines.append(f"  {r['target']:<{width}}  {r['threshold']:<20} {spread:>26}  {verdict}")
    return "\n".join(lines)


SIDES = (("tessera", "Tessera"), ("floor", "floor"), ("baseline", "bare (unpinned)"))
PHASES = ("singles", "gangs", "backlog")


def _median(r: Mapping[str, Any], side: str, phase: str, figure: Any) -> float | None:
    f = fleet_targets.each(r, side, phase, figure)
    return None if f is None else f["median"]


def comparison(r: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """Tessera beside the floor (same pods, same pins, no decisions) and the bare scheduler
    (the same pods unpinned: context), per phase, each figure the median over the repeats:
    pods created/s, bound pods/s, creation to all bound (p50 / p99), and the CPU each pod
    cost the machine (the operator's in brackets). "-" where the run did not measure it."""
    t = fleet_targets
    rows = []
    for phase in PHASES:
        created, bound, to_bound, cpu = [], [], [], []
        for side, _ in SIDES:
            created.append(_show(_median(r, side, phase, t.created)))
            bound.append(_show(_median(r, side, phase, t.bound)))
            p50, p99 = (_median(r, side, phase, t.latency(q)) for q in ("p50", "p99"))
            to_bound.append("-" if p50 is None else f"{_show(p50)} / {_show(p99)} s")
            total = _median(r, side, phase, t.cpu_ms_per_pod)
            own = _median(r, side, phase, t.operator_cpu) if side in t.OPERATOR else None
            cpu.append(
                "-" if total is None else f"{total:.2f}" + ("" if own is None else f" ({own:.2f})")
            )
        rows.append((f"{phase}: pods created/s by the operator", created))
        if phase != "backlog":  # a backlog is timed from its first pod created to its last
            rows.append((f"{phase}: bound pods/s", bound))
            rows.append((f"{phase}: creation to all bound p50 / p99", to_bound))
        rows.append((f"{phase}: CPU ms per pod, all (operator)", cpu))
    return rows


def orders(r: Mapping[str, Any]) -> str:
    """The order each repeat ran the sides in."""
    reps = r.get("repeats") or []
    return "\n".join(
        f"  repeat {i + 1}: " + ", ".join(rep.get("order", [])) for i, rep in enumerate(reps)
    )


def comparison_table(rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    width = max(len(name) for name, _ in rows)
    head = "".join(f"{label:>18}" for _, label in SIDES)
    lines = [f"  {'same run, medians':<{width}}{head}"]
    lines += [f"  {name:<{width}}" + "".join(f"{v:>18}" for v in values) for name, values in rows]
    return "\n".join(lines)


def curves(result: Mapping[str, Any]) -> dict[str, dict[str, list[float]]]:
    """The latency distributions to chart, from the phases that completed: panel -> label ->
    samples; a panel with no data is left out."""
    first = (result.get("repeats") or [{}])[0]
    panels = {
        "creation to all pods bound (first repeat)": {
            "Tessera singles": ("tessera", "singles", "createdToBound"),
            "Tessera gangs": ("tessera", "gangs", "createdToBound"),
            "bare scheduler singles (unpinned)": ("baseline", "singles", "createdToBound"),
            "bare scheduler gangs (unpinned)": ("baseline", "gangs", "createdToBound"),
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
            if samples := part(first, side, mix, "samples", key):
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
