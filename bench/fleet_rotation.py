"""The fleet benchmark's measured runs, after the set-up and the warm-up: first Tessera alone
(the idle window, SIGKILL at idle and mid-burst: the figures no baseline shares), then the
repeats, each running the bursts and backlogs of Tessera, the floor operator and the bare
scheduler in an order rotated one place a repeat. Imports the phases; not the runner."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import fleet_backlog
import fleet_baseline
import fleet_bursts
import fleet_floor
import fleet_idle
import fleet_kill
import fleet_restart
import fleet_setup
from fleet_cleanup import cleanup
from fleet_context import Bench, pods_made
from fleet_stats import sides_of

MIXES = ("singles", "gangs")
Mixes = dict[str, list[dict[str, Any]]]
Pods = dict[str, list[dict[str, Any]]]


def tessera_alone(bench: Bench, mixes: Mixes) -> None:
    """Tessera's singles, the idle window with all of them Running (longer than the
    operator's longest periodic pass) and a SIGKILL then, with a Workload created as it
    restarts; then its gangs (the burst with the most pods), SIGKILLed half-way through its
    pods."""
    r = bench.results
    bench.step = "tessera singles, then idle"
    workloads = copy.deepcopy(mixes["singles"])
    t, phase, ready = fleet_bursts.tessera(bench, "singles", workloads)
    r["tesseraAlone"] = {"singles": t}
    r["idle"] = fleet_idle.window(bench, ready, len(workloads))
    bench.step = "SIGKILL at idle"
    restart = fleet_restart.restart(bench, phase)
    restart["integrity"] = bench.integrity(phase)
    restart["duplicatesAndOrphans"] = restart["integrity"]["duplicatesAndOrphans"]
    r["killAtIdle"] = restart
    bench.step = "clean-up after tessera singles"
    cleanup(bench, phase)
    bench.step = "SIGKILL mid-burst (gangs)"
    r["killMidBurst"], phase = fleet_kill.mid_burst(
        bench, "kill-gangs", copy.deepcopy(mixes["gangs"])
    )
    bench.step = "clean-up after the SIGKILL mid-burst"
    cleanup(bench, phase)


def repeats(bench: Bench, mixes: Mixes, first: int = 0) -> None:
    """Repeats `first` (from 0) to bench.args.repeats of every side's bursts and backlog
    (before `first`: measured by the run this one resumes, fleet_resume.py), in rotated order
    (the bare scheduler's in the first bench.args.bare_repeats only: fleet_stats.sides_of),
    each phase cleaned up before the next; results["repeats"] gets one record a repeat
    as soon as each side is measured. The latency samples are kept for the first repeat
    only (the chart's). The floor and the bare scheduler create the pods Tessera made in
    this run's first repeat, which it runs first (rotation(0); fleet_resume.check): bodies
    from an undisturbed burst (after a SIGKILL mid-burst, some of a gang's pods can differ
    from the rest)."""
    pods: Pods = {}
    runs: dict[str, Callable[[Bench, str, Mixes, Pods, dict[str, Any]], None]] = {
        "tessera": tessera,
        "floor": floor,
        "baseline": bare,
    }
    records: list[dict[str, Any]] = bench.results.setdefault("repeats", [])
    n = bench.args.repeats
    for i in range(first, n):
        order = sides_of(i, bench.args.bare_repeats)
        load = [round(x, 2) for x in os.getloadavg()]
        record: dict[str, Any] = {"order": order, "loadAverageAtStart": load}
        records.append(record)
        bench.say(f"repeat {i + 1} of {n}: " + ", then ".join(order))
        for side in order:
            out: dict[str, Any] = {}  # filled phase by phase: a failed run keeps what it measured
            record[side] = out
            runs[side](bench, f"r{i + 1}", mixes, pods, out)
            if i:
                for figures in record[side].values():
                    figures.pop("samples", None)
    running(bench, False)


def running(bench: Bench, want: bool) -> None:
    """Starts the operator (and waits until it is warm) or stops it, where it is not so
    already: the floor and the bare scheduler run without it."""
    proc = bench.operator.proc
    alive = proc is not None and proc.poll() is None
    if want and not alive:
        bench.say("starting the operator")
        bench.operator.start()
        fleet_setup.wait_warm(bench)
    elif alive and not want:
        bench.say("stopping the operator")
        bench.operator.stop()


def tessera(bench: Bench, tag: str, mixes: Mixes, pods: Pods, out: dict[str, Any]) -> None:
    running(bench, True)
    for mix in MIXES:
        bench.step = f"tessera {mix} ({tag})"
        t, phase, _ = fleet_bursts.tessera(bench, f"{mix}-{tag}", copy.deepcopy(mixes[mix]))
        t["integrity"] = bench.integrity(phase)
        if mix not in pods:  # the first repeat's: what the floor and the bare scheduler make
            pods[mix] = pods_made(phase)
        out[mix] = t
        cleanup(bench, phase)
    bench.step = f"tessera backlog ({tag})"
    t, phase = fleet_backlog.tessera(bench, copy.deepcopy(mixes["singles"]), f"backlog-{tag}")
    out["backlog"] = t
    cleanup(bench, phase)


def floor(bench: Bench, tag: str, mixes: Mixes, pods: Pods, out: dict[str, Any]) -> None:
    running(bench, False)
    for mix in (*MIXES, "backlog"):
        bench.step = f"floor {mix} ({tag})"
        made = pods["singles" if mix == "backlog" else mix]
        workloads = mixes["singles" if mix == "backlog" else mix]
        out[mix], phase = fleet_floor.floor(
            bench, f"{mix}-{tag}", workloads, made, backlog=mix == "backlog"
        )
        cleanup(bench, phase)


def bare(bench: Bench, tag: str, mixes: Mixes, pods: Pods, out: dict[str, Any]) -> None:
    running(bench, False)
    for mix in MIXES:
        bench.step = f"bare scheduler {mix} ({tag})"
        out[mix], phase = fleet_baseline.baseline(bench, f"{mix}-{tag}", pods[mix])
        cleanup(bench, phase)
